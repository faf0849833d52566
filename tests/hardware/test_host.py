"""``hardware/host.py``: the other processes' CPU load from /proc, and where this machine's spec is kept."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from layerscope.hardware.host import (
    CpuLoad,
    CpuSample,
    cpu_sample,
    load_between,
    machine_key,
    machines_dir,
    measure_load,
    saved_spec_path,
)


def test_load_between_two_samples_by_hand(monkeypatch):
    monkeypatch.setattr("layerscope.hardware.host._ticks_per_s", lambda: 100.0)
    # 2 s of wall time: 300 busy ticks (3 CPU-seconds) of which 80 ours, 40 ticks stolen by the hypervisor.
    a = CpuSample(wall_s=10.0, busy_ticks=1_000, steal_ticks=50, own_ticks=200)
    b = CpuSample(wall_s=12.0, busy_ticks=1_300, steal_ticks=90, own_ticks=280)
    load = load_between(a, b)
    assert load is not None
    assert load.own_cores == pytest.approx(0.4)
    assert load.others_cores == pytest.approx((300 - 80) / 100 / 2)  # 1.1 cores
    assert load.steal_cores == pytest.approx(0.2)
    assert load.busy_cores == pytest.approx(1.3)
    assert load_between(b, a) is None and load_between(None, b) is None


@pytest.mark.parametrize(("cores", "busy", "threads", "free", "over"), [
    (2, 1.0, 2, 1.0, 1.0),   # one core taken, two threads: one waits
    (2, 1.0, 1, 1.0, 0.0),   # one thread on the free core
    (2, 0.1, 2, 1.9, 0.1),
    (2, 3.0, 1, 0.0, 2.0),   # more load than cores
    (16, 3.5, 12, 12.5, 0.0),
])
def test_free_and_oversubscribed_cores(cores, busy, threads, free, over):
    load = CpuLoad(wall_s=1.0, cores=cores, own_cores=0.0, others_cores=busy, steal_cores=0.0)
    assert load.free_cores() == pytest.approx(free)
    assert load.oversubscribed_cores(threads) == pytest.approx(over)


@pytest.mark.skipif(not Path("/proc/stat").is_file(), reason="reads /proc (Linux)")
def test_a_process_spinning_on_a_core_is_seen_as_another_process_load():
    assert cpu_sample() is not None
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        load = measure_load(1.0)
    finally:
        spinner.kill()
        spinner.wait()
    assert load is not None and 0.9 < load.wall_s < 3.0
    # The spinner runs on a core the whole second (a busy CI machine only adds to it); this process sleeps.
    assert load.others_cores > 0.6
    assert load.own_cores < 0.2


def test_where_machine_specs_are_kept(monkeypatch, tmp_path):
    monkeypatch.setenv("LAYERSCOPE_MACHINES_DIR", str(tmp_path / "m"))
    assert machines_dir() == tmp_path / "m"
    monkeypatch.delenv("LAYERSCOPE_MACHINES_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert machines_dir() == tmp_path / "xdg" / "layerscope" / "machines"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert machines_dir() == tmp_path / "home" / ".cache" / "layerscope" / "machines"
    assert saved_spec_path("cpu", "AMD EPYC 7763 64-Core Processor", 2).name == \
        "cpu-amd-epyc-7763-64-core-processor-2t.yaml"


def test_machine_keys_differ_by_device_chip_and_threads():
    keys = {machine_key("cpu", "AMD EPYC", 2), machine_key("cpu", "AMD EPYC", 1), machine_key("cpu", "Intel Xeon", 2),
            machine_key("cuda", "NVIDIA H100 80GB HBM3", 132)}
    assert len(keys) == 4
    assert machine_key("cpu", "../../etc/passwd", 1) == "cpu-etc-passwd-1t"  # no path in a name
    assert machine_key("cpu", "", 1) == "cpu-unknown-1t"


def test_saved_spec_paths_lists_this_chips_thread_counts_only(monkeypatch, tmp_path):
    from layerscope.hardware.host import keep_spec, quick_spec_path, saved_spec_paths

    monkeypatch.setenv("LAYERSCOPE_MACHINES_DIR", str(tmp_path / "m"))
    for threads in (1, 2, 16):
        keep_spec(saved_spec_path("cpu", "AMD EPYC", threads), "name: x\n")
    keep_spec(saved_spec_path("cpu", "AMD EPYC 7763", 2), "name: other chip\n")  # its slug starts like ours
    keep_spec(quick_spec_path("cpu", "AMD EPYC", 2), "name: quick\n")  # a demo's quick one, not calibrated
    assert [p.name for p in saved_spec_paths("cpu", "AMD EPYC")] == [
        "cpu-amd-epyc-16t.yaml", "cpu-amd-epyc-1t.yaml", "cpu-amd-epyc-2t.yaml"]
    assert saved_spec_path("cpu", "AMD EPYC", 2).read_text() == "name: x\n"


def test_busy_means_short_of_cores_by_the_threshold():
    from layerscope.hardware.host import BUSY_OVERSUBSCRIBED_CORES

    def load(busy: float) -> CpuLoad:
        return CpuLoad(wall_s=1.0, cores=2, own_cores=0.0, others_cores=busy, steal_cores=0.0)

    assert not load(0.2).is_busy_for(2)  # 0.2 short: within the threshold
    assert load(BUSY_OVERSUBSCRIBED_CORES).is_busy_for(2)
    assert not load(1.0).is_busy_for(1)  # one thread on the free core
