"""hardware.collective_fit: α-β terms fitted on the collective rows; the interconnect spec's new fields."""

from __future__ import annotations

import dataclasses

import pytest

from layerscope.cost.collectives import algorithm_work
from layerscope.errors import HardwareSpecError
from layerscope.hardware import load_hardware
from layerscope.hardware.collective_fit import NOTED, collective_rows, fit_interconnect
from layerscope.hardware.kernel_table import read_kernel_table
from layerscope.hardware.loaders import dump_hardware_yaml
from layerscope.hardware.loaders import load_hardware as load_any
from layerscope.hardware.spec import HardwareSpec


@pytest.fixture(scope="module")
def table():
    return read_kernel_table()


@pytest.fixture(scope="module")
def presets():
    return {name: load_hardware(name) for name in ("a100-sxm", "h100-sxm", "h200", "b200")}


def test_busbw_rows_become_times_with_ncclss_factor(table) -> None:
    rows = {r.id: r for r in collective_rows(table)}
    # CX-03: 16 GiB all-reduce on 8 GPUs at busbw 234.89 GB/s: algbw = busbw / 1.75, t = M / algbw (the row: 127,997 µs)
    assert rows["CX-03"].time_s == pytest.approx(16 * 2**30 * 1.75 / 234.89e9)
    assert rows["CX-03"].time_s == pytest.approx(0.127997, rel=2e-3)
    # CX-13: all-gather busbw (n-1)/n
    assert rows["CX-13"].time_s == pytest.approx(16 * 2**30 * 7 / 8 / 361.4e9)
    assert rows["CX-10"].algorithm == "nvls" and rows["CX-08"].algorithm == "ring"
    assert rows["CX-21"].message_bytes is None  # an asymptotic bandwidth


def test_noted_values_are_in_their_rows_notes(table) -> None:
    by_id = {r.id: r for r in table}
    for note in NOTED:
        assert note.quote in by_id[note.row].notes, note


def test_fit_reproduces_the_rows_it_is_fitted_on(table, presets) -> None:
    from layerscope.analysis.collective_replay import predict_row_s
    from layerscope.hardware.collective_fit import row_target_s

    for gpu, tolerance in (("h200", 0.05), ("b200", 0.20), ("a100-sxm", 0.45)):
        fit = fit_interconnect(presets[gpu], table, presets, algorithm_work)
        for row in collective_rows(table):
            if row.gpu == gpu:
                predicted, _ = predict_row_s(row, fit.spec)
                assert predicted / row_target_s(row) - 1 == pytest.approx(0, abs=tolerance), (gpu, row.id)
    h200 = fit_interconnect(presets["h200"], table, presets, algorithm_work).spec.interconnect
    assert h200 is not None and 0.75 < h200.algorithms["ring"].bandwidth_fraction < 0.85  # 367 / 450
    assert "CX-10" in h200.algorithms["nvls"].source and "CX-08" in h200.algorithms["ring"].source
    assert h200.network is not None and "b200's fit" in h200.network.algorithms["ring"].source


def test_a_gpu_without_rows_says_whose_fit_it_took(table, presets) -> None:
    gh200 = load_hardware("gh200")
    spec = fit_interconnect(gh200, table, {**presets, "gh200": gh200}, algorithm_work).spec
    assert spec.interconnect is not None
    assert "h100-sxm's fit" in spec.interconnect.algorithms["ring"].source


def test_rows_faster_than_the_link_are_refused_naming_them(table, presets) -> None:
    fast = [dataclasses.replace(r, value=r.value * 3) if r.id == "CX-13" else r for r in table]
    with pytest.raises(HardwareSpecError, match="CX-13"):
        fit_interconnect(presets["h200"], fast, presets, algorithm_work)


def test_every_shipped_gpu_preset_cites_its_collective_terms() -> None:
    from layerscope.app.presets import FITTED_GPUS

    for name in FITTED_GPUS:
        ic = load_hardware(name).interconnect
        assert ic is not None and {"ring", "tree", "direct"} <= set(ic.algorithms), name
        for algo in ic.algorithms.values():
            assert "gpu-kernels.md rows" in algo.source or "fit" in algo.source, (name, algo.source)


BASE = {"name": "x", "kind": "gpu",
        "engines": {"count": 1, "clock_hz": 1e9, "peak_flops_per_s": {"bf16": 1e12}, "vector_flops_per_s": 1e11},
        "memory": [{"name": "hbm", "capacity_bytes": 1e9, "bandwidth_bytes_per_s": 1e11}]}


def test_an_old_interconnect_still_loads_and_dumps_as_before(tmp_path) -> None:
    old = {**BASE, "interconnect": {"name": "nvlink4", "bandwidth_bytes_per_s": 450e9, "latency_s": 1e-6}}
    spec = HardwareSpec.from_dict(old)
    assert spec.interconnect is not None and spec.interconnect.domain_gpus is None
    assert spec.interconnect.network is None and spec.interconnect.algorithms == {}
    text = dump_hardware_yaml(spec)
    assert "domain_gpus" not in text and "algorithms" not in text
    path = tmp_path / "old.yaml"
    path.write_text(text)
    assert load_any(path) == spec


def test_the_new_fields_load_and_bad_ones_name_the_field() -> None:
    link = {"name": "nvlink4", "bandwidth_bytes_per_s": 450e9, "latency_s": 1e-6, "domain_gpus": 8,
            "in_switch_reduction": True, "in_switch_min_gpus": 5,
            "network": {"name": "cx7", "bandwidth_bytes_per_s": 50e9, "latency_s": 3e-6,
                        "algorithms": {"ring": {"alpha_s": 2e-5, "bandwidth_fraction": 0.86, "source": "rows"}}},
            "algorithms": {"nvls": {"alpha_s": 3e-5, "bandwidth_fraction": 0.6}}}
    spec = HardwareSpec.from_dict({**BASE, "interconnect": link})
    assert spec.interconnect is not None and spec.interconnect.in_switch_bandwidth == 450e9
    assert spec.interconnect.network is not None and spec.interconnect.network.algorithms["ring"].alpha_s == 2e-5
    for bad, field in (({"algorithms": {"butterfly": {"alpha_s": 0, "bandwidth_fraction": 1}}}, "butterfly"),
                       ({"algorithms": {"ring": {"alpha_s": 0, "bandwidth_fraction": 1.5}}}, "bandwidth_fraction"),
                       ({"in_switch_reduction": False}, "in_switch_reduction"),
                       ({"domain_gpus": None}, "domain_gpus"),
                       ({"network": {**link["network"], "algorithms": {"nvls": {"alpha_s": 0,
                                                                                 "bandwidth_fraction": 1}}}}, "nvls")):
        with pytest.raises(HardwareSpecError, match=field):
            HardwareSpec.from_dict({**BASE, "interconnect": {**link, **bad}})
