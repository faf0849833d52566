"""The calibration record a calibrated :class:`~layerscope.hardware.spec.HardwareSpec` carries.

``layerscope calibrate`` times microbenchmarks through torch (``capture/calibrate.py``), fits
them (``hardware/fit.py``) and writes the spec with this record under ``calibration``: the raw
measurements as column tables (one list per column, all of a table's lists the same length) and
the fitted parameters with their residuals, so anyone can re-fit or judge the fit from the file.

Times are the best (minimum) of repeated runs, in float seconds; ``median_s`` keeps the median of
the same runs to show the noise. Units are in the names.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Final, Literal

from pydantic import BaseModel, Field, ValidationError, model_validator

from layerscope.docstrings import SPEC_CONFIG
from layerscope.errors import HardwareSpecError
from layerscope.units import DType


class _Table(BaseModel):
    """Columns of equal length; subclasses declare the columns as list fields."""

    model_config = SPEC_CONFIG

    @model_validator(mode="after")
    def _equal_lengths(self) -> _Table:
        lengths = {name: len(value) for name, value in self if isinstance(value, list)}
        if len(set(lengths.values())) > 1:
            raise ValueError(f"{type(self).__name__}: columns differ in length: {lengths}")
        return self

    def __len__(self) -> int:
        return next((len(value) for _, value in self if isinstance(value, list)), 0)


class GemmTable(_Table):
    """``C[m, n] = A[m, k] @ W[n, k]^T`` (``F.linear``) in ``dtype``: 2·m·n·k FLOPs, (m·k + k·n + m·n)
    elements moved."""

    dtype: list[DType] = Field(default_factory=list)
    m: list[int] = Field(default_factory=list)
    n: list[int] = Field(default_factory=list)
    k: list[int] = Field(default_factory=list)
    time_s: list[float] = Field(default_factory=list)
    median_s: list[float] = Field(default_factory=list)


class StreamTable(_Table):
    """Bandwidth kernels (``copy``: b = a; ``scale``: b = s·a; STREAM, McCalpin 1995) over one array."""

    kernel: list[str] = Field(default_factory=list)
    moved_bytes: list[float] = Field(default_factory=list)
    """Bytes read + written by the kernel (STREAM counting: 2 arrays for copy and scale)."""
    footprint_bytes: list[float] = Field(default_factory=list)
    """Bytes of all arrays the kernel touches: whether it runs out of a cache or main memory."""
    time_s: list[float] = Field(default_factory=list)
    median_s: list[float] = Field(default_factory=list)


class VectorTable(_Table):
    """Non-matrix kernels (elementwise add/mul, RMSNorm-like rows, softmax rows) and their work."""

    kernel: list[str] = Field(default_factory=list)
    elements: list[int] = Field(default_factory=list)
    flops: list[float] = Field(default_factory=list)
    """FLOPs with the graph's counting (``graph/norms.py``, ``graph/attention.py``)."""
    moved_bytes: list[float] = Field(default_factory=list)
    footprint_bytes: list[float] = Field(default_factory=list)
    time_s: list[float] = Field(default_factory=list)
    median_s: list[float] = Field(default_factory=list)


class AttentionTable(_Table):
    """Fused causal attention (``F.scaled_dot_product_attention(q, k, v, is_causal=True)``, as HF's
    ``sdpa`` attention runs a prefill) over ``batch`` sequences of ``query_len`` tokens each, with
    ``heads`` query heads sharing ``kv_heads`` K/V heads of width ``head_dim``."""

    dtype: list[DType] = Field(default_factory=list)
    batch: list[int] = Field(default_factory=list)
    heads: list[int] = Field(default_factory=list)
    kv_heads: list[int] = Field(default_factory=list)
    head_dim: list[int] = Field(default_factory=list)
    query_len: list[int] = Field(default_factory=list)
    flops: list[float] = Field(default_factory=list)
    """FLOPs with the graph's counting of a fused attention op (``graph/attention.py``: QK and PV over
    the causal pairs, plus the softmax per score)."""
    time_s: list[float] = Field(default_factory=list)
    median_s: list[float] = Field(default_factory=list)


