"""A quick measured ``HardwareSpec`` of the machine torch runs on (a few seconds of microbenchmarks).

Measures, through torch on ``device``:

* matrix throughput: the best of a few GEMM shapes (squares and LLM-projection shapes) per dtype,
  2·m·k·n FLOPs each;
* memory bandwidth: ``out = a + b`` over arrays far larger than the caches, 3 · 4 B moved per
  element (two reads, one write; the STREAM "add" kernel, McCalpin 1995);
* vector throughput: the same add on a cache-resident array, 1 FLOP per element;
* per-op overhead: the time of an add on one-element tensors (dispatch, no work).

The measured rates are written as the peaks, with efficiencies of 1.0, so the cost models
reproduce what was measured; each figure's source says "measured" with its method. This is the
quick path used by ``layerscope demo``; ``layerscope calibrate`` (``capture/calibrate.py``) is the
full one, a grid of microbenchmarks fitted by ``hardware/fit.py``, timed with the same
:class:`Timer` (wall clock on CPU, CUDA events on GPU).
"""

from __future__ import annotations

import logging
import os
import platform
import statistics
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, NamedTuple

from layerscope.capture.build import require_torch
from layerscope.errors import CaptureError
from layerscope.hardware.host import cpu_name
from layerscope.hardware.spec import HardwareSpec

log = logging.getLogger(__name__)

#: (m, k, n) of the measured GEMMs: squares, and the tall-skinny shapes of LLM projections
#: (a few hundred tokens times hidden x FFN widths) that BLAS libraries tile differently.
_GEMM_SHAPES = ((256, 256, 256), (1024, 1024, 1024), (2048, 2048, 2048), (512, 2048, 8192), (256, 8192, 2048))
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


def _best_s(fn: Callable[[], object], min_time_s: float, timer: Timer) -> float:
    """Best per-call time of ``fn`` over repetitions lasting about ``min_time_s``."""
    return timer.time(fn, min_time_s).best_s


def _time_add(torch: Any, dev: Any, elements: int, min_time_s: float, timer: Timer) -> float:
    """Best time of ``out = a + b`` over ``elements`` fp32 elements (the arrays are freed after)."""
    a = torch.ones(elements, device=dev)
    b = torch.ones(elements, device=dev)
    out = torch.empty(elements, device=dev)
    return _best_s(partial(torch.add, a, b, out=out), min_time_s, timer)




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


def measure_machine(device: str = "cpu", *, min_time_s: float = 0.4, dtypes: tuple[str, ...] = ("fp32", "bf16"),
                    name: str | None = None) -> HardwareSpec:
    """Measure this machine through torch and return it as a ``HardwareSpec``."""
    torch, dev, timer = torch_device(device)
    torch_dtypes = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
    peaks: dict[str, float] = {}
    sources: dict[str, str] = {}
    with torch.inference_mode():
        for dt in dtypes:
            best = 0.0
            timed = []
            for m, k, n in sorted(_GEMM_SHAPES, key=lambda s: s[0] * s[1] * s[2]):
                flops = 2.0 * m * k * n
                if best and flops / best > MAX_GEMM_CALL_S:
                    continue
                a = torch.randn(m, k, device=dev).to(torch_dtypes[dt])
                b = torch.randn(k, n, device=dev).to(torch_dtypes[dt])
                t = timer.time(partial(torch.mm, a, b), min_time_s / len(_GEMM_SHAPES),
                               min_reps=1 if best and flops / best > min_time_s / len(_GEMM_SHAPES) else 3).best_s
                best = max(best, flops / t)
                timed.append((m, k, n))
            peaks[dt] = best
            shapes = ", ".join("x".join(map(str, s)) for s in timed)
            sources[f"engines.peak_flops_per_s.{dt}"] = (
                f"measured: best torch.mm over (m x k x n) {shapes} in {dt}, 2mkn/t")
        t_stream = _time_add(torch, dev, _STREAM_ELEMENTS, min_time_s, timer)
        bandwidth = 3 * 4 * _STREAM_ELEMENTS / t_stream
        cached = _CACHED_ELEMENTS if device == "cpu" else _CACHED_ELEMENTS_GPU
        t_vec = _time_add(torch, dev, cached, min_time_s / 2, timer)
        t_launch = statistics.median([_time_add(torch, dev, 1, min_time_s / 10, timer) for _ in range(3)])
    vector = cached / max(t_vec - t_launch, t_vec / 10)
    threads = torch.get_num_threads() if device == "cpu" else torch.cuda.get_device_properties(0).multi_processor_count
    if device == "cpu":
        label = name or f"this-cpu ({cpu_name()}, {threads} threads)"
        memory = [*cache_levels(), {"name": "dram", "capacity_bytes": mem_total_bytes(),
                                     "bandwidth_bytes_per_s": bandwidth}]
    else:
        props = torch.cuda.get_device_properties(0)
        label = name or f"this-gpu ({props.name})"
        memory = [{"name": "hbm", "capacity_bytes": float(props.total_memory), "bandwidth_bytes_per_s": bandwidth}]
    sources.update({
        "memory.dram.bandwidth_bytes_per_s" if device == "cpu" else "memory.hbm.bandwidth_bytes_per_s":
            f"measured: torch.add over {_STREAM_ELEMENTS} fp32 elements, 12 B/element (STREAM add)",
        "engines.vector_flops_per_s": f"measured: torch.add over {cached} cache-resident fp32 elements",
        "launch_overhead_s": "measured: torch.add on one-element tensors (dispatch only)",
        "engines.count": "torch.get_num_threads()" if device == "cpu" else "CUDA multi_processor_count",
    })
    log.info("measured %s: %s FLOP/s, %.3g B/s, launch %.3g s", label, peaks, bandwidth, t_launch)
    return HardwareSpec.from_dict({
        "name": label,
        "description": f"measured by layerscope on {platform.node() or 'this machine'} (pid {os.getpid()})",
        "kind": "cpu" if device == "cpu" else "gpu",
        "engines": {"count": threads, "clock_hz": 1e9, "peak_flops_per_s": peaks, "vector_flops_per_s": vector},
        "memory": memory,
        "launch_overhead_s": t_launch,
        "execution": {"kernels": "hf-eager", "source": "measured through PyTorch eager"},
        "efficiency": {"matmul": 1.0, "matmul_source": "measured rates are the peaks",
                       "vector": 1.0, "vector_source": "measured rates are the peaks",
                       "memory": 1.0, "memory_source": "measured rates are the peaks"},
        "sources": sources | {"engines.clock_hz": "placeholder (peaks are measured, not derived from the clock)"},
    }, origin="measured machine")
