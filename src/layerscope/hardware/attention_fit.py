"""Attention kernels fitted on published measurements (the AX and K attention rows of ``data/gpu-kernels.md``).

Two curves per GPU, in the cost model's own terms (``cost.models``), fitted like the GEMMs of
:mod:`layerscope.hardware.kernel_fit` by grid search on the log time error:

* **Prefill** (a fused FlashAttention-class kernel over M new tokens per sequence): the fraction of the
  dtype's datasheet peak it reaches grows with M, ``f(M) = e · M / (M + M½)`` (Hockney & Jesshope's
  half-performance form, 1988 §1.3.3, in the query length: a tiled kernel computes the diagonal tiles of a
  causal mask whole, pays its online-softmax bookkeeping per tile row and leaves SMs idle in the last wave,
  all of which shrink relative to the work as M grows: FlashAttention-3's causal H100 figure, K-08/K-09, goes
  from 292 TFLOP/s at 512 tokens to 616 at 16k). Causal and non-causal curves keep their own ``e`` and share
  one fixed cost per thread block, ``c`` key tiles, from which both ``M½`` follow (:func:`tile_half_m`:
  ``128·c`` non-causal, ``128·(1 + 2c)`` causal; fitted apart on H100's rows they came out 251 and 631
  tokens, ``c`` = 1.96 both ways); a row whose causality is not stated is read as non-causal (K-14, 430
  TFLOP/s at 512 tokens, is 1.5x the causal K-08 at the same length and the same batch x length, and K-12's
  621 TFLOP/s at 16k matches the non-causal K-04).
  Stored as ``efficiency.attention_rows`` (causal: what a decoder's prefill runs) and
  ``efficiency.attention_rows_noncausal`` (the cached part of a chunked prefill), tabulated at powers of two
  and divided by the GEMM efficiency the cost model applies first (``peak · matmul_for(dtype) · fraction``).
* **Decode** (one query token per sequence over a KV cache): memory-bound,
  ``t = t0 + floor + bytes / (B · e)`` with ``bytes`` the KV cache read plus the queries and outputs,
  ``B`` the datasheet HBM bandwidth, ``t0`` the preset's fixed cost per kernel (``launch_overhead_s``),
  ``floor`` the kernel's own fixed time beyond it (split-KV partial results and their reduction, the tail
  of a grid too small to fill the GPU: a 64 x 32-token paged decode, AX-12, takes 21 µs for 4 MB) and ``e``
  the achieved fraction of the bandwidth on long caches (``efficiency.attention_decode_memory``,
  ``efficiency.attention_decode_floor_s``). ``e`` is not fitted on the decode rows: a decode kernel reads its KV
  cache once, so on long caches it is a streaming kernel and ``e`` is the GPU's streaming efficiency (its memory
  rows' fit, ``efficiency.memory``); the decode rows pin only the floor beside it. Fitted freely, the two were
  confounded and the answer depended on which kernel the rows ran: H100's decode rows gave e = 0.72, a compromise
  between FlashAttention-3's paged decode at 8-token pages (AX-10, AX-11: 0.54-0.55 of the datasheet, which their
  reporter calls slower than FlashInfer) and FlashMLA (AX-07, AX-08: 0.84, its README's "up to 3000 GB/s" on the
  same HBM, AX-01: 0.90), while FlashInfer (K-30, K-31, L rows, never fitted) and our own H200 SDPA decode over
  a 537 MB cache (0.90, never fitted) stream at the rate of the copy and norm kernels. Held out by source,
  AX-07/AX-08 go from -31 % to -5 %, K-30/K-31 from -21 % to -5 % (bench/GPU-KERNELS.md).

Kernels that are not what an engine runs are left out, each for a reason the row itself gives
(:data:`NOT_SERVING`): PyTorch's unfused attention, FlashAttention 2.0.9's decode without split-KV
("GPU idle") and Triton's tutorial kernel (a teaching example no engine ships). Where several kernels were
measured at the same point (GPU, dtype, causality, length, head dim), only those within
:data:`SAME_KERNEL_SPREAD` of the fastest are fitted: an engine ships the fastest backend it has for the GPU
(FlashAttention-3 over FlashAttention-2 on H100: K-04 648 vs K-05 370 TFLOP/s); the slower rows stay in the
replay. The head dim enters as a second Hockney factor,
``d / (d + d½)`` (``efficiency.attention_half_head_dim``): a tile of a 64-wide head does half the MMA work per
byte of a 128-wide one (K-10, hdim 64: 497 TFLOP/s where K-04, hdim 128, reaches 648).
L rows are never fitted. A GPU without rows of a kind takes the fit of the first GPU along
``kernel_fit.NEAREST`` that has them, and its sources say so.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from layerscope.hardware.head_dim import REFERENCE_HEAD_DIM, head_dim_factor

if TYPE_CHECKING:
    from layerscope.hardware.kernel_table import KernelRow

#: Frameworks or notes marking a kernel no serving engine runs for this phase.
NOT_SERVING = re.compile(r"standard \(PyTorch\)|PyTorch eager|no split-KV|tutorial", re.IGNORECASE)
#: Rows at one point within this factor of the fastest are one kernel class measured twice (FlashAttention-3 in
#: its paper, K-04 648 TFLOP/s, and in tritonbench, K-12 621; cuDNN K-06 595); slower ones are older kernels
#: (FlashAttention-2, K-05 370).
SAME_KERNEL_SPREAD = 0.8
#: Element bytes of 16-bit attention operands (every decode row of the table is fp16 or bf16).
_ELEMENT_BYTES = 2.0
_TIME_IN_NOTES = re.compile(r"(\d+(?:\.\d+)?)\s*(us|µs|ms)\b")
#: Powers of two at which a fitted prefill curve is tabulated (the cost model interpolates in log M).
TABLE_M = tuple(float(2 ** k) for k in range(4, 17))

_GRID_E = np.linspace(0.20, 1.24, 53)
_GRID_HALF_M = np.concatenate(([0.0], np.logspace(0.5, 4.5, 41)))
_GRID_HALF_D = np.concatenate(([0.0], np.linspace(8.0, 160.0, 39)))
#: A thread block's fixed cost in key tiles (:func:`tile_half_m`): the M½ grid's reach, in tiles.
_GRID_BLOCK_COST = np.concatenate(([0.0], np.logspace(-1.5, 1.5, 61)))
#: Query rows (and keys) per tile of FlashAttention-2/-3's forward (Dao 2023, arXiv 2307.08691 §3.3; Shah et al.
#: 2024, arXiv 2407.08608 §4): one thread block per 128-row query tile.
KV_TILE = 128.0
_GRID_FLOOR_S = np.concatenate(([0.0], np.linspace(1e-6, 60e-6, 60)))


@dataclass(frozen=True)
class PrefillRow:
    """A prefill attention row: query length M, achieved fraction of its dtype's datasheet peak."""

    row: KernelRow
    dtype: str
    m: float
    fraction: float
    causal: bool
    head_dim: float