class CalibrationMeasurements(BaseModel):
    """What was measured, where, and how."""

    model_config = SPEC_CONFIG

    device: str = "cpu"
    """torch device type: ``cpu`` or ``cuda``."""
    device_name: str = ""
    """CPU model (``/proc/cpuinfo``) or GPU name."""
    threads: int = Field(default=1, gt=0)
    """``torch.get_num_threads()`` during the run (CPU), or the GPU's SM count."""
    torch_version: str = ""
    quick: bool = False
    gemm: GemmTable = Field(default_factory=GemmTable)
    gemm_wide: GemmTable = Field(default_factory=GemmTable)
    """GEMMs at vocabulary widths (``lm_head``) and small M: in the per-(M, N) efficiency table only,
    not in the Hockney fit, whose W-only curve they would drag down (their work is large because N
    is, not M: 34 GFLOP at 110 GFLOP/s for M = 64, N = 128256 on the reference CPU, where square-ish
    GEMMs of that work ran at 200)."""
    stream: StreamTable = Field(default_factory=StreamTable)
    vector: VectorTable = Field(default_factory=VectorTable)
    empty_op_s: list[float] = Field(default_factory=list)
    """Repeated timings of an add on one-element tensors: the dispatch cost of an op with no work."""
    cold_op_s: list[float] = Field(default_factory=list)
    """Per-kernel times of an eager RMSNorm on one row, each timed right after weights streamed
    past the last-level cache (as a decode step runs it): what a small op costs inside a model."""
    cold_module_call_s: list[float] = Field(default_factory=list)
    """Per pair of cold samples (each right after its own weight stream): the RMSNorm's time as an
    ``nn.Module`` call less its time as bare calls, i.e. the module call's own cost inside a model."""
    cold_reuse_bytes: list[float] = Field(default_factory=list)
    """Per cold sample (parallel to ``cold_op_s`` and ``cold_module_call_s``; empty in files from before it
    was measured): the bytes streamed between two runs of the sampled code, one mock decoder layer."""
    grouped_mm_group_s: list[float] = Field(default_factory=list)
    """Per sample: ``torch._grouped_mm``'s time over many expert groups less its time over one, per extra
    group (every row in the first group, the others empty): the grouped GEMM's host loop per group.
    Empty on GPUs and where torch has no ``_grouped_mm``."""
    fresh_alloc_bytes: list[float] = Field(default_factory=list)
    """Per fresh-allocation sample: the bytes of each of its two output tensors (CPU; empty on GPUs and in
    files from before it was measured)."""
    fresh_alloc_s: list[float] = Field(default_factory=list)
    """Per sample: ``sigmoid(g) * u`` into two newly allocated tensors."""
    reused_alloc_s: list[float] = Field(default_factory=list)
    """Per sample: the same into two preallocated tensors (``out=``), timed right after."""
    attention: AttentionTable = Field(default_factory=AttentionTable)
    """Causal SDPA over prefill lengths: fused attention's efficiency by query length."""
    gemv: GemmTable = Field(default_factory=GemmTable)
    """One-row GEMMs (``m`` = 1, decode's projections) over a grid of reduction widths ``k``, each call
    on the next of enough ``[n, k]`` weights to fill several times the last-level cache (cold, as in
    a decode step): the weight-streaming rate by row length (``efficiency.weight_stream_k``)."""
    remeasured: dict[str, int] = Field(default_factory=dict)
    """Rows taken again because a figure fitted from them was out of its valid range (a disturbed
    run), keyed ``table[row]`` (``gemv[3]``, ``stream[40]``), with the number of extra takes: their
    ``time_s`` is the best over the takes and ``median_s`` the median of the takes' medians."""

    @model_validator(mode="after")
    def _cold_samples(self) -> CalibrationMeasurements:
        lengths = {"cold_op_s": len(self.cold_op_s), "cold_module_call_s": len(self.cold_module_call_s),
                   "cold_reuse_bytes": len(self.cold_reuse_bytes)}
        if self.cold_reuse_bytes and len(set(lengths.values())) > 1:
            raise ValueError(f"the cold samples' lists differ in length: {lengths}")
        fresh = {"fresh_alloc_bytes": len(self.fresh_alloc_bytes), "fresh_alloc_s": len(self.fresh_alloc_s),
                 "reused_alloc_s": len(self.reused_alloc_s)}
        if len(set(fresh.values())) > 1:
            raise ValueError(f"the fresh-allocation samples' lists differ in length: {fresh}")
        return self


