"""Shared by the peer drivers: read the job, time a callable warm, print the result.

The drivers run in bench/.peer-venv (not in layerscope's environment), so this file imports
nothing from layerscope. The job is a JSON file written by bench/bench_estimate_peers.py; the
result is one JSON line on stdout after ``RESULT_MARK`` (peers may print their own chatter).
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

RESULT_MARK = "@@PEER-RESULT@@ "

# No network but the package index: any hub lookup a peer attempts must fail fast, not hang.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def load_job() -> dict[str, Any]:
    with open(sys.argv[1]) as fh:
        return json.load(fh)


def median_s(fn: Callable[[], object], repeat: int) -> float:
    """Median wall time of ``repeat`` calls after one discarded warm-up call."""
    fn()
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def sweep_configs(job: dict[str, Any]) -> list[tuple[int, int]]:
    """The (batch, length) grid of the sweep, thinned evenly to at most ``max_configs``."""
    sw = job["sweep"]
    grid = [(b, n) for b in sw["batches"] for n in sw["lengths"]]
    cap = int(sw.get("max_configs") or len(grid))
    if len(grid) > cap:
        step = len(grid) / cap
        grid = [grid[int(i * step)] for i in range(cap)]
    return grid


def time_sweep(fn: Callable[[int, int], object], job: dict[str, Any]) -> dict[str, Any]:
    """Call ``fn(batch, length)`` once per configuration (after one warm-up) and time the loop."""
    grid = sweep_configs(job)
    fn(*grid[0])
    t0 = time.perf_counter()
    for b, n in grid:
        fn(b, n)
    total = time.perf_counter() - t0
    return {"configs": len(grid), "total_s": total, "per_config_s": total / len(grid)}


def emit(result: dict[str, Any]) -> None:
    sys.stdout.flush()
    print(RESULT_MARK + json.dumps(result), flush=True)
