"""The Chrome/Kineto JSON reader's paths on the same traces, in one run: what each one earns.

    python bench/bench_chrome_paths.py [--copies 3] [--big-copies 9] [--repeat 3] [--data DIR] [--paths scanner,duckdb]

Paths (``layerscope.trace.chrome_reader.read_chrome_json``):

* ``scanner``: the C scanner ``_chrome_scan`` feeding the columnar builder (``chrome_fast``), the
  default where the extension is built;
* ``msgspec``: the scanner switched off (``LAYERSCOPE_JSON_NATIVE=0``): up to commit 227419c
  msgspec's structs fed the same builder; since the msgspec path was removed (bench/RESULTS.md,
  "Chrome JSON reader paths") the DuckDB path reads, and "ran" says so;
* ``duckdb``: DuckDB's streaming JSON reader (``read_chrome_json(path, fast=False)``).

Files: every ``*.json.gz`` of ``--data`` (default ``../shared/data/traces``, else
``tests/data/traces``: real Kineto traces), and gpu-training-control repeated ``--copies`` times
with shifted timestamps (made, not recorded: ``bench_ingest.repeat_trace``), plus
``--big-copies`` (default 9, ~1M events) when given a positive count.

Each read runs in its own subprocess (imports done before the clock starts): the time of
``read_chrome_json`` and the process's peak RSS (``VmHWM``, imports included), best of
``--repeat`` by time, the paths alternating. The child checks which path really read the file
(a path that declines falls back silently) and hashes the tables (``arg_sets`` as parsed JSON by
id, whose text is the file's own on the in-memory paths), so the table says whether every path
gave the same tables.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from _util import cpu_model
from bench_ingest import repeat_trace

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data" / "traces"
DATA = SHARED if SHARED.is_dir() else ROOT / "tests" / "data" / "traces"

#: peak RSS of this process image: VmHWM (ru_maxrss would carry the forking parent's peak over exec)
_HWM = r"""
def hwm():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
"""

_CHILD = _HWM + r"""
import hashlib, json, os, sys, time
from pathlib import Path
path, mode = Path(sys.argv[1]), sys.argv[2]
import orjson, pyarrow as pa
import layerscope.trace.chrome_reader as cr, layerscope.trace.chrome_fast as cf
from layerscope.trace.tables import SCHEMAS
used = []
builder = cf._Builder
cf._Builder = lambda columns, *a: used.append(type(columns).__name__) or builder(columns, *a)
if mode == "msgspec":
    os.environ["LAYERSCOPE_JSON_NATIVE"] = "0"
t0 = time.perf_counter()
tables = cr.read_chrome_json(path, fast=mode != "duckdb")
seconds = time.perf_counter() - t0
peak = hwm()
ran = {"_ScannedColumns": "scanner", "_DecodedColumns": "msgspec"}.get(used[-1], used[-1]) if used else "duckdb"
digest = hashlib.sha256()
for name in SCHEMAS:
    t = getattr(tables, name)
    if name == "arg_sets":
        t = t.sort_by("arg_set_id")
        digest.update(repr(t.column("arg_set_id").to_pylist()).encode())
        digest.update(orjson.dumps([orjson.loads(x) for x in t.column("json").to_pylist()],
                                   option=orjson.OPT_SORT_KEYS))
        continue
    cols = {}
    for c in t.column_names:
        col = t.column(c).combine_chunks()
        if pa.types.is_dictionary(col.type):
            col = col.cast(col.type.value_type)
        cols[c] = col
    digest.update(repr(pa.table(cols).to_pydict()).encode())
digest.update(repr(tables.warnings).encode())
print(json.dumps({"seconds": seconds, "peak_rss_mib": peak, "ran": ran, "slices": tables.slice.num_rows,
                  "digest": digest.hexdigest()[:12]}))
"""

#: peak RSS of a child that imports the readers and reads nothing (the imports' share of the peak)
_IDLE = _HWM + r"""
import json
import orjson, pyarrow
import layerscope.trace.chrome_reader, layerscope.trace.chrome_fast, layerscope.trace.tables
print(json.dumps({"peak_rss_mib": hwm()}))
"""


def _run(args: list[str], env: dict[str, str]) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, "-c", *args], capture_output=True, text=True, env=env, timeout=1800)
    if proc.returncode != 0:
        lines = proc.stderr.strip().splitlines()
        return {"error": lines[-1] if lines else f"rc {proc.returncode}"}
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def _events(path: Path) -> int:
    import gzip

    with gzip.open(path, "rb") as handle:
        return len(json.loads(handle.read()).get("traceEvents", []))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--copies", type=int, default=3, help="gpu-training-control repeated this many times")
    parser.add_argument("--big-copies", type=int, default=0, help="and this many (0: none)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--paths", default="scanner,duckdb", help="comma-separated: scanner, msgspec, duckdb")
    args = parser.parse_args()
    modes = args.paths.split(",")
    tmp = Path(tempfile.mkdtemp(prefix="bench-chrome-paths-"))
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    files = [(p.name.removesuffix(".json.gz") + " (real)", p) for p in sorted(args.data.glob("*.json.gz"))]
    control = args.data / "gpu-training-control.json.gz"
    for copies in (args.copies, args.big_copies):
        if copies > 0:
            made = tmp / f"control_x{copies}.json.gz"
            n = repeat_trace(control, copies, made)
            files.append((f"control x{copies} (made: repeated, {n:,} events)", made))
    idle = _run([_IDLE], env)
    print(json.dumps({"imports_peak_rss_mib": idle.get("peak_rss_mib")}), flush=True)
    print("| trace | events | path | ran | s | × scanner | peak MiB | × scanner | tables |")
    print("|---|---|---|---|---|---|---|---|---|")
    for label, path in files:
        runs: dict[str, list[dict[str, Any]]] = {m: [] for m in modes}
        for _ in range(max(1, args.repeat)):
            for mode in modes:
                runs[mode].append(_run([_CHILD, str(path), mode], env))
        best = {m: min((r for r in rs if "error" not in r), key=lambda r: r["seconds"], default=rs[0])
                for m, rs in runs.items()}
        base = best.get("scanner", next(iter(best.values())))
        digests = {b.get("digest") for b in best.values()}
        same = "same" if len(digests) == 1 else "DIFFER"
        n = _events(path)
        for mode, b in best.items():
            if "error" in b:
                print(f"| {label} | {n:,} | {mode} | error: {b['error'][:80]} | | | | | |", flush=True)
                continue
            print(f"| {label} | {n:,} | {mode} | {b['ran']} | {b['seconds']:.3f} | "
                  f"{b['seconds'] / base['seconds']:.2f} | {b['peak_rss_mib']:.0f} | "
                  f"{b['peak_rss_mib'] / base['peak_rss_mib']:.2f} | {same} |", flush=True)
    shutil.rmtree(tmp, ignore_errors=True)
    print(f"\n{os.cpu_count()} cores, {cpu_model()} · Python {platform.python_version()} · "
          f"{datetime.date.today().isoformat()}")


if __name__ == "__main__":
    main()