@dataclass(frozen=True)
class DecodeRow:
    """A decode attention row: the bytes it moves and its time."""

    row: KernelRow
    bytes: float
    time_s: float


@dataclass(frozen=True)
class PrefillFit:
    """``f(M, d) = efficiency · M / (M + half_m) · h(d)``: fraction of the datasheet peak at query length M and
    head dim d, with ``h`` the :func:`head_dim_factor` (1 at a 128-wide head)."""

    efficiency: float
    half_m: float
    half_d: float
    rows: tuple[str, ...]
    note: str = ""
    """Where the fit came from when not (only) from its own rows."""

    def fraction(self, m: np.ndarray | float, d: np.ndarray | float | None = None) -> np.ndarray:
        """At query length ``m``; at head dim ``d``, or at the reference head dim (the tabulated curve) when None."""
        m = np.asarray(m, dtype=np.float64)
        f = self.efficiency * m / (m + self.half_m)
        return f if d is None else f * head_dim_factor(d, self.half_d)


@dataclass(frozen=True)
class DecodeFit:
    """``t = t0 + floor_s + bytes / (bandwidth · efficiency)``."""

    efficiency: float
    floor_s: float
    rows: tuple[str, ...]
    rms_log_error: float
    note: str = ""


def _dtype_class(row: KernelRow) -> str | None:
    text = row.precision.lower()
    if "fp8" in text and "kv" not in text:
        return "fp8"
    if "bf16" in text or "fp16" in text:
        return "bf16"
    return None


