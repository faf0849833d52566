"""Scheduling timed ops on N compute engines that share the chip's memory bandwidth.

The model
---------
A chip's compute is split into engines; its main-memory bandwidth is not.

* **Engines.** ``EngineSet.uniform(N)`` gives N engines that each own ``1/N`` of the chip's
  achievable compute throughput; an :class:`EngineSet` may instead give each engine its own
  fraction (from per-engine figures of a hardware spec). An op's arithmetic on engine ``e``
  takes ``c_e = compute_s / fraction_e`` (``compute_s`` is the op's compute time on the whole
  chip, from the cost model). An op runs on one engine from start to end (no preemption, no
  migration) and an engine runs one op at a time.
* **Ops.** An op first pays its fixed ``overhead_s`` (launch; uses no bandwidth), then its main
  phase, in which arithmetic and memory traffic overlap (the roofline assumption,
  Williams et al., CACM 2009): alone on the chip's full bandwidth ``B`` the main phase takes
  ``T_e = max(c_e, memory_bytes / B)``, during which the op streams memory at its *demand*
  ``d = memory_bytes / T_e <= B``. So alone on one engine of one, an op takes
  ``overhead_s + max(compute_s, memory_bytes / B)``: the roofline time.
* **Shared bandwidth** (``share_bandwidth=True``, the default) is a fluid, processor-sharing
  model: at every instant the ops in their main phase split ``B`` max-min fairly (water
  filling): each gets ``a_i = min(d_i, L)`` where the level ``L`` solves ``sum(min(d_i, L)) = B``
  when the demands exceed ``B`` (otherwise every op gets its demand). An op progresses through
  its main phase at the fraction ``a_i / d_i`` of its standalone speed (compute slows with the
  memory stream that feeds it; no op buffers ahead). Rates are re-evaluated at every event that
  changes the set of ops in their main phase (an op enters it or finishes), so between events
  they are constant and the simulation is exact for this model. Because the allocations never
  sum to more than ``B``, the makespan is at least ``sum(memory_bytes) / B`` however many
  engines there are: adding engines cannot make memory-bound decode faster than the bandwidth.
* **Unshared bandwidth** (``share_bandwidth=False``): every engine sees all of ``B``; each op
  takes its standalone time ``overhead_s + T_e``. With one engine the makespan is the sum of the
  roofline durations; with at least as many engines as ops it is the critical path.

Assumptions: bandwidth is the only shared resource (no cache contention, no interconnect); the
split of compute is static; dependencies are data dependencies and an op may start the instant
its last producer ends (no transfer latency); program order is a topological order (every
dependency of op ``i`` has an index below ``i``).

Policies (classes registered by name in :data:`POLICIES`)
---------------------------------------------------------
A policy is a :class:`SchedulingPolicy` subclass; the event loop knows none by name. It reads what
the policy object declares: a dispatch discipline (:class:`Dispatch`: ``RESERVE`` hands ops to
engines in priority order, each reserving its engine until its dependencies end; ``READY`` lets free
engines take the ready ops of lowest priority key), an engine choice (:class:`EngineChoice`: the
engine free earliest, or the fastest) and one priority key per op, computed once from the problem.
A policy may also combine runs of the loop (``list`` below). Adding a policy is one class with
:func:`register_policy`; the Python and the C loop run it unchanged.

* ``in-order``: ops are dispatched in program order, each to the engine that became free
  earliest (ties: lowest index), and start when their dependencies have ended. With fixed
  durations this is ``start = max(end of dependencies, engine free)``.
* ``list``: at every event, free engines take the ready op of highest upward rank (HEFT,
  Topcuoglu et al., IEEE TPDS 2002: the op's standalone duration plus the longest chain of
  successors' durations to a sink); ties go to the lowest op index. Any ready op fills an
  idle engine (backfilling), so a ready op is never stuck behind a blocked earlier one. The
  fastest free engine is taken first. When program order happens to finish earlier (a list
  scheduling anomaly, Graham 1969), that schedule is returned instead, so ``list`` is never
  worse than ``in-order``.

Times are simulated in float nanoseconds and rounded to integer ``_ns`` once, at the end (so a
consumer never starts before its producer ends and ops on an engine never overlap after rounding).

The event loop runs in C (``_event_loop.c``, an optional extension ``setup.py`` builds), step for
step the Python loop below with the same floating-point operations in the same order, so the two
give bit-identical schedules; the Python loop runs where no compiler was available, or with
``LAYERSCOPE_SCHEDULE_NATIVE=0``.
"""

from __future__ import annotations

import dataclasses
import enum
import gc
import heapq
import logging
import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

import numpy as np

from layerscope.errors import ScheduleError
from layerscope.lazy import native_extension
from layerscope.registry import Registry
from layerscope.units import NS_PER_S

try:
    from layerscope.schedule import _event_loop  # the C event loop (absent where setup.py could not build it)
except ImportError:  # pragma: no cover - installs without a compiler
    _event_loop = None  # type: ignore[assignment]

