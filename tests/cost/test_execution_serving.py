"""The ``serving-graph`` execution profile: fusions, CUDA-graph replay and the engine's host time per step.

Every expected number here is worked by hand from the op bytes of a tiny Llama (2 layers, hidden 64, 4 heads of
16, 2 KV heads, MLP 128, bf16) and the spec's figures (docs/execution-profiles.md, "serving-graph").
"""

from __future__ import annotations

import numpy as np
import pytest

from layerscope.app.golden import GOLDEN_CONFIG
from layerscope.cost.api import estimate
from layerscope.cost.execution import (
    GRAPH_ALWAYS,
    GRAPH_FULL_ONLY,
    GRAPH_OUTSIDE,
    H200_GRAPH_NODE_S,
    SERVING_GRAPH_TERMS,
    SERVING_KINDS,
    VLLM_V1_UPDATE_PER_REQUEST_S,
    engine_terms,
    kernel_plan,
    with_profile,
)
from layerscope.cost.features import op_features
from layerscope.cost.models import roofline
from layerscope.cost.sweep import sweep
from layerscope.errors import CostModelError
from layerscope.graph import build_model_graph
from layerscope.graph.ops import OP_KINDS
from layerscope.hardware import HardwareSpec
from layerscope.hardware.presets import load_base_preset
from layerscope.model import load_model_spec, model_spec_from_dict
from layerscope.workload import make_workload

TINY = model_spec_from_dict(dict(GOLDEN_CONFIG), "tiny-llama")
#: Kernels of one tiny-Llama layer under serving-graph: norm, qkv, rope, kv write, attention, o_proj, the
#: post-attention norm with the residual add, gate-up, act-and-mul, down (k, v, up and both adds absorbed).
LAYER_KERNELS = 10


def serving(hw: HardwareSpec, **fields: object) -> HardwareSpec:
    """``hw`` under serving-graph with the execution fields given."""
    execution = hw.execution.model_copy(update={"kernels": "serving-graph", **fields})
    return hw.model_copy(update={"execution": execution})


@pytest.fixture(scope="module")
def h100() -> HardwareSpec:
    return load_base_preset("h100-sxm")  # launch_overhead_s 4 µs, no shape tables


def _graph(phase: str, **kw: int):  # type: ignore[no-untyped-def]
    w = make_workload(phase=phase, **kw)
    fwd = w.decode_pass(w.context) if phase == "decode" else w.prefill_pass()
    return build_model_graph(TINY, fwd, w)


def test_one_llama_layer_launches_ten_kernels_and_the_fused_bytes():
    g = _graph("decode", context=64)
    names = [op.name for op in g.ops]
    plan = kernel_plan("serving-graph", g.ops)
    launches = dict(zip(names, plan.launches, strict=True))
    absorbed = {"self_attn.k_proj", "self_attn.v_proj", "residual_attn", "mlp.up_proj", "residual_mlp"}
    for layer in (0, 1):
        for op in g.ops:
            if op.layer == layer:
                suffix = op.name.split(".", 2)[2]
                assert launches[op.name] == (0 if suffix in absorbed else 1), op.name
        assert sum(launches[n] for n in names if n.startswith(f"layers.{layer}.")) == LAYER_KERNELS
    # embedding, final norm (with the last residual add), lm_head, sampling
    assert plan.launches.sum() == 2 * LAYER_KERNELS + 4
    act = dict(zip(names, plan.act_factor, strict=True))
    h, kv = 64 * 2, 2 * 16 * 2  # bytes per token: hidden, one of k / v (bf16)
    # k_proj reads the normed hidden (128 B) and writes k (64 B): only the write stays, the merged GEMM reads once
    assert act["layers.0.self_attn.k_proj"] == pytest.approx(kv / (h + kv))
    assert act["layers.0.mlp.up_proj"] == pytest.approx(128 * 2 / (h + 128 * 2))
    # the norm after a fused add writes its output and never re-reads the sum: 128 of 256 B
    assert act["layers.0.post_attention_layernorm"] == 0.5 and act["layers.1.input_layernorm"] == 0.5
    assert act["norm"] == 0.5
    assert act["layers.0.input_layernorm"] == 1.0  # layer 0 normalizes the embedding: no add before it
    assert act["layers.0.residual_attn"] == 1.0  # both addends read, the sum written as the next residual
    assert plan.kv_factor.tolist() == [1.0] * len(names)
    capture = dict(zip(names, plan.graph_capture, strict=True))
    assert capture["layers.0.self_attn.attn"] == capture["layers.0.self_attn.kv_write"] == GRAPH_FULL_ONLY
    assert capture["lm_head"] == capture["sampling"] == GRAPH_OUTSIDE
    assert capture["layers.0.self_attn.rope"] == capture["embed_tokens"] == GRAPH_ALWAYS


