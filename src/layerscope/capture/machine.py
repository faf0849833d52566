"""A quick measured ``HardwareSpec`` of the machine torch runs on (seconds of microbenchmarks, in rounds).

Measures, through torch on ``device``, in rounds (:func:`measure_machine_robust`):

* matrix throughput (CPU): ``F.linear`` as ``nn.Linear`` runs a 256-token prefill through an MLP's projections,
  each call over the next of a set of weights twice the last-level cache, median times; a ladder of ``torch.mm``
  squares first bounds what those would take (a dtype the CPU emulates is not timed for minutes, and its rate is
  the ladder's). On a GPU, the best of large squares. 2·m·k·n FLOPs each;
* memory bandwidth: ``out = a + b`` over arrays far larger than the caches, 3 · 4 B moved per
  element (two reads, one write; the STREAM "add" kernel, McCalpin 1995);
* vector throughput: the same add on a cache-resident array, 1 FLOP per element;
* per-op overhead: the time of an add on one-element tensors (dispatch, no work).

Each figure is the best of its rounds (the round least disturbed by other work); the worst round's figures make a
second spec that bounds what the disturbance could do to a prediction. Other processes' CPU load is read over the
measurement (:mod:`layerscope.hardware.host`); when they took cores our threads needed, the measurement can wait
for a quiet window and measure again. :func:`choose_threads` picks as many intra-op threads as the other processes
leave a free core.

The measured rates are written as the peaks, with efficiencies of 1.0, so the cost models
reproduce what was measured; each figure's source says "measured" with its method. This is the
quick path used by ``layerscope demo``; ``layerscope calibrate`` (``capture/calibrate.py``) is the
full one, a grid of microbenchmarks fitted by ``hardware/fit.py``, timed with the same
:class:`Timer` (wall clock on CPU, CUDA events on GPU).
"""

from __future__ import annotations

import logging
import math
import os
import platform
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, NamedTuple

from layerscope.capture.build import require_torch
from layerscope.errors import CaptureError
from layerscope.hardware.host import (
    BUSY_OVERSUBSCRIBED_CORES,
    CpuLoad,
    cpu_name,
    cpu_sample,
    load_between,
    measure_load,
)
from layerscope.hardware.spec import HardwareSpec

log = logging.getLogger(__name__)

#: (m, k, n) of the ladder of GEMMs ``torch.mm(a[m, k], b[k, n])``, each at most 8x the work of the one before, so
#: a rate disturbed on a small shape (a thread waiting for a core at every barrier) still lets the next be timed
#: (:data:`MAX_GEMM_CALL_S`). On a CPU they only bound what the layer-shaped GEMMs below would take (and give the
#: rate of a dtype whose layer GEMMs would take too long: one the CPU emulates); on a GPU, where the layer shapes
#: are launch-bound, the larger squares set the rate.
_GEMM_SHAPES = ((256, 256, 256), (512, 512, 512), (1024, 1024, 1024))
_GEMM_SHAPES_GPU = ((1024, 1024, 1024), (2048, 2048, 2048), (4096, 4096, 4096), (8192, 8192, 8192))
#: (m, k, n) of the GEMMs that set a CPU's rate: ``F.linear(x[m, k], W[n, k])`` as ``nn.Linear`` runs a 256-token
#: prefill through an MLP's up (2048 -> 8192) and down (8192 -> 2048) projections, each call over the next of a set
#: of weights twice the last-level cache, as a layer streams its weights; the rate is their FLOPs over their median
#: times. On the reference VM these ran at 47-90 GFLOP/s (2 threads) where ``torch.mm`` of cached squares ran at
#: 120-160: a spec from the squares predicted a layer 1.6-3x too fast (bench/RESULTS.md, "demo stability").
_LINEAR_SHAPES = ((256, 2048, 8192), (256, 8192, 2048))
#: Last-level cache assumed where sysfs gives none.
DEFAULT_LLC_BYTES = 64 * 1024 * 1024
#: A GEMM predicted (from the best rate of the smaller shapes) to take longer than this per call is not
#: timed: a dtype the CPU emulates (bf16 without AVX512-BF16/AMX: ~0.2 GFLOP/s measured on an EPYC VM)
#: would take minutes a shape, and a call that long adds nothing to the peak the fast shapes bound.
MAX_GEMM_CALL_S = 1.0
_STREAM_ELEMENTS = 32 * 1024 * 1024  # 128 MiB per fp32 array: far beyond any L3 here
_CACHED_ELEMENTS = 16 * 1024
#: On a GPU 16K elements are all launch; 2M fp32 (24 MB for an add's three arrays) still fit an H100's L2.
_CACHED_ELEMENTS_GPU = 2 * 1024 * 1024


