"""``ModelSpec``: the architecture of a decoder-only language model, as layerscope needs it.

Built from a Hugging Face ``config.json`` by the family parsers in :mod:`layerscope.model.families`.
Field names follow the convention of the rest of the package (``num_kv_heads``, never
``n_local_heads``). Sizes are element counts, never bytes.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, model_validator

from layerscope.docstrings import SPEC_CONFIG
from layerscope.units import DType

NormKind = Literal["rmsnorm", "layernorm"]
MlpKind = Literal["gated", "plain"]
PositionKind = Literal["rope", "learned", "none"]
AttentionKind = Literal["mha", "gqa", "mqa", "mla"]
LayerAttention = Literal["full", "sliding"]
BlockLayout = Literal["sequential", "parallel"]


class ModuleNames(BaseModel):
    """The HF module names of one family, so op names equal ``named_modules()`` paths.

    Op names are the module path with ``root`` stripped: ``model.layers.0.self_attn.q_proj``
    becomes ``layers.0.self_attn.q_proj``. ``None`` means the family has no such module.
    """

    model_config = SPEC_CONFIG

    root: str = "model."
    """Prefix of the decoder stack in ``named_modules()`` that op names drop (``model.``,
    ``transformer.``, ``model.decoder.``); ``lm_head`` lives outside it."""
    embed: str = "embed_tokens"
    pos_embed: str | None = None
    layers: str = "layers"
    input_norm: str = "input_layernorm"
    attn: str = "self_attn"
    q_proj: str | None = "q_proj"
    k_proj: str | None = "k_proj"
    v_proj: str | None = "v_proj"
    qkv_proj: str | None = None
    """Fused Q/K/V projection (phi3 ``qkv_proj``, gpt2 ``c_attn``); then q/k/v_proj are None."""
    o_proj: str = "o_proj"
    q_norm: str | None = None
    k_norm: str | None = None
    post_attn_norm: str | None = "post_attention_layernorm"
    """Norm after attention: before the MLP in llama-style blocks, on the attention output in
    gemma2/3 (then ``pre_ffn_norm`` is the MLP's input norm)."""
    pre_ffn_norm: str | None = None
    post_ffn_norm: str | None = None
    mlp: str = "mlp"
    """``""`` when the MLP's modules hang directly off the layer (OPT ``layers.N.fc1``); use :meth:`op`."""
    gate_proj: str | None = "gate_proj"
    up_proj: str | None = "up_proj"
    gate_up_proj: str | None = None
    down_proj: str = "down_proj"
    act: str = "act_fn"
    router: str = "gate"
    experts: str = "experts"
    shared_experts: str = "shared_experts"
    final_norm: str = "norm"
    lm_head: str = "lm_head"
    # MLA (DeepSeek-V2/V3) projections.
    q_a_proj: str = "q_a_proj"
    q_a_norm: str = "q_a_layernorm"
    q_b_proj: str = "q_b_proj"
    kv_a_proj: str = "kv_a_proj_with_mqa"
    kv_a_norm: str = "kv_a_layernorm"
    kv_b_proj: str = "kv_b_proj"

    def op(self, layer: int | None, *parts: str | None) -> str:
        """Op name (root stripped) of a module: ``op(3, attn, "q_proj")`` → ``layers.3.self_attn.q_proj``.

        Empty or ``None`` parts are skipped (OPT's MLP modules hang directly off the layer, so its
        ``mlp`` is ``""``); ``layer=None`` names a module outside the decoder stack (``norm``).
        """
        head = [self.layers, str(layer)] if layer is not None else []
        return ".".join(p for p in (*head, *parts) if p)

    def module_path(self, op_name: str) -> str:
        """The full ``named_modules()`` path of an op name (``lm_head`` is outside ``root``)."""
        if op_name == self.lm_head or op_name.startswith(self.lm_head + "."):
            return op_name
        return self.root + op_name


class MoESpec(BaseModel):
    """Mixture-of-experts layout (Mixtral, Qwen3-MoE, gpt-oss, DeepSeek-V2/V3)."""

    model_config = SPEC_CONFIG

    num_experts: int = Field(gt=0)
    """Routed experts per MoE layer."""
    num_experts_per_tok: int = Field(gt=0)
    """Routed experts each token is sent to (top-k)."""
    expert_intermediate_size: int = Field(gt=0)
    """FFN width of one routed expert."""
    num_shared_experts: int = Field(default=0, ge=0)
    """Always-active experts (DeepSeek); their FFN width is ``shared_intermediate_size``."""
    shared_intermediate_size: int = Field(default=0, ge=0)
    """Total FFN width of the shared experts (DeepSeek: ``n_shared_experts * moe_intermediate_size``)."""
    first_k_dense: int = Field(default=0, ge=0)
    """The first k layers use a dense MLP (DeepSeek ``first_k_dense_replace``)."""
    layer_freq: int = Field(default=1, ge=1)
    """Every ``layer_freq``-th layer (after ``first_k_dense``) is MoE."""
    router_bias: bool = False
    expert_bias: bool = False
    """Experts' projections carry biases (gpt-oss)."""
    impl: str = "fused"
    """Implementation tag used in flashinfer-bench-style names (``moe_{impl}_e…``)."""
    router_correction_bias: bool = False
    """Per-expert score-correction bias of the router (DeepSeek-V3 ``noaux_tc``:
    ``e_score_correction_bias``, a checkpoint weight of ``num_experts`` values per MoE layer)."""
    dense_layers: tuple[int, ...] = ()
    """Layers that keep a dense MLP although the pattern makes them MoE (Qwen3-MoE ``mlp_only_layers``)."""
    router_weight_dtype: DType | None = None
    """The router's weight dtype where the model keeps it apart from the other weights (DeepSeek-V2/V3 in
    transformers 5: ``DeepseekV3TopkRouter.weight`` is float32, its logits ``F.linear`` of float32 casts);
    None: the model's weight dtype."""

    @model_validator(mode="after")
    def _check(self) -> MoESpec:
        if self.num_experts_per_tok > self.num_experts:
            raise ValueError(
                f"num_experts_per_tok={self.num_experts_per_tok} exceeds num_experts={self.num_experts}"
            )
        return self


class MLASpec(BaseModel):
    """Multi-head latent attention (DeepSeek-V2/V3, arXiv 2405.04434 §2.1)."""

    model_config = SPEC_CONFIG

    q_lora_rank: int | None = Field(default=None, gt=0)
    """Rank of the query down-projection; ``None`` means a full ``q_proj`` (V2-Lite)."""
    kv_lora_rank: int = Field(gt=0)
    qk_nope_head_dim: int = Field(gt=0)
    qk_rope_head_dim: int = Field(gt=0)
    v_head_dim: int = Field(gt=0)

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim

    @property
    def kv_cache_values_per_token(self) -> int:
        """Values cached per token per layer: the latent plus the shared RoPE key."""
        return self.kv_lora_rank + self.qk_rope_head_dim


class ModelSpec(BaseModel):
    """A decoder-only LM's architecture; every size is an element count."""

    model_config = SPEC_CONFIG

    name: str
    """Catalog or HF id (``meta-llama/Llama-3.2-1B``) or the config's path."""
    model_type: str
    """HF ``model_type`` of the text model (``llama``, ``qwen3_moe`` …)."""
    family: str
    """The parser family that built this spec (same as model_type for known families)."""
    hidden_size: int = Field(gt=0)
    num_layers: int = Field(gt=0)
    vocab_size: int = Field(gt=0)
    num_attention_heads: int = Field(gt=0)
    num_kv_heads: int = Field(gt=0)
    head_dim: int = Field(gt=0)
    """Query/key/value head width (for MLA: see ``mla``)."""
    intermediate_size: int = Field(gt=0)
    """Dense MLP width (for MoE models: of the dense layers, if any)."""
    mlp_kind: MlpKind = "gated"
    """``gated``: down(act(gate(x)) * up(x)); ``plain``: fc2(act(fc1(x)))."""
    activation: str = "silu"
    """``silu``, ``gelu``, ``gelu_tanh``, ``relu`` …"""
    norm_kind: NormKind = "rmsnorm"
    block_layout: BlockLayout = "sequential"
    """``parallel``: attention and MLP read the same normed input (GPT-J, Falcon)."""
    position: PositionKind = "rope"
    rotary_dim: int = 0
    """Dims of each head that RoPE rotates (partial rotary: GPT-J 64); 0 when no RoPE."""
    max_position_embeddings: int = Field(default=2048, gt=0)
    qkv_bias: bool = False
    o_bias: bool = False
    mlp_bias: bool = False
    norm_bias: bool = False
    """LayerNorm with bias (gpt2, opt, gptj)."""
    qk_norm: bool = False
    """Per-head RMSNorm of q and k (Qwen3, Gemma3)."""
    extra_norms: bool = False
    """Gemma2/3 sandwich norms (post-attention and pre/post-feed-forward)."""
    tie_word_embeddings: bool = False
    sliding_window: int | None = Field(default=None, gt=0)
    layer_attention: tuple[LayerAttention, ...] = ()
    """Per layer ``full`` or ``sliding``; length ``num_layers``."""
    attention_sinks: bool = False
    """Learned per-head sink logits (gpt-oss)."""
    moe: MoESpec | None = None
    mla: MLASpec | None = None
    weight_dtype: DType = DType.BF16
    """Checkpoint weight dtype (``torch_dtype`` or ``quantization_config``)."""
    quantized_modules_excluded: tuple[str, ...] = ()
    """Module patterns that stay unquantized (``modules_to_not_convert``)."""
    modules: ModuleNames = ModuleNames()
    # Fields below were added with the family parsers (additive; defaults keep older callers valid).
    base_dtype: DType = DType.BF16
    """dtype of the weights the quantization leaves alone (HF ``torch_dtype``: embeddings, norms,
    routers, ``lm_head``, excluded modules); equals ``weight_dtype`` when not quantized."""
    num_position_embeddings: int = Field(default=0, ge=0)
    """Rows of the learned position table (gpt2 ``n_positions``; OPT adds an offset of 2); 0 if none."""
    lm_head_bias: bool = False
    """``lm_head`` has a bias (GPT-J)."""
    architecture: str = ""
    """HF class the module names follow (``architectures[0]`` or the family's causal-LM class)."""

    @model_validator(mode="after")
    def _check(self) -> ModelSpec:
        if self.mla is None and self.num_attention_heads % self.num_kv_heads:
            raise ValueError(
                f"num_attention_heads={self.num_attention_heads} is not a multiple of "
                f"num_kv_heads={self.num_kv_heads}"
            )
        if self.layer_attention and len(self.layer_attention) != self.num_layers:
            raise ValueError(
                f"layer_attention has {len(self.layer_attention)} entries, "
                f"expected num_layers={self.num_layers}"
            )
        if "sliding" in self.layer_attention and self.sliding_window is None:
            raise ValueError("layer_attention has sliding layers but sliding_window is not set")
        if self.rotary_dim > self.head_dim and self.mla is None:
            raise ValueError(f"rotary_dim={self.rotary_dim} exceeds head_dim={self.head_dim}")
        return self

    @property
    def attention_kind(self) -> AttentionKind:
        if self.mla is not None:
            return "mla"
        if self.num_kv_heads == self.num_attention_heads:
            return "mha"
        if self.num_kv_heads == 1:
            return "mqa"
        return "gqa"

    def is_moe_layer(self, layer: int) -> bool:
        """Whether decoder layer ``layer`` (0-based) has a routed-expert MLP."""
        if self.moe is None or layer < self.moe.first_k_dense or layer in self.moe.dense_layers:
            return False
        return (layer - self.moe.first_k_dense) % self.moe.layer_freq == 0

    def layer_is_sliding(self, layer: int) -> bool:
        """Whether decoder layer ``layer`` attends only to the last ``sliding_window`` tokens."""
        if not self.layer_attention:
            return self.sliding_window is not None
        return self.layer_attention[layer] == "sliding"

    @property
    def is_quantized(self) -> bool:
        """Whether the checkpoint stores its linear weights in a narrower dtype than ``base_dtype``."""
        return self.weight_dtype != self.base_dtype

    @property
    def num_moe_layers(self) -> int:
        return sum(self.is_moe_layer(i) for i in range(self.num_layers))

    def kv_values_per_token_per_layer(self) -> int:
        """Elements cached per token per layer: 2·kv_heads·head_dim, or MLA's latent + rope key."""
        if self.mla is not None:
            return self.mla.kv_cache_values_per_token
        return 2 * self.num_kv_heads * self.head_dim
