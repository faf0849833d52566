"""Family parsers on real catalog configs: dimensions, layer patterns, MoE/MLA, module names, errors."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from layerscope.errors import ConfigError
from layerscope.model import load_model_spec, model_spec_from_dict
from layerscope.model.catalog import catalog_root
from layerscope.model.families import FAMILIES
from layerscope.model.quantization import weight_dtypes
from layerscope.units import DType


def _cfg(folder: str) -> dict[str, Any]:
    return json.loads(catalog_root().joinpath(folder, "config.json").read_text())


def test_llama_3_2_1b_hand_checked() -> None:
    spec = load_model_spec("meta-llama/Llama-3.2-1B")
    dims = (spec.hidden_size, spec.num_layers, spec.num_attention_heads, spec.num_kv_heads)
    assert dims == (2048, 16, 32, 8)
    assert spec.head_dim == 64
    assert spec.intermediate_size == 8192
    assert spec.vocab_size == 128256
    assert spec.tie_word_embeddings
    assert spec.attention_kind == "gqa"
    assert spec.rotary_dim == 64
    assert spec.sliding_window is None and spec.layer_attention == ()
    assert spec.weight_dtype == DType.BF16
    assert spec.modules.root == "model."
    assert spec.modules.op(3, spec.modules.attn, spec.modules.q_proj) == "layers.3.self_attn.q_proj"
    assert spec.modules.module_path("layers.3.mlp.down_proj") == "model.layers.3.mlp.down_proj"
    assert spec.modules.module_path("lm_head") == "lm_head"


def test_llama_2_dtype_and_mha() -> None:
    spec = load_model_spec("meta-llama/Llama-2-7b-hf")
    assert spec.weight_dtype == DType.FP16
    assert spec.attention_kind == "mha"
    assert spec.head_dim == 128


def test_mistral_v01_slides_on_every_layer() -> None:
    spec = load_model_spec("mistralai/Mistral-7B-v0.1")
    assert spec.sliding_window == 4096
    assert spec.layer_attention == ("sliding",) * 32
    assert all(spec.layer_is_sliding(i) for i in range(32))


def test_mixtral_moe_module_names() -> None:
    spec = load_model_spec("mistralai/Mixtral-8x7B-v0.1")
    assert spec.moe is not None
    moe = spec.moe
    assert (moe.num_experts, moe.num_experts_per_tok, moe.expert_intermediate_size) == (8, 2, 14336)
    assert spec.sliding_window is None
    # transformers 5.x: block_sparse_moe became mlp; the router is mlp.gate.
    m = spec.modules
    assert m.op(0, m.mlp, m.router) == "layers.0.mlp.gate"
    assert m.op(0, m.mlp, m.experts) == "layers.0.mlp.experts"
    assert spec.num_moe_layers == 32


def test_qwen2_sliding_only_when_enabled() -> None:
    cfg = _cfg("Qwen--Qwen2.5-7B-Instruct")
    spec = model_spec_from_dict(cfg, "q")
    assert spec.qkv_bias and not spec.o_bias
    assert spec.sliding_window is None  # use_sliding_window is false
    enabled = model_spec_from_dict({**cfg, "use_sliding_window": True, "max_window_layers": 20}, "q")
    assert enabled.sliding_window == 131072
    assert enabled.layer_attention == ("full",) * 20 + ("sliding",) * 8


def test_qwen3_qk_norm_and_moe() -> None:
    dense = load_model_spec("Qwen/Qwen3-8B")
    assert dense.qk_norm and dense.modules.q_norm == "q_norm" and dense.modules.k_norm == "k_norm"
    assert dense.head_dim == 128 and dense.num_kv_heads == 8
    moe = load_model_spec("Qwen/Qwen3-30B-A3B")
    assert moe.moe is not None
    layout = (moe.moe.num_experts, moe.moe.num_experts_per_tok, moe.moe.expert_intermediate_size)
    assert layout == (128, 8, 768)
    assert moe.num_moe_layers == 48
    step2 = model_spec_from_dict({**_cfg("Qwen--Qwen3-30B-A3B"), "decoder_sparse_step": 2,
                                  "mlp_only_layers": [3]}, "q")
    # modeling_qwen3_moe.py: MoE when (i + 1) % decoder_sparse_step == 0 and i not in mlp_only_layers.
    assert [step2.is_moe_layer(i) for i in range(6)] == [False, True, False, False, False, True]


def test_qwen3_fp8_quantization() -> None:
    spec = load_model_spec("Qwen/Qwen3-30B-A3B-FP8")
    assert spec.weight_dtype == DType.FP8 and spec.base_dtype == DType.BF16 and spec.is_quantized
    assert "lm_head" in spec.quantized_modules_excluded
    assert "model.layers.0.mlp.gate" in spec.quantized_modules_excluded


def test_gemma2_alternates_even_layers_sliding() -> None:
    spec = load_model_spec("google/gemma-2-9b-it")
    # configuration_gemma2.py: sliding if (i + 1) % 2, so layers 0, 2, 4, … slide.
    assert spec.layer_attention[:4] == ("sliding", "full", "sliding", "full")
    assert spec.layer_attention.count("sliding") == 21
    assert spec.sliding_window == 4096
    assert spec.head_dim == 256 and spec.tie_word_embeddings and spec.extra_norms
    assert spec.activation == "gelu_tanh"
    m = spec.modules
    assert (m.post_attn_norm, m.pre_ffn_norm, m.post_ffn_norm) == (
        "post_attention_layernorm", "pre_feedforward_layernorm", "post_feedforward_layernorm")


def test_gemma3_text_config_and_pattern() -> None:
    spec = load_model_spec("google/gemma-3-4b-it")
    assert spec.model_type == "gemma3_text" and spec.family == "gemma3"
    assert spec.hidden_size == 2560 and spec.num_layers == 34
    # Gemma3TextConfig defaults fill the sparse file.
    dims = (spec.num_attention_heads, spec.num_kv_heads, spec.head_dim, spec.vocab_size)
    assert dims == (8, 4, 256, 262208)
    assert spec.sliding_window == 1024
    full = [i for i, kind in enumerate(spec.layer_attention) if kind == "full"]
    assert full == [5, 11, 17, 23, 29]  # 5 local : 1 global
    assert spec.modules.root == "model.language_model."
    text_only = model_spec_from_dict({**_cfg("google--gemma-3-4b-it")["text_config"]}, "t")
    assert text_only.modules.root == "model."


def test_phi3_fused_projections() -> None:
    spec = load_model_spec("microsoft/Phi-3-mini-4k-instruct")
    m = spec.modules
    assert (m.qkv_proj, m.q_proj, m.k_proj, m.v_proj) == ("qkv_proj", None, None, None)
    assert (m.gate_up_proj, m.gate_proj, m.up_proj, m.down_proj) == ("gate_up_proj", None, None, "down_proj")
    assert spec.sliding_window == 2047 and spec.layer_attention == ("sliding",) * 32


def test_gpt_oss_sinks_layers_moe_quant() -> None:
    spec = load_model_spec("openai/gpt-oss-20b")
    assert spec.attention_sinks
    assert spec.layer_attention[:2] == ("sliding", "full") and spec.sliding_window == 128
    assert spec.qkv_bias and spec.o_bias
    assert spec.moe is not None
    assert (spec.moe.num_experts, spec.moe.num_experts_per_tok) == (32, 4)
    assert spec.moe.router_bias and spec.moe.expert_bias
    assert spec.modules.router == "router"
    assert spec.weight_dtype == DType.FP4
    assert spec.quantized_modules_excluded == (
        "model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head")


def test_deepseek_v3_mla_and_moe() -> None:
    spec = load_model_spec("deepseek-v3")
    assert spec.mla is not None and spec.moe is not None
    mla = spec.mla
    ranks = (mla.q_lora_rank, mla.kv_lora_rank, mla.qk_nope_head_dim, mla.qk_rope_head_dim, mla.v_head_dim)
    assert ranks == (1536, 512, 128, 64, 128)
    assert spec.attention_kind == "mla"
    assert spec.kv_values_per_token_per_layer() == 576
    assert spec.head_dim == 192 and spec.rotary_dim == 64
    moe = spec.moe
    assert (moe.num_experts, moe.num_experts_per_tok, moe.expert_intermediate_size) == (256, 8, 2048)
    assert (moe.num_shared_experts, moe.shared_intermediate_size) == (1, 2048)
    assert (moe.first_k_dense, moe.layer_freq) == (3, 1)
    assert moe.router_correction_bias
    assert [spec.is_moe_layer(i) for i in range(5)] == [False, False, False, True, True]
    assert spec.intermediate_size == 18432
    assert spec.weight_dtype == DType.FP8
    m = spec.modules
    assert (m.q_proj, m.k_proj, m.v_proj) == (None, None, None)
    assert m.op(0, m.attn, m.kv_a_proj) == "layers.0.self_attn.kv_a_proj_with_mqa"
    assert m.op(3, m.mlp, m.shared_experts) == "layers.3.mlp.shared_experts"


def test_deepseek_v2_lite_full_q_proj() -> None:
    spec = load_model_spec("deepseek-ai/DeepSeek-V2-Lite")
    assert spec.mla is not None and spec.mla.q_lora_rank is None
    assert spec.modules.q_proj == "q_proj"
    assert spec.moe is not None and spec.moe.shared_intermediate_size == 2 * 1408
    assert not spec.moe.router_correction_bias


def test_gpt2_module_names() -> None:
    spec = load_model_spec("gpt2")
    m = spec.modules
    assert m.root == "transformer."
    assert (m.embed, m.pos_embed, m.final_norm) == ("wte", "wpe", "ln_f")
    assert m.op(0, m.attn, m.qkv_proj) == "h.0.attn.c_attn"
    assert m.op(0, m.attn, m.o_proj) == "h.0.attn.c_proj"
    assert m.op(0, m.mlp, m.up_proj) == "h.0.mlp.c_fc"
    assert m.op(0, m.mlp, m.down_proj) == "h.0.mlp.c_proj"
    assert (m.input_norm, m.post_attn_norm) == ("ln_1", "ln_2")
    assert spec.position == "learned" and spec.num_position_embeddings == 1024
    assert spec.mlp_kind == "plain" and spec.norm_kind == "layernorm" and spec.tie_word_embeddings


def test_opt_module_names() -> None:
    spec = load_model_spec("facebook/opt-1.3b")
    m = spec.modules
    assert m.root == "model.decoder."
    assert m.op(0, m.attn, m.o_proj) == "layers.0.self_attn.out_proj"
    assert m.op(0, m.mlp, m.up_proj) == "layers.0.fc1"  # OPT's fc1/fc2 hang off the layer
    assert m.op(0, m.input_norm) == "layers.0.self_attn_layer_norm"
    assert m.op(0, m.post_attn_norm) == "layers.0.final_layer_norm"
    assert m.op(None, m.final_norm) == "final_layer_norm"
    assert m.op(None, m.pos_embed) == "embed_positions"
    assert spec.num_position_embeddings == 2050  # OPTLearnedPositionalEmbedding offset 2
    assert spec.activation == "relu"


def test_gptj_parallel_partial_rotary() -> None:
    spec = load_model_spec("EleutherAI/gpt-j-6b")
    assert spec.block_layout == "parallel" and spec.rotary_dim == 64 and spec.head_dim == 256
    assert spec.lm_head_bias and not spec.tie_word_embeddings
    m = spec.modules
    assert m.op(0, m.attn, m.o_proj) == "h.0.attn.out_proj"
    assert (m.up_proj, m.down_proj, m.input_norm, m.post_attn_norm) == ("fc_in", "fc_out", "ln_1", None)


def test_falcon_7b_like() -> None:
    # Dimensions of tiiuae/falcon-7b from vLLM's base_model_arch_groundtruth.json (catalog README).
    cfg = {"model_type": "falcon", "hidden_size": 4544, "num_hidden_layers": 32, "num_attention_heads": 71,
           "vocab_size": 65024, "multi_query": True, "parallel_attn": True, "bias": False}
    spec = model_spec_from_dict(cfg, "falcon-7b")
    assert (spec.num_kv_heads, spec.head_dim, spec.attention_kind) == (1, 64, "mqa")
    m = spec.modules
    assert m.op(0, m.attn, m.qkv_proj) == "h.0.self_attention.query_key_value"
    assert m.op(0, m.mlp, m.up_proj) == "h.0.mlp.dense_h_to_4h"
    assert (m.input_norm, m.post_attn_norm) == ("input_layernorm", None)
    new = model_spec_from_dict({**cfg, "new_decoder_architecture": True, "num_kv_heads": 8,
                                "num_attention_heads": 64, "hidden_size": 8192}, "falcon-40b-like")
    assert new.num_kv_heads == 8
    assert (new.modules.input_norm, new.modules.pre_ffn_norm) == ("ln_attn", "ln_mlp")


def test_llama4_text_stack() -> None:
    spec = load_model_spec("meta-llama/Llama-4-Scout-17B-16E-Instruct")
    assert spec.model_type == "llama4_text" and spec.hidden_size == 5120 and spec.num_layers == 48
    assert spec.moe is not None
    assert (spec.moe.num_experts, spec.moe.num_experts_per_tok, spec.moe.num_shared_experts) == (16, 1, 1)
    assert spec.num_moe_layers == 48
    assert spec.intermediate_size == 16384
    m = spec.modules
    assert m.root == "language_model.model." and m.lm_head == "language_model.lm_head"
    assert m.op(0, m.mlp, m.shared_experts) == "layers.0.feed_forward.shared_expert"
    assert m.op(0, m.mlp, m.router) == "layers.0.feed_forward.router"
    # Chunked attention (8192) on RoPE layers; every 4th layer (NoPE) is global.
    assert spec.sliding_window == 8192
    assert [i for i, k in enumerate(spec.layer_attention) if k == "full"][:3] == [3, 7, 11]


def test_nested_text_config_read_generally(caplog: pytest.LogCaptureFixture) -> None:
    text = _cfg("meta-llama--Llama-3.2-1B")
    cfg = {"model_type": "acme_vl", "torch_dtype": "float16", "text_config": text}
    spec = model_spec_from_dict(cfg, "vl")
    assert spec.family == "llama" and spec.hidden_size == 2048
    assert spec.weight_dtype == DType.BF16  # the text config's own torch_dtype wins


def test_unknown_model_type_uses_standard_fields(caplog: pytest.LogCaptureFixture) -> None:
    cfg = {"model_type": "acme", "hidden_size": 256, "num_hidden_layers": 3, "num_attention_heads": 8,
           "num_key_value_heads": 2, "intermediate_size": 512, "vocab_size": 1000}
    with caplog.at_level(logging.WARNING):
        spec = model_spec_from_dict(cfg, "acme")
    assert "not a known family" in caplog.text
    assert spec.family == "acme" and spec.head_dim == 32 and spec.num_kv_heads == 2


def test_missing_field_names_it_and_lists_families() -> None:
    cfg = {"model_type": "acme", "hidden_size": 256, "num_attention_heads": 8, "intermediate_size": 512,
           "vocab_size": 1000}
    with pytest.raises(ConfigError) as err:
        model_spec_from_dict(cfg, "acme")
    assert "'num_hidden_layers'" in str(err.value)
    assert "supported families" in str(err.value) and "qwen3_moe" in str(err.value)
    assert sorted(FAMILIES)[0] in str(err.value)


@pytest.mark.parametrize(
    ("change", "needles"),
    [
        ({"num_key_value_heads": 5}, ("num_attention_heads=32", "num_kv_heads=5")),
        ({"num_key_value_heads": -8}, ("num_key_value_heads", "-8")),
        ({"hidden_size": -2048, "head_dim": 64}, ("hidden_size", "-2048")),
        ({"num_hidden_layers": "16"}, ("num_hidden_layers", "'16'")),
        ({"vocab_size": 1.5}, ("vocab_size", "1.5")),
        ({"tie_word_embeddings": "yes"}, ("tie_word_embeddings", "'yes'")),
        ({"hidden_size": 2050}, ("hidden_size=2050", "num_attention_heads=32")),
        ({"torch_dtype": "float13"}, ("torch_dtype", "float13")),
    ],
)
def test_bad_values_name_field_and_value(change: dict[str, Any], needles: tuple[str, ...]) -> None:
    cfg = {k: v for k, v in _cfg("meta-llama--Llama-3.2-1B").items() if k != "head_dim"}
    cfg.update(change)
    with pytest.raises(ConfigError) as err:
        model_spec_from_dict(cfg, "bad")
    for needle in needles:
        assert needle in str(err.value)


def test_quantization_schemes() -> None:
    ct = {"quantization_config": {"quant_method": "compressed-tensors", "ignore": ["lm_head"],
                                  "config_groups": {"g": {"weights": {"num_bits": 8, "type": "float"}}}}}
    assert weight_dtypes(ct) == (DType.FP8, DType.BF16, ("lm_head",))
    gptq = {"torch_dtype": "float16", "quantization_config": {"quant_method": "gptq", "bits": 4}}
    assert weight_dtypes(gptq) == (DType.INT4, DType.FP16, ())
    unknown = {"quantization_config": {"quant_method": "mystery"}}
    assert weight_dtypes(unknown) == (DType.BF16, DType.BF16, ())
    with pytest.raises(ConfigError, match="quant_algo"):
        weight_dtypes({"quantization_config": {"quant_method": "modelopt", "quant_algo": "FP3"}})
