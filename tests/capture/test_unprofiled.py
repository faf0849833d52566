"""The unprofiled pass's span clock and its per-phase sums (:mod:`layerscope.capture.unprofiled`)."""

from __future__ import annotations

import pytest

from layerscope.capture.unprofiled import SpanClock, unprofiled_times


def _clock(spans: list[tuple[str, int, float, float]]) -> SpanClock:
    """A clock with spans given by hand: (name, parent index, start, end), in start order."""
    clock = SpanClock()
    for name, parent, start, end in spans:
        clock.names.append(name)
        clock.parents.append(parent)
        clock.starts.append(start)
        clock.ends.append(end)
    return clock


# Two iterations of: prefill [a (b), c], decode_step_0 [a]; a stray top-level span outside any phase.
SPANS = [
    ("prefill", -1, 0.0, 10.0),
    ("a", 0, 1.0, 4.0),
    ("b", 1, 2.0, 3.0),
    ("c", 0, 4.5, 9.0),        # gap a -> c: 0.5
    ("decode_step_0", -1, 11.0, 13.0),
    ("a", 4, 11.5, 12.5),
    ("stray", -1, 14.0, 15.0),
    ("prefill", -1, 20.0, 32.0),
    ("a", 7, 21.0, 25.0),
    ("b", 8, 22.0, 24.0),
    ("c", 7, 25.3, 31.0),      # gap a -> c: 0.3
    ("decode_step_0", -1, 33.0, 36.0),
    ("a", 11, 33.5, 35.0),
]


def test_unprofiled_times_by_hand() -> None:
    got = unprofiled_times(_clock(SPANS), iterations=2)
    assert got.iterations == 2
    assert got.ranges == pytest.approx({"prefill": 11.0, "decode_step_0": 2.5})
    assert got.modules["prefill"] == pytest.approx({"a": 3.5, "b": 1.5, "c": 5.1})
    assert got.modules["decode_step_0"] == pytest.approx({"a": 1.25})
    assert got.calls["prefill"] == pytest.approx({"a": 1.0, "b": 1.0, "c": 1.0})
    assert got.calls["decode_step_0"] == pytest.approx({"a": 1.0})
    assert "stray" not in got.modules and "stray" not in got.ranges
    # Sibling gaps (a -> c): 0.5 and 0.3, median 0.4; the only consecutive-sibling pair.
    assert got.call_overhead_s == pytest.approx(0.4)


def test_unprofiled_times_skip_spans_left_open_and_need_iterations() -> None:
    spans = [("prefill", -1, 0.0, 5.0), ("a", 0, 1.0, float("nan"))]
    got = unprofiled_times(_clock(spans), iterations=1)
    assert got.modules["prefill"] == {} and got.call_overhead_s == 0.0
    with pytest.raises(ValueError, match="iterations"):
        unprofiled_times(_clock(spans), iterations=0)


def test_span_clock_nests_like_record_function() -> None:
    clock = SpanClock()
    with clock.span("prefill"):
        with clock.span("a"):
            inner = clock.span("b")
            inner.__enter__()
            inner.__exit__(None, None, None)
        with clock.span("c"):
            pass
    assert clock.names == ["prefill", "a", "b", "c"]
    assert clock.parents == [-1, 0, 1, 0]
    assert not clock.open
    assert all(e >= s for s, e in zip(clock.starts, clock.ends, strict=True))
    assert clock.starts[1] <= clock.starts[2] <= clock.ends[2] <= clock.ends[1] <= clock.starts[3]
    got = unprofiled_times(clock, iterations=1)
    assert set(got.modules["prefill"]) == {"a", "b", "c"}


def test_span_left_open_by_an_exception_is_closed_with_its_parent() -> None:
    clock = SpanClock()
    outer = clock.span("prefill")
    outer.__enter__()
    clock.span("a").__enter__()  # never exited
    outer.__exit__(None, None, None)
    assert not clock.open
    assert clock.ends[0] >= clock.starts[0]
