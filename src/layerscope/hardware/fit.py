"""Fit microbenchmark measurements into a :class:`HardwareSpec` (numpy only; no torch).

The measured tables (:class:`~layerscope.hardware.calibration.CalibrationMeasurements`) are
fitted to the very models the cost models evaluate, so a calibrated spec reproduces them:

* **Cache bandwidth and per-op overhead** — ``t = t0 + bytes / BW`` over copy/scale kernels
  (STREAM, McCalpin 1995) with cache-resident footprints; the overhead is the larger of the
  median one-element-add time (dispatch alone) and ``t0`` (dispatch plus the thread fork/join of
  real work). The cache bandwidth is kept when it is clearly faster than main memory.
* **Main-memory bandwidth** — ``t = overhead + bytes / BW`` over copy/scale kernels whose
  footprint is far beyond the last-level cache (the intercept fixed: the few large sizes would
  extrapolate it from far away).
* **GEMM throughput per dtype** — Hockney's two-parameter model (Hockney & Jesshope, *Parallel
  Computers 2*, 1988, §1.3.3): a GEMM of W FLOPs takes ``(W + W½) / r∞``, i.e. runs at
  ``r∞ · W / (W + W½)``; r∞ is the asymptotic rate and W½ the work at which half of it is
  reached. Fitted on the GEMMs that are clearly compute-bound (time minus overhead above twice
  the bytes/bandwidth time); the residuals are then taken over all GEMMs with the full roofline.
* **Vector FLOP rate** — the rate V for which ``max(F / V, bytes / BW) + overhead`` fits the
  non-matrix kernels that are slower than their memory time (norms, softmax rows); kernels of
  :data:`KIND_KERNELS` (greedy sampling's argmax, the SiLU) get their own rate per op kind,
  from the sizes that fit the last-level cache. Where one of those is faster than V, it is the
  spec's vector peak and V a fraction of it.
* **Activation streaming** — ``t = overhead + bytes / BW`` over the copy/scale kernels beyond the
  last-level cache on their median times, as a factor on the spec's main-memory bandwidth (the
  GEMV rate where measured): what elementwise ops too large for the cache reach.

Line fits minimize the sum of squared *relative* errors (weighted least squares with weights
1/t²), so microsecond and second-long kernels count alike; measurements more than
``OUTLIER_FACTOR`` times slower than the fit are dropped and the fit repeated (one-sided
trimming: interference from other processes only slows a kernel down). Degenerate inputs (fewer than two
distinct sizes in a range, times that do not grow with the work) raise :class:`HardwareSpecError`.

**Valid ranges.** A figure fitted outside the range the spec accepts (a weight-stream factor above
``MAX_STREAM_FACTOR``, a fraction of a peak that is not > 0, a bandwidth outside
:data:`BANDWIDTH_RANGE_BYTES_PER_S`) comes from disturbed measurements, not from the machine. An
optional figure is clamped to its bound or dropped, and listed in ``CalibrationFit.flags`` with the
measurements behind it (which ``layerscope calibrate`` re-measures first); the main-memory bandwidth,
which every spec needs, raises :class:`UnusableFitError` instead.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

import numpy as np

from layerscope.errors import HardwareSpecError
from layerscope.hardware.calibration import (
    AttentionTable,
    BandwidthFit,
    CalibrationFit,
    CalibrationFlag,
    CalibrationMeasurements,
    CalibrationRecord,
    FitStats,
    FreshPagesFit,
    GemmTable,
    MatmulFit,
    OverheadFit,
    StreamTable,
    VectorFit,
    VectorTable,
)
from layerscope.hardware.spec import MAX_STREAM_FACTOR, HardwareKind, HardwareSpec
from layerscope.units import DType

TableT = TypeVar("TableT", StreamTable, VectorTable)
KeyT = TypeVar("KeyT", int, str, tuple[int, int])

#: A GEMM (or vector kernel) counts as compute-bound when its time minus the overhead exceeds
#: this multiple of its bytes / bandwidth time: far enough from the roofline's ridge that the
#: memory term cannot be what is measured.
COMPUTE_BOUND_MARGIN = 2.0
#: Footprints at least this multiple of the last-level cache are main-memory measurements …
DRAM_FOOTPRINT_FACTOR = 4.0
#: … and at most this fraction of it are cache-resident.
CACHE_FOOTPRINT_FRACTION = 0.5
#: The cache bandwidth is kept only when it beats main memory by this factor.
CACHE_SPEEDUP_MIN = 1.2
#: A measurement this many times slower than the fit is disturbed (another process took the core
#: for a scheduler slice: interference only ever adds time) and is left out of the refit.
OUTLIER_FACTOR = 3.0
_TRIM_ROUNDS = 5
#: A tensor size faults its pages in when new tensors of it cost at least this fraction of the reused run
#: more (reference CPU: 0-15 % up to 31 MiB, where malloc reuses the heap; 400-700 % from 32 MiB on).
FRESH_FAULT_MIN_FRACTION = 0.5
#: … and a size faults when at least this share of its samples (new against reused, pairwise) do.
FRESH_FAULT_MIN_SHARE = 0.25

#: Bandwidths a fit may report, per device kind: an order of magnitude beyond any such machine on either side
#: (a CPU's DRAM streams 5-600 GB/s and its caches a few TB/s; a GPU's HBM 1-8 TB/s). A fit outside is
#: a disturbed (or corrupted) measurement, not the machine.
BANDWIDTH_RANGE_BYTES_PER_S: dict[HardwareKind, tuple[float, float]] = {"cpu": (1e8, 1e13), "gpu": (1e9, 1e14)}


class UnusableFitError(HardwareSpecError):
    """A figure every spec needs fitted outside its valid range; ``rows`` are the measurements behind it
    (``table[row]``), which a calibration run takes again before giving up."""

    def __init__(self, message: str, rows: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.rows = list(rows)


METHOD = (
    "weighted least squares on relative errors; cache: t = t0 + bytes/BW over footprints <= "
    f"{CACHE_FOOTPRINT_FRACTION:g}x LLC; overhead: max(median empty-op time, t0); memory: t = overhead + "
    f"bytes/BW over footprints >= {DRAM_FOOTPRINT_FACTOR:g}x LLC; GEMM: Hockney t - overhead = "
    f"(W + W_half)/r_inf on GEMMs with t - overhead > {COMPUTE_BOUND_MARGIN:g}x bytes/BW; vector: "
    f"t - overhead = F/V on kernels with t - overhead > {COMPUTE_BOUND_MARGIN:g}x bytes/BW"
)


def relative_stats(predicted: np.ndarray, measured: np.ndarray, outliers: int = 0) -> FitStats:
    """Residual statistics of ``predicted / measured - 1``."""
    predicted = np.asarray(predicted, dtype=float)
    measured = np.asarray(measured, dtype=float)
    if predicted.size == 0:
        return FitStats(points=0, outliers=outliers)
    rel = predicted / measured - 1.0
    return FitStats(points=int(rel.size), outliers=outliers, rms_rel_error=float(np.sqrt(np.mean(rel**2))),
                    median_abs_rel_error=float(np.median(np.abs(rel))),
                    max_abs_rel_error=float(np.max(np.abs(rel))))


def _check_times(time_s: np.ndarray, what: str) -> None:
    if not np.all(np.isfinite(time_s)) or np.any(time_s <= 0):
        raise HardwareSpecError(f"{what}: times must be finite and > 0, got {time_s.tolist()!r}")


def fit_line_relative(x: Sequence[float] | np.ndarray, y: Sequence[float] | np.ndarray,
                      what: str) -> tuple[float, float]:
    """``(a, b)`` minimizing Σ ((a + b·x − y) / y)²: a line fitted on relative errors.

    Weighted least squares with weights 1/y² (the normal equations of the 2x2 system). Needs at
    least two distinct ``x`` and positive ``y``.
    """
    xs = np.asarray(x, dtype=float)
    ys = np.asarray(y, dtype=float)
    if xs.shape != ys.shape or xs.ndim != 1:
        raise HardwareSpecError(f"{what}: x and y must be 1-D and of equal length")
    _check_times(ys, what)
    if np.unique(xs).size < 2:
        raise HardwareSpecError(
            f"{what}: need measurements at two or more distinct sizes to fit a line, got "
            f"{np.unique(xs).size} ({xs.size} points)")
    w = 1.0 / ys**2
    sw, swx, swxx = w.sum(), (w * xs).sum(), (w * xs * xs).sum()
    swy, swxy = (w * ys).sum(), (w * xs * ys).sum()
    det = sw * swxx - swx * swx
    a = (swxx * swy - swx * swxy) / det
    b = (sw * swxy - swx * swy) / det
    return float(a), float(b)


def fit_slope_relative(x: np.ndarray, y: np.ndarray) -> float:
    """``b`` minimizing Σ ((b·x − y) / y)² (a line through the origin on relative errors)."""
    ratio = np.asarray(x, dtype=float) / np.asarray(y, dtype=float)
    return float(ratio.sum() / (ratio**2).sum())


def robust_line(x: np.ndarray, y: np.ndarray, what: str, *,
                through_origin: bool = False) -> tuple[float, float, np.ndarray]:
    """``(a, b, kept)``: :func:`fit_line_relative` (or :func:`fit_slope_relative` when
    ``through_origin``, a = 0) repeated without the points more than ``OUTLIER_FACTOR`` x slower
    than the previous fit, until the kept set is stable (at most a few rounds). A negative
    intercept is noise around zero: the line is refitted through the origin."""
    xs = np.asarray(x, dtype=float)
    ys = np.asarray(y, dtype=float)
    kept = np.ones(xs.size, dtype=bool)
    a = b = 0.0
    for _ in range(_TRIM_ROUNDS):
        if through_origin:
            if not kept.any():
                raise HardwareSpecError(f"{what}: no measurements to fit")
            a, b = 0.0, fit_slope_relative(xs[kept], ys[kept])
        else:
            a, b = fit_line_relative(xs[kept], ys[kept], what)
            if a < 0:
                a, b = 0.0, fit_slope_relative(xs[kept], ys[kept])
        if b <= 0:
            break
        again = ys <= OUTLIER_FACTOR * (a + b * xs)
        enough = again.any() if through_origin else np.unique(xs[again]).size >= 2
        if not enough or np.array_equal(again, kept):
            break
        kept = again
    return a, b, kept


def fit_bandwidth(moved_bytes: Sequence[float] | np.ndarray, footprint_bytes: Sequence[float] | np.ndarray,
                  time_s: Sequence[float] | np.ndarray, *, min_footprint_bytes: float = 0.0,
                  max_footprint_bytes: float = float("inf"), intercept_s: float | None = None,
                  what: str = "bandwidth") -> BandwidthFit:
    """``time = intercept_s + moved_bytes / bandwidth`` over kernels whose footprint is in range.

    With ``intercept_s`` given only the bandwidth is fitted (on ``time - intercept_s``): for the
    main-memory range, whose few large sizes would otherwise extrapolate the intercept from far away.
    """
    moved = np.asarray(moved_bytes, dtype=float)
    foot = np.asarray(footprint_bytes, dtype=float)
    times = np.asarray(time_s, dtype=float)
    keep = (foot >= min_footprint_bytes) & (foot <= max_footprint_bytes)
    where = f"{what} (footprints {min_footprint_bytes:.3g}..{max_footprint_bytes:.3g} B)"
    moved, foot, times = moved[keep], foot[keep], times[keep]
    if intercept_s is None:
        fit_line_relative(moved, times, where)  # validates: two distinct sizes, positive times
        intercept, slope, kept = robust_line(moved, times, where)
    else:
        if not keep.any():
            raise HardwareSpecError(f"{where}: no measurements in this range")
        _check_times(times, where)
        busy = times - intercept_s
        if np.any(busy <= 0):
            raise HardwareSpecError(f"{where}: need kernels that take longer than the fixed {intercept_s:.3g} s, "
                                    f"got times {times.tolist()!r}")
        _, slope, kept = robust_line(moved, busy, where, through_origin=True)
        intercept = intercept_s
    if slope <= 0:
        raise HardwareSpecError(f"{where}: time does not grow with the bytes moved (slope {slope:.3g} s/B)")
    predicted = intercept + slope * moved[kept]
    return BandwidthFit(bandwidth_bytes_per_s=1.0 / slope, intercept_s=intercept,
                        min_footprint_bytes=float(foot.min()), max_footprint_bytes=float(foot.max()),
                        residuals=relative_stats(predicted, times[kept], int((~kept).sum())))


def gemm_flops_bytes(table: GemmTable) -> tuple[np.ndarray, np.ndarray]:
    """(2·m·n·k FLOPs, (m·k + k·n + m·n)·element bytes) of every row."""
    m, n, k = (np.asarray(col, dtype=float) for col in (table.m, table.n, table.k))
    elt = np.array([dt.bytes for dt in table.dtype], dtype=float)
    return 2.0 * m * n * k, (m * k + k * n + m * n) * elt


def hockney_time_s(flops: np.ndarray, peak_flops_per_s: float, half_flops: float) -> np.ndarray:
    """Compute time of GEMMs of ``flops`` work: (W + W½) / r∞ (Hockney & Jesshope 1988, §1.3.3)."""
    return (np.asarray(flops, dtype=float) + half_flops) / peak_flops_per_s


def fit_matmul(flops: np.ndarray, moved_bytes: np.ndarray, time_s: np.ndarray, *, bandwidth_bytes_per_s: float,
               overhead_s: float, what: str = "gemm") -> MatmulFit:
    """Hockney r∞ and W½ of one dtype's GEMMs; memory-bound ones only enter the residuals."""
    flops = np.asarray(flops, dtype=float)
    moved = np.asarray(moved_bytes, dtype=float)
    times = np.asarray(time_s, dtype=float)
    _check_times(times, what)
    busy = times - overhead_s
    memory_s = moved / bandwidth_bytes_per_s
    bound = busy > COMPUTE_BOUND_MARGIN * memory_s
    if np.unique(flops[bound]).size < 2:
        raise HardwareSpecError(
            f"{what}: need compute-bound GEMMs of two or more distinct sizes (time - overhead > "
            f"{COMPUTE_BOUND_MARGIN:g}x bytes/bandwidth), got {np.unique(flops[bound]).size} of {flops.size} "
            "GEMMs; add larger m to the grid")
    # A negative fixed cost is noise around zero: robust_line refits through the origin (W½ = 0).
    intercept, slope, kept_bound = robust_line(flops[bound], busy[bound], what)
    if slope <= 0:
        raise HardwareSpecError(f"{what}: time does not grow with the work (slope {slope:.3g} s/FLOP)")
    peak = 1.0 / slope
    half = intercept * peak
    predicted = np.maximum(hockney_time_s(flops, peak, half), memory_s) + overhead_s
    kept = times <= OUTLIER_FACTOR * predicted
    return MatmulFit(peak_flops_per_s=peak, half_flops=half, compute_bound_points=int(kept_bound.sum()),
                     residuals=relative_stats(predicted[kept], times[kept], int((~kept).sum())))


