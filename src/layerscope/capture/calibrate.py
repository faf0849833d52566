"""``layerscope calibrate``: microbenchmarks through torch, fitted into a ``HardwareSpec``.

Measures, on ``device`` with the process's torch thread count:

* GEMMs ``F.linear(A[m, k], W[n, k])`` (cold weights) over a grid: m from 1 (decode) to 2048 (prefill), n x k
  the widths of LLM projections, in fp32 and bf16 (and fp16 on CUDA); and a vocabulary-wide ``lm_head``
  shape (n = 128256) at the row counts ``lm_head`` runs with (one row per sequence);
* copy and scale (STREAM kernels) over array sizes from cache-resident to far beyond the
  last-level cache;
* elementwise add/mul, RMSNorm rows the way Hugging Face models run them in eager mode
  (pow, mean, add, rsqrt, mul, mul) and softmax rows, fp32, over a range of sizes;
* causal ``scaled_dot_product_attention`` over prefill lengths 128 to 2048 with Llama-3.2-1B's and
  Qwen3-0.6B's head shapes (fused attention's rate by query length);
* greedy sampling (argmax over 128256 logits per row, 1 and 8 rows);
* one-row GEMMs over weights far beyond the last-level cache at reduction widths K = 1024 to 8192
  (decode's weight streaming by row length);
* the time of an add on one-element tensors (per-op dispatch with no work), and a one-row RMSNorm
  in mock decoder layers of one-row GEMVs streaming 0.5 to 8 last-level caches each, as bare calls and
  as an ``nn.Module`` (the cold per-kernel and per-module-call costs inside a model, by the bytes
  streamed since the same code last ran).

Every timing is the best of repeated calls after a warm-up (``capture.machine.Timer``: wall
clock on CPU, CUDA events on GPU). The tables are fitted by :mod:`layerscope.hardware.fit`;
the spec carries them and the fit under ``calibration``. torch is imported only inside functions.
"""

from __future__ import annotations

import logging
import platform
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

from layerscope.capture.machine import (
    cache_levels,
    cpu_name,
    last_level_cache_bytes,
    mem_total_bytes,
    time_cold_linear,
    torch_device,
)
from layerscope.cost.execution import RMSNORM_EAGER_FP32_KERNELS
from layerscope.errors import CaptureError, HardwareSpecError
from layerscope.graph.attention import SOFTMAX_FLOPS_PER_SCORE, causal_pairs
from layerscope.graph.embedding import SAMPLING_FLOPS_PER_LOGIT
from layerscope.graph.mlp import ACTIVATION_FLOPS
from layerscope.graph.norms import RMSNORM_FLOPS_PER_ELEMENT
from layerscope.hardware.calibration import (
    AttentionTable,
    CalibrationMeasurements,
    CalibrationRun,
    GemmTable,
    StreamTable,
    VectorTable,
)
from layerscope.hardware.fit import UnusableFitError, calibrated_spec, fit_measurements
from layerscope.hardware.spec import HardwareKind, HardwareSpec
from layerscope.units import DType

log = logging.getLogger(__name__)

#: Called after each measurement with (done, total, label).
ProgressFn = Callable[[int, int, str], None]

_KIB = 1024
_MIB = 1024 * 1024
#: One-row GEMVs per half of a mock decoder layer in the cold small-op measurement (q/k/v/o, or gate/up/down
#: and the next layer's first projection): the weight stream's granularity and its calls' own Python.
COLD_LAYER_GEMVS = 4



