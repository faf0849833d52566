"""The scheduler: hand-computed cases and properties over random DAGs (layerscope/schedule/core.py)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from layerscope.errors import ScheduleError
from layerscope.schedule import POLICIES, EngineSet, ScheduleProblem, schedule, standalone_ns, upward_rank
from layerscope.schedule.core import Schedule, heft_schedule

from .conftest import BANDWIDTH, critical_path_ns, problems

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _diamond() -> ScheduleProblem:
    # 0 -> {1, 2} -> 3; 1 and 2 each move 1000 B (1000 ns alone at 1 B/ns).
    return ScheduleProblem.from_dependencies(
        [[], [0], [0], [1, 2]], [1e-6, 0.0, 0.0, 1e-6], [0, 1000, 1000, 0], [0, 0, 0, 0], BANDWIDTH)


class TestHandComputed:
    def test_one_engine_runs_ops_back_to_back(self) -> None:
        s = schedule(_diamond(), 1)
        assert s.start_ns.tolist() == [0, 1000, 2000, 3000]
        assert s.end_ns.tolist() == [1000, 2000, 3000, 4000]
        assert s.makespan_ns == 4000
        assert s.engine_busy_ns.tolist() == [4000]

    def test_two_engines_split_compute_but_share_bandwidth(self) -> None:
        # Compute takes 2x on half the chip (2000 ns); the two memory ops run together at half
        # the bandwidth each: 2000 ns, not 1000.
        s = schedule(_diamond(), 2)
        assert s.start_ns.tolist() == [0, 2000, 2000, 4000]
        assert s.end_ns.tolist() == [2000, 4000, 4000, 6000]
        assert sorted(s.engine[[1, 2]].tolist()) == [0, 1]

    def test_unshared_bandwidth_lets_memory_ops_overlap(self) -> None:
        s = schedule(_diamond(), 2, share_bandwidth=False)
        assert s.end_ns.tolist() == [2000, 3000, 3000, 5000]

    def test_water_filling_gives_small_demands_their_rate(self) -> None:
        # op 0: 4000 ns of compute on half the chip, 1000 B -> demand 0.25 B/ns; op 1: 2000 B of
        # pure traffic -> demand 1 B/ns. Max-min fair: op 0 keeps 0.25, op 1 gets 0.75 -> 2667 ns.
        p = ScheduleProblem.from_dependencies([[], []], [2e-6, 0.0], [1000, 2000], [0, 0], BANDWIDTH)
        s = schedule(p, 2)
        assert s.end_ns.tolist() == [4000, 2667]
        assert s.bandwidth_time_ns.tolist() == [0, 2667, 4000]
        assert s.bandwidth_bytes_per_s.tolist() == pytest.approx([1e9, 0.25e9, 0.0])

    def test_memory_bound_ops_gain_nothing_from_engines(self) -> None:
        p = ScheduleProblem.from_dependencies([[]] * 8, [0.0] * 8, [1000] * 8, [0] * 8, BANDWIDTH)
        for n in (1, 2, 4, 8):
            assert schedule(p, n).makespan_ns == 8000
        assert schedule(p, 8, share_bandwidth=False).makespan_ns == 1000

    def test_overhead_uses_no_bandwidth(self) -> None:
        # Two ops of 500 ns launch + 1000 B: the launches overlap, the traffic is shared.
        p = ScheduleProblem.from_dependencies([[], []], [0, 0], [1000, 1000], [5e-7, 5e-7], BANDWIDTH)
        s = schedule(p, 2)
        assert s.end_ns.tolist() == [2500, 2500]

    def test_in_order_reserves_the_earliest_free_engine(self) -> None:
        # 0 (long) -> 2; 1 independent. In-order puts 2 on engine 0's successor slot after 0.
        p = ScheduleProblem.from_dependencies([[], [], [0]], [4e-6, 1e-6, 1e-6], [0, 0, 0], [0, 0, 0], BANDWIDTH)
        s = schedule(p, 2, "in-order")
        assert s.engine.tolist() == [0, 1, 1]
        assert s.start_ns.tolist() == [0, 0, 8000]

    def test_list_on_one_engine_runs_the_critical_path_first(self) -> None:
        # One engine, unit ops (1000 ns): 0 -> {1, 2}, 2 -> 3 -> 4. Upward ranks (ns): 4: 1000, 3: 2000,
        # 2: 3000, 1: 1000, 0: 1000 + max(1000, 3000) = 4000. After 0, ready {1: 1000, 2: 3000} -> 2;
        # then {1: 1000, 3: 2000} -> 3; then {1: 1000, 4: 1000}, a tie -> 1 (lower index), then 4.
        # Program order (or the lowest rank first) would run 1 at 1000.
        p = ScheduleProblem.from_dependencies(
            [[], [0], [0], [2], [3]], [1e-6] * 5, [0] * 5, [0] * 5, BANDWIDTH)
        rank = upward_rank(p, standalone_ns(p, 1))
        assert rank.tolist() == pytest.approx([4000, 1000, 3000, 2000, 1000])
        s = schedule(p, 1, "list")
        assert s.start_ns.tolist() == [0, 3000, 1000, 2000, 4000]
        assert schedule(p, 1, "in-order").start_ns.tolist() == [0, 1000, 2000, 3000, 4000]

    def test_heterogeneous_engines(self) -> None:
        # Engine 1 owns 3/4 of the compute: the single op goes there and takes 1000/0.75 ns.
        p = ScheduleProblem.from_dependencies([[]], [1e-6], [0], [0], BANDWIDTH)
        s = schedule(p, EngineSet((0.25, 0.75)))
        assert s.engine.tolist() == [1]
        assert s.end_ns.tolist() == [1333]

    def test_empty_problem(self) -> None:
        p = ScheduleProblem.from_dependencies([], [], [], [], BANDWIDTH)
        assert schedule(p, 3).makespan_ns == 0


class TestErrors:
    def test_unknown_policy_lists_known(self) -> None:
        with pytest.raises(ScheduleError, match="known: in-order, list"):
            schedule(_diamond(), 2, "fifo")

    @pytest.mark.parametrize("engines", [0, -1, True, 2.5])
    def test_bad_engine_count(self, engines: object) -> None:
        with pytest.raises(ScheduleError, match="engines"):
            schedule(_diamond(), engines)  # type: ignore[arg-type]

    def test_forward_dependency_is_rejected(self) -> None:
        with pytest.raises(ScheduleError, match="earlier ops"):
            ScheduleProblem.from_dependencies([[1], []], [0, 0], [0, 0], [0, 0], BANDWIDTH)

    def test_negative_time_is_rejected(self) -> None:
        with pytest.raises(ScheduleError, match="compute_s"):
            ScheduleProblem.from_dependencies([[]], [-1.0], [0], [0], BANDWIDTH)

    def test_bad_bandwidth(self) -> None:
        with pytest.raises(ScheduleError, match="bandwidth"):
            ScheduleProblem.from_dependencies([[]], [0], [0], [0], 0.0)

    def test_bad_engine_fraction(self) -> None:
        with pytest.raises(ScheduleError, match="engine 1"):
            EngineSet((0.5, 0.0))


def _check_valid(p: ScheduleProblem, s: Schedule) -> None:
    for i in range(p.n):
        for j in p.dependencies(i):
            assert s.start_ns[i] >= s.end_ns[j], f"op {i} starts before its dependency {j} ends"
    for e in range(s.engines.count):
        on = np.flatnonzero(s.engine == e)
        order = on[np.lexsort((s.end_ns[on], s.start_ns[on]))]
        assert np.all(s.start_ns[order][1:] >= s.end_ns[order][:-1]), f"ops overlap on engine {e}"
    assert np.all(s.end_ns >= s.start_ns)
    assert int(s.engine_busy_ns.sum()) == int((s.end_ns - s.start_ns).sum())


class TestProperties:
    @SETTINGS
    @given(problems(), st.integers(1, 6), st.sampled_from(sorted(POLICIES)), st.booleans())
    def test_dependencies_and_engines_are_respected(self, p: ScheduleProblem, n: int, policy: str,
                                                    shared: bool) -> None:
        _check_valid(p, schedule(p, n, policy, shared))

    @SETTINGS
    @given(problems(), st.sampled_from(sorted(POLICIES)), st.booleans())
    def test_one_engine_is_the_sum_of_durations(self, p: ScheduleProblem, policy: str, shared: bool) -> None:
        # With one engine no two ops overlap, so sharing changes nothing.
        s = schedule(p, 1, policy, shared)
        assert abs(s.makespan_ns - standalone_ns(p, 1).sum()) <= p.n

    @SETTINGS
    @given(problems(), st.sampled_from(sorted(POLICIES)))
    def test_unbounded_engines_give_the_critical_path(self, p: ScheduleProblem, policy: str) -> None:
        s = schedule(p, p.n, policy, share_bandwidth=False)
        assert abs(s.makespan_ns - critical_path_ns(p, standalone_ns(p, p.n))) <= p.n

    @SETTINGS
    @given(problems(), st.integers(1, 6), st.sampled_from(sorted(POLICIES)))
    def test_shared_bandwidth_bounds_the_makespan(self, p: ScheduleProblem, n: int, policy: str) -> None:
        s = schedule(p, n, policy)
        assert s.makespan_ns >= p.total_memory_bytes / BANDWIDTH * 1e9 - p.n
        assert s.bandwidth_bytes_per_s.max() <= BANDWIDTH * (1 + 1e-9)
        # Sharing only ever slows an op down.
        assert np.all(s.end_ns - s.start_ns >= standalone_ns(p, n) - 1)

    @SETTINGS
    @given(problems(), st.integers(1, 6), st.booleans())
    def test_list_never_worse_than_in_order(self, p: ScheduleProblem, n: int, shared: bool) -> None:
        lst = schedule(p, n, "list", share_bandwidth=shared)
        ino = schedule(p, n, "in-order", share_bandwidth=shared)
        assert lst.makespan_ns <= ino.makespan_ns
        assert lst.policy == "list"

    @SETTINGS
    @given(problems(), st.integers(1, 6), st.sampled_from(sorted(POLICIES)), st.booleans())
    def test_deterministic(self, p: ScheduleProblem, n: int, policy: str, shared: bool) -> None:
        a, b = schedule(p, n, policy, shared), schedule(p, n, policy, shared)
        for field in ("engine", "start_ns", "end_ns", "bandwidth_time_ns", "bandwidth_bytes_per_s"):
            assert np.array_equal(getattr(a, field), getattr(b, field))


def _memory_ops(deps: list[list[int]], duration_ns: list[int]) -> ScheduleProblem:
    """Ops that only move memory: at 1 B/ns each takes exactly its bytes in ns on any engine (unshared)."""
    n = len(deps)
    return ScheduleProblem.from_dependencies(deps, [0.0] * n, duration_ns, [0.0] * n, BANDWIDTH)


@st.composite
def integer_problems(draw: st.DrawFn, max_ops: int = 16) -> ScheduleProblem:
    """Random DAGs of memory-only ops of whole-ns durations (>= 1 ns), so every time is exact."""
    n = draw(st.integers(1, max_ops))
    deps = [sorted(draw(st.lists(st.integers(0, i - 1), max_size=min(3, i), unique=True))) if i else []
            for i in range(n)]
    return _memory_ops(deps, [draw(st.integers(1, 5000)) for _ in range(n)])


def _ready_ns(p: ScheduleProblem, s: Schedule) -> np.ndarray:
    """When each op's last dependency ended (0 for a root)."""
    return np.array([max((int(s.end_ns[j]) for j in p.dependencies(i)), default=0) for i in range(p.n)])