def fit_vector(kernel: Sequence[str], flops: np.ndarray, moved_bytes: np.ndarray, time_s: np.ndarray, *,
               bandwidth_bytes_per_s: float, overhead_s: float) -> VectorFit:
    """The vector FLOP rate V with ``t = max(F / V, bytes / BW) + overhead`` (see the module docstring).

    Fitted on the kernels whose time minus overhead exceeds the memory time by the margin; when
    none does, V is the largest rate any kernel implies, so the compute term never exceeds a
    measurement.
    """
    flops = np.asarray(flops, dtype=float)
    moved = np.asarray(moved_bytes, dtype=float)
    times = np.asarray(time_s, dtype=float)
    _check_times(times, "vector")
    names = np.asarray(list(kernel), dtype=object)
    busy = times - overhead_s
    memory_s = moved / bandwidth_bytes_per_s
    usable = (flops > 0) & (busy > 0)
    if not usable.any():
        raise HardwareSpecError("vector: no kernel with FLOPs takes longer than the per-op overhead")
    bound = usable & (busy > COMPUTE_BOUND_MARGIN * memory_s)
    if bound.any():
        rate = 1.0 / robust_line(flops[bound], busy[bound], "vector", through_origin=True)[1]
    else:
        rate = float(np.max(flops[usable] / busy[usable]))
    per_kernel = {
        str(name): 1.0 / robust_line(flops[bound & (names == name)], busy[bound & (names == name)], str(name),
                                     through_origin=True)[1]
        for name in dict.fromkeys(names[bound].tolist())}
    predicted = np.maximum(flops / rate, memory_s) + overhead_s
    kept = times <= OUTLIER_FACTOR * predicted
    return VectorFit(vector_flops_per_s=rate, per_kernel_flops_per_s=per_kernel,
                     residuals=relative_stats(predicted[kept], times[kept], int((~kept).sum())))


