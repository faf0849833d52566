"""GPU presets fitted on published kernel measurements (``layerscope calibrate --from-table``).

The table is ``data/gpu-kernels.md`` (:mod:`layerscope.hardware.kernel_table` reads it): GEMMs by shape and
dtype, memory-bound kernels, each with its source. A preset keeps its datasheet peaks; what is fitted is the
part the datasheet cannot say, in the terms the cost model already uses (``cost.models.roofline``):

* **GEMMs** (per GPU and dtype, 16-bit and fp8 apart):
  ``t = t0 + max(max((F / q + v · W½) / (P · e), K · τ), W / (B · w) + A / (B · m))`` with ``F = 2·M·N·K`` (per
  group), ``P`` the datasheet peak, ``q`` the useful share of an fp8 GEMM's tiles and waves on the GPU's SMs
  and ``v`` its waves (tile and wave quantization, :func:`~layerscope.hardware.gemm_tiles.tile_plan`: not
  fitted; ``q = v = 1`` for 16-bit GEMMs, whose library's tiles are not published), ``W``/``A`` the
  weight and activation bytes, ``B`` the datasheet HBM bandwidth, ``m`` the memory efficiency below.
  Fitted: ``e`` (the asymptotic fraction of peak, ``efficiency.matmul_per_dtype``), ``W½`` (Hockney &
  Jesshope's half-performance work, 1988 §1.3.3: the work at which a GEMM reaches half its asymptotic rate;
  ``efficiency.matmul_half_flops``; for fp8, paid once per wave of tiles: ``cost.models.compute_time_s``) and
  ``w`` (the rate at which a skinny GEMM streams its weights: *small M is weight streaming*, the time flat in M
  until ``F / (P·e)`` overtakes ``W / (B·w)``; ``efficiency.weight_stream_k``, as ``w / m``).
  ``t0`` is the preset's ``launch_overhead_s`` (no published row isolates it; see the module's fallbacks).
  ``τ`` is the preset's ``efficiency.gemm_k_loop_s`` (one tile's serial K-loop per unit of K), measured on our
  own H200 and not fitted here (:func:`k_loop_per_k_s`).
* **Memory-bound kernels**: ``m`` = the median achieved fraction of the datasheet bandwidth over the GPU's
  memory rows (``efficiency.memory``); they all move >= 100 MB, where ``t0`` is under 3 % of their time.

Rows tagged L (low confidence) are never fitted; F (read off a figure) are. A row whose published value
exceeds the datasheet peak it is measured against cannot be fitted by any efficiency <= 1: the fit is
refused naming it (:class:`~layerscope.errors.HardwareSpecError`), never clamped. A GPU without rows of a
kind takes the fit of the GPU in :data:`NEAREST` and the preset says so in its sources.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache, partial
from typing import TypeVar

import numpy as np

from layerscope.errors import HardwareSpecError
from layerscope.hardware import attention_fit
from layerscope.hardware.gemm_tiles import TILED_DTYPES, tile_plan
from layerscope.hardware.kernel_table import KernelRow, own_table_path, read_kernel_table
from layerscope.hardware.spec import HardwareSpec, row_input_reads
from layerscope.units import DType

#: Where a GPU has no rows of a kind, the GPU whose fit it takes, and why that one.
NEAREST: dict[str, tuple[str, str]] = {
    "h200": ("h100-sxm", "same GH100 die, clocks and 700 W limit; HBM3e only changes the bandwidth"),
    "gh200": ("h100-sxm", "same GH100 die"),
    "h100-pcie": ("h100-sxm", "same GH100 die at lower clocks and power"),
    "a100-pcie": ("a100-sxm", "same GA100 die"),
    "b200": ("h100-sxm", "the previous NVIDIA data-center generation (no closer GPU has rows)"),
    "l40s": ("a100-sxm", "no Ada data-center rows: the closest NVIDIA GPU with rows of this kind"),
    "rtx-4090": ("a100-sxm", "no Ada rows: the closest NVIDIA GPU with rows of this kind"),
    "mi300x": ("h100-sxm", "no other CDNA3 rows: the data-center GPU with the most rows"),
    "a100-sxm": ("h100-sxm", "the next NVIDIA data-center generation"),
    "h100-sxm": ("a100-sxm", "the previous NVIDIA data-center generation"),
}

#: Element bytes of a GEMM's operands by dtype class: (activation in, weight, output), as the graph counts them
#: (an op's output at its activation dtype; a bf16-out fp8 GEMM writes M·N more bytes, which matter only where
#: the GEMM is memory-bound, at small M, where they are under 1 % of its traffic in every fp8 row of the table).
_OPERAND_BYTES = {"bf16": (2, 2, 2), "fp8": (1, 1, 1), "w4a16": (2, 0.5, 2), "w8a16": (2, 1, 2)}
#: Weight-only quantized classes: their weight dtype, and the 16-bit class whose GEMM fit they run on (the
#: weights are dequantized to 16 bits in registers before the MMA: Marlin, Frantar et al., arXiv 2408.11743).
WEIGHT_ONLY = {"w4a16": "int4", "w8a16": "int8"}
#: The table's precision words, by the dtype class whose fit they join (16-bit types share one peak).
_PRECISION_CLASS = (("fp8", "fp8"), ("bf16", "bf16"), ("fp16", "bf16"))

#: The grids reach past 1 so that a fit wanting an efficiency above 1 is seen (and refused), not clamped.
_GRID_E = np.linspace(0.30, 1.24, 48)
#: W½ in steps of 1.19x (it was 1.41x, 32 points, until B200's fit without T7 showed its RMS log error varying by
#: 0.003 between neighbouring t0s that fit equally well: the W½ step, not the rows, picked among them).
_GRID_HALF = np.concatenate(([0.0], np.logspace(7.0, 11.7, 64)))
_GRID_W = np.linspace(0.30, 1.24, 48)
#: t0 in 0.5 µs steps over 0-6 µs (it skipped 2.5, 3.5 and 4.5-5.5 until the K-loop floor came in, when the H100
#: fp8 fit's best t0 fell between 2 and 3 µs: RMS log error 0.084 at 2.5 against 0.086 at 3).
_GRID_T0_S = np.arange(13) * 0.5e-6
#: How much worse (RMS of the log time error) the best fit within physical bounds may be than the best fit
#: beyond them before the fit is refused rather than kept at the bound (and flagged in its sources).
BOUND_TOLERANCE = 0.05
#: A row this short pins down the fixed cost per kernel (t0): at 25 µs, 1 µs of t0 is 4 % of the time.
SHORT_ROW_S = 25e-6

#: Sources that time one call by the host clock: the kernel plus the fixed cost of a synchronized eager call. S4
#: (LLMCompass, ``software_model/*.py`` ``run_on_gpu`` at commit b95c6c9) takes ``time.time()`` around one
#: ``torch.matmul``/``torch.softmax``/``layer_norm`` call and ``torch.cuda.synchronize()``, the median of the calls;
#: every other source times kernels on the device (CUDA events, Triton's ``do_bench``, NCU, nvbench).
HOST_TIMED: dict[str, str] = {
    "S4": "LLMCompass run_on_gpu: time.time() around one call and torch.cuda.synchronize(), median of the calls",
}
#: The fixed cost of one synchronized eager call of a small kernel: gpu-kernels.md OX-07 (T23, Helion PR #3629:
#: median synchronized eager call of a 2048x1024 RMSNorm on an H100, 29.09 µs; its own kernel is ~3 µs of that).
#: The table holds no such figure for PyTorch 2.0 on an A100 host, so S4's rows take this one, an assumption said
#: in bench/GPU-KERNELS.md; S4's own launch-overhead probe is S4's and cannot predict S4.
HOST_CALL_ROW = "OX-07"
HOST_CALL_S = 29.09e-6


def call_overhead_s(row: KernelRow) -> float:
    """The fixed cost outside the kernel that ``row``'s published time includes: :data:`HOST_CALL_S` for a
    :data:`HOST_TIMED` source, else 0."""
    return HOST_CALL_S if source_key(row) in HOST_TIMED else 0.0


def memory_traffic_gbps(row: KernelRow, capacity_bytes: float | None) -> float:
    """The main-memory rate ``row``'s kernel ran at, GB/s: the published rate counts one read and one write of
    each element (compulsory bytes); a row reduction whose rows do not fit on chip reads its input twice
    (:func:`~layerscope.hardware.spec.row_input_reads`), and a host-timed row's time holds the call's fixed cost
    (:func:`call_overhead_s`), taken out here."""
    value = row.value or 0.0
    shape = row.row_shape
    if shape is None:
        return value
    useful = 2.0 * shape.nbytes
    reads = row_input_reads(shape.row_bytes, capacity_bytes, shape.cluster)
    time_s = useful / (value * 1e9) - call_overhead_s(row)
    return (reads + 1) * shape.nbytes / time_s / 1e9


#: Rows whose source reprints another source's measurement unchanged, by row id: (the row's own source, the
#: source whose run it is, the evidence). They are held out with that run (:func:`source_key`), or a fit on the
#: run's other rows would score them. DeepGEMM's README at 55ab91f (T1, "Update performance") rewrote only the
#: M = 4096 rows of its dense table and the contiguous grouped rows; ``git diff a6d97a1 55ab91f -- README.md``
#: leaves the M = 64 and 128 dense rows and the masked grouped rows as the initial commit (S16) measured them.
#: The row's own source is part of the entry: a row of another table under the same id is not this one.
SAME_RUN: dict[str, tuple[str, str, str]] = {
    row: ("T1", "S16", "T1's README carries S16's M = 64/128 and masked grouped rows unchanged "
                       "(git diff a6d97a1 55ab91f)")
    for row in ("GX-01", "GX-02", "GX-03", "GX-04", "GX-05", "GX-06", "GX-10", "GX-11")
}


def source_key(row: KernelRow) -> str:
    """The id of the measurement run behind the row (``S4``, ``T6``, ``S17a``): rows of one run are held out
    together. That is the row's source, or for a row its source reprints from another, that one's
    (:data:`SAME_RUN`)."""
    match = re.match(r"\s*([ST]\d+[a-z]?)", row.source)
    own = match.group(1) if match else row.source.split()[0]
    reprint = SAME_RUN.get(row.id)
    return reprint[1] if reprint is not None and reprint[0] == own else own


def dtype_class(row: KernelRow) -> str | None:
    """``bf16`` (any 16-bit float), ``fp8``, the weight-only classes ``w4a16``/``w8a16``, or None (fp4: no
    preset has its peak)."""
    words = row.precision.lower().replace("/", " ").split()
    if words and words[0] in WEIGHT_ONLY:
        return words[0]
    if not words or any(w.startswith(("w4", "int4", "nvfp4", "fp4")) for w in words[:1]):
        return None
    for word, cls in _PRECISION_CLASS:
        if words[0].startswith(word):
            return cls
    return None


@dataclass(frozen=True)
class GemmRow:
    """One published GEMM measurement as the fit sees it: shape, work and bytes, and the measured seconds."""

    row: KernelRow
    dtype: str
    flops: float
    weight_bytes: float
    act_bytes: float
    time_s: float
    """The kernel's time: the published one less the call's fixed cost of a host-timed source."""
    m: int
    n: int = 1
    groups: int = 1
    k: int = 1

    @classmethod
    def of(cls, row: KernelRow) -> GemmRow | None:
        dt = dtype_class(row)
        if row.kind != "gemm" or row.gemm is None or dt is None or row.value is None or row.unit != "TFLOPS":
            return None
        g = row.gemm
        a_in, w_b, out_b = _OPERAND_BYTES[dt]
        flops = 2.0 * g.m * g.n * g.k * g.groups
        return cls(row=row, dtype=dt, flops=flops, weight_bytes=float(g.groups * g.n * g.k * w_b),
                   act_bytes=float(g.groups * (g.m * g.k * a_in + g.m * g.n * out_b)),
                   time_s=flops / (row.value * 1e12) - call_overhead_s(row), m=g.m, n=g.n, groups=g.groups, k=g.k)


@dataclass(frozen=True)
class GemmFit:
    """The fitted GEMM terms of one GPU and dtype class, with the rows behind each."""

    gpu: str
    dtype: str
    efficiency: float
    half_flops: float
    weight_stream: float
    """Fraction of the datasheet bandwidth at which weights stream."""
    overhead_s: float
    """Fixed cost per kernel, seconds (t0)."""
    rows: tuple[str, ...]
    """Ids of the rows fitted."""
    taken_from: dict[str, str] = field(default_factory=dict)
    """Parameter -> why it came from elsewhere (another GPU's fit, or the default)."""
    rms_log_error: float = 0.0


#: A number or an array of them (numpy scalars too: the grid search runs in float32).
Scalar = float | np.floating | np.ndarray


def gemm_time_s(flops: np.ndarray, weight_bytes: np.ndarray, act_bytes: np.ndarray, m: np.ndarray, *,
                peak_flops_per_s: Scalar, bandwidth_bytes_per_s: Scalar, memory_eff: Scalar, efficiency: Scalar,
                half_flops: Scalar, weight_stream: Scalar, overhead_s: Scalar,
                tile_eff: Scalar = 1.0, waves: Scalar = 1.0, k_loop_s: Scalar = 0.0) -> np.ndarray:
    """The module docstring's GEMM time, as ``cost.models.roofline`` charges it (W½ only where M > 1), the
    work over the rows' ``tile_eff`` and W½ paid once per wave of ``waves``
    (:func:`~layerscope.hardware.gemm_tiles.tile_plan`; the fixed cost is not scaled by the share:
    ``cost.models.compute_time_s``), and no less than the rows' serial K-loop
    ``k_loop_s`` (``K · efficiency.gemm_k_loop_s``: ``cost.models.gemm_k_loop_time_s``). The
    fitted terms may be arrays that broadcast against the rows (the fit's grid search times every grid point
    at once)."""
    fixed = np.where(m > 1, half_flops, 0.0) * waves
    compute = np.maximum((flops / tile_eff + fixed) / (peak_flops_per_s * efficiency), k_loop_s)
    memory = weight_bytes / (bandwidth_bytes_per_s * weight_stream) + act_bytes / (bandwidth_bytes_per_s * memory_eff)
    return overhead_s + np.maximum(compute, memory)


def check_physical(rows: Iterable[GemmRow], spec: HardwareSpec) -> None:
    """Refuse rows faster than the datasheet allows: above the peak, or skinny GEMMs streaming their weights
    faster than the HBM bandwidth (naming every such row)."""
    bad = []
    for r in rows:
        peak = spec.engines.peak_flops_per_s.get(DType(r.dtype))
        if peak and r.flops / r.time_s > peak * 1.0001:
            bad.append(f"{r.row.id} ({r.row.value:g} TFLOPS > the {peak / 1e12:g} TFLOPS peak)")
        elif r.weight_bytes / r.time_s > spec.memory_bandwidth_bytes_per_s * 1.0001:
            bad.append(f"{r.row.id} (streams its weights at {r.weight_bytes / r.time_s / 1e9:.0f} GB/s > "
                       f"{spec.memory_bandwidth_bytes_per_s / 1e9:.0f} GB/s)")
    if bad:
        raise HardwareSpecError(f"{spec.name}: no efficiency <= 1 fits {', '.join(bad)}: check the rows' GPU, "
                                "dtype and shape, or the preset's peak")


def fit_gemm(rows: Sequence[GemmRow], spec: HardwareSpec, dtype: str, *, memory_eff: float,
             fallback: GemmFit | None, overhead_s: float | None = None) -> GemmFit | None:
    """The (e, W½, w) of ``rows`` (one GPU, one dtype class) minimising the squared log error of the time,
    by grid search (e and w in [0.3, 1], W½ 0 or 1e7..5e11 FLOPs). A parameter the rows cannot pin down
    comes from ``fallback`` (another GPU's fit): ``w`` without a weight-streaming row (one where W / (B·w)
    would bind), ``W½`` with fewer than three compute-bound rows. The fixed cost per kernel ``t0`` is
    ``overhead_s`` where given, else fitted (0-6 µs) when a row shorter than :data:`SHORT_ROW_S` is a GEMV or
    weight-streaming (the rows that tell t0 from W½), else the fallback's, else the preset's
    ``launch_overhead_s``. None without rows and fallback."""
    peak = spec.engines.peak_flops_per_s.get(DType(dtype))
    if not rows or peak is None:
        return None
    check_physical(rows, spec)
    bw = spec.memory_bandwidth_bytes_per_s
    flops = np.array([r.flops for r in rows])
    wb = np.array([r.weight_bytes for r in rows])
    ab = np.array([r.act_bytes for r in rows])
    m = np.array([r.m for r in rows], dtype=float)
    t = np.array([r.time_s for r in rows])
    # the cost model charges a fitted GPU preset's fp8 GEMMs their tile and wave quantization (cost.models.
    # gemm_tiles_apply) and W½ once per wave of their tiles, so e and W½ are fitted with both taken out of each
    # row's time
    tiled = spec.kind == "gpu" and dtype in TILED_DTYPES
    tiles, waves = (tile_plan(m, np.array([r.n for r in rows]), np.array([r.groups for r in rows]),
                              spec.engines.count) if tiled else (np.ones(len(rows)), np.ones(len(rows))))
    # the serial K-loop floor the cost model puts under each GEMM (cost.models.gemm_k_loop_time_s): measured,
    # not fitted here, so e and W½ are fitted on what it leaves
    k_loop = np.array([r.k for r in rows], dtype=float) * spec.gemm_k_loop_s(DType(dtype))
    ridge = peak / bw
    streaming = (flops / (wb + ab)) < 0.5 * ridge
    compute_bound = ~streaming
    taken: dict[str, str] = {}
    grid_w = _GRID_W
    if not streaming.any():
        if fallback is None:
            grid_w = np.array([memory_eff])
            taken["weight_stream"] = "no weight-streaming row: the memory efficiency"
        else:
            grid_w = np.array([fallback.weight_stream])
            taken["weight_stream"] = f"no weight-streaming row: {fallback.gpu}'s fit"
    grid_half = _GRID_HALF
    if compute_bound.sum() < 3:
        grid_half = np.array([fallback.half_flops if fallback is not None else 0.0])
        taken["half_flops"] = (f"fewer than 3 compute-bound rows: {fallback.gpu}'s fit" if fallback is not None
                               else "fewer than 3 compute-bound rows: none (0)")
    grid_e = _GRID_E
    if not compute_bound.any() and fallback is not None:
        grid_e = np.array([fallback.efficiency])
        taken["efficiency"] = f"no compute-bound row: {fallback.gpu}'s fit"
    # t0 and W½ / (P·e) add the same constant to a compute-bound GEMM at M > 1: only a short row where W½ is not
    # charged (M = 1) or the memory term binds (weight streaming) tells them apart. Without one, every t0 fits as
    # well as another (B200 without T7: RMS log error 0.0818-0.0822 for t0 = 0.5-3.5 µs), so none is picked.
    short = t < SHORT_ROW_S
    if overhead_s is not None:
        grid_t0 = np.array([overhead_s])
    elif (short & ((m <= 1) | streaming)).any():
        grid_t0 = _GRID_T0_S
    else:
        grid_t0 = np.array([fallback.overhead_s if fallback is not None else spec.launch_overhead_s])
        why = ("t0 and W½ inseparable (every short row compute-bound at M > 1, where both add a constant)"
               if short.any() else f"no row under {SHORT_ROW_S * 1e6:g} µs")
        taken["overhead"] = f"{why}: " + (f"{fallback.gpu}'s fit" if fallback is not None
                                          else "the preset's launch_overhead_s")
    # Every grid point at once, in float32 (a log error needs 7 digits, not 16; half the memory traffic):
    # the grids as axes [e, W½, w, t0] broadcast against the rows (the last axis), then the squared log error
    # summed over rows.
    f32 = np.float32
    pred = gemm_time_s(flops.astype(f32), wb.astype(f32), ab.astype(f32), m, peak_flops_per_s=f32(peak),
                       bandwidth_bytes_per_s=f32(bw), memory_eff=f32(memory_eff),
                       efficiency=grid_e.astype(f32)[:, None, None, None, None],
                       half_flops=grid_half.astype(f32)[None, :, None, None, None],
                       weight_stream=grid_w.astype(f32)[None, None, :, None, None],
                       overhead_s=grid_t0.astype(f32)[None, None, None, :, None], tile_eff=tiles.astype(f32),
                       waves=waves.astype(f32), k_loop_s=k_loop.astype(f32))
    loss = (np.log(pred / t.astype(f32)) ** 2).sum(axis=-1, dtype=np.float64).ravel()
    e, h, w, t0 = (a.ravel()[:, None] for a in np.meshgrid(grid_e, grid_half, grid_w, grid_t0, indexing="ij"))
    inside = (e[:, 0] <= 1.0) & (w[:, 0] <= 1.0)
    best = int(np.argmin(np.where(inside, loss, np.inf)))
    free = int(np.argmin(loss))
    rms_in, rms_free = (float(np.sqrt(loss[i] / len(rows))) for i in (best, free))
    if rms_in - rms_free > BOUND_TOLERANCE:
        _refuse_beyond_one(spec, dtype, rows, efficiency=float(e[free, 0]), weight_stream=float(w[free, 0]),
                           rms=(rms_in, rms_free))
    if free != best and (e[free, 0] > 1.0 or w[free, 0] > 1.0):
        taken["bound"] = (f"at the physical bound: unbounded, the rows would take e={e[free, 0]:.2f}, "
                          f"w={w[free, 0]:.2f} (RMS log error {rms_free:.3f} against {rms_in:.3f} within bounds)")
    # grid values, written as the grid means them (np.linspace's 0.8200000000000001 is 0.82)
    return GemmFit(gpu=spec.name, dtype=dtype, efficiency=round(float(e[best, 0]), 4),
                   half_flops=float(f"{h[best, 0]:.4g}"), weight_stream=round(float(w[best, 0]), 4),
                   overhead_s=round(float(t0[best, 0]), 9), rows=tuple(r.row.id for r in rows), taken_from=taken,
                   rms_log_error=float(np.sqrt(loss[best] / len(rows))))


def _refuse_beyond_one(spec: HardwareSpec, dtype: str, rows: Sequence[GemmRow], *, efficiency: float,
                       weight_stream: float, rms: tuple[float, float]) -> None:
    """The rows fit much better with an efficiency above 1 than with any within bounds: they are faster than
    the datasheet allows once t0 and W½ are charged, and the fit is refused, naming the rows nearest the bound
    (the fastest compute-bound, or weight-streaming, rows)."""
    peak = spec.engines.peak_flops_per_s[DType(dtype)]
    if efficiency > 1.0:
        worst = sorted(rows, key=lambda r: -r.flops / r.time_s / peak)[:3]
        what = f"GEMM efficiency {efficiency:.2f} of the {peak / 1e12:g} TFLOPS peak"
    else:
        worst = sorted(rows, key=lambda r: -r.weight_bytes / r.time_s)[:3]
        what = f"weight streaming at {weight_stream:.2f} of the {spec.memory_bandwidth_bytes_per_s / 1e9:g} GB/s"
    raise HardwareSpecError(f"{spec.name} {dtype}: the fit lands outside physical bounds ({what} > 1; RMS log "
                            f"error {rms[1]:.3f}, against {rms[0]:.3f} within bounds); rows to blame: "
                            f"{', '.join(r.row.id for r in worst)}")


def memory_rows(rows: Iterable[KernelRow], gpu: str) -> list[KernelRow]:
    """The fittable memory-bound rows of ``gpu``: achieved GB/s on one GPU, not L-tagged, not measured on a
    variant with other memory (an A100 40GB stands in for the 80GB presets' compute only: 1,555 GB/s, not
    2,039)."""
    return [r for r in rows if r.kind == "memory" and r.gpu == gpu and r.unit == "GBps" and r.value is not None
            and "L" not in r.tags and r.gpus in (None, 1) and r.proxy_of in ("", "H800")]


def fit_memory(rows: Sequence[KernelRow], spec: HardwareSpec) -> float | None:
    """Median achieved fraction of the datasheet bandwidth over ``rows``, each at the rate its kernel moved
    (:func:`memory_traffic_gbps`); refused for a row above the datasheet."""
    if not rows:
        return None
    bw_gbps = spec.memory_bandwidth_bytes_per_s / 1e9
    capacity = spec.row_capacity_bytes()
    rates = {r.id: memory_traffic_gbps(r, capacity) for r in rows}
    over = [f"{r.id} ({r.value:g} GB/s" + (f", {rates[r.id]:.0f} GB/s of traffic" if rates[r.id] != r.value else "")
            + f" > {bw_gbps:g})" for r in rows if rates[r.id] > bw_gbps]
    if over:
        raise HardwareSpecError(f"{spec.name}: memory rows above the datasheet bandwidth: {', '.join(over)}")
    return float(np.median([rates[r.id] / bw_gbps for r in rows]))


@dataclass(frozen=True)
class TableFit:
    """A preset fitted on a table: the spec, and what each figure came from."""

    spec: HardwareSpec
    memory_efficiency: float
    memory_rows: tuple[str, ...]
    memory_from: str
    """Empty when fitted on this GPU's rows, else where the figure came from."""
    gemm: dict[str, GemmFit]
    attention: AttentionTaken = field(default_factory=lambda: AttentionTaken(None, "", None, ""))
    overhead_rows: tuple[str, ...] = ()
    """The GEMM rows that pinned ``launch_overhead_s`` (this GPU's or a :data:`NEAREST` one's); empty where none
    did and the figure is the base preset's assumption."""
    """The attention curves the spec took, and from which GPU's rows."""


@dataclass(frozen=True)
class AttentionTaken:
    """The attention fits a preset took: the GPU whose rows pinned each (its own or a :data:`NEAREST` one)."""

    prefill: attention_fit.AttentionFits | None
    prefill_from: str
    decode: attention_fit.DecodeFit | None
    decode_from: str


def _usable(rows: Iterable[KernelRow], exclude_sources: Iterable[str]) -> list[KernelRow]:
    excluded = set(exclude_sources)
    return [r for r in rows if "L" not in r.tags and source_key(r) not in excluded]


def _gemm_rows(rows: Iterable[KernelRow], gpu: str | None, dtype: str) -> list[GemmRow]:
    """The single-GEMM rows of ``dtype`` measured on ``gpu`` (None: on any GPU)."""
    out = []
    for r in rows:
        g = GemmRow.of(r) if gpu is None or r.gpu == gpu else None
        if g is not None and g.dtype == dtype and r.gemm is not None and r.gemm.groups == 1:
            out.append(g)
    return out


def _memory_efficiency(rows: Sequence[KernelRow], spec: HardwareSpec,
                       near: TableFit | None) -> tuple[float, tuple[str, ...], str]:
    own = memory_rows(rows, spec.name)
    fitted = fit_memory(own, spec)
    if fitted is not None:
        return fitted, tuple(r.id for r in own), ""
    name, why = NEAREST.get(spec.name, ("", ""))
    if near is not None and near.memory_rows:
        return near.memory_efficiency, near.memory_rows, f"{name}'s memory rows ({why})"
    return spec.efficiency.memory, (), f"no memory rows here or on {name or 'a nearest GPU'}: the preset's own figure"


def _gemm_fit(rows: Sequence[KernelRow], spec: HardwareSpec, dtype: str, memory_eff: float,
              fallback: GemmFit | None, overhead_s: float | None = None) -> GemmFit | None:
    near, why = NEAREST.get(spec.name, ("", ""))
    own = _gemm_rows(rows, spec.name, dtype)
    if own:
        return fit_gemm(own, spec, dtype, memory_eff=memory_eff, fallback=fallback, overhead_s=overhead_s)
    if fallback is None:
        return None
    return GemmFit(gpu=spec.name, dtype=dtype, efficiency=fallback.efficiency, half_flops=fallback.half_flops,
                   weight_stream=fallback.weight_stream, overhead_s=fallback.overhead_s, rows=fallback.rows,
                   taken_from={"all": f"no {dtype} GEMM rows: {near}'s fit ({why})"},
                   rms_log_error=fallback.rms_log_error)


def _cite(fit: GemmFit, what: str) -> str:
    taken = fit.taken_from.get("all") or fit.taken_from.get(what)
    rows = ", ".join(fit.rows)
    return f"fitted on gpu-kernels.md rows {rows}" + (f" ({taken})" if taken else "")


def fit_preset(base: HardwareSpec, rows: Sequence[KernelRow], presets: dict[str, HardwareSpec], *,
               exclude_sources: Iterable[str] = (), _nearest: bool = True,
               cache: dict[tuple[str, tuple[str, ...]], TableFit] | None = None) -> TableFit:
    """``base`` with its GEMM and memory efficiencies fitted on ``rows`` (module docstring), leaving out the
    rows of ``exclude_sources`` (the replay's held-out source) and every L-tagged row. ``presets`` are the
    other GPUs' specs: the :data:`NEAREST` GPU's own fit (from its rows only) fills what ``base``'s rows
    cannot pin down. ``cache`` keeps those nearest-GPU fits across calls on the same ``rows`` (the replay
    fits every GPU once per held-out source)."""
    excluded = tuple(sorted(set(exclude_sources)))
    usable = _usable(rows, excluded)
    near_name = NEAREST.get(base.name, ("", ""))[0]
    near = _own_fit(near_name, rows, presets, excluded, cache) if _nearest and near_name in presets else None
    mem, mem_rows, mem_from = _memory_efficiency(usable, base, near)
    # t0 is one per GPU (one launch_overhead_s): fitted per dtype, the first dtype whose rows pin it (a short GEMV or
    # weight-streaming row: fit_gemm) sets it, else the first GPU along NEAREST whose rows do, and every dtype is
    # then refitted with it.
    # only the dtypes this GPU has matrix units for (an A100 runs fp8 GEMMs on its 16-bit path)
    dtypes = [dt for dt in ("bf16", "fp8") if DType(dt) in base.engines.peak_flops_per_s]
    fallbacks = {dt: (near.gemm.get(dt) if near is not None else None) for dt in dtypes}
    first = {dt: fit for dt, fb in fallbacks.items() if (fit := _gemm_fit(usable, base, dt, mem, fb)) is not None}
    pinned = [fit for fit in first.values() if "overhead" not in fit.taken_from and "all" not in fit.taken_from]
    overhead_s: float | None = None
    overhead_rows: tuple[str, ...] = ()
    overhead_from = ""
    if pinned:
        overhead_s, overhead_rows = pinned[0].overhead_s, pinned[0].rows
        overhead_from = (f"fitted on gpu-kernels.md rows {', '.join(pinned[0].rows)} ({pinned[0].dtype} GEMMs, "
                         f"GEMVs or weight-streaming rows under {SHORT_ROW_S * 1e6:g} µs pin it)")
    elif _nearest:
        overhead_s, overhead_rows, overhead_from = _overhead_along_nearest(base.name, rows, presets, excluded, cache)
    gemms = ({dt: fit for dt in first if (fit := _gemm_fit(usable, base, dt, mem, fallbacks[dt], overhead_s))
              is not None} if overhead_s is not None else first)
    data = base.model_dump(mode="json", exclude={"calibration"})
    eff = data["efficiency"]
    sources = data["sources"]
    eff["memory"] = round(mem, 4)
    eff["memory_source"] = (f"fitted: median achieved / datasheet bandwidth over gpu-kernels.md rows "
                            f"{', '.join(mem_rows)}" + (f" ({mem_from})" if mem_from else ""))
    per_dtype, halves, stream = dict(eff["matmul_per_dtype"]), {}, {}
    for dt, fit in gemms.items():
        names = ("bf16", "fp16") if dt == "bf16" else ("fp8",)
        for name in names:
            per_dtype[name] = fit.efficiency
            halves[name] = fit.half_flops
            stream[name] = [[1.0, round(fit.weight_stream / mem, 4)]]
    if "bf16" in gemms:
        eff["matmul"] = gemms["bf16"].efficiency
    eff["matmul_per_dtype"] = per_dtype
    eff["matmul_half_flops"] = halves
    eff["weight_stream_k"] = stream
    cites = {dt: {w: _cite(fit, w) for w in ("efficiency", "half_flops", "weight_stream")} for dt, fit in gemms.items()}
    eff["matmul_source"] = cites.get("bf16", {}).get("efficiency", eff["matmul_source"])
    eff["matmul_per_dtype_source"] = "; ".join(f"{dt}: {c['efficiency']}" for dt, c in cites.items())
    tiled = sorted(TILED_DTYPES & set(cites))
    eff["matmul_half_flops_source"] = ("Hockney and Jesshope (1988) half-performance work, paid once per GEMM" +
                                       (f", or per wave of tiles for {'/'.join(tiled)}" if tiled else "") + "; " +
                                       "; ".join(f"{dt}: {c['half_flops']}" for dt, c in cites.items()))
    eff["weight_stream_k_source"] = ("weight streaming of skinny GEMMs, as a factor on the fitted memory bandwidth; "
                                     + "; ".join(f"{dt}: {c['weight_stream']}" for dt, c in cites.items()))
    if excluded:
        data["description"] = f"{data['description']} [fitted without sources {', '.join(excluded)}]"
    if overhead_s is not None:
        data["launch_overhead_s"] = overhead_s
        sources["launch_overhead_s"] = (f"{overhead_from}: the fixed cost per kernel of back-to-back kernels, as "
                                        "the table's benchmarks time them (not an eager host's launch cost)")
    elif gemms:
        fit = next(iter(gemms.values()))
        data["launch_overhead_s"] = fit.overhead_s
        sources["launch_overhead_s"] = (f"{fit.taken_from.get('overhead') or fit.taken_from.get('all', '')}; "
                                        f"was: {sources.get('launch_overhead_s', '')}")
    _fit_weight_only(eff, base, usable, mem, float(data["launch_overhead_s"]))
    taken = _fit_attention(eff, base, rows, usable, presets, excluded, float(data["launch_overhead_s"]))
    spec = HardwareSpec.from_dict(data, origin=f"{base.name} fitted on gpu-kernels.md")
    return TableFit(spec=spec, memory_efficiency=mem, memory_rows=mem_rows, memory_from=mem_from, gemm=gemms,
                    attention=taken, overhead_rows=overhead_rows)


def _own_fit(gpu: str, rows: Sequence[KernelRow], presets: dict[str, HardwareSpec], excluded: tuple[str, ...],
             cache: dict[tuple[str, tuple[str, ...]], TableFit] | None) -> TableFit:
    """``gpu``'s preset fitted on its own rows only (no :data:`NEAREST` fallback), kept in ``cache``."""
    key = (gpu, excluded)
    fit = cache.get(key) if cache is not None else None
    if fit is None:
        fit = fit_preset(presets[gpu], rows, presets, exclude_sources=excluded, _nearest=False)
        if cache is not None:
            cache[key] = fit
    return fit


def _overhead_along_nearest(gpu: str, rows: Sequence[KernelRow], presets: dict[str, HardwareSpec],
                            excluded: tuple[str, ...], cache: dict[tuple[str, tuple[str, ...]], TableFit] | None,
                            ) -> tuple[float | None, tuple[str, ...], str]:
    """t0 for a GPU whose own rows do not pin it: that of the first GPU along :data:`NEAREST` whose own rows do
    (a100-pcie -> a100-sxm -> h100-sxm: a100-sxm's short rows are all compute-bound at M > 1), with its rows and
    the path said; (None, (), "") where no GPU along the chain pins one."""
    def pinned(name: str) -> TableFit | None:
        own = _own_fit(name, rows, presets, excluded, cache) if name in presets else None
        return own if own is not None and own.overhead_rows else None

    step = _first_along_nearest(gpu, pinned, skip_self=True)
    if step is None:
        return None, (), ""
    name, why, path, own = step
    return (own.spec.launch_overhead_s, own.overhead_rows,
            f"no {gpu} row pins it: {name}'s, along NEAREST ({path}; {why}), fitted on gpu-kernels.md rows "
            f"{', '.join(own.overhead_rows)}")


def weight_only_stream(rows: Sequence[GemmRow], spec: HardwareSpec, memory_eff: float, overhead_s: float) -> float:
    """The weight-streaming rate of weight-only quantized GEMVs (M = 1: their time is the weight stream), as a
    fraction of the datasheet bandwidth: ``W / (B · (t - t0 - A / (B · m)))``, the median over ``rows``.

    A W4A16 kernel dequantizes every weight in registers before its 16-bit MMA (Marlin, arXiv 2408.11743);
    at small M that work and its latency keep the stream below HBM speed (GX-32: 1,245 GB/s on an H100,
    37 % of 3.35 TB/s), so the dequantization cost shows as this rate. At large M the MMA dominates and the
    kernel runs at the 16-bit GEMM rate (Marlin's Fig. 1: close to FP16 speed from batch 128 up), which the
    cost model gives it: the arithmetic of a weight-only GEMM runs in the activation dtype."""
    bw = spec.memory_bandwidth_bytes_per_s
    rates = [r.weight_bytes / (bw * (r.time_s - overhead_s - r.act_bytes / (bw * memory_eff))) for r in rows]
    return float(np.median(rates))


@lru_cache(maxsize=1)
def own_kernel_rows() -> tuple[KernelRow, ...]:
    """Our own kernel measurements (``data/own-kernels.md``, :func:`~layerscope.hardware.kernel_table.
    own_table_path`): the last resort of :func:`_fit_weight_only`."""
    return tuple(read_kernel_table(own_table_path()))


def _fit_weight_only(eff: dict[str, object], base: HardwareSpec, usable: Sequence[KernelRow], memory_eff: float,
                     overhead_s: float) -> None:
    """``eff['weight_stream_k']`` with the weight-only dtypes' rates (:func:`weight_only_stream`), from this GPU's
    single-row rows, else those of the first GPU along :data:`NEAREST` that has some (a100-pcie takes a100-sxm's
    nearest's, as its attention does), else our own measured ones (:func:`own_kernel_rows`, any GPU), said in
    ``weight_stream_k_source``. A rate measured on another GPU is taken as its weight bytes per
    second, not as a fraction of that GPU's bandwidth: a dequantizing kernel at M = 1 is held by its SMs (on our
    H200, tinygemm's int4 stream was 0.42 of bf16's at N = K = 8192), so it moves the same bytes per second on
    the same SMs; never faster than the GPU's own streaming rate (``efficiency.memory``)."""
    stream = dict(eff["weight_stream_k"])  # type: ignore[call-overload]
    notes = []
    for cls, dtype in WEIGHT_ONLY.items():
        own: list[GemmRow] = []
        where, table = "", "gpu-kernels.md"

        step = _first_along_nearest(base.name, partial(_gemv_rows, usable, cls=cls))
        if step is not None:
            gpu, why, path, own = step
            where = f" (no {cls} rows: {gpu}'s rows along NEAREST, {path}; {why})" if gpu != base.name else ""
        if not own:
            own = _gemv_rows(own_kernel_rows(), None, cls=cls)
            if own:
                gpus = ", ".join(dict.fromkeys(g.row.gpu or "" for g in own))
                where, table = (f" (no published {cls} rows here or along the nearest GPUs: our own {gpus} measurement,"
                                f" {own[0].row.framework}, its weight bytes per second)"), "own-kernels.md"
        if not own:
            notes.append(f"{dtype} (weight-only {cls}): no rows here, along the nearest GPUs or of our own, so such "
                         "GEMMs stream at their arithmetic dtype's rate (an assumption)")
            continue
        rate = weight_only_stream(own, base, memory_eff, overhead_s)
        stream[dtype] = [[1.0, round(min(rate, memory_eff) / memory_eff, 4)]]
        notes.append(f"{dtype} (weight-only {cls}, dequantized in the kernel): fitted on {table} rows "
                     f"{', '.join(g.row.id for g in own)}{where}")
    if notes:
        eff["weight_stream_k"] = stream
        eff["weight_stream_k_source"] = f"{eff['weight_stream_k_source']}; " + "; ".join(notes)


def _gemv_rows(rows: Iterable[KernelRow], gpu: str | None, cls: str) -> list[GemmRow]:
    """``gpu``'s GEMM rows of dtype class ``cls`` at M = 1 (:func:`_gemm_rows`), which a weight-only rate is fitted
    on."""
    return [g for g in _gemm_rows(rows, gpu, cls) if g.m == 1]


def _nearest_chain(gpu: str) -> list[tuple[str, str]]:
    """``gpu`` itself, then the GPUs :data:`NEAREST` leads to from it (each once), with why."""
    chain, seen = [(gpu, "")], {gpu}
    while (step := NEAREST.get(chain[-1][0])) is not None and step[0] not in seen:
        chain.append(step)
        seen.add(step[0])
    return chain


_T = TypeVar("_T")


def _first_along_nearest(gpu: str, found: Callable[[str], _T | None], *, skip_self: bool = False
                         ) -> tuple[str, str, str, _T] | None:
    """The first GPU along :data:`NEAREST` from ``gpu`` (``gpu`` itself first unless ``skip_self``) for which
    ``found`` gives something (not None, not empty): ``(that GPU, why it is the next step, the path from gpu as
    "a -> b -> c", what found gave)``; None where no GPU along the chain has it."""
    chain = _nearest_chain(gpu)
    for i in range(1 if skip_self else 0, len(chain)):
        name, why = chain[i]
        value = found(name)
        if value:
            return name, why, " -> ".join(n for n, _ in chain[:i + 1]), value
    return None


def _fit_attention(eff: dict[str, object], base: HardwareSpec, rows: Sequence[KernelRow],
                   usable: Sequence[KernelRow], presets: dict[str, HardwareSpec], excluded: Sequence[str],
                   overhead_s: float) -> AttentionTaken:
    """``eff`` (the preset's efficiency section, as a dict) with the attention curves of
    :mod:`~layerscope.hardware.attention_fit`: from ``base``'s own rows, else from the first GPU along
    :data:`NEAREST` with rows of the kind, said in the source. ``usable``: ``rows`` less the held-out sources and
    the L rows (:func:`fit_preset`'s), whose memory rows give each GPU's streaming efficiency."""
    specs = {**presets, base.name: base}

    def peak(gpu: str, dtype: str) -> float | None:
        spec = specs.get(gpu)
        return None if spec is None else spec.engines.peak_flops_per_s.get(DType(dtype))

    prefill = attention_fit.prefill_rows(rows, peak, excluded, source_key)
    decode = attention_fit.decode_rows(rows, excluded, source_key)
    fits: dict[str, attention_fit.AttentionFits] = {}

    def fit_of(g: str) -> attention_fit.AttentionFits:
        if g not in fits:
            # each GPU's decode floor is fitted beside this preset's own fixed cost per kernel, so that the two add
            # up to the rows' fixed time whichever GPU's rows pin it, and beside that GPU's streaming efficiency (its
            # memory rows' fit): a decode kernel reads its KV cache once, so on long caches it streams
            # (attention_fit docstring)
            stream = float(eff["memory"]) if g == base.name else _memory_efficiency(usable, specs[g], None)[0]  # type: ignore[arg-type]
            fits[g] = attention_fit.fit_gpu(g, prefill, decode, specs[g].memory_bandwidth_bytes_per_s, overhead_s,
                                            stream)
        return fits[g]

    def taken(has: str) -> tuple[str, str] | None:
        step = _first_along_nearest(base.name, lambda g: g in specs and (
            bool(fit_of(g).prefill) if has == "prefill" else fit_of(g).decode is not None))
        if step is None:
            return None
        g, why, _, _ = step
        return g, ("" if g == base.name else f"no rows here: {g}'s fit ({why})")

    gemm_eff = dict(eff["matmul_per_dtype"])  # type: ignore[call-overload]
    result = AttentionTaken(None, "", None, "")
    if (found := taken("prefill")) is not None:
        gpu, note = found
        result = AttentionTaken(fits[gpu], note, None, "")
        curves = fits[gpu].prefill
        tables: dict[bool, dict[str, list[list[float]]]] = {True: {}, False: {}}
        cites = []
        for (dt, causal), fit in sorted(curves.items()):
            names = ("bf16", "fp16") if dt == "bf16" else ("fp8",)
            for name in names:
                if DType(name) in base.engines.peak_flops_per_s:
                    tables[causal][name] = attention_fit.tabulate(fit, float(gemm_eff.get(name, eff["matmul"])))
            cites.append(f"{dt} {'causal' if causal else 'non-causal'}: e = {fit.efficiency:g}, M½ = "
                         f"{fit.half_m:g} on rows {', '.join(fit.rows)}" + (f" ({fit.note})" if fit.note else ""))
        eff["attention_rows"] = tables[True]
        eff["attention_rows_noncausal"] = tables[False]
        half_d = next(iter(curves.values())).half_d
        eff["attention_half_head_dim"] = half_d
        eff["attention_rows_source"] = (
            "fitted on gpu-kernels.md attention rows: fraction of peak e·M/(M+M½) at a 128-wide head "
            f"(hardware.attention_fit), over the GEMM efficiency, head-dim d½ = {half_d:g}; "
            + "; ".join(cites) + (f"; {note}" if note else ""))
    if (found := taken("decode")) is not None:
        gpu, note = found
        dec = fits[gpu].decode
        assert dec is not None
        result = AttentionTaken(result.prefill, result.prefill_from, dec, note)
        eff["attention_decode_memory"] = eff["memory"]
        eff["attention_decode_floor_s"] = dec.floor_s
        eff["attention_decode_source"] = (
            f"t = launch_overhead_s + floor + bytes / (bandwidth · e): e = efficiency.memory (a decode kernel streams "
            f"its KV cache); floor fitted on gpu-kernels.md rows {', '.join(dec.rows)} beside e = {dec.efficiency:g}, "
            f"RMS log error {dec.rms_log_error:.3f}" + (f"; {note}" if note else ""))
    return result


#: The K-loop measurement's shapes (:func:`k_loop_per_k_s`): grids of a few output tiles (N up to 1024 with at
#: most 128 rows is at most 8 of cuBLAS's 128-wide tiles on 132 SMs), over K up to 4096, below the K at which
#: cuBLAS starts splitting K across SMs for them (its times flatten from K = 4096-7168 at N <= 512).
K_LOOP_MAX_N = 1024
K_LOOP_MAX_M = 128
K_LOOP_MAX_K = 4096


def k_loop_per_k_s(records: Iterable[dict[str, object]]) -> dict[str, tuple[float, int]]:
    """Per dtype: (the median over shapes of the least-squares slope of kernel time over K, the number of
    shapes) from ``bench/gpu_kernel_probe.py --only kloop`` records (``gemm_kloop``: one GEMM by CUDA-graph
    replay per record), on the shapes :data:`K_LOOP_MAX_N`, :data:`K_LOOP_MAX_M` and :data:`K_LOOP_MAX_K`
    bound: what ``efficiency.gemm_k_loop_s`` holds. A shape needs three K values to count."""
    by_shape: dict[tuple[str, int, int], list[tuple[float, float]]] = {}
    for rec in records:
        if rec.get("kind") != "gemm_kloop":
            continue
        m, n, k = (int(rec[x]) for x in ("m", "n", "k"))  # type: ignore[call-overload]
        if n <= K_LOOP_MAX_N and m <= K_LOOP_MAX_M and k <= K_LOOP_MAX_K:
            by_shape.setdefault((str(rec["dtype"]), m, n), []).append((float(k), float(rec["seconds_s"])))  # type: ignore[arg-type]
    slopes: dict[str, list[float]] = {}
    for (dtype, _, _), points in by_shape.items():
        if len(points) >= 3:
            ks, ts = np.array(points).T
            slopes.setdefault(dtype, []).append(float(np.polyfit(ks, ts, 1)[0]))
    return {dt: (float(np.median(s)), len(s)) for dt, s in sorted(slopes.items())}
