"""``capture``: run a real Hugging Face causal LM under torch.profiler, every module annotated, and write the trace.

:func:`capture` takes one :class:`CaptureRequest` and returns one :class:`CaptureResult`, the JSON contract of
``layerscope capture --json`` (its schema: docs/schema/capture.json). The capturing is
:func:`layerscope.capture.capture`; its result (also written into the trace as the ``"layerscope"`` object) is
described here field by field.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel

from layerscope.app.requests import MODEL_CONFIG, ModelRef

if TYPE_CHECKING:
    from layerscope.capture import CaptureResult as CaptureRun
    from layerscope.capture.progress import ProgressFn

__all__ = ["CaptureRequest", "CaptureResult", "capture", "result_of"]

_RESULT_CONFIG = MODEL_CONFIG


class CaptureRequest(BaseModel):
    """What to capture: which model (how many layers, which dtype, on which device), which run (batch, prompt,
    decode steps, iterations, KV cache), and where the trace goes. Out-of-range values are refused by the capture
    (a ``CaptureError`` naming the field) before torch loads."""

    model_config = MODEL_CONFIG

    model: ModelRef
    """Catalog name, Hugging Face id (local cache), ``config.json``, checkpoint directory, or an HF ``nn.Module``."""
    layers: int | None = None
    """Keep only the first N decoder layers; ``None``: all of them."""
    dtype: str = "bf16"
    """``fp32``, ``bf16`` or ``fp16``."""
    device: str = "cpu"
    """``cpu`` or ``cuda`` (``cuda:N``)."""
    batch: int = 1
    """Sequences per pass."""
    prompt_len: int = 128
    """Prompt tokens of the prefill."""
    decode_steps: int = 0
    """Greedy decode steps after the prefill."""
    warmup: int = 1
    """Unrecorded warm-up iterations."""
    iterations: int = 1
    """Recorded iterations."""
    cache: str = "dynamic"
    """KV cache: ``dynamic`` or ``static``."""
    random_weights: bool = False
    """Random weights even if a checkpoint exists."""
    seed: int = 0
    """Seed of the random weights and prompt tokens."""
    out: Path | None = None
    """Trace file (``.json.gz`` or ``.json``); ``None``: ``capture-<model>-<N>l.json.gz`` in the current directory."""
    unprofiled: bool = False
    """Also run the recorded iterations without the profiler and time the modules (CPU only)."""


class ProfilerEventRow(BaseModel):
    """The profiler's time per recorded event, from a hot and a cold A/B of one small eager op sequence."""

    model_config = _RESULT_CONFIG

    per_event_s: float
    """The hot figure, ``max(0, hot_on_s − hot_off_s) / events``: a lower bound of what each recorded event adds
    (the one ``validate`` subtracts), seconds."""
    cold_per_event_s: float
    """``max(0, cold_on_s − cold_off_s) / events``: each call right after a weight stream, an upper end of what an
    event adds inside a model whose weights overflow the caches, seconds."""
    hot_off_s: float
    """Median time of one call in a loop, without the profiler, seconds."""
    hot_on_s: float
    """Median time of one call in a loop, under the profiler, seconds."""
    cold_off_s: float
    """Median time of one call right after a weight stream, without the profiler, seconds."""
    cold_on_s: float
    """Median time of one call right after a weight stream, under the profiler, seconds."""
    events: int
    """Events the profiler records for one call."""
    samples: int
    """Cold calls timed on each side."""


class UnprofiledRow(BaseModel):
    """Module times of the recorded iterations run again without the profiler, per iteration, seconds."""

    model_config = _RESULT_CONFIG

    iterations: int
    """Iterations run."""
    ranges: dict[str, float]
    """Phase range (``prefill``, ``decode_step_K``) to its time."""
    modules: dict[str, dict[str, float]]
    """Phase range to module op name to inclusive time (every call summed)."""
    calls: dict[str, dict[str, float]]
    """Phase range to module op name to calls."""
    call_overhead_s: float
    """The instrumentation's time per module call: the smallest median gap between consecutive sibling spans."""


