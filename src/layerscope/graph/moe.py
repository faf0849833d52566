"""Mixture-of-experts ops: router, top-k, routed experts as one op, shared experts.

* **Expected experts touched.** With ``T`` tokens each sent to ``k`` of ``E`` experts uniformly
  at random, an expert is missed by one token with probability ``1 - k/E`` and by all of them
  with ``(1 - k/E)^T``, so ``E·(1 - (1 - k/E)^T)`` distinct experts are expected to run (the
  occupancy expectation, Feller, "An Introduction to Probability Theory", vol. 1, §II.11). Only
  their weights are read: batch-1 decode reads ``k`` experts, a large prefill reads all ``E``.
* **FLOPs** use the expected tokens per expert ``T·k/E`` over all ``E`` experts, i.e. ``T·k``
  token-expert pairs, each a gated MLP of width ``I``: 2·3·H·I for the three projections,
  ``(act + 1)·I`` for the activation and gate multiply, 2·H to scale by the routing weight and
  accumulate (+ 2·I + H bias adds with expert biases, gpt-oss).
* **Top-k** counts a softmax over the ``E`` router logits (5 FLOPs per logit, see
  :mod:`layerscope.graph.attention`) plus one compare per logit for the selection.
* Bytes of the fused expert op: every chosen (token, expert) pair gathers its token
  (``T·k·H`` reads), the combined output is written once (``T·H``); the kernel's intermediate
  buffers are not counted.
"""

from __future__ import annotations

import math
from dataclasses import replace

from layerscope.graph._common import (
    INDEX_DTYPE,
    BuildContext,
    act,
    all_reduce,
    ceil_div,
    collective_op,
    elementwise_add,
    gemm_class,
    linear,
    nbytes,
    weight,
)
from layerscope.graph.attention import SOFTMAX_FLOPS_PER_SCORE
from layerscope.graph.mlp import activation_flops, build_dense_mlp
from layerscope.graph.naming import LayerNames
from layerscope.graph.ops import GemmShape, Op, make_op
from layerscope.model.spec import ModelSpec

#: Compares per router logit for the top-k selection.
TOPK_SELECT_FLOPS = 1


def expected_experts_touched(tokens: int, top_k: int, num_experts: int) -> float:
    """Expected distinct experts that ``tokens`` tokens routed uniformly to ``top_k`` of ``num_experts`` hit."""
    # E·(1 - (1 - k/E)^T): occupancy expectation under uniform routing (module docstring).
    return num_experts * (1.0 - (1.0 - top_k / num_experts) ** tokens)


def busiest_rank_assignments(tokens_per_rank: int, top_k: int, ranks: int, experts_per_rank: int) -> float:
    """Expected (token, expert) assignments reaching the busiest of ``ranks`` expert-parallel devices, each
    device dispatching ``tokens_per_rank`` tokens to ``top_k`` experts chosen uniformly at random.

    The ``m = ranks · tokens_per_rank · top_k`` assignments fall on the devices like balls into ``n = ranks`` bins;
    for ``m ≥ n ln n`` the fullest bin holds ``m/n + sqrt(2 (m/n) ln n)`` (Raab & Steger, "Balls into Bins — A
    Simple and Tight Analysis", RANDOM 1998, Theorem 1, to first order). Capped by what one device can receive:
    every token's assignments to its ``experts_per_rank`` experts, at most ``min(top_k, experts_per_rank)``
    each. Uniform routing is the assumption (a trained router with a load-balancing loss is near it; a skewed one
    is busier)."""
    mean = float(tokens_per_rank * top_k)
    if ranks <= 1 or mean <= 0:
        return mean
    busiest = mean + math.sqrt(2.0 * mean * math.log(ranks))
    return min(busiest, float(tokens_per_rank * ranks * min(top_k, experts_per_rank)))


def _expert_costs(spec: ModelSpec, width: int, *, combine: bool) -> tuple[int, int]:
    """(weights of one routed expert, FLOPs of one (token, expert) pair): a gated MLP of width ``width``, 3·H·I
    weights and 2·3·H·I FLOPs for its projections, ``(act + 1)·I`` for the activation and gate multiply (+ 2·I + H
    bias adds with expert biases, gpt-oss), and with ``combine`` 2·H to scale by the routing weight and accumulate
    (module docstring)."""
    moe = spec.moe
    assert moe is not None
    hidden = spec.hidden_size
    per_expert_w = 3 * hidden * width
    per_pair_flops = 2 * per_expert_w + (activation_flops(spec.activation) + 1) * width + (2 * hidden if combine else 0)
    if moe.expert_bias:
        per_expert_w += 2 * width + hidden
        per_pair_flops += 2 * width + hidden
    return per_expert_w, per_pair_flops


