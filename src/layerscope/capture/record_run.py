"""``record_workloads()``: run a model as ``capture`` does (prefill + greedy decode steps, no profiler)
with a :class:`~layerscope.capture.recorder.Recorder` attached, and write its operator records."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from layerscope.capture.annotate import ModuleAnnotator
from layerscope.capture.api import _check_args, _check_device, _check_positions, _model_spec, instantiate
from layerscope.capture.build import (
    build_empty,
    capture_dtype,
    hf_config,
    num_layers_of,
    parameter_count,
    prepare_config,
    require_torch,
)
from layerscope.capture.memory_guard import available_memory_bytes, check_memory, estimate_memory
from layerscope.capture.recorder import Recorder
from layerscope.capture.runner import RunPlan, _one_iteration, prompt_ids
from layerscope.capture.source import resolve_model
from layerscope.records.schema import RecordSet

logger = logging.getLogger(__name__)


def record_workloads(
    model: str | os.PathLike[str],
    *,
    out: str | os.PathLike[str] | None = None,
    layers: int | None = None,
    dtype: str = "bf16",
    device: str = "cpu",
    batch: int = 1,
    prompt_len: int = 128,
    decode_steps: int = 0,
    random_weights: bool = False,
    seed: int = 0,
) -> RecordSet:
    """Run one prefill of ``prompt_len`` random tokens and ``decode_steps`` greedy steps of ``model``
    (catalog name, config path, checkpoint directory or cached HF id) and record every operator call.

    Writes the records to ``out`` when given. Raises :class:`CaptureError` / :class:`ConfigError`
    like :func:`layerscope.capture.capture`.
    """
    _check_args(batch, prompt_len, decode_steps, 0, 1, "dynamic")
    parsed = capture_dtype(dtype)
    torch, transformers = require_torch()
    _check_device(torch, device)
    source = resolve_model(model)
    load = source.weights_dir is not None and not random_weights
    config_dict = prepare_config(source.config, layers=layers, keep_quantization=load)
    spec = _model_spec(config_dict, source.name)
    _check_positions(spec, prompt_len + decode_steps)
    config = hf_config(config_dict)
    # The same guard as capture's: a model that would not fit fails here, not by swapping the machine.
    empty = build_empty(config, parsed)
    estimate = estimate_memory(config_dict, param_count=parameter_count(empty), dtype_bytes=parsed.bytes, batch=batch,
                               prompt_len=prompt_len, decode_steps=decode_steps, spec=spec)
    check_memory(estimate, available_memory_bytes(device), device=device, layers=num_layers_of(config_dict))
    hf_model = instantiate(source, config, config_dict, parsed, device=device, seed=seed, load=load,
                           empty=None if load else empty)
    plan = RunPlan(device=device, batch=batch, prompt_len=prompt_len, decode_steps=decode_steps, warmup=0,
                   iterations=1, cache="dynamic", seed=seed)
    records = RecordSet({"batch": batch, "prompt_len": prompt_len, "decode_steps": decode_steps, "device": device,
                         "weights": "loaded" if load else "random"})
    input_ids = prompt_ids(torch, int(config.vocab_size), plan)
    with torch.inference_mode(), Recorder(records, source="capture") as rec:
        rec.attach(hf_model, spec)
        records.meta["model"] = source.name
        _one_iteration(torch, transformers, hf_model, input_ids, plan, ModuleAnnotator(hf_model))
    if out is not None:
        inputs = (source.config_path,) if source.config_path is not None else ()
        records.write(Path(out), inputs=inputs)
    return records
