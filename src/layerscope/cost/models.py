"""Registered duration models: ``roofline``, ``tiling`` and ``hierarchical``.

Every model maps :class:`~layerscope.cost.features.OpFeatures` and a
:class:`~layerscope.hardware.spec.HardwareSpec` to :class:`CostArrays`; arrays broadcast over any
leading dimensions of the work features. Coefficients (peaks, efficiencies, bandwidths,
capacities, launch overhead) come from the ``HardwareSpec``, never from literals here.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from contextlib import suppress
from dataclasses import dataclass, replace
from functools import lru_cache, wraps
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from layerscope.cost.execution import (
    captured_kernels,
    engine_terms,
    graph_mode,
    kernel_plan,
    previous_same_role,
    reuse_bytes,
)
from layerscope.cost.features import DTYPE_ORDER, OpFeatures, distinct
from layerscope.errors import CostModelError
from layerscope.graph.ops import OP_KINDS, Op
from layerscope.hardware.gemm_tiles import TILED_DTYPES, tile_plan
from layerscope.hardware.head_dim import head_dim_factor
from layerscope.hardware.spec import FreshPages, HardwareSpec, MemoryLevel, row_input_reads
from layerscope.registry import Registry
from layerscope.units import DType

if TYPE_CHECKING:
    from layerscope.cost.collectives import CollectiveTerms

BOUND_COMPUTE = 0
BOUND_MEMORY = 1
BOUND_OVERHEAD = 2
BOUND_NETWORK = 3
BOUND_NAMES = ("compute", "memory", "overhead", "network")


@dataclass(frozen=True)
class CostArrays:
    """Per-op times in float seconds; ``bound`` holds BOUND_* codes."""

    compute_s: np.ndarray
    memory_s: np.ndarray
    overhead_s: np.ndarray
    time_s: np.ndarray
    memory_bytes: np.ndarray
    """Main-memory bytes the model charges to the op."""
    bound: np.ndarray


#: A spec's figures per dtype of :data:`DTYPE_ORDER`, by name (:func:`dtype_figures`).
_DTYPE_FIGURES: dict[str, Callable[[HardwareSpec, DType], float]] = {
    "rate": lambda hw, dt: hw.achievable_flops_per_s(dt),
    "half_flops": lambda hw, dt: hw.matmul_half_flops(dt),
    "k_loop_s": lambda hw, dt: hw.gemm_k_loop_s(dt),
    # the fp8 tile rule's dtypes (gemm_tiles.TILED_DTYPES) that the chip has MMAs for (tiled_gemms)
    "tiled": lambda hw, dt: float(dt.value in TILED_DTYPES and dt in hw.engines.peak_flops_per_s),
}
#: The figures of the specs timed lately, by the spec's identity: (spec, {name: figures}). A spec is frozen, so its
#: figures are worked out once (each dtype's through the fallback rules) instead of on every cost call.
_SPEC_FIGURES: dict[int, tuple[HardwareSpec, dict[str, np.ndarray]]] = {}
_SPEC_FIGURES_KEPT = 64


def _drop_oldest(kept: dict[Any, Any]) -> None:
    """Forget ``kept``'s oldest entry; a no-op where another thread changed the dict under us (these are caches:
    losing an entry only costs its recomputation)."""
    with suppress(KeyError, RuntimeError, StopIteration):
        del kept[next(iter(kept))]


def dtype_figures(hw: HardwareSpec, name: str) -> np.ndarray:
    """``hw``'s figure ``name`` (:data:`_DTYPE_FIGURES`) for each dtype of :data:`DTYPE_ORDER`, read-only."""
    entry = _SPEC_FIGURES.get(id(hw))
    if entry is None or entry[0] is not hw:
        if len(_SPEC_FIGURES) >= _SPEC_FIGURES_KEPT:
            _drop_oldest(_SPEC_FIGURES)
        entry = _SPEC_FIGURES[id(hw)] = (hw, {})
    figures = entry[1]
    values = figures.get(name)
    if values is None:
        values = np.array([_DTYPE_FIGURES[name](hw, dt) for dt in DTYPE_ORDER], dtype=np.float64)
        values.flags.writeable = False
        figures[name] = values
    return values


_T = TypeVar("_T")
#: Specs whose static per-op facts one set of ops keeps (:func:`static_per_spec`): a sweep's hardware list.
_SPECS_KEPT = 16


def static_per_spec(fn: Callable[[OpFeatures, HardwareSpec], _T]) -> Callable[[OpFeatures, HardwareSpec], _T]:
    """``fn(features, hw)`` computed once per set of ops and spec and kept in ``features.plans`` (the spec by
    identity: it is frozen; the last :data:`_SPECS_KEPT` of them), its arrays read-only. For per-op facts that
    read the ops' shapes, kinds, dtypes and which carry weights, and ``hw``, never the amount of work, which
    :meth:`~layerscope.cost.features.OpFeatures.with_work` varies under the same ``plans``. The GEMM shapes are
    keyed by identity too: an execution profile that reshapes them (``_prepare``'s GEMV rows) shares ``plans``."""
    key = f"({fn.__name__} per spec)"  # parenthesized: never an execution profile name

    @wraps(fn)
    def cached(features: OpFeatures, hw: HardwareSpec) -> _T:
        per_spec: dict[tuple[int, int], tuple[HardwareSpec, np.ndarray, _T]] = features.plans.setdefault(key, {})
        shapes = features.gemm_mnkb
        hit = per_spec.get((id(hw), id(shapes)))
        if hit is not None and hit[0] is hw and hit[1] is shapes:
            return hit[2]
        value = fn(features, hw)
        for array in (value if isinstance(value, tuple) else (value,)):
            if isinstance(array, np.ndarray):
                array.flags.writeable = False
        if len(per_spec) >= _SPECS_KEPT:
            _drop_oldest(per_spec)
        per_spec[(id(hw), id(shapes))] = (hw, shapes, value)
        return value

    return cached


