"""Multi-rank analysis benchmark: ``layerscope analyze DIR``'s breakdown vs HTA's on the same directories.

    python bench/bench_ranks.py [--ranks 4] [--repeat 3] [--write]

Directories: tests/data/traces/ranks (3 small ranks, ~4.8k events each) and ``--ranks`` copies of the real
gpu-training-control trace (~109k events, NCCL kernels, memcpys, ProfilerSteps), each with its own
``distributedInfo.rank`` (made in a temporary directory). Each side runs in its own subprocess, imports excluded:
layerscope = :func:`layerscope.analysis.ranks.analyze_ranks` (read every rank in worker processes, break each
down), with no Parquet cache (cold: both sides parse the JSON) and with it (warm); HTA = ``TraceAnalysis(
trace_dir=…)`` (its parse, multiprocessing over the ranks) + ``get_temporal_breakdown()`` +
``get_comm_comp_overlap()``. ``agree``: every rank's idle, compute, non-compute and kernel time (µs) and overlap
(%, 2 decimals) equal on both sides. HTA runs in ``--hta-python`` (default: this Python, when ``hta`` imports).
``--write`` replaces the "## Multi-rank traces" section of bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import datetime
import gzip
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from _util import cpu_model  # noqa: E402

SECTION = "## Multi-rank traces"
DATA = ROOT / "tests" / "data" / "traces"

_OURS_CHILD = r"""
import json, os, resource, sys, time
cache = sys.argv[2]
if cache != "-":
    os.environ["LAYERSCOPE_CACHE_DIR"] = cache
from layerscope.analysis.ranks import analyze_ranks
t0 = time.perf_counter()
workers = int(sys.argv[3]) if len(sys.argv) > 3 else None
table = analyze_ranks(sys.argv[1], use_cache=cache != "-", workers=workers)
seconds = time.perf_counter() - t0
rows = {r["rank"]: [round(r["idle_ms"] * 1e3, 3), round(r["compute_ms"] * 1e3, 3), round(r["non_compute_ms"] * 1e3, 3),
                    round(r["span_ms"] * 1e3, 3), None if r["overlap_pct"] is None else round(r["overlap_pct"], 2)]
        for r in table.to_pylist()}
