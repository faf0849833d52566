"""Bundled hardware presets: one YAML file per chip, plus the spreadsheet ``accelerators.csv``.

Presets are read lazily, on first use, and cached. Names are matched case- and
dash-insensitively (``h100-sxm`` = ``H100_SXM``). Each device column of ``accelerators.csv``
(``NVL-AX``, ``JGS``) is a preset too, so the CSV loader runs on shipped data.

``compiled.json`` holds the spec each bundled YAML file validates to, and the spreadsheet's device names, each with
the CRC-32 of the text it came from (``make presets`` writes it). A spec is stored as the objects themselves (every
model with the fields it was given, tuples, dtype keys: :func:`encode_spec`) and rebuilt without running pydantic's
validators (``model_construct``), while its file's text still has that CRC and the code that turns a mapping into a
spec (:data:`SPEC_SOURCES`) still has the CRC it had then; else the preset is read from its YAML and validated. A
command that uses a preset never imports a YAML parser, reads the spreadsheet (YAML parsing was a tenth of
``layerscope estimate``'s run) or builds the validators of ``HardwareSpec`` and its parts (another tenth), and an
edited file is never shadowed by a stale copy. ``tests/hardware/test_presets.py`` fails until ``make presets`` has
been rerun after an edit of a preset or of that code. A spec read from any other file is validated in full.
"""

from __future__ import annotations

import enum
import functools
import importlib
import json
import re
import zlib
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from layerscope.errors import HardwareSpecError
from layerscope.hardware.spec import HardwareSpec

PRESET_DIR = Path(__file__).parent
SPREADSHEET = PRESET_DIR / "accelerators.csv"
#: The GPU presets' hand-written files (datasheet facts, comments, hand-set efficiencies): the shipped GPU presets
#: are these with their efficiencies fitted on the kernel table (``make presets``, :mod:`layerscope.app.presets`).
BASE_DIR = PRESET_DIR / "base"
#: The bundled files parsed ahead of time (see the module docstring).
COMPILED = PRESET_DIR / "compiled.json"
COMPILED_FORMAT = "layerscope-compiled-presets"


def _key(name: str) -> str:
    """Lookup key of a preset name: lower case without separators (``H100_SXM`` → ``h100sxm``)."""
    return re.sub(r"[^0-9a-z]+", "", name.lower())


def _canonical(name: str) -> str:
    """Preset name of a spreadsheet column (``NVL-AX`` → ``nvl-ax``)."""
    return re.sub(r"[^0-9a-z]+", "-", name.lower()).strip("-")


def bundled_spreadsheet_example() -> Path:
    """Path of the shipped example spreadsheet (NVL-AX and JGS, one column each)."""
    return SPREADSHEET


#: The code that decides what a preset's mapping validates to (the spec models and their validators, the units the
#: loader converts, the dtypes): compiled specs are used only while these files read as they did when encoded.
SPEC_SOURCES = tuple(PRESET_DIR.parents[1] / name for name in (
    "hardware/spec.py", "hardware/calibration.py", "hardware/loaders.py", "hardware/quantities.py", "units.py",
    "docstrings.py"))


def _crc(path: Path) -> int:
    return zlib.crc32(path.read_bytes())


def spec_sources_crc() -> int | None:
    """CRC-32 of :data:`SPEC_SOURCES`' texts, one after the other; None where one cannot be read (no sources)."""
    crc = 0
    for path in SPEC_SOURCES:
        try:
            crc = zlib.crc32(path.read_bytes(), crc)
        except OSError:
            return None
    return crc


def encode_spec(value: Any) -> Any:
    """``value`` (a validated spec, or any value in one) as JSON that :func:`decode_spec` turns back into the same
    objects: a model as ``{"$model": "module:Class", "$set": [fields given], field: value, …}`` with every field,
    a tuple as ``{"$tuple": […]}``, an enum as ``{"$enum": "module:Class", "value": …}``, a mapping whose keys are
    not plain strings in sorted order as ``{"$items": [[key, value], …]}`` (its order kept)."""
    ref = f"{type(value).__module__}:{type(value).__qualname__}"
    if isinstance(value, BaseModel):
        fields = {name: encode_spec(getattr(value, name)) for name in type(value).model_fields}
        return {"$model": ref, "$set": sorted(value.model_fields_set), **fields}
    if isinstance(value, enum.Enum):
        return {"$enum": ref, "value": encode_spec(value.value)}
    if isinstance(value, tuple) and type(value) is tuple:
        return {"$tuple": [encode_spec(v) for v in value]}
    if type(value) is list:
        return [encode_spec(v) for v in value]
    if type(value) is dict:
        keys = list(value)
        if all(type(k) is str and not k.startswith("$") for k in keys) and keys == sorted(keys):
            return {k: encode_spec(v) for k, v in value.items()}  # the JSON's sorted keys keep its order
        return {"$items": [[encode_spec(k), encode_spec(v)] for k, v in value.items()]}
    if value is None or type(value) in (str, int, float, bool):
        return value
    raise TypeError(f"encode_spec: no encoding for a {type(value).__name__} ({value!r})")


def decode_spec(value: Any) -> Any:
    """The objects :func:`encode_spec` encoded; models are built by ``model_construct``, without validation (for
    data that was validated when it was encoded)."""
    if type(value) is list:
        return [decode_spec(v) for v in value]
    if type(value) is not dict:
        return value
    if "$model" in value:
        fields = {k: decode_spec(v) for k, v in value.items() if not k.startswith("$")}
        return _spec_class(value["$model"], BaseModel).model_construct(set(value["$set"]), **fields)
    if "$tuple" in value:
        return tuple(decode_spec(v) for v in value["$tuple"])
    if "$items" in value:
        return {decode_spec(k): decode_spec(v) for k, v in value["$items"]}
    if "$enum" in value:
        return _spec_class(value["$enum"], enum.Enum)(value["value"])
    return {k: decode_spec(v) for k, v in value.items()}


