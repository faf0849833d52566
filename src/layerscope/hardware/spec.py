"""``HardwareSpec``: what a cost model needs to know about one chip.

Compute engines (SMs, cores, CUs) with their clock and peak FLOP/s per dtype, the memory
hierarchy from the engines out to main memory, the interconnect to peer chips, the fixed cost
of launching an op, and the fraction of each peak that real kernels achieve. Every figure can
carry its citation in :attr:`HardwareSpec.sources` (and the efficiencies in their own
``*_source`` fields), so a reader can check each number against its datasheet.

Units are in the names: ``_hz``, ``_bytes``, ``_bytes_per_s``, ``_flops_per_s``, ``_s``.
Peaks are *dense* (datasheets print sparse figures with an asterisk; halve those).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, TypeVar

from pydantic import BaseModel, Field, GetCoreSchemaHandler, ValidationError, field_validator, model_validator
from pydantic_core import CoreSchema

from layerscope.docstrings import SPEC_CONFIG
from layerscope.errors import HardwareSpecError, WorkloadError
from layerscope.units import DType, parse_dtype, quote

if TYPE_CHECKING:
    from layerscope.hardware.calibration import CalibrationRecord as _Calibration
else:
    class _Calibration:
        """:class:`~layerscope.hardware.calibration.CalibrationRecord` as pydantic sees ``HardwareSpec.calibration``:
        its module (sixteen models) is imported when a validator or schema of ``HardwareSpec`` is built, not with
        this module (a bundled preset is built without validators: ``layerscope.hardware.presets``)."""

        @classmethod
        def __get_pydantic_core_schema__(cls, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
            from layerscope.hardware.calibration import CalibrationRecord

            return handler(CalibrationRecord)

HardwareKind = Literal["gpu", "cpu", "accelerator", "tpu"]
FlopsPath = Literal["matrix", "tf32", "vector"]
#: (M, fraction of peak) pairs of a measured GEMM-efficiency table, M ascending.
RowsTable = tuple[tuple[float, float], ...]
#: (M, N, fraction of peak) triples of a measured GEMM-efficiency table by row count M and output
#: width N, sorted by (N, M).
ShapesTable = tuple[tuple[float, float, float], ...]
#: A per-dtype figure or table, and what stands for it where a spec has none (``HardwareSpec._for_unit``).
_V = TypeVar("_V")
_A = TypeVar("_A")

#: Largest ``efficiency.weight_stream_k`` factor accepted: a GEMV streaming 4x faster than the
#: main-memory bandwidth means the bandwidth or the table is wrong.
MAX_STREAM_FACTOR = 4.0
_UNCALIBRATED = "assumption: ideal (1.0); no calibration data for this figure"
#: Most engines a chip may have: a wafer-scale chip has under a million cores; more is a typo.
MAX_ENGINES = 10_000_000


def _dtype_keys(value: Any, field: str) -> Any:
    """Normalize the keys of a ``{dtype: number}`` mapping (``bfloat16`` → ``bf16``)."""
    if not isinstance(value, dict):
        return value
    out: dict[DType, Any] = {}
    for key, item in value.items():
        try:
            dtype = parse_dtype(key, field=field)
        except WorkloadError as exc:
            raise ValueError(str(exc)) from None
        if dtype in out:
            raise ValueError(f"{field}: dtype {dtype.value!r} given twice (as {key!r})")
        out[dtype] = item
    return out


def _positive_number(value: Any) -> float | None:
    """``value`` as a finite float > 0, or None when it is not one (validation reports it later)."""
    if isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) and number > 0 else None


class EngineSpec(BaseModel):
    """The compute engines of a chip and their peak arithmetic throughput."""

    model_config = SPEC_CONFIG

    count: int = Field(gt=0, le=MAX_ENGINES)
    """Number of identical engines: SMs (NVIDIA), CUs (AMD), cores (CPU, NPU), TensorCores (TPU)."""
    clock_hz: float = Field(gt=0, allow_inf_nan=False)
    """Clock at which the peak figures hold (boost clock for GPUs)."""
    macs_per_cycle: dict[DType, float] = Field(default_factory=dict)
    """Dense matrix-unit multiply-accumulates per cycle of *one* engine, per dtype (optional)."""
    peak_flops_per_s: dict[DType, float] = Field(default_factory=dict)
    """Dense matrix-unit peak of the whole chip per dtype. Entries missing here but present in
    ``macs_per_cycle`` are derived as ``count * clock_hz * 2 * macs``."""
    tf32_flops_per_s: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    """Dense TF32 tensor-core peak of the whole chip (NVIDIA/AMD); the fp32 matmul path when
    TF32 is allowed. None where the chip has no TF32 mode."""
    vector_flops_per_s: float = Field(gt=0, allow_inf_nan=False)
    """Non-tensor (CUDA core / SIMD / VPU) FP32 peak of the whole chip, FMA counted as 2 FLOPs."""

    @field_validator("macs_per_cycle", "peak_flops_per_s", mode="before")
    @classmethod
    def _normalize_dtypes(cls, value: Any, info: Any) -> Any:
        return _dtype_keys(value, f"engines.{info.field_name}")

    @field_validator("macs_per_cycle", "peak_flops_per_s")
    @classmethod
    def _positive_values(cls, value: dict[DType, float], info: Any) -> dict[DType, float]:
        for dtype, number in value.items():
            if not (math.isfinite(number) and number > 0):
                raise ValueError(
                    f"engines.{info.field_name}.{dtype.value}: must be a finite number > 0, got {number!r}"
                )
        return value

    @model_validator(mode="before")
    @classmethod
    def _derive_peaks_from_macs(cls, data: Any) -> Any:
        if not isinstance(data, dict) or not data.get("macs_per_cycle"):
            return data
        count = _positive_number(data.get("count"))
        clock_hz = _positive_number(data.get("clock_hz"))
        if count is None or clock_hz is None or not isinstance(data["macs_per_cycle"], dict):
            return data  # field validation reports the bad value
        macs = _dtype_keys(data["macs_per_cycle"], "engines.macs_per_cycle")
        peaks = dict(_dtype_keys(data.get("peak_flops_per_s") or {}, "engines.peak_flops_per_s"))
        for dtype, macs_per_cycle in macs.items():
            per_cycle = _positive_number(macs_per_cycle)
            if dtype in peaks or per_cycle is None:
                continue
            # Peak FLOP/s = engines * clock * 2 FLOPs per MAC * MACs per engine per cycle, the
            # datasheet definition (e.g. A100: 108 SMs * 1.41 GHz * 2 * 1024 = 312 TFLOP/s bf16,
            # NVIDIA A100 Tensor Core GPU Architecture whitepaper, "Peak FP16 Tensor TFLOPS").
            peaks[dtype] = count * clock_hz * 2.0 * per_cycle
        return {**data, "macs_per_cycle": macs, "peak_flops_per_s": peaks}


class MemoryLevel(BaseModel):
    """One level of the memory hierarchy (shared memory/L1, L2/L3, HBM/DRAM)."""

    model_config = SPEC_CONFIG

    name: str = Field(min_length=1)
    """Short name used by :meth:`HardwareSpec.level` (``smem``, ``l2``, ``hbm``, ``dram``)."""
    capacity_bytes: float = Field(gt=0)
    """Capacity; per engine when ``per_engine``, otherwise of the whole chip. ``inf`` when not
    published (spreadsheet accelerators without a memory-capacity row)."""
    bandwidth_bytes_per_s: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    """Peak bandwidth of the whole chip to this level (summed over engines for a per-engine
    level); None when the vendor does not publish it (most caches). Required for main memory."""
    per_engine: bool = False
    """True for private per-engine storage (shared memory / L1 of one SM, a core's L2)."""


#: The collective algorithms a spec may carry fitted terms for (``cost.collectives.ALGORITHMS`` registers how each
#: is timed): ``ring`` (Patarasuk & Yuan 2009), ``tree`` (NCCL's double binary tree), ``nvls`` (NVLink SHARP: the
#: reduction done in the NVSwitch) and ``direct`` (point-to-point: send/recv, all-to-all by pairwise exchange).
COLLECTIVE_ALGORITHMS = ("ring", "tree", "nvls", "direct")


class CollectiveAlgorithmSpec(BaseModel):
    """Fitted α-β terms of one collective algorithm on one link (Hockney's model of a message, as Thakur,
    Rabenseifner & Gropp 2005 use it per algorithm step: ``t = steps · α + bytes / (β · bandwidth)``)."""

    model_config = SPEC_CONFIG

    alpha_s: float = Field(ge=0, le=1e-2, allow_inf_nan=False)
    """Fixed time of one step of the algorithm (latency, synchronization, the kernel's per-step work)."""
    bandwidth_fraction: float = Field(gt=0, le=1)
    """β: the fraction of the link's per-direction bandwidth the algorithm's bytes move at."""
    source: str = ""
    """Where the two figures come from (the fitted rows' ids, or an assumption)."""


def _check_algorithm_names(value: dict[str, CollectiveAlgorithmSpec],
                           where: str) -> dict[str, CollectiveAlgorithmSpec]:
    unknown = sorted(set(value) - set(COLLECTIVE_ALGORITHMS))
    if unknown:
        raise ValueError(f"{where}: unknown collective algorithms {unknown}; known: {', '.join(COLLECTIVE_ALGORITHMS)}")
    return value


class NetworkSpec(BaseModel):
    """The inter-node network: one NIC per GPU (the rail-optimized HGX/DGX layout), used by collectives whose
    GPUs span more than one NVLink domain."""

    model_config = SPEC_CONFIG

    name: str = Field(min_length=1)
    """NIC or fabric name (``connectx7-ndr400``, ``efa-v3``)."""
    bandwidth_bytes_per_s: float = Field(gt=0, allow_inf_nan=False)
    """Bandwidth of one GPU's NIC, per direction (a 400 Gb/s NIC: 50e9)."""
    latency_s: float = Field(ge=0, allow_inf_nan=False)
    """One-hop latency of a small message across the network."""
    algorithms: dict[str, CollectiveAlgorithmSpec] = Field(default_factory=dict)
    """Fitted α-β terms per algorithm across nodes (no ``nvls``: the in-switch reduction spans one domain).
    An algorithm without an entry takes ``ring``'s, and without that runs at α = ``latency_s`` per step and β = 1."""

    @field_validator("algorithms")
    @classmethod
    def _known(cls, value: dict[str, CollectiveAlgorithmSpec]) -> dict[str, CollectiveAlgorithmSpec]:
        _check_algorithm_names(value, "interconnect.network.algorithms")
        if "nvls" in value:
            raise ValueError("interconnect.network.algorithms: nvls reduces inside one NVLink domain's switches; "
                             "it has no inter-node terms")
        return value


class InterconnectSpec(BaseModel):
    """The chip-to-chip links used by tensor/pipeline/expert parallel collectives: the intra-node link (the NVLink
    domain), optionally an in-switch reduction, and optionally the inter-node network (``cost.collectives``)."""

    model_config = SPEC_CONFIG

    name: str = Field(min_length=1)
    """Link name (``nvlink4``, ``pcie5-x16``, ``ici``, ``xgmi``)."""
    bandwidth_bytes_per_s: float = Field(gt=0, allow_inf_nan=False)
    """Aggregate bandwidth of one chip *per direction* (half the 'bidirectional' datasheet figure)."""
    latency_s: float = Field(ge=0, allow_inf_nan=False)
    """One-hop latency of a small message."""
    domain_gpus: int | None = Field(default=None, ge=1, le=MAX_ENGINES)
    """GPUs reachable over this link (an HGX board's NVSwitch: 8); a collective over more GPUs crosses the
    ``network``. None: every GPU of a group is on this link."""
    in_switch_reduction: bool = False
    """The switch reduces (NVLink SHARP, NCCL's NVLS algorithm: third-generation NVSwitch and later)."""
    in_switch_bandwidth_bytes_per_s: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    """Per-GPU, per-direction bandwidth of the in-switch reduction; None: ``bandwidth_bytes_per_s``."""
    in_switch_min_gpus: int = Field(default=2, ge=2)
    """Fewest GPUs for which the in-switch reduction runs (NCCL leaves NVLS out for small groups)."""
    network: NetworkSpec | None = None
    """The inter-node network; None: no collective may span more than ``domain_gpus``."""
    algorithms: dict[str, CollectiveAlgorithmSpec] = Field(default_factory=dict)
    """Fitted α-β terms per algorithm within the domain. An algorithm without an entry takes ``ring``'s, and without
    that runs at α = ``latency_s`` per step and β = 1 (the link's datasheet figures)."""

    @field_validator("algorithms")
    @classmethod
    def _known(cls, value: dict[str, CollectiveAlgorithmSpec]) -> dict[str, CollectiveAlgorithmSpec]:
        return _check_algorithm_names(value, "interconnect.algorithms")

    @model_validator(mode="after")
    def _in_switch(self) -> InterconnectSpec:
        if not self.in_switch_reduction:
            if self.in_switch_bandwidth_bytes_per_s is not None:
                raise ValueError("interconnect.in_switch_bandwidth_bytes_per_s: given, but in_switch_reduction is "
                                 "false")
            if "nvls" in self.algorithms:
                raise ValueError("interconnect.algorithms.nvls: given, but in_switch_reduction is false")
        if self.domain_gpus is not None and self.in_switch_reduction and self.in_switch_min_gpus > self.domain_gpus:
            raise ValueError(f"interconnect.in_switch_min_gpus: {self.in_switch_min_gpus} is more than the "
                             f"{self.domain_gpus} GPUs of the domain (domain_gpus)")
        if self.network is not None and self.domain_gpus is None:
            raise ValueError("interconnect.network: needs domain_gpus (how many GPUs share the intra-node link)")
        return self

    @property
    def in_switch_bandwidth(self) -> float:
        """Bandwidth of the in-switch reduction, per GPU and direction (the link's where not given)."""
        return self.in_switch_bandwidth_bytes_per_s or self.bandwidth_bytes_per_s


class EfficiencySpec(BaseModel):
    """Fractions of the peaks that real kernels reach; each in (0, 1] with its citation."""

    model_config = SPEC_CONFIG

    matmul: float = Field(default=1.0, gt=0, le=1)
    """Achievable fraction of the dense matrix-unit peak for GEMMs (best measured GEMM / peak)."""
    matmul_source: str = _UNCALIBRATED
    matmul_per_dtype: dict[DType, float] = Field(default_factory=dict)
    """Overrides of ``matmul`` for particular dtypes (e.g. fp8 GEMMs reach less than bf16)."""
    matmul_per_dtype_source: str = ""
    vector: float = Field(default=1.0, gt=0, le=1)
    """Achievable fraction of ``vector_flops_per_s`` for non-tensor arithmetic."""
    vector_source: str = _UNCALIBRATED
    vector_per_kind: dict[str, float] = Field(default_factory=dict)
    """Overrides of ``vector`` for the non-matrix ops of particular kinds (``Op.kind``) whose kernels
    reach less of ``vector_flops_per_s`` than norms, softmax and elementwise ops do: ``sampling``, a
    greedy sampler's argmax over the vocabulary, is an index-tracking reduction that ran at 1.4-1.9
    G logits/s on the reference CPU (2 threads), about a tenth of the rate norm rows reach. Written by
    ``layerscope calibrate``; kinds the cost models do not know are refused when they time an op."""
    vector_per_kind_source: str = ""
    memory: float = Field(default=1.0, gt=0, le=1)
    """Achievable fraction of the main-memory bandwidth for streaming kernels."""
    memory_source: str = _UNCALIBRATED
    matmul_half_flops: dict[DType, float] = Field(default_factory=dict)
    """Shape dependence of GEMM efficiency, per matrix dtype: the work per GEMM op, in FLOPs, at
    which a GEMM reaches half of its asymptotic rate (Hockney's half-performance size n½). A GEMM
    of W FLOPs then runs at ``peak · matmul_for(dtype) · W / (W + half)``. Absent dtypes (and an
    empty mapping, the default) mean no shape dependence. Keyed by the dtype whose peak is used
    after the fallback rules; the tf32 and vector paths use the ``fp32`` entry."""
    matmul_half_flops_source: str = ""
    matmul_rows: dict[DType, RowsTable] = Field(default_factory=dict)
    """Measured GEMM efficiency by row count, per matrix dtype: ``(M, fraction of peak)`` pairs
    with M > 1, ascending. A GEMM with weights and M > 1 rows runs at ``peak · fraction``,
    interpolated linearly in log M and held at the ends; GEMVs (M = 1) and absent dtypes are not
    affected. Written by ``layerscope calibrate``; empty (the default) means no such table."""
    matmul_rows_source: str = ""
    matmul_shapes: dict[DType, ShapesTable] = Field(default_factory=dict)
    """Measured GEMM efficiency by row count M and output width N, per matrix dtype:
    ``(M, N, fraction of peak)`` triples with M > 1. A GEMM with weights and M > 1 rows runs at
    ``peak · fraction``, interpolated linearly in log M within each measured N (held at that N's
    ends), then linearly in log N between the measured widths (held at the ends). Where a dtype
    has this table, it replaces ``matmul_rows``: small-M fp32 GEMMs on a CPU reach less of the peak
    at vocabulary widths than at projection widths (measured on the reference CPU at M = 8:
    50-60 GFLOP/s for N = 2048-8192, 38 GFLOP/s for N = 128256). Written by ``layerscope calibrate``."""
    matmul_shapes_source: str = ""
    attention_rows: dict[DType, RowsTable] = Field(default_factory=dict)
    """Measured efficiency of fused attention kernels (SDPA / FlashAttention) by query rows per
    sequence, per matrix dtype: ``(M, fraction of peak)`` pairs with M > 1, ascending. A fused
    attention op whose sequences have M > 1 new tokens (prefill, chunked prefill) runs at
    ``peak · fraction`` of its FLOPs (the graph's count: QK and PV over the attended pairs plus the
    softmax), interpolated linearly in log M and held at the ends; decode (M = 1) and absent dtypes
    are not affected. Causal attention kernels work in tiles, so short sequences waste much of each
    diagonal tile and pay per-tile softmax bookkeeping: on the reference CPU (PyTorch's fp32 flash
    kernel, 2 threads) causal SDPA reached 45-50 GFLOP/s at 128 tokens and 140 at 2048, against
    183 for large GEMMs. Written by ``layerscope calibrate``; empty (the default) means none."""
    attention_rows_source: str = ""
    attention_rows_noncausal: dict[DType, RowsTable] = Field(default_factory=dict)
    """The same for non-causal attention (every query attends to every key): the part of a chunked prefill
    that attends to the cached context. An op whose M new tokens per sequence attend to C cached ones runs
    its causal share ``M / (2C + M)`` of the pairs at ``attention_rows`` and the rest at this table (the
    time-weighted, harmonic, mean). Empty (the default): ``attention_rows`` for every pair."""
    attention_half_head_dim: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    """Head-dim dependence of fused attention: the tables hold for a 128-wide head, and a head of d
    elements runs at ``d / (d + d½) · (128 + d½) / 128`` of that (Hockney's form in the head dim: a tile of a
    narrow head does less MMA work per byte it loads; FlashAttention-3 on H100 reaches 497 TFLOP/s at
    hdim 64 where it reaches 648 at 128, gpu-kernels.md K-10, K-04), capped at the GEMM rate. 0 (the
    default): no head-dim dependence."""
    attention_decode_memory: float | None = Field(default=None, gt=0, le=1)
    """Fraction of the main-memory bandwidth decode attention kernels (one new token per sequence over its
    KV cache) reach on long caches; None (the default): ``memory``, like every other streaming kernel."""
    attention_decode_floor_s: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    """Fixed time of one decode attention kernel beyond ``launch_overhead_s`` (split-KV partials and their
    reduction, a grid too small to fill the chip): its memory time is ``floor + bytes / (bandwidth ·
    attention_decode_memory)``."""
    attention_decode_source: str = ""
    weight_stream_k: dict[DType, RowsTable] = Field(default_factory=dict)
    """Measured main-memory rate of a GEMM's weight stream by its reduction width K, per dtype:
    ``(K, factor)`` pairs, K ascending, where the factor multiplies the main-memory bandwidth for the
    weight bytes of GEMM ops (the rest of their bytes, and every other op, stream at the bandwidth
    itself). Interpolated linearly in log K and held at the ends; absent dtypes are not affected.
    A factor may exceed 1: the bandwidth is that of one reference GEMV shape, and a GEMV reads one
    weight row per dot product, so longer rows stream faster (reference CPU, MKL sgemv on 2 threads:
    27-28 GB/s at K = 1024-2048, 35 at 8192, whatever N). Written by ``layerscope calibrate``."""
    weight_stream_k_source: str = ""
    gemm_k_loop_s: dict[DType, float] = Field(default_factory=dict)
    """Seconds per unit of the reduction width K of one output tile's serial K-loop, per matrix dtype: a
    GEMM kernel takes at least ``K · gemm_k_loop_s`` of arithmetic time, whatever its FLOPs, because each
    tile walks its K in order (load a K-slab, multiply, accumulate) on one engine. It binds only grids too
    small to fill the chip (a few output tiles: narrow N, small M), whose FLOPs and bytes would finish
    sooner: our own H200 ran M = 16-128, N = 128-1024 GEMMs in 2.4-3.0 µs + 1.2 ns per unit of K in bf16 and
    + 0.81 ns in fp8 (cuBLAS, K = 256-4096; bench/gpu/h200-2026-11-27b). A library that splits K across
    engines (cuBLAS does past K ≈ 4-7K at N ≤ 512) beats it there: not modelled. Keyed like
    ``matmul_half_flops``; absent dtypes (and the default, empty) pay no such term."""
    gemm_k_loop_source: str = ""
    activation_stream: float | None = Field(default=None, gt=0, le=MAX_STREAM_FACTOR)
    """Measured main-memory rate of streaming elementwise traffic, as a factor on the main-memory
    bandwidth: the activation bytes of an op whose activations do not fit the last on-chip level
    stream at ``bandwidth · factor``. The rate is STREAM copy/scale's (McCalpin 1995) over footprints
    far beyond the LLC, whose time includes the reads for ownership of the outputs, so such an op pays
    no separate one (``execution.cold_outputs``). Hardware prefetchers keep many lines in flight for
    such streams, which a one-row GEMV's weight stream (the bandwidth of a calibrated CPU) does not:
    on the reference CPU (2 threads) copy/scale moved 41-48 GB/s at median against 25 GB/s for the
    GEMV, and ``silu(g) * u`` over 16 MiB tensors ran in half the time the GEMV rate gives. None (the
    default): everything streams at the bandwidth. Written by ``layerscope calibrate``."""
    activation_stream_source: str = ""

    @field_validator("matmul_per_dtype", "matmul_half_flops", "matmul_rows", "matmul_shapes", "attention_rows",
                     "attention_rows_noncausal", "weight_stream_k", "gemm_k_loop_s", mode="before")
    @classmethod
    def _normalize_dtypes(cls, value: Any, info: Any) -> Any:
        return _dtype_keys(value, f"efficiency.{info.field_name}")

    @field_validator("matmul_rows", "attention_rows", "attention_rows_noncausal", "weight_stream_k")
    @classmethod
    def _rows_table(cls, value: dict[DType, RowsTable], info: Any) -> dict[DType, RowsTable]:
        # (M, fraction of peak) with M > 1, or (K, bandwidth factor) with K >= 1 and factors up to MAX_STREAM_FACTOR
        stream = info.field_name == "weight_stream_k"
        key, what, bound, high = (("K", "factor", "K >= 1", MAX_STREAM_FACTOR) if stream
                                  else ("M", "fraction", "M > 1", 1.0))
        for dtype, rows in value.items():
            where = f"efficiency.{info.field_name}.{dtype.value}"
            xs = [x for x, _ in rows]
            if not rows or xs != sorted(set(xs)) or (xs[0] < 1 if stream else xs[0] <= 1):
                raise ValueError(f"{where}: needs ({key}, {what}) pairs with {bound}, strictly ascending; "
                                 f"got {key} = {xs}")
            bad = [f for _, f in rows if not 0 < f <= high]
            if bad:
                raise ValueError(f"{where}: {what}s must be in (0, {high:g}], got {bad}")
        return value

    @field_validator("matmul_shapes")
    @classmethod
    def _shapes_table(cls, value: dict[DType, ShapesTable]) -> dict[DType, ShapesTable]:
        out: dict[DType, ShapesTable] = {}
        for dtype, rows in value.items():
            where = f"efficiency.matmul_shapes.{dtype.value}"
            if not rows:
                raise ValueError(f"{where}: needs (M, N, fraction) triples, got none")
            small = [(m, n) for m, n, _ in rows if not (m > 1 and n >= 1)]
            if small:
                raise ValueError(f"{where}: needs M > 1 and N >= 1, got (M, N) = {small}")
            bad = [f for _, _, f in rows if not 0 < f <= 1]
            if bad:
                raise ValueError(f"{where}: fractions must be in (0, 1], got {bad}")
            ordered = tuple(sorted(rows, key=lambda r: (r[1], r[0])))
            repeated = [(a[0], a[1]) for a, b in itertools.pairwise(ordered) if a[:2] == b[:2]]
            if repeated:
                raise ValueError(f"{where}: one fraction per (M, N), got repeats at {repeated}")
            out[dtype] = ordered
        return out

    @field_validator("matmul_half_flops", "gemm_k_loop_s")
    @classmethod
    def _non_negative(cls, value: dict[DType, float], info: Any) -> dict[DType, float]:
        for dtype, x in value.items():
            if not (math.isfinite(x) and x >= 0):
                raise ValueError(
                    f"efficiency.{info.field_name}.{dtype.value}: must be a finite number >= 0, got {x!r}"
                )
        return value

    @field_validator("vector_per_kind")
    @classmethod
    def _kind_fractions(cls, value: dict[str, float]) -> dict[str, float]:
        bad = {kind: f for kind, f in value.items() if not 0 < f <= 1}
        if bad:
            raise ValueError(f"efficiency.vector_per_kind: fractions must be in (0, 1], got {bad}")
        return value

    @field_validator("matmul_per_dtype")
    @classmethod
    def _fractions(cls, value: dict[DType, float]) -> dict[DType, float]:
        for dtype, fraction in value.items():
            if not 0 < fraction <= 1:
                raise ValueError(
                    f"efficiency.matmul_per_dtype.{dtype.value}: must be in (0, 1], got {fraction!r}"
                )
        return value

    def matmul_for(self, dtype: DType) -> float:
        """The GEMM efficiency for ``dtype``: its override if any, else ``matmul``."""
        return self.matmul_per_dtype.get(dtype, self.matmul)


ExecutionKernels = Literal["fused", "hf-eager", "serving-graph"]


class ColdCost(BaseModel):
    """The host cost of one small eager op inside a model, when the same code last ran ``reuse_bytes``
    of memory traffic ago (one decoder layer's weights, for an op every layer runs)."""

    model_config = SPEC_CONFIG

    reuse_bytes: float = Field(gt=0, allow_inf_nan=False)
    kernel_s: float = Field(ge=0, allow_inf_nan=False)
    """Per kernel: dispatch and launch with the interpreter's and dispatcher's state that far evicted."""
    module_call_s: float = Field(ge=0, allow_inf_nan=False)
    """Per ``nn.Module`` call: its own Python (``__call__``, the ``forward`` body) at that distance."""


class FreshPages(BaseModel):
    """Page faults on large allocations: a tensor of at least ``min_bytes`` comes from new pages each time it
    is allocated, and its first write pays ``s_per_byte`` per byte for them (the kernel's fault handling and
    zeroing). glibc's ``malloc``, under PyTorch's CPU allocator, serves such sizes by ``mmap`` and returns
    them by ``munmap`` on free (its dynamic mmap threshold stops at 32 MiB on 64-bit); smaller ones are
    reused from the heap, hot."""

    model_config = SPEC_CONFIG

    min_bytes: float = Field(gt=0, allow_inf_nan=False)
    s_per_byte: float = Field(ge=0, allow_inf_nan=False)


class ExecutionSpec(BaseModel):
    """How the software stack on this hardware runs the graph's ops.

    ``kernels`` is the execution profile (:data:`layerscope.cost.execution.EXECUTION_PROFILES`): ``fused``
    (one kernel per graph op, each launched back to back; every preset), ``hf-eager`` (HF
    transformers' eager PyTorch modules, where an RMSNorm is 6-8 aten kernels and RoPE 10) or
    ``serving-graph`` (a CUDA-graph serving engine of the vLLM / SGLang / TensorRT-LLM class: residual
    add fused into the next RMSNorm, q/k/v and gate/up as one GEMM each, decode steps replayed as a CUDA
    graph, plus a host cost per engine step; docs/execution-profiles.md). ``activations_in_cache``:
    activations whose footprint fits the last on-chip level with a bandwidth are read and written there
    rather than in main memory (a CPU running one op after another on megabyte-sized tensors; off by default).
    ``cold_outputs``: each op writes its output into a newly allocated buffer that is not in
    any cache (eager PyTorch on a CPU: the allocator hands out memory last touched before the
    weights streamed through), so the output crosses main memory twice, once read for ownership
    and once written back (write-allocate caches; McCalpin's STREAM notes count the extra read).
    Off by default; ``layerscope calibrate`` turns it on for CPUs.
    """

    model_config = SPEC_CONFIG

    kernels: ExecutionKernels = "fused"
    activations_in_cache: bool = False
    cold_outputs: bool = False
    module_call_s: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    """Python time of one ``nn.Module`` call inside a model (``hf-eager``: each op pays it per module
    call its time includes, ``cost.execution.HF_EAGER_MODULE_CALLS``); 0 for fused engines, which run
    no Python per op. ``layerscope calibrate`` measures it on CPUs."""
    grouped_mm_group_s: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    """Host time per expert group of one ``torch._grouped_mm`` call (``hf-eager`` MoE experts, two calls
    per op, ``cost.execution.hf_eager_grouped_mm_groups``): PyTorch's CPU kernel loops over every group,
    an empty one too, with an ``mm`` and its views each. 0 where the grouped GEMM is one kernel (CUDA)
    or it was not measured; ``layerscope calibrate`` measures it on CPUs."""
    cold_by_reuse: tuple[ColdCost, ...] = ()
    """Small-op host costs by reuse distance, ascending in ``reuse_bytes``: each op pays, per kernel and
    per module call, the costs interpolated in log bytes (held at the ends) at the traffic since its
    code last ran, instead of ``launch_overhead_s`` and ``module_call_s`` (``cost.models``). Empty: those
    scalars for every op. ``layerscope calibrate`` measures it on CPUs, where the interpreter's working set
    is evicted by the weights a layer streams."""
    fresh_pages: FreshPages | None = None
    """Each op's allocations of at least ``fresh_pages.min_bytes`` (``cost.execution.KernelPlan.alloc_bytes``)
    pay ``s_per_byte`` per byte as host time. None: no allocation faults (GPU caching allocators, serving
    engines' preallocated buffers). ``layerscope calibrate`` measures it on CPUs."""
    graph_node_s: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    """Fixed time of one kernel replayed inside a CUDA graph, instead of ``launch_overhead_s`` (profiles that
    capture graphs: ``serving-graph``); None: the profile's default (``cost.execution``, our H200 measurement)."""
    graph_max_tokens: int | None = Field(default=None, gt=0)
    """Largest pass (tokens) the engine replays as a CUDA graph; larger passes launch every kernel. None: the
    profile's default (vLLM's largest capture size)."""
    piecewise_graphs: bool | None = None
    """Whether passes other than pure decode (prefill, chunked) replay piecewise graphs (every op but attention
    and the KV-cache write) up to ``graph_max_tokens`` (vLLM V1's FULL_AND_PIECEWISE); False: they launch every
    kernel (SGLang's and TensorRT-LLM's default). None: the profile's default."""
    step_overhead_s: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    """Host time of one engine step (scheduling, input preparation, sampling bookkeeping) the GPU waits for,
    added once per forward pass to TTFT, TPOT and end to end (``cost.api``). None: the profile's default."""
    step_overhead_per_request_s: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    """Host time per running request per engine step, on top of ``step_overhead_s``. None: the profile's
    default."""
    overlap_host: bool | None = None
    """Whether the engine overlaps a step's host work with the previous step's forward (async / overlap
    scheduling): a decode step then takes max(forward, host) instead of forward + host; a request's first
    (prefill) step always pays its host time. None: the profile's default."""
    request_overhead_s: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    """Time to first token beyond the prefill step: tokenization, queueing, the API server, detokenization and
    streaming the token, once per request. None: the profile's default (0: not modelled)."""
    source: str = "assumption: fused kernels, activations in main memory"

    @field_validator("cold_by_reuse")
    @classmethod
    def _ascending(cls, value: tuple[ColdCost, ...]) -> tuple[ColdCost, ...]:
        sizes = [p.reuse_bytes for p in value]
        if any(b <= a for a, b in itertools.pairwise(sizes)):
            raise ValueError(f"execution.cold_by_reuse: reuse_bytes must be strictly ascending, got {sizes}")
        return value

    @property
    def is_default(self) -> bool:
        return self == _default_execution()


@lru_cache(maxsize=1)
def _default_execution() -> ExecutionSpec:
    """The default execution profile, built once (the defaults are valid: no validator to run)."""
    return ExecutionSpec.model_construct()


class ResolvedFlops(NamedTuple):
    """Which unit of the chip runs arithmetic of a requested dtype, and how fast."""

    requested: DType
    path: FlopsPath
    """``matrix`` (a tensor/matrix unit), ``tf32`` (fp32 on TF32 tensor cores) or ``vector``."""
    dtype: DType | None
    """The matrix dtype whose peak is used (None for the tf32 and vector paths)."""
    peak_flops_per_s: float
    efficiency: float
    """The fraction of ``peak_flops_per_s`` that is achievable on this path."""


# Fallback chains of peak_flops (first entry the chip has wins; then fp32 via tf32/vector):
# - fp16 and bf16 run on the same tensor-core datapath at the same rate on every chip we
#   model (NVIDIA/AMD datasheets print one "BF16/FP16" figure), so each stands in for the other;
# - fp8 on a chip without fp8 units (A100, TPU v5e) is upcast and runs at the bf16/fp16 rate;
# - int8 without int8 units likewise runs at the 16-bit rate;
# - int4 and fp4 fall back to the next wider type the chip supports (int4 → int8 → 16-bit,
#   fp4 → fp8 → 16-bit): weight-only kernels dequantize to the wider type before the MMA;
# - anything that reaches fp32 uses the TF32 tensor-core rate when allowed, else the vector rate.
_FALLBACKS: dict[DType, tuple[DType, ...]] = {
    DType.FP32: (DType.FP32,),
    DType.BF16: (DType.BF16, DType.FP16),
    DType.FP16: (DType.FP16, DType.BF16),
    DType.FP8: (DType.FP8, DType.BF16, DType.FP16),
    DType.INT8: (DType.INT8, DType.BF16, DType.FP16),
    DType.INT4: (DType.INT4, DType.INT8, DType.BF16, DType.FP16),
    DType.FP4: (DType.FP4, DType.FP8, DType.BF16, DType.FP16),
}


class EnergySpec(BaseModel):
    """Energy per unit of work and the board's power figures (issue #30): what ``cost.energy`` multiplies an op's
    FLOPs, bytes and time by. Each figure's citation, and whether it is measured, derived or assumed, is in
    :attr:`HardwareSpec.sources` under ``energy.<field>`` (``energy.matrix_pj_per_flop.bf16``)."""

    model_config = SPEC_CONFIG

    matrix_pj_per_flop: dict[DType, float] = Field(default_factory=dict)
    """Picojoules per FLOP on the matrix units (tensor cores) per dtype, operand delivery from on-chip memory
    included; a dtype without an entry takes the entry of the unit that runs it (``HardwareSpec.resolve_flops``)."""
    vector_pj_per_flop: float = Field(ge=0, allow_inf_nan=False)
    """Picojoules per FP32 FLOP on the vector (CUDA-core / SIMD) units."""
    main_memory_pj_per_byte: float = Field(ge=0, allow_inf_nan=False)
    """Picojoules per byte moved to or from main memory (HBM, GDDR, DRAM): the bytes the cost model charges."""
    cache_pj_per_byte: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    """Picojoules per byte through the last-level cache (L2): every main-memory byte passes it once."""
    sram_pj_per_byte: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    """Picojoules per byte read or written in on-chip SRAM (shared memory / L1): the op's weight, activation and
    KV bytes once each (a lower bound: a GEMM re-reads its tiles; that part is in ``matrix_pj_per_flop``)."""
    interconnect_pj_per_byte: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    """Picojoules per byte one GPU puts on the intra-node link (NVLink): an op's ``comm_bytes``."""
    network_pj_per_byte: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    """Picojoules per byte one GPU puts on the inter-node network (NIC)."""
    idle_power_w: float = Field(ge=0, allow_inf_nan=False)
    """Static power: the board's draw when powered and idle (clocks up, no kernel running), in watts; drawn for
    every second of an op and between steps."""
    board_power_limit_w: float = Field(gt=0, allow_inf_nan=False)
    """The board's power limit (TDP/TGP) in watts: above it the clock drops."""

    @field_validator("matrix_pj_per_flop", mode="before")
    @classmethod
    def _normalize_dtypes(cls, value: Any) -> Any:
        return _dtype_keys(value, "energy.matrix_pj_per_flop")

    @field_validator("matrix_pj_per_flop")
    @classmethod
    def _non_negative(cls, value: dict[DType, float]) -> dict[DType, float]:
        for dtype, number in value.items():
            if not (math.isfinite(number) and number >= 0):
                raise ValueError(f"energy.matrix_pj_per_flop.{dtype.value}: must be a finite number >= 0, "
                                 f"got {number!r}")
        return value

    @model_validator(mode="after")
    def _limit_above_idle(self) -> EnergySpec:
        if self.board_power_limit_w <= self.idle_power_w:
            raise ValueError(f"energy: board_power_limit_w {self.board_power_limit_w} W must exceed "
                             f"idle_power_w {self.idle_power_w} W")
        return self


class HardwareSpec(BaseModel):
    """One chip (GPU, CPU socket, NPU, TPU chip) as the cost models see it."""

    model_config = SPEC_CONFIG

    name: str = Field(min_length=1)
    """Preset-style name (``h100-sxm``) or the device column of a spreadsheet."""
    description: str = ""
    """One line for listings (``NVIDIA H100 SXM5 80GB, HBM3``)."""
    kind: HardwareKind = "accelerator"
    engines: EngineSpec
    memory: tuple[MemoryLevel, ...] = Field(min_length=1)
    """Memory levels ordered from the closest to the engines out to main memory (the last)."""
    interconnect: InterconnectSpec | None = None
    """Chip-to-chip link; None for a chip that is not meant to be used in groups."""
    launch_overhead_s: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    """Fixed host-side cost per kernel/op (launch latency), added to every op's time."""
    efficiency: EfficiencySpec = Field(default_factory=EfficiencySpec)
    execution: ExecutionSpec = Field(default_factory=ExecutionSpec)
    """Kernel granularity and activation residency of the software stack (default: fused)."""
    sources: dict[str, str] = Field(default_factory=dict)
    """Citation per figure, keyed by its dotted path: ``engines.peak_flops_per_s.bf16``,
    ``memory.hbm.bandwidth_bytes_per_s``, ``launch_overhead_s`` …"""
    calibration: _Calibration | None = None
    """The measurements and fit behind a spec written by ``layerscope calibrate``; None otherwise."""
    energy: EnergySpec | None = None
    """Energy per FLOP and per byte and the board's power figures (``cost.energy``); None: no energy reported."""

    @model_validator(mode="after")
    def _check_memory(self) -> HardwareSpec:
        names = [level.name for level in self.memory]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"memory: level names must be unique, repeated: {duplicates}")
        main = self.memory[-1]
        if main.per_engine:
            raise ValueError(f"memory: the last level {main.name!r} is main memory and cannot be per_engine")
        if main.bandwidth_bytes_per_s is None:
            raise ValueError(f"memory: main memory {main.name!r} needs bandwidth_bytes_per_s")
        return self

    @classmethod
    def from_dict(cls, data: Any, *, origin: str = "hardware spec") -> HardwareSpec:
        """Validate ``data``; a bad value raises :class:`HardwareSpecError` naming ``origin``,
        the field path, the value and what is allowed."""
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise HardwareSpecError(format_validation_error(exc, origin)) from None

    # -- memory ----------------------------------------------------------------------------

    @property
    def main_memory(self) -> MemoryLevel:
        """The last memory level (HBM, GDDR, DRAM)."""
        return self.memory[-1]

    @property
    def memory_capacity_bytes(self) -> float:
        """Capacity of main memory."""
        return self.main_memory.capacity_bytes

    @property
    def memory_bandwidth_bytes_per_s(self) -> float:
        """Peak bandwidth of main memory (datasheet)."""
        bandwidth = self.main_memory.bandwidth_bytes_per_s
        assert bandwidth is not None  # enforced by _check_memory
        return bandwidth

    def level(self, name: str) -> MemoryLevel:
        """The memory level called ``name`` (case-insensitive)."""
        wanted = name.strip().lower()
        for level in self.memory:
            if level.name.lower() == wanted:
                return level
        known = ", ".join(level.name for level in self.memory)
        raise HardwareSpecError(f"{self.name}: no memory level {name!r}; levels: {known}")

    def achievable_bandwidth_bytes_per_s(self) -> float:
        """Main-memory bandwidth streaming kernels reach: peak × ``efficiency.memory``."""
        return self.memory_bandwidth_bytes_per_s * self.efficiency.memory

    def row_capacity_bytes(self) -> float | None:
        """On-chip bytes one engine can hold a reduction row in: the capacity of the first per-engine level
        (an SM's shared memory / L1); None for a spec without one (a row is then never re-read)."""
        for level in self.memory:
            if level.per_engine:
                return level.capacity_bytes
        return None

    # -- compute ---------------------------------------------------------------------------

    def resolve_flops(self, dtype: DType | str, *, allow_tf32: bool = True) -> ResolvedFlops:
        """Which unit runs ``dtype`` arithmetic and at what peak (see ``_FALLBACKS`` for the rules).

        fp16/bf16 share a rate; fp8 and int8 fall back to the 16-bit rate on chips without
        such units; int4/fp4 fall back to the next wider supported type; fp32 uses an fp32
        matrix peak if listed, else TF32 tensor cores (when ``allow_tf32``), else the vector units.
        """
        requested = parse_dtype(dtype) if isinstance(dtype, str) else dtype
        peaks = self.engines.peak_flops_per_s
        for candidate in _FALLBACKS[requested]:
            if candidate in peaks:
                return ResolvedFlops(
                    requested, "matrix", candidate, peaks[candidate], self.efficiency.matmul_for(candidate)
                )
        if DType.FP32 in peaks:
            return ResolvedFlops(
                requested, "matrix", DType.FP32, peaks[DType.FP32], self.efficiency.matmul_for(DType.FP32)
            )
        if allow_tf32 and self.engines.tf32_flops_per_s is not None:
            return ResolvedFlops(
                requested, "tf32", None, self.engines.tf32_flops_per_s, self.efficiency.matmul
            )
        return ResolvedFlops(
            requested, "vector", None, self.engines.vector_flops_per_s, self.efficiency.vector
        )

    def _for_unit(self, values: Mapping[DType, _V], dtype: DType | str, allow_tf32: bool, absent: _A) -> _V | _A:
        """``values``' entry for the unit that runs ``dtype`` (after the fallback rules); ``absent`` when none."""
        if not values:
            return absent
        return values.get(self.resolve_flops(dtype, allow_tf32=allow_tf32).dtype or DType.FP32, absent)

    def matmul_half_flops(self, dtype: DType | str, *, allow_tf32: bool = True) -> float:
        """Hockney half-performance GEMM work (FLOPs) of the unit that runs ``dtype``; 0.0 when the
        spec has no shape-dependent efficiency for it (see ``EfficiencySpec.matmul_half_flops``)."""
        return self._for_unit(self.efficiency.matmul_half_flops, dtype, allow_tf32, 0.0)

    def gemm_k_loop_s(self, dtype: DType | str, *, allow_tf32: bool = True) -> float:
        """Seconds per unit of K of one output tile's serial K-loop on the unit that runs ``dtype``; 0.0 when
        the spec has none for it (see ``EfficiencySpec.gemm_k_loop_s``)."""
        return self._for_unit(self.efficiency.gemm_k_loop_s, dtype, allow_tf32, 0.0)

    def matmul_rows(self, dtype: DType | str, *, allow_tf32: bool = True) -> RowsTable:
        """The measured (M, fraction) table of the unit that runs ``dtype``; empty when none."""
        return self._for_unit(self.efficiency.matmul_rows, dtype, allow_tf32, ())

    def attention_rows(self, dtype: DType | str, *, allow_tf32: bool = True) -> RowsTable:
        """The measured (query rows, fraction) table of fused attention in ``dtype``; empty when none."""
        return self._for_unit(self.efficiency.attention_rows, dtype, allow_tf32, ())

    def attention_rows_noncausal(self, dtype: DType | str, *, allow_tf32: bool = True) -> RowsTable:
        """The (query rows, fraction) table of non-causal fused attention in ``dtype``; empty when none."""
        return self._for_unit(self.efficiency.attention_rows_noncausal, dtype, allow_tf32, ())

    def weight_stream_k(self, dtype: DType | str) -> RowsTable:
        """The measured (K, bandwidth factor) table of GEMM weights in ``dtype`` (no fallback to another
        dtype: the rate is the kernel's, and a bf16 GEMV is not an fp32 one); empty when none."""
        return self.efficiency.weight_stream_k.get(DType(dtype), ())

    def matmul_shapes(self, dtype: DType | str, *, allow_tf32: bool = True) -> ShapesTable:
        """The measured (M, N, fraction) table of the unit that runs ``dtype``; empty when none."""
        return self._for_unit(self.efficiency.matmul_shapes, dtype, allow_tf32, ())

    def peak_flops(self, dtype: DType | str, *, allow_tf32: bool = True) -> float:
        """Dense peak FLOP/s of matrix arithmetic in ``dtype``, after the fallback rules."""
        return self.resolve_flops(dtype, allow_tf32=allow_tf32).peak_flops_per_s

    def achievable_flops_per_s(self, dtype: DType | str, *, allow_tf32: bool = True) -> float:
        """``peak_flops(dtype)`` × the efficiency of the unit that runs it."""
        resolved = self.resolve_flops(dtype, allow_tf32=allow_tf32)
        return resolved.peak_flops_per_s * resolved.efficiency

    def achievable_vector_flops_per_s(self, kind: str | None = None) -> float:
        """Non-tensor FP32 FLOP/s real kernels reach: ``vector_flops_per_s`` × ``efficiency.vector``,
        or × the override of ops of ``kind`` (``efficiency.vector_per_kind``) when it has one."""
        fraction = self.efficiency.vector_per_kind.get(kind, self.efficiency.vector) if kind else self.efficiency.vector
        return self.engines.vector_flops_per_s * fraction

    def matrix_pj_per_flop(self, dtype: DType | str) -> float:
        """Picojoules per matrix FLOP in ``dtype``: the entry of the unit that runs it (the fallback rules of
        :meth:`resolve_flops`), else the widest listed entry; 0.0 without energy figures."""
        if self.energy is None or not self.energy.matrix_pj_per_flop:
            return 0.0
        table = self.energy.matrix_pj_per_flop
        resolved = self.resolve_flops(dtype)
        for candidate in (resolved.dtype, resolved.requested, *_FALLBACKS[resolved.requested]):
            if candidate is not None and candidate in table:
                return table[candidate]
        return max(table.values())

    def source(self, field: str) -> str | None:
        """The citation of ``field`` (a dotted path), or None when none is recorded."""
        return self.sources.get(field)