if TYPE_CHECKING:
    from layerscope.cost.timed import TimedGraph

log = logging.getLogger(__name__)

__all__ = [
    "POLICIES",
    "Dispatch",
    "EngineChoice",
    "EngineSet",
    "InOrderPolicy",
    "ListPolicy",
    "Schedule",
    "ScheduleProblem",
    "SchedulingPolicy",
    "get_policy",
    "heft_schedule",
    "register_policy",
    "schedule",
]


@dataclass(frozen=True, eq=False)
class ScheduleProblem:
    """Ops to schedule as arrays: dependencies in CSR form and the parts of each op's time.

    ``indices[indptr[i]:indptr[i+1]]`` are the ops op ``i`` depends on (all ``< i``).
    """

    indptr: np.ndarray
    """int64, length ``n + 1``."""
    indices: np.ndarray
    """int64, dependency op indices."""
    compute_s: np.ndarray
    """Time of each op's arithmetic on the whole chip, float seconds."""
    memory_bytes: np.ndarray
    """Bytes each op moves to/from main memory."""
    overhead_s: np.ndarray
    """Fixed per-op cost (launch), float seconds."""
    bandwidth_bytes_per_s: float
    """The chip's achievable main-memory bandwidth."""
    name: str = "graph"

    def __post_init__(self) -> None:
        n = len(self.compute_s)
        conv = {
            "indptr": np.ascontiguousarray(self.indptr, dtype=np.int64),
            "indices": np.ascontiguousarray(self.indices, dtype=np.int64),
            "compute_s": np.ascontiguousarray(self.compute_s, dtype=np.float64),
            "memory_bytes": np.ascontiguousarray(self.memory_bytes, dtype=np.float64),
            "overhead_s": np.ascontiguousarray(self.overhead_s, dtype=np.float64),
        }
        for key, arr in conv.items():
            object.__setattr__(self, key, arr)
        for key in ("memory_bytes", "overhead_s"):
            if len(conv[key]) != n:
                raise ScheduleError(f"{key}: length {len(conv[key])}, expected {n} (one per op)")
        for key in ("compute_s", "memory_bytes", "overhead_s"):
            arr = conv[key]
            if n and (not np.all(np.isfinite(arr)) or arr.min() < 0):
                raise ScheduleError(f"{key}: every value must be finite and >= 0")
        indptr, indices = conv["indptr"], conv["indices"]
        if len(indptr) != n + 1 or (n + 1 and indptr[0] != 0) or np.any(np.diff(indptr) < 0):
            raise ScheduleError(f"indptr: must be non-decreasing, start at 0 and have n+1={n + 1} entries")
        if indptr[-1] != len(indices):
            raise ScheduleError(f"indptr[-1]={indptr[-1]} does not match len(indices)={len(indices)}")
        if len(indices):
            owner = np.repeat(np.arange(n, dtype=np.int64), np.diff(indptr))
            if indices.min() < 0 or np.any(indices >= owner):
                bad = int(np.flatnonzero((indices >= owner) | (indices < 0))[0])
                raise ScheduleError(
                    f"op {int(owner[bad])} depends on op {int(indices[bad])}: dependencies must be "
                    "earlier ops (program order must be a topological order)"
                )
        bw = float(self.bandwidth_bytes_per_s)
        if not (bw > 0 and math.isfinite(bw)):
            raise ScheduleError(f"bandwidth_bytes_per_s: {bw!r} must be a positive finite number")
        object.__setattr__(self, "bandwidth_bytes_per_s", bw)

    @property
    def n(self) -> int:
        return len(self.compute_s)

    def __len__(self) -> int:
        return self.n

    @property
    def num_edges(self) -> int:
        return len(self.indices)

    @property
    def total_memory_bytes(self) -> float:
        return float(self.memory_bytes.sum())

    def dependencies(self, i: int) -> np.ndarray:
        return self.indices[self.indptr[i] : self.indptr[i + 1]]

    @classmethod
    def from_dependencies(
        cls,
        dependencies: Sequence[Sequence[int]],
        compute_s: Sequence[float] | np.ndarray,
        memory_bytes: Sequence[float] | np.ndarray,
        overhead_s: Sequence[float] | np.ndarray,
        bandwidth_bytes_per_s: float,
        name: str = "graph",
    ) -> ScheduleProblem:
        """Build from per-op lists of dependency indices."""
        lengths = np.fromiter((len(d) for d in dependencies), dtype=np.int64, count=len(dependencies))
        indptr = np.zeros(len(dependencies) + 1, dtype=np.int64)
        np.cumsum(lengths, out=indptr[1:])
        indices = np.fromiter((j for d in dependencies for j in d), dtype=np.int64, count=int(indptr[-1]))
        return cls(indptr, indices, np.asarray(compute_s), np.asarray(memory_bytes), np.asarray(overhead_s),
                   bandwidth_bytes_per_s, name)

    @classmethod
    def from_timed(cls, tg: TimedGraph) -> ScheduleProblem:
        """The problem of a :class:`~layerscope.cost.timed.TimedGraph`.

        The bandwidth is the one the cost model used: ``memory_bytes / memory_s`` of the ops that
        move memory (the median, robust to models that fold cache levels into some ops); if no op
        moves memory, the hardware spec's figure is used.
        """
        deps = tg.graph.dependencies
        mem_b = np.asarray(tg.memory_bytes, dtype=np.float64)
        mem_s = np.asarray(tg.memory_s, dtype=np.float64)
        mask = (mem_b > 0) & (mem_s > 0)
        bandwidth = float(np.median(mem_b[mask] / mem_s[mask])) if mask.any() else _hardware_bandwidth(tg.hardware)
        return cls.from_dependencies(deps, tg.compute_s, mem_b, tg.overhead_s, bandwidth, name=tg.graph.name)