def compute_time_s(features: OpFeatures, hw: HardwareSpec) -> np.ndarray:
    """Arithmetic time on the whole chip: FLOPs / achievable FLOP/s.

    Matrix ops run at ``peak(dtype) * efficiency.matmul``, the rest at
    ``vector_flops_per_s * efficiency.vector`` (roofline, Williams et al., CACM 2009).
    With ``efficiency.matmul_half_flops`` set, a matrix op of W FLOPs runs at that rate times
    W / (W + W½), i.e. takes (W + W½) / rate (see :func:`_matmul_half_flops`). A fitted GPU's fp8 GEMMs
    also pay their tile and wave quantization q (:func:`gemm_tile_plan`) on the work, not on the fixed
    cost, and that fixed cost once per wave of output tiles: W / (rate · q) + waves · W½ / rate. W½ / rate is
    the time each SM spends filling and draining its pipeline for one tile (the first K-panels loaded before any
    MMA, the tile written back after the last), the same whether the wave fills the chip or not; divided by q,
    an M = 64, N = 128, K = 256 fp8 GEMM (eight 64 x 16 tiles on 132 SMs, q = 0.06) paid 16.5 of them, 58 µs on
    the fitted h200 preset where our own H200 runs it in 2.7 µs (bench/gpu/h200-2026-11-27b). Charged once per
    kernel instead, the fit had to make it the ~24 µs that the 11-wave M = 4096 rows need in all (GX-08, GX-09)
    and put 24 µs on a one-wave M = 64 GEMM that takes 6.4 (GX-04); per wave it is 1-2 µs
    (bench/GPU-KERNELS.md). 16-bit GEMMs, whose tiles are not known (``gemm_tiles``), pay W½ once. With
    ``efficiency.gemm_k_loop_s``, no GEMM takes less than its tiles' serial K-loop (:func:`gemm_k_loop_time_s`).
    """
    matrix_rates = dtype_figures(hw, "rate")
    vector_rate: float | np.ndarray = hw.achievable_vector_flops_per_s()
    if hw.efficiency.vector_per_kind:
        vector_rate = _vector_rates_per_kind(features, hw)
    rate = np.where(features.uses_matrix_units, matrix_rates[features.dtype_code], vector_rate)
    if hw.efficiency.matmul_rows or hw.efficiency.matmul_shapes:
        rate = rate * _matmul_rows_fraction(features, hw)
    if hw.efficiency.attention_rows:
        rate = rate * _attention_rows_fraction(features, hw)
    share, waves = gemm_tile_plan(features, hw) if gemm_tiles_apply(hw) else (1.0, 1.0)
    compute_s = features.flops / (rate * share)
    if hw.efficiency.matmul_half_flops:
        compute_s = compute_s + waves * _matmul_half_flops(features, hw) / rate
    if hw.efficiency.gemm_k_loop_s:
        compute_s = np.maximum(compute_s, gemm_k_loop_time_s(features, hw))
    return compute_s


@static_per_spec
def gemm_k_loop_time_s(features: OpFeatures, hw: HardwareSpec) -> np.ndarray:
    """Per op: the serial K-loop of one output tile, ``K · efficiency.gemm_k_loop_s`` of its dtype, for matrix
    ops with weights (projections, experts; not fused attention, whose loop is over keys); 0 for the rest. A
    floor under the op's arithmetic time (:func:`compute_time_s`): it binds grids too small to fill the chip."""
    per_k = dtype_figures(hw, "k_loop_s")
    k = features.gemm_mnkb[:, 2].astype(np.float64)
    return np.where(gemms_with_weights(features), k * per_k[features.dtype_code], 0.0)


def gemm_tiles_apply(hw: HardwareSpec) -> bool:
    """Whether ``hw``'s fp8 GEMMs pay tile and wave quantization by their shape (:func:`gemm_tile_plan`): a GPU
    whose preset carries the fitted GEMM curve (``efficiency.matmul_half_flops``, which
    :func:`~layerscope.hardware.kernel_fit.fit_preset` writes for every dtype it fits, having fitted e and W½ with
    these losses taken out). A hand-set efficiency is one measured GEMM's fraction of peak, its own tile losses
    included, so it pays none."""
    return hw.kind == "gpu" and bool(hw.efficiency.matmul_half_flops)


@static_per_spec
def gemm_tile_plan(features: OpFeatures, hw: HardwareSpec) -> tuple[np.ndarray, np.ndarray]:
    """Per op: the useful share of a GPU GEMM's tiles and waves on ``hw``'s SMs, and its waves
    (:func:`~layerscope.hardware.gemm_tiles.tile_plan`: tile and wave quantization), for the ops of
    :func:`tiled_gemms` (a projection's M × N outputs, per expert for an experts op); share 1 and one wave for
    every other op: 16-bit GEMMs (their library's tiles are not published), fp8 weights on a GPU without fp8 MMAs
    (upcast, another kernel) and fused attention (its own tiling: :func:`attention_occupancy`)."""
    m = features.gemm_mnkb[:, 0]
    applies = tiled_gemms(features, hw)
    share, waves = np.ones(len(m)), np.ones(len(m))
    if applies.any():
        mnkb = features.gemm_mnkb[applies]
        share[applies], waves[applies] = tile_plan(mnkb[:, 0], mnkb[:, 1], mnkb[:, 3], hw.engines.count)
    return share, waves


def gemms_with_weights(features: OpFeatures) -> np.ndarray:
    """Per op: a matrix op with rows and weights that is not fused attention (a projection or an experts op): the
    ops a GEMM kernel's tiles run (:func:`tiled_gemms`, :func:`gemm_k_loop_time_s`)."""
    m = features.gemm_mnkb[:, 0]
    return (features.uses_matrix_units & (m > 0) & (features.weight_bytes.reshape(-1, len(m))[-1] > 0)
            & ~features.kind_mask("attention"))


def tiled_gemms(features: OpFeatures, hw: HardwareSpec) -> np.ndarray:
    """Per op: whether :func:`gemm_tile_plan` charges it, whatever its shape: :func:`gemms_with_weights` in a dtype
    of ``gemm_tiles.TILED_DTYPES`` that ``hw`` has a peak for (its own MMAs: the tile rule is DeepGEMM's, a Hopper
    fp8 kernel; an A100 upcasts fp8 weights in another kernel)."""
    tiled = dtype_figures(hw, "tiled").astype(bool)[features.dtype_code]
    return gemms_with_weights(features) & tiled if tiled.any() else tiled


def _vector_rates_per_kind(features: OpFeatures, hw: HardwareSpec) -> np.ndarray:
    """Per op: the vector rate of its kind (``efficiency.vector_per_kind``, else ``efficiency.vector``).
    Raises :class:`CostModelError` for a kind no op can have (a typo would silently do nothing)."""
    unknown = sorted(set(hw.efficiency.vector_per_kind) - set(OP_KINDS))
    if unknown:
        raise CostModelError(f"{hw.name}: efficiency.vector_per_kind names unknown op kinds {unknown}; "
                                f"known kinds: {', '.join(sorted(OP_KINDS))}")
    rates = {kind: hw.achievable_vector_flops_per_s(kind) for kind in set(features.kinds)}
    return np.fromiter((rates[k] for k in features.kinds), dtype=np.float64, count=len(features.kinds))


def _matmul_rows_fraction(features: OpFeatures, hw: HardwareSpec) -> np.ndarray:
    """Per op: the measured fraction of peak at its row count M (``efficiency.matmul_rows``), or at
    its M and output width N (``efficiency.matmul_shapes``, which wins where a dtype has both);
    interpolated linearly in log M (and then log N) and held at the tables' ends; 1 for GEMVs
    (M = 1), ops without weights (attention's products run other kernels) and non-matrix ops."""
    fraction = np.ones(len(features.kinds))
    m = features.gemm_mnkb[:, 0].astype(np.float64)
    n = features.gemm_mnkb[:, 1].astype(np.float64)
    applies = features.uses_matrix_units & (m > 1) & (features.weight_bytes.reshape(-1, len(m))[-1] > 0)
    for code, dt in enumerate(DTYPE_ORDER):
        sel = applies & (features.dtype_code == code)
        if not sel.any():
            continue
        shapes = hw.matmul_shapes(dt)
        rows = hw.matmul_rows(dt)
        if shapes:
            fraction[sel] = shapes_fraction(shapes, m[sel], n[sel])
        elif rows:
            fraction[sel] = rows_fraction(rows, m[sel])
    return fraction