def _priority_inversions(p: ScheduleProblem, s: Schedule, rank: np.ndarray, strict: bool) -> list[tuple[int, int]]:
    """Pairs (i, j): op i started while op j, ready and of higher HEFT priority (higher rank, then lower
    index), had not. With ``strict``, only j ready strictly before i started (rounded times)."""
    ready = _ready_ns(p, s)
    bad = []
    for i in range(p.n):
        for j in range(p.n):
            higher = rank[j] > rank[i] or (rank[j] == rank[i] and j < i)
            waiting = ready[j] < s.start_ns[i] if strict else ready[j] <= s.start_ns[i]
            if higher and waiting and s.start_ns[j] > s.start_ns[i]:
                bad.append((i, j))
    return bad


def _optimal_unit_makespan(deps: list[list[int]], m: int) -> int:
    """Fewest unit steps that run every op on m engines (exhaustive search over the sets of ops done)."""
    n = len(deps)
    need = [sum(1 << j for j in d) for d in deps]
    frontier, steps, full = {0}, 0, (1 << n) - 1
    while full not in frontier:
        nxt = set()
        for done in frontier:
            ready = [i for i in range(n) if not done >> i & 1 and need[i] & done == need[i]]
            for k in range(1, min(m, len(ready)) + 1):
                for pick in itertools.combinations(ready, k):
                    nxt.add(done | sum(1 << i for i in pick))
        frontier, steps = nxt, steps + 1
    return steps