def test_decode_replays_a_graph_and_prefill_pays_launches(h100: HardwareSpec):
    hw = serving(h100, graph_node_s=1e-6, graph_max_tokens=512)
    launch = h100.launch_overhead_s
    decode = roofline(op_features(_graph("decode", context=64)), hw)
    # 22 kernels replayed at 1 µs, lm_head and sampling launched after the graph at 4 µs
    assert decode.overhead_s.sum() == pytest.approx(22 * 1e-6 + 2 * launch)
    long = roofline(op_features(_graph("prefill", prompt_len=1024)), hw)  # beyond 512 tokens: no graph
    assert long.overhead_s.sum() == pytest.approx(24 * launch)
    short = op_features(_graph("prefill", prompt_len=16))
    # piecewise: attention and the cache write (2 a layer) and lm_head, sampling launched; 18 replayed
    assert roofline(short, hw).overhead_s.sum() == pytest.approx(6 * launch + 18 * 1e-6)
    eager = serving(h100, graph_node_s=1e-6, piecewise_graphs=False)
    assert roofline(short, eager).overhead_s.sum() == pytest.approx(24 * launch)


def test_host_time_per_step_in_ttft_and_tpot(h100: HardwareSpec):
    bare = serving(h100, step_overhead_s=0.0, step_overhead_per_request_s=0.0, overlap_host=False)
    hw = serving(h100, step_overhead_s=1e-3, step_overhead_per_request_s=2e-6, overlap_host=False,
                 request_overhead_s=5e-3)
    w = make_workload(phase="decode", batch=4, context=64)
    base = estimate(TINY, bare, w)
    est = estimate(TINY, hw, w)
    assert est.tpot_s == pytest.approx(base.tpot_s + 1e-3 + 4 * 2e-6)  # one step, 4 running requests
    assert est.phase_times_s["host"] == pytest.approx(1e-3 + 8e-6)
    gen = make_workload(phase="generate", batch=4, prompt_len=32, decode_steps=10)
    g0, g1 = estimate(TINY, bare, gen), estimate(TINY, hw, gen)
    assert g1.ttft_s == pytest.approx(g0.ttft_s + 1e-3 + 8e-6 + 5e-3)  # the prefill step and the request
    assert g1.tpot_s == pytest.approx(g0.tpot_s + 1e-3 + 8e-6)  # every decode step, exactly once
    assert g1.e2e_s == pytest.approx(g0.e2e_s + 11 * (1e-3 + 8e-6) + 5e-3)
    assert sum(g1.phase_times_s.values()) == pytest.approx(g1.e2e_s)
    # overlapped host work: a decode step takes the larger of forward and host, the prefill still pays both
    slow = serving(h100, step_overhead_s=1.0, step_overhead_per_request_s=0.0, overlap_host=True)
    g2 = estimate(TINY, slow, gen)
    assert g2.tpot_s == pytest.approx(1.0)
    assert g2.ttft_s == pytest.approx(g0.ttft_s + 1.0)
    fast = serving(h100, step_overhead_s=1e-9, step_overhead_per_request_s=0.0, overlap_host=True)
    assert estimate(TINY, fast, gen).tpot_s == pytest.approx(g0.tpot_s)  # hidden behind the forward


