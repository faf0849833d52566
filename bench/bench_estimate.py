"""Benchmark: one full-model estimate, and configurations per second over a sweep grid.

    python bench/bench_estimate.py [--quick]

Prints a Markdown section for bench/RESULTS.md. Timings are medians of repeated runs in this
process (warm: imports done, first call discarded). "cold graph" times build the op graph from
scratch each call (the builders' memo is cleared); "memoized graph" lets the builder reuse a
graph it built for the same inputs, as a sweep or an interactive session does. A model graph makes
its layers' ops on first use of ``graph.ops`` (timing does not need them; a table of ops does), so
the cold build is timed alone, with its ops made, and either way followed by the timing.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import time

import numpy as np
from _util import clear_graph_memo, cpu_model, median_s

from layerscope.cost import estimate
from layerscope.cost.api import time_graph
from layerscope.cost.sweep import fit_linear_graph, shape_dependent, sweep, time_by_batch, time_grid
from layerscope.graph import build_model_graph
from layerscope.hardware import load_hardware
from layerscope.model import load_model_spec
from layerscope.workload import make_workload


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    repeat = 5 if args.quick else 30
    h100 = load_hardware("h100-sxm")
    rows = []
    for model in ("llama-3.1-8b", "llama-3.1-70b", "qwen3-30b-a3b", "deepseek-v3"):
        spec = load_model_spec(model)
        w = make_workload(phase="decode", batch=1, context=1024)
        fwd = w.passes()[0]
        n_ops = len(build_model_graph(spec, fwd, w))

        def build(spec=spec, w=w, fwd=fwd):
            clear_graph_memo()
            return build_model_graph(spec, fwd, w)

        def build_ops(spec=spec, w=w, fwd=fwd):
            clear_graph_memo()
            return build_model_graph(spec, fwd, w).ops

        def cold(spec=spec, w=w, fwd=fwd):
            clear_graph_memo()
            return time_graph(build_model_graph(spec, fwd, w), h100)

        def cold_ops(spec=spec, w=w, fwd=fwd):
            clear_graph_memo()
            g = build_model_graph(spec, fwd, w)
            g.ops  # noqa: B018  # made before the timing, as a command that prints ops makes them
            return time_graph(g, h100)

        def memo(spec=spec, w=w):
            return estimate(spec, h100, w)

        g = build_model_graph(spec, fwd, w)
        rows.append((model, n_ops, median_s(build, repeat), median_s(build_ops, repeat), median_s(cold, repeat),
                     median_s(cold_ops, repeat), median_s(memo, repeat),
                     median_s(lambda g=g: time_graph(g, h100), repeat)))

    # Sweep: models x hardware x batch x length, decode and prefill.
    specs = [load_model_spec(m) for m in ("llama-3.1-8b", "llama-3.1-70b", "qwen3-30b-a3b", "mixtral-8x7b-v0.1")]
    hws = [load_hardware(h) for h in ("a100-sxm", "h100-sxm", "h200", "b200", "mi300x", "l40s")]
    batches = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]
    lengths = list(np.unique(np.geomspace(16, 32768, 100).astype(int)))
    t0 = time.perf_counter()
    res = sweep(specs, hws, batches, lengths, phase="decode")
    sweep_s = time.perf_counter() - t0
    n_cfg = len(res)
    # Timing-only throughput: the fitted graph models reused, as a repeated sweep would.
    lins = [fit_linear_graph(s, "decode", make_workload()) for s in specs]
    b_grid, l_grid = (a.ravel() for a in np.meshgrid(batches, lengths, indexing="ij"))

    tmpl = make_workload()

    def grid_only():
        for lin in lins:
            for hw in hws:
                # the fitted GPU presets read each GEMM's M: their decode grid goes one graph per batch
                if shape_dependent(hw, "roofline", "decode", lin.static) is None:
                    time_grid(lin, hw, b_grid, l_grid)
                else:
                    time_by_batch(lin, tmpl, hw, b_grid, l_grid)

    grid_s = median_s(grid_only, max(3, repeat // 5))

    now = datetime.date.today().isoformat()
    print(f"## estimate\n\n`python bench/bench_estimate.py{' --quick' if args.quick else ''}` · "
          f"{os.cpu_count()} cores, {cpu_model()} · Python {platform.python_version()} · {now}\n")
    print("One full-model estimate (decode, batch 1, context 1024, H100 SXM, roofline), median of "
          f"{repeat} warm runs:\n")
    print("| model | ops | cold build | cold build, ops made | cold graph + timing | cold graph, ops made, + timing "
          "| estimate() (memoized graph) | timing only |")
    print("|---|---|---|---|---|---|---|---|")
    for model, n_ops, b, bo, c, co, m, t in rows:
        print(f"| {model} | {n_ops} | {b * 1e3:.3f} ms | {bo * 1e3:.3f} ms | {c * 1e3:.3f} ms | {co * 1e3:.3f} ms "
              f"| {m * 1e3:.3f} ms | {t * 1e6:.1f} µs |")
    print(f"\nSweep of {len(specs)} models x {len(hws)} GPUs x {len(batches)} batches x {len(lengths)} "
          f"lengths = {n_cfg:,} decode configurations:\n")
    print(f"- `sweep()` end to end, including fitting each model's graph: {sweep_s:.3f} s "
          f"= {sweep_s / n_cfg * 1e6:.2f} µs per configuration")
    print(f"- timing the grid with fitted graphs: {grid_s:.4f} s = {grid_s / n_cfg * 1e6:.3f} µs per configuration "
          "(`time_grid`; on GPU presets whose GEMM efficiency reads the shapes, `time_by_batch`: one graph per batch)")


if __name__ == "__main__":
    main()
