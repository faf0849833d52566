"""Family parsers: HF ``config.json`` dicts to :class:`ModelSpec` keyword arguments.

Each family is a function registered in :data:`FAMILIES` under its HF ``model_type``; the loader
looks it up by name (no ``if``-chains) and falls back to :func:`parse_generic` for unknown types.

Module names (``ModuleNames``) were read from the modeling files of **transformers 5.23.0**
(``models/<family>/modeling_<family>.py``) and must equal ``model.named_modules()`` of the class
in ``architectures`` (or the family's causal-LM class). transformers 5 fuses MoE experts into one
module holding ``gate_up_proj``/``down_proj`` parameters (``mlp.experts``), with the router a
module of its own (``mlp.gate``; gpt-oss ``mlp.router``; Llama 4 ``feed_forward.router``); Mixtral's
``block_sparse_moe`` of transformers 4.x is now ``mlp``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from layerscope.errors import ConfigError
from layerscope.model.spec import LayerAttention, MLASpec, ModuleNames, MoESpec
from layerscope.registry import Registry
from layerscope.units import DType, quote

log = logging.getLogger(__name__)

_MISSING: Any = object()

#: HF activation names → the names the cost models use.
_ACTIVATIONS = {
    "silu": "silu",
    "swish": "silu",
    "gelu": "gelu",
    "gelu_new": "gelu_tanh",
    "gelu_fast": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu_tanh",
    "gelu_python": "gelu",
    "relu": "relu",
    "quick_gelu": "quick_gelu",
}


#: Largest integer a config field may hold: every size derived from a config (tokens × widths × layers)
#: stays inside int64.
MAX_CONFIG_INT = 2**40
#: Most decoder layers a config may declare (the largest published decoder has 126); the builders make
#: per-layer tuples, so a huge count would exhaust memory before any check.
MAX_LAYERS = 2**14
#: Keys under which the families spell the decoder layer count.
LAYER_COUNT_KEYS = frozenset({"num_hidden_layers", "n_layer", "num_layers", "n_layers"})


@dataclass(frozen=True)
class Fields:
    """Typed, validated access to one config dict (the text config of multimodal models)."""

    cfg: Mapping[str, Any]
    family: str
    architecture: str

    def has(self, key: str) -> bool:
        return self.cfg.get(key) is not None

    def _raw(self, keys: Sequence[str], default: Any) -> tuple[str, Any]:
        for key in keys:
            if self.cfg.get(key) is not None:
                return key, self.cfg[key]
        if default is _MISSING:
            raise ConfigError(
                f"{self.family} config: required field {keys[0]!r} is missing"
                + (f" (also looked for {', '.join(map(repr, keys[1:]))})" if len(keys) > 1 else "")
                + f"; supported families: {', '.join(FAMILIES.names())}"
            )
        return keys[0], default

    def get_int(self, *keys: str, default: Any = _MISSING) -> int:
        key, value = self._raw(keys, default)
        if isinstance(value, bool) or not isinstance(value, int):
            if not (isinstance(value, float) and value.is_integer()):
                raise ConfigError(f"{key}: expected an integer, got {quote(value)}")
            value = int(value)
        limit = MAX_LAYERS if key in LAYER_COUNT_KEYS else MAX_CONFIG_INT
        if abs(value) > limit:
            raise ConfigError(f"{key}: {value} is out of range (at most {limit})")
        return value

    def opt_int(self, *keys: str) -> int | None:
        return self.get_int(*keys, default=None) if any(self.has(k) for k in keys) else None

    def get_float(self, *keys: str, default: Any = _MISSING) -> float:
        key, value = self._raw(keys, default)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{key}: expected a number, got {quote(value)}")
        return float(value)

    def get_bool(self, *keys: str, default: Any = _MISSING) -> bool:
        key, value = self._raw(keys, default)
        if not isinstance(value, bool):
            raise ConfigError(f"{key}: expected true or false, got {quote(value)}")
        return value

    def get_str(self, *keys: str, default: Any = _MISSING) -> str:
        key, value = self._raw(keys, default)
        if not isinstance(value, str):
            raise ConfigError(f"{key}: expected a string, got {quote(value)}")
        return value

    def int_list(self, key: str) -> list[int] | None:
        value = self.cfg.get(key)
        if value is None:
            return None
        if not isinstance(value, list) or not all(type(v) is int for v in value):
            raise ConfigError(f"{key}: expected a list of integers, got {quote(value)}")
        return list(value)


Parser = Callable[[Fields], dict[str, Any]]


def _activation(f: Fields, *keys: str, default: str = "silu") -> str:
    name = f.get_str(*keys, default=default)
    return _ACTIVATIONS.get(name, name)


def _head_dim(f: Fields, hidden: int, heads: int) -> int:
    head_dim = f.opt_int("head_dim")
    if head_dim is not None:
        return head_dim
    if heads > 0 and hidden % heads:
        raise ConfigError(
            f"hidden_size={hidden} is not a multiple of num_attention_heads={heads} and head_dim is not given"
        )
    return hidden // heads if heads > 0 else 0


def _core(f: Fields, *, tie_default: bool = False,
          act_keys: tuple[str, ...] = ("hidden_act",)) -> dict[str, Any]:
    """The fields every llama-like config spells the same way."""
    hidden = f.get_int("hidden_size")
    heads = f.get_int("num_attention_heads")
    head_dim = _head_dim(f, hidden, heads)
    rotary_fraction = f.get_float("partial_rotary_factor", default=1.0)
    attention_bias = f.get_bool("attention_bias", default=False)
    return {
        "hidden_size": hidden,
        "num_layers": f.get_int("num_hidden_layers"),
        "vocab_size": f.get_int("vocab_size"),
        "num_attention_heads": heads,
        "num_kv_heads": f.get_int("num_key_value_heads", default=heads),
        "head_dim": head_dim,
        "intermediate_size": f.get_int("intermediate_size"),
        "activation": _activation(f, *act_keys),
        "position": "rope",
        "rotary_dim": int(head_dim * rotary_fraction),
        "max_position_embeddings": f.get_int("max_position_embeddings", default=2048),
        "qkv_bias": attention_bias,
        "o_bias": attention_bias,
        "mlp_bias": f.get_bool("mlp_bias", default=False),
        "tie_word_embeddings": f.get_bool("tie_word_embeddings", default=tie_default),
    }


_LAYER_TYPES: dict[str, LayerAttention] = {
    "full_attention": "full",
    "sliding_attention": "sliding",
    # Llama 4 chunked attention (a token sees only its own chunk) is bounded like a window.
    "chunked_attention": "sliding",
}


def _layer_types(f: Fields, num_layers: int) -> tuple[LayerAttention, ...] | None:
    value = f.cfg.get("layer_types")
    if value is None:
        return None
    if not isinstance(value, list) or len(value) != num_layers or any(v not in _LAYER_TYPES for v in value):
        raise ConfigError(
            f"layer_types: expected {num_layers} entries from {sorted(_LAYER_TYPES)}, got {quote(value)}"
        )
    return tuple(_LAYER_TYPES[v] for v in value)


def _with_pattern(spec: dict[str, Any], f: Fields, is_sliding: Callable[[int], bool],
                  window_default: int | None = None) -> dict[str, Any]:
    """Set ``sliding_window``/``layer_attention`` from ``layer_types`` or the family's pattern."""
    window = f.opt_int("sliding_window")
    window = window if window is not None else window_default
    layers = spec["num_layers"]
    given = _layer_types(f, layers)
    pattern: tuple[LayerAttention, ...] = (
        given if given is not None else tuple("sliding" if is_sliding(i) else "full" for i in range(layers))
    )
    if "sliding" in pattern and window is None:
        raise ConfigError("sliding_window: layers are sliding but no sliding_window is given")
    if "sliding" not in pattern:
        return spec
    return {**spec, "sliding_window": window, "layer_attention": pattern}