class FitStats(BaseModel):
    """Relative residuals ``predicted / measured - 1`` of a fit over the points it describes."""

    model_config = SPEC_CONFIG

    points: int = Field(ge=0)
    """Measurements the statistics are over (those the fit kept)."""
    outliers: int = Field(default=0, ge=0)
    """Measurements left out as disturbed: more than ``OUTLIER_FACTOR`` x slower than the fit."""
    rms_rel_error: float = 0.0
    median_abs_rel_error: float = 0.0
    max_abs_rel_error: float = 0.0


class MatmulFit(BaseModel):
    """GEMM throughput of one dtype as a Hockney curve: rate(W) = peak · W / (W + half_flops)."""

    model_config = SPEC_CONFIG

    peak_flops_per_s: float = Field(gt=0)
    """Asymptotic rate (Hockney's r∞) of large GEMMs."""
    half_flops: float = Field(ge=0)
    """GEMM work at which half of ``peak_flops_per_s`` is reached (Hockney's n½, in FLOPs)."""
    compute_bound_points: int = Field(ge=0)
    """Measurements the curve was fitted on (those well above the memory-bound time)."""
    residuals: FitStats
    """Over every GEMM of the dtype, timed with the full roofline (memory bound included)."""


class BandwidthFit(BaseModel):
    """``time = intercept_s + moved_bytes / bandwidth_bytes_per_s`` over one range of footprints."""

    model_config = SPEC_CONFIG

    bandwidth_bytes_per_s: float = Field(gt=0)
    intercept_s: float
    min_footprint_bytes: float = Field(ge=0)
    max_footprint_bytes: float = Field(ge=0)
    residuals: FitStats


class VectorFit(BaseModel):
    """The non-matrix FLOP rate that makes ``max(F / rate, bytes / bandwidth) + overhead`` fit."""

    model_config = SPEC_CONFIG

    vector_flops_per_s: float = Field(gt=0)
    per_kernel_flops_per_s: dict[str, float] = Field(default_factory=dict)
    """The same fit done for each kernel alone (how much the kernels disagree)."""
    residuals: FitStats


class FreshPagesFit(BaseModel):
    """Page faults of large allocations: the extra time of a tensor allocated anew over one reused, per byte."""

    model_config = SPEC_CONFIG

    sizes_bytes: list[float]
    """The tensor sizes measured, ascending."""
    extra_s_per_byte: list[float]
    """Per size: (median new-tensor time - median reused-tensor time) / the bytes of the two tensors."""
    faulting: list[bool]
    """Per size: whether at least ``FRESH_FAULT_MIN_SHARE`` of its samples' new tensors cost
    ``FRESH_FAULT_MIN_FRACTION`` of their reused run more (``hardware.fit``)."""
    min_bytes: float | None = None
    """The smallest size from which every larger size measured faults; None when the largest does not."""
    s_per_byte: float = 0.0
    """Median ``extra_s_per_byte`` over the faulting sizes of at least twice ``min_bytes`` (all faulting
    sizes when none is; 0 without faults)."""


