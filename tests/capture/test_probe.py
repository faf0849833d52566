"""The machine check (:mod:`layerscope.capture.probe`): reference GEMMs timed and predicted by the spec."""

from __future__ import annotations

import math

import pytest

from layerscope.capture.probe import PROBE_SHAPES, MachineProbe, ProbeReading, predict_probe, probe_machine
from layerscope.errors import CaptureError
from layerscope.hardware import load_hardware
from layerscope.hardware.spec import HardwareSpec


@pytest.fixture
def hand_hw() -> HardwareSpec:
    """1 TFLOP/s fp32, 100 GB/s main memory, 1 µs per kernel, no tables: a roofline by hand."""
    return HardwareSpec.from_dict({
        "name": "hand", "kind": "cpu",
        "engines": {"count": 2, "clock_hz": 1e9, "peak_flops_per_s": {"fp32": 1e12}, "vector_flops_per_s": 1e11},
        "memory": [{"name": "l3", "capacity_bytes": 32 * 1024**2, "bandwidth_bytes_per_s": 1e12},
                   {"name": "dram", "capacity_bytes": 64e9, "bandwidth_bytes_per_s": 1e11}],
        "launch_overhead_s": 1e-6,
    })


def test_predict_probe_by_hand(hand_hw: HardwareSpec) -> None:
    readings = [ProbeReading(1, 8192, 2048, "fp32", 2e-3, math.nan),
                ProbeReading(256, 8192, 2048, "fp32", 4e-3, math.nan)]
    gemv, gemm = predict_probe(readings, hand_hw)
    # GEMV: memory-bound, the 64 MiB weight plus the 8 KiB input row and the 32 KiB output row at 100 GB/s.
    assert gemv.predicted_s == pytest.approx((8192 * 2048 * 4 + 2048 * 4 + 8192 * 4) / 1e11 + 1e-6, rel=1e-12)
    # 256 rows: compute-bound, 2·m·n·k FLOPs at 1 TFLOP/s.
    assert gemm.predicted_s == pytest.approx(2 * 256 * 8192 * 2048 / 1e12 + 1e-6, rel=1e-12)
    assert gemv.ratio == pytest.approx(2e-3 / gemv.predicted_s) and gemv.measured_s == 2e-3
    assert (gemv.label, gemm.label) == ("1x8192x2048", "256x8192x2048")
    assert math.isnan(ProbeReading(1, 1, 1, "fp32", 1e-3, 0.0).ratio)


def test_a_faster_spec_predicts_less_and_raises_the_ratio(hand_hw: HardwareSpec) -> None:
    readings = [ProbeReading(m, n, k, "fp32", 1e-3, math.nan) for m, n, k in PROBE_SHAPES]
    slow = predict_probe(readings, hand_hw)
    fast_hw = hand_hw.model_copy(update={"memory": [hand_hw.memory[0], hand_hw.memory[1].model_copy(
        update={"bandwidth_bytes_per_s": 2e11})]})
    fast = predict_probe(readings, fast_hw)
    assert fast[0].predicted_s < slow[0].predicted_s and fast[0].ratio > slow[0].ratio
    assert fast[-1].predicted_s == slow[-1].predicted_s  # compute-bound: memory does not matter


def test_probe_machine_times_every_shape_on_this_cpu() -> None:
    pytest.importorskip("torch")
    hw = load_hardware("server-cpu")
    shapes = ((1, 512, 256), (16, 512, 256), (64, 256, 128))
    probe = probe_machine(hw, when="now", shapes=shapes, min_time_s=0.005)
    assert isinstance(probe, MachineProbe) and probe.label == "now" and probe.capture == 0
    assert MachineProbe("before", (), 2).label == "before capture 2"
    assert [(r.m, r.n, r.k, r.dtype) for r in probe.readings] == [(*s, "fp32") for s in shapes]
    assert all(r.measured_s > 0 and math.isfinite(r.ratio) for r in probe.readings)
    assert [r.predicted_s for r in probe.readings] == [r.predicted_s for r in predict_probe(probe.readings, hw)]
    doc = probe.to_dict()
    assert doc["when"] == "now" and doc["readings"][1]["m"] == 16
    assert doc["readings"][0]["ratio"] == pytest.approx(probe.readings[0].measured_s / probe.readings[0].predicted_s)


@pytest.mark.parametrize(("dtype", "message"), [("bogus", "unknown dtype 'bogus'"),
                                                ("int8", "dtype 'int8' is not one torch GEMMs run here")])
def test_probe_machine_rejects_bad_dtypes(dtype: str, message: str) -> None:
    pytest.importorskip("torch")
    with pytest.raises(CaptureError, match=message):
        probe_machine(load_hardware("server-cpu"), when="now", dtype=dtype, shapes=((1, 8, 8),))