def _usable(row: KernelRow, exclude_sources: Iterable[str], source_key: Callable[[KernelRow], str]) -> bool:
    return (row.kind == "attention" and row.attention is not None and row.value is not None and row.gpu is not None
            and "L" not in row.tags and source_key(row) not in set(exclude_sources)
            and not NOT_SERVING.search(f"{row.framework} {row.notes}"))


def prefill_rows(rows: Iterable[KernelRow], peaks: Callable[[str, str], float | None],
                 exclude_sources: Iterable[str] = (),
                 source_key: Callable[[KernelRow], str] = lambda r: r.source) -> list[PrefillRow]:
    """The fittable prefill rows: TFLOP/s at a stated query length on one GPU; ``peaks(gpu, dtype)`` is the
    datasheet peak in FLOP/s (None: the GPU has no preset)."""
    out = []
    for r in rows:
        shape = r.attention
        if not _usable(r, exclude_sources, source_key) or shape is None or shape.decode or r.unit != "TFLOPS":
            continue
        dtype = _dtype_class(r)
        peak = peaks(r.gpu or "", dtype) if dtype else None
        if dtype is None or peak is None or not r.input_len or "bwd" in r.description:
            continue
        out.append(PrefillRow(r, dtype, float(r.input_len), (r.value or 0.0) * 1e12 / peak, bool(shape.causal),
                              float(shape.head_dim or 128)))
    return fastest(out)


def fastest(rows: Sequence[PrefillRow]) -> list[PrefillRow]:
    """The rows within :data:`SAME_KERNEL_SPREAD` of the fastest at their point (GPU, dtype, causality, length,
    head dim), in table order: a slower kernel at the same point is not what an engine ships."""
    best: dict[tuple[object, ...], float] = {}
    for r in rows:
        key = (r.row.gpu, r.dtype, r.causal, r.m, r.head_dim)
        best[key] = max(best.get(key, 0.0), r.fraction)
    return [r for r in rows if r.fraction >= SAME_KERNEL_SPREAD * best[(r.row.gpu, r.dtype, r.causal, r.m, r.head_dim)]]


def decode_bytes(row: KernelRow) -> float | None:
    """KV cache read plus queries and outputs of a decode row, from its heads, head dim, batch and KV length."""
    shape = row.attention
    kv = row.kv_len or row.input_len
    if shape is None or not (shape.heads and shape.kv_heads and shape.head_dim and row.batch and kv):
        return None
    per_token = shape.kv_heads * shape.head_dim * (1 if shape.latent else 2) * _ELEMENT_BYTES
    query_out = shape.heads * (shape.head_dim + (shape.value_dim or shape.head_dim)) * _ELEMENT_BYTES
    return float(row.batch * (kv * per_token + query_out))


def row_time_s(row: KernelRow) -> float | None:
    """The row's time: its value in µs or ms, else the first time its notes quote (``27.6 us``, ``0.215 ms``)."""
    if row.unit == "us":
        return (row.value or 0.0) * 1e-6
    if row.unit == "ms":
        return (row.value or 0.0) * 1e-3
    match = _TIME_IN_NOTES.search(row.notes)
    if match is None:
        return None
    return float(match[1]) * (1e-3 if match[2] == "ms" else 1e-6)