def _sliding_all(spec: dict[str, Any], f: Fields) -> dict[str, Any]:
    # Mistral v0.1, Mixtral, Phi-3: every layer uses sliding_window when it is set (modeling_mistral.py).
    return _with_pattern(spec, f, lambda i: f.has("sliding_window"))


def _sliding_qwen(spec: dict[str, Any], f: Fields) -> dict[str, Any]:
    # configuration_qwen2/3.py: only with use_sliding_window, and only layers >= max_window_layers.
    use = f.get_bool("use_sliding_window", default=False) and f.has("sliding_window")
    first = f.get_int("max_window_layers", default=spec["num_layers"])
    if not use:
        return spec
    return _with_pattern(spec, f, lambda i: i >= first)


def _moe_layout(step: int, num_layers: int) -> tuple[int, int]:
    """(first_k_dense, layer_freq) for "every step-th layer is MoE, the last of each group"."""
    # Qwen3-MoE (layer_idx + 1) % decoder_sparse_step == 0; Llama 4 moe_layers = range(step - 1, L, step).
    return (step - 1, step) if step > 1 else (0, 1)


# --------------------------------------------------------------------------------------------- #
# Families.


def parse_llama(f: Fields) -> dict[str, Any]:
    """Llama 2, Llama 3.x (modeling_llama.py)."""
    return {**_core(f), "modules": ModuleNames()}


