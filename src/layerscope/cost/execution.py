"""Execution profiles: the kernels a software stack runs per graph op, and what they move.

A graph op is one operator (an RMSNorm, a RoPE); the kernels that run it depend on the software. A profile
(``HardwareSpec.execution.kernels``) maps each op to a row of a :class:`KernelPlan`: kernel launches (each
pays ``launch_overhead_s``, seconds), dimensionless multipliers on the op's activation and KV-cache bytes
(linear in the op's own bytes, so decode-step interpolation and sweeps stay exact), the bytes of each tensor
its kernels allocate, each kernel's share of its FLOPs and bytes when they run in sequence, and counts of
Python ``nn.Module`` calls and ``torch._grouped_mm`` expert groups (each paying seconds that
``layerscope calibrate`` measures).

``fused`` (every preset; serving engines) runs each op as one kernel moving its compulsory bytes.
``hf-eager`` (what ``layerscope calibrate`` writes, as it measures PyTorch eager) runs Hugging Face
transformers' eager modules, one aten kernel per line of their ``forward`` (transformers 5.x,
``models/llama/modeling_llama.py`` and the families that copy it): one :class:`HfEagerKind` record of rules
per op kind, in :data:`HF_EAGER_KINDS`.

Each rule's derivation from the module code, with its sources and the measurements behind it:
``docs/execution-profiles.md``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from layerscope.errors import CostModelError
from layerscope.graph.ops import Op
from layerscope.registry import Registry
from layerscope.workload.steps import without_step


@dataclass(frozen=True)
class KernelPlan:
    """Per op: kernel launches, multipliers on activation and KV-cache bytes, and the output share.

    ``out_share`` is the fraction of the op's own (fused) activation bytes that is its output,
    the tensor its last kernel writes and the next op reads; it does not depend on the profile.
    """

    launches: np.ndarray
    act_factor: np.ndarray
    kv_factor: np.ndarray
    out_share: np.ndarray
    gemv_rows: np.ndarray
    """Rows run as separate GEMVs over one shared weight (``bmm`` with a broadcast weight); 0: not so."""
    module_calls: np.ndarray
    """Python ``nn.Module`` calls the op's time includes (each pays ``execution.module_call_s``); 0 when
    the op is not run through modules (every fused profile)."""
    grouped_mm_groups: np.ndarray
    """Expert groups the op's ``torch._grouped_mm`` calls loop over (each pays
    ``execution.grouped_mm_group_s``); 0 for every other op and every fused profile."""
    alloc_bytes: np.ndarray
    """[ops, slots]: the bytes of each tensor the op's kernels allocate, zero-padded
    (docs/execution-profiles.md, "Allocations"); those of at least ``execution.fresh_pages.min_bytes`` fault
    their pages in."""
    split: np.ndarray | None = None
    """[ops, kernels, 2]: the share of the op's FLOPs and of its bytes that each of its kernels runs one after
    the other, zero-padded (docs/execution-profiles.md, "Kernels in sequence"); None: every op one roofline."""

    @classmethod
    def identity(cls, ops: Sequence[Op]) -> KernelPlan:
        n = len(ops)
        return cls(np.ones(n), np.ones(n), np.ones(n), output_share(ops), np.zeros(n), np.zeros(n), np.zeros(n),
                   alloc_table([output_allocs(op) for op in ops]))


def output_allocs(op: Op) -> list[float]:
    """The op's outputs, each allocated once (one kernel, or a fused one)."""
    return [float(t.nbytes) for t in op.outputs]


def padded_table(rows: Sequence[Sequence[Any]], tail: tuple[int, ...] = ()) -> np.ndarray:
    """Per-op lists (of numbers, or of ``tail``-shaped entries) as one zero-padded [ops, longest, *tail] array."""
    width = max((len(r) for r in rows), default=0)
    table = np.zeros((len(rows), width, *tail))
    for i, r in enumerate(rows):
        if len(r):
            table[i, :len(r)] = r
    return table


