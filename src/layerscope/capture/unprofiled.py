"""Module times of a run without the profiler: the same hooks and ranges, timed by ``perf_counter``.

The profiler's cost per aten event differs by op (measurements: docs/capture-instrumentation.md), so
no single per-event figure can be subtracted from a profiled trace. The capture can instead run the
recorded iterations once more without the profiler, each module call and phase range timed by a
:class:`SpanClock` span (a pair of ``perf_counter`` readings, seconds). :func:`unprofiled_times` sums
them per phase range exactly as :func:`layerscope.analysis.validate.captured_times` sums the trace's
ranges (module → inclusive seconds and calls per iteration; a span belongs to the phase range it
starts in), and estimates the instrumentation's own cost per call as the smallest median gap between
consecutive sibling spans. Those times carry no profiler time at all.

The spans wrap the whole call (:class:`ModuleCallTimer` wraps ``nn.Module.__call__`` for the pass), not
the ``forward`` body between hooks, so the call's own Python is measured on the module whose op the
cost model books it on.

torch is not needed here.
"""

from __future__ import annotations

import itertools
import statistics
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, Field

from layerscope.docstrings import SPEC_CONFIG
from layerscope.workload.steps import is_phase_range


class UnprofiledTimes(BaseModel):
    """Module times of the iterations run without the profiler, per iteration (seconds)."""

    model_config = SPEC_CONFIG

    iterations: int = Field(ge=1)
    ranges: dict[str, float]
    """Phase range (``prefill``, ``decode_step_K``) → its time."""
    modules: dict[str, dict[str, float]]
    """Phase range → module op name → inclusive time (every call summed)."""
    calls: dict[str, dict[str, float]]
    """Phase range → module op name → calls."""
    call_overhead_s: float = Field(ge=0)
    """The instrumentation's time per module call: the smallest median gap between consecutive sibling spans."""


class _Span:
    """One open span: enter and exit read the clock (the protocol of ``record_function``)."""

    __slots__ = ("_clock", "_index", "_name")

    def __init__(self, clock: SpanClock, name: str) -> None:
        self._clock = clock
        self._name = name
        self._index = -1

    def __enter__(self) -> _Span:
        clock = self._clock
        parent = clock.open[-1] if clock.open else -1
        self._index = len(clock.names)
        clock.names.append(self._name)
        clock.parents.append(parent)
        clock.ends.append(float("nan"))
        clock.open.append(self._index)
        clock.starts.append(time.perf_counter())
        return self

    def __exit__(self, *exc: object) -> None:
        end = time.perf_counter()
        clock = self._clock
        clock.ends[self._index] = end
        if clock.open and clock.open[-1] == self._index:
            clock.open.pop()
        elif self._index in clock.open:  # an inner span left open by an exception: close it with this one
            del clock.open[clock.open.index(self._index):]


@dataclass
class SpanClock:
    """Named, nested spans timed by ``perf_counter``; ``clock.span(name)`` stands in for ``record_function(name)``."""

    names: list[str] = field(default_factory=list)
    parents: list[int] = field(default_factory=list)
    """Index of each span's enclosing span (-1 for none)."""
    starts: list[float] = field(default_factory=list)
    ends: list[float] = field(default_factory=list)
    open: list[int] = field(default_factory=list)

    def span(self, name: str) -> Any:
        return _Span(self, name)


class ModuleCallTimer:
    """Times every call of the given modules whole: for the duration of the ``with`` block,
    ``module_class.__call__`` (``torch.nn.Module``'s) is a wrapper that opens ``span(name)`` around
    the original call of a named module and calls straight through for any other. The original is
    restored on exit, whatever happened inside.

    ``phase`` mirrors :class:`~layerscope.capture.annotate.ModuleAnnotator`'s (the runner sets it);
    nothing here reads it. Calls a subclass routes past ``nn.Module.__call__`` (an override that does
    not call ``super().__call__``) are not timed and show as missing modules.
    """

    def __init__(self, module_class: type, modules: Iterable[tuple[str, Any]], span: Any) -> None:
        self._class = module_class
        self._names = {module: name for name, module in modules}
        self._span = span
        self._original: Any = None
        self.phase = "prefill"

    def __enter__(self) -> ModuleCallTimer:
        original = self._original = self._class.__dict__["__call__"]
        names, span = self._names, self._span

        def timed_call(module: Any, *args: Any, **kwargs: Any) -> Any:
            name = names.get(module)
            if name is None:
                return original(module, *args, **kwargs)
            with span(name):
                return original(module, *args, **kwargs)

        setattr(self._class, "__call__", timed_call)  # noqa: B010 (a method slot, rebound for the pass)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._original is not None:
            setattr(self._class, "__call__", self._original)  # noqa: B010
            self._original = None


def _phase_of(clock: SpanClock, i: int) -> str | None:
    """The phase range a span starts in: its outermost enclosing span, when that is a phase range."""
    while clock.parents[i] >= 0:
        i = clock.parents[i]
    name = clock.names[i]
    return name if is_phase_range(name) else None


def unprofiled_times(clock: SpanClock, iterations: int) -> UnprofiledTimes:
    """Per-iteration phase-range and module times of ``clock``'s closed spans (module docstring)."""
    if iterations < 1:
        raise ValueError(f"iterations must be >= 1, got {iterations}")
    ranges: dict[str, float] = {}
    modules: dict[str, dict[str, float]] = {}
    calls: dict[str, dict[str, float]] = {}
    children: dict[int, list[int]] = {}
    for i, name in enumerate(clock.names):
        dur = clock.ends[i] - clock.starts[i]
        if not dur >= 0:  # never closed (NaN) or a broken clock
            continue
        if is_phase_range(name) and clock.parents[i] < 0:
            ranges[name] = ranges.get(name, 0.0) + dur
            modules.setdefault(name, {})
            calls.setdefault(name, {})
            continue
        phase = _phase_of(clock, i)
        if phase is None:
            continue
        table = modules.setdefault(phase, {})
        table[name] = table.get(name, 0.0) + dur
        count = calls.setdefault(phase, {})
        count[name] = count.get(name, 0.0) + 1.0
        if clock.parents[i] >= 0:
            children.setdefault(clock.parents[i], []).append(i)
    gaps: dict[tuple[str, str], list[float]] = {}
    for kids in children.values():
        for prev, nxt in itertools.pairwise(kids):  # spans are recorded in start order
            gap = clock.starts[nxt] - clock.ends[prev]
            if gap >= 0:
                gaps.setdefault((clock.names[prev], clock.names[nxt]), []).append(gap)
    overhead = min((statistics.median(g) for g in gaps.values()), default=0.0)
    per = 1.0 / iterations
    return UnprofiledTimes(
        iterations=iterations,
        ranges={k: v * per for k, v in sorted(ranges.items())},
        modules={p: {k: v * per for k, v in sorted(t.items())} for p, t in sorted(modules.items())},
        calls={p: {k: v * per for k, v in sorted(t.items())} for p, t in sorted(calls.items())},
        call_overhead_s=overhead,
    )
