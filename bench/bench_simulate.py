"""Schedule and write >= 1M simulated ops: ``python bench/bench_simulate.py [--steps 625] [--engines 8]``.

Llama-3.1-70B (80 layers, unfused attention) decoding ``--steps`` tokens with a growing KV cache
(context 1024 at the first step), timed with the roofline model on h100-sxm, scheduled on
``--engines`` engines with the ``list`` policy and shared bandwidth, then written as Perfetto
protobuf, Chrome JSON and gzipped Chrome JSON. Graph building and timing are reported but are not
part of "schedule + write". Results go to bench/RESULTS.md under "## simulate" (``--no-record``
to skip).
"""

from __future__ import annotations

import argparse
import datetime
import filecmp
import gc
import os
import platform
import re
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from _util import cpu_model


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="llama-3.1-70b")
    ap.add_argument("--hardware", default="h100-sxm")
    ap.add_argument("--steps", type=int, default=625)
    ap.add_argument("--engines", type=int, default=8)
    ap.add_argument("--no-record", action="store_true")
    a = ap.parse_args()

    from layerscope.cost import time_graph
    from layerscope.graph import build_steps_graph
    from layerscope.hardware import load_hardware
    from layerscope.model import load_model_spec
    from layerscope.schedule import ScheduleProblem, schedule
    from layerscope.trace.writers import TraceMetadata, write_schedule_trace
    from layerscope.workload import make_workload

    t0 = time.perf_counter()
    spec = load_model_spec(a.model)
    w = make_workload(phase="decode", context=1024)
    graph = build_steps_graph(spec, w, a.steps, "unfused", all_layers=True)
    t_build = time.perf_counter() - t0
    t0 = time.perf_counter()
    tg = time_graph(graph, load_hardware(a.hardware))
    t_time = time.perf_counter() - t0
    t0 = time.perf_counter()
    problem = ScheduleProblem.from_timed(tg)
    t_problem = time.perf_counter() - t0
    gc.collect()
    rows = []
    t0 = time.perf_counter()
    s = schedule(problem, a.engines, "list")
    t_sched = time.perf_counter() - t0
    t0 = time.perf_counter()
    s_in = schedule(problem, a.engines, "in-order")
    t_sched_in = time.perf_counter() - t0
    from layerscope.schedule import core

    loop = "C (`layerscope.schedule._event_loop`)" if core._native_loop() is not None else "Python (no C build)"
    t_sched_py = None
    if core._native_loop() is not None:  # the same schedule on the pure-Python loop, for the ratio
        os.environ["LAYERSCOPE_SCHEDULE_NATIVE"] = "0"
        t0 = time.perf_counter()
        s_py = schedule(problem, a.engines, "list")
        t_sched_py = time.perf_counter() - t0
        del os.environ["LAYERSCOPE_SCHEDULE_NATIVE"]
        if not (np.array_equal(s_py.start_ns, s.start_ns) and np.array_equal(s_py.end_ns, s.end_ns)):
            raise SystemExit("the C and Python event loops disagree")
    t0 = time.perf_counter()
    meta = TraceMetadata.from_timed(tg)
    t_meta = time.perf_counter() - t0
    sizes = {}
    from layerscope.trace import perfetto_writer

    packets = ("C (`layerscope.trace._perfetto_packets`)" if perfetto_writer._native_writer() is not None
               else "Python (no C build)")
    t_pf_py = None
    with tempfile.TemporaryDirectory() as tmp:
        for suffix in (".pftrace", ".json", ".json.gz"):
            path = Path(tmp) / f"bench{suffix}"
            t0 = time.perf_counter()
            write_schedule_trace(s, meta, path)
            dt = time.perf_counter() - t0
            sizes[suffix] = path.stat().st_size
            rows.append((suffix, dt, sizes[suffix]))
            if suffix == ".pftrace" and perfetto_writer._native_writer() is not None:
                # the same file from the pure-Python packet loop, for the ratio
                os.environ["LAYERSCOPE_TRACE_NATIVE"] = "0"
                path_py = Path(tmp) / "bench-python.pftrace"
                t0 = time.perf_counter()
                write_schedule_trace(s, meta, path_py)
                t_pf_py = time.perf_counter() - t0
                del os.environ["LAYERSCOPE_TRACE_NATIVE"]
                if not filecmp.cmp(path, path_py, shallow=False):
                    raise SystemExit("the C and Python packet loops wrote different .pftrace files")
                path_py.unlink()
            path.unlink()
    n, e = problem.n, problem.num_edges
    lines = [
        "## simulate",
        "",
        f"`python bench/bench_simulate.py --steps {a.steps} --engines {a.engines}` · {os.cpu_count()} cores, "
        f"{cpu_model()} · Python {platform.python_version()} · {datetime.date.today().isoformat()}",
        "",
        f"{a.model} decode, {a.steps} steps x {spec.num_layers} layers (unfused attention), {a.hardware}, "
        f"roofline: **{n:,} ops, {e:,} dependency edges**; {a.engines} engines, shared bandwidth. "
        f"Not counted below: graph build {t_build:.2f} s, timing {t_time:.2f} s, "
        f"ScheduleProblem.from_timed {t_problem:.2f} s. Event loop: {loop}. `.pftrace` packet loop: {packets}.",
        "",
        "| step | time | output |",
        "|---|---|---|",
        f"| schedule, `list` (incl. upward rank) | {t_sched:.2f} s | makespan {s.makespan_ns / 1e6:.3f} ms |",
        f"| schedule, `in-order` | {t_sched_in:.2f} s | makespan {s_in.makespan_ns / 1e6:.3f} ms |",
        *([f"| schedule, `list`, Python event loop (`LAYERSCOPE_SCHEDULE_NATIVE=0`) | {t_sched_py:.2f} s | "
           f"the same schedule; C is {t_sched_py / t_sched:.1f}x faster |"] if t_sched_py is not None else []),
        f"| trace metadata from the timed graph (args templates) | {t_meta:.2f} s | "
        f"{len(meta.templates):,} templates |",
    ]
    for suffix, dt, size in rows:
        lines.append(f"| write `{suffix}` | {dt:.2f} s | {size / 1e6:.1f} MB |")
        if suffix == ".pftrace" and t_pf_py is not None:
            lines.append(f"| write `.pftrace`, Python packet loop (`LAYERSCOPE_TRACE_NATIVE=0`) | {t_pf_py:.2f} s | "
                         f"the same bytes; C is {t_pf_py / dt:.1f}x faster |")
    best = {suffix: dt for suffix, dt, _ in rows}
    lines += [
        "",
        f"Schedule (`list`) + metadata + write: **{t_sched + t_meta + best['.pftrace']:.2f} s** for `.pftrace`, "
        f"**{t_sched + t_meta + best['.json']:.2f} s** for `.json`, "
        f"{t_sched + t_meta + best['.json.gz']:.2f} s for `.json.gz` (target <= 10 s). "
        f"Protobuf / JSON size: **{sizes['.pftrace'] / sizes['.json']:.3f}** (target <= 0.333); "
        f"gzip level 1 JSON is {sizes['.json.gz'] / sizes['.json']:.3f} of the JSON.",
        "",
    ]
    text = "\n".join(lines)
    sys.stdout.write(text + "\n")
    if not a.no_record:
        results = Path(__file__).with_name("RESULTS.md")
        old = results.read_text() if results.exists() else "# Benchmark results\n\n"
        pattern = re.compile(r"## simulate\n.*?(?=\n## |\Z)", re.S)
        new = pattern.sub(lambda _: text.rstrip("\n") + "\n", old) if pattern.search(old) else (
            old.rstrip("\n") + "\n\n" + text)
        results.write_text(new)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
