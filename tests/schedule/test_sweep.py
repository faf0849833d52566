"""Engine-count sweeps and their parsing (layerscope/schedule/sweep.py)."""

from __future__ import annotations

import pytest

from layerscope.errors import ScheduleError
from layerscope.schedule import ScheduleProblem, parse_engine_counts, schedule, sweep_engines

from .conftest import BANDWIDTH


@pytest.mark.parametrize(("spec", "expected"), [
    ("4", (4,)), ("1..8", tuple(range(1, 9))), (" 2 .. 4 ", (2, 3, 4)), ("1,2,4,8", (1, 2, 4, 8)),
    ("8,1,2,2", (1, 2, 8)), (3, (3,)), ([4, 2], (2, 4)),
])
def test_parse_engine_counts(spec: object, expected: tuple[int, ...]) -> None:
    assert parse_engine_counts(spec) == expected  # type: ignore[arg-type]


@pytest.mark.parametrize(("spec", "message"), [
    ("", "cannot parse"), ("1..x", "cannot parse"), ("8..1", "empty"), ("0", "not in 1..4096"),
    ("1,,2", "cannot parse"), ("-1", "cannot parse"), ("1..5000", "exceeds"), ([], "no engine counts"),
    (True, "not an engine count"), ("1.5", "cannot parse"),
])
def test_bad_engine_counts(spec: object, message: str) -> None:
    with pytest.raises(ScheduleError, match=message):
        parse_engine_counts(spec)  # type: ignore[arg-type]


def _parallel(width: int, depth: int, bytes_: float = 0.0) -> ScheduleProblem:
    """``depth`` layers of ``width`` independent 1 µs-of-chip ops, each layer after the previous one."""
    deps: list[list[int]] = []
    for d in range(depth):
        prev = list(range((d - 1) * width, d * width)) if d else []
        deps += [prev] * width
    n = width * depth
    return ScheduleProblem.from_dependencies(deps, [1e-6] * n, [bytes_] * n, [1e-7] * n, BANDWIDTH)


def test_sweep_rows_speedup_and_engines_used() -> None:
    # 4-wide layers of compute-bound ops with a launch overhead: engines beyond 4 cannot help,
    # and they do not hurt (N engines of 1/N each: an op's compute takes N µs but N run at once).
    p = _parallel(4, 3)
    sw = sweep_engines(p, "1..6", "list", share_bandwidth=False)
    rows = sw.records()
    assert [r["engines"] for r in rows] == [1, 2, 3, 4, 5, 6]
    assert sw.baseline_makespan_ns == rows[0]["makespan_ns"] == schedule(p, 1).makespan_ns
    # N = 4: each layer is one op per engine, 4 µs + 0.1 µs launch; 3 layers.
    assert rows[3]["makespan_ns"] == 3 * 4100
    assert rows[0]["makespan_ns"] == 12 * 1100
    assert rows[3]["speedup"] == pytest.approx(13200 / 12300)
    assert sw.engines_used == 4
    assert all(0 < r["engine_utilization"] <= 1 for r in rows)
    assert rows[0]["engine_utilization"] == 1.0
    assert sw.to_arrow().num_rows == 6


def test_memory_bound_sweep_is_flat_with_shared_bandwidth() -> None:
    # Pure traffic: 8 ops x 1000 B; the makespan is bytes / bandwidth for every N.
    p = ScheduleProblem.from_dependencies([[]] * 8, [0.0] * 8, [1000] * 8, [0] * 8, BANDWIDTH)
    sw = sweep_engines(p, [2, 4, 8])
    assert [r["makespan_ns"] for r in sw.records()] == [8000, 8000, 8000]
    assert sw.engines_used == 2
    assert all(r["bandwidth_utilization"] == pytest.approx(1.0) for r in sw.records())
    assert sw.baseline_makespan_ns == 8000  # computed although 1 is not in the list


def test_engines_used_tolerance() -> None:
    p = _parallel(4, 3)
    sw = sweep_engines(p, [1, 2, 3, 4], share_bandwidth=False, tolerance=0.2)
    best = min(r["makespan_ns"] for r in sw.records())
    used = next(r for r in sw.records() if r["engines"] == sw.engines_used)
    assert used["makespan_ns"] <= 1.2 * best
    assert all(r["makespan_ns"] > 1.2 * best for r in sw.records() if r["engines"] < sw.engines_used)


def test_unknown_policy() -> None:
    with pytest.raises(ScheduleError, match="unknown policy"):
        sweep_engines(_parallel(2, 2), "1..2", "random")


def _problem(deps, compute_s, memory_bytes, bandwidth=1e9):
    from layerscope.schedule.core import ScheduleProblem

    n = len(deps)
    return ScheduleProblem.from_dependencies(deps, compute_s, memory_bytes, [0.0] * n, bandwidth)


def test_split_and_add_ask_two_questions_and_name_the_bound() -> None:
    """Hand-computed: a chain of four 1-s ops; four independent 1-s ops; four independent 1-GB copies at 1 GB/s."""
    from layerscope.schedule.sweep import sweep_engines

    chain = _problem([[], [0], [1], [2]], [1.0] * 4, [0.0] * 4)
    split = sweep_engines(chain, "1,2,4", "in-order", mode="split")
    # split: every op on 1/N of the chip: the chain takes 4N s, set by the dependencies
    assert [r["makespan_ns"] for r in split.rows] == [4e9, 8e9, 16e9]
    assert [r["bound"] for r in split.rows] == ["compute", "dependencies", "dependencies"]  # 1 engine: a tie
    add = sweep_engines(chain, "1,2,4", "in-order", mode="add", engine_fraction=1.0)
    assert [r["makespan_ns"] for r in add.rows] == [4e9] * 3
    assert [r["bound"] for r in add.rows] == ["compute", "dependencies", "dependencies"]

    wide = _problem([[], [], [], []], [1.0] * 4, [0.0] * 4)
    assert [r["makespan_ns"] for r in sweep_engines(wide, "1,2,4", "list", mode="split").rows] == [4e9] * 3
    added = sweep_engines(wide, "1,2,4", "list", mode="add", engine_fraction=1.0)
    assert [r["makespan_ns"] for r in added.rows] == [4e9, 2e9, 1e9]
    assert [r["bound"] for r in added.rows] == ["compute"] * 3
    assert added.rows[2]["speedup"] == 4.0 and added.mode == "add" and added.engine_fraction == 1.0

    copies = _problem([[], [], [], []], [0.0] * 4, [1e9] * 4)
    rows = sweep_engines(copies, "1,4", "list", mode="add", engine_fraction=0.5).rows
    assert [r["makespan_ns"] for r in rows] == [4e9, 4e9]  # the shared bandwidth: 4 GB at 1 GB/s
    assert rows[1]["bound"] == "bandwidth" and rows[1]["bandwidth_bound_ns"] == 4e9


def test_adding_engines_needs_their_size() -> None:
    from layerscope.errors import ScheduleError
    from layerscope.schedule.sweep import sweep_engines

    p = _problem([[]], [1.0], [0.0])
    with pytest.raises(ScheduleError, match="engine size"):
        sweep_engines(p, "1,2", mode="add")
    with pytest.raises(ScheduleError, match="engine mode"):
        sweep_engines(p, "1,2", mode="grow")