def _spec_class(ref: str, kind: type[Any]) -> Any:
    """The class ``module:Class`` names: one of layerscope's, of ``kind``."""
    module, _, name = ref.partition(":")
    cls = getattr(importlib.import_module(module), name, None) if module.startswith("layerscope.") else None
    if not (isinstance(cls, type) and issubclass(cls, kind)):
        raise HardwareSpecError(f"{COMPILED}: {ref!r} is not a layerscope {kind.__name__}")
    return cls


def compiled_text() -> str:
    """What ``make presets`` writes to :data:`COMPILED`: the spec each bundled YAML file gives (a file whose
    mapping does not survive JSON unchanged is left out, and read from its YAML), the spreadsheet's devices and
    the CRC of :data:`SPEC_SOURCES`."""
    from layerscope.hardware.loaders import MAPPING_READERS, sheet_devices, spec_from_mapping

    read_yaml = MAPPING_READERS.lookup(".yaml")  # the data the YAML loader turns into a spec, as the file reads
    files: dict[str, Any] = {}
    for path in sorted(PRESET_DIR.glob("*.yaml")):
        data = read_yaml(path)
        if json.loads(json.dumps(data)) == data:
            # Validated from the mapping with sorted keys, as the earlier format of this file (the mapping itself)
            # gave it: the same dicts in the same order as before.
            stored = json.loads(json.dumps(data, sort_keys=True))
            files[path.name] = {"crc32": _crc(path), "spec": encode_spec(spec_from_mapping(stored, str(path), path))}
    sheet = {"crc32": _crc(SPREADSHEET), "devices": sheet_devices(SPREADSHEET)} if SPREADSHEET.is_file() else None
    return json.dumps({"format": COMPILED_FORMAT, "files": files, "sheet": sheet, "sources_crc32": spec_sources_crc()},
                      indent=1, sort_keys=True) + "\n"


@functools.cache
def _compiled() -> dict[str, Any]:
    try:
        data = json.loads(COMPILED.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) and data.get("format") == COMPILED_FORMAT else {}


def _compiled_entry(section: dict[str, Any] | None, path: Path) -> dict[str, Any] | None:
    """``section`` (a compiled file's or the sheet's entry) when ``path``'s text still has its CRC, else None."""
    if not isinstance(section, dict) or not path.is_file():
        return None
    return section if section.get("crc32") == _crc(path) else None


def _sheet_devices() -> list[str]:
    entry = _compiled_entry(_compiled().get("sheet"), SPREADSHEET)
    if entry is not None:
        return list(entry["devices"])
    from layerscope.hardware.loaders import sheet_devices

    return sheet_devices(SPREADSHEET)


@functools.cache
def _index() -> dict[str, tuple[str, Path, str | None]]:
    """Lookup key → (preset name, file, spreadsheet column or None)."""
    index: dict[str, tuple[str, Path, str | None]] = {}
    for path in sorted(PRESET_DIR.glob("*.yaml")):
        index[_key(path.stem)] = (path.stem, path, None)
    if SPREADSHEET.is_file():
        for device in _sheet_devices():
            name = _canonical(device)
            if _key(name) in index:
                raise HardwareSpecError(f"{SPREADSHEET}: device {device!r} clashes with preset {name!r}")
            index[_key(name)] = (name, SPREADSHEET, device)
    return index


def preset_names() -> list[str]:
    """Names of the bundled presets, sorted."""
    return sorted(name for name, _, _ in _index().values())


@functools.cache
def _load(key: str) -> HardwareSpec:
    from layerscope.hardware.loaders import load_hardware_file
    from layerscope.units import note_input

    name, path, device = _index()[key]
    compiled = _compiled()
    entry = _compiled_entry(compiled.get("files", {}).get(path.name), path) if device is None else None
    if entry is not None and "spec" in entry and compiled.get("sources_crc32") == spec_sources_crc():
        note_input(path)
        spec = decode_spec(entry["spec"])
    else:
        spec = load_hardware_file(path, device)
    if device is None and spec.name != name:
        raise HardwareSpecError(f"{path}: name {spec.name!r} differs from the file name {name!r}")
    return spec


def find_preset(name: str) -> str | None:
    """The canonical preset name ``name`` stands for (case/dash-insensitive), or None."""
    entry = _index().get(_key(name))
    return None if entry is None else entry[0]


def load_preset(name: str) -> HardwareSpec:
    """The preset called ``name`` (case/dash-insensitive)."""
    key = _key(name)
    if key not in _index():
        raise HardwareSpecError(f"unknown hardware preset {name!r}; presets: {', '.join(preset_names())}")
    return _load(key)


def load_base_preset(source: str | Path) -> HardwareSpec:
    """What a table fit starts from: the hand-written base file of the preset ``source`` names, where it has
    one (every GPU preset), else the preset or spec file itself (``load_hardware``). Fitting a shipped GPU
    preset again would start from figures an earlier fit wrote."""
    from layerscope.hardware.loaders import load_hardware, load_hardware_file

    name = find_preset(str(source)) if not Path(source).is_file() else None
    base = BASE_DIR / f"{name}.yaml" if name is not None else None
    return load_hardware_file(base) if base is not None and base.is_file() else load_hardware(source)


def list_presets() -> dict[str, str]:
    """Preset name → one-line description, sorted by name."""
    return {name: load_preset(name).description for name in preset_names()}