def alloc_table(rows: Sequence[Sequence[float]]) -> np.ndarray:
    """Per-op allocation lists as a zero-padded [ops, slots] array."""
    return padded_table(rows)


def output_share(ops: Sequence[Op]) -> np.ndarray:
    """Per op: written activation bytes / activation bytes read and written (0 for ops without any)."""
    written = np.fromiter((op.act_write_bytes for op in ops), dtype=np.float64, count=len(ops))
    total = written + np.fromiter((op.act_read_bytes for op in ops), dtype=np.float64, count=len(ops))
    return np.divide(written, total, out=np.zeros_like(total), where=total > 0)


#: Kernels of Hugging Face's RMSNorm in fp32 (the casts are no-ops): pow, mean, add, rsqrt, mul, mul.
RMSNORM_EAGER_FP32_KERNELS = 6

#: One row of a plan: (launches, activation-byte factor, KV-byte factor).
PlanRow = tuple[float, float, float]
ONE_KERNEL: PlanRow = (1.0, 1.0, 1.0)


def _one_kernel(op: Op) -> PlanRow:
    return ONE_KERNEL


def _act_bytes_per_element(op: Op) -> float:
    t = op.inputs[0] if op.inputs else op.outputs[0]
    return t.dtype.bits / 8


def _eager_norm(op: Op) -> PlanRow:
    """``LlamaRMSNorm``: (20 + 2a)N bytes in 6 kernels in fp32, (28 + 4a)N in 8 otherwise (a: bytes per
    activation element), against the fused kernel's 2aN; a LayerNorm is one native ``layer_norm`` kernel."""
    if not op.definition.startswith("rmsnorm"):
        return ONE_KERNEL  # nn.LayerNorm -> one native layer_norm kernel
    a = _act_bytes_per_element(op)
    n = op.outputs[0].numel
    fused = op.act_read_bytes + op.act_write_bytes
    if a == 4:
        eager, launches = (20 + 2 * a) * n, float(RMSNORM_EAGER_FP32_KERNELS)
    else:
        eager, launches = (28 + 4 * a) * n, 8.0
    return launches, eager / fused if fused else 1.0, 1.0


def _eager_rope(op: Op) -> PlanRow:
    """``apply_rotary_pos_emb``: 5 kernels and 10N elements moved per tensor (q and k), against 2N fused."""
    a = _act_bytes_per_element(op)
    qk = sum(t.numel for t in op.outputs)
    fused = op.act_read_bytes + op.act_write_bytes
    return 5.0 * len(op.outputs), (10 * qk * a) / fused if fused else 1.0, 1.0


def _eager_attention(op: Op) -> PlanRow:
    """SDPA and the ``contiguous()`` copy of its output; ``DynamicCache``'s ``torch.cat`` reads and writes the
    whole cache again (3x the KV bytes)."""
    out = op.outputs[0].nbytes
    fused = op.act_read_bytes + op.act_write_bytes
    return 2.0, (fused + 2 * out) / fused if fused else 1.0, 3.0


def _eager_kv_write(op: Op) -> PlanRow:
    """The two ``torch.cat`` launches; their bytes are booked on the attention op."""
    return 2.0, 0.0, 0.0


def _eager_activation(op: Op) -> PlanRow:
    """``act_fn(gate) * up``: 2 kernels and 5N against 3N fused; ``gelu_new`` written out: 8 kernels, 18N vs 2N."""
    gated = len(op.inputs) == 2
    if str(op.attr("activation", "")).lower() in ("gelu_new", "gelu_fast"):
        base_launches, base_factor = 8.0, 9.0
    else:
        base_launches, base_factor = 1.0, 1.0
    if not gated:
        return base_launches, base_factor, 1.0
    # act(gate): base_factor x 2N; the multiply by up: 3N; fused gated kernel: 3N.
    return base_launches + 1.0, (2 * base_factor + 3) / 3, 1.0


#: One op's kernels in sequence: (share of the op's FLOPs, share of its bytes) per kernel.
KernelSplit = list[tuple[float, float]]
ONE_ROOFLINE: KernelSplit = [(1.0, 1.0)]


