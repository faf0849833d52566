"""Scheduling policies as registered classes: a new policy is one class, and both event loops (Python
and C) run it through the same hooks with no edit, bit for bit alike."""

from __future__ import annotations

import inspect

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from layerscope.errors import ScheduleError
from layerscope.registry import Registry
from layerscope.schedule import (
    Dispatch,
    EngineChoice,
    EngineSet,
    ScheduleProblem,
    SchedulingPolicy,
    core,
    register_policy,
    schedule,
    standalone_ns,
    sweep_engines,
)

from .conftest import BANDWIDTH, problems

FIELDS = ("engine", "start_ns", "end_ns", "engine_busy_ns", "bandwidth_time_ns", "bandwidth_bytes_per_s")


class ShortestFirst(SchedulingPolicy):
    """Ready ops, shortest standalone duration first, on the fastest free engine."""

    name = "shortest-first"
    dispatch = Dispatch.READY
    engine_choice = EngineChoice.FASTEST

    def priority(self, problem: ScheduleProblem, engines: EngineSet) -> np.ndarray:
        return standalone_ns(problem, engines)


class ReverseProgramOrder(SchedulingPolicy):
    """Ready ops, latest in program order first, on the engine free earliest."""

    name = "reverse"
    dispatch = Dispatch.READY
    engine_choice = EngineChoice.EARLIEST_FREE

    def priority(self, problem: ScheduleProblem, engines: EngineSet) -> np.ndarray:
        return -np.arange(problem.n, dtype=np.float64)


class LevelOrder(SchedulingPolicy):
    """Ops reserved engines level by level (depth from a source: a topological order), fastest engine first."""

    name = "level-order"
    dispatch = Dispatch.RESERVE
    engine_choice = EngineChoice.FASTEST

    def priority(self, problem: ScheduleProblem, engines: EngineSet) -> np.ndarray:
        depth = np.zeros(problem.n)
        for i in range(problem.n):
            deps = problem.dependencies(i)
            depth[i] = depth[deps].max() + 1 if len(deps) else 0
        return depth


NEW_POLICIES = (ShortestFirst(), ReverseProgramOrder(), LevelOrder())


@pytest.fixture
def policies(monkeypatch: pytest.MonkeyPatch) -> Registry[type[SchedulingPolicy]]:
    """A copy of the policy registry for one test, so what a test registers does not outlive it."""
    fresh: Registry[type[SchedulingPolicy]] = Registry("policy", ScheduleError, dict(core.POLICIES))
    monkeypatch.setattr(core, "POLICIES", fresh)
    return fresh


def _both(problem: ScheduleProblem, engines: int | EngineSet, policy: str | SchedulingPolicy, share: bool,
          monkeypatch: pytest.MonkeyPatch) -> tuple[core.Schedule, core.Schedule]:
    with monkeypatch.context() as m:
        m.setenv("LAYERSCOPE_SCHEDULE_NATIVE", "1")
        c = schedule(problem, engines, policy, share)
    with monkeypatch.context() as m:
        m.setenv("LAYERSCOPE_SCHEDULE_NATIVE", "0")
        py = schedule(problem, engines, policy, share)
    return c, py


def _assert_identical(c: core.Schedule, py: core.Schedule) -> None:
    for name in FIELDS:
        a, b = getattr(c, name), getattr(py, name)
        assert a.dtype == b.dtype and a.tobytes() == b.tobytes(), name
    assert c.policy == py.policy


def _assert_valid(s: core.Schedule) -> None:
    p = s.problem
    for i in range(p.n):
        for j in p.dependencies(i):
            assert s.start_ns[i] >= s.end_ns[j]
    for e in range(s.engines.count):
        on = np.flatnonzero(s.engine == e)
        order = on[np.lexsort((s.end_ns[on], s.start_ns[on]))]  # zero-length ops first at a tie
        assert np.all(s.start_ns[order][1:] >= s.end_ns[order][:-1])


def test_a_new_policy_is_one_registered_class(policies: Registry[type[SchedulingPolicy]]) -> None:
    @register_policy
    class LongestFirst(SchedulingPolicy):
        name = "longest-first"

        def priority(self, problem: ScheduleProblem, engines: EngineSet) -> np.ndarray:
            return -standalone_ns(problem, engines)

    assert policies.lookup("longest-first") is LongestFirst
    # three independent compute-only ops of 3, 1 and 2 us on one engine: longest first
    p = ScheduleProblem.from_dependencies([[], [], []], [3e-6, 1e-6, 2e-6], [0, 0, 0], [0, 0, 0], BANDWIDTH)
    s = schedule(p, 1, "longest-first", share_bandwidth=False)
    assert s.policy == "longest-first"
    assert s.start_ns.tolist() == [0, 5000, 3000]
    assert sweep_engines(p, "1..2", "longest-first").rows[0]["makespan_ns"] == 6000
    with pytest.raises(ValueError, match="registered twice"):
        register_policy(LongestFirst)


