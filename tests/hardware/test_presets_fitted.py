"""The shipped GPU presets are the table fit's output (``make presets``), every fitted figure citing its rows."""

from __future__ import annotations

import pytest

from layerscope.app.presets import BASE_DIR, FITTED_GPUS, fitted_preset_texts
from layerscope.hardware import load_hardware
from layerscope.hardware.presets import PRESET_DIR


@pytest.fixture(scope="module")
def texts() -> dict[str, str]:
    return fitted_preset_texts()


def test_shipped_gpu_presets_are_what_make_presets_writes(texts) -> None:
    for name in FITTED_GPUS:
        shipped = (PRESET_DIR / f"{name}.yaml").read_text()
        assert shipped == texts[name], f"{name}.yaml differs from its fit: run `make presets` (edit base/{name}.yaml)"
        assert (BASE_DIR / f"{name}.yaml").is_file()


def test_every_fitted_gpu_figure_cites_table_rows_or_says_where_it_came_from() -> None:
    for name in FITTED_GPUS:
        spec = load_hardware(name)
        eff = spec.efficiency
        assert "gpu-kernels.md rows" in eff.matmul_per_dtype_source, name
        assert "gpu-kernels.md rows" in eff.memory_source or "preset's own figure" in eff.memory_source, name
        assert "gpu-kernels.md rows" in spec.sources["launch_overhead_s"] or "fit" in spec.sources["launch_overhead_s"]
        assert 0 < eff.memory <= 1 and all(0 < v <= 1 for v in eff.matmul_per_dtype.values())
        # the datasheet facts are the base file's
        base = load_hardware(BASE_DIR / f"{name}.yaml")
        assert spec.engines == base.engines and spec.memory[-1].bandwidth_bytes_per_s == \
            base.memory[-1].bandwidth_bytes_per_s


def test_the_base_files_are_not_listed_as_presets() -> None:
    from layerscope.hardware import preset_names

    assert set(FITTED_GPUS) <= set(preset_names())
    assert not any("base" in n for n in preset_names())
