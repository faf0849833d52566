"""Attention ops: MHA/GQA/MQA, MLA (DeepSeek), sliding windows, attention sinks.

Conventions (all sizes per tensor-parallel device):

* **Attended pairs.** Causal attention is counted exactly: query ``i`` (0-based) of a sequence
  with ``c`` cached tokens attends ``c + i + 1`` keys, or ``min(c + i + 1, W)`` on a sliding
  window layer of width ``W`` (Mistral, Jiang et al. 2023, arXiv 2310.06825 §2). A prefill of
  ``S`` tokens has ``S(S+1)/2`` pairs per sequence.
* **FLOPs.** ``QK^T``: 2·heads·d_qk·pairs; ``PV``: 2·heads·d_v·pairs (a multiply-add = 2 FLOPs).
  Softmax (safe softmax, Milakov & Gimelshein 2018, arXiv 1805.02867, alg. 3): 1 FLOP per score
  for the row max, 3 for subtract-max, exp and sum, 1 for the divide = **5 FLOPs per score**.
  The fused op's FLOPs equal the sum of the unfused ops'. Attention sinks (gpt-oss) add one
  logit per head per query row to the softmax (not to the matmuls).
* **KV-cache bytes.** Each sequence reads the K/V of every token its queries attend to, cached
  and new, once per layer: ``count · tokens · kv_values_per_token · kv_bytes``; on a window layer
  the union of the queries' windows, ``min(c + n, W + n - 1)`` tokens (decode: ``min(c + 1, W)``).
  Scores of the unfused view are materialized for attended pairs only.
* **Matrix classes.** Prefill without cache: ``Ma_Ma``; prefill/chunk with cache: ``Ma_Mqa``;
  decode (one new token per sequence): ``Va_Mqa``; KV-cache traffic: ``KVCache``.
* **MLA** (DeepSeek-V2, arXiv 2405.04434 §2.1): the cache holds ``kv_lora_rank +
  qk_rope_head_dim`` values per token per layer. ``mla_form="naive"`` expands K/V from the latent
  with ``kv_b_proj`` for every attended token, then runs MHA; ``"absorbed"`` folds W_UK into the
  query and W_UV into the output (§2.1.2, "we can absorb W^UK into W^Q, and W^UV into W^O") so
  attention runs over the latent cache like MQA with one KV head of width
  ``kv_lora_rank + qk_rope_head_dim`` (values: the ``kv_lora_rank`` latent). The default is
  absorbed when every sequence decodes one token, naive otherwise (what vLLM/SGLang do:
  absorption saves the expansion per step, expansion is cheaper once per prefill).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

from layerscope.errors import GraphError, LayerscopeError
from layerscope.graph._common import BuildContext, act, all_reduce, gemm_class, linear, nbytes, weight
from layerscope.graph.naming import LayerNames
from layerscope.graph.norms import norm_op
from layerscope.graph.ops import GemmShape, Op, TensorSpec, make_op

#: How attention appears in a graph: ``fused`` (one op, as FlashAttention and PyTorch's SDPA run it) or
#: ``unfused`` (QKᵀ, a 3-stage softmax and PV as their own ops). The one declaration every layer uses.
AttentionView = Literal["fused", "unfused"]
ATTENTION_VIEWS: tuple[str, ...] = get_args(AttentionView)
MLAForm = Literal["absorbed", "naive"]


def check_attention_view(view: object, error: type[LayerscopeError] = GraphError) -> AttentionView:
    """``view`` if it is an :data:`AttentionView`, else ``error`` naming it and the known views."""
    if view not in ATTENTION_VIEWS:
        raise error(f"attention: unknown view {view!r}; known: {', '.join(ATTENTION_VIEWS)}")
    return view  # type: ignore[return-value]

#: Safe-softmax FLOPs per score (see the module docstring).
SOFTMAX_MAX_FLOPS = 1
SOFTMAX_EXP_FLOPS = 3
SOFTMAX_NORM_FLOPS = 1
SOFTMAX_FLOPS_PER_SCORE = SOFTMAX_MAX_FLOPS + SOFTMAX_EXP_FLOPS + SOFTMAX_NORM_FLOPS
#: RoPE FLOPs per rotated element: x·cos + rotate_half(x)·sin (RoFormer, arXiv 2104.09864 eq. 34).
ROPE_FLOPS_PER_ELEMENT = 3


def causal_pairs(new: int, cached: int, window: int | None = None) -> int:
    """Query-key pairs of one sequence: sum over new tokens i of min(cached + i + 1, window)."""
    lo = cached + 1
    hi = cached + new
    if window is None or hi <= window:
        return (lo + hi) * new // 2
    if lo >= window:
        return new * window
    # Positions lo..window grow, the rest are capped at the window.
    return (lo + window) * (window - lo + 1) // 2 + (hi - window) * window


def kv_tokens_read(new: int, cached: int, window: int | None = None) -> int:
    """Distinct cached+new tokens one sequence's queries attend to (the union of their windows)."""
    total = cached + new
    if window is None:
        return total
    return min(total, window + new - 1)