@dataclass(frozen=True)
class CalibrationGrid:
    """What to measure. ``None`` sizes are derived from the last-level cache at run time."""

    gemm_m: tuple[int, ...]
    gemm_nk: tuple[tuple[int, int], ...]
    """(n, k) pairs: output width x reduction width of LLM projections."""
    gemm_wide_nk: tuple[tuple[int, int], ...] = ((128256, 2048),)
    """(n, k) of vocabulary-wide GEMMs (``lm_head``: Llama 3's 128256-token vocabulary over a 2048 hidden
    size), measured at ``gemm_wide_m`` only: small-M GEMMs run slower per FLOP at these widths than
    at projection widths (fp32 M = 8 on the reference CPU: 38 against 50-60 GFLOP/s)."""
    gemm_wide_m: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 128)
    """Row counts of the wide GEMMs: ``lm_head`` computes the last position of each sequence, so
    its M is the batch size; larger M would cost seconds per call and time nothing a model runs."""
    dtypes: tuple[str, ...] | None = None
    """GEMM dtypes; None: fp32 and bf16 on CPU, plus fp16 on CUDA."""
    stream_step: int = 2
    """Ratio between successive stream array sizes."""
    stream_min_bytes: int = 16 * _KIB
    stream_max_bytes: int | None = None
    """Largest stream array; None: 4x the last-level cache (footprint 8x), so at least two sizes
    land beyond the 4x-LLC footprint the fit calls main memory."""
    vector_elements: tuple[int, ...] = (16 * _KIB, 256 * _KIB, 1024 * _KIB, 4096 * _KIB)
    activation_elements: tuple[int, ...] = (256 * _KIB, 1024 * _KIB)
    """Elements per tensor of the SiLU measurements (``act_fn(gate)`` into a new tensor, the first of the two
    kernels of HF's gated MLP activation): sizes whose tensors fit a last-level cache of 16 MiB or more (its rate
    in cache; beyond, the memory term decides)."""
    sampling_vocab: int = 128256
    """Vocabulary of the greedy-sampling kernel (argmax over each row of logits; Llama 3's vocabulary)."""
    sampling_rows: tuple[int, ...] = (1, 8)
    """Rows (sequences) of the sampling kernel."""
    vector_width: int = 2048
    """Row width of the norm and softmax kernels (a hidden size / a context length)."""
    gemv_k: tuple[int, ...] = (512, 768, 1024, 2048, 4096, 8192)
    """Reduction widths K of the one-row GEMMs timing weight streaming by row length (``gemv_n`` rows each);
    MoE experts' down projections reduce over 512-2048 (Qwen3-30B-A3B: 768)."""
    gemv_n: int = 2048
    attention_lens: tuple[int, ...] = (128, 256, 512, 1024, 2048)
    """Prefill lengths (query = key tokens per sequence) of the causal attention measurements."""
    attention_heads: tuple[tuple[int, int, int], ...] = ((32, 8, 64), (16, 8, 128))
    """(query heads, K/V heads, head width) of the attention measurements: Llama-3.2-1B's and Qwen3-0.6B's."""
    min_time_s: float = 0.2
    """Time spent repeating each measurement (at least 3 calls after a warm-up)."""
    empty_op_samples: int = 9
    cold_op_samples: int = 24
    """Eager RMSNorms timed, bare and as a module, per reuse distance (CPU only)."""
    cold_reuse_llc: tuple[float, ...] = (0.5, 1.0, 2.0, 4.0, 8.0)
    """Reuse distances of the cold small ops, in last-level caches (one mock decoder layer's weights)."""
    cold_pool_llc: float = 16.0
    """The weight pool the mock layers draw from in turn, in last-level caches (at least 2 layers)."""
    grouped_mm_extra_groups: int = 128
    """Empty expert groups added to a one-group ``torch._grouped_mm`` to time its per-group loop (CPU
    only; Qwen3-30B-A3B has 128 experts)."""
    grouped_mm_samples: int = 5
    fresh_alloc_mib: tuple[float, ...] = (8, 16, 24, 31, 32, 48, 64, 128)
    """Tensor sizes, in MiB, of the fresh-allocation measurements (CPU only): glibc's largest mmap threshold
    (32 MiB on 64-bit) bracketed from both sides."""
    fresh_alloc_samples: int = 5
    max_gemm_s: float | None = None
    """Longest GEMM measured, per call: a row count M of a (dtype, N, K) whose time, extrapolated in
    proportion to M from the largest M measured before, would exceed it is skipped once two M > 1 of
    that shape are measured (the Hockney fit needs two compute-bound sizes; the efficiency tables
    hold their largest M beyond). None: no limit. On a CPU without native bf16 GEMMs (no AVX-512
    BF16/AMX: the 2-core reference VM) bf16 runs about 15x slower than fp32, and its GEMMs of
    M >= 512 were 60% of a quick run."""


FULL_GRID = CalibrationGrid(
    gemm_m=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048),
    gemm_nk=((2048, 2048), (8192, 2048), (2048, 8192), (512, 2048), (4096, 4096)),
    vector_elements=(16 * _KIB, 64 * _KIB, 256 * _KIB, 1024 * _KIB, 4096 * _KIB, 16384 * _KIB),
    activation_elements=(64 * _KIB, 256 * _KIB, 512 * _KIB, 1024 * _KIB),
)
QUICK_GRID = CalibrationGrid(
    gemm_m=(1, 2, 4, 8, 16, 64, 128, 256, 512, 1024),
    gemm_nk=((2048, 2048), (8192, 2048), (2048, 8192)),
    stream_step=4,
    vector_elements=(16 * _KIB, 256 * _KIB, 4096 * _KIB),
    gemv_k=(768, 1024, 2048, 8192),
    attention_lens=(128, 512, 1024, 2048),
    min_time_s=0.05,
    empty_op_samples=5,
    cold_op_samples=16,
    fresh_alloc_mib=(16, 31, 32, 64),
    fresh_alloc_samples=3,
    max_gemm_s=0.25,
)
#: GPU GEMMs turn compute-bound at thousands of rows (H100 bf16: ~990 TFLOP/s over ~3.3 TB/s is ~300 FLOP/B), so
#: the matmul fit needs rows beyond the CPU's 1024 to see two compute-bound sizes; a GPU runs them in microseconds.
GPU_GEMM_M_EXTRA = (2048, 4096, 8192)


def grid_for(device: str, quick: bool) -> CalibrationGrid:
    """The default grid of ``device``: :data:`FULL_GRID` or :data:`QUICK_GRID`, with larger GEMM row counts on a GPU."""
    grid = QUICK_GRID if quick else FULL_GRID
    if device == "cpu":
        return grid
    return replace(grid, gemm_m=tuple(sorted(set(grid.gemm_m) | set(GPU_GEMM_M_EXTRA))))


