"""Helpers shared by the benchmark scripts (run as ``python bench/NAME.py``)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

from layerscope.hardware.host import cpu_name


def cpu_model() -> str:
    """The CPU's model name, for the machine line of RESULTS.md."""
    return cpu_name()


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
    """Forget the graph builders' memoized graphs, so the next estimate builds from scratch. The memos are found
    once (a scan of the module's names took 17 µs, which a timed cold estimate would have counted)."""
    global _GRAPH_MEMOS
    if _GRAPH_MEMOS is None:
        import layerscope.graph.builder as builder

        _GRAPH_MEMOS = [obj.cache_clear for name in dir(builder) if hasattr(obj := getattr(builder, name),
                                                                             "cache_clear")]
    for clear in _GRAPH_MEMOS:
        clear()


_GRAPH_MEMOS: list[Callable[[], None]] | None = None
