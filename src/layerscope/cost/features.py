"""Per-op numeric features as arrays: what every cost model times.

A cost model never walks ``Op`` objects in its inner loop; it receives :class:`OpFeatures`, a
struct of arrays aligned with the graph's ops. Work features (FLOPs, bytes) may carry leading
dimensions (e.g. ``[steps, ops]`` for every decode step of a generation), so one call times many
variants of the same graph; static features (kind, GEMM shape, dtypes) are per op.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from layerscope.graph.ops import Op, OpGraph, picker
from layerscope.units import DType

#: Index order of ``OpFeatures.dtype_code``.
DTYPE_ORDER: tuple[DType, ...] = tuple(DType)
_DTYPE_CODE = {dt: i for i, dt in enumerate(DTYPE_ORDER)}

#: Op kinds that run on the matrix units (tensor cores / MXUs / AMX) when they carry a GEMM shape.
MATRIX_KINDS = frozenset({"gemm", "attention", "qk_matmul", "pv_matmul", "moe_experts", "router"})


@dataclass(frozen=True)
class OpFeatures:
    """Struct of arrays over ops; work arrays may have leading batch dimensions."""

    flops: np.ndarray
    weight_bytes: np.ndarray
    act_bytes: np.ndarray
    """Activation bytes read + written."""
    kv_bytes: np.ndarray
    """KV-cache bytes read + written."""
    uses_matrix_units: np.ndarray
    """bool per op: timed against matrix peak (else vector throughput)."""
    dtype_code: np.ndarray
    """int8 per op: index into :data:`DTYPE_ORDER` of the type the arithmetic runs in."""
    gemm_mnkb: np.ndarray
    """int64 [ops, 4]: m, n, k, batch of the op's matrix product (zeros when none)."""
    operand_bytes: np.ndarray
    """float [ops, 3]: bytes per element of A (activations), B (weights or K/V) and C (output)."""
    kinds: tuple[str, ...]
    ops: Sequence[Op] = field(default=(), repr=False, compare=False)
    """The graph's ops (static facts for the execution profiles of :mod:`layerscope.cost.execution`); a
    :class:`~layerscope.graph.ops.DeferredOps` made on first use when the graph's builder deferred them."""
    reps: tuple[Op, ...] = field(default=(), repr=False, compare=False)
    """With :attr:`rep_of`: the distinct ops that the graph's ops copy but for their names (templates)."""
    rep_of: np.ndarray | None = field(default=None, repr=False, compare=False)
    """Per op, the index in :attr:`reps` of the op it copies (None: no such map, each op stands for itself).
    Per-op facts that do not depend on names are computed once per rep and gathered with it."""
    rep_first: np.ndarray | None = field(default=None, repr=False, compare=False)
    """Per rep, the index of the first op copying it."""
    weight_only_code: np.ndarray | None = field(default=None, repr=False, compare=False)
    """Per op with a GEMM shape whose (first) weight is narrower than the type its arithmetic runs in (a weight-only
    quantized GEMM: W4A16, W8A16): the :data:`DTYPE_ORDER` index of the weight's dtype; -1 for the others (None:
    not extracted; ``cost.models.weight_only_dtypes`` then reads the ops)."""
    plans: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    """Derived per-op facts, computed on first use and shared by :meth:`with_work`: kernel plans per
    execution profile, and the routed experts' down-projection K (``cost.models.weight_stream_factor``)."""

    @property
    def compute_dtype(self) -> tuple[DType, ...]:
        """Per op: the type the arithmetic runs in (the widest input type)."""
        return tuple(DTYPE_ORDER[c] for c in self.dtype_code)

    @property
    def total_bytes(self) -> np.ndarray:
        return self.weight_bytes + self.act_bytes + self.kv_bytes

    def kind_mask(self, kind: str) -> np.ndarray:
        """bool per op: whether its kind is ``kind``; computed once per set of ops and kept in :attr:`plans`
        (read-only: the cost models call this on every estimate of a memoized graph)."""
        key = f"(kind {kind})"  # parenthesized: never an execution profile name
        mask = self.plans.get(key)
        if mask is None or len(mask) != len(self.kinds):
            rep_of = self.rep_of
            if rep_of is not None and len(rep_of) == len(self.kinds):
                mask = np.fromiter((op.kind == kind for op in self.reps), dtype=bool, count=len(self.reps))[rep_of]
            else:
                mask = np.fromiter((k == kind for k in self.kinds), dtype=bool, count=len(self.kinds))
            mask.flags.writeable = False
            self.plans[key] = mask
        return mask

    def take(self, index: np.ndarray, ops: Sequence[Op], plans: dict[str, Any]) -> OpFeatures:
        """The ops at ``index`` alone (a sweep's merged groups), each standing for itself: their arrays, ``ops``
        (the ops or template ops they are) and ``plans`` (the kernel plans taken as they were planned among the
        whole pass's ops)."""
        return OpFeatures(
            flops=self.flops[index], weight_bytes=self.weight_bytes[index], act_bytes=self.act_bytes[index],
            kv_bytes=self.kv_bytes[index], uses_matrix_units=self.uses_matrix_units[index],
            dtype_code=self.dtype_code[index], gemm_mnkb=self.gemm_mnkb[index],
            operand_bytes=self.operand_bytes[index], kinds=tuple(self.kinds[i] for i in index), ops=ops,
            weight_only_code=None if self.weight_only_code is None else self.weight_only_code[index], plans=plans)

    def with_work(self, flops: np.ndarray, weight_bytes: np.ndarray, act_bytes: np.ndarray,
                  kv_bytes: np.ndarray) -> OpFeatures:
        """The same ops with other work arrays (e.g. stacked over decode steps)."""
        return replace(self, flops=flops, weight_bytes=weight_bytes, act_bytes=act_bytes, kv_bytes=kv_bytes)