def _cold_by_reuse(meas: CalibrationMeasurements) -> tuple[list[float], list[float], list[float]]:
    """(reuse distances ascending, median per-kernel cost, median module-call cost at least 0) over the cold
    samples taken at each distance; three empty lists when the samples carry no distances."""
    if not meas.cold_reuse_bytes:
        return [], [], []
    reuse = np.asarray(meas.cold_reuse_bytes)
    kernel, call = np.asarray(meas.cold_op_s), np.asarray(meas.cold_module_call_s)
    sizes = sorted({float(b) for b in reuse})
    return (sizes, [float(np.median(kernel[reuse == b])) for b in sizes],
            [max(0.0, float(np.median(call[reuse == b]))) for b in sizes])


def fit_fresh_pages(meas: CalibrationMeasurements) -> FreshPagesFit | None:
    """The page-fault cost of large allocations from the fresh-allocation samples (None without any):
    per size, the medians' difference over the two tensors' bytes; a size faults when at least
    ``FRESH_FAULT_MIN_SHARE`` of its sample pairs cost ``FRESH_FAULT_MIN_FRACTION`` of the reused time more;
    the threshold is the smallest size from which every larger size measured faults, the cost per byte the
    median over the faulting sizes at least twice the threshold (all faulting sizes when none is)."""
    if not meas.fresh_alloc_bytes:
        return None
    size = np.asarray(meas.fresh_alloc_bytes)
    fresh, reused = np.asarray(meas.fresh_alloc_s), np.asarray(meas.reused_alloc_s)
    sizes = sorted({float(b) for b in size})
    extra, faulting = [], []
    for b in sizes:
        at = size == b
        new, old = float(np.median(fresh[at])), float(np.median(reused[at]))
        extra.append((new - old) / (2 * b))
        # Right at malloc's threshold the heap's top sometimes holds the tensor and sometimes not (reference
        # CPU, 32 MiB: 3 of 9 samples across three runs faulted in full, the rest not at all); inside a model,
        # where other large tensors are live, it faulted in every capture. A size faults when a quarter of
        # its samples do.
        hits = fresh[at] - reused[at] >= FRESH_FAULT_MIN_FRACTION * reused[at]
        faulting.append(bool(hits.mean() >= FRESH_FAULT_MIN_SHARE))
    first = len(sizes)
    while first > 0 and faulting[first - 1]:
        first -= 1
    if first == len(sizes):
        return FreshPagesFit(sizes_bytes=sizes, extra_s_per_byte=extra, faulting=faulting)
    # the cost per byte from sizes at least twice the threshold where measured: right above it malloc can
    # still serve one of the two tensors from the top of its heap (reference CPU: 55-130 µs/MiB at 32 MiB,
    # 120-180 at 64 MiB)
    clear = [e for b, e in zip(sizes[first:], extra[first:], strict=True) if b >= 2 * sizes[first]]
    return FreshPagesFit(sizes_bytes=sizes, extra_s_per_byte=extra, faulting=faulting, min_bytes=sizes[first],
                         s_per_byte=float(np.median(clear or extra[first:])))


def _refs(table: str, indices: Iterable[int]) -> list[str]:
    """Row references ``table[row]`` (``CalibrationFlag.rows``, ``CalibrationMeasurements.remeasured``)."""
    return [f"{table}[{i}]" for i in indices]


def _stream_refs(meas: CalibrationMeasurements, *, gemv: bool, min_footprint_bytes: float = 0.0,
                 max_footprint_bytes: float = float("inf")) -> list[str]:
    """The stream rows of the GEMV kernel (``gemv``) or of copy/scale, with footprints in range."""
    return _refs("stream", (i for i, (kernel, foot) in enumerate(zip(meas.stream.kernel, meas.stream.footprint_bytes,
                                                                     strict=True))
                            if (kernel == "gemv") == gemv and min_footprint_bytes <= foot <= max_footprint_bytes))


def _table_refs(meas: CalibrationMeasurements, table: str, keep: Callable[[dict[str, Any]], bool]) -> list[str]:
    """The rows of one column table of ``meas`` (as dicts of their cells) that ``keep`` accepts."""
    part = getattr(meas, table)
    columns = {col: list(getattr(part, col)) for col in type(part).model_fields}
    return _refs(table, (i for i in range(len(part)) if keep({col: values[i] for col, values in columns.items()})))


