"""The KV cache of one engine: bytes per token on a device, and how many tokens the memory leaves for it."""

from __future__ import annotations

from dataclasses import dataclass

from layerscope.cost.api import MemoryFootprint, memory_footprint
from layerscope.graph import build_model_graph
from layerscope.hardware.spec import HardwareSpec
from layerscope.model.spec import ModelSpec
from layerscope.serving.spec import ServingError
from layerscope.workload import Workload
from layerscope.workload.workload import pipeline_stages

__all__ = ["KvCapacity", "kv_bytes_per_token", "kv_capacity"]


def kv_bytes_per_token(spec: ModelSpec, template: Workload) -> float:
    """KV bytes one token adds on the busiest device: per-layer values per token (2·kv_heads·head_dim, or MLA's
    latent + RoPE key) over the busiest pipeline stage's layers, at the KV dtype, KV heads split by
    ``tensor_parallel`` (never below one; MLA's latent replicated), as ``cost.api.memory_footprint`` counts it.
    Sliding-window layers count every token (vLLM's paged allocator without hybrid KV groups)."""
    stages = pipeline_stages(spec.num_layers, template.pipeline_parallel)
    layers = max(len(r) for r in stages)
    split = 1 if spec.mla is not None else min(template.tensor_parallel, spec.num_kv_heads)
    return spec.kv_values_per_token_per_layer() * layers * template.kv_dtype.bytes / split


@dataclass(frozen=True)
class KvCapacity:
    """What one engine's device holds besides its KV cache, and the KV tokens and blocks left."""

    memory_bytes: float
    """The device's memory × ``gpu_memory_utilization``."""
    footprint: MemoryFootprint
    """Weights, activations of the largest step and communication buffers (its ``kv_cache`` is not used)."""
    bytes_per_token: float
    tokens: int
    blocks: int


def kv_capacity(spec: ModelSpec, hardware: HardwareSpec, template: Workload, *, max_batched_tokens: int,
                block_tokens: int, utilization: float, override_tokens: int | None = None) -> KvCapacity:
    """KV tokens of one engine: (memory × ``utilization`` − weights − activations − communication buffers) / KV
    bytes per token (``kv_bytes_per_token``), in whole blocks of ``block_tokens``, as vLLM sizes its cache after
    profiling a step of ``max_batched_tokens`` tokens (``gpu_memory_utilization``). Weights and buffers are the
    plan's busiest device's (``cost.api.memory_footprint``). ``override_tokens`` replaces the result. A model
    that leaves no block raises :class:`ServingError`."""
    from layerscope.workload import ForwardPass, SequenceGroup

    probe = template.model_copy(update={"phase": "prefill", "batch": 1, "prompt_len": max_batched_tokens})
    fwd = ForwardPass(groups=(SequenceGroup(count=1, new_tokens=max_batched_tokens),), label="prefill")
    footprint = memory_footprint(spec, probe, [build_model_graph(spec, fwd, template)])
    per_token = kv_bytes_per_token(spec, template)
    memory = hardware.memory_capacity_bytes * utilization
    free = memory - footprint.weights - footprint.activations - footprint.communication
    tokens = override_tokens if override_tokens is not None else int(max(free, 0.0) // per_token)
    blocks = tokens // block_tokens
    if blocks < 1:
        raise ServingError(
            f"{spec.name} leaves no KV cache on {hardware.name}: {memory / 2**30:.1f} GiB usable "
            f"(gpu_memory_utilization {utilization}) against {footprint.weights / 2**30:.1f} GiB of weights, "
            f"{footprint.activations / 2**30:.2f} GiB of activations and {footprint.communication / 2**30:.2f} GiB "
            f"of buffers per device; use more tensor or pipeline parallelism, a smaller dtype or kv_capacity_tokens")
    return KvCapacity(memory, footprint, per_token, tokens, blocks)