def _chain_beside_short_ops() -> ScheduleProblem:
    # 2 engines, memory-only ops (duration in ns = bytes at 1 B/ns, unshared):
    #   0 (1000): root, no successor             rank 1000
    #   1 (1000): root -> 3                      rank 1000 + 1000 = 2000
    #   2 (2000): root -> 4                      rank 2000 + 3000 = 5000
    #   3 (1000): after 1                        rank 1000
    #   4 (2000): after 2 -> 5                   rank 2000 + 1000 = 3000
    #   5 (1000): after 4                        rank 1000
    return _memory_ops([[], [], [], [1], [2], [4]], [1000, 1000, 2000, 1000, 2000, 1000])


class TestHeft:
    """HEFT's own schedule (:func:`heft_schedule`), without the fallback to program order that ``list`` adds."""

    def test_upward_ranks_by_hand(self) -> None:
        p = _chain_beside_short_ops()
        assert upward_rank(p, standalone_ns(p, 2)).tolist() == [1000, 2000, 5000, 1000, 3000, 1000]

    def test_order_and_start_times_by_hand(self) -> None:
        # t=0: ready {0: 1000, 1: 2000, 2: 5000} -> 2 on engine 0, 1 on engine 1.
        # t=1000: 1 ends; ready {0: 1000, 3: 1000}, a tie -> 0 (lower index) on engine 1.
        # t=2000: 0 and 2 end; ready {3: 1000, 4: 3000} -> 4 on engine 0 (lowest free index), 3 on engine 1.
        # t=4000: 4 ends -> 5 on engine 0, ends at 5000 = the critical path 2 -> 4 -> 5: optimal.
        p = _chain_beside_short_ops()
        for s in (heft_schedule(p, 2, share_bandwidth=False), schedule(p, 2, "list", share_bandwidth=False)):
            assert s.start_ns.tolist() == [1000, 0, 0, 2000, 2000, 4000]
            assert s.engine.tolist() == [1, 1, 0, 1, 0, 0]
            assert s.makespan_ns == 5000
        # Program order: 0, 1 at 0; 2, 3 at 1000; 4 waits on engine 1 for 2 (3000-5000); 5 on engine 0 after it.
        # The lowest rank first gives 6000 as well (0, 1; then 3, 2; 4 at 3000; 5 at 5000).
        ino = schedule(p, 2, "in-order", share_bandwidth=False)
        assert ino.start_ns.tolist() == [0, 0, 1000, 1000, 3000, 5000]
        assert ino.makespan_ns == 6000

    def test_list_keeps_program_order_when_heft_ends_later(self) -> None:
        # A list-scheduling anomaly (Graham 1969): 0 (1000) -> 3 (3000); 1 (2000); 2 (4000). Ranks: 0: 4000,
        # 1: 2000, 2: 4000, 3: 3000. HEFT: 0 and 2 at 0 (tie -> 0 first), 3 at 1000 after 0, 1 at 4000
        # -> 6000. Program order: 0, 1 at 0; 2 at 1000 (engine 0); 3 at 2000 (engine 1) -> 5000.
        p = _memory_ops([[], [], [], [0]], [1000, 2000, 4000, 3000])
        heft = heft_schedule(p, 2, share_bandwidth=False)
        assert heft.start_ns.tolist() == [0, 4000, 0, 1000]
        assert heft.makespan_ns == 6000
        lst = schedule(p, 2, "list", share_bandwidth=False)
        assert lst.start_ns.tolist() == [0, 0, 1000, 2000]
        assert lst.makespan_ns == 5000 and lst.policy == "list"

    @SETTINGS
    @given(integer_problems(), st.integers(1, 6))
    def test_never_starts_an_op_while_a_higher_ranked_one_waits(self, p: ScheduleProblem, n: int) -> None:
        # HEFT's defining rule: at every dispatch the ready op of highest upward rank goes first.
        s = heft_schedule(p, n, share_bandwidth=False)
        _check_valid(p, s)
        assert _priority_inversions(p, s, upward_rank(p, standalone_ns(p, n)), strict=False) == []

    @SETTINGS
    @given(problems(), st.lists(st.floats(0.1, 1.0), min_size=1, max_size=5), st.booleans())
    def test_priority_holds_with_shared_bandwidth_and_unequal_engines(
            self, p: ScheduleProblem, fractions: list[float], shared: bool) -> None:
        # Sharing changes when ops end, not which ready op is dispatched first. Times are rounded to
        # whole ns, so only ops ready strictly before another started count.
        es = EngineSet(tuple(fractions))
        s = heft_schedule(p, es, share_bandwidth=shared)
        _check_valid(p, s)
        assert _priority_inversions(p, s, upward_rank(p, standalone_ns(p, es)), strict=True) == []

    @SETTINGS
    @given(problems(), st.integers(1, 6))
    def test_within_grahams_bound(self, p: ScheduleProblem, n: int) -> None:
        # A list schedule never idles an engine while an op is ready, so (Graham 1966) its makespan is at most
        # W/m + (1 - 1/m)·CP, W the total work and CP the critical path: within (2 - 1/m) of the optimum,
        # which is at least max(W/m, CP).
        d = standalone_ns(p, n)
        s = heft_schedule(p, n, share_bandwidth=False)
        assert s.makespan_ns <= d.sum() / n + (1 - 1 / n) * critical_path_ns(p, d) + p.n

    @SETTINGS
    @given(st.integers(1, 9), st.integers(1, 4), st.data())
    def test_optimal_on_unit_in_forests(self, size: int, n: int, data) -> None:  # type: ignore[no-untyped-def]
        # Unit-time in-forests (each op feeds at most one consumer): highest level first is optimal
        # (Hu 1961), and HEFT's upward rank is the level. The optimum comes from an exhaustive search.
        parent = [data.draw(st.one_of(st.none(), st.integers(i + 1, size - 1))) if i < size - 1 else None
                  for i in range(size)]
        deps: list[list[int]] = [[] for _ in range(size)]
        for i, par in enumerate(parent):
            if par is not None:
                deps[par].append(i)
        p = _memory_ops(deps, [1000] * size)
        heft = heft_schedule(p, n, share_bandwidth=False).makespan_ns
        assert heft == 1000 * _optimal_unit_makespan(deps, n)
        assert heft <= schedule(p, n, "in-order", share_bandwidth=False).makespan_ns


def test_from_timed_matches_the_roofline_sum() -> None:
    from layerscope.cost import time_graph
    from layerscope.graph import build_layer_graph
    from layerscope.hardware import load_hardware
    from layerscope.model import model_spec_from_dict, tiny_config
    from layerscope.workload import make_workload

    spec = model_spec_from_dict(tiny_config("llama"), "tiny-llama")
    w = make_workload(phase="decode", context=128)
    tg = time_graph(build_layer_graph(spec, w.passes()[0], w, 0, "unfused"), load_hardware("h100-sxm"))
    p = ScheduleProblem.from_timed(tg)
    assert p.n == len(tg.graph.ops)
    assert p.num_edges == sum(len(d) for d in tg.graph.dependencies)
    hw_bw = tg.hardware.achievable_bandwidth_bytes_per_s()
    assert p.bandwidth_bytes_per_s == pytest.approx(hw_bw, rel=1e-9)
    s = schedule(p, 1, share_bandwidth=False)
    assert abs(s.makespan_ns - tg.time_s.sum() * 1e9) <= p.n
