"""The C event loop (layerscope/schedule/_event_loop.c) against the Python loop it mirrors (core.py).

Both must give bit-identical schedules: same engines, same integer start and end times, same
bandwidth step function, on every policy, with shared and unshared bandwidth, on uniform engines
and on engines of different speeds.
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from layerscope.schedule import EngineSet, ScheduleProblem, core, schedule

from .conftest import BANDWIDTH, problems

native = core._event_loop
pytestmark = pytest.mark.skipif(native is None, reason="the C event loop is not built (no C compiler)")

FIELDS = ("engine", "start_ns", "end_ns", "engine_busy_ns", "bandwidth_time_ns", "bandwidth_bytes_per_s")


def _both(problem: ScheduleProblem, engines: int | EngineSet, policy: str | core.SchedulingPolicy, share: bool,
          monkeypatch: pytest.MonkeyPatch) -> tuple[core.Schedule, core.Schedule]:
    with monkeypatch.context() as m:
        m.setenv("LAYERSCOPE_SCHEDULE_NATIVE", "1")
        c = schedule(problem, engines, policy, share)
    with monkeypatch.context() as m:
        m.setenv("LAYERSCOPE_SCHEDULE_NATIVE", "0")
        py = schedule(problem, engines, policy, share)
    return c, py


def _assert_same_loops(problem: ScheduleProblem, engines: int | EngineSet, policy: str | core.SchedulingPolicy,
                       share: bool) -> None:
    # the raw float times, before the schedule rounds them to integer ns: equal bit for bit
    es = core.as_engine_set(engines)
    prep = core._prepare(problem, es)
    plan = core._plan_of(core.get_policy(policy), problem, es)
    c = core._run_native(native, prep, es.count, share, plan)
    py = core._run_loop(prep, es.count, share, plan)
    for name, a, b in zip(("engine", "start", "end", "bandwidth_time", "bandwidth_value"), c, py, strict=True):
        assert a.dtype == b.dtype and a.tobytes() == b.tobytes(), name


def _assert_identical(c: core.Schedule, py: core.Schedule) -> None:
    for name in FIELDS:
        a, b = getattr(c, name), getattr(py, name)
        assert a.dtype == b.dtype, name
        np.testing.assert_array_equal(a, b, err_msg=name)
    assert c.policy == py.policy


def test_the_loop_is_built_where_a_compiler_is() -> None:
    if shutil.which("cc") or shutil.which("gcc"):
        assert core._event_loop is not None, "setup.py should have built layerscope.schedule._event_loop"


def test_the_environment_switch_selects_the_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAYERSCOPE_SCHEDULE_NATIVE", "0")
    assert core._native_loop() is None
    monkeypatch.setenv("LAYERSCOPE_SCHEDULE_NATIVE", "1")
    assert core._native_loop() is native


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                   HealthCheck.function_scoped_fixture])
@given(problem=problems(max_ops=40), engines=st.integers(1, 5), policy=st.sampled_from(["list", "in-order"]),
       share=st.booleans())
def test_bit_identical_on_uniform_engines(problem: ScheduleProblem, engines: int, policy: str, share: bool,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    _assert_identical(*_both(problem, engines, policy, share, monkeypatch))
    _assert_same_loops(problem, engines, policy, share)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                   HealthCheck.function_scoped_fixture])
@given(problem=problems(max_ops=40),
       fractions=st.lists(st.sampled_from([0.1, 0.25, 0.3, 0.5]), min_size=2, max_size=4).filter(
           lambda f: len(set(f)) > 1),
       policy=st.sampled_from(["list", "in-order"]), share=st.booleans())
def test_bit_identical_on_engines_of_different_speeds(problem: ScheduleProblem, fractions: list[float], policy: str,
                                                      share: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    _assert_identical(*_both(problem, EngineSet(tuple(fractions)), policy, share, monkeypatch))
    _assert_same_loops(problem, EngineSet(tuple(fractions)), policy, share)


def test_bit_identical_on_a_model_graph(monkeypatch: pytest.MonkeyPatch) -> None:
    # Two decode steps of a real model: hundreds of ops sharing the bandwidth, ties at equal times.
    from layerscope.cost import time_graph
    from layerscope.graph import build_steps_graph
    from layerscope.hardware import load_hardware
    from layerscope.model import load_model_spec
    from layerscope.workload import make_workload

    graph = build_steps_graph(load_model_spec("llama-3.2-1b"), make_workload(phase="decode", context=256), 2,
                              "unfused", all_layers=True)
    problem = ScheduleProblem.from_timed(time_graph(graph, load_hardware("h100-sxm")))
    for engines in (1, 4, 8):
        for policy in ("list", "in-order"):
            c, py = _both(problem, engines, policy, True, monkeypatch)
            _assert_identical(c, py)
            _assert_same_loops(problem, engines, policy, True)
            assert c.makespan_ns > 0


def test_native_run_names_a_bad_array() -> None:
    f = np.zeros(3)
    i = np.zeros(3, dtype=np.int64)
    out = np.empty(3, dtype=np.int32), np.empty(3), np.empty(3)
    ptr, none = np.zeros(4, dtype=np.int64), np.zeros(0, dtype=np.int64)
    order = np.arange(3, dtype=np.int64)
    with pytest.raises(ValueError, match="overhead_ns"):
        native.run(0, 0, True, 3, 1, 1.0, np.zeros(2), None, None, f, f, np.ones(1), ptr, none, i, None, order, *out)
    with pytest.raises(ValueError, match="priority"):
        native.run(1, 1, True, 3, 1, 1.0, f, None, None, f, f, np.ones(1), ptr, none, i, None, None, *out)
    with pytest.raises(ValueError, match="order"):
        native.run(0, 0, True, 3, 1, 1.0, f, None, None, f, f, np.ones(1), ptr, none, i, None, None, *out)
    with pytest.raises(ValueError, match="order"):
        native.run(0, 0, True, 3, 1, 1.0, f, None, None, f, f, np.ones(1), ptr, none, i, None,
                   np.array([0, 1, 3], dtype=np.int64), *out)
    with pytest.raises(ValueError, match="dispatch"):
        native.run(2, 0, True, 3, 1, 1.0, f, None, None, f, f, np.ones(1), ptr, none, i, f, order, *out)


def test_a_hand_computed_case_on_both_loops(monkeypatch: pytest.MonkeyPatch) -> None:
    # 0 -> {1, 2} -> 3 on 2 engines at 1 B/ns: compute 2000 ns on half the chip; the two 1000 B ops
    # share the bandwidth, 2000 ns each (test_policies' diamond).
    problem = ScheduleProblem.from_dependencies(
        [[], [0], [0], [1, 2]], [1e-6, 0.0, 0.0, 1e-6], [0, 1000, 1000, 0], [0, 0, 0, 0], BANDWIDTH)
    for s in _both(problem, 2, "list", True, monkeypatch):
        assert s.start_ns.tolist() == [0, 2000, 2000, 4000]
        assert s.end_ns.tolist() == [2000, 4000, 4000, 6000]
