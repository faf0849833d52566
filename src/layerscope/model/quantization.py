"""Checkpoint weight dtypes from HF ``torch_dtype`` and ``quantization_config``.

Quantization schemes are registered by ``quant_method`` (no ``if``-chains); each returns the
dtype of the quantized (linear) weights and the module patterns left unquantized.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from layerscope.errors import ConfigError, WorkloadError
from layerscope.units import DType, parse_dtype

log = logging.getLogger(__name__)

QuantScheme = Callable[[Mapping[str, Any]], tuple[DType, tuple[str, ...]]]


def _excluded(qc: Mapping[str, Any], *keys: str) -> tuple[str, ...]:
    for key in keys:
        value = qc.get(key)
        if value:
            return tuple(str(v) for v in value)
    return ()


def _fp8(qc: Mapping[str, Any]) -> tuple[DType, tuple[str, ...]]:
    # Qwen3-*-FP8 and DeepSeek-V3: block-wise e4m3 (``fmt: e4m3``, 128x128 blocks).
    return DType.FP8, _excluded(qc, "modules_to_not_convert", "ignored_layers")


def _mxfp4(qc: Mapping[str, Any]) -> tuple[DType, tuple[str, ...]]:
    # gpt-oss: MXFP4 experts (4-bit e2m1 with a shared 8-bit scale per 32 values).
    return DType.FP4, _excluded(qc, "modules_to_not_convert")


_MODELOPT_ALGOS = {"FP8": DType.FP8, "NVFP4": DType.FP4, "W4A16_AWQ": DType.INT4, "W4A8_AWQ": DType.INT4,
                   "INT8_SQ": DType.INT8, "FP8_PER_CHANNEL_PER_TOKEN": DType.FP8}


def _modelopt(qc: Mapping[str, Any]) -> tuple[DType, tuple[str, ...]]:
    # NVIDIA ModelOpt exports (hf_quant_config.json ``quantization`` block, merged by the loader).
    algo = str(qc.get("quant_algo", "")).upper()
    if algo not in _MODELOPT_ALGOS:
        raise ConfigError(
            f"quantization_config.quant_algo: unknown ModelOpt algorithm {qc.get('quant_algo')!r}; "
            f"known: {', '.join(sorted(_MODELOPT_ALGOS))}"
        )
    return _MODELOPT_ALGOS[algo], _excluded(qc, "exclude_modules", "modules_to_not_convert")


def _bits(qc: Mapping[str, Any]) -> tuple[DType, tuple[str, ...]]:
    # GPTQ / AWQ: integer weights of ``bits`` (or ``w_bit``) bits.
    bits = qc.get("bits", qc.get("w_bit"))
    by_bits = {4: DType.INT4, 8: DType.INT8}
    if bits not in by_bits:
        raise ConfigError(f"quantization_config.bits: unsupported value {bits!r}; allowed: 4, 8")
    return by_bits[bits], _excluded(qc, "modules_to_not_convert")


def _bitsandbytes(qc: Mapping[str, Any]) -> tuple[DType, tuple[str, ...]]:
    dtype = DType.INT4 if qc.get("load_in_4bit") else DType.INT8
    return dtype, _excluded(qc, "llm_int8_skip_modules", "modules_to_not_convert")


def _compressed_tensors(qc: Mapping[str, Any]) -> tuple[DType, tuple[str, ...]]:
    # compressed-tensors (llm-compressor): the first config group's weight format.
    for group in (qc.get("config_groups") or {}).values():
        weights = group.get("weights") or {}
        bits, kind = int(weights.get("num_bits", 0)), str(weights.get("type", ""))
        table = {(8, "float"): DType.FP8, (8, "int"): DType.INT8, (4, "int"): DType.INT4,
                 (4, "float"): DType.FP4}
        if (bits, kind) in table:
            return table[(bits, kind)], _excluded(qc, "ignore")
    raise ConfigError("quantization_config.config_groups: no weight format (num_bits, type) found")


#: ``quant_method`` → scheme.
QUANT_SCHEMES: dict[str, QuantScheme] = {
    "fp8": _fp8,
    "mxfp4": _mxfp4,
    "modelopt": _modelopt,
    "gptq": _bits,
    "awq": _bits,
    "bitsandbytes": _bitsandbytes,
    "compressed-tensors": _compressed_tensors,
}


def base_dtype_of(cfg: Mapping[str, Any]) -> DType:
    """``torch_dtype`` (transformers 5 writes ``dtype``); bf16 when absent (gpt2, opt, gpt-oss)."""
    value = cfg.get("torch_dtype", cfg.get("dtype"))
    if value is None:
        return DType.BF16
    try:
        dtype = parse_dtype(str(value).removeprefix("torch."), field="torch_dtype")
    except WorkloadError as exc:
        raise ConfigError(str(exc)) from None
    return dtype


def weight_dtypes(cfg: Mapping[str, Any]) -> tuple[DType, DType, tuple[str, ...]]:
    """``(weight_dtype, base_dtype, excluded_module_patterns)`` of a config dict."""
    base = base_dtype_of(cfg)
    qc = cfg.get("quantization_config")
    if not qc:
        return base, base, ()
    if not isinstance(qc, Mapping):
        raise ConfigError(f"quantization_config: expected an object, got {qc!r}")
    method = str(qc.get("quant_method", "")).lower()
    scheme = QUANT_SCHEMES.get(method)
    if scheme is None:
        log.warning("quantization_config.quant_method %r is not known (known: %s); weights taken as %s",
                    method, ", ".join(sorted(QUANT_SCHEMES)), base.value)
        return base, base, ()
    dtype, excluded = scheme(qc)
    return dtype, base, excluded
