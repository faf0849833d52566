"""``plan --objective tokens-per-joule`` (issue #30): each plan's joules are ``estimate``'s for the same plan
(pipelines, micro-batches, a generation, a power-limited spec), the ranking, and the refusals through the real
entry point."""

from __future__ import annotations

import json
from typing import Any

import pytest

from layerscope.app.estimate import EstimateRequest, estimate
from layerscope.app.plan import PlanRequest, plan
from layerscope.app.requests import ParallelPlan, WorkloadRequest
from layerscope.hardware import HardwareSpec, load_hardware


def _power_capped() -> HardwareSpec:
    """h100-sxm with a 250 W board limit: a bf16 prefill's compute-bound ops stretch under it."""
    hw = load_hardware("h100-sxm")
    assert hw.energy is not None
    return hw.model_copy(update={"energy": hw.energy.model_copy(update={"board_power_limit_w": 250.0})})


@pytest.mark.parametrize(("hardware", "workload"), [
    ("h100-sxm", WorkloadRequest(phase="decode", batch=16, context=1024)),
    ("h100-sxm", WorkloadRequest(phase="generate", batch=4, prompt_len=128, decode_steps=7)),
    ("capped", WorkloadRequest(phase="prefill", batch=4, prompt_len=512)),
])
def test_plan_energy_is_the_estimates(hardware: str, workload: WorkloadRequest) -> None:
    hw: str | HardwareSpec = _power_capped() if hardware == "capped" else hardware
    result = plan(PlanRequest(model="llama-3.2-1b", hardware=hw, gpus=(1, 4), workload=workload,
                              objective="tokens-per-joule", max_micro_batches=4))
    assert any(r.pipeline_parallel > 1 and r.micro_batches > 1 for r in result.plans)
    limited = False
    for row in result.plans:
        est = estimate(EstimateRequest(model="llama-3.2-1b", hardware=hw, workload=workload, parallel=ParallelPlan(
            tensor_parallel=row.tensor_parallel, pipeline_parallel=row.pipeline_parallel,
            expert_parallel=row.expert_parallel, data_parallel=row.data_parallel, micro_batches=row.micro_batches)))
        assert est.energy is not None and row.energy_j is not None and row.output_tokens_per_j is not None
        assert row.energy_j == pytest.approx(est.energy.energy_j, rel=1e-9)
        assert row.output_tokens_per_j == pytest.approx(row.output_tokens_per_s * row.latency_s / row.energy_j)
        limited |= est.energy.power_limited
    assert limited == (hardware == "capped")
    per_j = [r.output_tokens_per_j for r in result.plans]
    assert per_j == sorted(per_j, reverse=True)


def test_cli_ranks_by_tokens_per_joule(run_cli: Any) -> None:
    done = run_cli("plan", "--model", "llama-3.1-8b", "--hardware", "dgx-h100", "--gpus", "1..8", "--batch", "64",
                   "--objective", "tokens-per-joule", "--json")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["objective"] == "tokens-per-joule" and out["plans"]
    per_j = [p["output_tokens_per_j"] for p in out["plans"]]
    assert per_j == sorted(per_j, reverse=True)
    # tokens per joule = the plan's tokens (tokens/s × latency) over its joules
    p = out["plans"][0]
    assert p["output_tokens_per_j"] == pytest.approx(p["output_tokens_per_s"] * p["latency_s"] / p["energy_j"])
    table = run_cli("plan", "--model", "llama-3.1-8b", "--objective", "tokens-per-joule", "--top", "3")
    assert table.returncode == 0 and "tokens/J" in table.stdout


@pytest.mark.parametrize(("args", "words"), [
    (["--hardware", "tpu-v5e", "--objective", "tokens-per-joule"], "has no energy figures"),
    (["--objective", "joules"], "tokens-per-joule"),
])
def test_cli_refusals_exit_2(run_cli: Any, args: list[str], words: str) -> None:
    done = run_cli("plan", *args)
    assert done.returncode == 2, done.stdout
    assert words in done.stderr and "Traceback" not in done.stderr
