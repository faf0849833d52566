"""Ops outside the decoder layers: token/position embedding, final norm, lm_head, sampling.

* The embedding is a gather: it reads ``T·hidden`` rows of the table, not the whole table.
* ``lm_head`` computes logits for the last token of each sequence by default (``logits="last"``,
  what serving engines do in prefill: only that token is sampled); ``logits="all"`` is the HF
  ``forward`` default (``logits_to_keep=0``), one row per token. With tied embeddings lm_head reads
  the embedding table (``attrs`` say so).
* Under tensor parallelism the embedding is replicated and lm_head is vocab-parallel
  (Megatron-LM, arXiv 1909.08053 §3: each device holds ``vocab/tp`` rows); the logits' gather is
  not modelled.
* Sampling is greedy top-k selection over the vocabulary: 1 compare per logit (k = 1, argmax).
"""

from __future__ import annotations

from typing import Literal

from layerscope.graph._common import INDEX_DTYPE, BuildContext, act, ceil_div, elementwise_add, linear, nbytes, weight
from layerscope.graph.naming import INPUT_IDS, POSITION_IDS
from layerscope.graph.norms import norm_op
from layerscope.graph.ops import Op

LogitsMode = Literal["last", "all"]

#: Compares per logit of the sampling op.
SAMPLING_FLOPS_PER_LOGIT = 1


def _lookup(ctx: BuildContext, name: str, ids: str, rows: int, dim: int) -> Op:
    t = ctx.tokens
    wdt = ctx.weight_dtype
    return Op(
        name=name, kind="embedding", module=name, layer=None,
        inputs=(act(ids, (t,), INDEX_DTYPE), weight(f"{name}.weight", (rows, dim), wdt)),
        outputs=(act(f"{name}:out", (t, dim), ctx.act_dtype),),
        flops=0, weight_bytes=nbytes(t * dim, wdt.bits), act_read_bytes=t * 4,
        act_write_bytes=nbytes(t * dim, ctx.abits), matrix_class="Lookup", definition=f"embedding_v{rows}_d{dim}",
    )


def build_embedding(ctx: BuildContext, ids: str = INPUT_IDS) -> tuple[list[Op], str]:
    """Token embedding (+ learned position embedding and their add, gpt2/opt); returns ops and output."""
    spec = ctx.spec
    mods = spec.modules
    ops = [_lookup(ctx, mods.embed, ids, spec.vocab_size, spec.hidden_size)]
    out = ops[0].outputs[0].name
    if spec.position == "learned" and mods.pos_embed:
        pos = _lookup(ctx, mods.pos_embed, POSITION_IDS, spec.max_position_embeddings, spec.hidden_size)
        add = elementwise_add(ctx, f"{mods.pos_embed}.add", mods.pos_embed, None, (out, pos.outputs[0].name),
                              spec.hidden_size)
        ops += (pos, add)
        out = add.outputs[0].name
    return ops, out


def build_head(ctx: BuildContext, x: str, logits: LogitsMode = "last") -> tuple[list[Op], str]:
    """Final norm, lm_head and sampling after the last layer's output ``x``; returns ops and token ids."""
    spec = ctx.spec
    mods = spec.modules
    hidden = spec.hidden_size
    norm = norm_op(ctx, mods.final_norm, None, x, hidden)
    rows = ctx.num_sequences if logits == "last" else ctx.tokens
    vocab = ceil_div(spec.vocab_size, ctx.tp)
    tied = spec.tie_word_embeddings
    attrs: tuple[tuple[str, object], ...] = (("logits", logits), ("rows", rows))
    if tied:
        attrs += (("tied_to", mods.embed),)
    head = linear(ctx, mods.lm_head, mods.lm_head, None, norm.outputs[0].name, hidden, vocab, m=rows,
                  in_rows=ctx.tokens, weight_name=f"{mods.embed}.weight" if tied else None, attrs=attrs)
    sample = Op(
        name="sampling", kind="sampling", module="sampling", layer=None, inputs=head.outputs,
        outputs=(act("sampling:out", (rows,), INDEX_DTYPE),),
        flops=SAMPLING_FLOPS_PER_LOGIT * rows * vocab, act_read_bytes=nbytes(rows * vocab, ctx.abits),
        act_write_bytes=rows * 4, matrix_class="Reduction", definition=f"topk_d{vocab}_k1",
        attrs=(("method", "greedy top-k (k=1)"),),
    )
    return [norm, head, sample], sample.outputs[0].name