def decode_rows(rows: Iterable[KernelRow], exclude_sources: Iterable[str] = (),
                source_key: Callable[[KernelRow], str] = lambda r: r.source) -> list[DecodeRow]:
    """The fittable decode rows: a time and the bytes its shape implies."""
    out = []
    for r in rows:
        if not _usable(r, exclude_sources, source_key) or r.attention is None or not r.attention.decode:
            continue
        nbytes, t = decode_bytes(r), row_time_s(r)
        if nbytes is not None and t is not None and t > 0:
            out.append(DecodeRow(r, nbytes, t))
    return out


def tile_half_m(block_cost: np.ndarray | float, *, causal: bool) -> np.ndarray:
    """The ``M½`` (tokens) of a fused attention kernel whose thread blocks each pay a fixed cost of ``block_cost``
    key tiles (loading the query tile, writing the output: the prologue and epilogue of FlashAttention's
    one-block-per-query-tile forward, Dao 2023 arXiv 2307.08691 §3.3) on top of one tile of work per key tile.

    With ``n = M / T`` query tiles of :data:`KV_TILE` rows, a non-causal block does ``n`` key tiles, so the useful
    share of its time is ``n / (n + c)`` = ``M / (M + T·c)``. A causal block ``j`` does ``j + 1`` (its diagonal
    tile whole), ``n(n + 1)/2`` in all for ``n²/2`` tiles of useful pairs: ``n / (n + 1 + 2c)`` =
    ``M / (M + T·(1 + 2c))``. One kernel's two curves thus share ``c``."""
    c = np.asarray(block_cost, dtype=np.float64)
    return KV_TILE * (1.0 + 2.0 * c) if causal else KV_TILE * c


def fit_prefill(rows: Sequence[PrefillRow], *, half_m: float | None = None,
                half_d: float | None = None) -> PrefillFit | None:
    """``e``, ``M½`` and ``d½`` minimizing the RMS log error of ``f(M, d)`` over ``rows`` (``M½``, ``d½`` held
    where given: one row pins only ``e``; ``d½`` is fitted only where the rows have two head dims); None
    without rows."""
    if not rows:
        return None
    m = np.array([r.m for r in rows])
    d = np.array([r.head_dim for r in rows])
    f = np.array([r.fraction for r in rows])
    halves = np.array([half_m]) if half_m is not None else _GRID_HALF_M
    if half_d is None:
        half_d = None if len(set(d.tolist())) > 1 else 0.0
    halves_d = _GRID_HALF_D if half_d is None else np.array([half_d])
    # [e, M½, d½, rows]
    hd = halves_d[None, None, :, None]
    pred = (_GRID_E[:, None, None, None] * m / (m + halves[None, :, None, None])
            * d / (d + hd) * (REFERENCE_HEAD_DIM + hd) / REFERENCE_HEAD_DIM)
    err = np.sqrt(np.mean(np.log(pred / f) ** 2, axis=-1))
    i, j, k = np.unravel_index(int(np.argmin(err)), err.shape)
    return PrefillFit(efficiency=round(float(_GRID_E[i]), 4), half_m=round(float(halves[j]), 1),
                      half_d=round(float(halves_d[k]), 1), rows=tuple(r.row.id for r in rows))


