"""Power-limited clocks fitted on the kernel table's PX rows (``hardware.power_fit``): the fit by hand, the presets
carrying what the fit and the limit rule give (a drift test on the base files), every energy figure sourced and
marked, and the clock rows left out of the fit reported with their error."""

from __future__ import annotations

import pytest

from layerscope.hardware.kernel_table import read_kernel_table
from layerscope.hardware.power_fit import (
    SAME_DIE,
    clock_residuals,
    fit_power,
    limit_rule_pj_per_flop,
    matrix_figures,
    predicted_clock_hz,
)
from layerscope.hardware.presets import load_base_preset
from layerscope.units import DType

#: Every GPU preset with energy figures.
ENERGY_GPUS = ("a100-sxm", "b200", "gh200", "h100-pcie", "h100-sxm", "h200", "l40s", "mi300x", "rtx-4090")
ROWS = read_kernel_table()


@pytest.fixture(scope="module")
def specs() -> dict:
    return {name: load_base_preset(name) for name in ENERGY_GPUS}


def test_px08_fit_by_hand(specs: dict) -> None:
    (fit,) = fit_power(ROWS, specs)
    # PX-08: the GH100 die at its 700 W limit holds ~1600 MHz under compute-bound bf16; h100-sxm: 69 W idle (PX-10),
    # 989 TFLOP/s bf16 at 1.83 GHz, so e = (700 − 69) W / (989e12 · 1600 / 1830) FLOP/s
    assert (fit.row_id, fit.gpu, fit.dtype, fit.clock_hz) == ("PX-08", "h100-sxm", DType.BF16, 1.6e9)
    assert fit.matrix_pj_per_flop == pytest.approx(631 / (989e12 * 1600 / 1830) * 1e12)
    assert fit.rounded_pj_per_flop == 0.7297
    assert fit.presets == SAME_DIE["h100-sxm"]


def test_presets_carry_the_fit_and_the_limit_rule(specs: dict) -> None:
    """The base presets hold what ``power_fit`` computes: the GH100 presets the PX-08 fit (their bf16 source citing
    the row), the others the limit rule; every vector figure the bf16 one × 3.07."""
    (fit,) = fit_power(ROWS, specs)
    for name, hw in specs.items():
        energy = hw.energy
        fitted = name in fit.presets
        expected = matrix_figures(hw, fit.matrix_pj_per_flop if fitted else None)
        assert energy.matrix_pj_per_flop == expected, name
        assert energy.vector_pj_per_flop == float(f"{expected[DType.BF16] * 3.07:.4g}"), name
        source = hw.sources["energy.matrix_pj_per_flop.bf16"]
        assert source.startswith("fitted") and "PX-08" in source if fitted else source.startswith("assumed"), name
    assert limit_rule_pj_per_flop(specs["b200"]) == pytest.approx((1000 - 98.6) / 2250e12 * 1e12)


def test_every_energy_figure_is_sourced_and_marked(specs: dict) -> None:
    marks = ("measured", "derived", "assumed", "fitted", "as ", "hardware-specs.md", "gpu-kernels.md")
    for name, hw in specs.items():
        figures = [f"energy.matrix_pj_per_flop.{dt.value}" for dt in hw.energy.matrix_pj_per_flop]
        figures += [f"energy.{k}" for k, v in hw.energy.model_dump().items() if k != "matrix_pj_per_flop" and v]
        for figure in figures:
            assert hw.sources.get(figure, "").startswith(marks), (name, figure)


def test_the_model_reproduces_px08_and_reports_px09(specs: dict) -> None:
    """In sample, PX-08's 1600 MHz (and so its 865 TFLOP/s practical peak); held out, PX-09: an H100 PCIe
    at its 350 W limit under bandwidth tests runs as low as 1,395 MHz, where the model's bandwidth-bound power
    (~60 W dynamic) leaves the clock at 1,755 MHz: +26 %."""
    res = {r.row_id: r for r in clock_residuals(ROWS, specs)}
    assert res["PX-08"].used_in_fit and res["PX-08"].error == pytest.approx(0.0, abs=1e-3)
    assert 989 * res["PX-08"].predicted_clock_hz / 1.83e9 == pytest.approx(865, rel=1e-3)
    px09 = res["PX-09"]
    assert not px09.used_in_fit and px09.load == "bandwidth"
    assert px09.stated_clock_hz == 1.395e9 and px09.predicted_clock_hz == 1.755e9
    assert px09.error == pytest.approx(1755 / 1395 - 1)


def test_predicted_clock_by_hand(specs: dict) -> None:
    hw = specs["h100-sxm"]
    assert predicted_clock_hz(hw, 300.0) == hw.engines.clock_hz  # under the 631 W headroom
    assert predicted_clock_hz(hw, 1262.0) == pytest.approx(hw.engines.clock_hz / 2)