@dataclass(frozen=True, slots=True)
class _CoreShape:
    """The attention proper, per device: what is multiplied and what is read from the cache."""

    heads: int
    kv_heads: int
    qk_dim: int
    v_dim: int
    cache_values: int
    """Elements per token read from the KV cache."""
    k_values: int
    """Elements per attended token of K as the QK^T matmul reads it."""
    v_values: int
    """Elements per attended token of V as the PV matmul reads it."""
    definition: str
    sinks: bool = False
    layout: Literal["kv", "shared", "k_only"] = "kv"
    """What the cache holds: K and V halves; one latent serving as K and V (MLA absorbed); only
    the part of K not expanded from the latent (MLA naive: k_pe)."""


def _matrix_class(ctx: BuildContext) -> str:
    if ctx.decode_only:
        return "Va_Mqa"
    return "Ma_Mqa" if ctx.any_cached else "Ma_Ma"


def _attention_core(ctx: BuildContext, attn: str, layer: int, q_inputs: tuple[TensorSpec, ...],
                    cache: TensorSpec, extra_kv: tuple[TensorSpec, ...], shape: _CoreShape,
                    window: int | None, view: AttentionView) -> tuple[list[Op], str]:
    """The attention of one layer over every sequence group, fused or in its five unfused steps."""
    adt = ctx.act_dtype
    abits = adt.bits
    t = ctx.tokens
    h = shape.heads
    pairs = 0
    kv_tok = 0
    past_tok = 0
    max_ctx = 0
    for g in ctx.groups:
        pairs += g.count * causal_pairs(g.new, g.cached, window)
        read = kv_tokens_read(g.new, g.cached, window)
        kv_tok += g.count * read
        past_tok += g.count * max(read - g.new, 0)
        max_ctx = max(max_ctx, read)
    scores = h * pairs + (h * t if shape.sinks else 0)
    qk_flops = 2 * h * shape.qk_dim * pairs
    pv_flops = 2 * h * shape.v_dim * pairs
    kv_bytes = nbytes(kv_tok * shape.cache_values, ctx.kbits)
    q_bytes = sum(nbytes(x.numel, x.dtype.bits) for x in q_inputs)
    extra_bytes = sum(nbytes(x.numel, x.dtype.bits) for x in extra_kv)
    out_numel = t * h * shape.v_dim
    mclass = _matrix_class(ctx)
    cache_inputs: tuple[TensorSpec, ...] = (cache,)
    if past_tok:
        cache_inputs += (TensorSpec(f"{cache.name}.past", (past_tok, shape.cache_values), ctx.kv_dtype,
                                    "kv_cache"),)
    sink_w: tuple[TensorSpec, ...] = ((weight(f"{attn}.sinks", (h,), adt),) if shape.sinks else ())
    single = ctx.groups[0] if len(ctx.groups) == 1 else None
    qk_gemm = pv_gemm = None
    if single is not None:
        ctx_len = kv_tokens_read(single.new, single.cached, window)
        qk_gemm = GemmShape(single.new, ctx_len, shape.qk_dim, single.count * h)
        pv_gemm = GemmShape(single.new, shape.v_dim, ctx_len, single.count * h)
    attrs: tuple[tuple[str, object], ...] = (
        ("groups", tuple((g.count, g.new, g.cached) for g in ctx.groups)),
        ("attended_pairs", pairs), ("kv_tokens", kv_tok), ("window", window),
    )
    if shape.sinks:
        attrs += (("sinks", f"{h} extra sink logits per query row (one per head)"),)
    out_name = f"{attn}.attn:out" if view == "fused" else f"{attn}.pv_matmul:out"
    out = act(out_name, (t, h * shape.v_dim), adt)
    if view == "fused":
        return [make_op(
            name=f"{attn}.attn", kind="attention", module=attn, layer=layer,
            inputs=q_inputs + cache_inputs + extra_kv + sink_w, outputs=(out,),
            flops=qk_flops + SOFTMAX_FLOPS_PER_SCORE * scores + pv_flops,
            weight_bytes=nbytes(h, abits) if shape.sinks else 0,
            act_read_bytes=q_bytes + extra_bytes, act_write_bytes=nbytes(out_numel, abits),
            kv_read_bytes=kv_bytes, matrix_class=mclass, definition=shape.definition, gemm=qk_gemm,
            attrs=attrs,
        )], out_name

    # Unfused: kv_read -> qk_matmul -> softmax_max -> softmax_exp -> softmax_norm -> pv_matmul.
    cv = shape.cache_values
    kv_outs: tuple[TensorSpec, ...]
    k_in: tuple[TensorSpec, ...]
    v_in: tuple[TensorSpec, ...]
    if shape.layout == "kv":
        kv_outs = (act(f"{attn}.kv_read:k", (kv_tok, cv // 2), adt),
                   act(f"{attn}.kv_read:v", (kv_tok, cv - cv // 2), adt))
        k_in, v_in = kv_outs[:1], kv_outs[1:]
    elif shape.layout == "shared":
        kv_outs = (act(f"{attn}.kv_read:kv", (kv_tok, cv), adt),)
        k_in = v_in = kv_outs
    else:
        kv_outs = (act(f"{attn}.kv_read:k", (kv_tok, cv), adt),)
        k_in, v_in = kv_outs, ()
    k_in += extra_kv
    v_in += extra_kv
    k_bytes = nbytes(kv_tok * shape.k_values, abits)
    v_bytes = nbytes(kv_tok * shape.v_values, abits)
    score_b = nbytes(scores, abits)
    row_b = nbytes(h * t, abits)
    score_shape = (h, scores // h)
    kvdims = f"h{h}_kv{shape.kv_heads}"
    ops = [
        make_op(name=f"{attn}.kv_read", kind="kv_read", module=attn, layer=layer, inputs=cache_inputs,
           outputs=kv_outs, flops=0, act_write_bytes=nbytes(kv_tok * shape.cache_values, abits),
           kv_read_bytes=kv_bytes, matrix_class="KVCache",
           definition=f"kv_read_kv{shape.kv_heads}_d{shape.qk_dim}", attrs=attrs),
        make_op(name=f"{attn}.qk_matmul", kind="qk_matmul", module=attn, layer=layer, inputs=q_inputs + k_in,
           outputs=(act(f"{attn}.qk_matmul:out", score_shape, adt),), flops=qk_flops,
           act_read_bytes=q_bytes + k_bytes, act_write_bytes=nbytes(h * pairs, abits), matrix_class=mclass,
           definition=f"qk_matmul_{kvdims}_d{shape.qk_dim}", gemm=qk_gemm, attrs=attrs),
        make_op(name=f"{attn}.softmax_max", kind="softmax_max", module=attn, layer=layer,
           inputs=(act(f"{attn}.qk_matmul:out", score_shape, adt), *sink_w),
           outputs=(act(f"{attn}.softmax_max:out", (h, t), adt),), flops=SOFTMAX_MAX_FLOPS * scores,
           weight_bytes=nbytes(h, abits) if shape.sinks else 0,
           act_read_bytes=score_b, act_write_bytes=row_b, matrix_class="Reduction",
           definition=f"softmax_d{max_ctx}", attrs=attrs),
        make_op(name=f"{attn}.softmax_exp", kind="softmax_exp", module=attn, layer=layer,
           inputs=(act(f"{attn}.qk_matmul:out", score_shape, adt), act(f"{attn}.softmax_max:out", (h, t), adt)),
           outputs=(act(f"{attn}.softmax_exp:out", score_shape, adt), act(f"{attn}.softmax_exp:sum", (h, t), adt)),
           flops=SOFTMAX_EXP_FLOPS * scores, act_read_bytes=score_b + row_b,
           act_write_bytes=score_b + row_b, matrix_class="Reduction", definition=f"softmax_d{max_ctx}",
           attrs=attrs),
        make_op(name=f"{attn}.softmax_norm", kind="softmax_norm", module=attn, layer=layer,
           inputs=(act(f"{attn}.softmax_exp:out", score_shape, adt), act(f"{attn}.softmax_exp:sum", (h, t), adt)),
           outputs=(act(f"{attn}.softmax_norm:out", (h, pairs), adt),), flops=SOFTMAX_NORM_FLOPS * scores,
           act_read_bytes=score_b + row_b, act_write_bytes=nbytes(h * pairs, abits),
           matrix_class="Elementwise", definition=f"softmax_d{max_ctx}", attrs=attrs),
        make_op(name=f"{attn}.pv_matmul", kind="pv_matmul", module=attn, layer=layer,
           inputs=(act(f"{attn}.softmax_norm:out", (h, pairs), adt), *v_in), outputs=(out,), flops=pv_flops,
           act_read_bytes=nbytes(h * pairs, abits) + v_bytes, act_write_bytes=nbytes(out_numel, abits),
           matrix_class=mclass, definition=f"pv_matmul_{kvdims}_d{shape.v_dim}", gemm=pv_gemm, attrs=attrs),
    ]
    return ops, out_name


def _rope(ctx: BuildContext, attn: str, layer: int, q: TensorSpec, k: TensorSpec, q_heads: int,
          k_heads: int, rotary_dim: int, head_dim_q: int, head_dim_k: int) -> Op:
    """RoPE on ``rotary_dim`` dims of every q and k head; reads q, k and the cos/sin rows."""
    t = ctx.tokens
    adt = ctx.act_dtype
    qk_numel = t * (q_heads * head_dim_q + k_heads * head_dim_k)
    return make_op(
        name=f"{attn}.rope", kind="rope", module=attn, layer=layer, inputs=(q, k),
        outputs=(act(f"{attn}.rope:q", q.shape, adt), act(f"{attn}.rope:k", k.shape, adt)),
        flops=ROPE_FLOPS_PER_ELEMENT * t * (q_heads + k_heads) * rotary_dim,
        act_read_bytes=nbytes(qk_numel + 2 * t * rotary_dim, adt.bits),
        act_write_bytes=nbytes(qk_numel, adt.bits), matrix_class="Elementwise",
        definition=f"rope_h{q_heads}_d{rotary_dim}",
    )


def _kv_write(ctx: BuildContext, attn: str, layer: int, srcs: tuple[TensorSpec, ...], values: int,
              definition: str) -> Op:
    """Append the new tokens' ``values`` cache elements per token to the KV cache."""
    t = ctx.tokens
    return make_op(
        name=f"{attn}.kv_write", kind="kv_write", module=attn, layer=layer, inputs=srcs,
        outputs=(TensorSpec(f"{attn}.kv_cache", (t, values), ctx.kv_dtype, "kv_cache"),),
        flops=0, act_read_bytes=nbytes(t * values, ctx.abits), kv_write_bytes=nbytes(t * values, ctx.kbits),
        matrix_class="KVCache", definition=definition,
    )


def build_attention(ctx: BuildContext, names: LayerNames, layer: int, x: str, *, sliding: bool,
                    view: AttentionView = "fused", mla_form: MLAForm | None = None) -> tuple[list[Op], str]:
    """The attention block of one layer reading ``x[T, hidden]``; returns its ops and output tensor.

    Output is o_proj's output, or its all-reduce when ``tp > 1``.
    """
    spec = ctx.spec
    if spec.mla is not None:
        return _build_mla(ctx, names, layer, x, sliding=sliding, view=view, mla_form=mla_form)
    mods = spec.modules
    attn = names.attn
    adt = ctx.act_dtype
    t = ctx.tokens
    hidden = spec.hidden_size
    hd = spec.head_dim
    h = ctx.heads
    kvh = ctx.kv_heads
    ops: list[Op] = []
    if mods.qkv_proj:
        qkv = linear(ctx, f"{attn}.{mods.qkv_proj}", f"{attn}.{mods.qkv_proj}", layer, x, hidden,
                     (h + 2 * kvh) * hd, bias=spec.qkv_bias)
        ops.append(qkv)
        src = qkv.outputs[0].name
        q = act(src, (t, h * hd), adt)
        k = act(src, (t, kvh * hd), adt)
        v = act(src, (t, kvh * hd), adt)
    else:
        assert mods.q_proj and mods.k_proj and mods.v_proj, "q/k/v_proj or qkv_proj must be named"
        proj = []
        for leaf, width in ((mods.q_proj, h * hd), (mods.k_proj, kvh * hd), (mods.v_proj, kvh * hd)):
            op = linear(ctx, f"{attn}.{leaf}", f"{attn}.{leaf}", layer, x, hidden, width, bias=spec.qkv_bias)
            ops.append(op)
            proj.append(op.outputs[0])
        q, k, v = proj
    if spec.qk_norm and mods.q_norm and mods.k_norm:
        # Per-head RMSNorm over head_dim before RoPE (Qwen3, Gemma3).
        qn = norm_op(ctx, f"{attn}.{mods.q_norm}", layer, q.name, hd, groups=h, kind="rmsnorm")
        kn = norm_op(ctx, f"{attn}.{mods.k_norm}", layer, k.name, hd, groups=kvh, kind="rmsnorm")
        ops += (qn, kn)
        q, k = qn.outputs[0], kn.outputs[0]
    if spec.position == "rope":
        rope = _rope(ctx, attn, layer, q, k, h, kvh, spec.rotary_dim or hd, hd, hd)
        ops.append(rope)
        q, k = rope.outputs
    ops.append(_kv_write(ctx, attn, layer, (k, v), 2 * kvh * hd, f"kv_append_kv{kvh}_d{hd}"))
    kind = "paged_decode" if ctx.decode_only else "ragged_prefill_causal"
    shape = _CoreShape(heads=h, kv_heads=kvh, qk_dim=hd, v_dim=hd, cache_values=2 * kvh * hd,
                       k_values=kvh * hd, v_values=kvh * hd, definition=f"gqa_{kind}_h{h}_kv{kvh}_d{hd}",
                       sinks=spec.attention_sinks)
    window = spec.sliding_window if sliding else None
    core, out = _attention_core(ctx, attn, layer, (q,), ops[-1].outputs[0], (), shape, window, view)
    ops += core
    return _o_proj(ctx, ops, attn, layer, out, h * hd)


def _o_proj(ctx: BuildContext, ops: list[Op], attn: str, layer: int, x: str, width: int) -> tuple[list[Op], str]:
    spec = ctx.spec
    name = f"{attn}.{spec.modules.o_proj}"
    op = linear(ctx, name, name, layer, x, width, spec.hidden_size, bias=spec.o_bias)
    ops.append(op)
    out = op.outputs[0].name
    if ctx.tp > 1:
        ar = all_reduce(ctx, f"{name}.all_reduce", name, layer, out, spec.hidden_size)
        ops.append(ar)
        out = ar.outputs[0].name
    return ops, out


def _build_mla(ctx: BuildContext, names: LayerNames, layer: int, x: str, *, sliding: bool, view: AttentionView,
               mla_form: MLAForm | None) -> tuple[list[Op], str]:
    """Multi-head latent attention (DeepSeek-V2/V3, arXiv 2405.04434 §2.1); see the module docstring."""
    spec = ctx.spec
    mla = spec.mla
    assert mla is not None
    form = mla_form or ("absorbed" if ctx.decode_only else "naive")
    mods = spec.modules
    attn = names.attn
    adt = ctx.act_dtype
    t = ctx.tokens
    hidden = spec.hidden_size
    h = ctx.heads
    nope, rope_d, vd, rank = mla.qk_nope_head_dim, mla.qk_rope_head_dim, mla.v_head_dim, mla.kv_lora_rank
    qk = nope + rope_d
    ops: list[Op] = []
    if mla.q_lora_rank is not None:
        qa = linear(ctx, f"{attn}.{mods.q_a_proj}", f"{attn}.{mods.q_a_proj}", layer, x, hidden, mla.q_lora_rank)
        qan = norm_op(ctx, f"{attn}.{mods.q_a_norm}", layer, qa.outputs[0].name, mla.q_lora_rank, kind="rmsnorm")
        qb = linear(ctx, f"{attn}.{mods.q_b_proj}", f"{attn}.{mods.q_b_proj}", layer, qan.outputs[0].name,
                    mla.q_lora_rank, h * qk)
        ops += (qa, qan, qb)
        q = qb.outputs[0]
    else:
        qname = f"{attn}.{mods.q_proj or 'q_proj'}"
        qp = linear(ctx, qname, qname, layer, x, hidden, h * qk)
        ops.append(qp)
        q = qp.outputs[0]
    kva = linear(ctx, f"{attn}.{mods.kv_a_proj}", f"{attn}.{mods.kv_a_proj}", layer, x, hidden, rank + rope_d)
    kvn = norm_op(ctx, f"{attn}.{mods.kv_a_norm}", layer, kva.outputs[0].name, rank, kind="rmsnorm")
    ops += (kva, kvn)
    # RoPE touches q_pe (every head) and the single shared k_pe.
    rope = _rope(ctx, attn, layer, q, act(kva.outputs[0].name, (t, rank + rope_d), adt), h, 1, rope_d, qk,
                 rank + rope_d)
    ops.append(rope)
    q_r, k_pe = rope.outputs
    kvw = _kv_write(ctx, attn, layer, (kvn.outputs[0], k_pe), rank + rope_d, f"kv_append_kv1_d{rank + rope_d}")
    ops.append(kvw)
    cache = kvw.outputs[0]
    window = spec.sliding_window if sliding else None
    kv_b = f"{attn}.{mods.kv_b_proj}"
    wdt = ctx.weight_dtype
    if form == "absorbed":
        # q_nope[T, h, nope] @ W_UK[h, nope, rank] -> q_latent[T, h, rank] (arXiv 2405.04434 §2.1.2).
        absorb_q = make_op(
            name=f"{kv_b}.absorb_q", kind="gemm", module=kv_b, layer=layer,
            inputs=(q_r, weight(f"{kv_b}.weight", (h * (nope + vd), rank), wdt)),
            outputs=(act(f"{kv_b}.absorb_q:out", (t, h * rank), adt),),
            flops=2 * t * h * nope * rank, weight_bytes=nbytes(h * nope * rank, wdt.bits),
            act_read_bytes=nbytes(t * h * nope, adt.bits), act_write_bytes=nbytes(t * h * rank, adt.bits),
            matrix_class=gemm_class(t), definition=f"gemm_n{rank}_k{nope}", gemm=GemmShape(t, rank, nope, h),
            attrs=(("absorbed", "W_UK"),),
        )
        ops.append(absorb_q)
        kind = "paged_decode" if ctx.decode_only else "paged_prefill_causal"
        shape = _CoreShape(heads=h, kv_heads=1, qk_dim=rank + rope_d, v_dim=rank, cache_values=rank + rope_d,
                           k_values=rank + rope_d, v_values=rank, layout="shared",
                           definition=f"mla_{kind}_h{h}_ckv{rank}_kpe{rope_d}")
        q_in = (absorb_q.outputs[0], act(q_r.name, (t, h * rope_d), adt))
        core, out = _attention_core(ctx, attn, layer, q_in, cache, (), shape, window, view)
        ops += core
        # o_latent[T, h, rank] @ W_UV[h, rank, v] -> [T, h*v] (arXiv 2405.04434 §2.1.2).
        absorb_o = make_op(
            name=f"{kv_b}.absorb_o", kind="gemm", module=kv_b, layer=layer,
            inputs=(act(out, (t, h * rank), adt), weight(f"{kv_b}.weight", (h * (nope + vd), rank), wdt)),
            outputs=(act(f"{kv_b}.absorb_o:out", (t, h * vd), adt),),
            flops=2 * t * h * rank * vd, weight_bytes=nbytes(h * rank * vd, wdt.bits),
            act_read_bytes=nbytes(t * h * rank, adt.bits), act_write_bytes=nbytes(t * h * vd, adt.bits),
            matrix_class=gemm_class(t), definition=f"gemm_n{vd}_k{rank}", gemm=GemmShape(t, vd, rank, h),
            attrs=(("absorbed", "W_UV"),),
        )
        ops.append(absorb_o)
        return _o_proj(ctx, ops, attn, layer, absorb_o.outputs[0].name, h * vd)
    # Naive: expand K_nope and V of every attended token from the cached latent.
    kv_tok = sum(g.count * kv_tokens_read(g.new, g.cached, window) for g in ctx.groups)
    n = h * (nope + vd)
    expand = make_op(
        name=kv_b, kind="gemm", module=kv_b, layer=layer,
        inputs=(cache, weight(f"{kv_b}.weight", (n, rank), wdt)),
        outputs=(act(f"{kv_b}:out", (kv_tok, n), adt),),
        flops=2 * kv_tok * n * rank, weight_bytes=nbytes(n * rank, wdt.bits),
        kv_read_bytes=nbytes(kv_tok * rank, ctx.kbits), act_write_bytes=nbytes(kv_tok * n, adt.bits),
        matrix_class=gemm_class(kv_tok), definition=f"gemm_n{n}_k{rank}", gemm=GemmShape(kv_tok, n, rank),
        attrs=(("rows", "every attended token (cached + new)"),),
    )
    ops.append(expand)
    shape = _CoreShape(heads=h, kv_heads=h, qk_dim=qk, v_dim=vd, cache_values=rope_d,
                       k_values=h * qk, v_values=h * vd, layout="k_only",
                       definition=f"mla_ragged_prefill_causal_h{h}_qk{qk}_vo{vd}")
    core, out = _attention_core(ctx, attn, layer, (q_r,), cache, expand.outputs, shape, window, view)
    ops += core
    return _o_proj(ctx, ops, attn, layer, out, h * vd)