def test_a_policy_object_or_class_is_accepted_as_well_as_a_name() -> None:
    p = ScheduleProblem.from_dependencies([[], [], []], [3e-6, 1e-6, 2e-6], [0, 0, 0], [0, 0, 0], BANDWIDTH)
    by_object = schedule(p, 1, ShortestFirst(), share_bandwidth=False)
    by_class = schedule(p, 1, ShortestFirst, share_bandwidth=False)
    assert by_object.start_ns.tolist() == by_class.start_ns.tolist() == [3000, 0, 1000]
    assert by_object.policy == "shortest-first"
    assert schedule(ScheduleProblem.from_dependencies([], [], [], [], BANDWIDTH), 2, ShortestFirst()).policy == (
        "shortest-first")


def test_the_builtin_policies_are_classes_too() -> None:
    assert core.get_policy("in-order").dispatch is Dispatch.RESERVE
    assert core.get_policy("list").dispatch is Dispatch.READY
    assert isinstance(core.get_policy(core.ListPolicy()), core.ListPolicy)
    with pytest.raises(ScheduleError, match=r"^unknown policy 'fifo'; known: in-order, list$"):
        core.get_policy("fifo")


def test_the_loops_know_no_policy_by_name() -> None:
    source = inspect.getsource(core._run_loop) + inspect.getsource(core._run_native)
    for name in core.POLICIES:
        assert repr(name) not in source and f'"{name}"' not in source


def test_reserve_needs_a_topological_order() -> None:
    class ReserveReversed(ReverseProgramOrder):
        name = "reserve-reversed"
        dispatch = Dispatch.RESERVE

    p = ScheduleProblem.from_dependencies([[], [0]], [1e-6, 1e-6], [0, 0], [0, 0], BANDWIDTH)
    with pytest.raises(ScheduleError, match="topological"):
        schedule(p, 2, ReserveReversed())
    # independent ops may go in any order
    q = ScheduleProblem.from_dependencies([[], []], [1e-6, 2e-6], [0, 0], [0, 0], BANDWIDTH)
    assert schedule(q, 1, ReserveReversed(), share_bandwidth=False).start_ns.tolist() == [2000, 0]


def test_a_bad_priority_is_refused() -> None:
    class Short(SchedulingPolicy):
        name = "short"

        def priority(self, problem: ScheduleProblem, engines: EngineSet) -> np.ndarray:
            return np.zeros(problem.n - 1)

    class NotANumber(SchedulingPolicy):
        name = "nan"

        def priority(self, problem: ScheduleProblem, engines: EngineSet) -> np.ndarray:
            return np.full(problem.n, np.nan)

    p = ScheduleProblem.from_dependencies([[], [0]], [1e-6, 1e-6], [0, 0], [0, 0], BANDWIDTH)
    with pytest.raises(ScheduleError, match="shape"):
        schedule(p, 2, Short())
    with pytest.raises(ScheduleError, match="NaN"):
        schedule(p, 2, NotANumber())


@pytest.mark.skipif(core._event_loop is None, reason="the C event loop is not built (no C compiler)")
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                   HealthCheck.function_scoped_fixture])
@given(problem=problems(max_ops=40), engines=st.one_of(st.integers(1, 4), st.just(EngineSet((0.5, 0.25, 0.25)))),
       policy=st.sampled_from(NEW_POLICIES), share=st.booleans())
def test_new_policies_run_bit_identically_on_both_loops(problem: ScheduleProblem, engines: int | EngineSet,
                                                        policy: SchedulingPolicy, share: bool,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    c, py = _both(problem, engines, policy, share, monkeypatch)
    _assert_identical(c, py)
    _assert_valid(c)
    assert c.policy == policy.name
    es = core.as_engine_set(engines)
    prep = core._prepare(problem, es)
    plan = core._plan_of(policy, problem, es)
    raw_c = core._run_native(core._event_loop, prep, es.count, share, plan)
    raw_py = core._run_loop(prep, es.count, share, plan)
    for a, b in zip(raw_c, raw_py, strict=True):
        assert a.dtype == b.dtype and a.tobytes() == b.tobytes()
