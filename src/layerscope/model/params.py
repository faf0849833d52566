"""Parameter counts and weight bytes of a :class:`ModelSpec`.

Conventions (catalog README): *total* is every weight of the language model's checkpoint
(embeddings, untied ``lm_head``, norms, biases, routers, all experts; no MTP module, no vision
tower); *active* is total minus the routed experts a token does not use (top-k of E).
"""

from __future__ import annotations

from collections.abc import Iterator
from fnmatch import fnmatchcase

from pydantic import BaseModel

from layerscope.docstrings import SPEC_CONFIG
from layerscope.model.spec import ModelSpec
from layerscope.units import DType

COMPONENTS: tuple[str, ...] = (
    "embedding",
    "position_embedding",
    "attention",
    "dense_mlp",
    "routed_experts",
    "shared_experts",
    "router",
    "norms",
    "lm_head",
)

#: Components whose linear weights a quantization converts (the rest keep ``base_dtype``:
#: HF quantizers replace ``nn.Linear``/expert weights only and keep the output embedding
#: (``get_keys_to_not_convert``); every catalog checkpoint keeps routers in high precision).
QUANTIZABLE: tuple[str, ...] = ("attention", "dense_mlp", "routed_experts", "shared_experts")


class ParamCounts(BaseModel):
    """Parameter counts (elements) per component of a model."""

    model_config = SPEC_CONFIG

    embedding: int
    """Token embedding table (shared with ``lm_head`` when tied)."""
    position_embedding: int
    """Learned position table (gpt2 ``wpe``, OPT ``embed_positions``)."""
    attention: int
    """Q/K/V/O (or MLA) projections with biases and gpt-oss sinks, all layers."""
    dense_mlp: int
    """Dense MLPs (all layers of dense models; the dense layers of MoE models)."""
    routed_experts: int
    """Every routed expert of every MoE layer, biases included."""
    routed_experts_active: int
    """The routed-expert weights one token uses: top-k experts per MoE layer."""
    shared_experts: int
    router: int
    norms: int
    """Every norm weight (and bias): per-layer, q/k, MLA latent norms and the final norm."""
    lm_head: int
    """0 when tied to the embedding."""

    @property
    def total(self) -> int:
        return sum(getattr(self, c) for c in COMPONENTS)

    @property
    def active(self) -> int:
        """Parameters a token touches: total with routed experts scaled by top_k / num_experts."""
        return self.total - self.routed_experts + self.routed_experts_active

    @property
    def active_excluding_embedding(self) -> int:
        """``active`` without the input embedding tables (gpt-oss and DeepSeek-V2-Lite publish this)."""
        return self.active - self.embedding - self.position_embedding

    @property
    def non_embedding(self) -> int:
        """``total`` without embedding tables and ``lm_head`` (Qwen's "non-embedding" figure)."""
        return self.total - self.embedding - self.position_embedding - self.lm_head


def _norm(spec: ModelSpec, width: int) -> int:
    return width * (2 if spec.norm_bias else 1)


def _attention(spec: ModelSpec) -> tuple[int, int]:
    """(projection params, norm params) of one layer's attention."""
    h, nh = spec.hidden_size, spec.num_attention_heads
    if spec.mla is not None:
        # DeepSeek-V2 modeling: q_a (h→q_rank) + q_b (q_rank→nh·qk) or q (h→nh·qk); kv_a (h→kv_rank+rope);
        # kv_b (kv_rank→nh·(nope+v)); o (nh·v→h); q_a/kv_a RMSNorms.
        m = spec.mla
        if m.q_lora_rank:
            q = h * m.q_lora_rank + m.q_lora_rank * nh * m.qk_head_dim
            norms = m.q_lora_rank
        else:
            q, norms = h * nh * m.qk_head_dim, 0
        kv_a = h * (m.kv_lora_rank + m.qk_rope_head_dim)
        kv = kv_a + m.kv_lora_rank * nh * (m.qk_nope_head_dim + m.v_head_dim)
        o = nh * m.v_head_dim * h
        return q + kv + o, norms + m.kv_lora_rank
    q_out, kv_out = nh * spec.head_dim, spec.num_kv_heads * spec.head_dim
    proj = h * (q_out + 2 * kv_out) + q_out * h
    if spec.qkv_bias:
        proj += q_out + 2 * kv_out
    if spec.o_bias:
        proj += h
    if spec.attention_sinks:
        proj += nh  # one learned sink logit per head (gpt-oss)
    norms = 2 * spec.head_dim if spec.qk_norm else 0
    return proj, norms


def _mlp(spec: ModelSpec, width: int, bias: bool) -> int:
    """One MLP of FFN width ``width``: gated 3·h·w, plain 2·h·w, plus biases."""
    h = spec.hidden_size
    if spec.mlp_kind == "gated":
        return 3 * h * width + ((2 * width + h) if bias else 0)
    return 2 * h * width + ((width + h) if bias else 0)


