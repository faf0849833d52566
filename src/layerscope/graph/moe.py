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

from layerscope.graph._common import (
    INDEX_DTYPE,
    BuildContext,
    act,
    all_reduce,
    ceil_div,
    elementwise_add,
    gemm_class,
    linear,
    nbytes,
    weight,
)
from layerscope.graph.attention import SOFTMAX_FLOPS_PER_SCORE
from layerscope.graph.mlp import activation_flops, build_dense_mlp
from layerscope.graph.naming import LayerNames
from layerscope.graph.ops import GemmShape, Op

#: Compares per router logit for the top-k selection.
TOPK_SELECT_FLOPS = 1


def expected_experts_touched(tokens: int, top_k: int, num_experts: int) -> float:
    """Expected distinct experts that ``tokens`` tokens routed uniformly to ``top_k`` of ``num_experts`` hit."""
    # E·(1 - (1 - k/E)^T): occupancy expectation under uniform routing (module docstring).
    return num_experts * (1.0 - (1.0 - top_k / num_experts) ** tokens)


def build_moe(ctx: BuildContext, names: LayerNames, layer: int, x: str) -> tuple[list[Op], str]:
    """The MoE block of one layer reading ``x[T, hidden]``; returns its ops and output tensor."""
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
    ops: list[Op] = []
    router_name = f"{mlp}.{mods.router}"
    router = linear(ctx, router_name, router_name, layer, x, hidden, e, bias=moe.router_bias, kind="router",
                    weight_dtype=moe.router_weight_dtype)
    ops.append(router)
    topk_name = f"{mlp}.topk"
    # transformers 5 routes inside the router module (``Qwen3MoeTopKRouter``, ``MixtralTopKRouter``,
    # ``DeepseekV3TopkRouter``, gpt-oss, Llama 4: logits, softmax/sigmoid, top-k, renormalization in its
    # forward), so the top-k runs in the router's module range.
    topk = Op(
        name=topk_name, kind="topk", module=router_name, layer=layer, inputs=router.outputs,
        outputs=(act(f"{topk_name}:weights", (t, k), adt), act(f"{topk_name}:ids", (t, k), INDEX_DTYPE)),
        flops=(SOFTMAX_FLOPS_PER_SCORE + TOPK_SELECT_FLOPS) * t * e,
        act_read_bytes=nbytes(t * e, adt.bits), act_write_bytes=nbytes(t * k, adt.bits) + t * k * 4,
        matrix_class="Reduction", definition=f"topk_d{e}_k{k}",
    )
    ops.append(topk)
    width = ceil_div(moe.expert_intermediate_size, ctx.tp)
    pairs = t * k
    touched = expected_experts_touched(t, k, e)
    per_expert_w = 3 * hidden * width
    per_pair_flops = 2 * per_expert_w + (activation_flops(spec.activation) + 1) * width + 2 * hidden
    if moe.expert_bias:
        per_expert_w += 2 * width + hidden
        per_pair_flops += 2 * width + hidden
    touched_int = max(1, round(touched))
    experts_name = f"{mlp}.{mods.experts}"
    experts = Op(
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