def _route(ctx: BuildContext, mlp: str, layer: int, x: str, *, in_rows: int | None = None) -> tuple[Op, Op]:
    """The router's linear and its top-k over ``ctx.tokens`` tokens of ``x`` (``in_rows``: the rows ``x`` has when
    the device routes only a slice of them)."""
    spec = ctx.spec
    moe = spec.moe
    assert moe is not None
    t, e, k, adt = ctx.tokens, moe.num_experts, moe.num_experts_per_tok, ctx.act_dtype
    router_name = f"{mlp}.{spec.modules.router}"
    router = linear(ctx, router_name, router_name, layer, x, spec.hidden_size, e, bias=moe.router_bias,
                    kind="router", weight_dtype=moe.router_weight_dtype, in_rows=in_rows)
    topk_name = f"{mlp}.topk"
    # transformers 5 routes inside the router module (``Qwen3MoeTopKRouter``, ``MixtralTopKRouter``,
    # ``DeepseekV3TopkRouter``, gpt-oss, Llama 4: logits, softmax/sigmoid, top-k, renormalization in its
    # forward), so the top-k runs in the router's module range.
    topk = make_op(
        name=topk_name, kind="topk", module=router_name, layer=layer, inputs=router.outputs,
        outputs=(act(f"{topk_name}:weights", (t, k), adt), act(f"{topk_name}:ids", (t, k), INDEX_DTYPE)),
        flops=(SOFTMAX_FLOPS_PER_SCORE + TOPK_SELECT_FLOPS) * t * e,
        act_read_bytes=nbytes(t * e, adt.bits), act_write_bytes=nbytes(t * k, adt.bits) + t * k * 4,
        matrix_class="Reduction", definition=f"topk_d{e}_k{k}",
    )
    return router, topk


def build_moe(ctx: BuildContext, names: LayerNames, layer: int, x: str) -> tuple[list[Op], str]:
    """The MoE block of one layer reading ``x[T, hidden]``; returns its ops and output tensor."""
    if ctx.ep > 1:
        return _build_moe_ep(ctx, names, layer, x)
    spec = ctx.spec
    moe = spec.moe
    assert moe is not None
    mods = spec.modules
    mlp = names.mlp
    t = ctx.tokens
    hidden = spec.hidden_size
    adt = ctx.act_dtype
    wdt = ctx.weight_dtype
    e = moe.num_experts
    k = moe.num_experts_per_tok
    router, topk = _route(ctx, mlp, layer, x)
    ops: list[Op] = [router, topk]
    width = ceil_div(moe.expert_intermediate_size, ctx.tp)
    pairs = t * k
    touched = expected_experts_touched(t, k, e)
    per_expert_w, per_pair_flops = _expert_costs(spec, width, combine=True)
    touched_int = max(1, round(touched))
    experts_name = f"{mlp}.{mods.experts}"
    experts = make_op(
        name=experts_name, kind="moe_experts", module=experts_name, layer=layer,
        # The ids (int32) are read too (act bytes) but not listed: an fp32-sized index tensor among
        # the inputs would read as fp32 arithmetic to cost models that take the widest input dtype.
        inputs=(act(x, (t, hidden), adt), topk.outputs[0], weight(f"{experts_name}.weight", (e, per_expert_w), wdt)),
        outputs=(act(f"{experts_name}:out", (t, hidden), adt),),
        flops=pairs * per_pair_flops,
        weight_bytes=round(touched * nbytes(per_expert_w, wdt.bits)),
        act_read_bytes=nbytes(pairs * hidden, adt.bits) + nbytes(pairs, adt.bits) + pairs * 4,
        act_write_bytes=nbytes(t * hidden, adt.bits),
        matrix_class=gemm_class(ceil_div(pairs, touched_int)),
        definition=f"moe_{moe.impl}_e{e}_h{hidden}_i{width}_topk{k}",
        gemm=GemmShape(ceil_div(pairs, touched_int), 2 * width, hidden, touched_int),
        attrs=(("num_experts", e), ("top_k", k), ("tokens_per_expert", pairs / e),
               ("experts_touched", touched), ("expert_intermediate", width)),
    )
    ops.append(experts)
    out = experts.outputs[0].name
    if moe.num_shared_experts and moe.shared_intermediate_size:
        shared_ops, shared_out = build_dense_mlp(
            ctx, f"{mlp}.{mods.shared_experts}", layer, x,
            intermediate=ceil_div(moe.shared_intermediate_size, ctx.tp), gated=True, bias=False, reduce=False)
        ops += shared_ops
        add = elementwise_add(ctx, f"{mlp}.shared_add", mlp, layer, (out, shared_out), hidden)
        ops.append(add)
        out = add.outputs[0].name
    if ctx.tp > 1:
        ar = all_reduce(ctx, f"{mlp}.all_reduce", mlp, layer, out, hidden)
        ops.append(ar)
        out = ar.outputs[0].name
    return ops, out


