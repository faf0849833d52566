"""Records derived from the analytical graph alone: every op of each forward pass becomes an
:class:`~layerscope.records.schema.OpCall` of its op type (no torch needed).

Each op kind has an extractor (:data:`EXTRACTORS`) that reads the op's axes from the op and its
pass's build context; the record's name comes from the op type's template and must equal the
``definition`` the graph gave the op (a mismatch is a :class:`GraphError`: the two namings drifted).
Kinds no module runs on its own (residual adds, KV-cache writes, the unfused view's matmuls,
all-reduces) are not operators a run can be traced for and are left out (:data:`SKIPPED_KINDS`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Literal

from layerscope.errors import GraphError
from layerscope.graph import build_model_graph, pass_context
from layerscope.graph._common import BuildContext
from layerscope.graph.attention import MLAForm, kv_tokens_read
from layerscope.graph.embedding import LogitsMode
from layerscope.graph.mlp import activation_family
from layerscope.graph.ops import Op, OpGraph
from layerscope.model.spec import ModelSpec
from layerscope.records.optypes import REGISTRY
from layerscope.records.schema import OpCall, RecordSet, dtype_name
from layerscope.units import DType, parse_dtype
from layerscope.workload.workload import ForwardPass, make_workload

#: Graph op kinds that are not recorded, with the reason.
SKIPPED_KINDS: dict[str, str] = {
    "residual_add": "inline tensor add in the decoder layer, no module",
    "kv_write": "part of the attention module's cache update",
    "kv_read": "unfused attention view only",
    "qk_matmul": "unfused attention view only (recorded as the attention op)",
    "pv_matmul": "unfused attention view only (recorded as the attention op)",
    "communication": "tensor-parallel collectives are not operator kernels of one device",
}


def _prefix(template: str) -> str:
    return template.split("{", 1)[0]


# Longest template prefix first, so ``mla_paged_prefill_causal_`` wins over ``mla_paged_``.
_BY_PREFIX = sorted(((_prefix(op.template), op.op_type) for op in REGISTRY.values()), key=lambda p: -len(p[0]))


def op_type_of_definition(definition: str) -> str | None:
    """The op type whose names start like ``definition`` (``rmsnorm_h64`` -> ``rmsnorm``)."""
    for prefix, name in _BY_PREFIX:
        if prefix and definition.startswith(prefix):
            return name
    return None


def _by_role(ctx: BuildContext) -> dict[str, str]:
    return {"act": dtype_name(ctx.act_dtype), "weight": dtype_name(ctx.weight_dtype)}


def _call(ctx: BuildContext, op_type: str, category: str, params: dict[str, int | str],
          var: dict[str, int]) -> OpCall:
    return OpCall(op_type=op_type, category=category, params=params, var=var, dtypes_by_role=_by_role(ctx))


def _gemm(op: Op, ctx: BuildContext) -> OpCall:
    assert op.gemm is not None
    g = op.gemm
    category = "moe_router" if op.kind == "router" else "gemm"
    call = _call(ctx, "gemm", category, {"N": g.n, "K": g.k}, {"M": g.m * g.batch})
    # A weight kept in its own dtype (DeepSeek's float32 router) is the op's weight tensor's dtype.
    wdt = op.inputs[1].dtype
    return call if wdt == ctx.weight_dtype else replace(
        call, dtypes_by_role={**call.dtypes_by_role, "weight": dtype_name(wdt)})


def _norm(op: Op, ctx: BuildContext) -> OpCall:
    width = op.inputs[1].shape[0]
    kind = op_type_of_definition(op.definition) or ctx.spec.norm_kind
    return _call(ctx, kind, "norm", {"hidden_size": width}, {"batch_size": op.inputs[0].numel // width})


def _embedding(op: Op, ctx: BuildContext) -> OpCall:
    rows, dim = op.inputs[1].shape
    return _call(ctx, "embedding", "embedding", {"vocab_size": rows, "hidden_size": dim},
                 {"num_tokens": op.inputs[0].shape[0]})


def _rope(op: Op, ctx: BuildContext) -> OpCall:
    spec = ctx.spec
    if spec.mla is not None:
        rotary, kv_heads = spec.mla.qk_rope_head_dim, 1
    else:
        rotary, kv_heads = spec.rotary_dim or spec.head_dim, ctx.kv_heads
    return _call(ctx, "rope", "rope", {"num_qo_heads": ctx.heads, "rotary_dim": rotary},
                 {"num_tokens": ctx.tokens, "num_kv_heads": kv_heads})


def _attention(op: Op, ctx: BuildContext) -> OpCall:
    spec = ctx.spec
    op_type = op_type_of_definition(op.definition)
    params: dict[str, int | str]
    if op_type in ("gqa_ragged", "gqa_paged"):
        params = {"num_qo_heads": ctx.heads, "num_kv_heads": ctx.kv_heads, "head_dim": spec.head_dim}
    elif op_type == "mla_ragged" and spec.mla is not None:
        params = {"num_qo_heads": ctx.heads, "qk_head_dim": spec.mla.qk_head_dim, "v_head_dim": spec.mla.v_head_dim}
    elif op_type in ("mla_paged", "mla_paged_prefill") and spec.mla is not None:
        params = {"num_qo_heads": ctx.heads, "ckv_dim": spec.mla.kv_lora_rank, "kpe_dim": spec.mla.qk_rope_head_dim}
    else:
        raise GraphError(f"{op.name}: attention definition {op.definition!r} has no op type")
    kv_tokens = op.attr("kv_tokens")
    assert isinstance(kv_tokens, int)
    return _call(ctx, op_type, "attention", params,
                 {"batch_size": ctx.num_sequences, "num_qo_tokens": ctx.tokens, "num_kv_tokens": kv_tokens})


def _softmax(op: Op, ctx: BuildContext) -> OpCall:
    window = op.attr("window")
    groups = op.attr("groups")
    assert isinstance(groups, tuple)
    longest = max(kv_tokens_read(new, cached, window if isinstance(window, int) else None)
                  for _count, new, cached in groups)
    return _call(ctx, "softmax", "softmax", {"dim": longest}, {"batch_size": ctx.heads * ctx.tokens})


def _activation(op: Op, ctx: BuildContext) -> OpCall:
    rows, width = op.outputs[0].shape
    return _call(ctx, activation_family(ctx.spec.activation), "activation", {"hidden_size": width},
                 {"num_tokens": rows})


def _topk(op: Op, ctx: BuildContext) -> OpCall:
    rows, dim = op.inputs[0].shape
    k = op.outputs[0].shape[1] if op.kind == "topk" else 1
    return _call(ctx, "topk", "moe_topk" if op.kind == "topk" else "sampling", {"dim": dim, "k": k},
                 {"batch_size": rows})


def _experts(op: Op, ctx: BuildContext) -> OpCall:
    moe = ctx.spec.moe
    assert moe is not None
    width = op.attr("expert_intermediate")
    assert isinstance(width, int)
    return _call(ctx, "moe", "moe_experts",
                 {"impl": moe.impl, "num_experts": moe.num_experts, "hidden_size": ctx.spec.hidden_size,
                  "intermediate_size": width, "top_k": moe.num_experts_per_tok},
                 {"num_tokens": ctx.tokens})


#: Graph op kind -> the extractor of its record.
EXTRACTORS: dict[str, Callable[[Op, BuildContext], OpCall]] = {
    "embedding": _embedding,
    "norm": _norm,
    "gemm": _gemm,
    "router": _gemm,
    "rope": _rope,
    "attention": _attention,
    "softmax_max": _softmax,
    "softmax_exp": _softmax,
    "softmax_norm": _softmax,
    "activation": _activation,
    "topk": _topk,
    "sampling": _topk,
    "moe_experts": _experts,
}


def phase_of(fwd: ForwardPass) -> str:
    """``decode`` when every sequence brings one new token (as the graph names decode attention), else ``prefill``."""
    return "decode" if all(g.new_tokens == 1 for g in fwd.groups) else "prefill"


def add_graph(records: RecordSet, graph: OpGraph, ctx: BuildContext, phase: str) -> None:
    """Add the ops of ``graph`` (one forward pass, built with ``ctx``) to ``records`` as one pass of ``phase``."""
    records.add_pass(phase)
    for op in graph.ops:
        extract = EXTRACTORS.get(op.kind)
        if extract is None:
            if op.kind in SKIPPED_KINDS:
                continue
            raise GraphError(f"{op.name}: op kind {op.kind!r} has no record extractor")
        name = records.add(extract(op, ctx), op.layer, phase, n=op.multiplicity)
        if name != op.definition:
            raise GraphError(f"{op.name}: the graph names its definition {op.definition!r} but its op type "
                             f"names it {name!r}")


def records_from_spec(
    spec: ModelSpec,
    *,
    batch: int = 1,
    prompt_len: int = 128,
    decode_steps: int = 0,
    dtype: str | DType = "bf16",
    tp: int = 1,
    layers: Sequence[int] | None = None,
    logits: LogitsMode = "last",
    mla_form: MLAForm | None = None,
    attention: Literal["fused", "unfused"] = "fused",
) -> RecordSet:
    """Records of a prefill of ``prompt_len`` tokens and ``decode_steps`` greedy decode steps of ``spec``.

    The passes are those ``layerscope workloads`` runs (and ``capture``): one prefill, then decode
    steps over a cache of ``prompt_len``, ``prompt_len + 1`` … tokens. ``logits="last"`` computes
    lm_head for the last token of each sequence, as the HF models run by ``capture`` do;
    ``mla_form`` picks DeepSeek's attention form (``None``: the graph's default, absorbed for
    decode; HF runs ``"naive"``).
    """
    dt = parse_dtype(dtype)
    workload = make_workload(phase="generate" if decode_steps else "prefill", batch=batch, prompt_len=prompt_len,
                             decode_steps=decode_steps, weight_dtype=dt, act_dtype=dt, kv_dtype=dt,
                             tensor_parallel=tp)
    chosen = tuple(range(spec.num_layers)) if layers is None else tuple(layers)
    records = RecordSet({
        "model": spec.name, "model_type": spec.model_type, "source": "graph", "dtype": dt.value,
        "layers": len(chosen),
        "batch": batch, "prompt_len": prompt_len, "decode_steps": decode_steps, "tp": tp, "logits": logits,
        "mla_form": mla_form or "auto", "attention": attention,
    })
    passes = [workload.prefill_pass()] + [workload.decode_pass(prompt_len + s) for s in range(decode_steps)]
    for fwd in passes:
        graph = build_model_graph(spec, fwd, workload, attention, chosen, logits=logits, mla_form=mla_form)
        add_graph(records, graph, pass_context(spec, fwd, workload), phase_of(fwd))
    return records
