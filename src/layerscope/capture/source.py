"""Where a model comes from: a ``config.json`` file, a checkpoint directory, the bundled
catalog or the Hugging Face cache; and whether weights can be loaded for it.

No torch here: this runs before the memory guard decides whether a model may be built.
"""

from __future__ import annotations

import difflib
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from layerscope.errors import CaptureError, ConfigError
from layerscope.units import note_input

logger = logging.getLogger(__name__)

#: Files whose presence in a directory means it holds a checkpoint's weights.
WEIGHT_GLOBS: tuple[str, ...] = ("*.safetensors", "*.bin", "*.pt", "*.pth")


@dataclass(frozen=True)
class ModelSource:
    """A resolved model: its HF config and, when available, the directory of its weights."""

    name: str
    """What the user named (catalog name, HF id, or path)."""
    config: dict[str, Any]
    """The parsed ``config.json``."""
    config_path: Path | None
    """The file the config came from, if any (outputs never overwrite it)."""
    weights_dir: Path | None
    """Directory with weight files for ``from_pretrained``; ``None`` when only a config exists."""


def has_weights(directory: Path) -> bool:
    """Whether ``directory`` holds weight files (safetensors, bin, pt)."""
    return any(next(directory.glob(pattern), None) is not None for pattern in WEIGHT_GLOBS)


def _read_config(path: Path) -> dict[str, Any]:
    from layerscope.model.loader import read_config_file

    note_input(path)
    return read_config_file(path)


def _from_path(name: str, path: Path) -> ModelSource:
    if path.is_dir():
        config_path = path / "config.json"
        if not config_path.is_file():
            raise CaptureError(
                f"checkpoint directory {str(path)!r} has no config.json; pass a directory with "
                "config.json (and weights), a config.json file, or a catalog name"
            )
        weights = path if has_weights(path) else None
        return ModelSource(name, _read_config(config_path), config_path, weights)
    weights = path.parent if path.name == "config.json" and has_weights(path.parent) else None
    return ModelSource(name, _read_config(path), path, weights)


def _catalog_config(name: str) -> tuple[str, dict[str, Any], Path | None] | None:
    """``(hf_id, config, path)`` of the bundled catalog entry named ``name`` (HF id, folder
    name or alias, case-insensitive), or ``None``. ``path`` is ``None`` inside a zipped wheel."""
    from layerscope.model.catalog import catalog_file, find_catalog_entry

    entry = find_catalog_entry(name)
    if entry is None:
        return None
    resource = catalog_file(entry)
    try:
        config = json.loads(resource.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ConfigError(f"catalog entry {entry.id}: config.json cannot be read ({exc})") from None
    path = Path(str(resource)) if isinstance(resource, Path) else None
    return entry.id, config, path


def _unknown(name: str) -> CaptureError:
    from layerscope.model.catalog import catalog_names

    names = {n.lower(): n for n in catalog_names()}
    close = difflib.get_close_matches(name.lower(), list(names), n=3, cutoff=0.5)
    hint = f" (did you mean {', '.join(repr(names[c]) for c in close)}?)" if close else ""
    return CaptureError(
        f"unknown model {name!r}: not a file or directory, not in the bundled catalog{hint} "
        "(see `layerscope catalogs`), and not in the Hugging Face cache; layerscope does not "
        "download: pass a config.json or checkpoint directory, or `huggingface-cli download ID` first"
    )


def _hf_cache_dir(repo_id: str) -> Path | None:
    """The HF cache snapshot directory holding ``repo_id``'s config.json, if cached."""
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return None
    try:
        found = try_to_load_from_cache(repo_id, "config.json")
    except (ValueError, OSError):  # not a valid repo id
        return None
    return Path(found).parent if isinstance(found, str) else None


def _looks_like_path(name: str) -> bool:
    return name.endswith(".json") or name.startswith(("/", ".", "~")) or name.count("/") > 1 or "\\" in name


def resolve_model(model: str | os.PathLike[str]) -> ModelSource:
    """Resolve a config path, checkpoint directory, catalog name or HF id.

    A catalog model or HF id whose checkpoint is in the local HF cache resolves to the cache
    (weights available); otherwise a catalog name resolves to its bundled config (no weights).
    Raises :class:`CaptureError` naming what was tried when nothing matches.
    """
    name = os.fspath(model)
    if not name.strip():
        raise CaptureError("model: an empty name; give a catalog name (see `layerscope models`), a config.json "
                           "or a checkpoint directory")
    path = Path(name).expanduser()
    if path.exists():
        return _from_path(name, path)
    if _looks_like_path(name):
        raise CaptureError(f"model path {name!r} does not exist")
    catalog = _catalog_config(name)
    hf_id = catalog[0] if catalog is not None else name
    cached = _hf_cache_dir(hf_id) if hf_id.count("/") == 1 else None
    if cached is not None and (has_weights(cached) or catalog is None):
        weights = cached if has_weights(cached) else None
        return ModelSource(name, _read_config(cached / "config.json"), cached / "config.json", weights)
    if catalog is not None:
        return ModelSource(hf_id, catalog[1], catalog[2], None)
    raise _unknown(name)
