"""Published kernel measurements predicted by the presets fitted on the others (``bench/GPU-KERNELS.md``).

Every row of ``data/gpu-kernels.md`` that maps to one op is predicted by its GPU's preset fitted
(:func:`layerscope.hardware.kernel_fit.fit_preset`) on every row *except those of the row's own source*, so no
row is scored by a fit its source took part in. GEMM rows become one ``linear_op`` timed by the roofline cost
model, exactly as an estimate times a projection (a grouped GEMM, one op over its groups: ``linear_op``'s ``groups``);
memory-bound rows are the preset's streaming bandwidth
(``HardwareSpec.achievable_bandwidth_bytes_per_s``). Error = predicted / published − 1, on the published metric.
F- and L-tagged rows are printed but stay out of the headline figures.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from layerscope.cost.features import op_features
from layerscope.cost.models import roofline
from layerscope.graph._common import linear_op
from layerscope.graph.attention import SOFTMAX_FLOPS_PER_SCORE, causal_pairs
from layerscope.graph.ops import GemmShape, Op, OpGraph, TensorSpec
from layerscope.hardware.attention_fit import NOT_SERVING, decode_bytes, row_time_s
from layerscope.hardware.kernel_fit import WEIGHT_ONLY, GemmRow, TableFit, call_overhead_s, fit_preset, source_key
from layerscope.hardware.kernel_table import KernelRow, RowShape
from layerscope.hardware.spec import HardwareSpec
from layerscope.units import DType


@dataclass(frozen=True)
class Replayed:
    """One published row beside its prediction."""

    id: str
    gpu: str
    kind: str
    description: str
    unit: str
    published: float
    predicted: float
    held_out: str
    """The source left out of the fit that predicted this row (the row's own)."""
    headline: bool
    """Counted in the headline: neither F- nor L-tagged."""

    @property
    def error(self) -> float:
        return self.predicted / self.published - 1.0


@dataclass(frozen=True)
class NotReplayed:
    id: str
    why: str


def gemm_tflops(row: GemmRow, spec: HardwareSpec, call_s: float = 0.0) -> float:
    """TFLOP/s of ``row``'s GEMM as the roofline cost model times it on ``spec`` (one fused kernel), over its
    time plus ``call_s``, the fixed cost outside the kernel its source's timing holds
    (:func:`~layerscope.hardware.kernel_fit.call_overhead_s`)."""
    g = row.row.gemm
    assert g is not None
    weights = DType(WEIGHT_ONLY.get(row.dtype, row.dtype))
    dt = DType("bf16" if row.dtype in WEIGHT_ONLY else row.dtype)
    graph = OpGraph(ops=(linear_op("gemm", "gemm", None, "x", m=g.m, n=g.n, k=g.k, weight_dtype=weights,
                                   act_dtype=dt, groups=g.groups),),
                    graph_inputs=frozenset({"x"}))
    time_s = float(roofline(op_features(graph), spec).time_s[0]) + call_s
    return row.flops / time_s / 1e12


#: Vector FLOPs per element of a softmax or norm row (max/sum or mean square, then the scaled map): the op is
#: memory-bound at any of these counts, which only keep it from being free.
_ROW_FLOPS_PER_ELEMENT = 5


def row_reduction_op(shape: RowShape) -> Op:
    """A softmax or norm row as the graph builds a norm: one op reading ``rows × cols`` elements and writing as
    many, its rows owned by ``shape.cluster`` engines (``row_cluster``)."""
    dt = DType.FP32 if shape.element_bytes == 4 else DType.BF16
    x = TensorSpec("x", (shape.rows, shape.cols), dt, "activation")
    return Op(name="row", kind="norm", module="row", layer=0, inputs=(x,),
              outputs=(TensorSpec("row:out", (shape.rows, shape.cols), dt, "activation"),),
              flops=_ROW_FLOPS_PER_ELEMENT * shape.rows * shape.cols, act_read_bytes=shape.nbytes,
              act_write_bytes=shape.nbytes, attrs=(("row_cluster", shape.cluster),))


def row_reduction_gbps(shape: RowShape, spec: HardwareSpec, call_s: float = 0.0) -> float:
    """The published convention's GB/s (one read and one write of each element over the time) of a softmax or
    norm row, timed by the roofline cost model on ``spec`` (a row wider than the engines' on-chip storage is read
    twice: :func:`~layerscope.cost.models.row_reread_bytes`) plus ``call_s``."""
    return 2.0 * shape.nbytes / (_op_time_s(row_reduction_op(shape), spec) + call_s) / 1e9


#: Heads of a prefill row that names only its head dim: FlashAttention-3's figures hold H·D = 2048 (K-03).
_FIGURE_HEADS_TIMES_DIM = 2048


def attention_op(batch: int, new: int, cached: int, heads: int, head_dim: int, value_dim: int, *, causal: bool,
                  kv_bytes: float, act_bytes: float, attended_pairs: int, dtype: DType = DType.BF16) -> Op:
    """One fused attention op as the graph builds it (``graph.attention``): ``batch`` sequences of ``new`` tokens
    over ``cached`` ones, QK and PV over the attended pairs plus the softmax."""
    scores = heads * attended_pairs * batch
    flops = 2 * heads * (head_dim + value_dim) * attended_pairs * batch + SOFTMAX_FLOPS_PER_SCORE * scores
    tokens = batch * new
    return Op(name="attn", kind="attention", module="attn", layer=0,
              inputs=(TensorSpec("q", (tokens, heads * head_dim), dtype, "activation"),),
              outputs=(TensorSpec("attn:out", (tokens, heads * value_dim), dtype, "activation"),),
              flops=flops, act_read_bytes=int(act_bytes) // 2, act_write_bytes=int(act_bytes) - int(act_bytes) // 2,
              kv_read_bytes=int(kv_bytes), gemm=GemmShape(new, cached + new, head_dim, batch * heads),
              attrs=(("groups", ((batch, new, cached),)), ("causal", causal)))


def attention_predicted(row: KernelRow, spec: HardwareSpec) -> float:
    """``row``'s metric as the roofline cost model times its attention op on ``spec``: a prefill row's TFLOP/s
    (the published convention: 4·h·d FLOPs per attended pair, half the pairs when causal), a decode row's time
    (µs) or bandwidth (GB/s, over the bytes :func:`~layerscope.hardware.attention_fit.decode_bytes` counts)."""
    shape = row.attention
    assert shape is not None and shape.head_dim is not None and row.batch is not None
    d, vd = shape.head_dim, shape.value_dim or shape.head_dim
    if shape.decode:
        kv = row.kv_len or row.input_len or 0
        nbytes = decode_bytes(row) or 0.0
        heads = shape.heads or 1
        q_o = row.batch * heads * (d + vd) * 2.0
        op = attention_op(row.batch, 1, kv - 1, heads, d, vd, causal=True, kv_bytes=nbytes - q_o, act_bytes=q_o,
                           attended_pairs=kv)
        time_s = _op_time_s(op, spec)
        if row.unit == "TFLOPS":  # the source's own FLOP count over the predicted time (the row holds its time)
            published_s = row_time_s(row)
            assert published_s is not None and row.value is not None
            return row.value * published_s / time_s
        return {"us": time_s * 1e6, "ms": time_s * 1e3}.get(row.unit, nbytes / time_s / 1e9)
    m = row.input_len or 0
    heads = shape.heads or _FIGURE_HEADS_TIMES_DIM // d
    causal = bool(shape.causal)
    pairs = causal_pairs(m, 0) if causal else m * m
    qkv = row.batch * m * heads * d * 2.0
    fp8 = "fp8" in row.precision.lower()
    op = attention_op(row.batch, m, 0, heads, d, vd, causal=causal, kv_bytes=2 * qkv, act_bytes=2 * qkv,
                       attended_pairs=pairs, dtype=DType.FP8 if fp8 else DType.BF16)
    published_flops = 4.0 * heads * d * row.batch * (m * m / 2 if causal else m * m)
    return published_flops / _op_time_s(op, spec) / 1e12


def measured_attention_s(spec: HardwareSpec, *, batch: int, new: int, cached: int, heads: int, kv_heads: int,
                         head_dim: int, causal: bool = True) -> float:
    """Time of one fused attention op of ``batch`` sequences (``new`` tokens over ``cached`` ones; GQA with
    ``kv_heads``, 16-bit) as the roofline cost model times it on ``spec``: what a measurement of one such
    kernel is compared with."""
    ctx = cached + new
    pairs = causal_pairs(new, cached) if causal else new * ctx
    kv_bytes = batch * ctx * kv_heads * head_dim * 2 * 2.0
    act_bytes = batch * new * heads * head_dim * 2 * 2.0
    return _op_time_s(attention_op(batch, new, cached, heads, head_dim, head_dim, causal=causal, kv_bytes=kv_bytes,
                                    act_bytes=act_bytes, attended_pairs=pairs), spec)


def _op_time_s(op: Op, spec: HardwareSpec) -> float:
    graph = OpGraph(ops=(op,), graph_inputs=frozenset(t.name for t in op.inputs))
    return float(roofline(op_features(graph), spec).time_s[0])


def replay(rows: Sequence[KernelRow], presets: dict[str, HardwareSpec]) -> tuple[list[Replayed], list[NotReplayed]]:
    """Every row predicted by its GPU's preset fitted without the row's source; the rows that map to no op,
    with the reason."""
    fits: dict[tuple[str, str], TableFit] = {}
    nearest: dict[tuple[str, tuple[str, ...]], TableFit] = {}
    done: list[Replayed] = []
    skipped: list[NotReplayed] = []
    for row in rows:
        why = _unmapped(row, presets)
        if why:
            skipped.append(NotReplayed(row.id, why))
            continue
        assert row.gpu is not None and row.value is not None
        src = source_key(row)
        key = (row.gpu, src)
        if key not in fits:
            fits[key] = fit_preset(presets[row.gpu], rows, presets, exclude_sources=(src,), cache=nearest)
        spec = fits[key].spec
        gemm = GemmRow.of(row)
        if gemm is not None:
            predicted = gemm_tflops(gemm, spec, call_overhead_s(row))
        elif row.kind == "attention":
            predicted = attention_predicted(row, spec)
        elif row.row_shape is not None:
            predicted = row_reduction_gbps(row.row_shape, spec, call_overhead_s(row))
        else:
            predicted = spec.achievable_bandwidth_bytes_per_s() / 1e9
        done.append(Replayed(id=row.id, gpu=row.gpu, kind=row.kind, description=row.description, unit=row.unit,
                             published=row.value, predicted=predicted, held_out=src,
                             headline=not ({"F", "L"} & set(row.tags))))
    return done, skipped


def _unmapped(row: KernelRow, presets: dict[str, HardwareSpec]) -> str:
    """Why ``row`` is not replayed ('' when it is)."""
    if row.value is None:
        return "qualitative value"
    if row.gpu is None or row.gpu not in presets:
        return f"no preset for {row.hardware!r}"
    if row.kind == "gemm":
        if row.gemm is None:
            return "GEMM without a shape"
        if GemmRow.of(row) is None:
            return f"precision {row.precision!r}: no preset has its peak (fp4)"
        return ""
    if row.kind == "memory" and row.unit == "GBps":
        if row.gpus not in (None, 1):
            return "multi-GPU weight streaming"
        return ""
    if row.kind == "attention":
        return _attention_unmapped(row)
    return f"{row.kind} rows are not replayed yet"


def _attention_unmapped(row: KernelRow) -> str:
    shape = row.attention
    if shape is None or shape.head_dim is None or row.batch is None:
        return "attention row without its shape (batch, head dim)"
    if "bwd" in row.description:
        return "attention forward and backward (training)"
    if NOT_SERVING.search(f"{row.framework} {row.notes}"):
        return "not a kernel an engine runs (hardware.attention_fit.NOT_SERVING: unfused, no split-KV, tutorial)"
    if shape.decode:
        if decode_bytes(row) is None or row_time_s(row) is None:
            return "decode attention without heads, KV length or a time"
        if row.unit not in ("us", "ms", "GBps", "TFLOPS"):
            return f"decode attention in {row.unit}"
        return ""
    if not row.input_len or row.unit != "TFLOPS":
        return "prefill attention without a sequence length"
    return ""


def headline(replayed: Sequence[Replayed], kind: str | None = None) -> tuple[int, float, float]:
    """(rows, median |error|, p90 |error|) over the headline rows (of ``kind``), p90 by linear interpolation."""
    errors = np.abs([r.error for r in replayed if r.headline and (kind is None or r.kind == kind)])
    if not len(errors):
        return 0, float("nan"), float("nan")
    return len(errors), float(np.median(errors)), float(np.percentile(errors, 90))