def fit_prefill_pair(causal: Sequence[PrefillRow], noncausal: Sequence[PrefillRow], *,
                     half_d: float | None = None) -> tuple[PrefillFit, PrefillFit]:
    """The causal and non-causal curves of one kernel family fitted together: ``e`` apart, one fixed cost per
    thread block ``c`` (:func:`tile_half_m`) for both, and ``d½`` (held where given, fitted where the rows have
    two head dims), minimizing the RMS log error over all the rows."""
    rows = [*causal, *noncausal]
    m = np.array([r.m for r in rows])
    d = np.array([r.head_dim for r in rows])
    f = np.array([r.fraction for r in rows])
    is_causal = np.array([r.causal for r in rows])
    if half_d is None:
        half_d = None if len(set(d.tolist())) > 1 else 0.0
    halves_d = _GRID_HALF_D if half_d is None else np.array([half_d])
    half_m = np.where(is_causal[None, :], tile_half_m(_GRID_BLOCK_COST[:, None], causal=True),
                      tile_half_m(_GRID_BLOCK_COST[:, None], causal=False))  # [c, rows]
    # [e, c, d½, rows]; each causality's e is chosen apart, as the other's rows do not depend on it
    hd = halves_d[None, None, :, None]
    pred = (_GRID_E[:, None, None, None] * m / (m + half_m[None, :, None, :])
            * d / (d + hd) * (REFERENCE_HEAD_DIM + hd) / REFERENCE_HEAD_DIM)
    sq = np.log(pred / f) ** 2
    loss_c = np.where(is_causal, sq, 0.0).sum(axis=-1)  # [e, c, d½]
    loss_nc = np.where(is_causal, 0.0, sq).sum(axis=-1)
    best_c, best_nc = loss_c.argmin(axis=0), loss_nc.argmin(axis=0)  # [c, d½]
    total = loss_c.min(axis=0) + loss_nc.min(axis=0)
    j, k = np.unravel_index(int(np.argmin(total)), total.shape)
    block = float(_GRID_BLOCK_COST[j])
    out = []
    for subset, flag, i in ((causal, True, best_c[j, k]), (noncausal, False, best_nc[j, k])):
        out.append(PrefillFit(efficiency=round(float(_GRID_E[i]), 4),
                              half_m=round(float(tile_half_m(block, causal=flag)), 1),
                              half_d=round(float(halves_d[k]), 1), rows=tuple(r.row.id for r in subset),
                              note=(f"fitted with the {'non-causal' if flag else 'causal'} rows "
                                    f"{', '.join(r.row.id for r in (noncausal if flag else causal))}: "
                                    f"one fixed cost per thread block, {block:.3g} key tiles")))
    return out[0], out[1]


def fit_decode(rows: Sequence[DecodeRow], bandwidth_bytes_per_s: float, overhead_s: float,
               efficiency: float | None = None) -> DecodeFit | None:
    """``e`` and ``floor`` minimizing the RMS log time error over ``rows``, or the floor alone beside a given
    ``efficiency`` (the GPU's streaming efficiency, as presets are fitted). None without rows, or with fewer than
    two distinct byte counts when ``e`` is fitted too (one row cannot separate the floor from the bandwidth)."""
    if not rows or (efficiency is None and len({round(r.bytes) for r in rows}) < 2):
        return None
    nbytes = np.array([r.bytes for r in rows])
    t = np.array([r.time_s for r in rows])
    grid_e = _GRID_E if efficiency is None else np.array([efficiency])
    pred = (overhead_s + _GRID_FLOOR_S[None, :, None]
            + nbytes / (bandwidth_bytes_per_s * grid_e[:, None, None]))
    err = np.sqrt(np.mean(np.log(pred / t) ** 2, axis=-1))
    i, j = np.unravel_index(int(np.argmin(err)), err.shape)
    return DecodeFit(efficiency=round(float(grid_e[i]), 4), floor_s=round(float(_GRID_FLOOR_S[j]), 9),
                     rows=tuple(r.row.id for r in rows), rms_log_error=float(err[i, j]))


@dataclass(frozen=True)
class AttentionFits:
    """A GPU's prefill curves by (dtype class, causal) and its decode fit."""

    prefill: dict[tuple[str, bool], PrefillFit]
    decode: DecodeFit | None