def parse_mistral(f: Fields) -> dict[str, Any]:
    """Mistral (sliding window on every layer when set, e.g. v0.1's 4096)."""
    return _sliding_all({**_core(f), "modules": ModuleNames()}, f)


def parse_mixtral(f: Fields) -> dict[str, Any]:
    """Mixtral: every layer MoE, ``mlp.gate`` router and fused ``mlp.experts`` (transformers 5)."""
    spec = _core(f)
    spec["moe"] = MoESpec(
        num_experts=f.get_int("num_local_experts"),
        num_experts_per_tok=f.get_int("num_experts_per_tok"),
        expert_intermediate_size=spec["intermediate_size"],
    )
    spec["modules"] = ModuleNames()
    return _sliding_all(spec, f)


def parse_qwen2(f: Fields) -> dict[str, Any]:
    """Qwen2 / Qwen2.5: biased q/k/v, unbiased o_proj (modeling_qwen2.py)."""
    spec = {**_core(f), "qkv_bias": True, "o_bias": False, "modules": ModuleNames()}
    return _sliding_qwen(spec, f)


def parse_qwen3(f: Fields) -> dict[str, Any]:
    """Qwen3 dense: per-head q_norm/k_norm."""
    spec = {**_core(f), "qk_norm": True, "modules": ModuleNames(q_norm="q_norm", k_norm="k_norm")}
    return _sliding_qwen(spec, f)


def parse_qwen3_moe(f: Fields) -> dict[str, Any]:
    """Qwen3-MoE: ``mlp.gate`` + fused ``mlp.experts``; ``mlp_only_layers`` stay dense."""
    spec = parse_qwen3(f)
    first_k, freq = _moe_layout(f.get_int("decoder_sparse_step", default=1), spec["num_layers"])
    spec["moe"] = MoESpec(
        num_experts=f.get_int("num_experts"),
        num_experts_per_tok=f.get_int("num_experts_per_tok"),
        expert_intermediate_size=f.get_int("moe_intermediate_size"),
        first_k_dense=first_k,
        layer_freq=freq,
        dense_layers=tuple(f.int_list("mlp_only_layers") or ()),
    )
    return spec


_GEMMA_MODULES = dict(pre_ffn_norm="pre_feedforward_layernorm", post_ffn_norm="post_feedforward_layernorm")


def parse_gemma2(f: Fields) -> dict[str, Any]:
    """Gemma 2: sandwich norms, tied embeddings, even layers (0, 2, …) sliding.

    configuration_gemma2.py: ``"sliding_attention" if bool((i + 1) % 2)`` → layer 0 slides.
    """
    spec = {**_core(f, tie_default=True, act_keys=("hidden_activation", "hidden_act")),
            "extra_norms": True, "modules": ModuleNames(**_GEMMA_MODULES)}
    return _with_pattern(spec, f, lambda i: bool((i + 1) % 2), window_default=4096)


#: Gemma3TextConfig class defaults (transformers 5.23.0); sparse Hub files (gemma-3-4b-it) rely on them.
_GEMMA3_TEXT_DEFAULTS: dict[str, Any] = {
    "vocab_size": 262_208,
    "hidden_size": 2304,
    "intermediate_size": 9216,
    "num_hidden_layers": 26,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "head_dim": 256,
    "hidden_activation": "gelu_pytorch_tanh",
    "max_position_embeddings": 131_072,
    "sliding_window": 4096,
    "tie_word_embeddings": True,
}


