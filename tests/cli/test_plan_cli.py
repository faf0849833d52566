"""``layerscope plan`` and the parallel options of ``estimate`` through the real entry point."""

from __future__ import annotations

import json

import pytest

from layerscope.app.estimate import EstimateRequest, estimate
from layerscope.app.plan import PlanRequest, enumerate_plans, plan
from layerscope.app.requests import ParallelPlan, WorkloadRequest


def test_plan_json_ranks_valid_plans_and_explains_the_rest(run_cli) -> None:
    res = run_cli("plan", "--model", "llama-3.1-8b", "--hardware", "dgx-h100", "--gpus", "1..8", "--phase",
                  "decode", "--batch", "16", "--context", "2048", "--json")
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["gpus_available"] == 8 and out["plans"]
    latencies = [p["latency_s"] for p in out["plans"]]
    assert latencies == sorted(latencies)
    for p in out["plans"]:
        assert p["gpus"] == p["tensor_parallel"] * p["pipeline_parallel"] * p["data_parallel"] <= 8
        assert p["memory_per_gpu_bytes"] <= p["memory_capacity_bytes"]
    assert out["graphs_timed"] < len(out["plans"])  # plans with the same per-device work share one graph


def test_plan_failures_name_their_constraint(run_cli) -> None:
    res = run_cli("plan", "--model", "llama-3.1-70b", "--hardware", "dgx-h100", "--gpus", "1..16", "--phase",
                  "prefill", "--batch", "2", "--prompt-len", "512", "--json")
    assert res.returncode == 0, res.stderr
    reasons = [f["reason"] for f in json.loads(res.stdout)["failures"]]
    assert any("GB per GPU" in r for r in reasons)  # 70B in bf16 on one 80 GB GPU
    assert any("needs 16 GPUs; dgx-h100 has 8" in r for r in reasons)


@pytest.mark.parametrize(("args", "words"), [
    (["plan", "--gpus", "8..4"], "--gpus"),
    (["plan", "--gpus", "many"], "--gpus"),
    (["plan", "--hardware", "h100-sxm", "--nodes", "2"], "not a cluster"),
    (["estimate", "--model", "llama-3.1-8b", "--tp", "3"], "does not divide the 32 attention heads"),
    (["estimate", "--model", "llama-3.1-8b", "--ep", "2", "--dp", "2", "--batch", "2"], "dense model"),
    (["estimate", "--model", "llama-3.1-8b", "--pp", "40"], "exceeds the 32 layers"),
    (["estimate", "--model", "qwen3-30b-a3b", "--ep", "4", "--dp", "2", "--batch", "2"], "must divide the devices"),
    (["simulate", "--model", "llama-3.1-8b", "--dp", "4", "--batch", "2"], "data_parallel=4"),
])
def test_bad_plans_exit_2_with_one_line(run_cli, args, words) -> None:
    res = run_cli(*args)
    assert res.returncode == 2, (res.stdout, res.stderr)
    assert words in res.stderr and "Traceback" not in res.stderr


def test_estimate_reports_the_plan(run_cli) -> None:
    res = run_cli("estimate", "--model", "qwen3-30b-a3b", "--hardware", "dgx-h100", "--phase", "prefill",
                  "--batch", "8", "--prompt-len", "256", "--tp", "2", "--pp", "2", "--ep", "4", "--dp", "2",
                  "--micro-batches", "2", "--json")
    assert res.returncode == 0, res.stderr
    par = json.loads(res.stdout)["parallel"]
    assert par["devices"] == 8 and par["expert_parallel"] == 4
    phase = par["phases"]["prefill"]
    assert len(phase["stage_times_s"]) == 2 and 0 < phase["bubble_fraction"] < 1
    assert 0 < phase["communication_share"] < 1


def test_plan_rows_are_the_estimates() -> None:
    """A plan's numbers come from shared one-stage estimates; each must equal ``estimate`` of that plan."""
    workload = WorkloadRequest(phase="prefill", batch=8, prompt_len=512)
    result = plan(PlanRequest(model="llama-3.1-8b", hardware="dgx-h100", gpus=(2, 8), workload=workload))
    picked = [r for r in result.plans if r.pipeline_parallel > 1][:3] + result.plans[:2]
    for r in picked:
        est = estimate(EstimateRequest(model="llama-3.1-8b", hardware="dgx-h100", workload=workload,
                                       parallel=ParallelPlan(tensor_parallel=r.tensor_parallel,
                                                             pipeline_parallel=r.pipeline_parallel,
                                                             expert_parallel=r.expert_parallel,
                                                             data_parallel=r.data_parallel,
                                                             micro_batches=r.micro_batches)))
        assert r.latency_s == pytest.approx(est.ttft_s, rel=1e-9)
        assert r.memory_per_gpu_bytes == pytest.approx(est.memory_bytes.total, rel=1e-9)


def test_enumeration_covers_every_factorization() -> None:
    plans = enumerate_plans((8, 8), num_layers=32, num_experts=None, batch=64, max_micro_batches=4)
    shapes = {(c.tp, c.pp, c.dp) for c in plans}
    assert {(8, 1, 1), (4, 2, 1), (2, 2, 2), (1, 8, 1), (1, 1, 8)} <= shapes
    assert all(c.tp * c.pp * c.dp == 8 and c.ep == 1 for c in plans)


@pytest.mark.parametrize("command", ["estimate", "simulate"])
def test_a_plan_beyond_the_cluster_exits_2(run_cli, command) -> None:
    res = run_cli(command, "--model", "llama-3.1-8b", "--hardware", "dgx-h100", "--tp", "8", "--pp", "2")
    assert res.returncode == 2
    assert "needs 16 GPUs" in res.stderr and "dgx-h100 has 8" in res.stderr
