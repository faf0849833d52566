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


def _call_timer_model(torch):  # type: ignore[no-untyped-def]
    class Leaf(torch.nn.Module):
        def forward(self, x):  # type: ignore[no-untyped-def]
            return x + 1

    class Layer(torch.nn.Module):  # overrides __call__ and calls super(), as transformers' checkpointing layers do
        def __init__(self) -> None:
            super().__init__()
            self.leaf = Leaf()
            self.untimed = Leaf()

        def __call__(self, *args, **kwargs):  # type: ignore[no-untyped-def]
            return super().__call__(*args, **kwargs)

        def forward(self, x):  # type: ignore[no-untyped-def]
            return self.untimed(self.leaf(x))

    return Layer()


def test_module_call_timer_times_whole_calls_and_restores_module_call() -> None:
    torch = pytest.importorskip("torch")
    import time

    from layerscope.capture.unprofiled import ModuleCallTimer

    layer = _call_timer_model(torch)
    original = torch.nn.Module.__dict__["__call__"]
    # A pre-hook runs inside the call but outside the forward body: a hook-to-hook range misses it,
    # a whole-call span holds it.
    layer.leaf.register_forward_pre_hook(lambda module, args: time.sleep(0.02))
    clock = SpanClock()
    with ModuleCallTimer(torch.nn.Module, [("layers.0", layer), ("layers.0.leaf", layer.leaf)], clock.span) as timer:
        assert timer.phase == "prefill"
        with clock.span("prefill"):
            out = layer(torch.zeros(2))
    assert torch.equal(out, torch.full((2,), 2.0))
    assert torch.nn.Module.__dict__["__call__"] is original
    assert clock.names == ["prefill", "layers.0", "layers.0.leaf"]  # the unnamed module is not timed
    assert clock.parents == [-1, 0, 1]
    got = unprofiled_times(clock, iterations=1)
    assert got.modules["prefill"]["layers.0.leaf"] >= 0.02
    assert got.modules["prefill"]["layers.0"] >= got.modules["prefill"]["layers.0.leaf"]


def test_module_call_timer_restores_module_call_after_an_exception() -> None:
    torch = pytest.importorskip("torch")
    from layerscope.capture.unprofiled import ModuleCallTimer

    layer = _call_timer_model(torch)
    original = torch.nn.Module.__dict__["__call__"]
    clock = SpanClock()
    with pytest.raises(TypeError), ModuleCallTimer(torch.nn.Module, [("layers.0.leaf", layer.leaf)], clock.span):
        layer.leaf("not a tensor")  # str + 1 raises inside the forward
    assert torch.nn.Module.__dict__["__call__"] is original
    assert not clock.open and clock.ends[0] >= clock.starts[0]