def _hardware_bandwidth(hardware: object) -> float:
    for attr in ("achievable_bandwidth_bytes_per_s", "memory_bandwidth_bytes_per_s", "bandwidth_bytes_per_s"):
        value = getattr(hardware, attr, None)
        if value is not None:
            value = value() if callable(value) else value
            return float(value)  # type: ignore[arg-type]
    # No op moves memory, so the figure does not affect any time.
    return 1.0


@dataclass(frozen=True)
class EngineSet:
    """Compute engines: the fraction of the chip's compute throughput each one owns."""

    compute_fraction: tuple[float, ...]
    names: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        fr = tuple(float(f) for f in self.compute_fraction)
        if not fr:
            raise ScheduleError("engines: need at least one engine")
        for k, f in enumerate(fr):
            if not (f > 0 and math.isfinite(f)):
                raise ScheduleError(f"engines: compute fraction of engine {k} is {f!r}; must be > 0")
        object.__setattr__(self, "compute_fraction", fr)
        names = tuple(self.names) or tuple(f"engine {k}" for k in range(len(fr)))
        if len(names) != len(fr):
            raise ScheduleError(f"engines: {len(names)} names for {len(fr)} engines")
        object.__setattr__(self, "names", names)

    @classmethod
    def uniform(cls, count: int) -> EngineSet:
        """``count`` engines of ``1/count`` of the chip each."""
        if isinstance(count, bool) or not isinstance(count, (int, np.integer)) or count < 1:
            raise ScheduleError(f"engines: {count!r} is not a positive integer")
        return cls(tuple([1.0 / int(count)] * int(count)))

    @property
    def count(self) -> int:
        return len(self.compute_fraction)

    def __len__(self) -> int:
        return self.count

    @property
    def is_uniform(self) -> bool:
        return len(set(self.compute_fraction)) == 1


@dataclass(frozen=True, eq=False)
class Schedule:
    """Where and when each op runs. Arrays are aligned with the problem's ops."""

    problem: ScheduleProblem
    engines: EngineSet
    policy: str
    share_bandwidth: bool
    engine: np.ndarray
    """int32 engine index of each op."""
    start_ns: np.ndarray
    """int64."""
    end_ns: np.ndarray
    """int64."""
    engine_busy_ns: np.ndarray
    """int64 per engine: time it spent running ops."""
    bandwidth_time_ns: np.ndarray
    """int64 times at which the memory bandwidth in use changes (a step function)."""
    bandwidth_bytes_per_s: np.ndarray
    """float64 bandwidth in use from each of ``bandwidth_time_ns`` to the next."""
    extra: dict[str, object] = field(default_factory=dict)

    @property
    def makespan_ns(self) -> int:
        return int(self.end_ns.max()) if len(self.end_ns) else 0

    @property
    def duration_ns(self) -> np.ndarray:
        return self.end_ns - self.start_ns

    @property
    def engine_utilization(self) -> float:
        """Busy engine-time over ``engines x makespan``."""
        span = self.makespan_ns
        return float(self.engine_busy_ns.sum()) / (self.engines.count * span) if span else 0.0

    @property
    def bandwidth_utilization(self) -> float:
        """Bytes moved over what the chip's bandwidth could move in the makespan."""
        span = self.makespan_ns
        if not span:
            return 0.0
        return self.problem.total_memory_bytes / (self.problem.bandwidth_bytes_per_s * span / NS_PER_S)

    def engines_busy(self) -> tuple[np.ndarray, np.ndarray]:
        """Step function of how many engines run an op: ``(time_ns, count)`` at each change."""
        times = np.concatenate([self.start_ns, self.end_ns])
        delta = np.concatenate([np.ones(len(self.start_ns), np.int64), -np.ones(len(self.end_ns), np.int64)])
        return step_function(times, delta)

    def summary(self) -> dict[str, object]:
        return {
            "graph": self.problem.name,
            "ops": self.problem.n,
            "engines": self.engines.count,
            "policy": self.policy,
            "share_bandwidth": self.share_bandwidth,
            "makespan_ns": self.makespan_ns,
            "engine_utilization": self.engine_utilization,
            "bandwidth_utilization": self.bandwidth_utilization,
            "engine_busy_ns": self.engine_busy_ns.tolist(),
        }


