"""Engine-count sweeps: how does the makespan fall as the chip is split into more engines?"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from layerscope.errors import ScheduleError
from layerscope.schedule.core import Schedule, ScheduleProblem, SchedulingPolicy, get_policy, schedule

__all__ = ["ENGINES_USED_TOLERANCE", "MAX_ENGINES", "Sweep", "parse_engine_counts", "sweep_engines"]

#: "Engines used" is the smallest N whose makespan is within this fraction of the best one.
ENGINES_USED_TOLERANCE = 0.02
#: Upper bound on an engine count parsed from the command line (a typo guard, not a model limit).
MAX_ENGINES = 4096

_RANGE = re.compile(r"^\s*(\d+)\s*\.\.\s*(\d+)\s*$")


def parse_engine_counts(spec: str | int | Sequence[int]) -> tuple[int, ...]:
    """``"4"`` -> (4,); ``"1..8"`` -> (1, …, 8); ``"1,2,4,8"`` -> (1, 2, 4, 8).

    Counts are sorted and de-duplicated; each must be an integer in 1..MAX_ENGINES.
    """
    if isinstance(spec, bool):
        raise ScheduleError(f"engines: {spec!r} is not an engine count")
    if isinstance(spec, int):
        counts: list[int] = [spec]
    elif isinstance(spec, str):
        text = spec.strip()
        m = _RANGE.match(text)
        if m:
            lo, hi = int(m.group(1)), int(m.group(2))
            if lo > hi:
                raise ScheduleError(f"engines: range {spec!r} is empty (start {lo} > end {hi})")
            if hi > MAX_ENGINES:
                raise ScheduleError(f"engines: {hi} exceeds the maximum of {MAX_ENGINES}")
            counts = list(range(lo, hi + 1))
        else:
            parts = [p.strip() for p in text.split(",")]
            if not text or any(not p.isdigit() for p in parts):
                raise ScheduleError(
                    f"engines: cannot parse {spec!r}; use a count (4), a range (1..8) or a list (1,2,4,8)"
                )
            counts = [int(p) for p in parts]
    else:
        try:
            counts = [int(c) for c in spec]
        except (TypeError, ValueError):
            raise ScheduleError(f"engines: {spec!r} is not a sequence of engine counts") from None
        if not counts:
            raise ScheduleError("engines: no engine counts given")
    for c in counts:
        if c < 1 or c > MAX_ENGINES:
            raise ScheduleError(f"engines: {c} is not in 1..{MAX_ENGINES}")
    return tuple(sorted(set(counts)))


@dataclass(frozen=True)
class Sweep:
    """One schedule per engine count, and the smallest count that gets (nearly) the best makespan."""

    rows: tuple[dict[str, object], ...]
    """Per N: engines, makespan_ns, speedup (vs 1 engine), engine_utilization, bandwidth_utilization."""
    engines_used: int
    best_makespan_ns: int
    baseline_makespan_ns: int
    """Makespan on one engine (same policy and bandwidth model), the speedup's reference."""
    schedules: tuple[Schedule, ...]

    def records(self) -> list[dict[str, object]]:
        return [dict(r) for r in self.rows]

    def to_arrow(self):  # type: ignore[no-untyped-def]
        import pyarrow as pa

        return pa.Table.from_pylist(self.records())


def sweep_engines(
    problem: ScheduleProblem,
    engines: Sequence[int] | str,
    policy: str | SchedulingPolicy = "list",
    share_bandwidth: bool = True,
    tolerance: float = ENGINES_USED_TOLERANCE,
) -> Sweep:
    """Schedule ``problem`` for each engine count; ``engines_used`` is the smallest count whose
    makespan is within ``tolerance`` of the best."""
    pol = get_policy(policy)  # an unknown name fails before any schedule
    counts = parse_engine_counts(engines)
    schedules = [schedule(problem, n, pol, share_bandwidth) for n in counts]
    baseline = schedules[0].makespan_ns if counts[0] == 1 else schedule(
        problem, 1, pol, share_bandwidth).makespan_ns
    best = min(s.makespan_ns for s in schedules)
    used = next(n for n, s in zip(counts, schedules, strict=True) if s.makespan_ns <= best * (1 + tolerance))
    rows: list[dict[str, object]] = []
    for n, s in zip(counts, schedules, strict=True):
        span = s.makespan_ns
        rows.append({
            "engines": n,
            "makespan_ns": span,
            "speedup": baseline / span if span else 1.0,
            "engine_utilization": s.engine_utilization,
            "bandwidth_utilization": s.bandwidth_utilization,
            "within_tolerance": span <= best * (1 + tolerance),
        })
    return Sweep(tuple(rows), used, best, baseline, tuple(schedules))