#: Most bad fields listed in one message; the rest are counted.
MAX_LISTED_ERRORS = 8


def row_input_reads(row_bytes: float, capacity_bytes: float | None, cluster: int = 1) -> int:
    """Times a one-kernel row reduction followed by a map over the same row (softmax, a norm) reads its input
    from main memory: once while the row fits the on-chip storage of the engines that own it (``capacity_bytes``
    of one engine times the ``cluster`` of engines sharing it), twice when it does not.

    Such a kernel needs every element of the row twice, for the reduction (max and sum, or the mean square) and
    for the map that writes the output. A row held on chip is loaded once (the single-pass kernels of Dao-AILab's
    QuACK, gpu-kernels.md T10, keep rows in a cluster's distributed shared memory); a wider row is streamed twice
    (the online softmax of Milakov & Gimelshein 2018, arXiv 1805.02867, alg. 3: one pass for max and sum, one to
    normalize). Measured: fp32 softmax on an H200 (228 KB per SM) moves 0.60-0.76 of the narrow rows' useful
    bandwidth at 65K and 262K columns (256 KB and 1 MB rows) and the full rate at 16K (64 KB):
    ``bench/gpu/h200-2026-11-27/softmax-rows-cuda-graph.json``."""
    if capacity_bytes is None or row_bytes <= capacity_bytes * max(cluster, 1):
        return 1
    return 2


def format_validation_error(exc: ValidationError, origin: str) -> str:
    """One message listing the bad fields of ``exc`` with their values (shortened, :func:`quote`),
    prefixed by ``origin``; beyond :data:`MAX_LISTED_ERRORS` fields only their number is given."""
    parts = []
    errors = exc.errors(include_url=False)
    for error in errors[:MAX_LISTED_ERRORS]:
        loc = ".".join(str(p) for p in error["loc"]) or "(top level)"
        value = error.get("input")
        shown = quote(value) if not isinstance(value, dict) else "{…}"
        message = error["msg"] if len(error["msg"]) <= 200 else error["msg"][:199] + "…"
        parts.append(f"field {quote(loc)}: {message} (got {shown})")
    if len(errors) > MAX_LISTED_ERRORS:
        parts.append(f"and {len(errors) - MAX_LISTED_ERRORS} more")
    return f"{origin}: " + "; ".join(parts)
