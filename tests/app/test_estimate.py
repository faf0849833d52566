"""``app.estimate``: one request in, one result model out; the CLI's ``--json`` is that model's dump."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from layerscope.app.estimate import EstimateRequest, EstimateResult, estimate, estimate_raw
from layerscope.app.requests import ParallelPlan, WorkloadRequest, build_request
from layerscope.errors import WorkloadError


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "layerscope", "estimate", *args], capture_output=True, text=True,
                          timeout=120)


def test_result_carries_the_cost_layers_numbers():
    request = EstimateRequest(model="qwen3-30b-a3b", hardware="h200",
                              workload=WorkloadRequest(phase="generate", prompt_len=64, decode_steps=3))
    raw = estimate_raw(request)
    result = estimate(request)
    assert result.workload.prompt_len == 64 and result.workload.decode_steps == 3
    assert result.workload.output_tokens == 4  # 3 decode steps + the prefill's token
    assert (result.ttft_s, result.tpot_s, result.e2e_s) == (raw.ttft_s, raw.tpot_s, raw.e2e_s)
    assert [op.time_s for op in result.ops] == [op.time_s for op in raw.ops]
    assert result.totals.time_s == pytest.approx(result.e2e_s)
    assert result.totals.ops == len(result.ops) and sum(r.ops for r in result.by_kind) == len(result.ops)
    assert sum(op.share for op in result.ops) == pytest.approx(1.0)
    assert result.memory_bytes.total == pytest.approx(result.memory_bytes.weights + result.memory_bytes.kv_cache
                                                      + result.memory_bytes.activations)
    assert any(o.kind == "moe_experts" and o.definition.startswith("moe_") for o in result.ops)
    assert EstimateResult.model_validate_json(result.model_dump_json()) == result


def test_parallel_plan_splits_the_weights():
    one = estimate(EstimateRequest(model="llama-3.1-8b"))
    two = estimate(EstimateRequest(model="llama-3.1-8b", parallel=ParallelPlan(tensor_parallel=2)))
    assert two.workload.tensor_parallel == 2
    assert two.memory_bytes.weights < one.memory_bytes.weights


def test_bad_request_fields_are_named():
    with pytest.raises(WorkloadError, match="prompt_len"):
        build_request(WorkloadRequest, prompt_len=0)
    with pytest.raises(WorkloadError, match="tensor_parallel"):
        build_request(ParallelPlan, tensor_parallel=0)
    with pytest.raises(WorkloadError, match="attention"):
        build_request(EstimateRequest, attention="flash")


def test_cli_json_is_the_result_dump():
    out = _cli("--model", "llama-3.2-1b", "--phase", "prefill", "--prompt-len", "100", "--json")
    assert out.returncode == 0, out.stderr
    request = EstimateRequest(model="llama-3.2-1b", workload=WorkloadRequest(phase="prefill", prompt_len=100))
    assert json.loads(out.stdout) == json.loads(estimate(request).model_dump_json())


def test_deprecated_spellings_still_work_with_a_warning():
    new = _cli("--phase", "generate", "--prompt-len", "40", "--decode-steps", "9", "--cost-model", "tiling", "--json")
    old = _cli("--phase", "generate", "--input", "40", "--output", "10", "--cost", "tiling", "--json")
    assert new.returncode == old.returncode == 0, old.stderr
    assert new.stdout == old.stdout
    assert "warning" not in new.stderr
    for spelling, instead in (("--input", "--prompt-len"), ("--output", "--decode-steps"), ("--cost", "--cost-model")):
        assert f"warning: {spelling} is deprecated" in old.stderr and f"use {instead}" in old.stderr


def test_deprecated_spellings_are_hidden_and_refused_beside_the_new_one():
    help_text = _cli("--help").stdout
    assert "--prompt-len" in help_text and "--decode-steps" in help_text and "--cost-model" in help_text
    assert "--input " not in help_text and "--output " not in help_text
    both = _cli("--prompt-len", "10", "--input", "10")
    assert both.returncode == 2 and "give --prompt-len only" in both.stderr and "Traceback" not in both.stderr