class _Flags:
    """The flags of one fit: each names the figure, its fitted value, the bound and what was done."""

    def __init__(self, meas: CalibrationMeasurements) -> None:
        self.meas = meas
        self.flags: list[CalibrationFlag] = []

    def add(self, figure: str, value: float, bound: str, rows: Sequence[str], *, at: str = "",
            replacement: float | None = None) -> None:
        self.flags.append(CalibrationFlag(
            figure=figure, at=at, value=float(value), bound=bound, rows=list(rows),
            action="dropped" if replacement is None else "clamped", replacement=replacement,
            remeasured=max((self.meas.remeasured.get(r, 0) for r in rows), default=0)))

    def bandwidth(self, fit: BandwidthFit | None, figure: str, rows: Sequence[str]) -> BandwidthFit | None:
        """``fit``, or None (flagged as dropped) when its bandwidth is outside the device's range."""
        if fit is None or _bandwidth_ok(fit.bandwidth_bytes_per_s, self.kind):
            return fit
        self.add(figure, fit.bandwidth_bytes_per_s, _bandwidth_bound(self.kind), rows)
        return None

    @property
    def kind(self) -> HardwareKind:
        return "gpu" if self.meas.device == "cuda" else "cpu"

    def rows_table(self, figure: str, table: dict[Any, list[Any]], rows_of: Callable[[Any, Any], list[str]],
                   label: Callable[[Any], str], *, high: float = 1.0,
                   clamp: bool = False) -> dict[Any, list[Any]]:
        """``table`` (per key, rows ending in a factor) with each factor outside (0, high] clamped to
        ``high`` (above it, when ``clamp``) or dropped (not > 0, NaN, infinite); a key left without rows
        is dropped. Every change is flagged."""
        out: dict[Any, list[Any]] = {}
        for key, rows in table.items():
            where = f"{figure}.{key.value if isinstance(key, DType) else key}"
            kept: list[Any] = []
            for row in rows:
                value = float(row[-1])
                if np.isfinite(value) and 0 < value <= high:
                    kept.append(row)
                elif clamp and np.isfinite(value) and value > high:
                    kept.append((*row[:-1], high))
                    self.add(where, value, f"(0, {high:g}]", rows_of(key, row), at=label(row), replacement=high)
                else:
                    self.add(where, value, f"(0, {high:g}]", rows_of(key, row), at=label(row))
            if kept:
                out[key] = kept
        return out


def _bandwidth_ok(bandwidth_bytes_per_s: float, kind: HardwareKind) -> bool:
    low, high = BANDWIDTH_RANGE_BYTES_PER_S[kind]
    return bool(np.isfinite(bandwidth_bytes_per_s)) and low <= bandwidth_bytes_per_s <= high


def _bandwidth_bound(kind: HardwareKind) -> str:
    low, high = BANDWIDTH_RANGE_BYTES_PER_S[kind]
    return f"[{low:.3g}, {high:.3g}] B/s (a {kind})"