def parse_gemma3(f: Fields) -> dict[str, Any]:
    """Gemma 3 (text stack): q/k norms, sandwich norms, 5 local : 1 global layers.

    configuration_gemma3.py: ``"sliding_attention" if bool((i + 1) % sliding_window_pattern)``
    with pattern 6, so layers 5, 11, … are global. ``Gemma3ForConditionalGeneration`` holds the
    text model at ``model.language_model``.
    """
    g = Fields({**_GEMMA3_TEXT_DEFAULTS, **f.cfg}, f.family, f.architecture)
    root = "model.language_model." if f.architecture == "Gemma3ForConditionalGeneration" else "model."
    spec = {**_core(g, tie_default=True, act_keys=("hidden_activation", "hidden_act")),
            "qk_norm": True, "extra_norms": True,
            "modules": ModuleNames(root=root, q_norm="q_norm", k_norm="k_norm", **_GEMMA_MODULES)}
    pattern = g.get_int("sliding_window_pattern", default=6)
    return _with_pattern(spec, g, lambda i: bool((i + 1) % pattern))


def parse_phi3(f: Fields) -> dict[str, Any]:
    """Phi-3: fused ``qkv_proj`` and ``gate_up_proj``; sliding window on every layer when set."""
    modules = ModuleNames(q_proj=None, k_proj=None, v_proj=None, qkv_proj="qkv_proj", gate_proj=None,
                          up_proj=None, gate_up_proj="gate_up_proj", act="activation_fn")
    return _sliding_all({**_core(f), "modules": modules}, f)


def parse_gpt_oss(f: Fields) -> dict[str, Any]:
    """gpt-oss: attention sinks, biased attention and experts, ``mlp.router`` with bias.

    Its GLU is ``gate * sigmoid(1.702 * gate)`` (clamped), a scaled SiLU, so ``activation`` is ``silu``.
    """
    spec = {**_core(f), "attention_sinks": True}
    spec["moe"] = MoESpec(
        num_experts=f.get_int("num_local_experts"),
        num_experts_per_tok=f.get_int("num_experts_per_tok", "experts_per_token"),
        expert_intermediate_size=spec["intermediate_size"],
        router_bias=True,
        expert_bias=True,
    )
    spec["modules"] = ModuleNames(router="router")
    # configuration_gpt_oss.py default: sliding for even layers; the Hub file lists layer_types.
    return _with_pattern(spec, f, lambda i: bool((i + 1) % 2), window_default=128)


def parse_deepseek(f: Fields) -> dict[str, Any]:
    """DeepSeek-V2/V3: MLA (arXiv 2405.04434 §2.1) and MoE with shared experts.

    ``head_dim`` is the q·k width (nope + rope); MLA's own sizes are in ``mla``.
    """
    spec = _core(f)
    q_lora_rank = f.opt_int("q_lora_rank")
    mla = MLASpec(
        q_lora_rank=q_lora_rank,
        kv_lora_rank=f.get_int("kv_lora_rank"),
        qk_nope_head_dim=f.get_int("qk_nope_head_dim"),
        qk_rope_head_dim=f.get_int("qk_rope_head_dim"),
        v_head_dim=f.get_int("v_head_dim"),
    )
    expert_ffn = f.get_int("moe_intermediate_size")
    num_shared = f.get_int("n_shared_experts", default=0)
    spec.update(
        head_dim=mla.qk_head_dim,
        rotary_dim=mla.qk_rope_head_dim,
        num_kv_heads=spec["num_attention_heads"],
        mla=mla,
        moe=MoESpec(
            num_experts=f.get_int("n_routed_experts"),
            num_experts_per_tok=f.get_int("num_experts_per_tok"),
            expert_intermediate_size=expert_ffn,
            num_shared_experts=num_shared,
            shared_intermediate_size=num_shared * expert_ffn,
            first_k_dense=f.get_int("first_k_dense_replace", default=0),
            layer_freq=f.get_int("moe_layer_freq", default=1),
            # DeepSeek-V3 auxiliary-loss-free balancing (arXiv 2412.19437 §2.1.2) adds a bias per expert.
            router_correction_bias=f.get_str("topk_method", default="") == "noaux_tc",
            # transformers 5's DeepseekV2/V3TopkRouter keeps its weight in float32 whatever the model's dtype.
            router_weight_dtype=DType.FP32,
        ),
        modules=ModuleNames(q_proj=None if q_lora_rank else "q_proj", k_proj=None, v_proj=None),
    )
    return spec


