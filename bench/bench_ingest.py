"""Trace ingest and report-query benchmark: layerscope vs HTA on the same files, in one run.

    python bench/bench_ingest.py [--hta-python PY] [--big-events 3000000] [--hta-big] [--repeat 3] [--write]

Every measurement runs in its own subprocess, so peak RSS (``ru_maxrss``) is that of one load
alone, imports included. Each file is loaded ``--repeat`` times by each tool, the two tools
alternating, and the best time of each is kept (the machine may be shared). Files:

* the real Kineto traces of tests/data/traces (control: 109k events; ns-resolution: 69k),
* ``control x9`` (≈1M events) and ``control xN`` (≈``--big-events``): gpu-training-control
  repeated with timestamps shifted by the trace's span per copy and correlation/flow ids offset,
  written as gzip JSON to a temporary directory (made, not recorded, traces).

layerscope ingest = ``TraceDB(path)`` with a cold (empty) Parquet cache: parse, trace_processor
tables, registered in DuckDB and queryable (the cache is written in the background and not
timed; ``read_trace`` alone is reported too; "reader" says whether the C scanner (the
in-memory path) or the DuckDB path read the file); "cached" = a second ``TraceDB`` open reading the
Parquet cache; report times are each report of
``layerscope.analysis.reports.REPORTS`` after ingest. HTA ingest = ``TraceAnalysis(trace_dir=…)``
(HolisticTraceAnalysis, run by ``--hta-python``, e.g. a venv with ``pip install
HolisticTraceAnalysis``). ``--write`` appends/replaces the "## ingest and analysis" section of
bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import datetime
import gzip
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from _util import cpu_model

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "traces"
RESULTS = ROOT / "bench" / "RESULTS.md"
SECTION = "## ingest and analysis"

_LAYERSCOPE_CHILD = r"""
import json, os, resource, sys, time
path, mode = sys.argv[1], sys.argv[2]
import layerscope.trace.chrome_reader, layerscope.trace.chrome_fast, layerscope.analysis.reports  # imports
from layerscope.trace.readers import read_trace
t0 = time.perf_counter()
out = {}
if mode == "ingest":
    from layerscope.analysis.engine import TraceDB
    db = TraceDB(path)  # cold cache: LAYERSCOPE_CACHE_DIR is a fresh directory
    out["seconds"] = time.perf_counter() - t0
    out["slices"] = db.scalar("SELECT COUNT(*) FROM slice")
    out["events_flows"] = db.scalar("SELECT COUNT(*) FROM flow")
    db.close()
    out["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    # which reader ran (asked again, after the timing and the peak): the C scanner (the in-memory
    # fast path) or DuckDB
    cf = layerscope.trace.chrome_fast
    used = []
    builder = cf._Builder
    cf._Builder = lambda columns, *a: used.append(type(columns).__name__) or builder(columns, *a)
    fast = cf.read_chrome_json_fast(__import__("pathlib").Path(path))
    out["path"] = ("duckdb" if fast is None else
                   {"_ScannedColumns": "C scanner"}.get(used[-1], used[-1]))
elif mode == "parse":
    tables = read_trace(path)
    out["seconds"] = time.perf_counter() - t0
    out["slices"] = tables.slice.num_rows
elif mode == "reports":
    from layerscope.analysis.engine import TraceDB
    from layerscope.analysis.reports import REPORTS
    db = TraceDB(path)
    out["seconds"] = time.perf_counter() - t0
    out["slices"] = db.scalar("SELECT COUNT(*) FROM slice")
    times = {}
    for name, report in REPORTS.items():
        t = time.perf_counter()
        report(db)
        times[name] = time.perf_counter() - t
    t = time.perf_counter()
    db.query("SELECT name, COUNT(*) AS launches, SUM(dur)/1e6 AS total_ms FROM slices "
             "GROUP BY name ORDER BY total_ms DESC LIMIT 50")
    times["trace_processor recipe (top 50 by total)"] = time.perf_counter() - t
    out["reports"] = times
out.setdefault("peak_rss_mib", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
print(json.dumps(out))
"""

_HTA_CHILD = r"""
import json, resource, sys, time, logging
logging.disable(logging.CRITICAL)
trace_dir = sys.argv[1]
t0 = time.perf_counter()
from hta.trace_analysis import TraceAnalysis
t_import = time.perf_counter()
analyzer = TraceAnalysis(trace_dir=trace_dir)
t1 = time.perf_counter()
df = analyzer.t.get_trace(next(iter(analyzer.t.traces)))
print(json.dumps({"seconds": t1 - t_import, "import_seconds": t_import - t0, "rows": int(len(df)),
                  "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def _run(cmd: list[str], env: dict[str, str] | None = None, timeout: float = 1800) -> dict[str, Any]:
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    if proc.returncode != 0:
        return {"error": proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else f"rc {proc.returncode}"}
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def _best(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The fastest successful run (an error only when every run failed)."""
    ok = [r for r in runs if "error" not in r]
    return min(ok, key=lambda r: float(r["seconds"])) if ok else runs[0]


def repeat_trace(src: Path, copies: int, out: Path) -> int:
    """Write ``copies`` back-to-back copies of ``src``'s events (ts shifted, ids offset); returns events."""
    doc = json.loads(gzip.decompress(src.read_bytes()))
    events = doc.pop("traceEvents")
    ts = [e["ts"] for e in events if isinstance(e.get("ts"), (int, float))]
    span = (max(ts) - min(ts)) + 1000
    id_offset = 10 ** (len(str(max((e.get("id", 0) for e in events if isinstance(e.get("id"), int)),
                                   default=0))) + 1)
    count = 0
    with gzip.open(out, "wt", compresslevel=1) as handle:
        handle.write('{"schemaVersion": 1, "distributedInfo": ' + json.dumps(doc.get("distributedInfo", {}))
                     + ', "traceEvents": [\n')
        first = True
        for k in range(copies):
            for e in events:
                if e.get("ph") == "M" and k:
                    continue
                e2 = dict(e)
                if isinstance(e2.get("ts"), (int, float)):
                    e2["ts"] = e2["ts"] + k * span
                if isinstance(e2.get("id"), int):
                    e2["id"] = e2["id"] + k * id_offset
                handle.write(("" if first else ",\n") + json.dumps(e2))
                first = False
                count += 1
        handle.write("\n]}\n")
    return count


def _hta_version() -> str:
    py = os.environ.get("HTA_PYTHON") or "/tmp/hta-venv/bin/python"
    try:
        out = subprocess.run([py, "-c", "import importlib.metadata as m; print(m.version('HolisticTraceAnalysis'))"],
                             capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return "(version unknown)"
    return out.stdout.strip() or "(version unknown)"


def _machine() -> str:
    return f"{os.cpu_count()} cores, {cpu_model()} · Python {platform.python_version()}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hta-python", default=os.environ.get("HTA_PYTHON", ""),
                        help="Python with HolisticTraceAnalysis installed (skip HTA when empty).")
    parser.add_argument("--big-events", type=int, default=3_000_000)
    parser.add_argument("--hta-big", action="store_true", help="Also run HTA on the big trace (slow).")
    parser.add_argument("--repeat", type=int, default=3, help="Loads per tool and file; the best is kept.")
    parser.add_argument("--write", action="store_true", help="Write the section of bench/RESULTS.md.")
    args = parser.parse_args()

    py = sys.executable
    tmp = Path(tempfile.mkdtemp(prefix="bench-ingest-"))
    env = dict(os.environ, LAYERSCOPE_CACHE_DIR=str(tmp / "cache"), PYTHONPATH=str(ROOT / "src"))
    control = DATA / "gpu-training-control.json.gz"
    files: list[tuple[str, Path, int, bool]] = [
        ("gpu-training-control (real)", control, 109_123, True),
        ("gpu-training-ns-resolution (real)", DATA / "gpu-training-ns-resolution.json.gz", 68_692, True),
    ]
    one_m = tmp / "control_x9.json.gz"
    n1 = repeat_trace(control, 9, one_m)
    files.append((f"control x9 (made: repeated, {n1:,} events)", one_m, n1, True))
    copies = max(1, round(args.big_events / 109_123))
    big = tmp / f"control_x{copies}.json.gz"
    nb = repeat_trace(control, copies, big)
    files.append((f"control x{copies} (made: repeated, {nb:,} events)", big, nb, args.hta_big))

    rows = []
    for label, path, n_events, with_hta in files:
        hdir = tmp / f"hta-{path.stem.replace('.json', '')}"
        hdir.mkdir(exist_ok=True)
        link = hdir / "rank-0.json.gz"
        if not link.exists():
            link.symlink_to(path)
        ours_runs, parse_runs, hta_runs = [], [], []
        for k in range(max(1, args.repeat)):
            cold = dict(env, LAYERSCOPE_CACHE_DIR=str(tmp / f"cold-{path.name}-{k}"))
            ours_runs.append(_run([py, "-c", _LAYERSCOPE_CHILD, str(path), "ingest"], cold))
            parse_runs.append(_run([py, "-c", _LAYERSCOPE_CHILD, str(path), "parse"], env))
            if args.hta_python and with_hta:
                hta_runs.append(_run([args.hta_python, "-c", _HTA_CHILD, str(hdir)]))
        row: dict[str, Any] = {"label": label, "events": n_events, "ours": _best(ours_runs),
                               "parse": _best(parse_runs), "runs": len(ours_runs)}
        if hta_runs:
            row["hta"] = _best(hta_runs)
        rows.append(row)
        print(json.dumps(row), flush=True)

    reports = _run([py, "-c", _LAYERSCOPE_CHILD, str(big), "reports"], env)  # writes the cache
    cached = _run([py, "-c", _LAYERSCOPE_CHILD, str(big), "reports"], env)  # reads the cache
    print(json.dumps({"reports_cold": reports, "reports_cached": cached}), flush=True)
    if args.write:
        _write(rows, reports, cached, big.name, nb)


def _write(rows: list[dict[str, Any]], cold: dict[str, Any], cached: dict[str, Any], big: str, nb: int) -> None:
    today = datetime.date.today().isoformat()
    lines = [SECTION, "", f"`python bench/bench_ingest.py --hta-python /tmp/hta-venv/bin/python --write` · "
             f"{_machine()} · {today}", "",
             "Ingest = from a Kineto JSON trace path to queryable tables. layerscope: `TraceDB(path)` with a "
             "cold Parquet cache (parse, trace_processor-shaped tables, registered in DuckDB; the cache is "
             "written in the background, untimed); `read_trace` = the parse alone. HTA "
             f"{_hta_version()}: `TraceAnalysis(trace_dir=…)` (its DataFrame), imports excluded. One subprocess "
             f"per load, best of {rows[0].get('runs', 1) if rows else 1} loads per tool, the tools alternating "
             "in the same run; peak RSS of that process (imports included). The x9 and "
             f"x{round(nb / 109_123)} traces are gpu-training-control repeated with shifted timestamps (made, not "
             "recorded).", "",
             "| trace | events | reader | layerscope s | `read_trace` s | layerscope peak MiB | HTA s "
             "| HTA peak MiB | speed-up |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        ours, hta = r["ours"], r.get("hta")
        if "error" in ours:
            lines.append(f"| {r['label']} | {r['events']:,} | | error: {ours['error']} | | | | | |")
            continue
        if hta and "error" not in hta:
            hta_s, hta_m = f"{hta['seconds']:.2f}", f"{hta['peak_rss_mib']:.0f}"
            ratio = f"{hta['seconds'] / ours['seconds']:.1f}×"
        else:
            hta_s, hta_m, ratio = ("not run" if hta is None else f"error: {hta['error'][:60]}"), "", ""
        parse = r.get("parse", {})
        parse_s = f"{parse['seconds']:.3f}" if "seconds" in parse else ""
        lines.append(f"| {r['label']} | {r['events']:,} | {ours.get('path', '')} | {ours['seconds']:.3f} | {parse_s} | "
                     f"{ours['peak_rss_mib']:.0f} | {hta_s} | {hta_m} | {ratio} |")
    by_events = {r["events"]: r["ours"] for r in rows if "error" not in r["ours"]}
    control, million = by_events.get(109_123), next((o for n, o in by_events.items() if 900_000 < n < 1_100_000), None)
    biggest = by_events.get(nb)
    lines += [""]
    if control and million:
        lines.append(f"Against the HTA figures DESIGN.md quotes (2.3 s for 109k events; 33 s and 1.4 GB for 1M): "
                     f"{2.3 / control['seconds']:.1f}× and {33 / million['seconds']:.1f}× "
                     f"({million['peak_rss_mib']:.0f} MiB at 1M). Target ≥ 10×.")
    if biggest:
        verdict = "meets" if biggest["peak_rss_mib"] < 2048 else "misses"
        lines.append(f"{nb:,} events: {biggest['seconds']:.1f} s, peak {biggest['peak_rss_mib']:.0f} MiB — "
                     f"{verdict} the ≤ 2 GB target.")
    lines += ["", f"Reports on `{big}` ({nb:,} events) after ingest, seconds per query "
              "(cold = first load, parses and writes the Parquet cache; cached = second load):", "",
              "| report | cold | cached |", "|---|---|---|"]
    for name in cold.get("reports", {}):
        warm = cached.get("reports", {}).get(name, float("nan"))
        lines.append(f"| {name} | {cold['reports'][name]:.3f} | {warm:.3f} |")
    lines += ["", f"TraceDB open: cold {cold.get('seconds', float('nan')):.2f} s "
              f"(peak {cold.get('peak_rss_mib', float('nan')):.0f} MiB), cached "
              f"{cached.get('seconds', float('nan')):.2f} s (peak {cached.get('peak_rss_mib', float('nan')):.0f} MiB).",
              ""]
    text = RESULTS.read_text() if RESULTS.exists() else "# Benchmark results\n"
    section = "\n".join(lines)
    pattern = re.compile(re.escape(SECTION) + r"\n.*?(?=\n## |\Z)", re.S)
    text = pattern.sub(lambda _m: section.rstrip("\n") + "\n", text) if pattern.search(text) else (
        text.rstrip("\n") + "\n\n" + section)
    from layerscope.units import atomic_write

    with atomic_write(RESULTS, "w") as handle:
        handle.write(text if text.endswith("\n") else text + "\n")


if __name__ == "__main__":
    main()