def rows_fraction(rows: Sequence[tuple[float, float]], m: np.ndarray) -> np.ndarray:
    """Fraction of peak at ``m`` rows from measured (M, fraction) pairs, ascending in M: linear in
    log M, held at the table's ends."""
    return np.interp(np.log(np.asarray(m, dtype=np.float64)), np.log([r[0] for r in rows]), [r[1] for r in rows])


def _attention_rows_fraction(features: OpFeatures, hw: HardwareSpec) -> np.ndarray:
    """Per op: the measured fraction of peak of fused attention at its query rows per sequence M
    (``efficiency.attention_rows``; the M of the op's QK product), interpolated linearly in log M and
    held at the table's ends; 1 for every other op, for decode (M = 1) and for attention over
    sequence groups of different lengths (no single M: the op carries no product shape).

    With ``efficiency.attention_rows_noncausal``, the pairs of the M new tokens with the C cached ones
    (the QK product's N = C + M) run at that table: the causal share of the pairs is about
    (M²/2) / (M²/2 + M·C) = M / (2C + M), and the op's fraction is the harmonic mean of the two
    weighted by it (time adds); an op with the attribute ``causal=False`` runs all its pairs at that
    table. With ``efficiency.attention_half_head_dim`` d½, the fraction is scaled by
    d / (d + d½) · (128 + d½) / 128 at the op's head dim d (the QK product's K), capped at 1.

    The tables are fitted on launches that fill the chip (FlashAttention-3's figures run B·S = 16k tokens);
    an op with too few query tiles for the engines runs at its critical path (:func:`attention_occupancy`)."""
    m = features.gemm_mnkb[:, 0].astype(np.float64)
    applies = features.kind_mask("attention") & (m > 1)
    if not applies.any():  # no fused attention over more than one query row (a decode step): 1 for every op
        return np.ones(len(m))
    fraction = _per_dtype_rows(features, applies, m, hw.attention_rows)
    if hw.efficiency.attention_rows_noncausal:
        n = features.gemm_mnkb[:, 1].astype(np.float64)
        cached = np.maximum(n - m, 0.0)
        causal_share = np.where(applies & _causal_ops(features), m / np.maximum(2.0 * cached + m, 1.0), 0.0)
        other = _per_dtype_rows(features, applies, m, hw.attention_rows_noncausal)
        fraction = 1.0 / (causal_share / fraction + (1.0 - causal_share) / other)
    half_d = hw.efficiency.attention_half_head_dim
    if half_d > 0:
        scale = head_dim_factor(np.maximum(features.gemm_mnkb[:, 2].astype(np.float64), 1.0), half_d)
        fraction = np.where(applies, np.minimum(fraction * scale, 1.0), fraction)
    if hw.efficiency.attention_rows:
        fraction = fraction * np.where(applies, attention_occupancy(features, hw.engines.count), 1.0)
    return fraction


#: Query rows (and keys) per tile of a fused attention kernel: FlashAttention-2 and -3 run 128-row query blocks
#: per thread block in the forward pass (Dao 2023, arXiv 2307.08691 §3.3; Shah et al. 2024, arXiv 2407.08608 §4).
ATTENTION_TILE = 128


def attention_occupancy(features: OpFeatures, engines: int) -> np.ndarray:
    """Per op: the fraction of its engines' time a fused attention kernel keeps busy, from its tiles alone.

    One thread block per (sequence, head, 128-row query tile) (:data:`ATTENTION_TILE`), each looping over its
    key tiles: all of them when the op is not causal, else the cached ones and those up to its own diagonal,
    so the j-th query tile of a causal prefill does ``C/128 + j`` tiles of work. The kernel takes at least its
    longest block and at least the total work spread over the engines (list scheduling's two bounds, Graham
    1969): busy = (total / engines) / max(total / engines, longest). A 512-token causal prefill of one sequence
    with 32 heads (128 blocks of 1-4 tiles on 132 SMs) is held by its 4-tile blocks at 0.6; at 8 sequences or 2048
    tokens the work spreads (1.0). 1 for ops without a product shape."""
    m = features.gemm_mnkb[:, 0].astype(np.float64)
    n = features.gemm_mnkb[:, 1].astype(np.float64)
    blocks_per_tile = np.maximum(features.gemm_mnkb[:, 3].astype(np.float64), 1.0)  # sequences x heads
    q_tiles = np.ceil(m / ATTENTION_TILE)
    kv_tiles = np.ceil(n / ATTENTION_TILE)
    cached_tiles = np.maximum(kv_tiles - q_tiles, 0.0)
    causal = _causal_ops(features)
    total = blocks_per_tile * np.where(causal, q_tiles * cached_tiles + q_tiles * (q_tiles + 1) / 2,
                                       q_tiles * kv_tiles)
    longest = np.where(causal, cached_tiles + q_tiles, kv_tiles)
    spread = total / max(engines, 1)
    busy = spread / np.maximum(np.maximum(spread, longest), 1e-300)
    return np.where(m > 0, busy, 1.0)


#: Key of the causal-attention mask in ``OpFeatures.plans``.
_CAUSAL = "(causal)"  # parenthesized: never an execution profile name


def _per_op(features: OpFeatures, key: str, value: Callable[[int, Op], object], dtype: type,
            absent: object, only: np.ndarray | None = None) -> np.ndarray:
    """Per op: ``value(index, op)`` over the graph's ops, computed on first use and kept in ``features.plans``
    under ``key`` (one scan of the ops per graph); ``absent`` for every op when the features carry no ops, and
    for the ops outside ``only`` (a mask of the ops ``value`` can differ from ``absent`` on: one kind, say).
    ``value`` must not read the op's names (``name``, ``module``, ``layer``, tensor names): with
    ``features.rep_of`` it is called once per template op and its result gathered."""
    cached = features.plans.get(key)
    if cached is not None and len(cached) == len(features.kinds):
        return np.asarray(cached)
    if len(features.ops) != len(features.kinds):
        return np.full(len(features.kinds), absent, dtype=dtype)
    rep_of, first = features.rep_of, features.rep_first
    values: np.ndarray
    if rep_of is not None and first is not None and len(rep_of) == len(features.kinds):
        # once per rep (the op every copy of it equals but for names, which no ``value`` reads), at its first op
        mask = None if only is None else np.asarray(only, dtype=bool)
        need = range(len(first)) if mask is None else distinct(rep_of[mask])
        per_rep: np.ndarray = np.full(len(first), absent, dtype=dtype)
        per_rep[list(need)] = [value(int(first[j]), features.reps[j]) for j in need]
        values = per_rep[rep_of]  # a copy
        if mask is not None:
            values[~mask] = absent
    elif only is None:
        values = np.fromiter((value(i, op) for i, op in enumerate(features.ops)), dtype=dtype,
                             count=len(features.ops))
    else:
        values = np.full(len(features.ops), absent, dtype=dtype)
        index = np.flatnonzero(only).tolist()
        values[index] = [value(i, features.ops[i]) for i in index]
    features.plans[key] = values
    return values