def _one_roofline(op: Op) -> KernelSplit:
    return ONE_ROOFLINE


def _activation_split(op: Op) -> KernelSplit:
    """The gated activation's two kernels: ``act(gate)`` (the activation's FLOPs; reads the gate, writes its
    result) and the product with ``up`` (one FLOP and 3 tensors per element); an ungated one is one kernel
    (``gelu_new``'s eight elementwise kernels are alike enough to stay one roofline)."""
    if len(op.inputs) != 2:
        return ONE_ROOFLINE
    _, act_factor, _ = _eager_activation(op)
    per_element = 3.0 * act_factor  # eager bytes over the 3N of the fused gated kernel; the product's are 3N
    flop_share = op.outputs[0].numel / op.flops if op.flops else 0.0
    return [(1.0 - flop_share, 1.0 - 3.0 / per_element), (flop_share, 3.0 / per_element)]


def split_table(rows: Sequence[KernelSplit]) -> np.ndarray | None:
    """Per-op kernel splits as a zero-padded [ops, kernels, 2] array; None when every op is one roofline."""
    table = padded_table(rows, (2,))
    return table if table.shape[1] > 1 else None


def _eager_topk(op: Op) -> PlanRow:
    """The router's softmax, topk, sum, div and cast."""
    return 5.0, 1.0, 1.0


#: Kernels of transformers 5's ``grouped_mm_experts_forward`` (docs/execution-profiles.md, "MoE").
GROUPED_MM_EXPERTS_KERNELS = 17


def _eager_moe(op: Op) -> PlanRow:
    return float(GROUPED_MM_EXPERTS_KERNELS), 1.0, 1.0


def _no_groups(op: Op) -> float:
    return 0.0


def _experts_grouped_mm_groups(op: Op) -> float:
    """The routed experts' gate-up and down ``torch._grouped_mm`` calls, each looping over every expert."""
    return 2.0 * float(op.attr("num_experts", 0) or 0)  # type: ignore[arg-type]


def _norm_allocs(op: Op) -> list[float]:
    if not op.definition.startswith("rmsnorm"):
        return output_allocs(op)
    a = _act_bytes_per_element(op)
    n = op.outputs[0].numel
    rows = 4.0 * n / max(1, op.outputs[0].shape[-1])  # mean, + eps, rsqrt: one fp32 value per row
    full = [4.0 * n, 4.0 * n, a * n]  # pow, mul by rsqrt, weight mul
    casts = [] if a == 4 else [4.0 * n, a * n]  # to(fp32) of the input, to(dtype) before the weight mul
    return [*full, *casts, rows, rows, rows]


def _rope_allocs(op: Op) -> list[float]:
    out: list[float] = []
    for t in op.outputs:  # x*cos, -x2 (half), cat, rotate_half(x)*sin, add
        s = float(t.nbytes)
        out += [s, s / 2, s, s, s]
    return out


def _attention_allocs(op: Op) -> list[float]:
    return [float(op.outputs[0].nbytes)] * 2  # SDPA's output, transpose(1, 2).contiguous()


def _activation_allocs(op: Op) -> list[float]:
    launches = _eager_activation(op)[0]
    return [float(op.outputs[0].nbytes)] * int(launches)


def _moe_allocs(op: Op) -> list[float]:
    tokens, hidden = op.inputs[0].shape[0], op.inputs[0].shape[-1]
    a = _act_bytes_per_element(op)
    rows = tokens * int(op.attr("top_k", 1) or 1)  # type: ignore[call-overload]
    width = float(op.attr("expert_intermediate", 0) or 0)  # type: ignore[arg-type]
    index = [8.0 * rows] * 5  # sort's values and permutation, perm // k, the inverse permutation, arange
    # gathered tokens, gate-up GEMM, act(gate), * up, down GEMM, * routing weights, re-ordered, top-k sum
    big = [a * rows * hidden, a * rows * 2 * width, a * rows * width, a * rows * width, a * rows * hidden,
           a * rows * hidden, a * rows * hidden, a * tokens * hidden]
    return [*big, *index, a * rows]  # and the gathered routing weights


