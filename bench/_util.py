"""Helpers shared by the benchmark scripts (run as ``python bench/NAME.py``)."""

from __future__ import annotations

import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path


def cpu_model() -> str:
    """The CPU's model name (Linux /proc/cpuinfo), for the machine line of RESULTS.md."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def median_s(fn: Callable[[], object], repeat: int) -> float:
    """Median seconds of ``fn`` over ``repeat`` calls after one discarded warm-up call."""
    fn()
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def clear_graph_memo() -> None:
    """Forget the graph builders' memoized graphs, so the next estimate builds from scratch."""
    import layerscope.graph.builder as builder

    for name in dir(builder):
        obj = getattr(builder, name)
        if hasattr(obj, "cache_clear"):
            obj.cache_clear()