class Timing(NamedTuple):
    """Per-call times of one benchmarked callable, in float seconds."""

    best_s: float
    """The minimum: the run least disturbed by other work on the machine."""
    median_s: float
    reps: int


class Timer:
    """Times callables on one torch device: wall clock after a synchronize on CPU, CUDA events
    on GPU (so host-side jitter between launches is not counted)."""

    def __init__(self, torch: Any, device: str) -> None:
        self.torch = torch
        self.device = device

    def sync(self) -> None:
        if self.device == "cuda":
            self.torch.cuda.synchronize()

    def _once_s(self, fn: Callable[[], object]) -> float:
        if self.device == "cuda":
            start = self.torch.cuda.Event(enable_timing=True)
            end = self.torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            return float(start.elapsed_time(end)) / 1e3  # elapsed_time is in milliseconds
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0

    def time(self, fn: Callable[[], object], min_time_s: float, *, min_reps: int = 3,
             max_reps: int = 10_000) -> Timing:
        """Times of ``fn`` over repetitions lasting about ``min_time_s`` (after one warm-up call)."""
        fn()
        self.sync()
        samples: list[float] = []
        start = time.perf_counter()
        while len(samples) < max_reps:
            samples.append(self._once_s(fn))
            if time.perf_counter() - start > min_time_s and len(samples) >= min_reps:
                break
        return Timing(min(samples), statistics.median(samples), len(samples))


def torch_device(device: str) -> tuple[Any, Any, Timer]:
    """``(torch, torch.device, Timer)`` for ``device`` (``cpu`` or ``cuda``); a clear
    :class:`CaptureError` for an unknown device or a missing GPU."""
    if device not in ("cpu", "cuda"):
        raise CaptureError(f"--device {device!r}: use cpu or cuda")
    torch, _ = require_torch()
    if device == "cuda" and not torch.cuda.is_available():
        raise CaptureError("--device cuda: no CUDA GPU is visible to torch on this machine")
    return torch, torch.device(device), Timer(torch, device)


def time_cold_linear(torch: Any, timer: Timer, x: Any, weights: list[Any], min_time_s: float) -> tuple[float, float]:
    """Best and median seconds per ``F.linear(x[m, k], W[n, k])`` call, each call taking the next of
    ``weights``, so a list that overflows the cache keeps every weight cold."""
    linear = torch.nn.functional.linear

    def run() -> None:
        for w in weights:
            linear(x, w)

    timing = timer.time(run, min_time_s)
    return timing.best_s / len(weights), timing.median_s / len(weights)


def cold_weights(torch: Any, dev: Any, dtype: Any, n: int, k: int, llc_bytes: float) -> list[Any]:
    """Weights ``W[n, k]`` of ``dtype`` enough to span twice ``llc_bytes`` (at least 2, at most 64, as calibrate's
    GEMMs): cycled by :func:`time_cold_linear`, every call reads its weight from main memory."""
    size = n * k * torch.tensor([], dtype=dtype).element_size()
    count = max(2, min(64, math.ceil(2 * llc_bytes / size)))
    return list(torch.randn(count, n, k, device=dev).to(dtype).unbind(0))


def _best_s(fn: Callable[[], object], min_time_s: float, timer: Timer) -> float:
    """Best per-call time of ``fn`` over repetitions lasting about ``min_time_s``."""
    return timer.time(fn, min_time_s).best_s


