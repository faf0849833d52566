"""Per-module summary from a trace's annotation ranges (no torch needed)."""

from __future__ import annotations

from layerscope.capture.annotate import ModuleCalls
from layerscope.capture.summary import module_records, phase_records


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
        # GPU ranges on a stream without phase ranges of its own (µs on the same clock).
        _x("lm_head", 20, 30, cat="gpu_user_annotation", tid=7),
        _x("lm_head", 215, 4, cat="gpu_user_annotation", tid=7),
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
        ("prefill", "lm_head", 1, 0.040, 0.030),
        ("prefill", "sampling", 1, 0.005, None),
        ("decode", "lm_head", 2, 0.022, 0.004),
    ]
    assert records[2].mean_ms == 0.011 and records[2].input_shapes == [[1, 1, 64]]
    assert [(p.name, p.calls, p.total_ms) for p in phase_records(TRACE)] == [
        ("prefill", 1, 0.1), ("decode_step_0", 1, 0.05), ("decode_step_1", 1, 0.05)
    ]