def distinct(values: np.ndarray) -> list[Any]:
    """The distinct values of a small array, ascending, as Python scalars: ``np.unique`` without its first call's
    import of ``numpy.ma`` (10-40 ms of a whole ``layerscope estimate`` process, for a handful of codes)."""
    return sorted(set(values.tolist()))


def _widest(dtypes: list[DType]) -> DType:
    return max(dtypes, key=lambda d: d.bits) if dtypes else DType.BF16


def op_features(graph: OpGraph) -> OpFeatures:
    """The arrays cost models need from ``graph``; computed once per graph (graphs are immutable)."""
    cached = graph.__dict__.get("_op_features")
    if cached is None:
        cached = _extract(graph)
        # OpGraph is frozen; the features are derived data, stored beside it like a cached_property.
        object.__setattr__(graph, "_op_features", cached)
    return cached


def _extract(graph: OpGraph) -> OpFeatures:
    # Why per rep: the features of an op copied from a template under other names are the template's, so a
    # graph of 32 copies of one 15-op layer is read for 15 + a few ops, not ~500.
    ops, reps, rep_of = graph.op_layout()
    n = len(reps)
    flops = np.empty(n)
    wb = np.empty(n)
    ab = np.empty(n)
    kb = np.empty(n)
    matrix = np.zeros(n, dtype=bool)
    mnkb = np.zeros((n, 4), dtype=np.int64)
    operand = np.zeros((n, 3))
    weight = np.full(n, -1, dtype=np.int64)
    dtypes: list[DType] = []
    kinds: list[str] = []
    widest: dict[tuple[DType, ...], DType] = {}  # a graph has a handful of input-type combinations
    for i, op in enumerate(reps):
        flops[i] = op.flops
        wb[i] = op.weight_bytes
        ab[i] = op.act_read_bytes + op.act_write_bytes
        kb[i] = op.kv_read_bytes + op.kv_write_bytes
        kinds.append(op.kind)
        # Weight-only quantized GEMMs dequantize to the activation type before the MMA
        # (e.g. Marlin, arXiv 2408.11743), so arithmetic runs in the widest input type.
        in_types = tuple(t.dtype for t in op.inputs)
        wide = widest.get(in_types)
        if wide is None:
            wide = widest[in_types] = _widest(list(in_types))
        dtypes.append(wide)
        if op.gemm is not None:
            mnkb[i] = (op.gemm.m, op.gemm.n, op.gemm.k, op.gemm.batch)
            matrix[i] = op.kind in MATRIX_KINDS
            act_in = [t for t in op.inputs if t.role == "activation"]
            other_in = [t for t in op.inputs if t.role != "activation"]
            a_t = act_in[0].dtype if act_in else dtypes[-1]
            b_t = other_in[0].dtype if other_in else (act_in[1].dtype if len(act_in) > 1 else a_t)
            c_t = op.outputs[0].dtype if op.outputs else a_t
            operand[i] = (a_t.bytes, b_t.bytes, c_t.bytes)
            w_t = next((t.dtype for t in op.inputs if t.role == "weight"), None)
            if w_t is not None and w_t.bits < wide.bits and mnkb[i].any():
                weight[i] = _DTYPE_CODE[w_t]
    codes = np.fromiter((_DTYPE_CODE[d] for d in dtypes), dtype=np.int8, count=n)
    if rep_of is None:
        return OpFeatures(flops=flops, weight_bytes=wb, act_bytes=ab, kv_bytes=kb, uses_matrix_units=matrix,
                          dtype_code=codes, gemm_mnkb=mnkb, operand_bytes=operand, kinds=tuple(kinds), ops=ops,
                          weight_only_code=weight)
    first = np.empty(n, dtype=np.intp)
    first[rep_of[::-1]] = np.arange(len(rep_of) - 1, -1, -1)  # the last write of each rep is its first op
    return OpFeatures(flops=flops[rep_of], weight_bytes=wb[rep_of], act_bytes=ab[rep_of], kv_bytes=kb[rep_of],
                      uses_matrix_units=matrix[rep_of], dtype_code=codes[rep_of], gemm_mnkb=mnkb[rep_of],
                      operand_bytes=operand[rep_of],
                      kinds=tuple(picker(rep_of.tolist())(tuple(kinds))),
                      ops=ops, reps=reps, rep_of=rep_of, rep_first=first, weight_only_code=weight[rep_of])
