"""Module paths of a layer."""

from __future__ import annotations

from layerscope.graph.naming import layer_module_leaves, layer_names
from layerscope.model import ModuleNames


def test_layer_names_default() -> None:
    names = layer_names(ModuleNames(), 7)
    assert names.prefix == "layers.7." and names.attn == "layers.7.self_attn" and names.mlp == "layers.7.mlp"
    assert names.attn_mod("q_proj") == "layers.7.self_attn.q_proj"


def test_leaves_cover_modules_and_skip_missing() -> None:
    leaves = layer_module_leaves(ModuleNames())
    assert {"self_attn.q_proj", "mlp.experts", "input_layernorm", "self_attn.kv_b_proj"} <= leaves
    assert not any(leaf.endswith("None") for leaf in leaves)
    gpt2 = ModuleNames(qkv_proj="c_attn", q_proj=None, k_proj=None, v_proj=None, attn="attn")
    assert "attn.c_attn" in layer_module_leaves(gpt2) and "attn.q_proj" not in layer_module_leaves(gpt2)
