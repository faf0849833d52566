"""``layerscope simulate --engine-mode``: a fixed chip split into N engines, or engines of a fixed size added; each
row's bound and the curve explained, through the entry point."""

from __future__ import annotations

import itertools
import json

import pytest

BASE = ["simulate", "--hardware", "server-cpu", "--phase", "prefill", "--engines", "1,2,4", "--json"]


def test_split_says_why_more_engines_are_slower(run_cli) -> None:
    res = run_cli(*BASE)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    rows = out["sweep"]
    assert out["engine_mode"] == "split" and out["engine_size"] is None
    # one chip split: the same work on ever smaller engines; the chain of dependent ops sets the time from 2 up
    assert rows[-1]["makespan_ns"] > rows[0]["makespan_ns"]
    assert [r["bound"] for r in rows][1:] == ["dependencies", "dependencies"]
    for r in rows:  # the makespan is at least every lower bound
        bounds = (r["bandwidth_bound_ns"], r["dependencies_bound_ns"], r["compute_bound_ns"])
        assert r["makespan_ns"] >= max(bounds) - 1
    assert "More engines are slower" in out["curve"] and "dependency-bound" in out["curve"]


def test_add_asks_how_many_engines_of_a_size_the_work_needs(run_cli) -> None:
    res = run_cli(*BASE, "--engine-mode", "add", "--engine-size", "0.125")
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    rows = out["sweep"]
    assert out["engine_mode"] == "add" and out["engine_size"] == 0.125
    # engines of 1/8 of the chip: one engine is compute-bound; adding them never makes the makespan worse
    assert rows[0]["bound"] == "compute"
    assert all(b["makespan_ns"] <= a["makespan_ns"] * 1.001 for a, b in itertools.pairwise(rows))
    assert rows[0]["compute_bound_ns"] == pytest.approx(2 * rows[1]["compute_bound_ns"])  # twice the capacity
    assert "engines of 0.125 of the chip each" in out["curve"]
    human = run_cli(*BASE[:-1], "--engine-mode", "add", "--engine-size", "0.125")
    assert human.returncode == 0 and "bound" in human.stdout and "added" in human.stdout


@pytest.mark.parametrize(("args", "words"), [
    (["--engine-mode", "add"], "needs engine_size"),
    (["--engine-size", "0.5"], "is for engine_mode 'add'"),
    (["--engine-mode", "grow"], "engine_mode"),
    (["--engine-mode", "add", "--engine-size", "-1"], "engine_size"),
])
def test_bad_engine_questions_exit_2(run_cli, args: list[str], words: str) -> None:
    res = run_cli(*BASE, *args)
    assert res.returncode == 2, (res.stdout, res.stderr)
    assert words in res.stderr and "Traceback" not in res.stderr and "(got {" not in res.stderr
