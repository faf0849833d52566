from __future__ import annotations

import os

import pytest

pytest.importorskip("torch")

from layerscope.capture.machine import measure_machine
from layerscope.hardware import load_hardware
from layerscope.hardware.loaders import dump_hardware_yaml
from layerscope.units import DType


def test_measured_spec_is_plausible_and_round_trips(tmp_path):
    hw = measure_machine("cpu", min_time_s=0.05, dtypes=("fp32",), rounds=1)
    # Any CPU this runs on does between 1 GFLOP/s and 100 TFLOP/s of fp32 GEMM and moves 0.5-2000 GB/s.
    assert 1e9 < hw.peak_flops(DType.FP32) < 1e14
    assert 0.5e9 < hw.memory_bandwidth_bytes_per_s < 2e12
    assert 0 < hw.launch_overhead_s < 1e-3
    assert hw.source("engines.peak_flops_per_s.fp32").startswith("measured")
    path = tmp_path / "me.yaml"
    path.write_text(dump_hardware_yaml(hw))
    again = load_hardware(path)
    assert again.peak_flops(DType.FP32) == pytest.approx(hw.peak_flops(DType.FP32))


@pytest.mark.parametrize(("cores", "busy", "max_threads", "threads"), [
    (2, 0.0, 2, 2), (2, 0.1, 2, 2), (2, 0.4, 2, 1), (2, 1.0, 2, 1), (2, 2.5, 2, 1), (16, 3.5, 16, 12), (16, 0.0, 8, 8),
])
def test_threads_for_load_leave_each_thread_a_free_core(cores, busy, max_threads, threads):
    from layerscope.capture.machine import BUSY_OVERSUBSCRIBED_CORES, threads_for_load
    from layerscope.hardware.host import CpuLoad

    load = CpuLoad(wall_s=1.0, cores=cores, own_cores=0.0, others_cores=busy, steal_cores=0.0)
    chosen = threads_for_load(max_threads, load)
    assert chosen == threads
    # The property the choice keeps: no more than BUSY_OVERSUBSCRIBED_CORES short, unless one thread already is.
    assert chosen == 1 or load.oversubscribed_cores(chosen) < BUSY_OVERSUBSCRIBED_CORES
    assert threads_for_load(max_threads, None) == max_threads


def test_rounds_keep_each_figures_best_and_bound_it_with_the_worst():
    from layerscope.capture.machine import measure_machine_robust, torch_threads

    with torch_threads(1):  # one thread: a free core even on a busy CI machine
        m = measure_machine_robust("cpu", min_time_s=0.03, rounds=2, dtypes=("fp32",))
    assert len(m.rounds) == 2 and m.attempts == 1 and m.waited_s == 0
    assert m.spec.peak_flops(DType.FP32) == pytest.approx(max(r.gemm_flops_per_s["fp32"] for r in m.rounds))
    assert m.slowest.peak_flops(DType.FP32) == pytest.approx(min(r.gemm_flops_per_s["fp32"] for r in m.rounds))
    assert m.spec.launch_overhead_s == pytest.approx(min(r.launch_overhead_s for r in m.rounds))
    assert m.spec.memory_bandwidth_bytes_per_s >= m.slowest.memory_bandwidth_bytes_per_s
    assert 0 <= m.spread("gemm") < 1 and m.spread("launch") >= 0
    # The CPU's GEMM rate is timed as a layer runs its projections: F.linear over weights that leave the cache.
    source = m.spec.source("engines.peak_flops_per_s.fp32")
    assert source.startswith("measured: F.linear as nn.Linear runs a layer") and source.endswith("best of 2 rounds")
    doc = m.to_dict()
    assert doc["rounds"] == 2 and set(doc["spread"]) == {"gemm_fp32", "bandwidth", "vector", "launch"}


def test_a_busy_machine_is_waited_for_then_reported(monkeypatch):
    import subprocess
    import sys

    import torch

    from layerscope.capture.machine import measure_machine_robust, torch_threads

    cores = os.cpu_count() or 1
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        with torch_threads(cores):  # as many threads as cores, and a spinner on one: someone waits
            m = measure_machine_robust("cpu", min_time_s=0.02, rounds=1, dtypes=("fp32",), max_wait_s=1.0)
            assert torch.get_num_threads() == cores
    finally:
        spinner.kill()
        spinner.wait()
    if m.load is None:
        pytest.skip("no /proc: the load cannot be read here")
    assert m.busy and m.oversubscribed_cores > 0.5
    assert m.attempts == 2 and m.waited_s >= 0.9 and len(m.loads_tried) == 2
    assert m.to_dict()["busy"] is True


def test_last_level_cache_is_the_largest_level_or_the_one_default():
    from layerscope.capture.machine import DEFAULT_LLC_BYTES, last_level_cache_bytes

    assert last_level_cache_bytes([{"name": "l2", "capacity_bytes": 1 << 20},
                                   {"name": "l3", "capacity_bytes": 32 << 20}]) == (float(32 << 20), True)
    assert last_level_cache_bytes([]) == (float(DEFAULT_LLC_BYTES), False)
    size, from_sysfs = last_level_cache_bytes()
    assert size > 0 and isinstance(from_sysfs, bool)