def test_profile_defaults_and_spec_overrides(h100: HardwareSpec):
    assert engine_terms(h100.execution).step_overhead_per_request_s == 0.0  # fused: no engine around it
    terms = engine_terms(with_profile(h100, "serving-graph").execution)
    assert terms == SERVING_GRAPH_TERMS
    assert terms.graph_node_s == H200_GRAPH_NODE_S == pytest.approx(0.94e-6, abs=0.01e-6)
    assert abs(VLLM_V1_UPDATE_PER_REQUEST_S - 1.13e-6) < 0.01e-6  # (0.287 - 0.142) ms / 128 requests
    assert engine_terms(serving(h100, graph_max_tokens=8).execution).graph_max_tokens == 8
    assert set(SERVING_KINDS) == set(OP_KINDS)
    with pytest.raises(CostModelError, match="unknown execution profile 'tvm'; known: fused, hf-eager, serving-graph"):
        with_profile(h100, "tvm")


@pytest.mark.parametrize("model", ["llama-3.2-1b", "qwen3-0.6b", "gemma-2-9b-it", "gpt2"])
def test_never_slower_than_fused_and_the_same_flops(model: str, h100: HardwareSpec):
    spec = load_model_spec(model)
    hw = serving(h100, step_overhead_per_request_s=0.0)
    for w in (make_workload(phase="decode", batch=8, context=512), make_workload(phase="prefill", prompt_len=256),
              make_workload(phase="prefill", prompt_len=1000)):
        fused, served = estimate(spec, h100, w), estimate(spec, hw, w)
        assert served.e2e_s <= fused.e2e_s * (1 + 1e-12)
        assert [op.flops for op in served.ops] == [op.flops for op in fused.ops]
        free = [h.model_copy(update={"launch_overhead_s": 0.0}) for h in (h100, serving(hw, graph_node_s=0.0))]
        a, b = (estimate(spec, h, w) for h in free)
        assert sum(op.flops for op in a.ops) == sum(op.flops for op in b.ops)
        assert sum(op.weight_bytes for op in a.ops) == sum(op.weight_bytes for op in b.ops)
        assert b.e2e_s <= a.e2e_s * (1 + 1e-12)


def test_sweep_times_serving_decode_exactly_beyond_the_graph_sizes(h100: HardwareSpec):
    hw = serving(h100, graph_max_tokens=4, step_overhead_s=1e-4)
    result = sweep([TINY], [hw], [1, 3, 8], [16, 300], phase="decode")
    for i in range(len(result)):
        w = make_workload(phase="decode", batch=int(result.batch[i]), context=int(result.length[i]))
        assert result.time_s[i] == pytest.approx(estimate(TINY, hw, w).tpot_s, rel=1e-12)
    prefill = sweep([TINY], [hw], [1, 2], [3, 40], phase="prefill")  # piecewise up to 4 tokens: point by point
    for i in range(len(prefill)):
        w = make_workload(phase="prefill", batch=int(prefill.batch[i]), prompt_len=int(prefill.length[i]))
        assert prefill.time_s[i] == pytest.approx(estimate(TINY, hw, w).ttft_s, rel=1e-12)
    assert np.all(result.time_s > 0)


def test_cli_execution_option(run_cli):  # type: ignore[no-untyped-def]
    ok = run_cli("estimate", "--model", "llama-3.2-1b", "--phase", "decode", "--execution", "serving-graph",
                 "--json")
    assert ok.returncode == 0, ok.stderr
    bad = run_cli("estimate", "--execution", "tvm")
    assert bad.returncode == 2
    assert "unknown execution profile 'tvm'; known: fused, hf-eager, serving-graph" in bad.stderr
