"""Per-module summary from a trace's annotation ranges (no torch needed)."""

from __future__ import annotations

from layerscope.capture.annotate import ModuleCalls
from layerscope.capture.summary import launched_spans, module_records, phase_records


def _x(name: str, ts: float, dur: float, cat: str = "user_annotation", tid: int = 1) -> dict[str, object]:
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": 1 if cat == "user_annotation" else 0,
            "tid": tid}


TRACE = {
    "traceEvents": [
        _x("prefill", 0, 100),
        _x("lm_head", 10, 40),
        _x("sampling", 60, 5),
        _x("decode_step_0", 200, 50),
        _x("lm_head", 210, 10),
        _x("decode_step_1", 300, 50),
        _x("lm_head", 310, 12),
        _x("lm_head", 500, 99),  # outside every phase: not counted
        # Kineto's GPU range of a launch's innermost module: not read (tests/analysis/test_validate.py has
        # a whole CUDA capture); a CPU capture has no launches, so no device time.
        _x("lm_head", 20, 30, cat="gpu_user_annotation", tid=7),
        {"ph": "i", "name": "lm_head", "ts": 15},  # instant events are ignored
    ]
}


def test_module_and_phase_records() -> None:
    calls = {
        ("prefill", "lm_head"): ModuleCalls("lm_head", "prefill", 1, [(1, 8, 64)], [(1, 8, 256)]),
        ("decode", "lm_head"): ModuleCalls("lm_head", "decode", 2, [(1, 1, 64)], [(1, 1, 256)]),
    }
    records = module_records(TRACE, calls, ["lm_head"], extra=("sampling",))
    got = [(r.phase, r.name, r.calls, r.total_ms, r.device_ms) for r in records]
    assert got == [
        ("prefill", "lm_head", 1, 0.040, None),
        ("prefill", "sampling", 1, 0.005, None),
        ("decode", "lm_head", 2, 0.022, None),
    ]
    assert records[2].mean_ms == 0.011 and records[2].input_shapes == [[1, 1, 64]]
    assert [(p.name, p.calls, p.total_ms) for p in phase_records(TRACE)] == [
        ("prefill", 1, 0.1), ("decode_step_0", 1, 0.05), ("decode_step_1", 1, 0.05)
    ]


def test_launched_spans_by_hand() -> None:
    # Track "a": launches at 1, 5, 9 making work [10, 12), [12, 20), [30, 31); track "b": one at 5.
    spans = launched_spans(
        ["a", "a", "a", "b", "c"], [0, 4, 9, 0, 0], [10, 6, 10, 10, 10],
        ["a", "a", "a", "b"], [1, 5, 9, 5], [10, 12, 30, 100], [12, 20, 31, 150])
    # [0, 10) holds all three (first start 10, last end 31); [4, 6) the second; [9, 10) the third;
    # "b" its own launch only; "c" launched nothing.
    assert spans == [21.0, 8.0, 1.0, 50.0, None]
    assert launched_spans(["a"], [2], [5], ["a"], [5], [0], [1]) == [None]  # a launch at the end is outside
