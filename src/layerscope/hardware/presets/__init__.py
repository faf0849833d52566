"""Bundled hardware presets: one YAML file per chip, plus the spreadsheet ``accelerators.csv``.

Presets are read lazily, on first use, and cached. Names are matched case- and
dash-insensitively (``h100-sxm`` = ``H100_SXM``). Each device column of ``accelerators.csv``
(``NVL-AX``, ``JGS``) is a preset too, so the CSV loader runs on shipped data.

``compiled.json`` holds every bundled YAML file already parsed, and the spreadsheet's device names, each with the
CRC-32 of the text it came from (``make presets`` writes it). A bundled preset is read from there when its file's
text still has that CRC, else from its YAML: a command that uses a preset never imports a YAML parser or reads the
spreadsheet (YAML parsing was a tenth of ``layerscope estimate``'s run), and an edited file is never shadowed by a
stale copy. ``tests/hardware/test_presets.py`` fails until ``make presets`` has been rerun after an edit.
"""

from __future__ import annotations

import functools
import json
import re
import zlib
from pathlib import Path
from typing import Any

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


def _crc(path: Path) -> int:
    return zlib.crc32(path.read_bytes())


def compiled_text() -> str:
    """What ``make presets`` writes to :data:`COMPILED`: each bundled YAML file's parsed mapping (a file whose
    mapping does not survive JSON unchanged is left out, and read from its YAML) and the spreadsheet's devices."""
    from layerscope.hardware.loaders import MAPPING_READERS, sheet_devices

    read_yaml = MAPPING_READERS.lookup(".yaml")  # the data the YAML loader turns into a spec, as the file reads
    files: dict[str, Any] = {}
    for path in sorted(PRESET_DIR.glob("*.yaml")):
        data = read_yaml(path)
        if json.loads(json.dumps(data)) == data:
            files[path.name] = {"crc32": _crc(path), "data": data}
    sheet = {"crc32": _crc(SPREADSHEET), "devices": sheet_devices(SPREADSHEET)} if SPREADSHEET.is_file() else None
    return json.dumps({"format": COMPILED_FORMAT, "files": files, "sheet": sheet}, indent=1, sort_keys=True) + "\n"


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
    from layerscope.hardware.loaders import load_hardware_file, spec_from_mapping
    from layerscope.units import note_input

    name, path, device = _index()[key]
    entry = _compiled_entry(_compiled().get("files", {}).get(path.name), path) if device is None else None
    if entry is None:
        spec = load_hardware_file(path, device)
    else:
        note_input(path)
        spec = spec_from_mapping(entry["data"], str(path), path)
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