def _gpt2_style_fields(f: Fields) -> dict[str, Any]:
    """The fields GPT-2 and GPT-J configs name alike (``n_embd``, ``n_head``, ``n_layer``, ``n_inner``):
    MHA, a plain MLP of width 4·hidden by default, biased LayerNorms."""
    hidden = f.get_int("n_embd", "hidden_size")
    heads = f.get_int("n_head", "num_attention_heads")
    return {
        "hidden_size": hidden,
        "num_layers": f.get_int("n_layer", "num_hidden_layers"),
        "vocab_size": f.get_int("vocab_size"),
        "num_attention_heads": heads,
        "num_kv_heads": heads,
        "head_dim": _head_dim(f, hidden, heads),
        "intermediate_size": f.get_int("n_inner", default=4 * hidden),
        "mlp_kind": "plain",
        "activation": _activation(f, "activation_function", default="gelu_new"),
        "norm_kind": "layernorm",
        "norm_bias": True,
    }


def parse_gptj(f: Fields) -> dict[str, Any]:
    """GPT-J: parallel block with one LayerNorm, partial rotary, biased MLP and ``lm_head``."""
    fields = _gpt2_style_fields(f)
    return {
        **fields,
        "block_layout": "parallel",
        "position": "rope",
        "rotary_dim": f.get_int("rotary_dim", default=fields["head_dim"]),
        "max_position_embeddings": f.get_int("n_positions", "max_position_embeddings", default=2048),
        "mlp_bias": True,
        "lm_head_bias": True,
        "tie_word_embeddings": f.get_bool("tie_word_embeddings", default=False),
        "modules": ModuleNames(root="transformer.", embed="wte", layers="h", input_norm="ln_1", attn="attn",
                               o_proj="out_proj", post_attn_norm=None, gate_proj=None, up_proj="fc_in",
                               down_proj="fc_out", act="act", final_norm="ln_f"),
    }


def parse_falcon(f: Fields) -> dict[str, Any]:
    """Falcon: fused ``query_key_value``; multi-query (7B) or grouped (new decoder architecture)."""
    hidden = f.get_int("hidden_size", "n_embed")
    heads = f.get_int("num_attention_heads", "n_head")
    new_arch = f.get_bool("new_decoder_architecture", default=False)
    parallel = f.get_bool("parallel_attn", default=True)
    if new_arch:
        kv_heads = f.get_int("num_kv_heads", default=heads)
    else:
        kv_heads = 1 if f.get_bool("multi_query", default=True) else heads
    # modeling_falcon.py FalconDecoderLayer: which LayerNorms exist.
    if new_arch or (parallel and f.get_int("num_ln_in_parallel_attn", default=1) == 2):
        norms = dict(input_norm="ln_attn", pre_ffn_norm="ln_mlp", post_attn_norm=None)
    elif parallel:
        norms = dict(input_norm="input_layernorm", post_attn_norm=None)
    else:
        norms = dict(input_norm="input_layernorm", post_attn_norm="post_attention_layernorm")
    alibi = f.get_bool("alibi", default=False)
    if alibi:
        log.warning("falcon with alibi: modelled with position='none' (ALiBi adds a bias, no weights)")
    bias = f.get_bool("bias", default=False)
    head_dim = _head_dim(f, hidden, heads)
    return {
        "hidden_size": hidden,
        "num_layers": f.get_int("num_hidden_layers", "n_layer"),
        "vocab_size": f.get_int("vocab_size", default=65024),
        "num_attention_heads": heads,
        "num_kv_heads": kv_heads,
        "head_dim": head_dim,
        "intermediate_size": f.get_int("ffn_hidden_size", default=4 * hidden),
        "mlp_kind": "plain",
        "activation": _activation(f, "activation", default="gelu"),
        "norm_kind": "layernorm",
        "norm_bias": True,
        "block_layout": "parallel" if parallel else "sequential",
        "position": "none" if alibi else "rope",
        "rotary_dim": 0 if alibi else head_dim,
        "max_position_embeddings": f.get_int("max_position_embeddings", default=2048),
        "qkv_bias": bias,
        "o_bias": bias,
        "mlp_bias": bias,
        "tie_word_embeddings": f.get_bool("tie_word_embeddings", default=True),
        "modules": ModuleNames(root="transformer.", embed="word_embeddings", layers="h",
                               attn="self_attention", q_proj=None, k_proj=None, v_proj=None,
                               qkv_proj="query_key_value", o_proj="dense", gate_proj=None,
                               up_proj="dense_h_to_4h", down_proj="dense_4h_to_h", act="act",
                               final_norm="ln_f", **norms),
    }