def _build_moe_ep(ctx: BuildContext, names: LayerNames, layer: int, x: str) -> tuple[list[Op], str]:
    """The MoE block under expert parallelism (DeepSeek-V3's serving layout; DeepEP's dispatch and combine;
    Megatron-Core's EP with sequence-split tokens).

    Each of the ``tp`` devices holding a replica of ``x[T, hidden]`` routes its own ``T/tp`` slice (router and
    top-k on those tokens), sends each (token, expert) pair to the device holding the expert (an all-to-all
    over the ``ep`` devices: the issue's ``tokens × top-k × hidden × bytes × (ep−1)/ep`` on the wire), runs
    its ``E/ep`` whole experts over what it receives — the busiest device's load,
    :func:`busiest_rank_assignments`, sets the time — and returns the outputs by a second all-to-all (the
    combine, then the weighted sum of each token's ``k`` outputs). Shared experts run on the device's own
    tokens with whole (replicated) weights. With ``tp > 1`` an all-gather over the ``tp`` devices restores
    the replicated hidden states."""
    spec = ctx.spec
    moe = spec.moe
    assert moe is not None
    mods = spec.modules
    mlp = names.mlp
    hidden = spec.hidden_size
    adt = ctx.act_dtype
    wdt = ctx.weight_dtype
    e, k, ep = moe.num_experts, moe.num_experts_per_tok, ctx.ep
    local = e // ep
    own = ceil_div(ctx.tokens, ctx.tp)
    sub = replace(ctx, tokens=own)
    router, topk = _route(sub, mlp, layer, x, in_rows=own if ctx.sp else ctx.tokens)
    ops: list[Op] = [router, topk]
    sent = nbytes(own * k * hidden, adt.bits)
    pairs = busiest_rank_assignments(own, k, ep, local)
    pairs_int = max(1, round(pairs))
    dispatch_name = f"{mlp}.dispatch"
    dispatch = collective_op(
        dispatch_name, mlp, layer, act(x, (own, hidden), adt), act(f"{dispatch_name}:out", (pairs_int, hidden), adt),
        collective="all_to_all", gpus=ep, message_bytes=sent, comm_bytes=sent * (ep - 1) // ep,
        definition=f"moe_dispatch_h{hidden}_k{k}_ep{ep}",
        attrs=(("tokens", own), ("top_k", k), ("busiest_rank_pairs", pairs)))
    ops.append(dispatch)
    width = moe.expert_intermediate_size
    touched = expected_experts_touched(pairs_int, 1, local)
    per_expert_w, per_pair_flops = _expert_costs(spec, width, combine=False)  # the combine op weighs and sums
    touched_int = max(1, round(touched))
    experts_name = f"{mlp}.{mods.experts}"
    experts = make_op(
        name=experts_name, kind="moe_experts", module=experts_name, layer=layer,
        inputs=(dispatch.outputs[0], weight(f"{experts_name}.weight", (local, per_expert_w), wdt)),
        outputs=(act(f"{experts_name}:out", (pairs_int, hidden), adt),),
        flops=round(pairs * per_pair_flops),
        weight_bytes=round(touched * nbytes(per_expert_w, wdt.bits)),
        act_read_bytes=nbytes(pairs_int * hidden, adt.bits), act_write_bytes=nbytes(pairs_int * hidden, adt.bits),
        matrix_class=gemm_class(ceil_div(pairs_int, touched_int)),
        definition=f"moe_{moe.impl}_e{local}_h{hidden}_i{width}_ep{ep}",
        gemm=GemmShape(ceil_div(pairs_int, touched_int), 2 * width, hidden, touched_int),
        attrs=(("num_experts", local), ("top_k", k), ("tokens_per_expert", pairs / local),
               ("experts_touched", touched), ("expert_intermediate", width), ("expert_parallel", ep)),
    )
    ops.append(experts)
    combine_name = f"{mlp}.combine"
    combine = collective_op(
        combine_name, mlp, layer, experts.outputs[0], act(f"{combine_name}:out", (own, hidden), adt),
        collective="all_to_all", gpus=ep, message_bytes=sent, comm_bytes=sent * (ep - 1) // ep,
        flops=2 * own * k * hidden,  # each token's k outputs scaled by their routing weights and summed
        definition=f"moe_combine_h{hidden}_k{k}_ep{ep}", attrs=(("tokens", own), ("top_k", k)))
    ops.append(combine)
    out = combine.outputs[0].name
    if moe.num_shared_experts and moe.shared_intermediate_size:
        shared_ops, shared_out = build_dense_mlp(
            sub, f"{mlp}.{mods.shared_experts}", layer, x,
            intermediate=moe.shared_intermediate_size, gated=True, bias=False, reduce=False)
        ops += shared_ops
        add = elementwise_add(sub, f"{mlp}.shared_add", mlp, layer, (out, shared_out), hidden)
        ops.append(add)
        out = add.outputs[0].name
    if ctx.tp > 1 and not ctx.sp:  # sequence parallelism keeps the slice for its residual add
        gather_name = f"{mlp}.all_gather"
        full = act(f"{gather_name}:out", (ctx.tokens, hidden), adt)
        gather = collective_op(
            gather_name, mlp, layer, act(out, (own, hidden), adt), full, collective="all_gather", gpus=ctx.tp,
            message_bytes=full.nbytes, comm_bytes=full.nbytes * (ctx.tp - 1) // ctx.tp,
            definition=f"all_gather_h{hidden}")
        ops.append(gather)
        out = gather.outputs[0].name
    return ops, out
