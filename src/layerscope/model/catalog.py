"""The bundled catalog of real HF ``config.json`` files (``layerscope/model/catalog/<org>--<name>/``).

``catalog/index.json`` records, per model, where the file came from, how exact it is and the
published parameter counts; ``catalog/README.md`` explains the conventions.
"""

from __future__ import annotations

import json
import re
from functools import cache, lru_cache
from importlib import resources
from importlib.resources.abc import Traversable
from typing import Any

from pydantic import BaseModel

from layerscope.docstrings import SPEC_CONFIG
from layerscope.errors import ConfigError

_CATALOG_DIR = "catalog"


class CatalogEntry(BaseModel):
    """One bundled config and the published facts about its model."""

    model_config = SPEC_CONFIG

    id: str
    """HF id of the delivered file (``meta-llama/Llama-3.1-8B``)."""
    alias: str
    """Lowercase model-name part of ``id`` (``llama-3.1-8b``); accepted by ``load_model_spec``."""
    dir: str
    """Folder under ``catalog/`` (``meta-llama--Llama-3.1-8B``)."""
    model_type: str
    """Top-level HF ``model_type`` of the file."""
    published_total_params: str | None
    """As published (``"8.03B (8,030,261,248)"``); see :func:`parse_published_count`."""
    published_active_params: str | None
    """Active parameters per token of MoE models as published; ``None`` for dense models."""
    source: str
    """Provenance (``owner/repo @ commit : path``)."""
    status: str
    """``exact-file``, ``exact-content``, ``partial`` or ``reconstructed`` (catalog README)."""
    notes: str = ""


def catalog_root() -> Traversable:
    """The bundled catalog folder (works from a wheel or a source checkout)."""
    return resources.files("layerscope.model").joinpath(_CATALOG_DIR)


@lru_cache(maxsize=1)
def _index() -> tuple[dict[str, Any], ...]:
    """The items of ``catalog/index.json``, in order."""
    return tuple(json.loads(catalog_root().joinpath("index.json").read_text(encoding="utf-8")))


def _names(item: dict[str, Any]) -> tuple[str, str, str]:
    """(HF id, alias, folder) of an index item: what :func:`find_catalog_entry` matches."""
    folder = item["dir"]
    org, _, model = folder.partition("--")
    return f"{org}/{model}", model.lower(), folder


@cache
def _entry(position: int) -> CatalogEntry:
    """The entry of the index's item at ``position`` (its config read for the ``model_type``)."""
    item = _index()[position]
    hf_id, alias, folder = _names(item)
    config = json.loads(catalog_root().joinpath(folder, "config.json").read_text(encoding="utf-8"))
    return CatalogEntry(
        id=hf_id,
        alias=alias,
        dir=folder,
        model_type=str(config.get("model_type", "")),
        published_total_params=item.get("published_total_params"),
        published_active_params=item.get("published_active_params"),
        source=item.get("source", ""),
        status=item.get("status", ""),
        notes=item.get("notes", ""),
    )


def _entries() -> tuple[CatalogEntry, ...]:
    return tuple(_entry(i) for i in range(len(_index())))


def list_catalog() -> list[CatalogEntry]:
    """Every bundled model, in the order of ``catalog/index.json``."""
    return list(_entries())


def find_catalog_entry(name: str) -> CatalogEntry | None:
    """The entry whose HF id, folder name or alias equals ``name`` (case-insensitive); only its config is read."""
    key = name.strip().lower()
    for position, item in enumerate(_index()):
        hf_id, alias, folder = _names(item)
        if key in (hf_id.lower(), alias, folder.lower()):
            return _entry(position)
    return None


def catalog_names() -> list[str]:
    """Ids and aliases, for suggestions in error messages."""
    return [name for e in _entries() for name in (e.id, e.alias)]


def catalog_file(entry: CatalogEntry, filename: str = "config.json") -> Traversable:
    return catalog_root().joinpath(entry.dir, filename)


_UNITS = {"": 1, "K": 10**3, "M": 10**6, "B": 10**9, "T": 10**12}
_NUMBER = re.compile(r"~?(\d+(?:\.\d+)?)\s*([KMBT])\b")
_EXACT = re.compile(r"\((\d{1,3}(?:,\d{3})+)\)")
_PLAIN_REFINEMENT = re.compile(r"^\((\d+(?:\.\d+)?)\s*([KMBT])\)$")


def parse_published_count(text: str | None) -> tuple[int, int] | None:
    """``(count, resolution)`` of a published parameter count, or ``None`` if it has no number.

    ``"8.03B (8,030,261,248)"`` → the exact integer (resolution 1); ``"7B (6.74B)"`` → the more
    precise bracketed figure; ``"0.6B (0.44B non-embedding)"`` → the first figure (the bracket
    counts something else). ``resolution`` is one unit of the last published digit (0.01B for
    ``"8.03B"``), so a caller can tell rounding from disagreement.
    """
    if not text:
        return None
    exact = _EXACT.search(text)
    if exact:
        return int(exact.group(1).replace(",", "")), 1
    head, _, tail = text.partition(" ")
    refined = _PLAIN_REFINEMENT.match(tail.strip())
    match = refined or _NUMBER.match(head)
    if match is None:
        return None
    digits, unit = match.group(1), match.group(2)
    decimals = len(digits.partition(".")[2])
    scale = _UNITS[unit]
    return round(float(digits) * scale), max(1, scale // 10**decimals)


def read_catalog_text(entry: CatalogEntry, filename: str) -> str | None:
    """A file of the entry's folder, or ``None`` when the folder has no such file."""
    path = catalog_file(entry, filename)
    if not path.is_file():
        return None
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"catalog file {entry.dir}/{filename} cannot be read: {exc}") from None