def fit_measurements(meas: CalibrationMeasurements, *, llc_bytes: float) -> CalibrationFit:
    """Fit every figure of ``meas``; ``llc_bytes`` (the last-level cache) splits cache from main memory.

    Optional figures fitted outside their valid range are clamped or dropped and listed in the fit's
    ``flags``; a main-memory bandwidth outside :data:`BANDWIDTH_RANGE_BYTES_PER_S` raises
    :class:`UnusableFitError` (see the module docstring)."""
    if not llc_bytes > 0:
        raise HardwareSpecError(f"llc_bytes must be > 0 to tell cache from main memory, got {llc_bytes!r}")
    flags = _Flags(meas)
    dram = DRAM_FOOTPRINT_FACTOR * llc_bytes
    memory_rows = _stream_refs(meas, gemv=False, min_footprint_bytes=dram)
    stream, gemv = _split_stream(meas.stream)
    if not meas.empty_op_s:
        raise HardwareSpecError("no empty-op timings: cannot fit the per-op overhead")
    empty_op_s = float(np.median(meas.empty_op_s))
    cache: BandwidthFit | None = None
    try:
        cache = fit_bandwidth(stream.moved_bytes, stream.footprint_bytes, stream.time_s,
                              max_footprint_bytes=CACHE_FOOTPRINT_FRACTION * llc_bytes, what="cache bandwidth")
    except HardwareSpecError:
        cache = None  # too few cache-resident sizes: the overhead is the empty op's
    # an implausible cache line says nothing about its intercept either: the overhead is then the empty op's
    cache = flags.bandwidth(cache, "calibration.fit.cache", _stream_refs(
        meas, gemv=False, max_footprint_bytes=CACHE_FOOTPRINT_FRACTION * llc_bytes))
    intercept_s = cache.intercept_s if cache is not None else empty_op_s
    reuse, kernel_s, call_s = _cold_by_reuse(meas)
    overhead = OverheadFit(empty_op_s=empty_op_s, intercept_s=intercept_s,
                           launch_overhead_s=max(empty_op_s, intercept_s),
                           cold_op_s=kernel_s[-1] if kernel_s else
                           float(np.median(meas.cold_op_s)) if meas.cold_op_s else None,
                           module_call_s=call_s[-1] if call_s else
                           max(0.0, float(np.median(meas.cold_module_call_s))) if meas.cold_module_call_s else None,
                           grouped_mm_group_s=max(0.0, float(np.median(meas.grouped_mm_group_s)))
                           if meas.grouped_mm_group_s else None,
                           cold_reuse_bytes=reuse, cold_kernel_s=kernel_s, cold_module_call_by_reuse_s=call_s)
    memory = fit_bandwidth(stream.moved_bytes, stream.footprint_bytes, stream.time_s,
                           min_footprint_bytes=dram, intercept_s=overhead.launch_overhead_s,
                           what="main-memory bandwidth")
    if not _bandwidth_ok(memory.bandwidth_bytes_per_s, flags.kind):
        raise UnusableFitError(
            f"main-memory bandwidth (copy/scale beyond {DRAM_FOOTPRINT_FACTOR:g}x LLC): fitted "
            f"{memory.bandwidth_bytes_per_s:.4g} B/s, outside {_bandwidth_bound(flags.kind)}; a spec needs it "
            f"(measurements {', '.join(memory_rows)})", memory_rows)
    if cache is not None and cache.bandwidth_bytes_per_s < CACHE_SPEEDUP_MIN * memory.bandwidth_bytes_per_s:
        cache = None
    weight_stream = None
    if gemv is not None:
        weight_stream = flags.bandwidth(
            fit_bandwidth(gemv.moved_bytes, gemv.footprint_bytes, gemv.time_s, min_footprint_bytes=dram,
                          intercept_s=overhead.launch_overhead_s, what="GEMV weight streaming"),
            "calibration.fit.weight_stream", _stream_refs(meas, gemv=True, min_footprint_bytes=dram))
    main_rows = (_stream_refs(meas, gemv=True, min_footprint_bytes=dram) if weight_stream is not None
                 else memory_rows)
    bw = memory.bandwidth_bytes_per_s
    o = overhead.launch_overhead_s
    # A GEMM is compute-bound when its time is well beyond its bytes at the rate its (cold) weights
    # actually stream: the GEMV rate where measured (22 GB/s on the reference CPU, against 93 GB/s
    # for copies). At the copy rate, small-M GEMMs that only stream weights slowly (M = 2-8: 12-15
    # GB/s) passed as compute-bound and pulled the fitted r∞ from ~190 to ~155 GFLOP/s, below the
    # rate the same run measured at M = 1024 (189-195), so every large GEMM came out ~20% slow.
    gemm_bw = min(bw, weight_stream.bandwidth_bytes_per_s) if weight_stream is not None else bw
    gemm_flops, gemm_bytes = gemm_flops_bytes(meas.gemm)
    dtypes = np.array([dt.value for dt in meas.gemm.dtype], dtype=object)
    times = np.asarray(meas.gemm.time_s, dtype=float)
    matmul: dict[DType, MatmulFit] = {}
    for dt in dict.fromkeys(meas.gemm.dtype):
        rows = dtypes == dt.value
        matmul[dt] = fit_matmul(gemm_flops[rows], gemm_bytes[rows], times[rows], bandwidth_bytes_per_s=gemm_bw,
                                overhead_s=o, what=f"gemm {dt.value}")
    if not matmul:
        raise HardwareSpecError("no GEMM measurements: cannot fit the matrix throughput")
    activation_stream = None
    if weight_stream is not None:
        # median times, as for the GEMM tables: a model streams each tensor once per pass
        activation_stream = flags.bandwidth(
            fit_bandwidth(stream.moved_bytes, stream.footprint_bytes, stream.median_s, min_footprint_bytes=dram,
                          intercept_s=overhead.launch_overhead_s,
                          what="activation streaming (copy/scale, median times)"),
            "calibration.fit.activation_stream", memory_rows)
    if activation_stream is not None and weight_stream is not None:
        factor = activation_stream.bandwidth_bytes_per_s / weight_stream.bandwidth_bytes_per_s
        if factor > MAX_STREAM_FACTOR:  # calibrated_spec holds the bound
            flags.add("efficiency.activation_stream", factor, f"(0, {MAX_STREAM_FACTOR:g}]",
                      memory_rows + main_rows, replacement=MAX_STREAM_FACTOR)
    vec, kind_rows = _split_vector(meas.vector)
    vector = fit_vector(vec.kernel, np.asarray(vec.flops, dtype=float), np.asarray(vec.moved_bytes, dtype=float),
                        np.asarray(vec.time_s, dtype=float), bandwidth_bytes_per_s=bw, overhead_s=o)
    # the efficiency tables are fractions of at least every rate measured (else capped at 1)
    reference = {dt: max([fit.peak_flops_per_s] + [rate for table in (meas.gemm, meas.gemm_wide)
                                                   for _, _, rate in _achieved_rates(table, dt, o)])
                 for dt, fit in matmul.items()}

    def gemm_refs(dt: DType, m: float, n: float | None = None) -> list[str]:
        return [*_table_refs(meas, "gemm", lambda r: DType(r["dtype"]) == dt and r["m"] == m),
                *_table_refs(meas, "gemm_wide", lambda r: DType(r["dtype"]) == dt and r["m"] == m and r["n"] == n)]

    rows_m = flags.rows_table("calibration.fit.matmul_rows",
                              {dt: matmul_rows_efficiency(meas.gemm, dt, reference[dt], o) for dt in matmul},
                              lambda dt, row: gemm_refs(dt, row[0]), lambda row: f"M={row[0]:g}")
    shapes = flags.rows_table("efficiency.matmul_shapes",
                              {dt: matmul_shapes_efficiency(meas.gemm, meas.gemm_wide, dt, reference[dt], o)
                               for dt in matmul},
                              lambda dt, row: gemm_refs(dt, row[0], row[1]), lambda row: f"M={row[0]:g}, N={row[1]:g}")
    peaks = {dt: reference[dt] if dt in rows_m or dt in shapes else fit.peak_flops_per_s
             for dt, fit in matmul.items()}
    attention = flags.rows_table(
        "efficiency.attention_rows", {dt: attention_rows_efficiency(meas.attention, dt, peaks[dt], o) for dt in matmul},
        lambda dt, row: _table_refs(meas, "attention", lambda r: DType(r["dtype"]) == dt and r["query_len"] == row[0]),
        lambda row: f"M={row[0]:g}")
    kind_rates = vector_kind_rates(kind_rows, o, llc_bytes)
    vector_reference = max([vector.vector_flops_per_s, *kind_rates.values()])
    per_kind = flags.rows_table(
        "efficiency.vector_per_kind", {kind: [(rate / vector_reference,)] for kind, rate in kind_rates.items()},
        lambda kind, _: _table_refs(meas, "vector", lambda r: KIND_KERNELS.get(r["kernel"]) == kind),
        lambda _: "")
    fit = CalibrationFit(method=METHOD, matmul=matmul, memory=memory, cache=cache, vector=vector, overhead=overhead,
                         fresh_pages=fit_fresh_pages(meas), weight_stream=weight_stream,
                         matmul_rows=rows_m, matmul_shapes=shapes,
                         matmul_reference={dt: reference[dt] for dt in matmul if dt in rows_m or dt in shapes},
                         attention_rows=attention,
                         vector_per_kind={kind: rows[0][0] for kind, rows in per_kind.items()},
                         vector_reference_flops_per_s=(vector_reference if vector_reference > vector.vector_flops_per_s
                                                       else None),
                         activation_stream=activation_stream)
    # weight-stream factors are relative to the bandwidth the spec gives main memory; the disturbed
    # measurement behind a factor out of range is the GEMV row or the reference, so both are named
    main_bw = fit.main_memory.bandwidth_bytes_per_s
    factors = {dt: weight_stream_factors(meas.gemv, dt, main_bw, o) for dt in dict.fromkeys(meas.gemv.dtype)}
    weight_stream_k = flags.rows_table(
        "efficiency.weight_stream_k", {dt: f for dt, f in factors.items() if f},
        lambda dt, row: [*_table_refs(meas, "gemv", lambda r: DType(r["dtype"]) == dt and r["m"] == 1
                                      and r["k"] == row[0]), *main_rows],
        lambda row: f"K={row[0]:g}", high=MAX_STREAM_FACTOR, clamp=True)
    return fit.model_copy(update={"weight_stream_k": weight_stream_k, "flags": flags.flags})


#: Vector kernels of the calibration timed for one op kind of their own (``efficiency.vector_per_kind``)
#: and kept out of the pooled vector fit: kernel -> op kind. The SiLU is the first of the gated activation's two
#: kernels, which the cost models time one after the other (docs/execution-profiles.md, "Kernels in sequence").
KIND_KERNELS: dict[str, str] = {"argmax": "sampling", "silu": "activation"}
#: Kernels earlier calibrations timed that no fit uses: ``silu_mul`` (``silu(g) * u`` as one rate; its rows, in
#: measurements recorded before the SiLU was timed alone, would otherwise enter the pooled vector fit).
RETIRED_KERNELS = frozenset({"silu_mul"})


