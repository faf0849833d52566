"""The harness can fail: each broken property of the contract is caught (no subprocess here),
and the corpus is as large and as well-named as the issue asks."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from .corpus import ALL_CASES, BAD_CASES, FAMILIES
from .harness import Case, Outcome, make_files, snapshot, snapshot_changes, violations
from .inputs import yaml_bomb
from .test_contracts import CASES as CONTRACT_CASES

CASE = Case("example", ("estimate", "--model", "cfg.json"), {"cfg.json": b"{}"}, ("cfg.json",))
GOOD_LINE = "error: cfg.json: hidden_size: expected an integer\n"


def outcome(returncode: int | None = 2, stderr: str = GOOD_LINE, stdout: str = "", seconds: float = 1.0,
            changes: list[str] | None = None) -> Outcome:
    return Outcome(returncode, stdout, stderr, seconds, changes or [], [])


def test_a_kept_contract_has_no_violations() -> None:
    assert violations(CASE, outcome()) == []


@pytest.mark.parametrize(("broken", "expected"), [
    (outcome(returncode=0), "exit code 0"),
    (outcome(returncode=1), "exit code 1"),
    (outcome(returncode=None), "still running"),
    (Outcome(2, "", GOOD_LINE, 5.0, [], [], cpu_seconds=99.0), "used 99.0 s of CPU"),
    (outcome(stderr=""), "0 lines"),
    (outcome(stderr=GOOD_LINE + "warning: more\n"), "2 lines"),
    (outcome(stderr="Traceback (most recent call last):\n"), "Traceback"),
    (outcome(stdout="Traceback (most recent call last):"), "Traceback"),
    (outcome(stderr="oops: cfg.json\n"), "does not start"),
    (outcome(stderr="error: \n"), "does not start"),
    (outcome(stderr="error: something else\n"), "does not name 'cfg.json'"),
    (outcome(stderr="error: cfg.json " + "x" * 600 + "\n"), "characters"),
    (outcome(changes=["changed cfg.json"]), "file changed cfg.json"),
], ids=lambda value: value if isinstance(value, str) else "")
def test_each_broken_property_is_caught(broken: Outcome, expected: str) -> None:
    assert any(expected in problem for problem in violations(CASE, broken)), violations(CASE, broken)


def test_positive_controls_must_exit_zero_and_write_what_they_name() -> None:
    ok = Case("ok", ("estimate",), code=0, creates=("ops.csv",), stdout_json=True)
    assert violations(ok, outcome(returncode=0, stdout="{}")) == []
    assert violations(ok, outcome(returncode=2, stdout="{}"))
    assert violations(ok, outcome(returncode=0, stdout="not json"))
    missing = Outcome(0, "{}", "", 1.0, [], ["ops.csv"])
    assert violations(ok, missing) == ["expected output ops.csv was not written"]


def test_snapshot_sees_changed_bytes_mtime_new_hidden_temporaries_and_removals(tmp_path: Path) -> None:
    (tmp_path / "in.json").write_text("{}")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "keep.txt").write_text("a")
    before = snapshot(tmp_path)
    assert snapshot_changes(before, snapshot(tmp_path)) == []
    os.utime(tmp_path / "in.json", ns=(1, 1))
    (tmp_path / "sub" / ".keep.txt.abc123.tmp").write_text("partial")
    (tmp_path / "sub" / "keep.txt").unlink()
    after = snapshot(tmp_path)
    assert snapshot_changes(before, after) == ["removed sub/keep.txt", "changed in.json",
                                               "new sub/.keep.txt.abc123.tmp"]
    assert snapshot_changes(before, after, allowed_new=("sub",)) == ["removed sub/keep.txt", "changed in.json"]


def test_same_bytes_rewritten_is_a_change(tmp_path: Path) -> None:
    path = tmp_path / "cfg.json"
    path.write_text("{}")
    before = snapshot(tmp_path)
    os.utime(path, ns=(before["cfg.json"].mtime_ns + 10**9, before["cfg.json"].mtime_ns + 10**9))
    assert snapshot_changes(before, snapshot(tmp_path)) == ["changed cfg.json"]


def test_make_files_builds_each_kind_of_input(tmp_path: Path) -> None:
    by_id = {case.id: case for case in ALL_CASES}
    for case_id in ("model-dir-config-is-dir", "model-symlink-loop", "model-fifo", "model-ok-dir"):
        work = tmp_path / case_id
        work.mkdir()
        make_files(by_id[case_id], work)
        assert snapshot(work), case_id


def test_the_yaml_bomb_is_a_few_hundred_bytes_for_a_billion_strings() -> None:
    assert len(yaml_bomb()) < 400 and yaml_bomb().count(b"*h") == 9


def test_the_corpus_has_200_bad_inputs_with_unique_ids_and_a_positive_control_per_family() -> None:
    ids = [case.id for case in [*ALL_CASES, *CONTRACT_CASES]]  # one pool runs both: ids key its outcomes
    assert len(ids) == len(set(ids))
    assert len(BAD_CASES) >= 200
    for family, cases in FAMILIES.items():
        assert any(case.code == 0 for case in cases), f"{family} has no positive control"
        assert any(case.code == 2 for case in cases), family
