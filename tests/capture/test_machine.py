from __future__ import annotations

import pytest

pytest.importorskip("torch")

from layerscope.capture.machine import measure_machine
from layerscope.hardware import load_hardware
from layerscope.hardware.loaders import dump_hardware_yaml
from layerscope.units import DType


def test_measured_spec_is_plausible_and_round_trips(tmp_path):
    hw = measure_machine("cpu", min_time_s=0.05, dtypes=("fp32",))
    # Any CPU this runs on does between 1 GFLOP/s and 100 TFLOP/s of fp32 GEMM and moves 0.5-2000 GB/s.
    assert 1e9 < hw.peak_flops(DType.FP32) < 1e14
    assert 0.5e9 < hw.memory_bandwidth_bytes_per_s < 2e12
    assert 0 < hw.launch_overhead_s < 1e-3
    assert hw.source("engines.peak_flops_per_s.fp32").startswith("measured")
    path = tmp_path / "me.yaml"
    path.write_text(dump_hardware_yaml(hw))
    again = load_hardware(path)
    assert again.peak_flops(DType.FP32) == pytest.approx(hw.peak_flops(DType.FP32))