def _causal_ops(features: OpFeatures) -> np.ndarray:
    """Per op: False where the op says it is not causal (attribute ``causal``; a decoder's attention always
    is). Every op is causal when the features carry no ops."""
    return _per_op(features, _CAUSAL, lambda _, op: op.attr("causal", True) is not False, bool, True,
                   only=features.kind_mask("attention"))


#: Key of the decode-attention mask in ``OpFeatures.plans``.
_DECODE_ATTENTION = "(decode_attention)"  # parenthesized: never an execution profile name


def decode_attention_ops(features: OpFeatures) -> np.ndarray:
    """Per op: a fused attention op whose every sequence group has one new token (a decode step), from the
    op's ``groups`` attribute."""
    return _per_op(features, _DECODE_ATTENTION, lambda _, op: _all_single_token(op.attr("groups", ())), bool, False,
                   only=features.kind_mask("attention"))


def _all_single_token(groups: object) -> bool:
    """Whether an attention op's ``groups`` ((count, new, cached) per group) all have one new token."""
    return isinstance(groups, tuple) and bool(groups) and all(g[1] == 1 for g in groups)


def _decode_attention_s(memory_s: np.ndarray, bytes_: np.ndarray, features: OpFeatures,
                        hw: HardwareSpec) -> np.ndarray:
    """``memory_s`` with decode attention ops (:func:`decode_attention_ops`) timed as ``floor + bytes /
    (bandwidth · attention_decode_memory)`` (``efficiency.attention_decode_*``, fitted on the decode rows of
    gpu-kernels.md by ``hardware.attention_fit``); unchanged where the spec has no such figures."""
    eff = hw.efficiency
    if (eff.attention_decode_memory is None and eff.attention_decode_floor_s == 0) or not features.ops:
        return memory_s
    mask = decode_attention_ops(features)
    if len(mask) != np.shape(memory_s)[-1] or not mask.any():
        return memory_s
    fraction = eff.attention_decode_memory or eff.memory
    decode_s = eff.attention_decode_floor_s + bytes_ / (hw.memory_bandwidth_bytes_per_s * fraction)
    return np.where(mask, decode_s, memory_s)


def _per_dtype_rows(features: OpFeatures, applies: np.ndarray, x: np.ndarray,
                    table: Callable[[DType], Sequence[tuple[float, float]]]) -> np.ndarray:
    """Per op: :func:`rows_fraction` of ``table(op dtype)`` at ``x`` where ``applies`` and the dtype has
    a table; 1 elsewhere."""
    fraction = np.ones(len(x))
    for code in distinct(features.dtype_code[applies]):  # the dtypes of the ops it applies to (one or two)
        rows = table(DTYPE_ORDER[code])
        if rows:
            sel = applies & (features.dtype_code == code)
            fraction[sel] = rows_fraction(rows, x[sel])
    return fraction


def shapes_fraction(shapes: tuple[tuple[float, float, float], ...], m: np.ndarray, n: np.ndarray) -> np.ndarray:
    """Fraction of peak of GEMMs with ``m`` rows and output width ``n`` from (M, N, fraction) triples:
    within each measured width, linear in log M (held at that width's smallest and largest M);
    across widths, linear in log N between the two measured widths around ``n`` (held at the ends)."""
    widths = sorted({w for _, w, _ in shapes})
    # per_width[j]: every op's fraction as if its N were widths[j].
    per_width = np.stack([rows_fraction([(rm, f) for rm, rw, f in shapes if rw == w], m) for w in widths])
    if len(widths) == 1:
        return per_width[0]
    log_w = np.log(widths)
    x = np.clip(np.log(np.asarray(n, dtype=np.float64)), log_w[0], log_w[-1])
    lo = np.clip(np.searchsorted(log_w, x, side="right") - 1, 0, len(widths) - 2)
    t = (x - log_w[lo]) / (log_w[lo + 1] - log_w[lo])
    cols = np.arange(len(x))
    return per_width[lo, cols] * (1.0 - t) + per_width[lo + 1, cols] * t


def _matmul_half_flops(features: OpFeatures, hw: HardwareSpec) -> np.ndarray:
    """Per op: Hockney's half-performance work W½ (FLOPs) of its dtype; 0 for non-matrix ops and
    ops without work.

    Hockney & Jesshope, *Parallel Computers 2* (1988), §1.3.3: rate(W) = r∞ · W / (W + W½), so the
    time of W FLOPs is (W + W½) / r∞ — a fixed cost of W½ / r∞ per GEMM on top of the roofline's
    W / r∞. Fitted per dtype by ``layerscope calibrate`` (``hardware/fit.py``) on GEMMs with M > 1.

    Matrix-vector products (M = 1: a decode step's projections, per-head decode attention) run
    BLAS's GEMV kernels, which stream the matrix and are not on the GEMM kernels' efficiency
    curve, so they get no W½ term: a 2048x2048 fp32 GEMV measured 0.21 ms here, where the GEMM
    curve (W½ = 117 MFLOP at 168 GFLOP/s) would charge 0.75 ms.
    """
    halves = dtype_figures(hw, "half_flops")
    gemm = features.uses_matrix_units & (features.flops > 0) & (features.gemm_mnkb[:, 0] > 1)
    if hw.efficiency.attention_rows:
        # fused attention has its own measured curve in its query length (efficiency.attention_rows), which
        # already holds its small-size losses: charging the GEMMs' W½ on top counted them twice (an 128-token
        # causal prefill on the h200 preset took 18 µs instead of 1.2)
        gemm &= ~features.kind_mask("attention")
    return np.where(gemm, halves[features.dtype_code], 0.0)


@dataclass(frozen=True)
class _Execution:
    """The execution profile applied to one model call: launches per op and cache-resident bytes."""

    launches: np.ndarray | None
    """Kernels per op (None: one each, the fused default)."""
    resident_bytes: np.ndarray | None
    """Activation bytes served by the last on-chip level (None: everything from main memory)."""
    cache_bw: float = 0.0
    write_allocate_bytes: np.ndarray | None = None
    """Extra main-memory bytes: the read for ownership of each output written to a cold buffer."""
    module_s: np.ndarray | None = None
    """Per op: host time outside its kernels: the Python module calls (``module_calls ·
    execution.module_call_s``) and the grouped GEMMs' per-group loop (``grouped_mm_groups ·
    execution.grouped_mm_group_s``)."""
    kernel_s: np.ndarray | None = None
    """Per op: the overhead per kernel, from ``execution.cold_by_reuse`` (None: ``launch_overhead_s``)."""
    stream_bytes: np.ndarray | None = None
    """Per op: the activation bytes that stream at ``efficiency.activation_stream`` (None: no such factor)."""
    split: np.ndarray | None = None
    """[ops, kernels, 2]: each kernel's share of the op's FLOPs and bytes (None: one roofline per op)."""


_DEFAULT_EXECUTION = _Execution(None, None)


