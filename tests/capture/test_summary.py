"""Per-module summary from a trace's annotation ranges (no torch needed)."""

from __future__ import annotations

from pathlib import Path

from layerscope.capture.annotate import ModuleCalls
from layerscope.capture.summary import launched_spans, launched_work, module_records, phase_records

TRACES = Path(__file__).resolve().parents[1] / "data" / "traces"


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


def test_launched_work_by_hand() -> None:
    """Two ranges on one track over three launches: span from the first start to the last end, busy the work's
    own durations summed (the idle gap between them left out); a range that launched nothing gets None."""
    got = launched_work(["t", "t", "t", "u"], [0.0, 0.0, 50.0, 0.0], [100.0, 20.0, 60.0, 100.0],
                        ["t", "t", "t"], [5.0, 10.0, 30.0], [100.0, 110.0, 150.0], [108.0, 112.0, 160.0])
    assert got == [(60.0, 8.0 + 2.0 + 10.0), (12.0, 10.0), None, None]


def test_h200_capture_is_host_bound_and_busy_time_matches_the_kernels() -> None:
    """A real Llama-3.2-1B bf16 prefill (512 tokens, 3 iterations) captured on an H200 (bench/ACCURACY.md, "On
    a GPU"): every layer's busy time is positive and within its span; the 16 layers, embedding, final norm,
    rotary embedding, lm_head and sampling together hold nearly all the kernel time inside the prefill ranges
    (counted here straight from the events); and the GPU is busy under a fifth of each layer's span, the host
    being the bottleneck of an eager forward there."""
    import gzip
    import json

    trace = json.loads(gzip.decompress((TRACES / "h200-llama-3.2-1b-prefill-512-bf16.json.gz").read_bytes()))
    events = trace["traceEvents"]
    names = {e["name"] for e in events if e.get("cat") == "user_annotation" and not e["name"].startswith("Profiler")
             and e["name"] != "prefill"}
    calls = {("prefill", n): ModuleCalls(name=n, phase="prefill", calls=3) for n in names}
    records = {(r.phase, r.name): r for r in module_records(trace, calls, [])}
    layers = [records[("prefill", f"layers.{i}")] for i in range(16)]
    for r in layers:
        assert r.calls == 3
        assert r.device_ms is not None and r.device_busy_ms is not None
        assert 0.0 < r.device_busy_ms <= r.device_ms + 1e-9
        assert r.device_busy_ms < 0.2 * r.device_ms
    prefill = [(e["ts"], e["ts"] + e["dur"]) for e in events
               if e.get("cat") == "user_annotation" and e.get("name") == "prefill"]
    kernel_us = sum(e["dur"] for e in events if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memset",
                                                                                          "gpu_memcpy")
                    and any(a <= e["ts"] < b for a, b in prefill))
    top = [*layers, *(records[("prefill", n)] for n in ("embed_tokens", "rotary_emb", "norm", "lm_head",
                                                         "sampling"))]
    busy_ms = sum(r.device_busy_ms or 0.0 for r in top)
    assert 0.97 * kernel_us / 1e3 <= busy_ms <= kernel_us / 1e3 + 1e-9
