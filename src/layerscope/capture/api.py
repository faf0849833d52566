"""``capture()``: run a Hugging Face causal LM under torch.profiler with every module annotated.

The output is the profiler's Kineto/Chrome JSON trace (gzipped when the path ends in ``.gz``),
with a top-level ``"layerscope"`` object describing the capture (Perfetto and HTA ignore
unknown top-level keys), and a :class:`CaptureResult` with a per-module summary.
"""

from __future__ import annotations

import gzip
import json
import logging
import os
import re
import tempfile
from pathlib import Path
from typing import Any, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict

from layerscope.capture.build import (
    DEFAULT_INIT_STD,
    build_empty,
    capture_dtype,
    hf_config,
    load_pretrained,
    materialize_random,
    num_layers_of,
    parameter_count,
    prepare_config,
    require_torch,
    torch_dtype,
)
from layerscope.capture.machine import last_level_cache_bytes
from layerscope.capture.memory_guard import available_memory_bytes, check_memory, estimate_memory
from layerscope.capture.profiler_cost import ProfilerEventCost, measure_profiler_event_cost
from layerscope.capture.progress import ProgressFn, Steps
from layerscope.capture.runner import SAMPLING, RunPlan, run_profiled, run_unprofiled
from layerscope.capture.source import ModelSource, resolve_model
from layerscope.capture.summary import ModuleRecord, PhaseRecord, module_records, phase_records
from layerscope.capture.unprofiled import UnprofiledTimes
from layerscope.errors import CaptureError, LayerscopeError
from layerscope.model.spec import ModelSpec
from layerscope.units import DType, atomic_write, check_writable

logger = logging.getLogger(__name__)

#: Key of the capture's metadata object at the top level of the trace JSON.
METADATA_KEY = "layerscope"

CacheKind = Literal["dynamic", "static"]


class CaptureResult(BaseModel):
    """What a capture ran and measured."""

    model_config = ConfigDict(frozen=True)

    model: str
    """The model as the user named it (catalog name, HF id, path, or the module's class)."""
    model_type: str
    trace_path: Path
    weights: Literal["random", "loaded"]
    dtype: str
    device: str
    layers: int
    """Decoder layers built (all of them unless ``layers=`` truncated the model)."""
    total_layers: int
    batch: int
    prompt_len: int
    decode_steps: int
    warmup: int
    iterations: int
    cache: str
    seed: int
    param_count: int
    estimated_memory_bytes: int
    torch_version: str
    transformers_version: str
    profiler_event: ProfilerEventCost | None = None
    """The profiler's own time per recorded aten op, hot and cold, measured in this process before the
    run (:mod:`layerscope.capture.profiler_cost`); None on CUDA, where it is host time off the GPU's clock."""
    unprofiled: UnprofiledTimes | None = None
    """Module and phase-range times of the recorded iterations run again without the profiler
    (``capture(unprofiled=True)``, CPU only; :mod:`layerscope.capture.unprofiled`), else None."""
    phases: list[PhaseRecord]
    summary: list[ModuleRecord]

    def metadata(self) -> dict[str, Any]:
        """The ``"layerscope"`` object written into the trace (everything but the records)."""
        return self.model_dump(mode="json", exclude={"phases", "summary", "trace_path"})


def capture_steps(*, device: str, warmup: int, iterations: int, unprofiled: bool) -> int:
    """The steps a capture reports to its ``progress``: the build, the profiler's cost (CPU), every iteration
    profiled (warm-up included), every iteration timed again without the profiler (``unprofiled``), the write."""
    untimed = (min(warmup, 1) + iterations) if unprofiled else 0
    return 1 + (device == "cpu") + warmup + iterations + untimed + 1


def default_out_path(model: str, layers: int) -> Path:
    """``capture-<model>-<N>l.json.gz`` in the current directory."""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", Path(model).stem if model.endswith(".json") else model)
    return Path(f"capture-{slug.strip('-') or 'model'}-{layers}l.json.gz")


