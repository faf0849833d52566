"""``app.estimate.result_of``: the result models around the op rows are built with ``model_construct``, not
validated (#31.4); each must equal what validating the same values gives, field for field and type for type."""

from __future__ import annotations

import math
from typing import Any

import pytest
from pydantic import BaseModel

from layerscope.app.estimate import EstimateRequest, EstimateResult, estimate
from layerscope.app.requests import ParallelPlan, WorkloadRequest

#: Dense, GQA, MoE and MLA models; prefill, decode, chunked and generate; tp, pp, ep, dp, sp, micro-batches;
#: presets with and without energy figures; one layer; unfused attention; another cost model and profile.
CASES: dict[str, EstimateRequest] = {
    "dense-decode": EstimateRequest(model="llama-3.2-1b"),
    "gqa-prefill": EstimateRequest(model="llama-3.1-8b", workload=WorkloadRequest(phase="prefill", prompt_len=256)),
    "mha-generate": EstimateRequest(model="gpt2", hardware="a100-sxm",
                                    workload=WorkloadRequest(phase="generate", prompt_len=32, decode_steps=4)),
    "moe-generate-tp-ep": EstimateRequest(
        model="qwen3-30b-a3b", hardware="h200", parallel=ParallelPlan(tensor_parallel=2, expert_parallel=2),
        workload=WorkloadRequest(phase="generate", prompt_len=64, decode_steps=3)),
    "mla-generate": EstimateRequest(model="deepseek-v2-lite",
                                    workload=WorkloadRequest(phase="generate", prompt_len=64, decode_steps=2)),
    "mla-decode-tbo": EstimateRequest(model="deepseek-v2-lite", hardware="h200", workload=WorkloadRequest(batch=4),
                                      parallel=ParallelPlan(tensor_parallel=2, expert_parallel=2,
                                                            two_batch_overlap=True)),
    "moe-pp-micro-batches": EstimateRequest(
        model="mixtral-8x7b-v0.1", workload=WorkloadRequest(batch=4),
        parallel=ParallelPlan(tensor_parallel=2, pipeline_parallel=2, micro_batches=2)),
    "chunked-tp-pp": EstimateRequest(model="llama-3.2-3b", workload=WorkloadRequest(phase="chunked", chunk=128),
                                     parallel=ParallelPlan(tensor_parallel=2, pipeline_parallel=2)),
    "sp-dp": EstimateRequest(model="llama-3.2-1b", workload=WorkloadRequest(batch=4),
                             parallel=ParallelPlan(tensor_parallel=2, data_parallel=2, sequence_parallel=True)),
    "layer-unfused-tiling": EstimateRequest(model="qwen3-8b", hardware="b200", layer=3, attention="unfused",
                                            cost_model="tiling"),
    "fp8-mi300x": EstimateRequest(model="gemma-2-9b-it", hardware="mi300x",
                                  workload=WorkloadRequest(phase="prefill", prompt_len=128, weight_dtype="fp8")),
    "cpu-no-energy": EstimateRequest(model="gpt2", hardware="server-cpu", workload=WorkloadRequest(context=256)),
    "accelerator": EstimateRequest(model="llama-3.2-1b", hardware="NVL-AX"),
}


def _same(built: Any, validated: Any, path: str) -> None:
    assert type(built) is type(validated), f"{path}: {type(built).__name__} vs {type(validated).__name__}"
    if isinstance(built, BaseModel):
        assert built.model_fields_set == validated.model_fields_set, path
        for name in type(built).model_fields:
            _same(getattr(built, name), getattr(validated, name), f"{path}.{name}")
    elif isinstance(built, dict):
        assert list(built) == list(validated), path
        for key in built:
            _same(built[key], validated[key], f"{path}[{key!r}]")
    elif isinstance(built, (list, tuple)):
        assert len(built) == len(validated), path
        for i, (a, b) in enumerate(zip(built, validated, strict=True)):
            _same(a, b, f"{path}[{i}]")
    elif isinstance(built, float) and math.isnan(built):
        assert math.isnan(validated), path
    else:
        assert built == validated, path


@pytest.mark.parametrize("case", list(CASES))
def test_the_built_result_equals_the_validated_one_type_for_type(case: str) -> None:
    built = estimate(CASES[case])
    # Only the fields given are dumped (the validated model then has the same fields set); a value of another
    # type than its field's would warn in the dump, and is an error here.
    validated = EstimateResult.model_validate(built.model_dump(exclude_unset=True, warnings="error"))
    _same(built, validated, case)
    assert built.model_dump_json() == validated.model_dump_json()


def test_the_cases_cover_energy_pipelines_and_explained_figures() -> None:
    results = {name: estimate(request) for name, request in list(CASES.items())[:8]}
    assert any(r.energy is not None for r in results.values())
    assert any(p.stage_times_s is not None for r in results.values() for p in r.parallel.phases.values())
    assert all(r.figures for r in results.values())
    assert any(isinstance(f.value, list) for r in results.values() for f in r.figures.values())