def _layer_norms(spec: ModelSpec) -> int:
    m = spec.modules
    count = sum(n is not None for n in (m.input_norm, m.post_attn_norm, m.pre_ffn_norm, m.post_ffn_norm))
    return count * _norm(spec, spec.hidden_size)


def layer_param_counts(spec: ModelSpec, layer: int) -> dict[str, int]:
    """Parameters of decoder layer ``layer`` per component (zero components included)."""
    counts = dict.fromkeys(COMPONENTS, 0)
    counts["routed_experts_active"] = 0
    attention, attn_norms = _attention(spec)
    counts["attention"] = attention
    counts["norms"] = _layer_norms(spec) + attn_norms
    moe = spec.moe
    if moe is not None and spec.is_moe_layer(layer):
        per_expert = _mlp(spec, moe.expert_intermediate_size, moe.expert_bias)
        counts["routed_experts"] = moe.num_experts * per_expert
        counts["routed_experts_active"] = moe.num_experts_per_tok * per_expert
        biases = int(moe.router_bias) + int(moe.router_correction_bias)
        counts["router"] = moe.num_experts * (spec.hidden_size + biases)
        if moe.shared_intermediate_size:
            counts["shared_experts"] = _mlp(spec, moe.shared_intermediate_size, False)
    else:
        counts["dense_mlp"] = _mlp(spec, spec.intermediate_size, spec.mlp_bias)
    return counts


def global_param_counts(spec: ModelSpec) -> dict[str, int]:
    """Parameters outside the decoder layers per component: embedding, position embedding, final norm, lm_head."""
    embedding = spec.vocab_size * spec.hidden_size
    lm_head = 0 if spec.tie_word_embeddings else embedding
    if spec.lm_head_bias:
        lm_head += spec.vocab_size
    return {
        "embedding": embedding,
        "position_embedding": spec.num_position_embeddings * spec.hidden_size,
        "norms": _norm(spec, spec.hidden_size),  # the final norm
        "lm_head": lm_head,
    }


def param_counts(spec: ModelSpec) -> ParamCounts:
    """Per-component parameter counts of ``spec`` (elements, not bytes)."""
    totals = dict.fromkeys((*COMPONENTS, "routed_experts_active"), 0)
    for layer in range(spec.num_layers):
        for key, value in layer_param_counts(spec, layer).items():
            totals[key] += value
    for key, value in global_param_counts(spec).items():
        totals[key] += value
    return ParamCounts(**totals)


def is_excluded(module_path: str, patterns: tuple[str, ...]) -> bool:
    """Whether a module (or an ancestor) matches a ``modules_to_not_convert`` pattern.

    Patterns are globs (``model.layers.*.self_attn``) or dotted names matched as whole segments
    anywhere in the path (``lm_head``), as HF quantizers treat them.
    """
    dotted = f".{module_path}."
    for pattern in patterns:
        if fnmatchcase(module_path, pattern) or fnmatchcase(module_path, pattern + ".*"):
            return True
        if not any(c in pattern for c in "*?[") and f".{pattern}." in dotted:
            return True
    return False


def _component_paths(spec: ModelSpec, layer: int) -> Iterator[tuple[str, str]]:
    m = spec.modules
    yield "attention", m.root + m.op(layer, m.attn)
    yield "dense_mlp", m.root + m.op(layer, m.mlp)
    yield "routed_experts", m.root + m.op(layer, m.mlp, m.experts)
    yield "shared_experts", m.root + m.op(layer, m.mlp, m.shared_experts)


def weight_bytes(spec: ModelSpec, default_dtype: DType | None = None) -> int:
    """Bytes of all weights.

    A quantized checkpoint (``spec.is_quantized``) stores its linear weights in ``spec.weight_dtype``
    unless a ``quantized_modules_excluded`` pattern names them; every other weight (embeddings,
    norms, routers, ``lm_head``, excluded modules, or all weights of an unquantized checkpoint) is
    counted in ``default_dtype`` (``spec.base_dtype`` when not given; a workload's weight dtype
    when estimating a bf16 checkpoint served in fp8). Block scales of fp8/fp4 formats are not counted.
    """
    base = default_dtype or spec.base_dtype
    if not spec.is_quantized:
        return spec_param_bits(spec, base) // 8
    bits = 0
    for layer in range(spec.num_layers):
        counts = layer_param_counts(spec, layer)
        quantized = {
            name: not is_excluded(path, spec.quantized_modules_excluded)
            for name, path in _component_paths(spec, layer)
        }
        for name in COMPONENTS:
            dtype = spec.weight_dtype if quantized.get(name, False) else base
            bits += counts[name] * dtype.bits
    bits += sum(global_param_counts(spec).values()) * base.bits
    return bits // 8


def spec_param_bits(spec: ModelSpec, dtype: DType) -> int:
    """Bits of all weights of ``spec`` stored in one ``dtype``."""
    return param_counts(spec).total * dtype.bits
