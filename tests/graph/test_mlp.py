"""Dense MLP ops: gated (Llama), fused gate_up (Phi-3), plain (GPT-2, OPT, GPT-J)."""

from __future__ import annotations

from layerscope.graph import build_layer_graph
from layerscope.graph.mlp import activation_family, activation_flops
from layerscope.graph.ops import Op, OpGraph
from layerscope.workload import Workload

BF16 = 2


def op(graph: OpGraph, name: str) -> Op:
    return graph.ops[graph.index[name]]


def layer(spec, phase: str = "decode", **wl) -> OpGraph:
    w = Workload(phase=phase, **wl)
    return build_layer_graph(spec, w.passes()[0], w)


def test_activation_table() -> None:
    assert activation_flops("silu") == 4 and activation_family("swish") == "silu"
    assert activation_flops("gelu_pytorch_tanh") == 9 and activation_family("gelu_new") == "gelu"
    assert activation_flops("relu") == 1


def test_llama_1b_gated_mlp_decode(spec) -> None:
    g = layer(spec("llama-1b"), context=100)
    gate = op(g, "layers.0.mlp.gate_proj")
    up = op(g, "layers.0.mlp.up_proj")
    down = op(g, "layers.0.mlp.down_proj")
    assert gate.flops == up.flops == 2 * 2048 * 8192
    assert gate.weight_bytes == 2048 * 8192 * BF16
    assert down.flops == 2 * 8192 * 2048 and down.definition == "gemm_n2048_k8192"
    act = op(g, "layers.0.mlp.act_mul")
    assert act.kind == "activation" and act.definition == "silu_h8192"
    assert act.flops == (4 + 1) * 8192
    assert act.act_read_bytes == 2 * 8192 * BF16 and act.act_write_bytes == 8192 * BF16
    deps = g.dependencies[g.index["layers.0.mlp.act_mul"]]
    assert set(deps) == {g.index["layers.0.mlp.gate_proj"], g.index["layers.0.mlp.up_proj"]}


def test_prefill_gemm_is_matrix(spec) -> None:
    g = layer(spec("llama-1b"), phase="prefill", prompt_len=512, batch=2)
    gate = op(g, "layers.0.mlp.gate_proj")
    assert gate.flops == 2 * 1024 * 2048 * 8192 and gate.matrix_class == "Ma_Mw"
    assert gate.gemm is not None and gate.gemm.m == 1024


def test_phi3_fused_gate_up(spec) -> None:
    g = layer(spec("phi3"), context=10)
    gu = op(g, "layers.0.mlp.gate_up_proj")
    assert gu.flops == 2 * 3072 * 2 * 8192
    act = op(g, "layers.0.mlp.act_mul")
    assert act.inputs[0].name == act.inputs[1].name == "layers.0.mlp.gate_up_proj:out"


def test_gpt2_plain_mlp_with_biases(spec) -> None:
    g = layer(spec("gpt2"), context=10)
    fc = op(g, "h.0.mlp.c_fc")
    assert fc.flops == 2 * 768 * 3072 + 3072  # + bias add
    assert fc.weight_bytes == (768 * 3072 + 3072) * BF16
    act = op(g, "h.0.mlp.act")
    assert act.definition == "gelu_h3072" and act.flops == 9 * 3072
    assert op(g, "h.0.mlp.c_proj").flops == 2 * 3072 * 768 + 768
    assert op(g, "h.0.ln_1").definition == "layernorm_h768"


def test_tp_divides_ffn(spec) -> None:
    g = layer(spec("llama-8b"), context=10, tensor_parallel=2)
    assert op(g, "layers.0.mlp.gate_proj").flops == 2 * 4096 * 7168
    ar = op(g, "layers.0.mlp.down_proj.all_reduce")
    assert ar.comm_bytes == 2 * 1 * 4096 * BF16 // 2
    assert g.dependencies[g.index["layers.0.residual_mlp"]] == tuple(
        sorted((g.index["layers.0.residual_attn"], g.index["layers.0.mlp.down_proj.all_reduce"])))