@dataclass
class _Tables:
    gemm: dict[str, list[Any]] = field(default_factory=lambda: {c: [] for c in GemmTable.model_fields})
    gemm_wide: dict[str, list[Any]] = field(default_factory=lambda: {c: [] for c in GemmTable.model_fields})
    stream: dict[str, list[Any]] = field(default_factory=lambda: {c: [] for c in StreamTable.model_fields})
    vector: dict[str, list[Any]] = field(default_factory=lambda: {c: [] for c in VectorTable.model_fields})
    attention: dict[str, list[Any]] = field(default_factory=lambda: {c: [] for c in AttentionTable.model_fields})
    gemv: dict[str, list[Any]] = field(default_factory=lambda: {c: [] for c in GemmTable.model_fields})
    empty_op_s: list[float] = field(default_factory=list)
    cold_op_s: list[float] = field(default_factory=list)
    cold_module_call_s: list[float] = field(default_factory=list)
    cold_reuse_bytes: list[float] = field(default_factory=list)
    grouped_mm_group_s: list[float] = field(default_factory=list)
    fresh_alloc_bytes: list[float] = field(default_factory=list)
    fresh_alloc_s: list[float] = field(default_factory=list)
    reused_alloc_s: list[float] = field(default_factory=list)

    @staticmethod
    def add(table: dict[str, list[Any]], **row: Any) -> None:
        for key, value in row.items():
            table[key].append(value)

    def lengths(self) -> dict[str, int]:
        """Rows of each column table and samples of each sample list, by field name."""
        return {name: len(next(iter(value.values()))) if isinstance(value, dict) else len(value)
                for name, value in vars(self).items()}


#: Rounds of re-measurement when figures fit out of range; each takes again only the measurements behind them.
MAX_REMEASURE_ROUNDS = 2
#: Least time between two writes of the measurements file while measuring (the file is written once more at
#: the end): a crash loses at most this much of the run.
CHECKPOINT_INTERVAL_S = 5.0
#: Called with the run so far: while measuring (``complete`` False), once measured, after each re-measurement.
CheckpointFn = Callable[[CalibrationRun], None]
#: Called with one line on what is taken again and why.
NotifyFn = Callable[[str], None]


@dataclass
class _Session:
    """A planned calibration: its tasks, the tables they fill, and which rows each task filled."""

    torch: Any
    tasks: list[tuple[str, Callable[[], None]]]
    tables: _Tables
    levels: list[dict[str, Any]]
    llc_bytes: float
    release: Callable[[], None]
    """Frees what the tasks keep between calls (the current GEMM weights)."""
    meta: dict[str, Any]
    spans: list[dict[str, tuple[int, int]]] = field(default_factory=list)
    """Per task run, the rows [start, end) it filled in each table."""
    takes: dict[str, list[float]] = field(default_factory=dict)
    """Per re-measured row (``table[row]``), the median of every take."""
    remeasured: dict[str, int] = field(default_factory=dict)

    def _run_task(self, task: Callable[[], None]) -> dict[str, tuple[int, int]]:
        before = self.tables.lengths()
        with self.torch.inference_mode():
            task()
        after = self.tables.lengths()
        return {name: (before[name], after[name]) for name in before}

    def run(self, progress: ProgressFn | None = None, checkpoint: CheckpointFn | None = None) -> None:
        """Take every measurement, writing the run through ``checkpoint`` every ``CHECKPOINT_INTERVAL_S``,
        at the end, and when a task fails (the measurements so far are kept)."""
        last = time.monotonic()
        try:
            for i, (label, task) in enumerate(self.tasks):
                if progress is not None:
                    progress(i, len(self.tasks), label)
                self.spans.append(self._run_task(task))
                log.debug("measured %s", label)
                if checkpoint is not None and time.monotonic() - last >= CHECKPOINT_INTERVAL_S:
                    checkpoint(self.snapshot())
                    last = time.monotonic()
        except BaseException:
            if checkpoint is not None and self.spans:
                try:
                    checkpoint(self.snapshot())
                except ValueError as exc:  # a task stopped halfway through its rows: they cannot be kept
                    log.warning("calibrate: the measurements so far could not be kept: %s", exc)
            raise
        finally:
            self.release()
        if progress is not None:
            progress(len(self.tasks), len(self.tasks), "done")
        if checkpoint is not None:
            checkpoint(self.snapshot())

    def remeasure(self, refs: set[str], progress: ProgressFn | None = None) -> list[str]:
        """Run again the tasks that filled the rows ``refs`` (``table[row]``); per row, the best time is the
        best of the takes and the median the median of the takes' medians. Returns the tasks' labels."""
        owners = sorted({i for ref in refs if (i := self._owner(ref)) is not None})
        try:
            for done, i in enumerate(owners):
                label, task = self.tasks[i]
                if progress is not None:
                    progress(done, len(owners), f"re-measuring {label}")
                self._merge(i, self._run_task(task))
        finally:
            self.release()
        return [self.tasks[i][0] for i in owners]

    def _owner(self, ref: str) -> int | None:
        name, _, rest = ref.partition("[")
        row = int(rest.rstrip("]")) if rest.rstrip("]").isdigit() else -1
        return next((i for i, span in enumerate(self.spans) if name in span and span[name][0] <= row < span[name][1]),
                    None)

    def _merge(self, task: int, again: dict[str, tuple[int, int]]) -> None:
        for name, (start, end) in self.spans[task].items():
            new_start, new_end = again[name]
            value = getattr(self.tables, name)
            if new_end - new_start != end - start:
                raise CaptureError(f"calibrate: re-measuring {self.tasks[task][0]!r} gave {new_end - new_start} "
                                   f"{name} rows, the first run {end - start}")
            if isinstance(value, dict):
                for j in range(end - start):
                    old, new = start + j, new_start + j
                    ref = f"{name}[{old}]"
                    medians = self.takes.setdefault(ref, [value["median_s"][old]])
                    medians.append(value["median_s"][new])
                    value["time_s"][old] = min(value["time_s"][old], value["time_s"][new])
                    value["median_s"][old] = float(statistics.median(medians))
                    self.remeasured[ref] = self.remeasured.get(ref, 0) + 1
                for column in value.values():
                    del column[new_start:]
            else:  # samples: the new ones replace the old
                value[start:end] = value[new_start:new_end]
                del value[new_start:]

    def measurements(self) -> CalibrationMeasurements:
        tables = self.tables
        return CalibrationMeasurements(
            **self.meta, gemm=GemmTable(**tables.gemm), gemm_wide=GemmTable(**tables.gemm_wide),
            stream=StreamTable(**tables.stream), vector=VectorTable(**tables.vector), empty_op_s=tables.empty_op_s,
            cold_op_s=tables.cold_op_s, cold_module_call_s=tables.cold_module_call_s,
            cold_reuse_bytes=tables.cold_reuse_bytes, grouped_mm_group_s=tables.grouped_mm_group_s,
            fresh_alloc_bytes=tables.fresh_alloc_bytes, fresh_alloc_s=tables.fresh_alloc_s,
            reused_alloc_s=tables.reused_alloc_s, attention=AttentionTable(**tables.attention),
            gemv=GemmTable(**tables.gemv), remeasured=dict(self.remeasured))

    def snapshot(self) -> CalibrationRun:
        return CalibrationRun(complete=len(self.spans) == len(self.tasks), measured=len(self.spans),
                              total=len(self.tasks), memory_levels=self.levels, llc_bytes=self.llc_bytes,
                              measurements=self.measurements())