def _time_add(torch: Any, dev: Any, elements: int, min_time_s: float, timer: Timer) -> float:
    """Best time of ``out = a + b`` over ``elements`` fp32 elements (the arrays are freed after)."""
    a = torch.ones(elements, device=dev)
    b = torch.ones(elements, device=dev)
    out = torch.empty(elements, device=dev)
    return _best_s(partial(torch.add, a, b, out=out), min_time_s, timer)




def last_level_cache_bytes(caches: list[dict[str, Any]] | None = None) -> tuple[float, bool]:
    """The largest cache's capacity in bytes (of ``caches``, default :func:`cache_levels`), and whether sysfs
    gave one; :data:`DEFAULT_LLC_BYTES` when it gave none. The one default every measurement uses."""
    llc = max((float(c["capacity_bytes"]) for c in (cache_levels() if caches is None else caches)), default=0.0)
    return (llc, True) if llc > 0 else (float(DEFAULT_LLC_BYTES), False)


def cache_levels() -> list[dict[str, Any]]:
    """L2/L3 sizes from sysfs (Linux); the largest of each level, shared ones counted once."""
    base = Path("/sys/devices/system/cpu/cpu0/cache")
    levels: dict[int, int] = {}
    if base.is_dir():
        for idx in sorted(base.glob("index*")):
            try:
                level = int((idx / "level").read_text())
                kind = (idx / "type").read_text().strip()
                size = (idx / "size").read_text().strip()
            except (OSError, ValueError):
                continue
            if kind == "Instruction" or level < 2:
                continue
            mult = {"K": 1024, "M": 1024**2}.get(size[-1], 1)
            levels[level] = max(levels.get(level, 0), int(size.rstrip("KM")) * mult)
    return [{"name": f"l{lvl}", "capacity_bytes": float(cap), "per_engine": lvl == 2}
            for lvl, cap in sorted(levels.items())]


def mem_total_bytes() -> float:
    """Installed memory from /proc/meminfo; inf when unknown."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return float(line.split()[1]) * 1024
    except OSError:
        pass
    return float("inf")


#: Rounds of the whole probe set; each figure is the best over them (the round least disturbed).
DEFAULT_ROUNDS = 3


class RoundFigures(NamedTuple):
    """The figures of one round of probes (rates are per second of wall time)."""

    gemm_flops_per_s: dict[str, float]
    """Best GEMM rate of the round, per dtype."""
    bandwidth_bytes_per_s: float
    vector_flops_per_s: float
    launch_overhead_s: float


#: The figures a measurement reports: the field of :class:`RoundFigures` holding each, and whether larger is better
#: (rates) or smaller (overheads).
FIGURES: dict[str, tuple[str, bool]] = {"gemm": ("gemm_flops_per_s", True),
                                        "bandwidth": ("bandwidth_bytes_per_s", True),
                                        "vector": ("vector_flops_per_s", True), "launch": ("launch_overhead_s", False)}


def _figure(r: RoundFigures, figure: str, dtype: str) -> float:
    value = getattr(r, FIGURES[figure][0])
    return float(value[dtype] if figure == "gemm" else value)


@dataclass(frozen=True)
class MachineMeasurement:
    """A measured spec and how far to trust it: every round's figures, the other processes' load during the
    kept attempt, and how long the measurement waited for the machine to quieten."""

    spec: HardwareSpec
    """Each figure the best of its rounds."""
    slowest: HardwareSpec
    """Each figure the worst of its rounds: with ``spec`` it bounds what the disturbance can do to a prediction."""
    rounds: tuple[RoundFigures, ...]
    threads: int
    load: CpuLoad | None
    """Other processes' load during the kept attempt (``None`` where the OS cannot tell)."""
    waited_s: float
    loads_tried: tuple[CpuLoad | None, ...]
    """The load of every attempt, the kept one included."""

    @property
    def attempts(self) -> int:
        return len(self.loads_tried)

    def spread(self, figure: str, dtype: str = "fp32") -> float:
        """(worst − best) / best of ``figure`` (:data:`FIGURES`) over the rounds, as a fraction of the best."""
        values = [_figure(r, figure, dtype) for r in self.rounds]
        best = max(values) if FIGURES[figure][1] else min(values)
        return (max(values) - min(values)) / best if best > 0 else math.nan

    @property
    def oversubscribed_cores(self) -> float:
        """Cores' worth our threads waited for because others held them (0 where unknown)."""
        return 0.0 if self.load is None else self.load.oversubscribed_cores(self.threads)

    @property
    def busy(self) -> bool:
        """Whether other processes took cores our threads needed during the kept attempt."""
        return self.load is not None and self.load.is_busy_for(self.threads)

    def to_dict(self) -> dict[str, Any]:
        dtypes = list(self.rounds[0].gemm_flops_per_s) if self.rounds else []
        return {
            "threads": self.threads, "rounds": len(self.rounds), "attempts": self.attempts,
            "waited_s": self.waited_s, "busy": self.busy, "oversubscribed_cores": self.oversubscribed_cores,
            "load": None if self.load is None else self.load.to_dict(),
            "spread": {**{f"gemm_{dt}": self.spread("gemm", dt) for dt in dtypes},
                       **{f: self.spread(f) for f in FIGURES if f != "gemm"}},
            "per_round": [r._asdict() for r in self.rounds],
        }