def _kernel_rows(table: TableT, keep: Callable[[str], bool]) -> TableT:
    """The rows of a table with a ``kernel`` column whose kernel ``keep`` accepts."""
    kernels = list(table.kernel)
    idx = [i for i, k in enumerate(kernels) if keep(k)]
    return type(table)(**{col: [getattr(table, col)[i] for i in idx] for col in type(table).model_fields})


def _split_vector(vector: VectorTable) -> tuple[VectorTable, VectorTable]:
    """The pooled rows (norms, softmax, elementwise), and the rows of :data:`KIND_KERNELS`."""
    return (_kernel_rows(vector, lambda k: k not in KIND_KERNELS and k not in RETIRED_KERNELS),
            _kernel_rows(vector, lambda k: k in KIND_KERNELS))


def vector_kind_rates(table: VectorTable, overhead_s: float, llc_bytes: float) -> dict[str, float]:
    """Per op kind of :data:`KIND_KERNELS` measured in ``table``: the median over its rows whose footprint
    fits ``llc_bytes`` of ``flops / (t_median - overhead)`` (median times, as for the GEMM tables: a model
    runs the op once per step; beyond the cache, the memory term decides)."""
    return _medians((KIND_KERNELS[kernel], flops / (t - overhead_s))
                    for kernel, flops, t, foot in zip(table.kernel, table.flops, table.median_s, table.footprint_bytes,
                                                      strict=True)
                    if kernel in KIND_KERNELS and t > overhead_s and flops > 0 and foot <= llc_bytes)


def _medians(pairs: Iterable[tuple[KeyT, float]], cap: float = np.inf) -> dict[KeyT, float]:
    """The median of the values under each key, capped at ``cap``, in key order (the measured
    efficiency tables: one fraction per M, (N, M), K or op kind out of all the measurements there)."""
    groups: dict[KeyT, list[float]] = {}
    for key, fraction in pairs:
        groups.setdefault(key, []).append(fraction)
    return {key: float(min(cap, np.median(v))) for key, v in sorted(groups.items())}


def _capped_medians(pairs: Iterable[tuple[KeyT, float]]) -> dict[KeyT, float]:
    """:func:`_medians` of fractions of a peak, capped at 1."""
    return _medians(pairs, cap=1.0)


def weight_stream_factors(gemv: GemmTable, dtype: DType, main_bandwidth_bytes_per_s: float,
                          overhead_s: float) -> list[tuple[float, float]]:
    """(K, factor) for ``dtype``'s one-row GEMMs: the weight bytes ``n·k·size`` over ``t_median - overhead``
    (the rate the cold weights streamed at), over ``main_bandwidth_bytes_per_s``; the median over the
    widths N measured at each K, not capped (a factor above 1 streams faster than the bandwidth's
    reference GEMV).

    A GEMV ``y = x W^T`` reads each weight row once for one dot product, so its rate depends on the row
    length K rather than on the matrix size: on the reference CPU (MKL sgemv, 2 threads, 256 MiB of
    weights) 27-28 GB/s at K = 1024-2048, 31 at 4096 and 35 at 8192, for every N from 512 to 32768
    (bf16: 28-31 and 33). Median times, as for the GEMM tables: a decode step runs each projection once.
    """
    size = dtype.bits / 8
    return [(float(k), f) for k, f in _medians(
        (int(k), n * k * size / (t - overhead_s) / main_bandwidth_bytes_per_s)
        for d, m, n, k, t in zip(gemv.dtype, gemv.m, gemv.n, gemv.k, gemv.median_s, strict=True)
        if DType(d) == dtype and m == 1 and t > overhead_s).items()]


def _split_stream(stream: StreamTable) -> tuple[StreamTable, StreamTable | None]:
    """The copy/scale rows, and the GEMV weight-streaming rows (None when there are none)."""
    if "gemv" not in stream.kernel:
        return stream, None
    return _kernel_rows(stream, lambda k: k != "gemv"), _kernel_rows(stream, lambda k: k == "gemv")


def _achieved_rates(gemm: GemmTable, dtype: DType, overhead_s: float) -> list[tuple[int, int, float]]:
    """(M, N, achieved FLOP/s) of every M > 1 GEMM of ``dtype`` on its median time."""
    dtypes = [d.value if isinstance(d, DType) else str(d) for d in gemm.dtype]
    # Median times: a model runs each GEMM once per pass, so its typical time, not its best, is
    # what a prediction should match (best-of-N ran 15-20% faster than in-model here).
    return [(int(m), int(n), 2.0 * m * n * k / (t - overhead_s))
            for d, m, n, k, t in zip(dtypes, gemm.m, gemm.n, gemm.k, gemm.median_s, strict=True)
            if d == dtype.value and m > 1 and t > overhead_s]


def _achieved_fractions(gemm: GemmTable, dtype: DType, peak_flops_per_s: float,
                        overhead_s: float) -> list[tuple[int, int, float]]:
    """(M, N, achieved rate / peak) of every M > 1 GEMM of ``dtype`` on its median time."""
    return [(m, n, rate / peak_flops_per_s) for m, n, rate in _achieved_rates(gemm, dtype, overhead_s)]


def matmul_rows_efficiency(gemm: GemmTable, dtype: DType, peak_flops_per_s: float,
                           overhead_s: float) -> list[tuple[float, float]]:
    """(M, efficiency) for each M > 1 of ``dtype``'s GEMMs: the median over the N x K shapes of the
    achieved rate ``2MNK / (t_median - overhead)`` over ``peak_flops_per_s``, capped at 1.

    BLAS efficiency on a CPU depends mostly on M, the rows sharing each packed panel of the weight
    matrix (Goto & van de Geijn, ACM TOMS 34(3), 2008: packing B costs N·K and is amortized over
    M), and not monotonically (kernel choices change with M), so the measured curve is kept as a
    table rather than fitted to a formula.
    """
    medians = _capped_medians((m, f) for m, _, f in _achieved_fractions(gemm, dtype, peak_flops_per_s, overhead_s))
    return [(float(m), f) for m, f in medians.items()]


def matmul_shapes_efficiency(gemm: GemmTable, gemm_wide: GemmTable, dtype: DType, peak_flops_per_s: float,
                             overhead_s: float) -> list[tuple[float, float, float]]:
    """(M, N, efficiency) of ``dtype``'s GEMMs with M > 1, sorted by (N, M): the projection-width
    curve of :func:`matmul_rows_efficiency` (pooled over ``gemm``'s N x K) at the largest projection
    width N measured, and each vocabulary-wide GEMM of ``gemm_wide`` at its own (M, N) (the median
    over K of ``2MNK / (t_median - overhead)`` over ``peak_flops_per_s``, capped at 1).

    At small M the rate depends on N as well as M: on the reference CPU (MKL sgemm, 2 threads) an
    M = 8 fp32 GEMM reached 50-60 GFLOP/s at N = 2048-8192 and 33-38 at N = 128256 (a vocabulary-wide
    ``lm_head``), whatever K and the matrix size (2048 x 32768 ran at the narrow rate, 32768 x 2048
    at the wide one), and the second thread gave 1.35x at N = 2048 but 1.16x at N = 128256. Between
    projection widths the differences were within the noise, so those are pooled: a median over
    three shapes survives one disturbed measurement (an 8192 x 2048 M = 128 median ran 30% slow on
    the shared reference machine), a median over one or two K would not.
    """
    pooled = matmul_rows_efficiency(gemm, dtype, peak_flops_per_s, overhead_s)
    widths = [n for d, n in zip(gemm.dtype, gemm.n, strict=True) if DType(d) == dtype]
    rows = {(float(max(widths)), m): f for m, f in pooled} if widths else {}
    wide = _capped_medians(((n, m), f) for m, n, f in _achieved_fractions(gemm_wide, dtype, peak_flops_per_s,
                                                                           overhead_s))
    rows |= {(float(n), float(m)): f for (n, m), f in wide.items()}
    return [(m, n, f) for (n, m), f in sorted(rows.items())]