def fit_gpu(gpu: str, prefill: Sequence[PrefillRow], decode: Sequence[DecodeRow], bandwidth_bytes_per_s: float,
            overhead_s: float, decode_efficiency: float | None = None) -> AttentionFits:
    """Every attention curve of ``gpu`` its own rows pin down.

    A set with one row keeps the ``M½`` of the same dtype's other causality, or of the 16-bit curve of the
    same causality; an fp8 causal curve without rows is the 16-bit causal one scaled by the fp8/16-bit ratio
    of the non-causal efficiencies (FlashAttention-3's fp8 path keeps the 16-bit tiling). ``decode_efficiency``
    (the GPU's streaming efficiency) fixes the decode fit's ``e``, so that its rows pin only the floor."""
    own = [r for r in prefill if r.row.gpu == gpu]
    sets = {(dt, causal): [r for r in own if r.dtype == dt and r.causal == causal]
            for dt in ("bf16", "fp8") for causal in (True, False)}
    fits: dict[tuple[str, bool], PrefillFit] = {}
    half_d: float | None = None  # one d½ per GPU: from the first set with two head dims
    for dt in ("bf16", "fp8"):  # both causalities of a dtype: one kernel, one fixed cost per block
        both = sets[(dt, True)] + sets[(dt, False)]
        if sets[(dt, True)] and sets[(dt, False)] and len({(r.causal, r.m) for r in both}) >= 3:
            fits[(dt, True)], fits[(dt, False)] = fit_prefill_pair(sets[(dt, True)], sets[(dt, False)], half_d=half_d)
            if len({r.head_dim for r in both}) > 1:
                half_d = fits[(dt, True)].half_d
    for key in sorted(sets, key=lambda k: -len(sets[k])):  # the best-pinned sets first
        if key in fits:
            continue
        rows = sets[key]
        if len(rows) >= 2 and len({r.m for r in rows}) >= 2:
            fit = fit_prefill(rows, half_d=half_d)
            if fit is not None:
                fits[key] = fit
                if len({r.head_dim for r in rows}) > 1:
                    half_d = fit.half_d
    for key, rows in sets.items():
        if key in fits or not rows:
            continue
        dt, causal = key
        donor = fits.get((dt, not causal)) or fits.get(("bf16", causal))
        if donor is not None:
            fit = fit_prefill(rows, half_m=donor.half_m, half_d=donor.half_d)
            if fit is not None:
                fits[key] = PrefillFit(fit.efficiency, fit.half_m, fit.half_d, fit.rows,
                                       note=f"one length: M½ of the curve on rows {', '.join(donor.rows)}")
    if ("fp8", True) not in fits and ("fp8", False) in fits and ("bf16", False) in fits and ("bf16", True) in fits:
        base, ratio = fits[("bf16", True)], fits[("fp8", False)].efficiency / fits[("bf16", False)].efficiency
        fits[("fp8", True)] = PrefillFit(round(base.efficiency * ratio, 4), base.half_m, base.half_d,
                                         base.rows + fits[("fp8", False)].rows,
                                         note=f"no fp8 causal rows: the 16-bit causal curve x {ratio:.3f}, the fp8 / "
                                              "16-bit ratio of the non-causal efficiencies")
    for dt in ("bf16", "fp8"):
        if (dt, True) not in fits and (dt, False) in fits:
            nc = fits[(dt, False)]
            block = nc.half_m / KV_TILE
            fits[(dt, True)] = PrefillFit(nc.efficiency, round(float(tile_half_m(block, causal=True)), 1), nc.half_d,
                                          nc.rows, note=f"no causal rows: the non-causal curve's fixed cost per thread "
                                                        f"block ({block:.3g} key tiles) on the causal mask's tiles")
    dec = fit_decode([r for r in decode if r.row.gpu == gpu], bandwidth_bytes_per_s, overhead_s, decode_efficiency)
    return AttentionFits(prefill=fits, decode=dec)


def tabulate(fit: PrefillFit, gemm_efficiency: float) -> list[list[float]]:
    """``fit`` as (M, fraction) pairs at :data:`TABLE_M`, as a fraction of the achievable GEMM rate (the cost
    model multiplies the dtype's ``peak · matmul_for(dtype)`` by it), capped at 1."""
    fractions = np.minimum(fit.fraction(np.array(TABLE_M)) / gemm_efficiency, 1.0)
    return [[m, round(float(f), 4)] for m, f in zip(TABLE_M, fractions, strict=True)]