def _no_allocs(op: Op) -> list[float]:
    return []


@dataclass(frozen=True)
class HfEagerKind:
    """The ``hf-eager`` rules of one op kind (their derivation: docs/execution-profiles.md).

    The defaults are how a kind with no rule of its own runs: one kernel moving the op's own bytes, one
    roofline, its outputs allocated, no ``nn.Module`` call, no grouped GEMM.
    """

    plan: Callable[[Op], PlanRow] = _one_kernel
    """The op's :class:`KernelPlan` row: (launches, activation-byte factor, KV-byte factor)."""
    split: Callable[[Op], KernelSplit] = _one_roofline
    """Its kernels in sequence: (share of the op's FLOPs, share of its bytes) per kernel ("Kernels in sequence")."""
    allocs: Callable[[Op], list[float]] = output_allocs
    """The bytes of each tensor its kernels allocate ("Allocations")."""
    module_calls: float = 0.0
    """``nn.Module`` calls its time includes, each paying ``execution.module_call_s`` ("Module calls")."""
    grouped_mm_groups: Callable[[Op], float] = _no_groups
    """Expert groups its ``torch._grouped_mm`` calls loop over, each paying ``execution.grouped_mm_group_s``."""


#: ``hf-eager`` rules by op kind, one record for every kind of :data:`~layerscope.graph.ops.OP_KINDS`.
#: Module calls (transformers 5.x Llama/Qwen3/Mixtral): projections, the router and the embedding are
#: ``nn.Linear``/``nn.Embedding``; the gated activation carries the MLP module's call and its ``act_fn``'s; the
#: experts the sparse-MoE block's and the experts module's; each residual add half the decoder layer's call.
HF_EAGER_KINDS: Registry[HfEagerKind] = Registry("op kind", CostModelError, {
    "embedding": HfEagerKind(module_calls=1.0),
    "norm": HfEagerKind(plan=_eager_norm, allocs=_norm_allocs, module_calls=1.0),
    "gemm": HfEagerKind(module_calls=1.0),
    "rope": HfEagerKind(plan=_eager_rope, allocs=_rope_allocs),
    "kv_write": HfEagerKind(plan=_eager_kv_write, allocs=_no_allocs),  # its bytes grow with the context
    "kv_read": HfEagerKind(),
    "attention": HfEagerKind(plan=_eager_attention, allocs=_attention_allocs, module_calls=1.0),
    "qk_matmul": HfEagerKind(),
    "softmax_max": HfEagerKind(),
    "softmax_exp": HfEagerKind(),
    "softmax_norm": HfEagerKind(),
    "pv_matmul": HfEagerKind(),
    "residual_add": HfEagerKind(module_calls=0.5),
    "activation": HfEagerKind(plan=_eager_activation, split=_activation_split, allocs=_activation_allocs,
                              module_calls=2.0),
    "router": HfEagerKind(module_calls=1.0),
    "topk": HfEagerKind(plan=_eager_topk),  # inside the router module
    "moe_experts": HfEagerKind(plan=_eager_moe, allocs=_moe_allocs, module_calls=2.0,
                               grouped_mm_groups=_experts_grouped_mm_groups),
    "sampling": HfEagerKind(),
    "communication": HfEagerKind(),
})

#: ``nn.Module`` calls per op kind (the kinds with any), derived from :data:`HF_EAGER_KINDS`; kept under its
#: former name because the docstrings of ``capture.unprofiled``, ``hardware.spec`` and ``analysis.validate``
#: and bench/ACCURACY.md cite it.
HF_EAGER_MODULE_CALLS: dict[str, float] = {kind: r.module_calls for kind, r in HF_EAGER_KINDS.items()
                                           if r.module_calls}


