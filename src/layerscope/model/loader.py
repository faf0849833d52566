"""Load a :class:`ModelSpec` from a local config, the bundled catalog or the local HF cache.

layerscope never downloads: a source is a ``config.json`` path, a folder holding one, a catalog
name (HF id or alias, case-insensitive), or an HF id already in the local hub cache.
"""

from __future__ import annotations

import difflib
import json
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from layerscope.errors import ConfigError
from layerscope.model.catalog import catalog_names, find_catalog_entry, read_catalog_text
from layerscope.model.families import DEFAULT_ARCHITECTURES, FAMILIES, Fields, parse_generic
from layerscope.model.quantization import weight_dtypes
from layerscope.model.spec import ModelSpec
from layerscope.units import note_input

log = logging.getLogger(__name__)

CONFIG_FILE = "config.json"
#: NVIDIA ModelOpt's quantization sidecar (nvidia/*-FP8 checkpoints).
QUANT_SIDECAR = "hf_quant_config.json"
#: Top-level keys a nested ``text_config`` inherits when it does not set them itself.
_INHERITED = ("torch_dtype", "dtype", "quantization_config", "tie_word_embeddings")


def hf_cache_dir() -> Path:
    """The HF hub cache: ``HF_HUB_CACHE``, else ``HF_HOME/hub``, else ``~/.cache/huggingface/hub``."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    return Path.home() / ".cache" / "huggingface" / "hub"


#: Largest config file read: real ``config.json`` files are a few KiB (a Llama 4 one with its vision
#: tower ~10 KiB); anything this large is not a model config.
MAX_CONFIG_BYTES = 16 * 1024 * 1024


def _parse_json(text: str, where: str) -> dict[str, Any]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{where}: not valid JSON ({exc})") from None
    except RecursionError:
        raise ConfigError(f"{where}: not a model config (JSON nested too deeply)") from None
    except ValueError as exc:  # e.g. an integer literal beyond Python's 4300-digit conversion limit
        raise ConfigError(f"{where}: not a model config ({str(exc)[:120]})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a JSON object, got {type(data).__name__}")
    return data


def read_config_file(path: Path) -> dict[str, Any]:
    """A config file's JSON object, read with the bounds every config read passes (size, UTF-8,
    nesting, integer literals); :class:`ConfigError` naming the file otherwise."""
    return _read_json(path)


def _read_json(path: Path) -> dict[str, Any]:
    try:
        size = path.stat().st_size
        if size > MAX_CONFIG_BYTES:
            raise ConfigError(f"{path}: {size} bytes is not a model config (at most {MAX_CONFIG_BYTES} bytes)")
        text = path.read_bytes().decode("utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not a JSON config (not UTF-8 text: byte {exc.start})") from None
    return _parse_json(text, str(path))


def _with_sidecar(cfg: dict[str, Any], sidecar: dict[str, Any] | None) -> dict[str, Any]:
    """Merge a ModelOpt ``hf_quant_config.json`` as ``quantization_config`` (as transformers does)."""
    if sidecar is None or cfg.get("quantization_config"):
        return cfg
    quant = sidecar.get("quantization")
    if not isinstance(quant, dict):
        raise ConfigError(f"{QUANT_SIDECAR}: expected a 'quantization' object, got {quant!r}")
    return {**cfg, "quantization_config": {"quant_method": "modelopt", **quant}}


def _load_dir_config(config_path: Path) -> dict[str, Any]:
    cfg = _read_json(config_path)
    sidecar_path = config_path.parent / QUANT_SIDECAR
    sidecar = _read_json(sidecar_path) if sidecar_path.is_file() else None
    return _with_sidecar(cfg, sidecar)


def _hf_cache_config(model_id: str, cache: Path) -> Path | None:
    """``models--{org}--{name}/snapshots/<rev>/config.json``, preferring ``refs/main``'s snapshot."""
    repo = cache / ("models--" + model_id.replace("/", "--"))
    snapshots = repo / "snapshots"
    if not snapshots.is_dir():
        return None
    ref = repo / "refs" / "main"
    if ref.is_file():
        candidate = snapshots / ref.read_text(encoding="utf-8").strip() / CONFIG_FILE
        if candidate.is_file():
            return candidate
    found = sorted(snapshots.glob(f"*/{CONFIG_FILE}"), key=lambda p: (p.stat().st_mtime, p.parent.name))
    return found[-1] if found else None


def _not_found(source: str, cache: Path) -> ConfigError:
    close = difflib.get_close_matches(source.lower(), [n.lower() for n in catalog_names()], n=3, cutoff=0.5)
    names = {n.lower(): n for n in catalog_names()}
    hint = f" (did you mean {', '.join(repr(names[c]) for c in close)}?)" if close else ""
    return ConfigError(
        f"model {source!r} not found: it is not a local file or folder; it is not in the bundled catalog"
        f"{hint}; it is not in the Hugging Face cache at {cache}. layerscope does not download "
        f"(the hub may be unreachable); download the config with "
        f"`huggingface-cli download {source} {CONFIG_FILE}` or pass the path of a config.json"
    )


