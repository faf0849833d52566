"""``app.catalogs``: the models and hardware listings as result models; ``--json`` is their dump."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from layerscope.app.catalogs import HardwareRequest, HardwareResult, ModelsRequest, ModelsResult, hardware, models
from layerscope.app.requests import build_request
from layerscope.cli.app import app
from layerscope.errors import HardwareSpecError, WorkloadError
from layerscope.hardware import cluster_names, list_presets


def test_models_lists_the_catalog_with_counts():
    result = models(ModelsRequest())
    rows = {r.alias: r for r in result.root}
    assert rows["llama-3.2-1b"].id == "meta-llama/Llama-3.2-1B" and rows["llama-3.2-1b"].layers == 16
    moe = rows["qwen3-30b-a3b"]
    assert moe.moe and moe.params_active < moe.params_total
    assert ModelsResult.model_validate_json(result.model_dump_json()) == result


def test_hardware_lists_every_preset_or_one_spec():
    every = hardware(HardwareRequest())
    names = [*list_presets(), *cluster_names()]  # the chips, then the clusters
    assert [r.name for r in every.root] == [hardware(HardwareRequest(hardware=n)).root[0].name for n in names]
    h100 = hardware(HardwareRequest(hardware="h100-sxm")).root
    assert len(h100) == 1 and h100[0].peak_bf16_flops_per_s > 1e14 and h100[0].memory_levels
    assert HardwareResult.model_validate_json(every.model_dump_json()) == every


@pytest.mark.parametrize(("args", "result"), [
    (["models", "--json"], lambda: models()),
    (["hardware", "--json"], lambda: hardware()),
    (["hardware", "-H", "h100-sxm", "--json"], lambda: hardware(HardwareRequest(hardware="h100-sxm"))),
])
def test_cli_json_is_the_result_dump(args, result):
    out = CliRunner().invoke(app, args)
    assert out.exit_code == 0, out.output
    assert json.loads(out.stdout) == json.loads(result().model_dump_json())


def test_bad_request_fields_are_named():
    with pytest.raises(WorkloadError, match="device_column"):
        build_request(HardwareRequest, hardware="h100-sxm", device_column=3)
    with pytest.raises(WorkloadError, match="extra"):
        build_request(ModelsRequest, extra=1)
    with pytest.raises(HardwareSpecError, match="h100-sxmm"):
        hardware(HardwareRequest(hardware="h100-sxmm"))