def attention_rows_efficiency(table: AttentionTable, dtype: DType, peak_flops_per_s: float,
                              overhead_s: float) -> list[tuple[float, float]]:
    """(query length M, efficiency) of ``dtype``'s causal attention with M > 1: the median over the
    head shapes of ``flops / (t_median - overhead)`` over ``peak_flops_per_s``, capped at 1.

    A tiled causal kernel computes the diagonal tiles whole and masks half of each, and pays its
    online-softmax bookkeeping per tile row, so its rate grows with the sequence rather than with
    the work alone (reference CPU, PyTorch's fp32 flash kernel, 2 threads: 45-50 GFLOP/s at 128
    tokens, 70 at 512, 117 at 1024, 140 at 2048, where large GEMMs ran at 183). Kept as a measured
    table in M, like :func:`matmul_rows_efficiency`.
    """
    medians = _capped_medians((int(m), flops / (t - overhead_s) / peak_flops_per_s)
                              for d, m, flops, t in zip(table.dtype, table.query_len, table.flops, table.median_s,
                                                        strict=True)
                              if DType(d) == dtype and m > 1 and t > overhead_s)
    return [(float(m), f) for m, f in medians.items()]


def combine_measurements(runs: Sequence[CalibrationMeasurements]) -> CalibrationMeasurements:
    """Several runs of the same calibration grid on the same machine as one: per measurement, the
    best time is the best over the runs and the median time the median of the runs' medians; the
    empty-op and cold-op samples are pooled.

    A shared machine's rates drift for minutes at a time (reference VM: M = 128 fp32 GEMMs at 135 or
    185 GFLOP/s for stretches of seconds to minutes, while M = 512 held 190), so a calibration taken
    once is one sample of that drift; runs spread over the time a validation takes sample it as its
    captures do. Points only some runs measured are left out; raises :class:`HardwareSpecError` when the
    runs share no point of a table, or come from different machines or layerscope versions.
    """
    if not runs:
        raise HardwareSpecError("combine_measurements: no calibration runs")
    first = runs[0]
    for i, run in enumerate(runs[1:], start=2):
        for key in ("device", "device_name", "threads", "torch_version"):
            if getattr(run, key) != getattr(first, key):
                raise HardwareSpecError(f"combine_measurements: run {i}'s {key} ({getattr(run, key)!r}) differs "
                                        f"from run 1's ({getattr(first, key)!r})")
    if len({bool(run.cold_reuse_bytes) for run in runs}) > 1:
        raise HardwareSpecError("combine_measurements: some runs timed the cold small ops by reuse distance and "
                                "some did not (files from different layerscope versions); calibrate again")
    tables: dict[str, Any] = {}
    for name in ("gemm", "gemm_wide", "stream", "vector", "attention", "gemv"):
        parts = _common_rows(name, [getattr(run, name) for run in runs])
        best = np.min([part.time_s for part in parts], axis=0) if len(parts[0]) else []
        median = np.median([part.median_s for part in parts], axis=0) if len(parts[0]) else []
        tables[name] = parts[0].model_copy(update={"time_s": [float(x) for x in best],
                                                   "median_s": [float(x) for x in median]})
    return first.model_copy(update={
        **tables, "quick": all(run.quick for run in runs),
        **{key: [x for run in runs for x in getattr(run, key)] for key in _POOLED_SAMPLES}})


TableU = TypeVar("TableU", GemmTable, StreamTable, VectorTable, AttentionTable)


def _common_rows(name: str, parts: list[TableU]) -> list[TableU]:
    """Each run's rows of the points (the columns but the times) every run measured, in run 1's order: a
    quick grid skips the GEMMs that would run too long (``CalibrationGrid.max_gemm_s``), which a busy
    machine decides differently from run to run. Raises when the runs share none of several points."""
    keys = [col for col in type(parts[0]).model_fields if col not in ("time_s", "median_s")]
    index = [{tuple(row): i for i, row in enumerate(zip(*(getattr(part, col) for col in keys), strict=True))}
             for part in parts]
    common = [key for key in index[0] if all(key in other for other in index[1:])]
    if not common and any(index):
        raise HardwareSpecError(f"combine_measurements: the runs measured no {name} point in common")
    return [type(part)(**{col: [getattr(part, col)[at[key]] for key in common] for col in type(part).model_fields})
            for part, at in zip(parts, index, strict=True)]


#: The per-sample lists of ``CalibrationMeasurements`` that ``combine_measurements`` concatenates over runs.
_POOLED_SAMPLES = ("empty_op_s", "cold_op_s", "cold_module_call_s", "cold_reuse_bytes", "grouped_mm_group_s",
                   "fresh_alloc_bytes", "fresh_alloc_s", "reused_alloc_s")