def parse_gpt2(f: Fields) -> dict[str, Any]:
    """GPT-2: Conv1D ``c_attn``/``c_proj``, learned positions ``wpe``, biases everywhere, tied head."""
    positions = f.get_int("n_positions", "max_position_embeddings", default=1024)
    return {
        **_gpt2_style_fields(f),
        "position": "learned",
        "rotary_dim": 0,
        "max_position_embeddings": positions,
        "num_position_embeddings": positions,
        "qkv_bias": True,
        "o_bias": True,
        "mlp_bias": True,
        "tie_word_embeddings": f.get_bool("tie_word_embeddings", default=True),
        "modules": ModuleNames(root="transformer.", embed="wte", pos_embed="wpe", layers="h",
                               input_norm="ln_1", attn="attn", q_proj=None, k_proj=None, v_proj=None,
                               qkv_proj="c_attn", o_proj="c_proj", post_attn_norm="ln_2", gate_proj=None,
                               up_proj="c_fc", down_proj="c_proj", act="act", final_norm="ln_f"),
    }


# OPTLearnedPositionalEmbedding: "OPT is set up so that if padding_idx is specified then offset the
# embedding ids by 2 and adjust num_embeddings appropriately".
_OPT_POSITION_OFFSET = 2


def parse_opt(f: Fields) -> dict[str, Any]:
    """OPT: ``model.decoder.layers.N.{self_attn,fc1,fc2}``; learned positions with an offset of 2."""
    hidden = f.get_int("hidden_size")
    heads = f.get_int("num_attention_heads")
    if f.get_int("word_embed_proj_dim", default=hidden) != hidden:
        log.warning("opt: word_embed_proj_dim != hidden_size; project_in/project_out are not modelled")
    if not f.get_bool("do_layer_norm_before", default=True):
        log.warning("opt: do_layer_norm_before=false (OPT-350m) is modelled as pre-norm")
    bias = f.get_bool("enable_bias", default=True)
    positions = f.get_int("max_position_embeddings", default=2048)
    return {
        "hidden_size": hidden,
        "num_layers": f.get_int("num_hidden_layers"),
        "vocab_size": f.get_int("vocab_size"),
        "num_attention_heads": heads,
        "num_kv_heads": heads,
        "head_dim": _head_dim(f, hidden, heads),
        "intermediate_size": f.get_int("ffn_dim"),
        "mlp_kind": "plain",
        "activation": _activation(f, "activation_function", default="relu"),
        "norm_kind": "layernorm",
        "norm_bias": True,
        "position": "learned",
        "rotary_dim": 0,
        "max_position_embeddings": positions,
        "num_position_embeddings": positions + _OPT_POSITION_OFFSET,
        "qkv_bias": bias,
        "o_bias": bias,
        "mlp_bias": bias,
        "tie_word_embeddings": f.get_bool("tie_word_embeddings", default=True),
        "modules": ModuleNames(root="model.decoder.", pos_embed="embed_positions",
                               input_norm="self_attn_layer_norm", o_proj="out_proj",
                               post_attn_norm="final_layer_norm", mlp="", gate_proj=None, up_proj="fc1",
                               down_proj="fc2", act="activation_fn", final_norm="final_layer_norm"),
    }