class _LayerWeights:
    """Per (dtype, n, k), :func:`cold_weights` made on first use and kept for every round."""

    def __init__(self, torch: Any, dev: Any) -> None:
        self.torch, self.dev = torch, dev
        self.llc_bytes = last_level_cache_bytes()[0]
        self.sets: dict[tuple[str, int, int], list[Any]] = {}

    def get(self, dtype: Any, n: int, k: int) -> list[Any]:
        key = (str(dtype), n, k)
        if key not in self.sets:
            self.sets[key] = cold_weights(self.torch, self.dev, dtype, n, k, self.llc_bytes)
        return self.sets[key]


def _measure_round(torch: Any, dev: Any, timer: Timer, device: str, dtypes: tuple[str, ...], min_time_s: float,
                   best_so_far: dict[str, float], timed_shapes: dict[str, list[tuple[int, int, int]]],
                   layer_weights: _LayerWeights) -> RoundFigures:
    """One round of every probe. ``best_so_far`` (updated) is each dtype's best ladder GEMM rate over earlier rounds:
    a GEMM it predicts to take over :data:`MAX_GEMM_CALL_S` is not timed, so one disturbed small shape cannot keep
    the large ones out of every round."""
    torch_dtypes = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
    gemm: dict[str, float] = {}
    ladder = _GEMM_SHAPES if device == "cpu" else _GEMM_SHAPES_GPU
    layer_shapes = _LINEAR_SHAPES if device == "cpu" else ()
    budget_s = min_time_s / (len(ladder) + len(layer_shapes))
    for dt in dtypes:
        best = 0.0
        for m, k, n in sorted(ladder, key=lambda s: s[0] * s[1] * s[2]):
            flops = 2.0 * m * k * n
            bound = max(best, best_so_far.get(dt, 0.0))
            if bound and flops / bound > MAX_GEMM_CALL_S:
                continue
            a = torch.randn(m, k, device=dev).to(torch_dtypes[dt])
            b = torch.randn(k, n, device=dev).to(torch_dtypes[dt])
            t = timer.time(partial(torch.mm, a, b), budget_s,
                           min_reps=1 if bound and flops / bound > budget_s else 3).best_s
            best = max(best, flops / t)
            if (m, k, n) not in timed_shapes.setdefault(dt, []):
                timed_shapes[dt].append((m, k, n))
        bound = best_so_far[dt] = max(best, best_so_far.get(dt, 0.0))
        layer_flops = layer_s = 0.0
        for m, k, n in layer_shapes:
            flops = 2.0 * m * k * n
            if not bound or flops / bound > MAX_GEMM_CALL_S:
                continue
            x = torch.randn(m, k, device=dev).to(torch_dtypes[dt])
            _, median_s = time_cold_linear(torch, timer, x, layer_weights.get(torch_dtypes[dt], n, k), budget_s)
            layer_flops += flops
            layer_s += median_s
            if (m, k, n) not in timed_shapes.setdefault(f"{dt} layer", []):
                timed_shapes[f"{dt} layer"].append((m, k, n))
        gemm[dt] = layer_flops / layer_s if layer_s > 0 else best
    t_stream = _time_add(torch, dev, _STREAM_ELEMENTS, min_time_s, timer)
    cached = _CACHED_ELEMENTS if device == "cpu" else _CACHED_ELEMENTS_GPU
    t_vec = _time_add(torch, dev, cached, min_time_s / 2, timer)
    t_launch = statistics.median([_time_add(torch, dev, 1, min_time_s / 10, timer) for _ in range(3)])
    return RoundFigures(gemm, 3 * 4 * _STREAM_ELEMENTS / t_stream, cached / max(t_vec - t_launch, t_vec / 10),
                        t_launch)


