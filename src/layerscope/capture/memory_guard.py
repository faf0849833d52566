"""Refuse to build a model that would not fit: estimate first, allocate after.

The estimate is weights (exact, from the parameter count of the meta-device model) + KV cache +
a rough upper bound on live activations of the prefill.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from layerscope.errors import CaptureError
from layerscope.units import GB

if TYPE_CHECKING:
    from layerscope.model.spec import ModelSpec

logger = logging.getLogger(__name__)

#: Fraction of available memory a capture may plan to use; the rest is for the allocator,
#: the profiler's event buffers and the process itself.
MEMORY_HEADROOM = 0.9

#: Live [B, S, max(hidden, ffn)] activation tensors assumed at the peak of a layer's forward
#: (residual, normed input, q/k/v or gate/up, activation product; a rough bound, not a model).
LIVE_ACTIVATIONS = 8


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes a capture will need; ``total_bytes`` is what the guard compares."""

    weight_bytes: int
    kv_cache_bytes: int
    activation_bytes: int

    @property
    def total_bytes(self) -> int:
        return self.weight_bytes + self.kv_cache_bytes + self.activation_bytes


def _int(config: dict[str, Any], *keys: str, default: int = 0) -> int:
    for key in keys:
        value = config.get(key)
        if isinstance(value, int):
            return value
    return default


def estimate_memory(
    config: dict[str, Any],
    *,
    param_count: int,
    dtype_bytes: float,
    batch: int,
    prompt_len: int,
    decode_steps: int,
    spec: ModelSpec | None = None,
) -> MemoryEstimate:
    """Estimate the bytes of a capture of the (prepared, truncated) decoder ``config``.

    weights = params · dtype bytes; KV = layers · B · (S + decode) · values-per-token · dtype bytes
    (``spec.kv_values_per_token_per_layer()``: 2·kv_heads·head_dim, or MLA's latent + rope key);
    activations = B·S·(vocab·4·2 for fp32 logits and their argmax pass
    + LIVE_ACTIVATIONS·max(hidden, ffn)·dtype bytes) + B·heads·S²·4 for unfused attention scores.
    """
    hidden = _int(config, "hidden_size", "n_embd", "d_model")
    layers = _int(config, "num_hidden_layers", "n_layer", "num_layers", default=1)
    heads = _int(config, "num_attention_heads", "n_head", default=1)
    kv_heads = _int(config, "num_key_value_heads", default=heads)
    head_dim = _int(config, "head_dim", default=hidden // max(heads, 1))
    vocab = _int(config, "vocab_size")
    ffn = max(
        _int(config, "intermediate_size", "n_inner", "ffn_dim", default=4 * hidden),
        _int(config, "moe_intermediate_size") * _int(config, "num_experts_per_tok", default=1),
    )
    kv_per_token = spec.kv_values_per_token_per_layer() if spec is not None else 2 * kv_heads * head_dim
    tokens = prompt_len + decode_steps
    kv_bytes = int(layers * batch * tokens * kv_per_token * dtype_bytes)
    act_bytes = int(
        batch * prompt_len * (vocab * 4 * 2 + LIVE_ACTIVATIONS * max(hidden, ffn) * dtype_bytes)
        + batch * heads * prompt_len * prompt_len * 4
    )
    return MemoryEstimate(int(param_count * dtype_bytes), kv_bytes, act_bytes)


def _meminfo_available(path: Path = Path("/proc/meminfo")) -> int | None:
    try:
        text = path.read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024  # the kernel reports kB (KiB)
    return None


def available_memory_bytes(device: str) -> int | None:
    """Free memory on ``device``: ``torch.cuda.mem_get_info`` for cuda, else psutil's (or
    /proc/meminfo's) available memory; ``None`` when it cannot be told."""
    if device.startswith("cuda"):
        import torch

        free, _total = torch.cuda.mem_get_info(torch.device(device))
        return int(free)
    try:
        import psutil
    except ImportError:
        return _meminfo_available()
    return int(psutil.virtual_memory().available)


def check_memory(estimate: MemoryEstimate, available_bytes: int | None, *, device: str, layers: int) -> None:
    """Raise :class:`CaptureError` when ``estimate`` exceeds the usable part of ``available_bytes``."""
    if available_bytes is None:
        logger.warning("cannot tell the free memory on %s; skipping the memory check", device)
        return
    if estimate.total_bytes <= MEMORY_HEADROOM * available_bytes:
        return
    hint = "--layers 1 (one decoder layer)" if layers > 1 else "a smaller --prompt-len or --batch"
    raise CaptureError(
        f"the model would not fit: about {estimate.total_bytes / GB:.1f} GB needed "
        f"(weights {estimate.weight_bytes / GB:.1f} GB, KV cache {estimate.kv_cache_bytes / GB:.1f} GB, "
        f"activations {estimate.activation_bytes / GB:.1f} GB) but {available_bytes / GB:.1f} GB is "
        f"available on {device}; try {hint}"
    )
