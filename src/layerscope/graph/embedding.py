"""Ops outside the decoder layers: token/position embedding, final norm, lm_head, sampling.

* The embedding is a gather: it reads ``T·hidden`` rows of the table, not the whole table.
* ``lm_head`` computes logits for the last token of each sequence by default (``logits="last"``,
  what serving engines do in prefill: only that token is sampled); ``logits="all"`` is the HF
  ``forward`` default (``logits_to_keep=0``), one row per token. With tied embeddings lm_head reads
  the embedding table (``attrs`` say so).
* Under tensor parallelism the embedding and lm_head are vocab-parallel (Megatron-LM, arXiv 1909.08053 §3:
  each device holds ``vocab/tp`` rows). A device looks up the tokens of its own rows (``T/tp`` of them, on
  average) and zeros the rest, and an all-reduce over the ``tp`` devices sums the partial embeddings
  (``VocabParallelEmbedding``; a reduce-scatter under sequence parallelism); lm_head's logits are gathered
  (an all-gather of ``rows × vocab/tp`` per device, vLLM's ``LogitsProcessor._gather_logits``) before sampling
  over the whole vocabulary.
* Sampling is greedy top-k selection over the vocabulary: 1 compare per logit (k = 1, argmax).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Literal

from layerscope.graph._common import (
    INDEX_DTYPE,
    BuildContext,
    act,
    all_reduce,
    ceil_div,
    collective_op,
    elementwise_add,
    linear,
    nbytes,
    weight,
)
from layerscope.graph.naming import INPUT_IDS, POSITION_IDS
from layerscope.graph.norms import norm_op
from layerscope.graph.ops import Op, make_op

LogitsMode = Literal["last", "all"]

#: Compares per logit of the sampling op.
SAMPLING_FLOPS_PER_LOGIT = 1


def _lookup(ctx: BuildContext, name: str, ids: str, rows: int, dim: int, *, shards: int = 1) -> Op:
    """A table lookup of ``T`` ids; with ``shards`` > 1 the device holds ``rows/shards`` of the table and reads
    the rows of the ids that fall in it (``T/shards`` on average)."""
    t = ctx.tokens
    wdt = ctx.weight_dtype
    return make_op(
        name=name, kind="embedding", module=name, layer=None,
        inputs=(act(ids, (t,), INDEX_DTYPE), weight(f"{name}.weight", (ceil_div(rows, shards), dim), wdt)),
        outputs=(act(f"{name}:out", (t, dim), ctx.act_dtype),),
        flops=0, weight_bytes=nbytes(t * dim, wdt.bits) // shards, act_read_bytes=t * 4,
        act_write_bytes=nbytes(t * dim, ctx.abits), matrix_class="Lookup",
        definition=f"embedding_v{ceil_div(rows, shards)}_d{dim}",
    )


def build_embedding(ctx: BuildContext, ids: str = INPUT_IDS) -> tuple[list[Op], str]:
    """Token embedding (+ learned position embedding and their add, gpt2/opt); returns ops and output."""
    spec = ctx.spec
    mods = spec.modules
    ops = [_lookup(ctx, mods.embed, ids, spec.vocab_size, spec.hidden_size, shards=ctx.tp)]
    out = ops[0].outputs[0].name
    if ctx.tp > 1:  # the partial embeddings summed (a reduce-scatter under sequence parallelism)
        reduce = all_reduce(ctx, f"{mods.embed}.all_reduce", mods.embed, None, out, spec.hidden_size)
        ops.append(reduce)
        out = reduce.outputs[0].name
    if spec.position == "learned" and mods.pos_embed:
        pos = _lookup(ctx, mods.pos_embed, POSITION_IDS, spec.max_position_embeddings, spec.hidden_size)
        sctx = replace(ctx, tokens=ctx.sp_tokens) if ctx.sp else ctx
        add = elementwise_add(sctx, f"{mods.pos_embed}.add", mods.pos_embed, None, (out, pos.outputs[0].name),
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
    ops = [norm, head]
    scores = head.outputs[0]
    if ctx.tp > 1:  # vocab-parallel logits gathered before sampling
        full = act("lm_head.all_gather:out", (rows, spec.vocab_size), ctx.act_dtype)
        gather = collective_op("lm_head.all_gather", mods.lm_head, None, scores, full, collective="all_gather",
                               gpus=ctx.tp, message_bytes=full.nbytes,
                               comm_bytes=(ctx.tp - 1) * full.nbytes // ctx.tp,
                               definition=f"all_gather_h{spec.vocab_size}", attrs=(("tp", ctx.tp),))
        ops.append(gather)
        scores = full
    width = scores.shape[-1]
    sample = make_op(
        name="sampling", kind="sampling", module="sampling", layer=None, inputs=(scores,),
        outputs=(act("sampling:out", (rows,), INDEX_DTYPE),),
        flops=SAMPLING_FLOPS_PER_LOGIT * rows * width, act_read_bytes=nbytes(rows * width, ctx.abits),
        act_write_bytes=rows * 4, matrix_class="Reduction", definition=f"topk_d{width}_k1",
        attrs=(("method", "greedy top-k (k=1)"),),
    )
    ops.append(sample)
    return ops, sample.outputs[0].name