def _combine(rounds: Sequence[RoundFigures], pick: Callable[..., float]) -> RoundFigures:
    """One figure set from the rounds: ``pick`` (``max`` for the best) of each rate, the other of the overhead."""
    other = min if pick is max else max
    dtypes = rounds[0].gemm_flops_per_s
    return RoundFigures({dt: pick(r.gemm_flops_per_s[dt] for r in rounds) for dt in dtypes},
                        pick(r.bandwidth_bytes_per_s for r in rounds), pick(r.vector_flops_per_s for r in rounds),
                        other(r.launch_overhead_s for r in rounds))


def wait_until_quiet(threads: int, max_wait_s: float, *, window_s: float = 1.0) -> tuple[float, CpuLoad | None]:
    """Watch the other processes' load in ``window_s`` windows until one leaves ``threads`` threads a core each
    (within :data:`BUSY_OVERSUBSCRIBED_CORES`) or ``max_wait_s`` passes. Returns the seconds waited and the
    last window's load."""
    waited = 0.0
    load = None
    while waited < max_wait_s:
        load = measure_load(min(window_s, max_wait_s - waited))
        waited += load.wall_s if load is not None else window_s
        if load is None or not load.is_busy_for(threads):
            break
    return waited, load


def measure_machine_robust(device: str = "cpu", *, min_time_s: float = 0.2, rounds: int = DEFAULT_ROUNDS,
                           dtypes: tuple[str, ...] = ("fp32", "bf16"), name: str | None = None,
                           max_wait_s: float = 0.0) -> MachineMeasurement:
    """Measure this machine in ``rounds`` rounds of every probe and keep each figure's best round.

    The other processes' CPU load is read over the whole measurement (:func:`layerscope.hardware.host.cpu_sample`).
    When it took cores our threads needed (:attr:`MachineMeasurement.busy`) and ``max_wait_s`` > 0, the
    measurement waits (at most ``max_wait_s`` in all) for a window in which the machine is quiet and measures
    again; of the attempts it keeps the least disturbed.
    """
    if rounds < 1:
        raise CaptureError(f"machine measurement: rounds {rounds} is out of range; must be >= 1")
    torch, dev, timer = torch_device(device)
    threads = torch.get_num_threads() if device == "cpu" else 1
    best_so_far: dict[str, float] = {}
    timed_shapes: dict[str, list[tuple[int, int, int]]] = {}
    layer_weights = _LayerWeights(torch, dev)
    attempts: list[tuple[tuple[RoundFigures, ...], CpuLoad | None]] = []
    waited = 0.0
    while True:
        start = cpu_sample()
        with torch.inference_mode():
            measured = tuple(_measure_round(torch, dev, timer, device, dtypes, min_time_s, best_so_far, timed_shapes,
                                            layer_weights) for _ in range(rounds))
        load = load_between(start, cpu_sample())
        attempts.append((measured, load))
        if load is None or not load.is_busy_for(threads) or waited >= max_wait_s:
            break
        log.info("machine busy (other processes %.2f cores): waiting up to %.0f s to measure again",
                 load.busy_cores if load else math.nan, max_wait_s - waited)
        slept, _ = wait_until_quiet(threads, max_wait_s - waited)
        waited += slept

    def disturbance(attempt: tuple[tuple[RoundFigures, ...], CpuLoad | None]) -> float:
        return 0.0 if attempt[1] is None else attempt[1].oversubscribed_cores(threads)

    kept_rounds, kept_load = min(attempts, key=disturbance)
    best = _combine(kept_rounds, max)
    worst = _combine(kept_rounds, min)
    spec = _spec_from_figures(best, torch, device, name, timed_shapes, rounds, "best")
    slowest = _spec_from_figures(worst, torch, device, name, timed_shapes, rounds, "worst")
    log.info("measured %s: %s FLOP/s, %.3g B/s, launch %.3g s (best of %d rounds; others' load %s)", spec.name,
             best.gemm_flops_per_s, best.bandwidth_bytes_per_s, best.launch_overhead_s, rounds,
             "unknown" if kept_load is None else f"{kept_load.busy_cores:.2f} cores")
    return MachineMeasurement(spec, slowest, kept_rounds, threads, kept_load, waited, tuple(a[1] for a in attempts))