def _prepare(features: OpFeatures, hw: HardwareSpec) -> tuple[OpFeatures, _Execution]:
    """``features`` with the bytes of ``hw.execution``'s kernels, and what else the profile implies.

    The default (fused kernels, activations in main memory) returns ``features`` unchanged.
    With ``activations_in_cache``, an op whose activation bytes (its inputs and outputs) fit the
    last on-chip level that has a bandwidth reads and writes them there (the cache-aware roofline
    of Ilic, Pratas & Sousa, IEEE CAL 2014: each level's traffic at that level's bandwidth).
    With ``cold_outputs``, the op's output (its own output bytes, once, whatever its kernels
    write in between) goes to a buffer that is not cached: it is never cache-resident, and a
    write-allocate cache reads each line for ownership before writing it back, so those bytes
    cross main memory twice. Measured on the reference CPU (2 cores, 32 MiB L3): a 1 MiB
    ``x + x`` takes 14 µs when its output buffer is reused hot and 112 µs when it is a fresh one;
    2 x 1 MiB at the 20 GB/s measured main-memory bandwidth is 105 µs.
    With ``fresh_pages``, the op's allocations of at least its ``min_bytes`` (the plan's ``alloc_bytes``)
    add their page-fault time to the op's host time (:func:`fresh_page_s`).
    With ``efficiency.activation_stream``, the activation bytes of the ops that do not fit the last on-chip
    level (:func:`streaming_ops`) stream at that factor on the bandwidth, read for ownership included.
    """
    execution = hw.execution
    streaming = streaming_ops(features.act_bytes, hw)
    if execution.is_default or not features.ops:
        if streaming is None:
            return features, _DEFAULT_EXECUTION
        return features, _Execution(None, None, stream_bytes=np.where(streaming, features.act_bytes, 0.0))
    plan = features.plans.get(execution.kernels)
    if plan is None:
        plan = features.plans[execution.kernels] = kernel_plan(execution.kernels, features.ops)
    footprint = features.act_bytes
    weight_bytes = features.weight_bytes
    if plan.gemv_rows.any():
        # B GEMVs over one broadcast weight (HF's strided last-position lm_head, cost/execution.py): the
        # engines take sequences side by side, so the weight streams ceil(B / engines) times, as GEMVs.
        gemv = plan.gemv_rows > 0
        passes = np.where(gemv, np.ceil(plan.gemv_rows / hw.engines.count), 1.0)
        weight_bytes = weight_bytes * passes
        mnkb = features.gemm_mnkb.copy()
        mnkb[gemv, 0] = 1
        features = replace(features, gemm_mnkb=mnkb)
    scaled = features.with_work(features.flops, weight_bytes, features.act_bytes * plan.act_factor,
                                features.kv_bytes * plan.kv_factor)
    cold = features.act_bytes * plan.out_share if execution.cold_outputs else None
    if cold is not None and execution.fresh_pages is not None:
        # an output on new pages is written after its fault zeroed it in: no read for ownership from memory
        cold = np.where(cold >= execution.fresh_pages.min_bytes, 0.0, cold)
    stream_bytes = None
    if streaming is not None:
        # the measured streaming rate includes the reads for ownership of the outputs
        stream_bytes = np.where(streaming, scaled.act_bytes, 0.0)
        if cold is not None:
            cold = np.where(streaming, 0.0, cold)
    resident = None
    cache_bw = 0.0
    level = _activation_cache(hw)
    if execution.activations_in_cache and level is not None:
        cache_bw = float(level.bandwidth_bytes_per_s or 0.0)
        in_cache = scaled.act_bytes if cold is None else np.maximum(scaled.act_bytes - cold, 0.0)
        resident = np.where(footprint <= _chip_capacity_bytes(level, hw), in_cache, 0.0)
    kernel_s, call_s = _cold_costs(features, hw)
    if plan.graph_capture is not None:
        kernel_s = _graph_kernel_s(features, plan.graph_capture, hw, kernel_s)
    host_s = plan.module_calls * call_s + plan.grouped_mm_groups * execution.grouped_mm_group_s
    if execution.fresh_pages is not None and plan.alloc_bytes.size:
        host_s = host_s + fresh_page_s(plan.alloc_bytes, execution.fresh_pages)
    module_s = host_s if host_s.any() else None
    return scaled, _Execution(plan.launches, resident, cache_bw, cold, module_s, kernel_s, stream_bytes, plan.split)


def _graph_kernel_s(features: OpFeatures, capture: np.ndarray, hw: HardwareSpec,
                    kernel_s: np.ndarray | None) -> np.ndarray | None:
    """Per op: the fixed time per kernel where the profile replays a CUDA graph: ``execution.graph_node_s`` for
    the kernels the pass's graph holds (``cost.execution.graph_mode``, ``captured_kernels``), the launch cost
    (``kernel_s``, else ``launch_overhead_s``) for the rest; ``kernel_s`` unchanged when nothing is captured."""
    terms = engine_terms(hw.execution)
    captured = captured_kernels(capture, graph_mode(features.ops, terms))
    if not captured.any():
        return kernel_s
    return np.where(captured, terms.graph_node_s, hw.launch_overhead_s if kernel_s is None else kernel_s)


def streaming_ops(footprint_bytes: np.ndarray, hw: HardwareSpec) -> np.ndarray | None:
    """Per op: whether its activations (``footprint_bytes``, inputs and outputs) exceed the last on-chip
    level (the last with a bandwidth, as for ``activations_in_cache``; every op when there is none), so
    that they stream at ``efficiency.activation_stream``; None when the spec has no such factor."""
    if hw.efficiency.activation_stream is None:
        return None
    level = _activation_cache(hw) or (hw.memory[-2] if len(hw.memory) > 1 else None)
    if level is None:
        return np.ones(np.shape(footprint_bytes), dtype=bool)
    return np.asarray(footprint_bytes > _chip_capacity_bytes(level, hw))


def _activation_cache(hw: HardwareSpec) -> MemoryLevel | None:
    """The last on-chip level with a bandwidth (where ``activations_in_cache`` keeps activations), or None."""
    caches = [lv for lv in hw.memory[:-1] if lv.bandwidth_bytes_per_s]
    return caches[-1] if caches else None


def _chip_capacity_bytes(level: MemoryLevel, hw: HardwareSpec) -> float:
    """``level``'s capacity over the whole chip (times the engines for a per-engine level)."""
    return level.capacity_bytes * (hw.engines.count if level.per_engine else 1)


def fresh_page_s(alloc_bytes: np.ndarray, pages: FreshPages) -> np.ndarray:
    """Per op (rows of ``alloc_bytes``, its allocations' sizes): the page-fault time of those allocations of
    at least ``pages.min_bytes``, at ``pages.s_per_byte`` (``execution.fresh_pages``)."""
    return np.where(alloc_bytes >= pages.min_bytes, alloc_bytes, 0.0).sum(axis=-1) * pages.s_per_byte


#: Key of the previous same-role op per op in ``OpFeatures.plans``.
_PREVIOUS_SAME_ROLE = "(previous_same_role)"  # parenthesized: never an execution profile name