class PhaseRow(BaseModel):
    """One phase annotation (``prefill``, ``decode_step_3``) over every recorded iteration."""

    model_config = _RESULT_CONFIG

    name: str
    """Phase range name."""
    calls: int
    """Times it ran."""
    total_ms: float
    """Wall time inside it, summed, milliseconds."""
    mean_ms: float
    """Wall time per run, milliseconds."""


class ModuleRow(BaseModel):
    """One module in one phase, over every recorded iteration."""

    model_config = _RESULT_CONFIG

    name: str
    """Op name (``layers.0.self_attn.q_proj``)."""
    phase: str
    """``prefill`` or ``decode`` (every decode step together)."""
    calls: int
    """Calls of the module."""
    total_ms: float
    """Wall time inside the module's CPU-side range, summed over calls, milliseconds (parents include children)."""
    mean_ms: float
    """Wall time per call, milliseconds."""
    device_ms: float | None
    """Span of the GPU work the module's calls launched (first start to last end per call, summed), milliseconds;
    ``null`` unless captured on CUDA."""
    device_busy_ms: float | None = None
    """The GPU's own time on that work (kernels, copies and memsets, summed), milliseconds: ``device_ms`` less
    the idle gaps where the host issued the work slower than the GPU ran it; ``null`` unless captured on CUDA."""
    input_shapes: list[list[int]]
    """Shapes of the tensor inputs of the first call (positional, then keyword)."""
    output_shapes: list[list[int]]
    """Shapes of the tensor outputs of the first call."""


class CaptureResult(BaseModel):
    """The answer of ``layerscope capture``: its ``--json`` output, what the capture ran and measured (everything
    but ``trace_path``, ``phases`` and ``summary`` is also the trace's top-level ``"layerscope"`` object)."""

    model_config = _RESULT_CONFIG

    model: str
    """The model as the user named it (catalog name, HF id, path, or the module's class)."""
    model_type: str
    """The config's ``model_type``."""
    trace_path: Path
    """The trace written."""
    weights: Literal["random", "loaded"]
    """``loaded`` from a checkpoint, or ``random`` (drawn from ``seed``)."""
    dtype: str
    """The dtype the model ran in."""
    device: str
    """The device it ran on."""
    layers: int
    """Decoder layers built (all of them unless ``layers`` truncated the model)."""
    total_layers: int
    """Decoder layers of the full model."""
    batch: int
    """Sequences per pass."""
    prompt_len: int
    """Prompt tokens of the prefill."""
    decode_steps: int
    """Greedy decode steps after the prefill."""
    warmup: int
    """Unrecorded warm-up iterations."""
    iterations: int
    """Recorded iterations."""
    cache: str
    """KV cache kind (``dynamic`` or ``static``)."""
    seed: int
    """Seed of the random weights and prompt tokens."""
    param_count: int
    """Parameters of the model built."""
    estimated_memory_bytes: int
    """Memory the run was estimated to need before it ran, bytes."""
    torch_version: str
    """torch's version."""
    transformers_version: str
    """transformers' version."""
    profiler_event: ProfilerEventRow | None
    """The profiler's own time per recorded aten op, measured before the run; ``null`` on CUDA."""
    unprofiled: UnprofiledRow | None
    """Module times without the profiler (``unprofiled`` requests, CPU only); else ``null``."""
    phases: list[PhaseRow]
    """One row per phase range."""
    summary: list[ModuleRow]
    """One row per module and phase."""


def result_of(run: CaptureRun) -> CaptureResult:
    """The result model of the capture layer's :class:`~layerscope.capture.CaptureResult`."""
    return CaptureResult.model_validate(run.model_dump())


def capture(request: CaptureRequest, *, progress: ProgressFn | None = None) -> CaptureResult:
    """Capture a profiled run of ``request.model`` and write its annotated trace (see
    :func:`layerscope.capture.capture`); ``progress`` is told each step as it starts."""
    from layerscope.capture import capture as run_capture

    return result_of(run_capture(
        request.model, layers=request.layers, dtype=request.dtype,
        device=request.device, batch=request.batch, prompt_len=request.prompt_len, decode_steps=request.decode_steps,
        warmup=request.warmup, iterations=request.iterations, cache=request.cache,
        random_weights=request.random_weights, out=request.out, seed=request.seed, unprofiled=request.unprofiled,
        progress=progress,
    ))
