"""``capture.progress.Steps``: each step reported as it starts, a nested run's steps counted as the parent's."""

from __future__ import annotations

from layerscope.capture.progress import Steps


def test_steps_report_each_step_as_it_starts_and_the_end() -> None:
    seen: list[tuple[int, int, str]] = []
    steps = Steps(lambda *report: seen.append(report), 3)
    for label in ("a", "b", "c"):
        steps.next(label)
    steps.finish()
    assert seen == [(0, 3, "a"), (1, 3, "b"), (2, 3, "c"), (3, 3, "done")]


def test_a_nested_run_takes_its_share_of_the_parent_steps() -> None:
    """A capture of 4 steps inside a validation of 7: the capture's steps are the validation's 2..5, labelled
    with its prefix, and the parent goes on after them; a sub-run's own end is not reported (the parent's next step
    is)."""
    seen: list[tuple[int, int, str]] = []
    steps = Steps(lambda *report: seen.append(report), 7)
    steps.next("load")
    steps.next("predict")
    sub = steps.nested(4, "capture: ")
    for done, label in enumerate(("build", "warm-up", "profile", "write")):
        sub(done, 4, label)
    sub(4, 4, "done")
    steps.next("join")
    steps.finish()
    assert seen == [(0, 7, "load"), (1, 7, "predict"), (2, 7, "capture: build"), (3, 7, "capture: warm-up"),
                    (4, 7, "capture: profile"), (5, 7, "capture: write"), (6, 7, "join"), (7, 7, "done")]


def test_a_sub_run_of_another_length_is_scaled_and_none_reports_nothing() -> None:
    seen: list[tuple[int, int, str]] = []
    steps = Steps(lambda *report: seen.append(report), 4)
    sub = steps.nested(4, "")
    for done in range(8):
        sub(done, 8, f"step {done}")
    assert [d for d, _, _ in seen] == [0, 0, 1, 1, 2, 2, 3, 3]  # monotone, within the sub-run's share
    quiet = Steps(None, 2)
    quiet.next("a")
    quiet.nested(1)(0, 1, "x")
    quiet.finish()  # no callback: nothing to call, nothing raised
    assert quiet.done == 2