def _cold_costs(features: OpFeatures, hw: HardwareSpec) -> tuple[np.ndarray | None, np.ndarray | float]:
    """Per op: (overhead per kernel or None for ``launch_overhead_s``, cost per module call).

    With ``execution.cold_by_reuse``, each from the measured points at the op's reuse distance: the
    compulsory bytes the forward moves between the previous run of the op's code (the same op in the
    layer before, or in the forward before) and the op (:func:`~layerscope.cost.execution.reuse_bytes`),
    interpolated linearly in log bytes and held at the ends. Measured on the reference CPU (2 cores,
    32 MiB L3), a one-row RMSNorm module in a layer of one-row GEMVs took 15-17 µs when the layers
    streamed 20-44 MiB each, 22 µs at 80 MiB and 52-57 µs at 224 MiB, whatever the bytes right before it.
    """
    points = hw.execution.cold_by_reuse
    if not points:
        return None, hw.execution.module_call_s
    previous = features.plans.get(_PREVIOUS_SAME_ROLE)
    if previous is None:
        previous = features.plans[_PREVIOUS_SAME_ROLE] = previous_same_role(features.ops)
    distance = np.log(np.maximum(reuse_bytes(previous, features.total_bytes), 1.0))
    at = np.log([p.reuse_bytes for p in points])
    return (np.interp(distance, at, [p.kernel_s for p in points]),
            np.interp(distance, at, [p.module_call_s for p in points]))


#: Share of a gated expert's weights in its gate-up projection (2·H·I of 3·H·I; graph/moe.py).
EXPERT_GATE_UP_SHARE = 2.0 / 3.0
#: Key of the experts' down-projection K per op in ``OpFeatures.plans`` (0 for other ops).
_EXPERT_DOWN_K = "(expert_down_k)"  # parenthesized: never an execution profile name


@static_per_spec
def weight_stream_factor(features: OpFeatures, hw: HardwareSpec) -> np.ndarray | None:
    """Per op: the factor on the main-memory bandwidth at which its weights stream, from the measured
    (K, factor) table of its dtype (``efficiency.weight_stream_k``) at the op's reduction width K,
    interpolated linearly in log K and held at the table's ends; 1 for ops without weights or a
    GEMM shape and for dtypes without a table. None when the spec has no table at all. A routed-experts
    op blends its two projections' K (hidden size, expert width), weighted by their bytes."""
    if not hw.efficiency.weight_stream_k:
        return None
    k = features.gemm_mnkb[:, 2].astype(np.float64)
    has_weights = (np.asarray(features.weight_bytes).reshape(-1, len(k)) > 0).any(axis=0)
    applies = (k > 0) & has_weights
    factor = _per_dtype_rows(features, applies, k, hw.weight_stream_k)
    quantized = weight_only_dtypes(features)
    for code in distinct(quantized[quantized >= 0]):
        # weight-only quantized GEMMs (int4/int8 weights, 16-bit arithmetic) stream at their weight dtype's rate,
        # which holds the in-kernel dequantization (hardware.kernel_fit.weight_only_stream)
        rows = hw.weight_stream_k(DTYPE_ORDER[code])
        sel = applies & (quantized == code)
        if rows and sel.any():
            factor[sel] = rows_fraction(rows, k[sel])
    # one scan of the routed-experts ops per graph, not per cost call
    down_k = _per_op(features, _EXPERT_DOWN_K, lambda _, op: float(op.attr("expert_intermediate", 0) or 0),  # type: ignore[arg-type]
                     np.float64, 0.0, only=features.kind_mask("moe_experts"))
    if len(down_k) == len(k) and (down_k > 0).any():
        # Routed experts: the gate-up projection (2/3 of an expert's weights) reduces over the hidden
        # size (the op's K), the down projection (1/3) over the expert width, each streaming at its
        # own K's rate; the op's weight bytes take the time-weighted (harmonic) mean of the two.
        sel = applies & (down_k > 0)
        down = _per_dtype_rows(features, sel, down_k, hw.weight_stream_k)
        factor[sel] = 1.0 / (EXPERT_GATE_UP_SHARE / factor[sel] + (1.0 - EXPERT_GATE_UP_SHARE) / down[sel])
    return factor


#: Key of the weight-only quantized ops' weight dtype codes in ``OpFeatures.plans``.
_WEIGHT_ONLY = "(weight_only)"  # parenthesized: never an execution profile name


def weight_only_dtypes(features: OpFeatures) -> np.ndarray:
    """Per op: the :data:`DTYPE_ORDER` code of its weights where they are narrower than the type its arithmetic
    runs in (a weight-only quantized GEMM: W4A16, W8A16), else -1."""
    if features.weight_only_code is not None and len(features.weight_only_code) == len(features.kinds):
        return features.weight_only_code  # extracted with the features

    def code(i: int, op: Op) -> int:
        weights = [t.dtype for t in op.inputs if t.role == "weight"]
        narrower = weights and op.gemm is not None and weights[0].bits < DTYPE_ORDER[features.dtype_code[i]].bits
        return DTYPE_ORDER.index(weights[0]) if narrower else -1

    return _per_op(features, _WEIGHT_ONLY, code, np.int64, -1, only=np.asarray(features.gemm_mnkb.any(axis=1)))


def _main_memory_s(bytes_: np.ndarray, features: OpFeatures, bw: float, factor: np.ndarray | None,
                   run: _Execution, hw: HardwareSpec) -> np.ndarray:
    """Time of ``bytes_`` of main-memory traffic at ``bw``, the op's weight bytes among them (at most
    all of them) at ``bw`` times its :func:`weight_stream_factor`, and its streaming activation bytes
    (``run.stream_bytes``, at most the rest) at ``bw`` times ``efficiency.activation_stream``."""
    if factor is None and run.stream_bytes is None:
        return bytes_ / bw
    rest, faster_s = bytes_, 0.0
    if factor is not None:
        weights = np.minimum(features.weight_bytes, bytes_)
        rest, faster_s = bytes_ - weights, weights / (bw * factor)
    if run.stream_bytes is not None:
        streamed = np.minimum(run.stream_bytes, rest)
        rest, faster_s = rest - streamed, faster_s + streamed / (bw * (hw.efficiency.activation_stream or 1.0))
    return rest / bw + faster_s


def _memory_s(bytes_: np.ndarray, hw: HardwareSpec, run: _Execution, features: OpFeatures) -> np.ndarray:
    """Main-memory time of ``bytes_`` (plus any read-for-ownership bytes), less the cache-resident
    bytes, which move at cache bandwidth; weights stream at their measured rate (:func:`weight_stream_factor`)."""
    bw = hw.achievable_bandwidth_bytes_per_s()
    factor = weight_stream_factor(features, hw)
    extra = 0.0 if run.write_allocate_bytes is None else run.write_allocate_bytes / bw
    if run.resident_bytes is None:
        return _decode_attention_s(_main_memory_s(bytes_, features, bw, factor, run, hw) + extra, bytes_,
                                   features, hw)
    resident = np.minimum(run.resident_bytes, bytes_)
    return _main_memory_s(bytes_ - resident, features, bw, factor, run, hw) + resident / run.cache_bw + extra