class OverheadFit(BaseModel):
    """Per-op fixed cost: the larger of the empty-op time and the time-vs-bytes intercept."""

    model_config = SPEC_CONFIG

    empty_op_s: float = Field(ge=0)
    """Median of the one-element add timings: dispatch with no work."""
    intercept_s: float
    """Intercept of time vs bytes of the cache-resident bandwidth kernels (dispatch + thread fork/join)."""
    launch_overhead_s: float = Field(ge=0)
    """The fixed cost the fits of the (hot, repeated) microbenchmarks use."""
    cold_op_s: float | None = Field(default=None, ge=0)
    """Median per-kernel time of small eager ops right after a weight stream (instructions, dispatch
    tables and allocator state evicted): the per-kernel cost inside a model; None when not measured."""

    module_call_s: float | None = Field(default=None, ge=0)
    """Median of the cold module-call samples (at least 0): one ``nn.Module`` call's own cost inside a
    model; None when not measured."""
    grouped_mm_group_s: float | None = Field(default=None, ge=0)
    """Median of the grouped-GEMM per-group samples (at least 0); None when not measured."""
    cold_reuse_bytes: list[float] = Field(default_factory=list)
    """The reuse distances the cold samples were taken at, ascending (empty: one distance, not recorded);
    ``cold_op_s`` and ``module_call_s`` are then the medians at the largest."""
    cold_kernel_s: list[float] = Field(default_factory=list)
    """Median per-kernel cold cost at each of ``cold_reuse_bytes``."""
    cold_module_call_by_reuse_s: list[float] = Field(default_factory=list)
    """Median module-call cold cost (at least 0) at each of ``cold_reuse_bytes``."""

    @property
    def in_model_s(self) -> float:
        """The per-kernel overhead a spec should charge: the cold one when measured."""
        return self.cold_op_s if self.cold_op_s is not None else self.launch_overhead_s


class CalibrationFlag(BaseModel):
    """A fitted figure outside its valid range after the re-measurements, and what the fit did with it."""

    model_config = SPEC_CONFIG

    figure: str
    """The figure's dotted path in the spec (``efficiency.weight_stream_k.bf16``) or the record
    (``calibration.fit.cache``)."""
    at: str = ""
    """Which entry of a table (``K=512``, ``M=64``); empty for a single figure."""
    value: float
    """The fitted value (NaN when none could be computed)."""
    bound: str
    """The valid range, as an interval (``(0, 4]``)."""
    action: Literal["clamped", "dropped"]
    """``clamped``: the spec holds ``replacement`` (the bound); ``dropped``: the spec goes without it
    (the table entry, or the figure: the spec then uses what it would use had it not been measured)."""
    replacement: float | None = None
    """The value the spec holds instead (clamped), or None (dropped)."""
    rows: list[str] = Field(default_factory=list)
    """The measurements the figure is fitted from, as ``table[row]`` of the measurements."""
    remeasured: int = Field(default=0, ge=0)
    """How many times those measurements were taken again before the figure was flagged (0: none were,
    e.g. a fit of a kept file)."""

    def problem(self) -> str:
        """The figure, its fitted value and the bound."""
        where = f"{self.figure} at {self.at}" if self.at else self.figure
        return f"{where}: fitted {self.value:.4g}, outside {self.bound}"

    def message(self) -> str:
        """One line: the figure, its fitted value, the bound, and what was done."""
        again = (f"re-measured {self.remeasured}x, still out of range" if self.remeasured else
                 "not re-measured")
        done = f"clamped to {self.replacement:.4g}" if self.action == "clamped" else "dropped from the spec"
        return f"{self.problem()}; {again}; {done}"