def step_function(times: np.ndarray, delta: np.ndarray, atol: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """Cumulative sum of ``delta`` at sorted ``times``; one entry per distinct time, samples that repeat the
    previous value dropped (e.g. one op ends as the next starts). With ``atol`` > 0 (float deltas whose sums need not
    cancel exactly) a change of at most ``atol`` repeats the value, and a level within ``atol`` of 0 is 0."""
    if len(times) == 0:
        return np.zeros(0, np.int64), np.zeros(0, delta.dtype)
    order = np.argsort(times, kind="stable")
    t = times[order]
    level = np.cumsum(delta[order])
    last = np.ones(len(t), dtype=bool)
    last[:-1] = t[1:] != t[:-1]
    t, level = t[last], level[last]
    changed = np.ones(len(t), dtype=bool)
    changed[1:] = np.abs(level[1:] - level[:-1]) > atol if atol else level[1:] != level[:-1]
    t, level = t[changed], level[changed]
    return t, (np.where(np.abs(level) < atol, 0.0, level) if atol else level)


# --------------------------------------------------------------------------------------------
# The event-driven simulation shared by all policies.


@dataclass
class _Prepared:
    """The event loop's inputs as contiguous arrays (float64 unless noted)."""

    n: int
    overhead_ns: np.ndarray
    main_ns: np.ndarray | None
    """Standalone main-phase time per op (uniform engines) or None (per-engine, computed at start)."""
    demand: np.ndarray | None
    compute_ns: np.ndarray
    bytes_: np.ndarray
    bw_per_ns: float
    succ_ptr: np.ndarray
    """int64, length ``n + 1``."""
    succ_idx: np.ndarray
    """int64."""
    indegree: np.ndarray
    """int64."""
    fraction: tuple[float, ...]


def _successors(problem: ScheduleProblem) -> tuple[np.ndarray, np.ndarray]:
    n = problem.n
    owner = np.repeat(np.arange(n, dtype=np.int64), np.diff(problem.indptr))
    order = np.argsort(problem.indices, kind="stable")
    counts = np.bincount(problem.indices, minlength=n) if len(problem.indices) else np.zeros(n, np.int64)
    ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(counts, out=ptr[1:])
    return ptr, owner[order]


def _prepare(problem: ScheduleProblem, engines: EngineSet) -> _Prepared:
    bw_per_ns = problem.bandwidth_bytes_per_s / NS_PER_S
    compute_ns = problem.compute_s * NS_PER_S
    mem_ns = problem.memory_bytes / bw_per_ns
    main_ns = demand = None
    if engines.is_uniform:
        main_ns = np.maximum(compute_ns / engines.compute_fraction[0], mem_ns)
        # Zero-time ops with bytes would need infinite bandwidth; they cannot occur (bytes > 0 => main > 0).
        demand = np.divide(problem.memory_bytes, main_ns, out=np.zeros_like(main_ns), where=main_ns > 0)
    succ_ptr, succ_idx = _successors(problem)
    return _Prepared(
        n=problem.n,
        overhead_ns=problem.overhead_s * NS_PER_S,
        main_ns=main_ns,
        demand=demand,
        compute_ns=compute_ns,
        bytes_=problem.memory_bytes,
        bw_per_ns=bw_per_ns,
        succ_ptr=succ_ptr,
        succ_idx=succ_idx,
        indegree=np.diff(problem.indptr),
        fraction=engines.compute_fraction,
    )


def standalone_ns(problem: ScheduleProblem, engines: EngineSet | int) -> np.ndarray:
    """Each op's duration alone on (the fastest) one engine with the full bandwidth, float ns."""
    es = engines if isinstance(engines, EngineSet) else EngineSet.uniform(engines)
    frac = max(es.compute_fraction)
    mem_ns = problem.memory_bytes / (problem.bandwidth_bytes_per_s / NS_PER_S)
    return problem.overhead_s * NS_PER_S + np.maximum(problem.compute_s * NS_PER_S / frac, mem_ns)


def upward_rank(problem: ScheduleProblem, weight_ns: np.ndarray) -> np.ndarray:
    """HEFT upward rank: ``weight[i] + max(rank[s] for successors s)`` (0 for none)."""
    n = problem.n
    best = [0.0] * n
    w = weight_ns.tolist()
    ptr = problem.indptr.tolist()
    idx = problem.indices.tolist()
    for i in range(n - 1, -1, -1):
        r = best[i] + w[i]
        best[i] = r
        for k in range(ptr[i], ptr[i + 1]):
            p = idx[k]
            if best[p] < r:
                best[p] = r
    return np.asarray(best, dtype=np.float64)


# Event codes: op index * 4 + kind.
_KIND_FINISH = 0  # op ends at a fixed time
_KIND_ENTER = 1  # op's overhead ends; it enters its bandwidth-sharing main phase
_KIND_MEM = 2  # projected end of a sharing op (valid if it equals the op's current projection)


@contextmanager
def paused_gc() -> Iterator[None]:
    """Pause the cyclic garbage collector: the event loop allocates millions of acyclic tuples,
    and collections triggered by them cost more than the loop itself."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


@dataclass(frozen=True, eq=False)
class _Plan:
    """What a policy gives the event loop, computed once per run: its name, its queue discipline and
    engine choice, and its per-op keys."""

    name: str
    dispatch: Dispatch
    engine_choice: EngineChoice
    priority: np.ndarray
    """float64 per op: the ready heap's key (``READY``)."""
    order: np.ndarray | None
    """int64 per op: the dispatch sequence (``RESERVE``: ops by priority, ties by index), else None."""


def _plan_of(policy: SchedulingPolicy, problem: ScheduleProblem, engines: EngineSet) -> _Plan:
    """Ask ``policy`` for its hooks and check them (the C loop trusts what it is given)."""
    name = policy.name
    try:
        dispatch, choice = Dispatch(policy.dispatch), EngineChoice(policy.engine_choice)
    except ValueError as exc:
        raise ScheduleError(f"policy {name!r}: {exc}") from None
    key = np.ascontiguousarray(policy.priority(problem, engines), dtype=np.float64)
    if key.shape != (problem.n,):
        raise ScheduleError(f"policy {name!r}: priority has shape {key.shape}, expected ({problem.n},)")
    if np.isnan(key).any():
        raise ScheduleError(f"policy {name!r}: priority holds NaN")
    order = None
    if dispatch is Dispatch.RESERVE:
        order = np.argsort(key, kind="stable").astype(np.int64, copy=False)
        position = np.empty(problem.n, dtype=np.int64)
        position[order] = np.arange(problem.n, dtype=np.int64)
        owner = np.repeat(np.arange(problem.n, dtype=np.int64), np.diff(problem.indptr))
        if np.any(position[problem.indices] >= position[owner]):
            raise ScheduleError(f"policy {name!r}: the RESERVE dispatch needs a priority order that is a "
                                "topological order (every op after its dependencies)")
    return _Plan(name, dispatch, choice, key, order)


def _run(problem: ScheduleProblem, engines: EngineSet, share_bandwidth: bool, policy: SchedulingPolicy) -> Schedule:
    plan = _plan_of(policy, problem, engines)
    prep = _prepare(problem, engines)
    native = _native_loop()
    with paused_gc():
        if native is not None:
            loop = _run_native(native, prep, engines.count, share_bandwidth, plan)
        else:
            loop = _run_loop(prep, engines.count, share_bandwidth, plan)
    return _schedule_of(problem, engines, plan.name, share_bandwidth, prep, *loop)


def _native_loop() -> Any | None:
    """The C event loop (``_event_loop.c``), or None where setup.py could not build it or
    ``LAYERSCOPE_SCHEDULE_NATIVE=0`` asks for the Python loop."""
    return native_extension(_event_loop, "LAYERSCOPE_SCHEDULE_NATIVE")


#: What an event loop returns: engine, start and end (float ns) per op; the bandwidth step function's
#: times (float ns) and values (bytes per ns).
_LoopResult = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def _run_native(native: Any, prep: _Prepared, m: int, share_bandwidth: bool, plan: _Plan) -> _LoopResult:
    """:func:`_run_loop` in C: the same simulation, bit for bit (tests/schedule/test_native.py)."""
    n = prep.n
    eng = np.empty(n, dtype=np.int32)
    start = np.empty(n, dtype=np.float64)
    end = np.empty(n, dtype=np.float64)
    status, bw_t, bw_v = native.run(
        int(plan.dispatch), int(plan.engine_choice), share_bandwidth, n, m, prep.bw_per_ns, prep.overhead_ns,
        prep.main_ns, prep.demand, prep.compute_ns, prep.bytes_, np.asarray(prep.fraction, dtype=np.float64),
        prep.succ_ptr, prep.succ_idx, prep.indegree, plan.priority, plan.order, eng, start, end)
    if status:
        raise ScheduleError("internal: no event pending but ops remain (dependency cycle?)")
    return eng, start, end, np.frombuffer(bw_t, dtype=np.float64), np.frombuffer(bw_v, dtype=np.float64)


def _run_loop(prep: _Prepared, m: int, share_bandwidth: bool, plan: _Plan) -> _LoopResult:
    """The event-driven simulation in Python (where the C loop is not built). It knows no policy by
    name: it runs the plan's dispatch discipline and engine choice on the plan's keys."""
    n = prep.n
    ovh = prep.overhead_ns.tolist()
    main_ns = prep.main_ns.tolist() if prep.main_ns is not None else None
    demand = prep.demand.tolist() if prep.demand is not None else None
    bytes_ = prep.bytes_.tolist()
    compute_ns = prep.compute_ns.tolist()
    fraction = prep.fraction
    bw = prep.bw_per_ns
    succ_ptr, succ_idx = prep.succ_ptr.tolist(), prep.succ_idx.tolist()
    indeg = prep.indegree.tolist()

    eng = [-1] * n
    start = [0.0] * n
    end = [0.0] * n
    # Sharing state, indexed by op: remaining standalone main time is (proj - now) * rate.
    proj = [0.0] * n
    rate = [1.0] * n
    dem_of = [0.0] * n
    sharing: list[int] = []
    bw_t: list[float] = [0.0]
    bw_v: list[float] = [0.0]

    events: list[tuple[float, int]] = []
    push, pop = heapq.heappush, heapq.heappop
    reserve = plan.dispatch == Dispatch.RESERVE
    earliest = plan.engine_choice == EngineChoice.EARLIEST_FREE
    uniform = main_ns is not None

    # Free engines, keyed by when they became free (EARLIEST_FREE) or by speed (FASTEST); ties: lowest index.
    if earliest:
        free: list[tuple[float, int]] = [(0.0, e) for e in range(m)]
    else:
        free = [(-fraction[e], e) for e in range(m)]
    heapq.heapify(free)
    ready: list[tuple[float, int]] = []  # READY: (priority, op)
    key = plan.priority.tolist()
    order: list[int] = plan.order.tolist() if plan.order is not None else []
    if reserve and len(order) != n:
        raise ScheduleError("internal: the RESERVE dispatch needs an order of every op")
    if not reserve:
        for i in range(n):
            if indeg[i] == 0:
                ready.append((key[i], i))
        heapq.heapify(ready)
    next_op = 0  # RESERVE: position in `order` of the next op to dispatch
    done = 0
    now = 0.0
    entering: list[int] = []
    leaving = False

    def start_op(i: int, e: int, t: float) -> None:
        eng[i] = e
        start[i] = t
        if uniform:
            mt = main_ns[i]  # type: ignore[index]
            d = demand[i]  # type: ignore[index]
        else:
            mt = max(compute_ns[i] / fraction[e], bytes_[i] / bw)
            d = bytes_[i] / mt if mt > 0 else 0.0
        if not share_bandwidth or d == 0.0:
            push(events, (t + ovh[i] + mt, i * 4 + _KIND_FINISH))
        else:
            dem_of[i] = d
            proj[i] = mt  # standalone main time, until the op enters the sharing set
            if ovh[i] > 0:
                push(events, (t + ovh[i], i * 4 + _KIND_ENTER))
            else:
                entering.append(i)

    while True:
        # 1. Dispatch at `now`.
        if reserve:
            while next_op < n and free:
                e = pop(free)[1]
                i = order[next_op]
                next_op += 1
                if indeg[i] == 0:
                    start_op(i, e, now)
                else:
                    eng[i] = e  # reserved; starts when its last dependency ends
        else:
            while ready and free:
                i = pop(ready)[1]
                start_op(i, pop(free)[1], now)
        # 2. Re-split the bandwidth if the set of ops in their main phase changed.
        if entering or leaving:
            _reshare(now, sharing, entering, proj, rate, dem_of, bw, bw_t, bw_v, events)
            entering.clear()
            leaving = False
        if done == n:
            break
        if not events:
            raise ScheduleError("internal: no event pending but ops remain (dependency cycle?)")
        # 3. Advance to the next event time and process every event at it.
        now = events[0][0]
        while events and events[0][0] == now:
            code = pop(events)[1]
            i, kind = code >> 2, code & 3
            if kind == _KIND_ENTER:
                entering.append(i)
                continue
            if kind == _KIND_MEM:
                if proj[i] != now or rate[i] <= 0:
                    continue  # stale projection
                rate[i] = -1.0  # leaves the sharing set
                leaving = True
            end[i] = now
            done += 1
            e = eng[i]
            push(free, (now, e) if earliest else (-fraction[e], e))
            for k in range(succ_ptr[i], succ_ptr[i + 1]):
                s = succ_idx[k]
                indeg[s] -= 1
                if indeg[s] == 0:
                    if reserve:
                        if eng[s] >= 0:
                            start_op(s, eng[s], now)
                    else:
                        push(ready, (key[s], s))

    return (np.asarray(eng, dtype=np.int32), np.asarray(start, dtype=np.float64), np.asarray(end, dtype=np.float64),
            np.asarray(bw_t, dtype=np.float64), np.asarray(bw_v, dtype=np.float64))


def _schedule_of(problem: ScheduleProblem, engines: EngineSet, policy: str, share_bandwidth: bool, prep: _Prepared,
                 eng_a: np.ndarray, start: np.ndarray, end: np.ndarray, bw_t: np.ndarray, bw_v: np.ndarray) -> Schedule:
    """The :class:`Schedule` of an event loop's result: times rounded to integer ns once, here."""
    start_a = np.rint(start).astype(np.int64)
    end_a = np.rint(end).astype(np.int64)
    busy = np.bincount(eng_a, weights=(end_a - start_a).astype(np.float64), minlength=engines.count).astype(np.int64)
    if share_bandwidth:
        bt = np.rint(bw_t).astype(np.int64)
        bv = bw_v * NS_PER_S
        keep = np.ones(len(bt), dtype=bool)
        keep[:-1] = bt[1:] != bt[:-1]  # last value at each instant wins
        bt, bv = bt[keep], bv[keep]
    else:
        bt, bv = _unshared_bandwidth(problem, engines, start_a, end_a, eng_a, prep.overhead_ns)
    return Schedule(problem, engines, policy, share_bandwidth, eng_a, start_a, end_a, busy, bt, bv)


def _reshare(
    now: float,
    sharing: list[int],
    entering: list[int],
    proj: list[float],
    rate: list[float],
    dem_of: list[float],
    bw: float,
    bw_t: list[float],
    bw_v: list[float],
    events: list[tuple[float, int]],
) -> None:
    """Re-split the bandwidth among the ops in their main phase (water filling) at ``now``.

    An op's remaining standalone main time is ``(proj - now) * rate``; after the split its new
    projected end is pushed as an event (the old one goes stale and is skipped when popped).
    """
    push = heapq.heappush
    stay = []
    total = 0.0
    for i in sharing:
        if rate[i] > 0:
            stay.append(i)
            total += dem_of[i]
    for i in entering:
        total += dem_of[i]
    level = math.inf
    if total > bw:
        # Water filling (max-min fairness): ops demanding less than the level get their demand.
        left = bw
        k = len(stay) + len(entering)
        level = left / k
        for d in sorted([dem_of[i] for i in stay] + [dem_of[i] for i in entering]):
            if d > level:
                break
            left -= d
            k -= 1
            level = left / k if k else math.inf
    for i in stay:
        d = dem_of[i]
        r_new = level / d if d > level else 1.0
        r = rate[i]
        if r_new != r:
            proj[i] = now + max(proj[i] - now, 0.0) * r / r_new
            rate[i] = r_new
            push(events, (proj[i], i * 4 + _KIND_MEM))
    for i in entering:
        d = dem_of[i]
        r_new = level / d if d > level else 1.0
        proj[i] = now + proj[i] / r_new  # proj held the standalone main time
        rate[i] = r_new
        push(events, (proj[i], i * 4 + _KIND_MEM))
        stay.append(i)
    sharing[:] = stay
    used = bw if total > bw else total
    if bw_v[-1] != used:
        bw_t.append(now)
        bw_v.append(used)


def _unshared_bandwidth(
    problem: ScheduleProblem,
    engines: EngineSet,
    start_a: np.ndarray,
    end_a: np.ndarray,
    eng_a: np.ndarray,
    ovh: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Bandwidth in use when each op streams at its standalone demand during its main phase."""
    mask = problem.memory_bytes > 0
    if not mask.any():
        return np.zeros(1, np.int64), np.zeros(1, np.float64)
    main_start = np.rint(ovh + start_a).astype(np.int64)
    dur = (end_a - main_start).astype(np.float64)
    rate = np.divide(problem.memory_bytes, dur, out=np.zeros(problem.n), where=dur > 0) * NS_PER_S
    sel = mask & (dur > 0)
    t, v = step_function(
        np.concatenate([main_start[sel], end_a[sel]]), np.concatenate([rate[sel], -rate[sel]])
    )
    v = np.where(np.abs(v) < 1e-6 * problem.bandwidth_bytes_per_s, 0.0, v)
    return np.concatenate([[0], t]).astype(np.int64), np.concatenate([[0.0], v])


# --------------------------------------------------------------------------------------------
# Policies: registered classes whose hooks the event loop reads.


class Dispatch(enum.IntEnum):
    """How the event loop hands ops to free engines (a policy's :attr:`SchedulingPolicy.dispatch`).

    The value is what the C loop receives; both loops implement each discipline once, for every policy."""

    RESERVE = 0
    """Ops are dispatched one after another in priority order (which must be a topological order),
    each to the next free engine, which it reserves: it starts when its last dependency ends."""
    READY = 1
    """At every event, free engines take the ready ops (all dependencies ended) of lowest priority key
    (ties: lowest op index); any ready op fills an idle engine."""


class EngineChoice(enum.IntEnum):
    """Which free engine the next dispatched op gets (a policy's :attr:`SchedulingPolicy.engine_choice`)."""

    EARLIEST_FREE = 0
    """The engine that became free earliest (ties: lowest index)."""
    FASTEST = 1
    """The engine with the largest compute fraction (ties: lowest index)."""


class SchedulingPolicy:
    """A scheduling policy: what the event loop calls to order ops and pick engines.

    A new policy is one subclass registered with :func:`register_policy`: it declares :attr:`name`,
    :attr:`dispatch` and :attr:`engine_choice` and computes :meth:`priority`; both event loops (Python
    and C) run it with no edit. :meth:`schedule` may be overridden to combine simulations (``list``
    keeps the shorter of its own schedule and program order's)."""

    name: ClassVar[str] = ""
    """The registered name, and :attr:`Schedule.policy` of its schedules."""
    dispatch: ClassVar[Dispatch] = Dispatch.READY
    engine_choice: ClassVar[EngineChoice] = EngineChoice.FASTEST

    def priority(self, problem: ScheduleProblem, engines: EngineSet) -> np.ndarray:
        """One float64 key per op, computed once before the loop runs: ops of lower key go first
        (ties: lower index). Program order by default."""
        return np.arange(problem.n, dtype=np.float64)

    def simulate(self, problem: ScheduleProblem, engines: EngineSet, share_bandwidth: bool) -> Schedule:
        """One run of the event loop with this policy's hooks."""
        return _run(problem, engines, share_bandwidth, self)

    def schedule(self, problem: ScheduleProblem, engines: EngineSet, share_bandwidth: bool) -> Schedule:
        """The policy's schedule of a non-empty problem: by default one :meth:`simulate`."""
        return self.simulate(problem, engines, share_bandwidth)

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


#: Scheduling policies by name: classes, instantiated with no arguments by :func:`get_policy`.
POLICIES: Registry[type[SchedulingPolicy]] = Registry("policy", ScheduleError)

_P = TypeVar("_P", bound=type[SchedulingPolicy])


def register_policy(cls: _P) -> _P:
    """Class decorator: register a :class:`SchedulingPolicy` subclass in :data:`POLICIES` under its ``name``."""
    POLICIES.add(cls.name, cls)
    return cls


@register_policy
class InOrderPolicy(SchedulingPolicy):
    """``in-order``: program order, each op to the engine that became free earliest."""

    name = "in-order"
    dispatch = Dispatch.RESERVE
    engine_choice = EngineChoice.EARLIEST_FREE


@register_policy
class ListPolicy(SchedulingPolicy):
    """``list``: HEFT upward rank on the fastest free engine, never worse than ``in-order``."""

    name = "list"
    dispatch = Dispatch.READY
    engine_choice = EngineChoice.FASTEST

    def priority(self, problem: ScheduleProblem, engines: EngineSet) -> np.ndarray:
        # highest upward rank first: the key is its negation (exact, so the heaps order as before)
        return -upward_rank(problem, standalone_ns(problem, engines))

    def schedule(self, problem: ScheduleProblem, engines: EngineSet, share_bandwidth: bool) -> Schedule:
        heft = self.simulate(problem, engines, share_bandwidth)
        if engines.count == 1:
            return heft  # one engine runs one op at a time: every order gives the same makespan
        # Greedy priority schedules suffer Graham's anomalies (Graham 1969): on ~2% of random DAGs
        # the HEFT order ends later than plain program order. `list` keeps the shorter of the two,
        # so it is never worse than `in-order`.
        ordered = InOrderPolicy().simulate(problem, engines, share_bandwidth)
        if ordered.makespan_ns < heft.makespan_ns:
            return dataclasses.replace(ordered, policy=self.name)
        return heft


def heft_schedule(problem: ScheduleProblem, engines: int | EngineSet, share_bandwidth: bool = True) -> Schedule:
    """HEFT's own schedule: the ``list`` policy without its fallback to program order (Topcuoglu et al.,
    IEEE TPDS 2002), so that its priority order can be tested on its own."""
    return ListPolicy().simulate(problem, as_engine_set(engines), share_bandwidth)


def get_policy(policy: str | SchedulingPolicy | type[SchedulingPolicy]) -> SchedulingPolicy:
    """The policy object of a registered name (:class:`ScheduleError` listing the known names otherwise),
    of a policy class, or the policy object itself."""
    if isinstance(policy, SchedulingPolicy):
        return policy
    if isinstance(policy, type) and issubclass(policy, SchedulingPolicy):
        return policy()
    return POLICIES.lookup(policy)()


def as_engine_set(engines: int | EngineSet) -> EngineSet:
    if isinstance(engines, EngineSet):
        return engines
    return EngineSet.uniform(engines)


def schedule(
    problem: ScheduleProblem,
    engines: int | EngineSet,
    policy: str | SchedulingPolicy | type[SchedulingPolicy] = "list",
    share_bandwidth: bool = True,
) -> Schedule:
    """Schedule ``problem`` on ``engines`` with a policy: a name in :data:`POLICIES` or a
    :class:`SchedulingPolicy` (see the module docstring)."""
    pol = get_policy(policy)
    es = as_engine_set(engines)
    if problem.n == 0:
        z = np.zeros(0, np.int64)
        return Schedule(problem, es, pol.name, share_bandwidth, np.zeros(0, np.int32), z, z,
                        np.zeros(es.count, np.int64), np.zeros(1, np.int64), np.zeros(1))
    return pol.schedule(problem, es, share_bandwidth)