def measure_machine(device: str = "cpu", *, min_time_s: float = 0.2, dtypes: tuple[str, ...] = ("fp32", "bf16"),
                    name: str | None = None, rounds: int = DEFAULT_ROUNDS) -> HardwareSpec:
    """Measure this machine through torch and return it as a ``HardwareSpec`` (:func:`measure_machine_robust`'s
    best-of-rounds spec)."""
    return measure_machine_robust(device, min_time_s=min_time_s, dtypes=dtypes, name=name, rounds=rounds).spec


def _spec_from_figures(fig: RoundFigures, torch: Any, device: str, name: str | None,
                       timed_shapes: dict[str, list[tuple[int, int, int]]], rounds: int, which: str) -> HardwareSpec:
    """The ``HardwareSpec`` of one set of figures (``which`` of ``rounds`` rounds: ``best`` or ``worst``), every
    number's source naming its method."""
    threads = torch.get_num_threads() if device == "cpu" else torch.cuda.get_device_properties(0).multi_processor_count
    cached = _CACHED_ELEMENTS if device == "cpu" else _CACHED_ELEMENTS_GPU
    if device == "cpu":
        label = name or f"this-cpu ({cpu_name()}, {threads} threads)"
        memory = [*cache_levels(), {"name": "dram", "capacity_bytes": mem_total_bytes(),
                                     "bandwidth_bytes_per_s": fig.bandwidth_bytes_per_s}]
    else:
        props = torch.cuda.get_device_properties(0)
        label = name or f"this-gpu ({props.name})"
        memory = [{"name": "hbm", "capacity_bytes": float(props.total_memory),
                   "bandwidth_bytes_per_s": fig.bandwidth_bytes_per_s}]
    of_rounds = f"; {which} of {rounds} rounds" if rounds > 1 else ""

    def shapes(key: str) -> str:
        return ", ".join("x".join(map(str, s)) for s in timed_shapes.get(key, []))

    sources = {f"engines.peak_flops_per_s.{dt}": (
        f"measured: F.linear as nn.Linear runs a layer, weights twice the last-level cache, (m x k x n) "
        f"{shapes(dt + ' layer')} in {dt}, their 2mkn over their median times{of_rounds}"
        if timed_shapes.get(f"{dt} layer") else
        f"measured: best torch.mm over (m x k x n) {shapes(dt)} in {dt}, 2mkn/t{of_rounds}")
        for dt in fig.gemm_flops_per_s}
    sources.update({
        "memory.dram.bandwidth_bytes_per_s" if device == "cpu" else "memory.hbm.bandwidth_bytes_per_s":
            f"measured: torch.add over {_STREAM_ELEMENTS} fp32 elements, 12 B/element (STREAM add){of_rounds}",
        "engines.vector_flops_per_s": f"measured: torch.add over {cached} cache-resident fp32 elements{of_rounds}",
        "launch_overhead_s": f"measured: torch.add on one-element tensors (dispatch only){of_rounds}",
        "engines.count": "torch.get_num_threads()" if device == "cpu" else "CUDA multi_processor_count",
    })
    return HardwareSpec.from_dict({
        "name": label,
        "description": f"measured by layerscope on {platform.node() or 'this machine'} (pid {os.getpid()})",
        "kind": "cpu" if device == "cpu" else "gpu",
        "engines": {"count": threads, "clock_hz": 1e9, "peak_flops_per_s": dict(fig.gemm_flops_per_s),
                    "vector_flops_per_s": fig.vector_flops_per_s},
        "memory": memory,
        "launch_overhead_s": fig.launch_overhead_s,
        "execution": {"kernels": "hf-eager", "source": "measured through PyTorch eager"},
        "efficiency": {"matmul": 1.0, "matmul_source": "measured rates are the peaks",
                       "vector": 1.0, "vector_source": "measured rates are the peaks",
                       "memory": 1.0, "memory_source": "measured rates are the peaks"},
        "sources": sources | {"engines.clock_hz": "placeholder (peaks are measured, not derived from the clock)"},
    }, origin="measured machine")