def _stream_sizes(grid: CalibrationGrid, llc_bytes: float, mem_bytes: float) -> list[int]:
    largest = grid.stream_max_bytes or int(4 * llc_bytes)
    largest = int(min(largest, mem_bytes / 8))  # never more than an eighth of the memory per array
    sizes = [grid.stream_min_bytes]
    while sizes[-1] * grid.stream_step <= largest:
        sizes.append(sizes[-1] * grid.stream_step)
    if grid.stream_max_bytes is None:
        # The main-memory fit needs two sizes with footprints (2 arrays) >= 4x LLC.
        for extra in (int(2 * llc_bytes), int(4 * llc_bytes)):
            if extra not in sizes and extra <= mem_bytes / 8:
                sizes.append(extra)
    return sorted(set(sizes))


def _fitting_shapes(shapes: tuple[tuple[int, int], ...], mem_bytes: float) -> list[tuple[int, int]]:
    """The (n, k) shapes whose fp32 weight takes at most an eighth of the memory (as the stream
    arrays do); the others are skipped with a warning (a 1 GiB ``lm_head`` on a small machine)."""
    kept = [(n, k) for n, k in shapes if n * k * 4 <= mem_bytes / 8]
    for n, k in sorted(set(shapes) - set(kept)):
        log.warning("calibrate: skipping the %dx%d GEMM: its fp32 weight (%.3g GiB) exceeds an eighth of the "
                    "memory", n, k, n * k * 4 / 1024**3)
    return kept


def _rmsnorm(torch: Any, x: Any, weight: Any) -> Any:
    # x: [rows, width]; Hugging Face LlamaRMSNorm.forward in eager mode (the kernels a capture times).
    variance = x.pow(2).mean(-1, keepdim=True)
    return weight * (x * torch.rsqrt(variance + 1e-6))


def _silu(torch: Any, gate: Any) -> Any:
    # The first kernel of Hugging Face LlamaMLP's activation in eager mode, act_fn(gate_proj(x)), into a new
    # tensor; the product with up_proj(x) that follows is an elementwise mul
    # (docs/execution-profiles.md, "Kernels in sequence").
    return torch.nn.functional.silu(gate)


def _rmsnorm_module(torch: Any, weight: Any) -> Any:
    """:func:`_rmsnorm` as an ``nn.Module`` (HF's ``LlamaRMSNorm`` in fp32: the same kernels)."""

    class RMSNorm(torch.nn.Module):  # type: ignore[misc, name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.weight = torch.nn.Parameter(weight, requires_grad=False)

        def forward(self, x: Any) -> Any:
            return _rmsnorm(torch, x, self.weight)

    return RMSNorm()


def _causal_sdpa(torch: Any, q: Any, k: Any, v: Any) -> Any:
    # Grouped K/V heads go in as they are (SDPA's enable_gqa); a torch without it gets them repeated.
    sdpa = torch.nn.functional.scaled_dot_product_attention
    try:
        return sdpa(q, k, v, is_causal=True, enable_gqa=q.shape[1] != k.shape[1])
    except TypeError:
        groups = q.shape[1] // k.shape[1]
        return sdpa(q, k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1), is_causal=True)