class CalibrationFit(BaseModel):
    """Every fitted parameter, with its residuals."""

    model_config = SPEC_CONFIG

    method: str = ""
    """One line on how the figures were fitted (weighted least squares on relative errors …)."""
    matmul: dict[DType, MatmulFit] = Field(default_factory=dict)
    memory: BandwidthFit
    """Main memory: footprints far beyond the last-level cache."""
    cache: BandwidthFit | None = None
    """Cache-resident footprints; None when the data shows no faster level."""
    vector: VectorFit
    overhead: OverheadFit
    fresh_pages: FreshPagesFit | None = None
    """None when not measured (GPU, old files)."""
    weight_stream: BandwidthFit | None = None
    """Main-memory bandwidth of GEMV weight streaming (``y = x W^T`` over matrices far beyond the
    LLC): what a decode step's projections achieve; None when not measured (GPU, old files)."""
    matmul_rows: dict[DType, list[tuple[float, float]]] = Field(default_factory=dict)
    """Per dtype, (M, achieved rate / peak) for M > 1: the median over the grid's N x K shapes."""
    matmul_reference: dict[DType, float] = Field(default_factory=dict)
    """Per dtype with an efficiency table, the rate its fractions are of, which a calibrated spec
    takes as the peak: the fitted r∞, or the best median rate measured on the grid where that is
    higher (the Hockney curve fitted over all M can stay below the large-M rates; capping
    fractions at 1 then made every large GEMM slow)."""
    matmul_shapes: dict[DType, list[tuple[float, float, float]]] = Field(default_factory=dict)
    """Per dtype, (M, N, achieved rate / peak) for M > 1: ``matmul_rows`` at the largest projection width,
    and the vocabulary-wide GEMMs at their own (M, N) (what a calibrated spec's ``efficiency.matmul_shapes``
    holds; ``hardware.fit.matmul_shapes_efficiency``)."""
    vector_per_kind: dict[str, float] = Field(default_factory=dict)
    """Per op kind with a kernel of its own in the vector table (``sampling``: argmax; ``activation``: the
    SiLU, the gated activation's first kernel), its achieved rate (``hardware.fit.vector_kind_rates``) over the
    vector peak (:attr:`vector_peak_flops_per_s`; ``efficiency.vector_per_kind``)."""
    vector_reference_flops_per_s: float | None = Field(default=None, gt=0)
    """The fastest per-kind rate where it exceeds the fitted vector rate (the SiLU in cache runs
    faster than the norms' many small kernels): the spec's vector peak, of which the pooled rate is
    ``efficiency.vector``; None when the fitted rate is the fastest."""
    activation_stream: BandwidthFit | None = None
    """Copy/scale beyond the LLC on median times: the rate elementwise ops too large for the cache
    stream at (``efficiency.activation_stream``, over the GEMV bandwidth); None without GEMV rows."""
    attention_rows: dict[DType, list[tuple[float, float]]] = Field(default_factory=dict)
    """Per dtype, (query length, achieved rate / the spec's peak) of causal SDPA: the median over the
    head shapes measured (``hardware.fit.attention_rows_efficiency``; a calibrated spec's
    ``efficiency.attention_rows``)."""
    weight_stream_k: dict[DType, list[tuple[float, float]]] = Field(default_factory=dict)
    """Per dtype, (reduction width K, weight bytes streamed per second by a cold one-row GEMM / the
    main-memory bandwidth of the spec): the median over the widths N measured at that K
    (``hardware.fit.weight_stream_factors``; a calibrated spec's ``efficiency.weight_stream_k``)."""
    flags: list[CalibrationFlag] = Field(default_factory=list)
    """Figures fitted outside their valid range (after re-measuring their measurements), clamped or
    dropped; empty when every figure fitted within range."""

    @property
    def vector_peak_flops_per_s(self) -> float:
        """The vector rate a calibrated spec takes as its peak (``engines.vector_flops_per_s``)."""
        return self.vector_reference_flops_per_s or self.vector.vector_flops_per_s

    @property
    def main_memory(self) -> BandwidthFit:
        """The fit a calibrated spec gives main memory: GEMV weight streaming where measured (what decode
        projections and ``lm_head`` achieve; STREAM copy/scale stays in the record), else copy/scale."""
        return self.weight_stream if self.weight_stream is not None else self.memory