def parse_llama4(f: Fields) -> dict[str, Any]:
    """Llama 4 (text stack): MoE with a shared expert, chunked attention on RoPE layers.

    configuration_llama4.py: ``moe_layers`` defaults to every ``interleave_moe_layer_step``-th
    layer; ``no_rope_layers`` defaults to 1 (RoPE + chunked attention) except every 4th layer
    (NoPE, global). Its qk-norm is a weightless L2 norm, so ``qk_norm`` stays False.
    ``Llama4ForConditionalGeneration`` nests a ``Llama4ForCausalLM`` at ``language_model``.
    """
    spec = _core(f)
    layers = spec["num_layers"]
    expert_ffn = spec["intermediate_size"]
    moe_layers = f.int_list("moe_layers")
    step = f.get_int("interleave_moe_layer_step", default=1)
    first_k, freq = _moe_layout(step, layers)
    dense: tuple[int, ...] = ()
    if moe_layers is not None:
        first_k, freq = 0, 1
        dense = tuple(i for i in range(layers) if i not in set(moe_layers))
    spec.update(
        intermediate_size=f.get_int("intermediate_size_mlp", default=16384),
        moe=MoESpec(
            num_experts=f.get_int("num_local_experts"),
            num_experts_per_tok=f.get_int("num_experts_per_tok", default=1),
            expert_intermediate_size=expert_ffn,
            num_shared_experts=1,
            shared_intermediate_size=expert_ffn,
            first_k_dense=first_k,
            layer_freq=freq,
            dense_layers=dense,
        ),
    )
    conditional = f.architecture == "Llama4ForConditionalGeneration"
    spec["modules"] = ModuleNames(
        root="language_model.model." if conditional else "model.",
        lm_head="language_model.lm_head" if conditional else "lm_head",
        mlp="feed_forward", router="router", shared_experts="shared_expert", act="activation_fn",
    )
    no_rope = f.int_list("no_rope_layers") or [int((i + 1) % 4 != 0) for i in range(layers)]
    chunk = f.opt_int("attention_chunk_size")
    if chunk is None:
        return spec
    return _with_pattern({**spec}, Fields({**f.cfg, "sliding_window": chunk}, f.family, f.architecture),
                         lambda i: bool(no_rope[i]))


def parse_generic(f: Fields) -> dict[str, Any]:
    """Unknown ``model_type``: a llama-style decoder from the standard fields."""
    spec = _core(f)
    spec["modules"] = ModuleNames()
    if f.has("sliding_window") and f.cfg.get("use_sliding_window", True):
        spec = _sliding_all(spec, f)
    return spec


#: HF ``model_type`` → parser. ``*_text`` types are the text configs of multimodal models. The loader
#: reads it as a mapping (an unknown type falls back to :func:`parse_generic`, it is no error).
FAMILIES: Registry[Parser] = Registry("family", ConfigError, {
    "llama": parse_llama,
    "mistral": parse_mistral,
    "mixtral": parse_mixtral,
    "qwen2": parse_qwen2,
    "qwen3": parse_qwen3,
    "qwen3_moe": parse_qwen3_moe,
    "gemma2": parse_gemma2,
    "gemma3": parse_gemma3,
    "gemma3_text": parse_gemma3,
    "phi3": parse_phi3,
    "gpt_oss": parse_gpt_oss,
    "deepseek_v2": parse_deepseek,
    "deepseek_v3": parse_deepseek,
    "gptj": parse_gptj,
    "falcon": parse_falcon,
    "gpt2": parse_gpt2,
    "opt": parse_opt,
    "llama4": parse_llama4,
    "llama4_text": parse_llama4,
})

#: The causal-LM class each family builds when ``architectures`` is absent (module roots follow it).
DEFAULT_ARCHITECTURES: dict[str, str] = {
    "llama": "LlamaForCausalLM",
    "mistral": "MistralForCausalLM",
    "mixtral": "MixtralForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "qwen3": "Qwen3ForCausalLM",
    "qwen3_moe": "Qwen3MoeForCausalLM",
    "gemma2": "Gemma2ForCausalLM",
    "gemma3": "Gemma3ForConditionalGeneration",
    "gemma3_text": "Gemma3ForCausalLM",
    "phi3": "Phi3ForCausalLM",
    "gpt_oss": "GptOssForCausalLM",
    "deepseek_v2": "DeepseekV2ForCausalLM",
    "deepseek_v3": "DeepseekV3ForCausalLM",
    "gptj": "GPTJForCausalLM",
    "falcon": "FalconForCausalLM",
    "gpt2": "GPT2LMHeadModel",
    "opt": "OPTForCausalLM",
    "llama4": "Llama4ForConditionalGeneration",
    "llama4_text": "Llama4ForCausalLM",
}