def load_model_spec(source: str | Path) -> ModelSpec:
    """A :class:`ModelSpec` from a ``config.json`` path, a folder, a catalog name or the HF cache.

    Never touches the network; raises :class:`ConfigError` saying where it looked.
    """
    if not str(source).strip():
        raise ConfigError("model: an empty name; give a catalog name (see `layerscope models`), a config.json "
                          "or a checkpoint directory")
    path = Path(source).expanduser()
    if path.exists():
        note_input(path)  # a file, or a folder whose files are all inputs (units.check_output)
    if path.is_file():
        return model_spec_from_dict(_load_dir_config(path), str(source))
    if path.is_dir():
        config_path = path / CONFIG_FILE
        if not config_path.is_file():
            raise ConfigError(f"{path}: folder has no {CONFIG_FILE}")
        return model_spec_from_dict(_load_dir_config(config_path), str(source))
    name = str(source)
    entry = find_catalog_entry(name)
    if entry is not None:
        text = read_catalog_text(entry, CONFIG_FILE)
        if text is None:
            raise ConfigError(f"catalog entry {entry.id}: {CONFIG_FILE} is missing from the package")
        cfg = _parse_json(text, f"catalog {entry.dir}/{CONFIG_FILE}")
        sidecar = read_catalog_text(entry, QUANT_SIDECAR)
        cfg = _with_sidecar(cfg, _parse_json(sidecar, QUANT_SIDECAR) if sidecar is not None else None)
        return model_spec_from_dict(cfg, entry.id)
    cache = hf_cache_dir()
    if name.count("/") == 1:
        cached = _hf_cache_config(name, cache)
        if cached is not None:
            log.info("loading %s from the HF cache (%s)", name, cached)
            return model_spec_from_dict(_load_dir_config(cached), name)
    raise _not_found(name, cache)


def _text_config(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """The text model's config: a nested ``text_config`` (with inherited dtype keys) or ``cfg``."""
    nested = cfg.get("text_config")
    if nested is None:
        return dict(cfg)
    if not isinstance(nested, dict):
        raise ConfigError(f"text_config: expected an object, got {nested!r}")
    inherited = {k: cfg[k] for k in _INHERITED if k in cfg}
    return {**inherited, **nested}


#: ModelSpec/MoESpec field → the HF config key it usually comes from, named in error messages.
_CONFIG_KEYS = {
    "num_kv_heads": "num_key_value_heads",
    "num_layers": "num_hidden_layers",
    "expert_intermediate_size": "moe_intermediate_size",
    "num_experts": "num_experts / num_local_experts / n_routed_experts",
}


def _format_validation(name: str, exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        loc = ".".join(str(x) for x in err["loc"])
        msg = err["msg"].removeprefix("Value error, ")
        if loc and not isinstance(err.get("input"), dict):
            key = f" (config key {_CONFIG_KEYS[loc]})" if loc in _CONFIG_KEYS else ""
            parts.append(f"{loc}={err.get('input')!r}: {msg}{key}")
        else:
            parts.append(msg)
    return f"{name}: invalid model config: " + "; ".join(parts)


def model_spec_from_dict(cfg: dict[str, Any], name: str) -> ModelSpec:
    """A :class:`ModelSpec` from a parsed HF config dict; ``name`` becomes ``ModelSpec.name``."""
    if not isinstance(cfg, dict):
        raise ConfigError(f"{name}: expected a config object, got {type(cfg).__name__}")
    model_type = str(cfg.get("model_type") or "")
    text = _text_config(cfg)
    text_type = str(text.get("model_type") or model_type)
    family = model_type if model_type in FAMILIES else text_type
    parser = FAMILIES.get(family)
    generic = parser is None
    if parser is None:
        parser, family = parse_generic, model_type or "generic"
    architectures = cfg.get("architectures")
    if isinstance(architectures, list) and architectures and isinstance(architectures[0], str):
        architecture = architectures[0]
    else:
        architecture = DEFAULT_ARCHITECTURES.get(family, "")
    weight_dtype, base_dtype, excluded = weight_dtypes(text)
    try:
        fields = parser(Fields(text, family, architecture))
        spec = ModelSpec(
            name=name,
            model_type=text_type or family,
            family=family,
            architecture=architecture,
            weight_dtype=weight_dtype,
            base_dtype=base_dtype,
            quantized_modules_excluded=excluded,
            **fields,
        )
    except ValidationError as exc:
        raise ConfigError(_format_validation(name, exc)) from None
    except ConfigError as exc:  # a field's own message, said of this config
        raise ConfigError(f"{name}: {exc}") from None
    if generic:  # only once the standard fields made a model: a refused config prints one line
        log.warning("%s: model_type %r is not a known family (%s); read the standard fields",
                    name, model_type, ", ".join(FAMILIES.names()))
    return spec
