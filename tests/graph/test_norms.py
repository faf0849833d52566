"""Norm FLOP and byte conventions."""

from __future__ import annotations

from layerscope.graph import build_layer_graph, build_model_graph
from layerscope.workload import Workload


def test_rmsnorm_four_flops_per_element(spec) -> None:
    w = Workload(phase="prefill", prompt_len=10)
    g = build_layer_graph(spec("llama-1b"), w.passes()[0], w)
    n = g.ops[g.index["layers.0.input_layernorm"]]
    assert n.kind == "norm" and n.matrix_class == "Reduction" and n.definition == "rmsnorm_h2048"
    assert n.flops == 4 * 10 * 2048
    assert n.act_read_bytes == n.act_write_bytes == 10 * 2048 * 2 and n.weight_bytes == 2048 * 2


def test_layernorm_with_bias_seven_flops(spec) -> None:
    w = Workload(phase="prefill", prompt_len=10)
    g = build_model_graph(spec("gpt2"), w.passes()[0], w)
    n = g.ops[g.index["ln_f"]]
    assert n.definition == "layernorm_h768" and n.flops == 7 * 10 * 768 and n.weight_bytes == 2 * 768 * 2


def test_gemma2_sandwich_norms(spec) -> None:
    w = Workload(phase="decode", context=10)
    g = build_layer_graph(spec("gemma2-9b"), w.passes()[0], w)
    names = [o.name for o in g.ops]
    order = ["layers.0.input_layernorm", "layers.0.self_attn.o_proj", "layers.0.post_attention_layernorm",
             "layers.0.residual_attn", "layers.0.pre_feedforward_layernorm", "layers.0.mlp.down_proj",
             "layers.0.post_feedforward_layernorm", "layers.0.residual_mlp"]
    assert [names.index(n) for n in order] == sorted(names.index(n) for n in order)
    res = g.index["layers.0.residual_attn"]
    assert g.index["layers.0.post_attention_layernorm"] in g.dependencies[res]