def _check_args(batch: int, prompt_len: int, decode_steps: int, warmup: int, iterations: int,
                cache: str) -> None:
    for field, value, low in (("batch", batch, 1), ("prompt_len", prompt_len, 1),
                              ("decode_steps", decode_steps, 0), ("warmup", warmup, 0),
                              ("iterations", iterations, 1)):
        if value < low:
            raise CaptureError(f"{field}: {value} is out of range; must be >= {low}")
    if cache not in ("dynamic", "static"):
        raise CaptureError(f"cache: unknown KV cache kind {cache!r}; known: dynamic, static")


def _check_device(torch: Any, device: str) -> None:
    if device == "cpu":
        return
    if not re.fullmatch(r"cuda(:\d+)?", device):
        raise CaptureError(f"device: unknown device {device!r}; known: cpu, cuda")
    if not torch.cuda.is_available():
        raise CaptureError(
            f"device: {device!r} was asked for but torch {torch.__version__} sees no CUDA GPU "
            "(install a CUDA build of torch on a GPU machine, or use --device cpu)"
        )


def _check_positions(spec: ModelSpec | None, tokens: int) -> None:
    """Learned position tables (gpt2, OPT) cannot index past their length; RoPE models can."""
    if spec is None or spec.position != "learned":
        return
    limit = spec.max_position_embeddings
    if tokens > limit:
        raise CaptureError(
            f"prompt_len + decode_steps = {tokens} exceeds the {limit} learned positions of {spec.name}; "
            "use a shorter --prompt-len or fewer --decode-steps"
        )


def _model_spec(config: dict[str, Any], name: str) -> ModelSpec | None:
    """The ``ModelSpec`` of ``config`` if layerscope.model can parse it, else ``None`` (a model type
    layerscope does not know is still captured, with default module names). A config of a known family
    that layerscope refuses (a zero hidden size, heads that do not divide it) is refused here too:
    transformers would build a model of it that computes nothing meaningful, or fail deep inside torch."""
    from layerscope.model import model_spec_from_dict
    from layerscope.model.families import FAMILIES

    try:
        return model_spec_from_dict(config, name)
    except LayerscopeError as exc:
        text_config = config.get("text_config")
        types = {config.get("model_type"), text_config.get("model_type") if isinstance(text_config, dict) else None}
        if any(isinstance(t, str) and t in FAMILIES for t in types):
            raise CaptureError(str(exc)) from None
        logger.info("no ModelSpec for %s (%s); module names use the default base-model prefixes", name, exc)
        return None


def instantiate(source: ModelSource, config: Any, config_dict: dict[str, Any], dtype: DType, *, device: str,
                seed: int, load: bool, empty: Any = None) -> Any:
    """The HF model of ``source`` on ``device``: its checkpoint when ``load``, else ``empty`` (the
    meta-device model of ``config``, built here when not given) with weights drawn from ``seed``."""
    if load:
        assert source.weights_dir is not None
        return load_pretrained(source.weights_dir, config, dtype, device)
    model = empty if empty is not None else build_empty(config, dtype)
    init_std = float(config_dict.get("initializer_range", DEFAULT_INIT_STD))
    materialize_random(model, device=device, seed=seed, init_std=init_std)
    return model


def _write_trace(raw_path: Path, out: Path, metadata: dict[str, Any], inputs: tuple[Path, ...]) -> dict[str, Any]:
    """Add the metadata object to the exported trace and write it atomically to ``out``."""
    try:
        with raw_path.open("r", encoding="utf-8") as fh:
            trace = json.load(fh)
    except json.JSONDecodeError as exc:
        raise CaptureError(f"the profiler wrote a trace that is not valid JSON: {exc}") from None
    if not isinstance(trace, dict):
        raise CaptureError(f"the profiler wrote an unexpected trace ({type(trace).__name__})")
    trace[METADATA_KEY] = metadata
    data = json.dumps(trace, separators=(",", ":")).encode("utf-8")
    with atomic_write(out, "wb", inputs=inputs) as fh:
        if out.suffix == ".gz":
            # mtime=0: the gzip header carries no wall clock.
            with gzip.GzipFile(fileobj=fh, mode="wb", mtime=0) as gz:
                gz.write(data)
        else:
            fh.write(data)
    return trace