def threads_for_load(max_threads: int, load: CpuLoad | None) -> int:
    """Intra-op threads that other processes' ``load`` leaves a core each: at most ``max_threads``, at least 1.

    A thread that shares its core with another process waits for it at every barrier of a parallel kernel, so
    a GEMM split over more threads than free cores runs at the pace of the slowest (several times slower on
    a 2-core VM with one core taken), and two measurements of it disagree; fewer threads on free cores are
    slower than the whole machine but measure the same twice."""
    if load is None:
        return max_threads
    return max(1, min(max_threads, math.floor(load.free_cores() + BUSY_OVERSUBSCRIBED_CORES)))


@dataclass(frozen=True)
class ThreadChoice:
    """The intra-op threads a measurement runs with and why."""

    threads: int
    max_threads: int
    """torch's own count (its default, or what ``torch.set_num_threads``/``OMP_NUM_THREADS`` made it)."""
    load: CpuLoad | None
    """Other processes' load over the window read before choosing (``None``: not read, or not known)."""
    requested: int | None
    """The count asked for; ``None``: chosen from the load."""

    @property
    def reduced(self) -> bool:
        return self.threads < self.max_threads

    def describe(self) -> str:
        if self.requested is not None:
            return f"{self.threads} threads (as asked)"
        if self.load is None:
            return f"{self.threads} threads (torch's count; other processes' load unknown)"
        busy = f"other processes kept {self.load.busy_cores:.1f} of {self.load.cores} cores busy"
        if self.reduced:
            return f"{self.threads} of {self.max_threads} threads: {busy}, so each thread gets a free core"
        return f"{self.threads} threads ({busy})"

    def to_dict(self) -> dict[str, Any]:
        return {"threads": self.threads, "max_threads": self.max_threads, "requested": self.requested,
                "load": None if self.load is None else self.load.to_dict()}


def choose_threads(requested: int | None, *, window_s: float = 1.0) -> ThreadChoice:
    """``requested`` threads, or (``None``) as many as the other processes leave a free core
    (:func:`threads_for_load` over a ``window_s`` look at the load). Does not set them: see :func:`torch_threads`."""
    torch, _ = require_torch()
    max_threads = int(torch.get_num_threads())
    if requested is not None:
        if requested < 1:
            raise CaptureError(f"--threads {requested} is out of range; must be >= 1 (or auto)")
        return ThreadChoice(requested, max_threads, None, requested)
    load = measure_load(window_s)
    return ThreadChoice(threads_for_load(max_threads, load), max_threads, load, None)


@contextmanager
def torch_threads(threads: int) -> Iterator[None]:
    """torch's intra-op thread count set to ``threads`` inside the block, and put back after."""
    torch, _ = require_torch()
    before = int(torch.get_num_threads())
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)
