"""MoE ops: router, top-k, routed experts with expected experts touched, shared experts."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from layerscope.graph import build_layer_graph, expected_experts_touched
from layerscope.graph.ops import Op, OpGraph
from layerscope.workload import Workload

BF16 = 2


def op(graph: OpGraph, name: str) -> Op:
    return graph.ops[graph.index[name]]


def layer(spec, n: int = 0, phase: str = "decode", **wl) -> OpGraph:
    w = Workload(phase=phase, **wl)
    return build_layer_graph(spec, w.passes()[0], w, layer=n)


def test_expected_experts_touched() -> None:
    assert expected_experts_touched(1, 8, 128) == pytest.approx(8)
    assert expected_experts_touched(4096, 8, 128) == pytest.approx(128, abs=1e-6)
    assert expected_experts_touched(2, 1, 2) == pytest.approx(2 * (1 - 0.25))
    assert expected_experts_touched(16, 8, 128) == pytest.approx(128 * (1 - (120 / 128) ** 16))


@given(st.integers(1, 5000), st.integers(1, 8), st.integers(8, 256))
def test_expected_experts_bounds(tokens: int, k: int, e: int) -> None:
    touched = expected_experts_touched(tokens, k, e)
    assert min(k, e) - 1e-9 <= touched <= min(e, tokens * k) + 1e-9
    assert expected_experts_touched(tokens + 1, k, e) >= touched


def test_qwen3_moe_decode_batch1(spec) -> None:
    g = layer(spec("qwen3-30b-a3b"), context=100)
    router = op(g, "layers.0.mlp.gate")
    assert router.kind == "router" and router.flops == 2 * 2048 * 128
    topk = op(g, "layers.0.mlp.topk")
    assert topk.kind == "topk" and topk.definition == "topk_d128_k8"
    # transformers 5 routers select inside their own module: the top-k runs in mlp.gate's range.
    assert topk.module == router.name == "layers.0.mlp.gate"
    ex = op(g, "layers.0.mlp.experts")
    assert ex.kind == "moe_experts"
    assert ex.definition == "moe_fused_e128_h2048_i768_topk8"
    per_expert = 3 * 2048 * 768 * BF16
    assert ex.weight_bytes == 8 * per_expert
    assert ex.attr("experts_touched") == pytest.approx(8)
    assert ex.attr("tokens_per_expert") == pytest.approx(8 / 128)
    assert ex.flops == 8 * (2 * 3 * 2048 * 768 + (4 + 1) * 768 + 2 * 2048)
    assert ex.matrix_class == "Va_Mw"
    # experts depend on the normed input and the top-k
    assert set(g.dependencies[g.index[ex.name]]) == {g.index["layers.0.post_attention_layernorm"], g.index[topk.name]}


def test_qwen3_moe_prefill_reads_all_experts(spec) -> None:
    g = layer(spec("qwen3-30b-a3b"), phase="prefill", prompt_len=4096)
    ex = op(g, "layers.0.mlp.experts")
    per_expert = 3 * 2048 * 768 * BF16
    assert ex.weight_bytes == pytest.approx(128 * per_expert, rel=1e-9)
    assert ex.flops == 4096 * 8 * (2 * 3 * 2048 * 768 + 5 * 768 + 2 * 2048)
    assert ex.matrix_class == "Ma_Mw"
    assert ex.gemm is not None and ex.gemm.m == math.ceil(4096 * 8 / 128) and ex.gemm.batch == 128


def test_deepseek_dense_then_moe_with_shared_experts(spec) -> None:
    ds = spec("deepseek-v3")
    dense = layer(ds, 0, context=10)
    assert op(dense, "layers.0.mlp.gate_proj").flops == 2 * 7168 * 18432
    assert "layers.0.mlp.experts" not in dense.index
    moe = layer(ds, 3, context=10)
    shared = op(moe, "layers.3.mlp.shared_experts.gate_proj")
    assert shared.flops == 2 * 7168 * 2048
    add = op(moe, "layers.3.mlp.shared_add")
    assert set(moe.dependencies[moe.index[add.name]]) == {
        moe.index["layers.3.mlp.experts"], moe.index["layers.3.mlp.shared_experts.down_proj"]}
    assert op(moe, "layers.3.mlp.experts").definition == "moe_fused_e256_h7168_i2048_topk8"


def test_gpt_oss_expert_biases(spec) -> None:
    g = layer(spec("gpt-oss-20b"), context=10)
    ex = op(g, "layers.0.mlp.experts")
    per_expert = (3 * 2880 * 2880 + 2 * 2880 + 2880) * BF16
    assert ex.weight_bytes == 4 * per_expert
    assert "layers.0.mlp.router" in g.index
    assert op(g, "layers.0.mlp.topk").module == "layers.0.mlp.router"


def test_moe_tensor_parallel(spec) -> None:
    g = layer(spec("qwen3-30b-a3b"), context=10, tensor_parallel=2)
    ex = op(g, "layers.0.mlp.experts")
    assert ex.weight_bytes == 8 * 3 * 2048 * 384 * BF16
    assert "layers.0.mlp.all_reduce" in g.index