class CalibrationRecord(BaseModel):
    """The measurements and the fit behind a calibrated spec."""

    model_config = SPEC_CONFIG

    measurements: CalibrationMeasurements
    fit: CalibrationFit

    def summary(self) -> dict[str, Any]:
        """The fitted figures and residuals as plain builtins (the ``--json`` summary)."""
        out: dict[str, Any] = self.fit.model_dump(mode="json")
        meas = self.measurements
        out["measured"] = {"device": meas.device, "device_name": meas.device_name, "threads": meas.threads,
                           "torch_version": meas.torch_version, "quick": meas.quick,
                           "gemm_points": len(meas.gemm), "gemm_wide_points": len(meas.gemm_wide),
                           "stream_points": len(meas.stream),
                           "vector_points": len(meas.vector), "empty_op_points": len(meas.empty_op_s),
                           "cold_op_points": len(meas.cold_op_s),
                           "cold_module_call_points": len(meas.cold_module_call_s),
                           "grouped_mm_group_points": len(meas.grouped_mm_group_s),
                           "attention_points": len(meas.attention), "gemv_points": len(meas.gemv),
                           "remeasured": dict(meas.remeasured)}
        return out


#: The ``format`` of the measurements file ``layerscope calibrate`` keeps beside its spec.
MEASUREMENTS_FORMAT: Final = "layerscope-calibration-measurements"
#: Largest measurements file read back (a full run's is about 100 kB).
MAX_MEASUREMENTS_FILE_BYTES = 64 * 1024 * 1024


class CalibrationRun(BaseModel):
    """The measurements file ``layerscope calibrate`` writes beside ``--out`` (``hw.measurements.json``):
    written while it measures and again before it fits, so a crash or a failed fit keeps the run
    (``layerscope calibrate --from-measurements FILE`` refits it without measuring)."""

    model_config = SPEC_CONFIG

    format: Literal["layerscope-calibration-measurements"] = MEASUREMENTS_FORMAT
    version: Literal[1] = 1
    complete: bool
    """True once every measurement of the grid was taken; False in a file written during the run."""
    measured: int = Field(ge=0)
    """Measurement tasks done …"""
    total: int = Field(ge=0)
    """… out of the grid's."""
    memory_levels: list[dict[str, Any]]
    """The machine's memory levels without bandwidths (``MemoryLevel`` fields), main memory last."""
    llc_bytes: float = Field(gt=0)
    """The last-level cache that splits cache-resident from main-memory footprints in the fit."""
    measurements: CalibrationMeasurements


def read_calibration_run(path: str | Path) -> CalibrationRun:
    """The measurements file at ``path``; :class:`HardwareSpecError` (one line) for anything else."""
    where = str(path)
    try:
        size = Path(path).stat().st_size
        if size > MAX_MEASUREMENTS_FILE_BYTES:
            raise HardwareSpecError(f"{where!r}: {size} bytes; a measurements file is at most "
                                    f"{MAX_MEASUREMENTS_FILE_BYTES} bytes")
        data = json.loads(Path(path).read_bytes())
    except HardwareSpecError:
        raise
    except FileNotFoundError:
        raise HardwareSpecError(f"{where!r}: no such file") from None
    except IsADirectoryError:
        raise HardwareSpecError(f"{where!r} is a directory, not a measurements file") from None
    except OSError as exc:
        raise HardwareSpecError(f"{where!r}: cannot read it ({exc.strerror or exc})") from None
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise HardwareSpecError(f"{where!r}: not a JSON measurements file ({type(exc).__name__}: "
                                f"{str(exc)[:120]})") from None
    if not isinstance(data, dict) or data.get("format") != MEASUREMENTS_FORMAT:
        raise HardwareSpecError(f"{where!r}: not a layerscope measurements file (needs \"format\": "
                                f"\"{MEASUREMENTS_FORMAT}\", as `layerscope calibrate` writes beside --out)")
    try:
        return CalibrationRun.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(part) for part in first["loc"]) or "(top level)"
        raise HardwareSpecError(f"{where!r}: {exc.error_count()} invalid field(s); {loc}: {first['msg']}") from None

