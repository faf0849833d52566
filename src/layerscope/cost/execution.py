"""Execution profiles: the kernels a software stack runs per graph op, and what they move.

A graph op is one operator (an RMSNorm, a RoPE); the kernels that run it depend on the software. A profile
(``HardwareSpec.execution.kernels``) maps each op to a row of a :class:`KernelPlan`: kernel launches (each
pays ``launch_overhead_s``, seconds), dimensionless multipliers on the op's activation and KV-cache bytes
(linear in the op's own bytes, so decode-step interpolation and sweeps stay exact), the bytes of each tensor
its kernels allocate, each kernel's share of its FLOPs and bytes when they run in sequence, and counts of
Python ``nn.Module`` calls and ``torch._grouped_mm`` expert groups (each paying seconds that
``layerscope calibrate`` measures).

``fused`` (every preset) runs each op as one kernel moving its compulsory bytes, launched back to back.
``hf-eager`` (what ``layerscope calibrate`` writes, as it measures PyTorch eager) runs Hugging Face
transformers' eager modules, one aten kernel per line of their ``forward`` (transformers 5.x,
``models/llama/modeling_llama.py`` and the families that copy it): one :class:`HfEagerKind` record of rules
per op kind, in :data:`HF_EAGER_KINDS`. ``serving-graph`` runs a CUDA-graph serving engine of the vLLM /
SGLang / TensorRT-LLM class: the residual add fused into the next RMSNorm, q/k/v and gate/up as one GEMM
each, the routed experts as vLLM's ``fused_moe`` kernels (:data:`SERVING_KINDS`), decode steps replayed as
a CUDA graph (each kernel paying ``execution.graph_node_s``), and a host cost per engine step
(:func:`engine_terms`, applied by ``cost.api``).

Each rule's derivation from the module code, with its sources and the measurements behind it:
``docs/execution-profiles.md``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from layerscope.errors import CostModelError
from layerscope.graph.ops import Op
from layerscope.registry import Registry
from layerscope.workload.steps import without_step

if TYPE_CHECKING:
    from layerscope.hardware.spec import ExecutionSpec, HardwareSpec


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
    graph_capture: np.ndarray | None = None
    """Per op: where a CUDA-graph engine runs its kernels (:data:`GRAPH_OUTSIDE`, :data:`GRAPH_FULL_ONLY`,
    :data:`GRAPH_ALWAYS`); None: the profile captures no graphs and every kernel pays the launch cost."""

    def take(self, index: np.ndarray) -> KernelPlan:
        """The plan of the ops at ``index`` (a sweep's merged groups), rows taken as they were planned among the
        whole pass's ops (``serving-graph``'s fusions read each op's neighbours)."""
        return KernelPlan(self.launches[index], self.act_factor[index], self.kv_factor[index],
                          self.out_share[index], self.gemv_rows[index], self.module_calls[index],
                          self.grouped_mm_groups[index], self.alloc_bytes[index],
                          None if self.split is None else self.split[index],
                          None if self.graph_capture is None else self.graph_capture[index])

    def key_rows(self) -> np.ndarray:
        """[ops, columns]: every fact of the plan per op (launches, byte factors, output share, GEMV rows, module
        calls, expert groups, allocations, kernels in sequence; graph capture, -1 without graphs): what sets each
        op's time beyond its work, for merging ops a sweep may time as one group."""
        n = len(self.launches)
        capture = np.full(n, -1.0) if self.graph_capture is None else self.graph_capture
        return np.concatenate([np.asarray(a, dtype=np.float64).reshape(n, -1) for a in
                               (self.launches, self.act_factor, self.kv_factor, capture, self.out_share,
                                self.gemv_rows, self.module_calls, self.grouped_mm_groups, self.alloc_bytes,
                                self.split) if a is not None], axis=1)

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


# ---------------------------------------------------------------------------------------------
# serving-graph: a CUDA-graph serving engine (docs/execution-profiles.md, "serving-graph")

#: Graph-capture levels of an op's kernels (``KernelPlan.graph_capture``): launched after the captured forward
#: (vLLM's ``compute_logits`` on the sampled rows and its sampler run outside the model's graph) ...
GRAPH_OUTSIDE = 0
#: ... captured in full graphs only (piecewise graphs split at the attention op, the KV-cache write inside it) ...
GRAPH_FULL_ONLY = 1
#: ... captured in full and piecewise graphs alike.
GRAPH_ALWAYS = 2

#: How a pass runs (:func:`graph_mode`): every kernel launched, piecewise graphs, or one full graph.
GRAPH_NONE, GRAPH_PIECEWISE, GRAPH_FULL = 0, 1, 2

#: Projections a serving engine merges into one GEMM with an earlier projection of the same module reading the
#: same activation: the absorbed one's name → the one it joins. vLLM's ``QKVParallelLinear`` (q, k, v) and
#: ``MergedColumnParallelLinear`` (gate, up; DeepSeek's ``fused_qkv_a_proj`` of q_a and kv_a), in
#: ``vllm/model_executor/models/llama.py`` and ``deepseek_v2.py``; SGLang and TensorRT-LLM load the same fused
#: weights (``qkv_proj``, ``gate_up_proj``).
MERGED_PROJECTIONS: dict[str, str] = {"k_proj": "q_proj", "v_proj": "q_proj", "up_proj": "gate_proj",
                                      "kv_a_proj_with_mqa": "q_a_proj"}

#: Kernels of vLLM's ``fused_experts`` (``vllm/model_executor/layers/fused_moe/fused_moe.py``):
#: ``moe_align_block_size``, the gate-up ``fused_moe_kernel``, the activation-and-mul, the down
#: ``fused_moe_kernel`` and ``moe_sum``.
FUSED_MOE_KERNELS = 5


def _activation_input(op: Op) -> str | None:
    return next((t.name for t in op.inputs if t.role == "activation"), None)


def _last_part(op: Op) -> str:
    return op.name.rsplit(".", 1)[-1]


def _own_output_share(op: Op) -> float:
    """The op's written activation bytes over its activation bytes read and written (1 without any)."""
    total = op.act_read_bytes + op.act_write_bytes
    return op.act_write_bytes / total if total else 1.0


def _add_fuses_into_norm(ops: Sequence[Op], i: int) -> bool:
    """Whether the residual add ``ops[i]`` runs inside the RMSNorm right after it, which reads its sum: vLLM's
    ``fused_add_rms_norm`` (``RMSNorm.forward(x, residual)``: adds in place, keeps the sum as the next residual,
    normalizes), called as ``input_layernorm(hidden_states, residual)`` by every decoder layer after the first,
    ``post_attention_layernorm(...)`` and the final ``norm(...)`` (``vllm/model_executor/models/llama.py``)."""
    if i + 1 >= len(ops) or not ops[i].outputs:
        return False
    norm = ops[i + 1]
    return (norm.kind == "norm" and norm.definition.startswith("rmsnorm") and bool(norm.inputs)
            and norm.inputs[0].name == ops[i].outputs[0].name)


def _serving_one_kernel(ops: Sequence[Op], i: int) -> PlanRow:
    return ONE_KERNEL


def _serving_residual_add(ops: Sequence[Op], i: int) -> PlanRow:
    """Fused into the next RMSNorm: no kernel of its own; its bytes (both addends read, the sum written as the
    next residual) are the fused kernel's."""
    return (0.0, 1.0, 1.0) if _add_fuses_into_norm(ops, i) else ONE_KERNEL


def _serving_norm(ops: Sequence[Op], i: int) -> PlanRow:
    """After a fused residual add: the one kernel of the pair, which never re-reads the sum from memory (only its
    output write stays)."""
    if i > 0 and ops[i - 1].kind == "residual_add" and _add_fuses_into_norm(ops, i - 1):
        return 1.0, _own_output_share(ops[i]), 1.0
    return ONE_KERNEL


def _serving_gemm(ops: Sequence[Op], i: int) -> PlanRow:
    """A projection merged into an earlier one (:data:`MERGED_PROJECTIONS`): no kernel of its own, and its input
    is read once, by the merged GEMM (only its output write stays); its weights and FLOPs are unchanged."""
    op = ops[i]
    joins = MERGED_PROJECTIONS.get(_last_part(op))
    x = _activation_input(op)
    if joins is None or x is None:
        return ONE_KERNEL
    for j in range(i - 1, -1, -1):
        prev = ops[j]
        if prev.module.rsplit(".", 1)[0] != op.module.rsplit(".", 1)[0]:
            break  # left the parent module (self_attn, mlp)
        if prev.kind == "gemm" and _last_part(prev) == joins and _activation_input(prev) == x:
            return 0.0, _own_output_share(op), 1.0
    return ONE_KERNEL


def _serving_moe(ops: Sequence[Op], i: int) -> PlanRow:
    return float(FUSED_MOE_KERNELS), 1.0, 1.0


def _always(op: Op) -> int:
    return GRAPH_ALWAYS


def _full_only(op: Op) -> int:
    return GRAPH_FULL_ONLY


def _outside(op: Op) -> int:
    return GRAPH_OUTSIDE


def _gemm_capture(op: Op) -> int:
    """lm_head on the sampled rows runs after the captured forward (vLLM's ``compute_logits``)."""
    return GRAPH_OUTSIDE if op.attr("logits") is not None else GRAPH_ALWAYS


@dataclass(frozen=True)
class ServingKind:
    """The ``serving-graph`` rules of one op kind; the defaults: one kernel, captured in every graph."""

    plan: Callable[[Sequence[Op], int], PlanRow] = _serving_one_kernel
    """The op's :class:`KernelPlan` row from its place among the pass's ops (fusions read the neighbours)."""
    capture: Callable[[Op], int] = _always
    """Which graphs hold its kernels (:data:`GRAPH_OUTSIDE`, :data:`GRAPH_FULL_ONLY`, :data:`GRAPH_ALWAYS`)."""


#: ``serving-graph`` rules by op kind, one record for every kind of :data:`~layerscope.graph.ops.OP_KINDS`
#: (their sources: docs/execution-profiles.md, "serving-graph"). RoPE is vLLM's and SGLang's one in-place
#: ``rotary_embedding`` kernel on q and k, the KV-cache write ``reshape_and_cache_flash``, the activation
#: ``silu_and_mul``: one kernel each, as in ``fused``.
SERVING_KINDS: Registry[ServingKind] = Registry("op kind", CostModelError, {
    "embedding": ServingKind(),
    "norm": ServingKind(plan=_serving_norm),
    "gemm": ServingKind(plan=_serving_gemm, capture=_gemm_capture),
    "rope": ServingKind(),
    "kv_write": ServingKind(capture=_full_only),
    "kv_read": ServingKind(capture=_full_only),
    "attention": ServingKind(capture=_full_only),
    "qk_matmul": ServingKind(capture=_full_only),
    "softmax_max": ServingKind(capture=_full_only),
    "softmax_exp": ServingKind(capture=_full_only),
    "softmax_norm": ServingKind(capture=_full_only),
    "pv_matmul": ServingKind(capture=_full_only),
    "residual_add": ServingKind(plan=_serving_residual_add),
    "activation": ServingKind(),
    "router": ServingKind(),
    "topk": ServingKind(),  # vLLM's fused_topk: one topk_softmax kernel
    "moe_experts": ServingKind(plan=_serving_moe),
    "sampling": ServingKind(capture=_outside),
    "communication": ServingKind(),  # vLLM's custom all-reduce is captured with the graph
})


def _serving_graph(ops: Sequence[Op]) -> KernelPlan:
    n = len(ops)
    ruled = [SERVING_KINDS.lookup(op.kind) for op in ops]
    rows = np.array([r.plan(ops, i) for i, r in enumerate(ruled)], dtype=np.float64).reshape(n, 3)
    return KernelPlan(launches=rows[:, 0].copy(), act_factor=rows[:, 1].copy(), kv_factor=rows[:, 2].copy(),
                      out_share=output_share(ops), gemv_rows=np.zeros(n), module_calls=np.zeros(n),
                      grouped_mm_groups=np.zeros(n), alloc_bytes=alloc_table([output_allocs(op) for op in ops]),
                      graph_capture=np.fromiter((r.capture(op) for r, op in zip(ruled, ops, strict=True)),
                                                dtype=np.int8, count=n))


def pass_shape(ops: Sequence[Op]) -> tuple[int, bool] | None:
    """(tokens, pure decode) of the pass whose ops these are, from the first op with sequence groups (an
    attention op's ``groups``: (count, new tokens, cached) per group); None when no op carries them."""
    for op in ops:
        groups = op.attr("groups")
        if isinstance(groups, tuple) and groups:
            tokens = sum(int(g[0]) * int(g[1]) for g in groups)
            return tokens, all(int(g[1]) == 1 for g in groups)
    return None


def graph_mode(ops: Sequence[Op], terms: EngineTerms) -> int:
    """How an engine with ``terms`` runs the pass of ``ops``: :data:`GRAPH_FULL` for a pure decode pass of at most
    ``graph_max_tokens`` tokens, :data:`GRAPH_PIECEWISE` for any other pass that small when the engine captures
    piecewise graphs, else :data:`GRAPH_NONE` (also when the ops do not say what pass they are)."""
    shape = pass_shape(ops)
    if shape is None or terms.graph_max_tokens <= 0 or shape[0] > terms.graph_max_tokens:
        return GRAPH_NONE
    if shape[1]:
        return GRAPH_FULL
    return GRAPH_PIECEWISE if terms.piecewise_graphs else GRAPH_NONE


def captured_kernels(graph_capture: np.ndarray, mode: int) -> np.ndarray:
    """Per op: whether its kernels replay inside the pass's graph (``mode``, :func:`graph_mode`)."""
    least = {GRAPH_FULL: GRAPH_FULL_ONLY, GRAPH_PIECEWISE: GRAPH_ALWAYS}.get(mode)
    if least is None:
        return np.zeros(len(graph_capture), dtype=bool)
    return np.asarray(graph_capture) >= least


class EngineTerms(NamedTuple):
    """An execution profile's engine-level terms, each in the unit its name says (``ExecutionSpec`` fields of
    the same names override them); the figures and their sources: docs/execution-profiles.md."""

    graph_node_s: float = 0.0
    graph_max_tokens: int = 0
    piecewise_graphs: bool = False
    step_overhead_s: float = 0.0
    step_overhead_per_request_s: float = 0.0
    overlap_host: bool = False
    request_overhead_s: float = 0.0


#: No engine around the forward: kernels launched back to back, nothing per step or per request.
NO_ENGINE = EngineTerms()

#: Per-kernel time inside a CUDA graph: 1000 ``torch.add`` of 1024 fp32 captured in one graph and replayed,
#: 0.94 µs a kernel (bench/gpu/h200-2026-11-26/kernels-cuda-graph.json, record kind ``graph_node``; H200,
#: torch 2.11.0+cu130; eager dispatch of the same add: 5.7 µs, record ``eager_dispatch``).
H200_GRAPH_NODE_S = 9.405440092086792e-07
#: Host time per running request per step of vLLM V1's scheduler: ``Scheduler.update_from_output()`` on a
#: decode-only batch, 0.287 ms at 256 requests and 0.142 ms at 128 (gpu-kernels.md OX-04):
#: (0.287 - 0.142) ms / 128 requests.
VLLM_V1_UPDATE_PER_REQUEST_S = (0.287e-3 - 0.142e-3) / 128

#: The ``serving-graph`` engine's terms (docs/execution-profiles.md, "serving-graph"): the graph node cost above;
#: vLLM's largest default capture size, 512 tokens (``max_cudagraph_capture_size``, vllm/config/compilation.py);
#: piecewise graphs for prefill and mixed passes that small (vLLM V1's ``FULL_AND_PIECEWISE``, docs.vllm.ai
#: design/cuda_graphs); no fixed host time per step that the GPU waits for (an assumption: no published row
#: measures it under overlap scheduling; OX-02's ~4 ms is vLLM 0.5's synchronous loop); OX-04's time per running
#: request; host work overlapped with the previous step's forward (TensorRT-LLM's overlap scheduler, on by
#: default; SGLang's overlap scheduler; vLLM's ``--async-scheduling``); nothing modelled beyond the prefill step
#: in time to first token (an assumption: tokenization, queueing, the API server and detokenization left out).
SERVING_GRAPH_TERMS = EngineTerms(graph_node_s=H200_GRAPH_NODE_S, graph_max_tokens=512, piecewise_graphs=True,
                                  step_overhead_s=0.0, step_overhead_per_request_s=VLLM_V1_UPDATE_PER_REQUEST_S,
                                  overlap_host=True, request_overhead_s=0.0)


@dataclass(frozen=True)
class ExecutionProfile:
    """One registered execution profile: its kernel plan, and the engine around the forward."""

    plan: Callable[[Sequence[Op]], KernelPlan]
    engine: EngineTerms = NO_ENGINE


#: Execution profiles by name (``HardwareSpec.execution.kernels``).
EXECUTION_PROFILES: Registry[ExecutionProfile] = Registry("execution profile", CostModelError, {
    "fused": ExecutionProfile(_fused),
    "hf-eager": ExecutionProfile(_hf_eager),
    "serving-graph": ExecutionProfile(_serving_graph, SERVING_GRAPH_TERMS),
})


def kernel_plan(name: str, ops: Sequence[Op]) -> KernelPlan:
    """The plan of profile ``name`` for ``ops``; an unknown name lists the known ones."""
    return EXECUTION_PROFILES.lookup(name).plan(ops)


def engine_terms(execution: ExecutionSpec) -> EngineTerms:
    """The engine terms of ``execution``: its profile's (:data:`EXECUTION_PROFILES`), each field the spec sets
    (not None) taking the spec's value."""
    base = EXECUTION_PROFILES.lookup(execution.kernels).engine
    return base._replace(**{name: value for name in EngineTerms._fields
                            if (value := getattr(execution, name, None)) is not None})


def host_step_s(terms: EngineTerms, sequences: float | np.ndarray) -> float | np.ndarray:
    """Host time of one engine step over ``sequences`` running requests: ``step_overhead_s +
    step_overhead_per_request_s · sequences``."""
    return terms.step_overhead_s + terms.step_overhead_per_request_s * sequences


def step_time_s(forward_s: float | np.ndarray, host_s: float | np.ndarray, terms: EngineTerms, *,
                first: bool) -> float | np.ndarray:
    """Wall time of an engine step whose forward takes ``forward_s`` and whose host work takes ``host_s``: their
    sum, or, when the engine overlaps host work with the previous forward (``overlap_host``) and the step is not
    a request's first, the larger of the two."""
    if terms.overlap_host and not first:
        return np.maximum(forward_s, host_s)
    return forward_s + host_s


def with_profile(hw: HardwareSpec, name: str) -> HardwareSpec:
    """``hw`` running execution profile ``name`` (an unknown name raises the registry's error, listing the
    known ones); the other execution fields are kept, so a profile's own defaults fill what the spec leaves
    unset (:func:`engine_terms`)."""
    EXECUTION_PROFILES.lookup(name)
    if hw.execution.kernels == name:
        return hw
    execution = hw.execution.model_copy(update={"kernels": name,
                                                "source": f"{name} profile chosen for this run (--execution)"})
    return hw.model_copy(update={"execution": execution})