class _Resolved(NamedTuple):
    """A model named by a path, catalog name or HF id, its config read and cut to the layers kept."""

    source: ModelSource
    load: bool
    """Whether its checkpoint's weights are loaded (else random)."""
    total_layers: int
    config: dict[str, Any]
    built_layers: int
    spec: ModelSpec | None


def _resolve(model: Any, layers: int | None, random_weights: bool, tokens: int) -> _Resolved:
    """``model`` resolved and its config cut to ``layers``; refused when its positions cannot hold ``tokens``."""
    source = resolve_model(model)
    load = source.weights_dir is not None and not random_weights
    config = prepare_config(source.config, layers=layers, keep_quantization=load)
    spec = _model_spec(config, source.name)
    _check_positions(spec, tokens)
    return _Resolved(source, load, num_layers_of(prepare_config(source.config, layers=None, keep_quantization=load)),
                     config, num_layers_of(config), spec)


def capture(
    model: str | os.PathLike[str] | Any,
    *,
    layers: int | None = None,
    dtype: str = "bf16",
    device: str = "cpu",
    batch: int = 1,
    prompt_len: int = 128,
    decode_steps: int = 0,
    warmup: int = 1,
    iterations: int = 1,
    cache: CacheKind | str = "dynamic",
    random_weights: bool = False,
    out: str | os.PathLike[str] | None = None,
    seed: int = 0,
    unprofiled: bool = False,
    progress: ProgressFn | None = None,
) -> CaptureResult:
    """Capture a profiled run of ``model`` and write its annotated trace to ``out``.

    ``model`` is a catalog name, a ``config.json`` path, a checkpoint directory, an HF id (found
    in the local HF cache; nothing is downloaded) or an ``nn.Module`` (an HF causal LM, moved to
    ``device`` and cast to ``dtype`` in place).
    Weights are loaded when a checkpoint is available and ``random_weights`` is false; otherwise
    the model is built with weights drawn from a generator seeded with ``seed``. ``layers=N``
    keeps the first N decoder layers. Each recorded iteration is one ``prefill`` of
    ``prompt_len`` random tokens and ``decode_steps`` greedy ``decode_step_K`` steps. With
    ``unprofiled`` (CPU only) the recorded iterations run once more without the profiler, their
    module times taken by ``perf_counter`` (``CaptureResult.unprofiled``). ``progress`` is told each step as it
    starts (:mod:`layerscope.capture.progress`; :func:`capture_steps` of them).

    Raises :class:`CaptureError` (no torch, unknown model, missing checkpoint, no GPU, model too
    big, bad argument) or :class:`ConfigError` (unreadable config).
    """
    _check_args(batch, prompt_len, decode_steps, warmup, iterations, cache)
    if unprofiled and device != "cpu":
        raise CaptureError(f"unprofiled: timing modules without the profiler needs device 'cpu', not {device!r} "
                           "(perf_counter around a module on a GPU times its launches, not its kernels)")
    parsed_dtype = capture_dtype(dtype)
    if out is not None and isinstance(model, str | os.PathLike):
        # Before torch and transformers load (seconds): an output that would replace the model's
        # config, or that cannot be written, is refused at once.
        given = Path(model)
        check_writable(out, (given,) if given.exists() else ())
    steps = Steps(progress, capture_steps(device=device, warmup=warmup, iterations=iterations, unprofiled=unprofiled))
    steps.next("loading the model")
    # A config is read, cut and checked before torch and transformers load (seconds): a bad config or an unknown
    # name fails at once.
    tokens = prompt_len + decode_steps
    resolved = _resolve(model, layers, random_weights, tokens) if isinstance(model, str | os.PathLike) else None
    torch, transformers = require_torch()
    _check_device(torch, device)

    source: ModelSource | None = None
    spec: ModelSpec | None = None
    if resolved is None and isinstance(model, torch.nn.Module):
        if layers is not None:
            raise CaptureError("layers: cannot truncate an already built model; pass a config or name instead")
        hf_model = model.to(device=device, dtype=torch_dtype(parsed_dtype)).eval()
        name = type(model).__name__
        config_dict = hf_model.config.to_dict()
        total_layers = built_layers = num_layers_of(config_dict)
        weights: Literal["random", "loaded"] = "loaded"
        param_count = parameter_count(hf_model)
        spec = _model_spec(config_dict, name)
        _check_positions(spec, tokens)
        root = spec.modules.root if spec is not None else None
        inputs: tuple[Path, ...] = ()
    else:
        # a path resolved above; anything else (neither a path nor a module) here: resolve_model names what it takes
        resolved = resolved or _resolve(model, layers, random_weights, tokens)
        source, load, spec = resolved.source, resolved.load, resolved.spec
        name, total_layers, config_dict, built_layers = (source.name, resolved.total_layers, resolved.config,
                                                         resolved.built_layers)
        root = spec.modules.root if spec is not None else None
        config = hf_config(config_dict)
        empty = build_empty(config, parsed_dtype)
        param_count = parameter_count(empty)
        inputs = (source.config_path,) if source.config_path is not None else ()
        weights = "loaded" if load else "random"

    out_path = Path(out) if out is not None else default_out_path(name, built_layers)
    # Fail before minutes of building and running, not at the write: the same guard the write passes.
    check_writable(out_path, inputs)
    estimate = estimate_memory(
        config_dict, param_count=param_count, dtype_bytes=parsed_dtype.bytes, batch=batch,
        prompt_len=prompt_len, decode_steps=decode_steps, spec=spec,
    )
    if source is not None:
        check_memory(estimate, available_memory_bytes(device), device=device, layers=built_layers)
        if weights == "loaded":
            empty = None  # free the meta-device skeleton before the checkpoint loads
        elif source.weights_dir is None and not random_weights:
            # Said in the result too (weights: random), so a plain run does not print it.
            logger.info("%s: no weights found (config only); building it with random weights "
                           "(seed %d)", name, seed)
        hf_model = instantiate(source, config, config_dict, parsed_dtype, device=device, seed=seed,
                               load=weights == "loaded", empty=empty)

    plan = RunPlan(device=device, batch=batch, prompt_len=prompt_len, decode_steps=decode_steps,
                   warmup=warmup, iterations=iterations, cache=str(cache), seed=seed)
    profiler_event = None
    if device == "cpu":
        steps.next("measuring the profiler's own cost")
        profiler_event = measure_profiler_event_cost(last_level_cache_bytes()[0])
        logger.info("profiler cost per recorded op: %.2f us hot, %.2f us cold", profiler_event.per_event_s * 1e6,
                    profiler_event.cold_per_event_s * 1e6)
    with tempfile.TemporaryDirectory(prefix="layerscope-capture-") as tmp:
        raw = Path(tmp) / "trace.json"
        try:
            annotator = run_profiled(hf_model, plan, root=root, trace_path=raw, tick=steps.next)
            untimed = run_unprofiled(hf_model, plan, root=root, tick=steps.next) if unprofiled else None
        except torch.OutOfMemoryError as exc:
            raise CaptureError(f"out of memory while running the model: {exc}; try --layers 1") from None
        result = CaptureResult(
            model=name,
            model_type=str(config_dict.get("model_type", "")),
            trace_path=out_path,
            weights=weights,
            dtype=parsed_dtype.value,
            device=device,
            layers=built_layers,
            total_layers=total_layers,
            batch=batch,
            prompt_len=prompt_len,
            decode_steps=decode_steps,
            warmup=warmup,
            iterations=iterations,
            cache=str(cache),
            seed=seed,
            param_count=param_count,
            estimated_memory_bytes=estimate.total_bytes,
            torch_version=str(torch.__version__),
            transformers_version=str(transformers.__version__),
            profiler_event=profiler_event,
            unprofiled=untimed,
            phases=[],
            summary=[],
        )
        steps.next("writing the trace")
        trace = _write_trace(raw, out_path, result.metadata(), inputs)
    done = result.model_copy(update={
        "phases": phase_records(trace),
        "summary": module_records(trace, annotator.calls, annotator.names, extra=(SAMPLING,)),
    })
    steps.finish()
    return done