peak_kib = max(resource.getrusage(w).ru_maxrss for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
print(json.dumps({"seconds": seconds, "rows": rows, "peak_rss_mib": peak_kib / 1024}))
"""

_HTA_CHILD = r"""
import json, logging, math, resource, sys, time, warnings
logging.disable(logging.CRITICAL)
warnings.simplefilter("ignore")
from hta.trace_analysis import TraceAnalysis
t0 = time.perf_counter()
analysis = TraceAnalysis(trace_dir=sys.argv[1])
temporal = analysis.get_temporal_breakdown(visualize=False).set_index("rank")
overlap = analysis.get_comm_comp_overlap(visualize=False).set_index("rank")
seconds = time.perf_counter() - t0
def pct(x):
    return None if math.isnan(x) else round(float(x), 2)
rows = {int(k): [float(r["idle_time(us)"]), float(r["compute_time(us)"]), float(r["non_compute_time(us)"]),
                 float(r["kernel_time(us)"]), pct(overlap.loc[k, "comp_comm_overlap_pctg"])]
        for k, r in temporal.iterrows()}
peak_kib = max(resource.getrusage(w).ru_maxrss for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
print(json.dumps({"seconds": seconds, "rows": rows, "peak_rss_mib": peak_kib / 1024}))
"""


def _run(cmd: list[str]) -> dict[str, Any]:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0:
        return {"error": proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else f"rc {proc.returncode}"}
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def _best(runs: list[dict[str, Any]]) -> dict[str, Any]:
    ok = [r for r in runs if "error" not in r]
    return min(ok, key=lambda r: float(r["seconds"])) if ok else runs[0]


def make_ranks(src: Path, ranks: int, out: Path) -> int:
    """``ranks`` copies of ``src``, each with its own ``distributedInfo.rank`` (written as Kineto does, ``"rank":
    N``, the form HTA's rank finder reads); returns the events per file."""
    doc = json.loads(gzip.decompress(src.read_bytes()))
    out.mkdir(parents=True, exist_ok=True)
    for rank in range(ranks):
        doc["distributedInfo"] = {**doc.get("distributedInfo", {}), "rank": rank, "world_size": ranks}
        (out / f"rank{rank}.json.gz").write_bytes(gzip.compress(json.dumps(doc).encode(), compresslevel=1))
    return len(doc["traceEvents"])


def _hta_python(given: str) -> str:
    if given:
        return given
    probe = subprocess.run([sys.executable, "-c", "import hta"], capture_output=True)
    return sys.executable if probe.returncode == 0 else ""


def _hta_version(python: str) -> str:
    out = subprocess.run([python, "-c", "import importlib.metadata as m; print(m.version('HolisticTraceAnalysis'))"],
                         capture_output=True, text=True)
    return out.stdout.strip() or "?"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=4, help="Copies of gpu-training-control (one per rank).")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--hta-python", default=os.environ.get("HTA_PYTHON", ""),
                        help="Python with HolisticTraceAnalysis (default: this one, if it has hta).")
    parser.add_argument("--write", action="store_true", help="Replace the section in bench/RESULTS.md.")
    parser.add_argument("--make-ranks", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.make_ranks:
        print(make_ranks(DATA / "gpu-training-control.json.gz", args.ranks, Path(args.make_ranks)))
        return
    hta_python = _hta_python(args.hta_python)
    load_before = os.getloadavg()[0]
    rows = []
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        big = tmp / "control"
        # in a child: the JSON it loads would stay in this process's peak RSS, which its children inherit
        made = subprocess.run([sys.executable, __file__, "--make-ranks", str(big), "--ranks", str(args.ranks)],
                              capture_output=True, text=True, check=True)
        events = int(made.stdout.strip())
        sets = [("tests/data/traces/ranks (3 ranks)", DATA / "ranks", 4811),
                (f"gpu-training-control x {args.ranks} ranks", big, events)]
        for label, directory, n_events in sets:
            cache = tmp / f"cache-{directory.name}"
            cold = [_run([sys.executable, "-c", _OURS_CHILD, str(directory), "-"]) for _ in range(args.repeat)]
            pooled = [_run([sys.executable, "-c", _OURS_CHILD, str(directory), "-", str(os.cpu_count() or 1)])
                      for _ in range(args.repeat)]
            serial = [_run([sys.executable, "-c", _OURS_CHILD, str(directory), "-", "1"]) for _ in range(args.repeat)]
            _run([sys.executable, "-c", _OURS_CHILD, str(directory), str(cache)])  # fills the cache
            warm = [_run([sys.executable, "-c", _OURS_CHILD, str(directory), str(cache)]) for _ in range(args.repeat)]
            hta = [_run([hta_python, "-c", _HTA_CHILD, str(directory)]) for _ in range(args.repeat)] if hta_python \
                else []
            row: dict[str, Any] = {"label": label, "events": n_events, "cold": _best(cold), "warm": _best(warm),
                                   "pooled": _best(pooled), "serial": _best(serial)}
            if hta:
                row["hta"] = _best(hta)
                row["agree"] = row["hta"].get("rows") == row["cold"].get("rows") == row["warm"].get("rows")
            rows.append(row)
            print(json.dumps({k: ({kk: vv for kk, vv in v.items() if kk != "rows"} if isinstance(v, dict) else v)
                              for k, v in row.items()}))
    load = f"{load_before:.1f} before, {os.getloadavg()[0]:.1f} after"
    text = render(rows, args, _hta_version(hta_python) if hta_python else "", load)
    print(text)
    if args.write:
        path = ROOT / "bench" / "RESULTS.md"
        body = path.read_text()
        start = body.find(SECTION)
        if start < 0:
            body = body.rstrip("\n") + "\n\n" + text
        else:
            end = body.find("\n## ", start + len(SECTION))
            body = body[:start] + text + (body[end + 1:] if end >= 0 else "")
        path.write_text(body)


def render(rows: list[dict[str, Any]], args: argparse.Namespace, hta_version: str, load: str) -> str:
    lines = [SECTION, "",
             f"`python bench/bench_ranks.py --ranks {args.ranks} --repeat {args.repeat} --write` · "
             f"{datetime.date.today().isoformat()} · {cpu_model()}, {os.cpu_count()} CPUs (shared with other "
             f"jobs: 1-min load average {load}) · Python {sys.version.split()[0]} · "
             f"HTA {hta_version or 'not installed'}", "",
             "Per-rank breakdown of a directory (idle, compute, non-compute, communication, overlap, stragglers), "
             "best of the runs, imports excluded. layerscope = `analyze_ranks` (ranks read in forked workers, one "
             f"per two CPUs from 4 MiB of files: {max(1, (os.cpu_count() or 1) // 2)} here, 1 = in process); "
             "cold = no Parquet cache (the JSON parsed, as HTA does every time), warm = from the cache. "
             "HTA = `TraceAnalysis(trace_dir=…)` + "
             "`get_temporal_breakdown()` + `get_comm_comp_overlap()`. agree = every rank's idle, compute, "
             "non-compute and kernel time (µs) and overlap (%) equal. in process / pool: cold, the ranks read "
             f"one after another in one process / in a pool of {os.cpu_count()} forked workers, whatever the size "
             "(what sets the 4 MiB default)."
             + (" Here cold and in process run the same code (1 worker): their difference is the run-to-run noise "
                "of this shared machine." if (os.cpu_count() or 1) // 2 <= 1 else ""), "",
             "| ranks | events per rank | layerscope cold s | layerscope warm s | HTA s | HTA / cold | HTA / warm "
             "| peak MiB, one process (cold / HTA) | agree | in process / pool s |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---|---:|"]
    for r in rows:
        cold, warm, hta = r["cold"], r["warm"], r.get("hta")
        if hta is None or "error" in hta or "error" in cold or "error" in warm:
            err = (hta or {}).get("error") or cold.get("error") or warm.get("error") or "HTA not run"
            lines.append(f"| {r['label']} | {r['events']:,} | {cold.get('seconds', 0):.2f} | "
                         f"{warm.get('seconds', 0):.2f} | - | - | - | - | {err} | - |")
            continue
        lines.append(f"| {r['label']} | {r['events']:,} | {cold['seconds']:.2f} | {warm['seconds']:.2f} | "
                     f"{hta['seconds']:.2f} | {hta['seconds'] / cold['seconds']:.1f}× | "
                     f"{hta['seconds'] / warm['seconds']:.1f}× | {cold['peak_rss_mib']:.0f} / "
                     f"{hta['peak_rss_mib']:.0f} | {'yes' if r['agree'] else 'NO'} | "
                     f"{r['serial'].get('seconds', 0):.2f} / {r['pooled'].get('seconds', 0):.2f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