def calibrated_spec(meas: CalibrationMeasurements, *, name: str, description: str, kind: HardwareKind,
                    engine_count: int, memory_levels: Sequence[dict[str, Any]], llc_bytes: float) -> HardwareSpec:
    """The spec that reproduces ``meas``: fitted rates as peaks (efficiency 1.0), Hockney W½ per
    dtype as the shape dependence, fitted bandwidths and overhead; the record under ``calibration``.

    ``memory_levels`` are the levels' ``MemoryLevel`` fields without bandwidths, main memory
    last; the main level gets the fitted bandwidth and the largest shared cache the cache one.
    """
    fit = fit_measurements(meas, llc_bytes=llc_bytes)
    what = f"layerscope calibrate on {meas.device_name or meas.device} ({meas.threads} threads, torch " \
           f"{meas.torch_version or '?'})"
    levels = [dict(level) for level in memory_levels]
    if not levels:
        raise HardwareSpecError("calibrated_spec: memory_levels needs at least the main memory")
    main_bw = fit.main_memory
    levels[-1]["bandwidth_bytes_per_s"] = main_bw.bandwidth_bytes_per_s
    sources = {
        "engines.count": "torch.get_num_threads()" if meas.device == "cpu" else "CUDA multi_processor_count",
        "engines.clock_hz": "placeholder (peaks are measured, not derived from the clock)",
        "engines.vector_flops_per_s": f"calibrated: {what}; fit of max(F/V, bytes/BW) + overhead to "
                                      "norm/softmax/elementwise kernels",
        f"memory.{levels[-1]['name']}.bandwidth_bytes_per_s":
            (f"calibrated: {what}; GEMV weight streaming t = t0 + bytes/BW over matrices beyond "
             f"{DRAM_FOOTPRINT_FACTOR:g}x LLC" if fit.weight_stream is not None else
             f"calibrated: {what}; copy/scale t = t0 + bytes/BW beyond {DRAM_FOOTPRINT_FACTOR:g}x LLC (STREAM)"),
        "launch_overhead_s": (
            f"calibrated: {what}; median per-kernel time of an eager RMSNorm timed right after weights "
            "streamed past the LLC (cold, as inside a model)" if fit.overhead.cold_op_s is not None else
            f"calibrated: {what}; max(empty-op time, cache-resident time-vs-bytes intercept)"),
    }
    caches = [lvl for lvl in levels[:-1] if not lvl.get("per_engine")]
    if fit.cache is not None and caches:
        llc = max(caches, key=lambda lvl: float(lvl["capacity_bytes"]))
        llc["bandwidth_bytes_per_s"] = fit.cache.bandwidth_bytes_per_s
        sources[f"memory.{llc['name']}.bandwidth_bytes_per_s"] = (
            f"calibrated: {what}; copy/scale t = t0 + bytes/BW within {CACHE_FOOTPRINT_FRACTION:g}x LLC")
    for dt in fit.matmul:
        sources[f"engines.peak_flops_per_s.{dt.value}"] = (
            f"calibrated: {what}; Hockney r_inf of torch matmul over the GEMM grid"
            + (", or the best median rate measured where higher (the efficiency table's reference)"
               if dt in fit.matmul_reference else ""))
    note = f"calibrated: {what}; measured asymptotic rates are the peaks"
    return HardwareSpec.from_dict({
        "name": name,
        "description": description,
        "kind": kind,
        "engines": {"count": engine_count, "clock_hz": 1e9,
                    # with an efficiency table, the rate its fractions are of (fit.matmul_reference)
                    "peak_flops_per_s": {dt.value: fit.matmul_reference.get(dt, f.peak_flops_per_s)
                                         for dt, f in fit.matmul.items()},
                    "vector_flops_per_s": fit.vector_peak_flops_per_s},
        "memory": levels,
        "launch_overhead_s": fit.overhead.in_model_s,
        "efficiency": {
            "matmul": 1.0, "matmul_source": note,
            "vector": fit.vector.vector_flops_per_s / fit.vector_peak_flops_per_s,
            "vector_source": note if fit.vector_reference_flops_per_s is None else
            f"calibrated: {what}; the pooled norm/softmax/elementwise rate over the fastest per-kind rate (the peak)",
            "memory": 1.0, "memory_source": note,
            # The measured per-(M, N) table, where there is one, replaces Hockney's W½ (it subsumes
            # it) and the per-M table (the median over N that it refines; kept in the record).
            "matmul_half_flops": {dt.value: f.half_flops for dt, f in fit.matmul.items()
                                  if dt not in fit.matmul_shapes},
            "matmul_half_flops_source": f"calibrated: {what}; Hockney & Jesshope (1988) half-performance work "
                                        "n_1/2 fitted per dtype",
            "matmul_shapes": {dt.value: shapes for dt, shapes in fit.matmul_shapes.items()},
            "matmul_shapes_source": f"calibrated: {what}; achieved / peak rate per GEMM row count M and output "
                                    "width N (projection widths pooled over N x K; vocabulary widths apart), "
                                    "interpolated in log M, then log N"
                                    if fit.matmul_shapes else "",
            "vector_per_kind": dict(fit.vector_per_kind),
            "vector_per_kind_source": f"calibrated: {what}; achieved / vector rate of "
                                      + ", ".join(f"{kind} ({kernel})" for kernel, kind in KIND_KERNELS.items()
                                                  if kind in fit.vector_per_kind)
                                      if fit.vector_per_kind else "",
            "activation_stream": (None if fit.activation_stream is None else
                                  min(MAX_STREAM_FACTOR, fit.activation_stream.bandwidth_bytes_per_s
                                      / main_bw.bandwidth_bytes_per_s)),
            "activation_stream_source": f"calibrated: {what}; copy/scale t = t0 + bytes/BW beyond "
                                        f"{DRAM_FOOTPRINT_FACTOR:g}x LLC on median times / the main-memory "
                                        "(GEMV) bandwidth" if fit.activation_stream is not None else "",
            "weight_stream_k": {dt.value: rows for dt, rows in fit.weight_stream_k.items()},
            "weight_stream_k_source": f"calibrated: {what}; weight bytes per second of cold one-row GEMMs per "
                                      "reduction width K / the main-memory bandwidth, interpolated in log K"
                                      if fit.weight_stream_k else "",
            "attention_rows": {dt.value: rows for dt, rows in fit.attention_rows.items()},
            "attention_rows_source": f"calibrated: {what}; causal scaled_dot_product_attention, achieved / peak "
                                     "rate per query length (median over head shapes), interpolated in log M"
                                     if fit.attention_rows else "",
        },
        # Measured through PyTorch eager, so it predicts what HF eager modules run (one kernel per
        # aten op; layerscope.cost.execution); on a CPU, megabyte activations stay in the LLC, but
        # each op's output goes to a freshly allocated, cache-cold buffer (write-allocate).
        "execution": {"kernels": "hf-eager", "activations_in_cache": kind == "cpu" and bool(caches),
                      "cold_outputs": kind == "cpu", "module_call_s": fit.overhead.module_call_s or 0.0,
                      "grouped_mm_group_s": fit.overhead.grouped_mm_group_s or 0.0,
                      "fresh_pages": None if fit.fresh_pages is None or fit.fresh_pages.min_bytes is None else
                      {"min_bytes": fit.fresh_pages.min_bytes, "s_per_byte": fit.fresh_pages.s_per_byte},
                      "cold_by_reuse": [{"reuse_bytes": b, "kernel_s": k, "module_call_s": c} for b, k, c in zip(
                          fit.overhead.cold_reuse_bytes, fit.overhead.cold_kernel_s,
                          fit.overhead.cold_module_call_by_reuse_s, strict=True)],
                      "source": f"calibrated: {what}; PyTorch eager kernels"
                                + ("; activations resident in the last-level cache, outputs written to cold "
                                   "buffers" if kind == "cpu" else "")
                                + ("; module calls: a cold RMSNorm as an nn.Module less the same as bare calls"
                                   if fit.overhead.module_call_s is not None else "")
                                + ("; small-op costs by reuse distance: an RMSNorm, bare and as a module, in "
                                   "mock decoder layers of one-row GEMVs streaming each distance"
                                   if fit.overhead.cold_reuse_bytes else "")
                                + ("; grouped GEMM groups: torch._grouped_mm over many groups less over one, "
                                   "per group" if fit.overhead.grouped_mm_group_s is not None else "")
                                + ("; page faults: sigmoid(g) * u into new tensors less into reused ones, per byte, "
                                   "from the smallest size where every larger one faults"
                                   if fit.fresh_pages is not None and fit.fresh_pages.min_bytes is not None
                                   else "")},
        "sources": sources,
        "calibration": CalibrationRecord(measurements=meas, fit=fit),
    }, origin="calibrated spec")
