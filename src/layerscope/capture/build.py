"""Building the HF model to capture: config truncation, meta-device construction, seeded random
weights or loaded checkpoints.

torch and transformers are imported inside the functions; :func:`require_torch` turns their
absence into an actionable :class:`CaptureError`.
"""

from __future__ import annotations

import copy
import logging
import math
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from layerscope.errors import CaptureError, ConfigError
from layerscope.units import DType, parse_dtype

logger = logging.getLogger(__name__)

INSTALL_HINT = (
    "install them with `pip install 'layerscope[capture]' torch==2.13.0` "
    "(CPU) or a CUDA build of torch from https://pytorch.org"
)

#: Dtypes a model can be built in for capture (quantized formats need their own kernels).
CAPTURE_DTYPES: tuple[DType, ...] = (DType.FP32, DType.BF16, DType.FP16)

#: HF's default ``initializer_range`` (``PretrainedConfig``), the std of its normal weight init.
DEFAULT_INIT_STD = 0.02


def require_torch() -> tuple[Any, Any]:
    """Import torch and transformers, or raise :class:`CaptureError` saying how to install them."""
    try:
        import torch
        import transformers
    except ImportError as exc:
        raise CaptureError(f"capture needs torch and transformers ({exc.name} is missing); {INSTALL_HINT}") from None
    return torch, transformers


def capture_dtype(dtype: str | DType) -> DType:
    """Parse ``dtype`` and check that a model can be built in it."""
    parsed = parse_dtype(dtype)
    if parsed not in CAPTURE_DTYPES:
        allowed = ", ".join(d.value for d in CAPTURE_DTYPES)
        raise CaptureError(f"dtype: cannot capture in {parsed.value!r}; allowed: {allowed}")
    return parsed


def text_config(config: dict[str, Any]) -> dict[str, Any]:
    """The decoder's config: ``text_config`` of a multimodal config (gemma3, llama4), else itself."""
    nested = config.get("text_config")
    if isinstance(nested, dict) and "num_hidden_layers" in nested:
        out = dict(nested)
        out.setdefault("model_type", f"{config.get('model_type', '')}_text")
        return out
    return config


def num_layers_of(config: dict[str, Any]) -> int:
    """``num_hidden_layers`` (``n_layer`` for gpt2) of a decoder config."""
    for key in ("num_hidden_layers", "n_layer", "num_layers"):
        value = config.get(key)
        if isinstance(value, int):
            return value
    raise ConfigError("model config has no num_hidden_layers (or n_layer)")


def prepare_config(config: dict[str, Any], *, layers: int | None, keep_quantization: bool) -> dict[str, Any]:
    """The decoder config to build: multimodal wrappers unwrapped, the first ``layers`` decoder
    layers kept (per-layer lists truncated alongside), and ``quantization_config`` dropped unless
    weights are loaded (random weights are built in the capture dtype)."""
    out = copy.deepcopy(text_config(config))
    if not keep_quantization:
        out.pop("quantization_config", None)
    if "qk_rope_head_dim" in out:
        # MLA (DeepSeek-V2/V3): transformers derives head_dim = qk_rope_head_dim for the rotary
        # tables, but a head_dim key in the dict overrides it and breaks RoPE.
        out.pop("head_dim", None)
    total = num_layers_of(out)
    if layers is None:
        return out
    if not 1 <= layers <= total:
        raise CaptureError(f"layers: {layers} is out of range; the model has {total} decoder layers (1..{total})")
    for key in ("num_hidden_layers", "n_layer", "num_layers"):
        if key in out:
            out[key] = layers
    # Per-layer lists (layer_types: gpt-oss, qwen3, gemma3) must match the kept layer count.
    for key in ("layer_types", "no_rope_layers", "moe_layers"):
        if isinstance(out.get(key), list) and len(out[key]) == total:
            out[key] = out[key][:layers]
    if isinstance(out.get("mlp_only_layers"), list):  # qwen3_moe: indices of dense layers
        out["mlp_only_layers"] = [i for i in out["mlp_only_layers"] if i < layers]
    if isinstance(out.get("max_window_layers"), int):
        out["max_window_layers"] = min(out["max_window_layers"], layers)
    # DeepSeek: first_k_dense_replace > layers simply makes every kept layer dense, as in the full model.
    return out