def _network(features: OpFeatures, hw: HardwareSpec) -> CollectiveTerms | None:
    """:func:`~layerscope.cost.collectives.communication_terms` of ``features``; None for a graph without
    communication ops, for which that module (its algorithms and tables) is not imported."""
    if "communication" not in features.kinds:
        return None
    from layerscope.cost.collectives import communication_terms

    return communication_terms(features, hw)


def _combine(compute_s: np.ndarray, memory_s: np.ndarray, overhead_s: float,
             memory_bytes: np.ndarray, run: _Execution = _DEFAULT_EXECUTION,
             network: CollectiveTerms | None = None) -> CostArrays:
    # Kernel time = max(compute, memory) + launch overhead (roofline with a fixed per-kernel term);
    # an op run as several kernels pays the overhead once per kernel, and its module calls' time.
    # Communication ops on an interconnect (cost.collectives): memory is the collective's own HBM traffic, and
    # the op takes at least the collective's α-β time, which holds its kernel's launch (fitted on whole NCCL calls).
    if network is not None:
        memory_s, memory_bytes = network.memory(memory_s, memory_bytes)
    busy = np.maximum(compute_s, memory_s) if run.split is None else kernels_in_sequence_s(compute_s, memory_s,
                                                                                          run.split)
    per_kernel = overhead_s if run.kernel_s is None else run.kernel_s
    overhead = np.broadcast_to(per_kernel if run.launches is None else per_kernel * run.launches,
                               busy.shape).copy()
    if run.module_s is not None:
        overhead = overhead + run.module_s
    time_s = busy + overhead
    bound = np.where(compute_s >= memory_s, BOUND_COMPUTE, BOUND_MEMORY)
    bound = np.where(overhead > busy, BOUND_OVERHEAD, bound)
    if network is not None:
        slower = network.mask & (network.network_s > time_s)
        time_s = np.where(slower, network.network_s, time_s)
        bound = np.where(slower, BOUND_NETWORK, bound)
    return CostArrays(compute_s, memory_s, overhead, time_s, memory_bytes, bound.astype(np.int8))


def kernels_in_sequence_s(compute_s: np.ndarray, memory_s: np.ndarray, split: np.ndarray) -> np.ndarray:
    """Per op: the sum over its kernels of ``max(compute share · compute_s, bytes share · memory_s)``, the
    kernels of ``split`` ([ops, kernels, 2], ``KernelPlan.split``) running one after the other; ``max(compute_s,
    memory_s)`` for an op of one kernel. Broadcasts over leading dimensions of the times."""
    flops_share, bytes_share = split[..., 0], split[..., 1]
    per_kernel = np.maximum(np.asarray(compute_s)[..., None] * flops_share,
                            np.asarray(memory_s)[..., None] * bytes_share)
    return per_kernel.sum(axis=-1)


def roofline(features: OpFeatures, hw: HardwareSpec) -> CostArrays:
    """``max(FLOPs / achievable FLOP/s, bytes / achievable B/s) + launch overhead``.

    Bytes are the op's compulsory traffic (every operand read once, every output written once):
    the roofline's assumption of perfect on-chip reuse (Williams, Waterman & Patterson, CACM 2009).
    """
    network = _network(features, hw)
    features, run = _prepare(features, hw)
    bytes_ = features.total_bytes
    reread = row_reread_bytes(features, hw)
    if reread is not None:
        bytes_ = bytes_ + reread
    memory_s = _memory_s(bytes_, hw, run, features)
    return _combine(compute_time_s(features, hw), memory_s, hw.launch_overhead_s, bytes_, run, network)


#: Op kinds that run as one kernel reducing each row of their input and then mapping over the same row.
ROW_REDUCTION_KINDS = frozenset({"norm"})


@static_per_spec
def row_reread_bytes(features: OpFeatures, hw: HardwareSpec) -> np.ndarray | None:
    """Per op: the input bytes read a second time by a row reduction whose rows do not fit on chip
    (:func:`~layerscope.hardware.spec.row_input_reads`; a row is the input's last dimension, shared by the
    op's attribute ``row_cluster`` engines, default 1); None when no op re-reads (every norm of a decoder LM:
    a 16K-wide bf16 row is 32 KB)."""
    capacity = hw.row_capacity_bytes()
    if capacity is None:
        return None
    rows = np.any([features.kind_mask(kind) for kind in ROW_REDUCTION_KINDS], axis=0)
    if not rows.any():
        return None
    rep_of = features.rep_of
    if rep_of is not None and len(rep_of) == len(rows) and len(features.ops) == len(rows):
        # the row reductions' few template ops decide first: most graphs have none that re-reads
        reps = features.reps
        if all(row_input_reads(_row_bytes(reps[j]), capacity, _row_cluster(reps[j])) == 1
               for j in distinct(rep_of[rows])):
            return None
    row_bytes = _per_op(features, _ROW_BYTES, lambda _, op: _row_bytes(op), np.float64, 0.0, only=rows)
    rows &= row_bytes > 0  # none where the features carry no ops
    if not rows.any():
        return None
    cluster = _per_op(features, _ROW_CLUSTER, lambda _, op: _row_cluster(op), np.int64, 1, only=rows)
    # one call of the rule per distinct (row bytes, cluster) of the graph's row reductions (a model has one or two)
    again = np.zeros(len(rows), dtype=bool)
    for b, c in set(zip(row_bytes[rows].tolist(), cluster[rows].tolist(), strict=True)):
        if row_input_reads(b, capacity, c) > 1:
            again |= rows & (row_bytes == b) & (cluster == c)
    if not again.any():
        return None
    return np.where(again, _per_op(features, _ROW_INPUT_BYTES, lambda _, op: float(op.inputs[0].nbytes), np.float64,
                                   0.0, only=rows), 0.0)


def _row_bytes(op: Op) -> float:
    """Bytes of one row of a row reduction: its input's last dimension."""
    return float(op.inputs[0].shape[-1] * op.inputs[0].dtype.bytes)


def _row_cluster(op: Op) -> int:
    """Engines sharing one row of a row reduction (its attribute ``row_cluster``, default 1)."""
    return int(op.attr("row_cluster", 1))  # type: ignore[call-overload]


#: Keys of the row reductions' per-op facts in ``OpFeatures.plans`` (parenthesized: never an execution profile).
_ROW_BYTES, _ROW_CLUSTER, _ROW_INPUT_BYTES = "(row bytes)", "(row cluster)", "(row input bytes)"


# ---------------------------------------------------------------------------------------------
# Tiling


TILE_MODES = ("free", "one_fixed", "two_fixed")


def _candidates(dim: int) -> np.ndarray:
    """Power-of-two tile sizes from 16 up to ``dim`` (and ``dim`` itself)."""
    sizes = [16]
    while sizes[-1] < dim:
        sizes.append(sizes[-1] * 2)
    sizes = [min(s, dim) for s in sizes]
    return np.unique(np.array(sizes, dtype=np.int64))