def _machine(torch: Any, device: str) -> tuple[str, int, list[dict[str, Any]], float]:
    """(device name, engine count, memory levels without bandwidths, last-level cache bytes)."""
    if device == "cuda":
        props = torch.cuda.get_device_properties(0)
        l2 = float(getattr(props, "L2_cache_size", 0) or 50 * _MIB)
        levels = [{"name": "l2", "capacity_bytes": l2},
                  {"name": "hbm", "capacity_bytes": float(props.total_memory)}]
        return str(props.name), int(props.multi_processor_count), levels, l2
    caches = cache_levels()
    llc, from_sysfs = last_level_cache_bytes(caches)
    if not from_sysfs:
        log.warning("no cache sizes in sysfs: assuming a %d MiB last-level cache", llc // _MIB)
    levels = [*caches, {"name": "dram", "capacity_bytes": mem_total_bytes()}]
    return cpu_name(), int(torch.get_num_threads()), levels, llc


def _plan(device: str, grid: CalibrationGrid, quick: bool) -> _Session:
    """The microbenchmarks of ``grid`` on ``device``, as tasks of a session not yet run."""
    torch, dev, timer = torch_device(device)
    name, engines, levels, llc = _machine(torch, device)
    dtypes = grid.dtypes or (("fp32", "bf16", "fp16") if device == "cuda" else ("fp32", "bf16"))
    torch_dtypes = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
    unknown = [d for d in dtypes if d not in torch_dtypes]
    if unknown:
        raise CaptureError(f"calibrate: unsupported GEMM dtypes {unknown}; use {', '.join(torch_dtypes)}")
    mem = mem_total_bytes() if device == "cpu" else float(levels[-1]["capacity_bytes"])
    stream_sizes = _stream_sizes(grid, llc, mem)
    tasks: list[tuple[str, Callable[[], None]]] = []
    tables = _Tables()
    t = grid.min_time_s
    # The weights of the current (dtype, n, k), reused across m: drawing a 1 GiB lm_head takes seconds.
    current: dict[tuple[str, int, int], list[Any]] = {}

    # (dtype, n, k, wide) -> (m, median seconds per GEMM) measured, in order (grid.max_gemm_s)
    series: dict[tuple[str, int, int, bool], list[tuple[int, float]]] = {}

    def gemm(dt: str, m: int, n: int, k: int, *, wide: bool = False) -> None:
        # Weights cold, as in a model run whose layers' weights exceed the LLC: each call takes the
        # next of enough [n, k] matrices to overflow the LLC twice (y = x W^T, as nn.Linear does);
        # one matrix reused would sit in the cache and flatter the rate (measured: 173 against
        # 134 GFLOP/s at 128 x 2048 x 2048 fp32 on the 32 MiB L3 of the reference CPU).
        done = series.setdefault((dt, n, k, wide), [])
        if (grid.max_gemm_s is not None and sum(1 for mm, _ in done if mm > 1) >= 2
                and all(mm != m for mm, _ in done)):  # a re-measurement is never skipped
            last_m, last_s = done[-1]
            if last_s * m / last_m > grid.max_gemm_s:
                log.info("calibrate: skipping gemm %s %dx%dx%d: about %.3g s per GEMM, beyond %g s", dt, m, n, k,
                         last_s * m / last_m, grid.max_gemm_s)
                return
        tdt = torch_dtypes[dt]
        if (dt, n, k) not in current:
            current.clear()
            w_bytes = n * k * torch.tensor([], dtype=tdt).element_size()
            count = max(1, min(64, -(-int(2 * llc) // w_bytes)))  # a GPU's L2 (50 MB on an H100) too
            current[(dt, n, k)] = [torch.randn(n, k, device=dev).to(tdt) for _ in range(count)]
        x = torch.randn(m, k, device=dev).to(tdt)
        best_s, median_s = time_cold_linear(torch, timer, x, current[(dt, n, k)], t)
        done.append((m, median_s))
        tables.add(tables.gemm_wide if wide else tables.gemm, dtype=DType(dt), m=m, n=n, k=k, time_s=best_s,
                   median_s=median_s)

    def stream(kernel: str, nbytes: int) -> None:
        a = torch.ones(nbytes // 4, device=dev)
        out = torch.empty_like(a)
        fn = partial(out.copy_, a) if kernel == "copy" else partial(torch.mul, a, 3.0, out=out)
        timing = timer.time(fn, t)
        tables.add(tables.stream, kernel=kernel, moved_bytes=2.0 * a.numel() * 4, footprint_bytes=2.0 * a.numel() * 4,
                   time_s=timing.best_s, median_s=timing.median_s)

    def gemv(nbytes: int) -> None:
        # Weight streaming as a decode step does it: y = x W^T over 2048-wide fp32 matrices whose
        # total (nbytes) is far beyond the LLC, so every call reads its matrix from main memory.
        k = 2048
        n = 2048
        count = max(2, -(-nbytes // (n * k * 4)))
        weights = [torch.randn(n, k, device=dev) for _ in range(count)]
        best_s, median_s = time_cold_linear(torch, timer, torch.randn(1, k, device=dev), weights, t)
        # Per call: one matrix read (the vectors are negligible); the footprint is the whole set.
        tables.add(tables.stream, kernel="gemv", moved_bytes=float(n * k * 4), footprint_bytes=float(count * n * k * 4),
                   time_s=best_s, median_s=median_s)

    def gemv_k(dt: str, k: int) -> None:
        # Decode's projections by row length: y = x W^T over [n, k] weights filling 4x the LLC (every
        # call reads its matrix from main memory), in the GEMM's dtype.
        n = grid.gemv_n
        tdt = torch_dtypes[dt]
        w_bytes = n * k * torch.tensor([], dtype=tdt).element_size()
        count = max(2, -(-int(4 * llc) // w_bytes))
        weights = list(torch.rand(count, n, k, device=dev).to(tdt).unbind(0))
        best_s, median_s = time_cold_linear(torch, timer, torch.randn(1, k, device=dev).to(tdt), weights, t)
        tables.add(tables.gemv, dtype=DType(dt), m=1, n=n, k=k, time_s=best_s, median_s=median_s)

    def vector(kernel: str, elements: int) -> None:
        width = min(grid.vector_width, elements)
        rows = elements // width
        n = rows * width
        x = torch.randn(rows, width, device=dev)
        y = torch.randn(rows, width, device=dev)
        out = torch.empty_like(x)
        w = torch.ones(width, device=dev)
        if kernel in ("add", "mul"):
            fn: Callable[[], object] = partial(torch.add if kernel == "add" else torch.mul, x, y, out=out)
            flops, moved, foot = float(n), 3.0 * n * 4, 3.0 * n * 4
        elif kernel == "silu":
            # HF's act_fn(gate) into a new tensor: the SiLU's FLOPs; read g, write silu(g)
            fn = partial(_silu, torch, x)
            flops, moved, foot = float(ACTIVATION_FLOPS["silu"] * n), 2.0 * n * 4, 2.0 * n * 4
        elif kernel == "rmsnorm":
            fn = partial(_rmsnorm, torch, x, w)
            flops, moved, foot = float(RMSNORM_FLOPS_PER_ELEMENT * n), 2.0 * n * 4 + width * 4, 2.0 * n * 4
        else:
            fn = partial(torch.softmax, x, -1)
            flops, moved, foot = float(SOFTMAX_FLOPS_PER_SCORE * n), 2.0 * n * 4, 2.0 * n * 4
        timing = timer.time(fn, t)
        tables.add(tables.vector, kernel=kernel, elements=n, flops=flops, moved_bytes=moved, footprint_bytes=foot,
                   time_s=timing.best_s, median_s=timing.median_s)

    def attention(dt: str, heads: int, kv_heads: int, head_dim: int, tokens: int) -> None:
        # A prefill's attention as HF's sdpa path runs it: [B, heads, S, D] queries over the
        # [B, kv_heads, S, D] keys and values just written, causal, no mask tensor.
        tdt = torch_dtypes[dt]
        q = torch.randn(1, heads, tokens, head_dim, device=dev).to(tdt)
        k, v = (torch.randn(1, kv_heads, tokens, head_dim, device=dev).to(tdt) for _ in range(2))
        fn = partial(_causal_sdpa, torch, q, k, v)
        timing = timer.time(fn, t)
        pairs = causal_pairs(tokens, 0)
        flops = float(heads * pairs * (4 * head_dim + SOFTMAX_FLOPS_PER_SCORE))
        tables.add(tables.attention, dtype=DType(dt), batch=1, heads=heads, kv_heads=kv_heads, head_dim=head_dim,
                   query_len=tokens, flops=flops, time_s=timing.best_s, median_s=timing.median_s)

    def sampling(rows: int) -> None:
        # Greedy sampling as generate() runs it: argmax over each sequence's logits; an index-tracking
        # reduction that runs far below the norms' rate, so it gets its own entry (efficiency.vector_per_kind).
        logits = torch.randn(rows, grid.sampling_vocab, device=dev)
        timing = timer.time(partial(torch.argmax, logits, -1), t)
        n = rows * grid.sampling_vocab
        tables.add(tables.vector, kernel="argmax", elements=n, flops=float(SAMPLING_FLOPS_PER_LOGIT * n),
                   moved_bytes=4.0 * n + 8.0 * rows, footprint_bytes=4.0 * n + 8.0 * rows,
                   time_s=timing.best_s, median_s=timing.median_s)

    def empty_op() -> None:
        a = torch.ones(1, device=dev)
        out = torch.empty_like(a)
        for _ in range(grid.empty_op_samples):
            tables.empty_op_s.append(timer.time(partial(torch.add, a, a, out=out), t / 10).best_s)

    def cold_ops() -> None:
        # Inside a model every small op runs with the interpreter's state evicted by the weights streamed
        # since its code last ran (the same op in the layer before: one layer's weights ago) and its own
        # objects (its module, its weight) evicted by everything since the forward before. On the
        # reference CPU a one-row RMSNorm module took 11 µs in a hot loop and 16, 22 and 54 µs in mock
        # layers streaming 44, 80 and 224 MiB, whatever the bytes right before it. Time it so: per reuse
        # distance D, mock layers of one-row GEMVs over D of weights each, run in turn over a pool beyond
        # the LLC (a forward streams each weight once), each layer with its own RMSNorm, called bare after
        # the layer's first half and as an nn.Module after its second: each D after the layer before's.
        k = 2048
        row_bytes = 4 * k
        distances = [f * llc for f in grid.cold_reuse_llc if f * llc * 2 <= mem / 8]
        if not distances:
            return
        pool_bytes = max(grid.cold_pool_llc * llc, 2 * distances[-1])
        pool = torch.empty(int(pool_bytes // row_bytes), k, device=dev).uniform_(-1.0, 1.0)
        xv = torch.randn(1, k, device=dev)
        x = torch.randn(1, grid.vector_width, device=dev)
        linear = torch.nn.functional.linear

        def stream_then(rows: int, first: int, fn: Callable[[], object]) -> float:
            # COLD_LAYER_GEMVS GEMVs over pool rows first .. first + COLD_LAYER_GEMVS * rows, then time fn
            for g in range(COLD_LAYER_GEMVS):
                linear(xv, pool[first + g * rows:first + (g + 1) * rows])
            start = time.perf_counter()
            fn()
            return time.perf_counter() - start

        for distance in distances:
            rows = max(1, int(distance / 2 / row_bytes / COLD_LAYER_GEMVS))
            half = rows * COLD_LAYER_GEMVS
            layers = max(2, pool.shape[0] // (2 * half))
            weights = [torch.ones(grid.vector_width, device=dev) for _ in range(layers)]
            norms = [_rmsnorm_module(torch, torch.ones(grid.vector_width, device=dev)) for _ in range(layers)]
            for sample in range(-layers, grid.cold_op_samples):  # one pass over the pool to warm up
                i = sample % layers
                first = (2 * half * i) % max(1, pool.shape[0] - 2 * half + 1)
                bare_s = stream_then(rows, first, partial(_rmsnorm, torch, x, weights[i]))
                module_s = stream_then(rows, first + half, partial(norms[i], x))
                if sample >= 0:
                    tables.cold_op_s.append(bare_s / RMSNORM_EAGER_FP32_KERNELS)
                    # The same kernels through an nn.Module call (as every HF norm, projection and
                    # embedding runs): the difference is the module call's own cold cost.
                    tables.cold_module_call_s.append(module_s - bare_s)
                    tables.cold_reuse_bytes.append(float(distance))

    def grouped_mm_groups() -> None:
        # transformers 5 runs MoE experts through torch._grouped_mm, whose CPU kernel loops over every
        # expert group (an mm and its views each, empty groups too): time one row in the first of
        # 1 + extra groups of small [64, 64] weights against the same with one group, per extra group.
        extra = grid.grouped_mm_extra_groups
        x = torch.randn(1, 64, device=dev)
        weights = {g: torch.randn(g, 64, 64, device=dev) for g in (1, 1 + extra)}
        offs = {g: torch.ones(g, dtype=torch.int32, device=dev) for g in weights}
        for _ in range(grid.grouped_mm_samples):
            one, many = (timer.time(partial(torch._grouped_mm, x, weights[g], offs=offs[g]), t / 10).median_s
                         for g in sorted(weights))
            tables.grouped_mm_group_s.append((many - one) / extra)

    def fresh_allocs(mib: float, *, warm_up_only: bool = False) -> None:
        # An eager op allocates its output and the reference drops when the next line of Python is done
        # with it; PyTorch's CPU allocator is malloc, which hands sizes above its mmap threshold new pages
        # every time. Time HF's gated activation, sigmoid(g) * u, into new tensors against the same into
        # preallocated ones: the difference is two allocations' page faults (and munmaps). glibc raises
        # its mmap threshold (and its heap-trim threshold, twice that) to the largest mmapped chunk freed,
        # up to 32 MiB, as a model's warm-up iterations do with the model's sizes: every size is run once
        # before any is timed, or the smaller ones fault only because nothing larger came first.
        n = int(mib * _MIB) // 4
        g, u = (torch.empty(n, device=dev).uniform_(-1.0, 1.0) for _ in range(2))
        a, b = torch.empty(n, device=dev), torch.empty(n, device=dev)

        def fresh() -> float:
            start = time.perf_counter()
            torch.mul(torch.sigmoid(g), u)
            return time.perf_counter() - start

        def reused() -> float:
            start = time.perf_counter()
            torch.mul(torch.sigmoid(g, out=a), u, out=b)
            return time.perf_counter() - start

        for _ in range(2):
            fresh(), reused()
        if warm_up_only:
            return
        for _ in range(grid.fresh_alloc_samples):
            tables.fresh_alloc_s.append(fresh())
            tables.reused_alloc_s.append(reused())
            tables.fresh_alloc_bytes.append(float(4 * n))

    def fresh_warm_up(sizes_mib: list[float]) -> None:
        for mib in sizes_mib:
            fresh_allocs(mib, warm_up_only=True)

    tasks.append(("empty op", empty_op))
    if device == "cpu":
        fresh_mib = [mib for mib in grid.fresh_alloc_mib if 4 * mib * _MIB <= mem / 8]  # g, u, two outputs
        if fresh_mib:
            tasks.append(("fresh allocations warm-up", partial(fresh_warm_up, fresh_mib)))
        for mib in fresh_mib:
            tasks.append((f"fresh allocations {mib:g} MiB", partial(fresh_allocs, mib)))
        tasks.append(("cold small ops", cold_ops))
        if hasattr(torch, "_grouped_mm"):
            tasks.append(("grouped GEMM groups", grouped_mm_groups))
    for nbytes in stream_sizes:
        for kernel in ("copy", "scale"):
            tasks.append((f"{kernel} {nbytes / _MIB:.3g} MiB", partial(stream, kernel, nbytes)))
    if device == "cpu":
        for factor in (4, 8):
            tasks.append((f"gemv stream {factor}x LLC", partial(gemv, int(factor * llc))))
    for elements in grid.vector_elements:
        for kernel in ("add", "mul", "rmsnorm", "softmax"):
            tasks.append((f"{kernel} {elements} elements", partial(vector, kernel, elements)))
    for elements in grid.activation_elements:
        tasks.append((f"silu {elements} elements", partial(vector, "silu", elements)))
    for rows in grid.sampling_rows:
        tasks.append((f"argmax {rows}x{grid.sampling_vocab}", partial(sampling, rows)))
    for dt in dtypes:
        for n, k in grid.gemm_nk:
            for m in grid.gemm_m:
                tasks.append((f"gemm {dt} {m}x{n}x{k}", partial(gemm, dt, m, n, k)))
        for n, k in _fitting_shapes(grid.gemm_wide_nk, mem):
            for m in grid.gemm_wide_m:
                tasks.append((f"gemm {dt} {m}x{n}x{k}", partial(gemm, dt, m, n, k, wide=True)))
        for k in grid.gemv_k:
            tasks.append((f"gemv {dt} 1x{grid.gemv_n}x{k} beyond the LLC", partial(gemv_k, dt, k)))
        for heads, kv_heads, head_dim in grid.attention_heads:
            for tokens in grid.attention_lens:
                tasks.append((f"attention {dt} {heads}/{kv_heads}x{head_dim} causal {tokens}",
                              partial(attention, dt, heads, kv_heads, head_dim, tokens)))
    return _Session(torch=torch, tasks=tasks, tables=tables, levels=levels, llc_bytes=llc, release=current.clear,
                    meta={"device": device, "device_name": name, "threads": engines,
                          "torch_version": str(torch.__version__), "quick": quick})


def measure(device: str = "cpu", grid: CalibrationGrid = FULL_GRID, *, quick: bool = False,
            progress: ProgressFn | None = None) -> tuple[CalibrationMeasurements, list[dict[str, Any]], float]:
    """Run the microbenchmarks; returns the tables, the memory levels and the last-level cache bytes."""
    session = _plan(device, grid, quick)
    session.run(progress)
    return session.measurements(), session.levels, session.llc_bytes


def calibrate(device: str = "cpu", *, quick: bool = False, grid: CalibrationGrid | None = None,
              name: str | None = None, progress: ProgressFn | None = None, checkpoint: CheckpointFn | None = None,
              notify: NotifyFn | None = None, max_remeasure: int = MAX_REMEASURE_ROUNDS) -> HardwareSpec:
    """Measure this machine and fit the measurements into a calibrated ``HardwareSpec``.

    The run goes to ``checkpoint`` as it is measured. Figures that fit outside their valid range
    (``hardware.fit``: a disturbed measurement) have their measurements taken again, up to
    ``max_remeasure`` rounds, each announced through ``notify``; what is still out of range is then
    clamped or dropped and flagged in the spec's ``calibration.fit.flags``."""
    grid = grid or grid_for(device, quick)
    session = _plan(device, grid, quick)
    session.run(progress, checkpoint)
    for round_ in range(1, max_remeasure + 1):
        refs, why = out_of_range(session.measurements(), session.llc_bytes)
        if not refs:
            break
        if notify is not None:
            notify(f"re-measuring (round {round_} of {max_remeasure}) the measurements behind {why}")
        labels = session.remeasure(refs, progress)
        log.info("re-measured %s", ", ".join(labels))
        if checkpoint is not None:
            checkpoint(session.snapshot())
    return spec_from_measurements(session.measurements(), session.levels, session.llc_bytes, name=name)


def out_of_range(meas: CalibrationMeasurements, llc_bytes: float) -> tuple[set[str], str]:
    """The rows (``table[row]``) behind the figures of ``meas`` that fit outside their valid range, and one
    line saying which figures and values; no rows when every figure is in range or the fit fails otherwise
    (which re-measuring named rows cannot help)."""
    try:
        flags = fit_measurements(meas, llc_bytes=llc_bytes).flags
    except UnusableFitError as exc:
        return set(exc.rows), str(exc)
    except HardwareSpecError:
        return set(), ""
    return {ref for flag in flags for ref in flag.rows}, "; ".join(flag.problem() for flag in flags)


def spec_from_run(run: CalibrationRun, *, name: str | None = None) -> HardwareSpec:
    """The calibrated spec of a kept measurements file (``layerscope calibrate --from-measurements``)."""
    return spec_from_measurements(run.measurements, run.memory_levels, run.llc_bytes, name=name)


def spec_from_measurements(meas: CalibrationMeasurements, levels: list[dict[str, Any]], llc: float, *,
                           name: str | None = None) -> HardwareSpec:
    """The calibrated spec of :func:`measure`'s tables (or of several runs' tables combined with
    :func:`~layerscope.hardware.fit.combine_measurements`)."""
    device, quick = meas.device, meas.quick
    kind: HardwareKind = "gpu" if device == "cuda" else "cpu"
    label = name or (f"calibrated-{kind} ({meas.device_name}, {meas.threads} "
                     f"{'threads' if kind == 'cpu' else 'SMs'})")
    return calibrated_spec(
        meas, name=label, kind=kind, engine_count=meas.threads, memory_levels=levels, llc_bytes=llc,
        description=f"calibrated by layerscope on {platform.node() or 'this machine'}"
                    f"{' (--quick)' if quick else ''}")