def hf_config(config: dict[str, Any]) -> Any:
    """A transformers ``PretrainedConfig`` for the (prepared) config dict."""
    _, transformers = require_torch()
    model_type = config.get("model_type")
    if not model_type:
        raise ConfigError("model config has no model_type")
    kwargs = {k: v for k, v in config.items() if k != "model_type"}
    try:
        return transformers.AutoConfig.for_model(model_type, **kwargs)
    except ValueError as exc:
        raise ConfigError(
            f"model_type {model_type!r} is not known to transformers {transformers.__version__}: {exc}"
        ) from None


def torch_dtype(dtype: DType) -> Any:
    torch, _ = require_torch()
    return getattr(torch, dtype.torch_name)


@contextmanager
def _parameters_on_meta() -> Iterator[None]:
    """Register every new parameter on the meta device (buffers stay real, so rotary
    ``inv_freq`` and the like are computed as usual); nothing is allocated or initialized."""
    import torch

    original = torch.nn.Module.register_parameter

    def register_parameter(module: Any, name: str, param: Any) -> None:
        original(module, name, param)
        if param is not None and param.device.type != "meta":
            meta = param.to("meta")
            module._parameters[name] = type(param)(meta, requires_grad=param.requires_grad)

    torch.nn.Module.register_parameter = register_parameter  # type: ignore[method-assign,assignment]
    try:
        yield
    finally:
        torch.nn.Module.register_parameter = original  # type: ignore[method-assign]


def build_empty(config: Any, dtype: DType) -> Any:
    """The ``AutoModelForCausalLM`` for ``config`` with its parameters on the meta device."""
    _, transformers = require_torch()
    with _parameters_on_meta():
        try:
            model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch_dtype(dtype))
        except ValueError as exc:
            raise ConfigError(f"transformers cannot build a causal LM for this config: {exc}") from None
    return model.eval()


def parameter_count(model: Any) -> int:
    """Elements of the model's distinct parameters (tied weights counted once)."""
    return sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())


def materialize_random(model: Any, *, device: str, seed: int, init_std: float) -> None:
    """Allocate the meta parameters on ``device`` and fill them from a generator seeded with ``seed``.

    Matrices get U(-a, a) with a = std·√3, the uniform with the standard deviation of HF's normal
    init (Var U(-a,a) = a²/3); biases 0; norm weights 1. Shared (tied) parameters stay shared.
    """
    import torch

    generator = torch.Generator(device=device).manual_seed(seed)
    bound = init_std * math.sqrt(3.0)
    made: dict[int, Any] = {}
    with torch.no_grad():
        for module in model.modules():
            for name, param in list(module._parameters.items()):
                if param is None:
                    continue
                new = made.get(id(param))
                if new is None:
                    data = torch.empty(param.shape, dtype=param.dtype, device=device)
                    if name.endswith("bias"):
                        data.zero_()
                    elif param.dim() == 1 and "norm" in type(module).__name__.lower():
                        data.fill_(1.0)
                    else:
                        data.uniform_(-bound, bound, generator=generator)
                    new = made[id(param)] = torch.nn.Parameter(data, requires_grad=False)
                module._parameters[name] = new
    model.to(device)


def load_pretrained(weights_dir: Path, config: Any, dtype: DType, device: str) -> Any:
    """Load a checkpoint from a local directory (no network) with ``config`` (maybe truncated)."""
    import pickle

    _, transformers = require_torch()
    errors: tuple[type[BaseException], ...] = (OSError, ValueError, pickle.UnpicklingError)
    try:
        from safetensors import SafetensorError

        errors = (*errors, SafetensorError)
    except ImportError:
        pass
    try:
        model = transformers.AutoModelForCausalLM.from_pretrained(
            str(weights_dir), config=config, dtype=torch_dtype(dtype), local_files_only=True
        )
    except errors as exc:
        raise CaptureError(f"cannot load the checkpoint in {str(weights_dir)!r}: {exc}") from None
    return model.to(device).eval()
