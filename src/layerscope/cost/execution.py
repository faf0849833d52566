"""Execution profiles: how many kernels the software stack runs per graph op, and what they move.

A graph op is one operator (an RMSNorm, a RoPE); the kernels that run it depend on the software.
A serving engine runs each as one fused kernel (profile ``fused``: one launch, the op's compulsory
bytes). Hugging Face transformers' eager PyTorch modules run each line of their ``forward`` as
its own aten kernel, every one reading and writing the whole tensor (profile ``hf-eager``). The
profile is chosen by ``HardwareSpec.execution.kernels``; ``layerscope calibrate`` writes
``hf-eager`` because it measures PyTorch eager on the device, and every preset is ``fused``.

A profile maps each op to a :class:`KernelPlan` row: kernel launches (each pays
``launch_overhead_s``) and multipliers on the op's activation and KV-cache bytes. Multipliers keep
the work linear in the op's own bytes, so decode-step interpolation and sweeps stay exact.

``hf-eager`` rules, from the transformers 5.x module code (``modeling_llama.py`` and the families
that copy it), per op of N elements of ``a`` bytes (the activation type):

* **RMSNorm** (``LlamaRMSNorm``): ``to(fp32)``, ``pow``, ``mean``, ``add eps``, ``rsqrt``, ``mul``,
  ``to(dtype)``, ``weight *``. The casts are no-ops in fp32. Bytes: pow 8N, mean 4N, mul 8N,
  weight-mul 2aN, plus (a+4)N per cast when ``a`` is not 4: (20 + 2a)N in fp32 (6 kernels),
  (28 + 4a)N otherwise (8 kernels), against the fused kernel's 2aN. LayerNorm is one native
  ``layer_norm`` kernel.
* **RoPE** (``apply_rotary_pos_emb`` on q and k): per tensor ``x*cos`` (2N), ``neg`` of one half
  (N), ``cat`` (2N), ``rotate_half(x)*sin`` (2N), ``add`` (3N): 5 kernels and 10N per tensor,
  against 2N fused.
* **Attention** (``sdpa_attention_forward`` with a ``DynamicCache``): one SDPA kernel plus the
  ``transpose(1, 2).contiguous()`` copy of its output (2 x output bytes). ``DynamicCache.update``
  appends with ``torch.cat`` for K and V, reading and writing the whole cache every step: 2x the
  cache bytes the attention reads, booked on the attention op (it scales with the cache, as the
  attention's own bytes do), so its KV bytes are multiplied by 3. The ``kv_write`` op keeps its
  two launches (the two cats) and no bytes of its own.
* **Gated activation** (``act_fn(gate) * up``): 2 kernels, 5N against 3N fused. ``gelu_new``
  (GPT-2's tanh formula written out in Python): 8 kernels, 18N against 2N.
* **MoE** (``Qwen3MoeExperts``/``MixtralExperts`` under transformers 5's default experts implementation,
  ``grouped_mm`` in ``integrations/moe.py``, whenever ``torch._grouped_mm`` exists): sort the
  (token, expert) pairs, gather tokens and weights, histogram and cumsum the offsets, two grouped GEMMs,
  act and mul, the routing-weight multiply, the inverse permutation (empty, arange, index_put, index)
  and the sum over top-k: 17 kernels whatever the experts hit. On the CPU each of the two ``_grouped_mm``
  calls loops over all E experts (an ``mm`` and its views per group, empty ones too: 0.7 µs a group hot
  on the reference CPU, whatever the weights' shape: 0.18 ms per decode step at E = 128);
  ``grouped_mm_groups`` counts them (2E per op) and each pays ``execution.grouped_mm_group_s``, which
  ``layerscope calibrate`` measures.
  Routing top-k is softmax, topk, sum, div and a cast (5 kernels), inside the router module.

* **lm_head on the last position of several sequences** (prefill, batch > 1): ``hidden_states[:, -1:, :]``
  of a ``[B, S, H]`` tensor is not contiguous, so ``torch.matmul`` cannot fold it into one GEMM and
  runs ``bmm`` over a broadcast weight: B GEMVs of the whole weight, the threads taking sequences
  side by side and sharing each pass over it. Measured on the reference CPU (2 threads, Llama 3's
  128256 x 2048 fp32 lm_head): 1.06, 1.97, 2.34, 3.36 and 4.02 times a GEMV at B = 2, 3, 4, 6, 8
  (1 thread: 1.8, 2.8, 3.9, 5.8, 7.3), where one contiguous [B, H] GEMM takes 2.5-3.5 GEMVs at every
  B from 2 to 8. ``gemv_rows`` marks them: the cost models read the weight ceil(B / engines) times
  and time them as GEMVs (no GEMM efficiency table). Decode's ``[B, 1, H]`` is contiguous: one GEMM.
  (The passes are not linear in B: ``cost.sweep`` times such prefills point by point through ``estimate``.)

Everything else (GEMMs, embeddings, residual adds, sampling) is one kernel in both profiles.

**Allocations** (``KernelPlan.alloc_bytes``): every eager kernel writes a tensor it allocates, freed when the
Python reference drops. Small ones come back hot from the heap; the CPU allocator gives large ones new pages
each time (glibc ``mmap``/``munmap`` above its mmap threshold, 32 MiB at most on 64-bit), and their first
write faults every page in (``execution.fresh_pages``, which ``layerscope calibrate`` measures). Measured on
the reference CPU (2 threads): ``sigmoid(g) * u`` over fresh outputs takes what it takes into preallocated
ones up to 31 MiB per tensor, and 135-190 µs per MiB of output more from 32 MiB on (a 1024-token
Llama-3.2-1B MLP's activation: 13.8-16 ms in the model, 8.5 predicted without the faults). Per op, the sizes
of the tensors its kernels allocate: the op's outputs (one kernel; ``fused``); an RMSNorm's ``pow``, ``mul``
and weight ``mul`` (N each, plus the casts' outside fp32); RoPE's ``x*cos``, the negated half, ``cat``,
``*sin`` and ``add`` per tensor; attention's SDPA output and its contiguous copy; the gated activation's
``act(gate)`` and product; the experts' gathered tokens, both grouped GEMMs' outputs, ``act`` and ``mul``, the
routing-weight product, the re-ordered rows and the top-k sum (S = tokens x top-k rows each). The cache's
``torch.cat`` (``kv_write``) is left out: it grows with the context, and a step in it would break the exact
interpolation of decode steps.

**Kernels in sequence** (``KernelPlan.split``): an op's kernels run one after the other, so its time is the
sum of each kernel's roofline, not one roofline over their summed work; the two differ where one kernel is
compute-bound and the next memory-bound. The gated activation is such an op: ``act(gate)`` (the SiLU's
4 FLOPs per element over 2 tensors) and the product with ``up`` (1 FLOP over 3). Measured on the reference CPU
(2 threads, fp32, 4M elements, 16 MiB tensors): the SiLU 0.44 ms at 38 GFLOP/s, compute-bound, the product
0.30 ms, memory-bound, the two 0.79 ms; in cache (1M elements) 0.11 + 0.06 ms. The split gives each kernel its
share of the op's FLOPs and of its memory time (in proportion to its bytes); ``layerscope calibrate`` times the
SiLU alone for the activation's vector rate (``efficiency.vector_per_kind.activation``). The other eager ops
stay one roofline: RMSNorm's and RoPE's kernels are alike (the pooled vector rate is fitted on the RMSNorm's
kernels as one), and attention's share between SDPA and the cache's ``cat`` moves with the context, which
decode-step interpolation needs linear.

Eager modules also cost Python time of their own: each ``nn.Module`` call (``__call__``, hook dispatch,
the ``forward`` body's attribute lookups) runs cold inside a model, as the kernels do, after weights
streamed through the caches (reference CPU: a one-row RMSNorm took 45 µs bare and 58 µs as a module
right after four cold 2048 x 2048 GEMVs; an add 8.6 and 16). ``HF_EAGER_MODULE_CALLS`` counts the calls
each op's time includes; each pays ``execution.module_call_s``, which ``layerscope calibrate`` measures.
How cold depends on the traffic since the op's code last ran, the op of the same role in the layer before
(:func:`code_role`, :func:`reuse_bytes`): in mock decoder layers of one-row GEMVs on the reference CPU, a
one-row RMSNorm module took 16, 22 and 54 µs at 44, 80 and 224 MiB a layer, whatever the bytes right before
it; in Qwen3-0.6B's decode (60 MiB a layer) 21-23 µs, in Llama-3.2-1B's (232 MiB) 35-47 µs, and in both the
first layer's, after ``lm_head``, more. ``execution.cold_by_reuse`` carries the measured points
(``cost.models``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from layerscope.errors import CostModelError
from layerscope.graph.ops import Op
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
    """[ops, slots]: the bytes of each tensor the op's kernels allocate, zero-padded (module docstring,
    "Allocations"); those of at least ``execution.fresh_pages.min_bytes`` fault their pages in."""
    split: np.ndarray | None = None
    """[ops, kernels, 2]: the share of the op's FLOPs and of its bytes that each of its kernels runs one after
    the other, zero-padded (module docstring, "Kernels in sequence"); None: every op one roofline."""

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
    a = _act_bytes_per_element(op)
    qk = sum(t.numel for t in op.outputs)
    fused = op.act_read_bytes + op.act_write_bytes
    return 5.0 * len(op.outputs), (10 * qk * a) / fused if fused else 1.0, 1.0


def _eager_attention(op: Op) -> PlanRow:
    out = op.outputs[0].nbytes
    fused = op.act_read_bytes + op.act_write_bytes
    return 2.0, (fused + 2 * out) / fused if fused else 1.0, 3.0


def _eager_kv_write(op: Op) -> PlanRow:
    return 2.0, 0.0, 0.0


def _eager_activation(op: Op) -> PlanRow:
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


#: hf-eager kernel splits by op kind (module docstring, "Kernels in sequence"); other kinds are one roofline.
HF_EAGER_SPLITS: dict[str, Callable[[Op], KernelSplit]] = {
    "activation": _activation_split,
}


def split_table(rows: Sequence[KernelSplit]) -> np.ndarray | None:
    """Per-op kernel splits as a zero-padded [ops, kernels, 2] array; None when every op is one roofline."""
    table = padded_table(rows, (2,))
    return table if table.shape[1] > 1 else None


def _eager_topk(op: Op) -> PlanRow:
    return 5.0, 1.0, 1.0


#: Kernels of transformers 5's ``grouped_mm_experts_forward`` (module docstring, "MoE").
GROUPED_MM_EXPERTS_KERNELS = 17


def _eager_moe(op: Op) -> PlanRow:
    return float(GROUPED_MM_EXPERTS_KERNELS), 1.0, 1.0


def hf_eager_grouped_mm_groups(op: Op) -> float:
    """Expert groups an HF-eager op's ``torch._grouped_mm`` calls loop over: the routed experts' gate-up
    and down projections, each over every expert (module docstring, "MoE"); 0 for other ops."""
    if op.kind != "moe_experts":
        return 0.0
    return 2.0 * float(op.attr("num_experts", 0) or 0)  # type: ignore[arg-type]


#: hf-eager rules by op kind; kinds not listed run as one kernel.
HF_EAGER_RULES: dict[str, Callable[[Op], PlanRow]] = {
    "norm": _eager_norm,
    "rope": _eager_rope,
    "attention": _eager_attention,
    "kv_write": _eager_kv_write,
    "activation": _eager_activation,
    "topk": _eager_topk,
    "moe_experts": _eager_moe,
}


#: ``nn.Module`` calls per op of each kind in HF eager (transformers 5.x Llama/Qwen3/Mixtral modules):
#: projections, the router and the embedding are ``nn.Linear``/``nn.Embedding``, norms a module each;
#: the gated activation carries the MLP module's call and its ``act_fn`` module's; attention the
#: attention module's; the experts op the sparse-MoE block's and the experts module's; each of a
#: layer's two residual adds half of the decoder layer's call (its own code, between its children).
#: RoPE, the KV-cache update, top-k and sampling are functions and methods, not modules.
HF_EAGER_MODULE_CALLS: dict[str, float] = {
    "gemm": 1.0,
    "router": 1.0,
    "embedding": 1.0,
    "norm": 1.0,
    "activation": 2.0,
    "attention": 1.0,
    "moe_experts": 2.0,
    "residual_add": 0.5,
}


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


#: hf-eager allocation rules by op kind (module docstring, "Allocations"); other kinds allocate their outputs.
HF_EAGER_ALLOCS: dict[str, Callable[[Op], list[float]]] = {
    "norm": _norm_allocs,
    "rope": _rope_allocs,
    "attention": _attention_allocs,
    "kv_write": _no_allocs,
    "activation": _activation_allocs,
    "moe_experts": _moe_allocs,
}


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
    rows = np.array([HF_EAGER_RULES.get(op.kind, _one_kernel)(op) for op in ops],
                    dtype=np.float64).reshape(len(ops), 3)
    return KernelPlan(launches=rows[:, 0].copy(), act_factor=rows[:, 1].copy(), kv_factor=rows[:, 2].copy(),
                      out_share=output_share(ops),
                      gemv_rows=np.fromiter((_eager_gemv_rows(op) for op in ops), dtype=np.float64, count=len(ops)),
                      module_calls=np.fromiter((HF_EAGER_MODULE_CALLS.get(op.kind, 0.0) for op in ops),
                                               dtype=np.float64, count=len(ops)),
                      grouped_mm_groups=np.fromiter((hf_eager_grouped_mm_groups(op) for op in ops),
                                                    dtype=np.float64, count=len(ops)),
                      alloc_bytes=alloc_table([HF_EAGER_ALLOCS.get(op.kind, output_allocs)(op) for op in ops]),
                      split=split_table([HF_EAGER_SPLITS.get(op.kind, _one_roofline)(op) for op in ops]))


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
EXECUTION_PROFILES: dict[str, Callable[[Sequence[Op]], KernelPlan]] = {
    "fused": _fused,
    "hf-eager": _hf_eager,
}


def kernel_plan(name: str, ops: Sequence[Op]) -> KernelPlan:
    """The plan of profile ``name`` for ``ops``; an unknown name lists the known ones."""
    try:
        profile = EXECUTION_PROFILES[name]
    except KeyError:
        raise CostModelError(
            f"unknown execution profile {name!r}; known: {', '.join(sorted(EXECUTION_PROFILES))}"
        ) from None
    return profile(ops)