def hf_eager_grouped_mm_groups(op: Op) -> float:
    """Expert groups an HF-eager op's ``torch._grouped_mm`` calls loop over: the routed experts' gate-up
    and down projections, each over every expert (docs/execution-profiles.md, "MoE"); 0 for other ops."""
    return HF_EAGER_KINDS.lookup(op.kind).grouped_mm_groups(op)


def _eager_gemv_rows(op: Op) -> float:
    """Sequences whose last position lm_head reads out of a longer ``[B, S, H]`` input: HF's
    ``hidden_states[:, -1:, :]`` is then a strided view and ``matmul`` runs B GEMVs (``bmm``)."""
    if op.gemm is None or op.attr("logits") != "last" or not op.inputs:
        return 0.0
    in_rows = op.inputs[0].shape[0]
    return float(op.gemm.m) if 1 < op.gemm.m < in_rows else 0.0


def _fused(ops: Sequence[Op]) -> KernelPlan:
    return KernelPlan.identity(ops)


def _hf_eager(ops: Sequence[Op]) -> KernelPlan:
    n = len(ops)
    ruled = [(HF_EAGER_KINDS.lookup(op.kind), op) for op in ops]
    rows = np.array([r.plan(op) for r, op in ruled], dtype=np.float64).reshape(n, 3)
    return KernelPlan(launches=rows[:, 0].copy(), act_factor=rows[:, 1].copy(), kv_factor=rows[:, 2].copy(),
                      out_share=output_share(ops),
                      gemv_rows=np.fromiter((_eager_gemv_rows(op) for op in ops), dtype=np.float64, count=n),
                      module_calls=np.fromiter((r.module_calls for r, _ in ruled), dtype=np.float64, count=n),
                      grouped_mm_groups=np.fromiter((r.grouped_mm_groups(op) for r, op in ruled),
                                                    dtype=np.float64, count=n),
                      alloc_bytes=alloc_table([r.allocs(op) for r, op in ruled]),
                      split=split_table([r.split(op) for r, op in ruled]))


def code_role(op: Op) -> str:
    """The op's place in the model with its decode step and every numeric path part (layer, expert)
    removed: ops of one role run the same Python and the same kernels (``layers.#.input_layernorm``)."""
    name = without_step(op.name)
    return ".".join("#" if part.isdigit() else part for part in name.split("."))


def previous_same_role(ops: Sequence[Op]) -> np.ndarray:
    """Per op: the index of the op of the same :func:`code_role` that ran before it, cyclically, since a
    model runs its forward again and again (the last layer's for layer 0; the op itself, one forward
    earlier, for an op the forward runs once)."""
    roles = [code_role(op) for op in ops]
    last = {role: i for i, role in enumerate(roles)}
    previous = np.empty(len(roles), dtype=np.int64)
    for i, role in enumerate(roles):
        previous[i] = last[role]
        last[role] = i
    return previous


def reuse_bytes(previous: np.ndarray, bytes_: np.ndarray) -> np.ndarray:
    """Per op ``i``: the bytes the ops from ``previous[i]`` (included) to ``i`` (excluded) move, cyclically;
    the whole forward's bytes when ``previous[i] == i``: the traffic between two runs of the op's code."""
    moved = np.asarray(bytes_, dtype=np.float64)  # (ops,) or (points, ops), as a sweep's features
    start = np.concatenate((np.zeros((*moved.shape[:-1], 1)), np.cumsum(moved, axis=-1)), axis=-1)
    i = np.arange(len(previous))
    return start[..., i] - start[..., previous] + np.where(previous >= i, start[..., -1:], 0.0)


#: Execution profiles by name (``HardwareSpec.execution.kernels``).
EXECUTION_PROFILES: Registry[Callable[[Sequence[Op]], KernelPlan]] = Registry(
    "execution profile", CostModelError, {"fused": _fused, "hf-eager": _hf_eager})


def kernel_plan(name: str, ops: Sequence[Op]) -> KernelPlan:
    """The plan of profile ``name`` for ``ops``; an unknown name lists the known ones."""
    return EXECUTION_PROFILES.lookup(name)(ops)
