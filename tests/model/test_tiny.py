"""Tiny configs: structurally faithful, valid for transformers, and named like the real modules."""

from __future__ import annotations

import pytest

from layerscope.errors import ConfigError
from layerscope.model import model_spec_from_dict, param_counts, tiny_config
from layerscope.model.spec import ModelSpec
from layerscope.model.tiny import tiny_families

REQUIRED = ("llama", "qwen3", "qwen3_moe", "mixtral", "gpt_oss", "deepseek_v3", "gemma2", "gpt2")


def test_required_families_present() -> None:
    assert set(REQUIRED) <= set(tiny_families())


@pytest.mark.parametrize("family", tiny_families())
def test_tiny_shape(family: str) -> None:
    spec = model_spec_from_dict(tiny_config(family), family)
    assert spec.family == family
    assert (spec.num_layers, spec.hidden_size, spec.num_attention_heads, spec.vocab_size) == (2, 64, 4, 256)
    if spec.moe is not None:
        assert (spec.moe.num_experts, spec.moe.num_experts_per_tok) == (4, 2)
        assert spec.num_moe_layers >= 1


def test_tiny_keeps_family_features() -> None:
    assert model_spec_from_dict(tiny_config("llama"), "t").num_kv_heads == 2
    gemma = model_spec_from_dict(tiny_config("gemma2"), "t")
    assert gemma.layer_attention == ("sliding", "full") and gemma.extra_norms
    oss = model_spec_from_dict(tiny_config("gpt_oss"), "t")
    assert oss.attention_sinks and oss.layer_attention == ("sliding", "full")
    assert oss.moe is not None and oss.moe.router_bias and oss.moe.expert_bias
    ds = model_spec_from_dict(tiny_config("deepseek_v3"), "t")
    assert ds.mla is not None and ds.mla.q_lora_rank == 32 and ds.mla.kv_lora_rank == 16
    assert [ds.is_moe_layer(i) for i in range(2)] == [False, True]
    assert ds.moe is not None and ds.moe.num_shared_experts == 1
    assert model_spec_from_dict(tiny_config("qwen3"), "t").qk_norm


def test_tiny_returns_a_copy() -> None:
    cfg = tiny_config("llama")
    cfg["hidden_size"] = 1
    assert tiny_config("llama")["hidden_size"] == 64


def test_unknown_tiny_family() -> None:
    with pytest.raises(ConfigError, match=r"known: .*llama"):
        tiny_config("nope")


@pytest.mark.parametrize("family", tiny_families())
def test_tiny_config_valid_for_transformers(family: str) -> None:
    transformers = pytest.importorskip("transformers")
    cfg = tiny_config(family)
    hf = transformers.AutoConfig.for_model(**cfg)
    assert hf.model_type == family
    spec = model_spec_from_dict(cfg, family)
    layer_types = getattr(hf, "layer_types", None)
    if layer_types is not None and spec.layer_attention:
        kinds = tuple("sliding" if t == "sliding_attention" else "full" for t in layer_types)
        assert kinds == spec.layer_attention


def _expected_modules(spec: ModelSpec) -> set[str]:
    """Full ``named_modules()`` paths the spec promises."""
    m = spec.modules
    ops = {m.op(None, m.embed), m.op(None, m.final_norm)}
    if m.pos_embed:
        ops.add(m.op(None, m.pos_embed))
    for i in range(spec.num_layers):
        ops |= {m.op(i, m.input_norm), m.op(i, m.attn), m.op(i, m.attn, m.o_proj)}
        ops |= {m.op(i, n) for n in (m.post_attn_norm, m.pre_ffn_norm, m.post_ffn_norm) if n}
        if spec.mla is not None:
            q = [m.q_a_proj, m.q_a_norm, m.q_b_proj] if spec.mla.q_lora_rank else [m.q_proj]
            ops |= {m.op(i, m.attn, n) for n in (*q, m.kv_a_proj, m.kv_a_norm, m.kv_b_proj) if n}
        else:
            leaves = (m.q_proj, m.k_proj, m.v_proj, m.qkv_proj, m.q_norm, m.k_norm)
            ops |= {m.op(i, m.attn, n) for n in leaves if n}
        if spec.is_moe_layer(i):
            ops |= {m.op(i, m.mlp, m.router), m.op(i, m.mlp, m.experts)}
            assert spec.moe is not None
            if spec.moe.num_shared_experts:
                ops.add(m.op(i, m.mlp, m.shared_experts))
        else:
            leaves = (m.gate_proj, m.up_proj, m.gate_up_proj, m.down_proj, m.act)
            ops |= {m.op(i, m.mlp, n) for n in leaves if n}
    return {m.module_path(op) for op in ops} | {m.lm_head}


@pytest.mark.torch
@pytest.mark.parametrize("family", tiny_families())
def test_module_names_and_params_match_transformers(family: str) -> None:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = tiny_config(family)
    model = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.for_model(**cfg))
    spec = model_spec_from_dict(cfg, family)
    names = {name for name, _ in model.named_modules()}
    missing = sorted(_expected_modules(spec) - names)
    assert not missing, f"{family}: not in named_modules(): {missing}"
    hf_params = sum(p.numel() for p in model.parameters())
    # DeepSeek-V3's e_score_correction_bias is a checkpoint weight but a buffer in transformers 5.
    buffers = sum(b.numel() for n, b in model.named_buffers() if n.endswith("e_score_correction_bias"))
    assert param_counts(spec).total == hf_params + buffers
