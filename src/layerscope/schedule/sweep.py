"""Engine-count sweeps, asking one of two questions:

* ``split`` (the default): a fixed chip split into N engines of 1/N of its compute each. The work is the same at
  every N; more engines run more ops at once, but each op runs on a smaller engine, so a chain of dependent ops
  takes longer: the curve falls while ops can overlap and rises once the dependency chain (on ever smaller
  engines) sets the time, and it cannot fall below the memory traffic over the shared bandwidth.
* ``add``: engines of a fixed size (``engine_fraction`` of the chip's compute each) added one by one, the memory
  system the chip's: how many engines of this size does the work need? The curve falls until the dependency chain
  on one engine of that size, or the memory traffic over the bandwidth, sets the time.

Each row names what bounds its makespan (:data:`BOUNDS`), the largest of three lower bounds: the memory traffic
over the shared bandwidth (``bandwidth``), the longest chain of dependent ops each at its standalone time on one
engine (``dependencies``), and the total engine time over the engines (``compute``: every op's arithmetic,
overhead included, spread perfectly).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from layerscope.errors import ScheduleError
from layerscope.schedule.core import (
    NS_PER_S,
    EngineSet,
    Schedule,
    ScheduleProblem,
    SchedulingPolicy,
    get_policy,
    schedule,
    standalone_ns,
    upward_rank,
)

__all__ = ["BOUNDS", "ENGINES_USED_TOLERANCE", "ENGINE_MODES", "MAX_ENGINES", "Sweep", "lower_bounds_ns",
           "parse_engine_counts", "sweep_engines"]

#: The questions a sweep asks (module docstring).
ENGINE_MODES = ("split", "add")
#: What bounds a makespan, as :func:`lower_bounds_ns` names the bounds; on a tie the first named wins.
BOUNDS = ("bandwidth", "compute", "dependencies")

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
    """Per N: engines, makespan_ns, speedup (vs 1 engine), engine_utilization, bandwidth_utilization, the three
    lower bounds (``*_bound_ns``) and ``bound``, the one that sets the makespan."""
    engines_used: int
    best_makespan_ns: int
    baseline_makespan_ns: int
    """Makespan on one engine (same policy and bandwidth model), the speedup's reference."""
    schedules: tuple[Schedule, ...]
    mode: str = "split"
    """``split`` or ``add`` (module docstring)."""
    engine_fraction: float | None = None
    """In ``add`` mode: each engine's share of the chip's compute."""

    def records(self) -> list[dict[str, object]]:
        return [dict(r) for r in self.rows]

    def to_arrow(self):  # type: ignore[no-untyped-def]
        import pyarrow as pa

        return pa.Table.from_pylist(self.records())


def engine_set(count: int, mode: str = "split", engine_fraction: float | None = None) -> EngineSet:
    """``count`` engines: of 1/count of the chip each (``split``), or of ``engine_fraction`` each (``add``)."""
    if mode == "split":
        return EngineSet.uniform(count)
    if mode != "add":
        raise ScheduleError(f"engine mode {mode!r}: use {' or '.join(ENGINE_MODES)}")
    if engine_fraction is None or not (0 < engine_fraction <= MAX_ENGINES):
        raise ScheduleError(f"engine size {engine_fraction!r}: adding engines needs each engine's share of the "
                            "chip's compute (> 0; 0.25 = a quarter of the chip)")
    return EngineSet((float(engine_fraction),) * count)


def lower_bounds_ns(problem: ScheduleProblem, engines: EngineSet, share_bandwidth: bool = True) -> dict[str, float]:
    """The three lower bounds of any schedule of ``problem`` on ``engines`` (module docstring), float ns: the
    memory traffic over the bandwidth (0 when each engine has it all), the critical path of standalone times on one
    engine, and the summed engine time (arithmetic at each engine's share, plus overheads) over the engines."""
    frac = engines.compute_fraction[0]
    bandwidth = problem.total_memory_bytes / problem.bandwidth_bytes_per_s * NS_PER_S if share_bandwidth else 0.0
    chain = float(upward_rank(problem, standalone_ns(problem, engines)).max(initial=0.0))
    work = float((problem.compute_s.sum() / frac + problem.overhead_s.sum()) * NS_PER_S) / engines.count
    return {"bandwidth": bandwidth, "dependencies": chain, "compute": work}


def sweep_engines(
    problem: ScheduleProblem,
    engines: Sequence[int] | str,
    policy: str | SchedulingPolicy = "list",
    share_bandwidth: bool = True,
    tolerance: float = ENGINES_USED_TOLERANCE,
    mode: str = "split",
    engine_fraction: float | None = None,
) -> Sweep:
    """Schedule ``problem`` for each engine count (engines as ``mode`` builds them: :func:`engine_set`);
    ``engines_used`` is the smallest count whose makespan is within ``tolerance`` of the best."""
    pol = get_policy(policy)  # an unknown name fails before any schedule
    counts = parse_engine_counts(engines)
    sets = [engine_set(n, mode, engine_fraction) for n in counts]
    schedules = [schedule(problem, es, pol, share_bandwidth) for es in sets]
    baseline = schedules[0].makespan_ns if counts[0] == 1 else schedule(
        problem, engine_set(1, mode, engine_fraction), pol, share_bandwidth).makespan_ns
    best = min(s.makespan_ns for s in schedules)
    used = next(n for n, s in zip(counts, schedules, strict=True) if s.makespan_ns <= best * (1 + tolerance))
    rows: list[dict[str, object]] = []
    for n, s, es in zip(counts, schedules, sets, strict=True):
        span = s.makespan_ns
        bounds = lower_bounds_ns(problem, es, share_bandwidth)
        rows.append({
            "engines": n,
            "makespan_ns": span,
            "speedup": baseline / span if span else 1.0,
            "engine_utilization": s.engine_utilization,
            "bandwidth_utilization": s.bandwidth_utilization,
            "within_tolerance": span <= best * (1 + tolerance),
            **{f"{name}_bound_ns": round(value, 3) for name, value in bounds.items()},
            "bound": max(BOUNDS, key=lambda name: bounds[name]),
        })
    return Sweep(tuple(rows), used, best, baseline, tuple(schedules), mode,
                 engine_fraction if mode == "add" else None)
