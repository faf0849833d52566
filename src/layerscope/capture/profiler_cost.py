"""The profiler's own time per recorded op, measured in the capturing process, seconds per event.

Under ``torch.profiler(record_shapes=True)`` every aten op pays the profiler's bookkeeping (an event
record and its input shapes) on top of its dispatch and kernel, and the trace cannot tell that time
from the op's own. It is measured here by A/B: the same eager op sequence (a one-row RMSNorm as
Hugging Face's ``LlamaRMSNorm`` runs it, dtype casts included, 21 events) timed alternately without and
with a profiler session configured as the capture's; the difference of the medians divided by the
events per call. **Hot** (in a loop) is a lower bound and is what ``validate`` subtracts; **cold**
(each call right after GEMVs over weights twice the last-level cache) is recorded. The measurements
that chose this: docs/capture-instrumentation.md.

torch is imported only inside functions.
"""

from __future__ import annotations

import logging
import statistics
import time
from typing import Any

from pydantic import BaseModel, Field

from layerscope.capture.quiet import native_stderr_logged
from layerscope.docstrings import SPEC_CONFIG

#: Weight-stream size per sample, in last-level caches (as ``calibrate``'s cold small ops).
STREAM_LLC_FACTOR = 2
#: Hot A/B: blocks per side, calls per block (about 15 µs a call with the profiler).
HOT_BLOCKS = 7
HOT_CALLS = 200
#: Cold samples per side of the A/B; each costs one weight stream (~3 ms for 64 MiB at 25 GB/s) and
#: an "on" sample a profiler session (a few ms).
DEFAULT_SAMPLES = 30
_WIDTH = 2048


class ProfilerEventCost(BaseModel):
    """The profiler's time per recorded event, from a hot and a cold A/B of one small eager op sequence."""

    model_config = SPEC_CONFIG

    per_event_s: float = Field(ge=0)
    """The hot figure, ``max(0, hot_on_s - hot_off_s) / events``: a lower bound of what each
    recorded event adds (the profiler's code and data cached), the one ``validate`` subtracts."""
    cold_per_event_s: float = Field(ge=0)
    """``max(0, cold_on_s - cold_off_s) / events``: each call right after a weight stream, an upper
    end of what an event adds inside a model whose weights overflow the caches."""
    hot_off_s: float = Field(ge=0)
    """Median time of one call in a loop, without the profiler."""
    hot_on_s: float = Field(ge=0)
    """Median time of one call in a loop, under the profiler (``record_shapes=True``)."""
    cold_off_s: float = Field(ge=0)
    """Median time of one call right after a weight stream, without the profiler."""
    cold_on_s: float = Field(ge=0)
    """Median time of one call right after a weight stream, under the profiler."""
    events: int = Field(ge=1)
    """Events the profiler records for one call."""
    samples: int = Field(ge=1)
    """Cold calls timed on each side (hot: ``HOT_BLOCKS`` blocks of ``HOT_CALLS`` calls)."""


def _rmsnorm_hf(torch: Any, x: Any, weight: Any) -> Any:
    # x: [1, 1, width]; LlamaRMSNorm.forward in eager mode, its dtype casts included.
    input_dtype = x.dtype
    h = x.to(torch.float32)
    variance = h.pow(2).mean(-1, keepdim=True)
    h = h * torch.rsqrt(variance + 1e-6)
    return weight * h.to(input_dtype)


def measure_profiler_event_cost(llc_bytes: float, *, samples: int = DEFAULT_SAMPLES) -> ProfilerEventCost:
    """Time the A/Bs described in the module docstring on the CPU; ``llc_bytes`` sizes the weight stream."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    count = max(2, -(-int(STREAM_LLC_FACTOR * llc_bytes) // (_WIDTH * _WIDTH * 4)))
    weights = [torch.randn(_WIDTH, _WIDTH) for _ in range(count)]
    xv = torch.randn(1, _WIDTH)
    x = torch.randn(1, 1, _WIDTH)
    w = torch.ones(_WIDTH)
    linear = torch.nn.functional.linear

    def cold_call() -> float:
        for wt in weights:
            linear(xv, wt)
        start = time.perf_counter()
        _rmsnorm_hf(torch, x, w)
        return time.perf_counter() - start

    def hot_block() -> float:
        start = time.perf_counter()
        for _ in range(HOT_CALLS):
            _rmsnorm_hf(torch, x, w)
        return (time.perf_counter() - start) / HOT_CALLS

    def session() -> Any:
        return profile(activities=[ProfilerActivity.CPU], record_shapes=True)

    hot: tuple[list[float], list[float]] = ([], [])
    cold: tuple[list[float], list[float]] = ([], [])
    # This torch build's profiler writes two lines per session from C++; the A/B's sessions would print them by
    # the dozen: they go to the log at DEBUG.
    with torch.inference_mode(), native_stderr_logged(logging.DEBUG):
        with session() as prof:
            _rmsnorm_hf(torch, x, w)
        events = max(1, len(prof.events()))
        cold_call()
        hot_block()
        # Interleaved (off, on, off, on, ...), one profiler session per "on" sample, its first
        # events not the timed ones: drift and other processes' load hit both sides alike. One long
        # session would be steadier, but toggling collection inside it logs a warning per toggle.
        for _ in range(HOT_BLOCKS):
            hot[0].append(hot_block())
            with session():
                hot_block()
                hot[1].append(hot_block())
        for _ in range(samples):
            cold[0].append(cold_call())
            with session():
                cold[1].append(cold_call())
    hot_off, hot_on = statistics.median(hot[0]), statistics.median(hot[1])
    cold_off, cold_on = statistics.median(cold[0]), statistics.median(cold[1])
    return ProfilerEventCost(per_event_s=max(0.0, hot_on - hot_off) / events,
                             cold_per_event_s=max(0.0, cold_on - cold_off) / events, hot_off_s=hot_off,
                             hot_on_s=hot_on, cold_off_s=cold_off, cold_on_s=cold_on, events=events, samples=samples)
