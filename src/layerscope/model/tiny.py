"""Tiny, structurally faithful HF config dicts for building random-weight models in tests.

Every config has 2 layers, hidden 64, 4 heads (2 KV heads where the family has GQA), vocab 256
and keeps what makes its family different: MoE (4 experts, top-2), MLA ranks, sliding layers,
gpt-oss sinks and biases. Each is valid for ``transformers.AutoConfig.for_model(**cfg)``.
"""

from __future__ import annotations

import copy
from typing import Any

from layerscope.errors import ConfigError
from layerscope.registry import Registry

_BASE: dict[str, Any] = {
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "intermediate_size": 128,
    "vocab_size": 256,
    "max_position_embeddings": 128,
    "rms_norm_eps": 1e-6,
    "tie_word_embeddings": False,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "pad_token_id": 0,
}
_TOKENS = {"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0}

_MOE = {"num_experts_per_tok": 2}

_TINY: Registry[dict[str, Any]] = Registry("tiny family", ConfigError, {
    "llama": {**_BASE, "model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_act": "silu"},
    "mistral": {**_BASE, "model_type": "mistral", "architectures": ["MistralForCausalLM"],
                "sliding_window": 32},
    "qwen2": {**_BASE, "model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"]},
    "qwen3": {**_BASE, "model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"]},
    "qwen3_moe": {
        **_BASE, **_MOE,
        "model_type": "qwen3_moe",
        "architectures": ["Qwen3MoeForCausalLM"],
        "num_experts": 4,
        "moe_intermediate_size": 32,
        "decoder_sparse_step": 1,
        "mlp_only_layers": [],
    },
    "mixtral": {
        **_BASE, **_MOE,
        "model_type": "mixtral",
        "architectures": ["MixtralForCausalLM"],
        "num_local_experts": 4,
    },
    "gpt_oss": {
        **_BASE, **_MOE,
        "model_type": "gpt_oss",
        "architectures": ["GptOssForCausalLM"],
        "intermediate_size": 64,
        "num_local_experts": 4,
        "attention_bias": True,
        "sliding_window": 32,
        "layer_types": ["sliding_attention", "full_attention"],
        # Plain RoPE: the Hub's YaRN parameters assume a 4096-token original context.
        "rope_parameters": {"rope_type": "default", "rope_theta": 150000.0},
    },
    "deepseek_v3": {
        # No head_dim: MLA derives it from qk_rope_head_dim; an explicit one breaks transformers' RoPE.
        **{k: v for k, v in _BASE.items() if k != "head_dim"}, **_MOE,
        "model_type": "deepseek_v3",
        "architectures": ["DeepseekV3ForCausalLM"],
        "num_key_value_heads": 4,
        "q_lora_rank": 32,
        "kv_lora_rank": 16,
        "qk_nope_head_dim": 16,
        "qk_rope_head_dim": 8,
        "v_head_dim": 16,
        "n_routed_experts": 4,
        "n_shared_experts": 1,
        "moe_intermediate_size": 32,
        "first_k_dense_replace": 1,
        "moe_layer_freq": 1,
        "n_group": 1,
        "topk_group": 1,
        "topk_method": "noaux_tc",
    },
    "gemma2": {
        **_BASE,
        "model_type": "gemma2",
        "architectures": ["Gemma2ForCausalLM"],
        "hidden_activation": "gelu_pytorch_tanh",
        "query_pre_attn_scalar": 16,
        "sliding_window": 32,
        "tie_word_embeddings": True,
    },
    "phi3": {**_BASE, "model_type": "phi3", "architectures": ["Phi3ForCausalLM"], "num_key_value_heads": 4},
    "gpt2": {
        **_TOKENS,
        "model_type": "gpt2",
        "architectures": ["GPT2LMHeadModel"],
        "n_embd": 64,
        "n_layer": 2,
        "n_head": 4,
        "n_positions": 128,
        "vocab_size": 256,
        "activation_function": "gelu_new",
    },
    "opt": {
        **_TOKENS,
        "model_type": "opt",
        "architectures": ["OPTForCausalLM"],
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "ffn_dim": 128,
        "vocab_size": 256,
        "max_position_embeddings": 128,
        "word_embed_proj_dim": 64,
    },
    "gptj": {
        **_TOKENS,
        "model_type": "gptj",
        "architectures": ["GPTJForCausalLM"],
        "n_embd": 64,
        "n_layer": 2,
        "n_head": 4,
        "n_positions": 128,
        "rotary_dim": 8,
        "vocab_size": 256,
    },
})


def tiny_families() -> list[str]:
    """Families :func:`tiny_config` knows."""
    return _TINY.names()


def tiny_config(family: str) -> dict[str, Any]:
    """A fresh copy of the tiny config dict of ``family`` (an HF ``model_type``)."""
    return copy.deepcopy(_TINY.lookup(family))