@lru_cache(maxsize=65536)
def gemm_tiled_traffic_bytes(m: int, n: int, k: int, a_bytes: float, b_bytes: float, c_bytes: float,
                             capacity_bytes: float) -> tuple[float, int, int, int]:
    """Least off-chip traffic of one (m x k) @ (k x n) product tiled for a cache of ``capacity_bytes``.

    Output-stationary tiling (Goto & van de Geijn, ACM TOMS 2008; the tile search of LLMCompass,
    Zhang et al., ISCA 2024): a tm x tn tile of C stays on chip while tk-deep panels of A and B
    stream through, so A is read ceil(n/tn) times, B ceil(m/tm) times and C written once:

        traffic = m*k*a*ceil(n/tn) + k*n*b*ceil(m/tm) + m*n*c
        subject to (tm*tk*a + tk*tn*b + tm*tn*c) <= capacity

    Three searches, as in hardware studies: all three tile dims free; one fixed (tk = k, whole
    reduction panels); two fixed (tk = k and tm = m: the activation block stays resident while
    weights stream once — the decode/GEMV case — or tk = k and tn = n). Returns
    (traffic_bytes, tm, tn, tk) of the best tiling; when nothing fits, the 16x16x16 tiling.
    """
    best: tuple[float, int, int, int] | None = None
    tms, tns, tks = _candidates(m), _candidates(n), _candidates(k)
    shapes: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = [
        (tms, tns, tks),  # free
        (tms, tns, np.array([k])),  # one fixed: tk = k
        (np.array([m]), tns, np.array([k])),  # two fixed: tm = m, tk = k
        (tms, np.array([n]), np.array([k])),  # two fixed: tn = n, tk = k
    ]
    for tm_c, tn_c, tk_c in shapes:
        tm, tn, tk = np.meshgrid(tm_c, tn_c, tk_c, indexing="ij")
        footprint = tm * tk * a_bytes + tk * tn * b_bytes + tm * tn * c_bytes
        ok = footprint <= capacity_bytes
        if not ok.any():
            continue
        traffic = (m * k * a_bytes * np.ceil(n / tn) + k * n * b_bytes * np.ceil(m / tm)
                   + m * n * c_bytes)
        traffic = np.where(ok, traffic, np.inf)
        # Ties go to the larger tile (fewer, bigger kernels' worth of work per tile).
        idx = np.lexsort((-(tm * tn * tk).ravel(), traffic.ravel()))[0]
        cand = (float(traffic.ravel()[idx]), int(tm.ravel()[idx]), int(tn.ravel()[idx]), int(tk.ravel()[idx]))
        if best is None or cand[0] < best[0]:
            best = cand
    if best is None:
        t = 16
        traffic = m * k * a_bytes * math.ceil(n / t) + k * n * b_bytes * math.ceil(m / t) + m * n * c_bytes
        best = (float(traffic), min(t, m), min(t, n), min(t, k))
    return best


def _shared_cache(hw: HardwareSpec) -> MemoryLevel | None:
    """The largest on-chip level shared by all engines (L2 on GPUs, L3 on CPUs)."""
    on_chip = [lvl for lvl in hw.memory[:-1] if not lvl.per_engine]
    return max(on_chip, key=lambda lvl: lvl.capacity_bytes) if on_chip else None


def _gemm_traffic(features: OpFeatures, capacity_bytes: float) -> np.ndarray:
    """Tiled traffic per op for GEMM-shaped ops tiled for a cache of ``capacity_bytes``; NaN where
    the op has no GEMM shape."""
    out = np.full(len(features.kinds), np.nan)
    for i in np.flatnonzero(features.gemm_mnkb[:, 0] > 0):
        m, n, k, batch = (int(v) for v in features.gemm_mnkb[i])
        a, b, c = (float(v) for v in features.operand_bytes[i])
        traffic, *_ = gemm_tiled_traffic_bytes(m, n, k, a, b, c, float(capacity_bytes))
        out[i] = traffic * batch
    return out


def tiling(features: OpFeatures, hw: HardwareSpec) -> CostArrays:
    """Roofline whose memory term is the DRAM traffic implied by the best cache tiling.

    GEMM-shaped ops (projections, experts, attention matmuls) are tiled for the chip's shared
    on-chip cache; their traffic replaces the compulsory bytes when larger (it is never smaller:
    the search's best case reads each operand once). Other ops stream, with no reuse to gain.
    """
    network = _network(features, hw)
    features, run = _prepare(features, hw)
    level = _shared_cache(hw)
    bytes_ = features.total_bytes
    if level is not None:
        tiled = _gemm_traffic(features, level.capacity_bytes)
        bytes_ = np.where(np.isnan(tiled), bytes_, np.maximum(tiled, bytes_))
    memory_s = _memory_s(bytes_, hw, run, features)
    return _combine(compute_time_s(features, hw), memory_s, hw.launch_overhead_s, bytes_, run, network)


def hierarchical(features: OpFeatures, hw: HardwareSpec) -> CostArrays:
    """Traffic at every memory level from tile reuse; time = the slowest level or compute.

    For each adjacent pair of levels (inner, outer), GEMM-shaped ops are tiled for the inner
    level's capacity (a per-engine level: each engine's capacity; a shared level: its total) and
    the traffic crosses the outer level at its bandwidth; non-GEMM ops move their compulsory
    bytes across every level. Weights shared by a batch of tokens are fetched from main memory
    once per tile row and then hit the cache, which is what separates this from the roofline.
    Main memory uses the achievable (efficiency-scaled) bandwidth; on-chip levels their stated one.
    """
    network = _network(features, hw)
    features, run = _prepare(features, hw)
    compute_s = compute_time_s(features, hw)
    compulsory = features.total_bytes
    level_times = []
    main_bytes = compulsory
    levels = hw.memory
    factor = weight_stream_factor(features, hw)
    for inner, outer in itertools.pairwise(levels):
        capacity = inner.capacity_bytes
        tiled = _gemm_traffic(features, capacity)
        traffic = np.where(np.isnan(tiled), compulsory, np.maximum(tiled, compulsory))
        is_main = outer is levels[-1]
        bw = hw.achievable_bandwidth_bytes_per_s() if is_main else outer.bandwidth_bytes_per_s
        if is_main and run.resident_bytes is not None:
            # Cache-resident activations never reach main memory (they still cross the inner levels).
            traffic = traffic - np.minimum(run.resident_bytes, traffic)
        if is_main and run.write_allocate_bytes is not None:
            traffic = traffic + run.write_allocate_bytes
        if bw:
            level_times.append(_main_memory_s(traffic, features, bw, factor, run, hw) if is_main else traffic / bw)
        if is_main:
            main_bytes = traffic
    if len(levels) == 1:
        level_times.append(_main_memory_s(compulsory, features, hw.achievable_bandwidth_bytes_per_s(), factor, run,
                                          hw))
    memory_s = np.max(np.stack(np.broadcast_arrays(*level_times)), axis=0)
    return _combine(compute_s, memory_s, hw.launch_overhead_s, main_bytes, run, network)


CostModelFn = Callable[[OpFeatures, HardwareSpec], CostArrays]

#: Duration models by name.
COST_MODELS: Registry[CostModelFn] = Registry("cost model", CostModelError, {
    "roofline": roofline,
    "tiling": tiling,
    "hierarchical": hierarchical,
})


def get_cost_model(name: str) -> CostModelFn:
    """The registered model ``name``; an unknown name's error lists the known ones."""
    return COST_MODELS.lookup(name)
