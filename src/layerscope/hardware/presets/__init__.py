"""Bundled hardware presets: one YAML file per chip, plus the spreadsheet ``accelerators.csv``.

Presets are read lazily, on first use, and cached. Names are matched case- and
dash-insensitively (``h100-sxm`` = ``H100_SXM``). Each device column of ``accelerators.csv``
(``NVL-AX``, ``JGS``) is a preset too, so the CSV loader runs on shipped data.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

from layerscope.errors import HardwareSpecError
from layerscope.hardware.spec import HardwareSpec

PRESET_DIR = Path(__file__).parent
SPREADSHEET = PRESET_DIR / "accelerators.csv"
#: The GPU presets' hand-written files (datasheet facts, comments, hand-set efficiencies): the shipped GPU presets
#: are these with their efficiencies fitted on the kernel table (``make presets``, :mod:`layerscope.app.presets`).
BASE_DIR = PRESET_DIR / "base"


def _key(name: str) -> str:
    """Lookup key of a preset name: lower case without separators (``H100_SXM`` → ``h100sxm``)."""
    return re.sub(r"[^0-9a-z]+", "", name.lower())


def _canonical(name: str) -> str:
    """Preset name of a spreadsheet column (``NVL-AX`` → ``nvl-ax``)."""
    return re.sub(r"[^0-9a-z]+", "-", name.lower()).strip("-")


def bundled_spreadsheet_example() -> Path:
    """Path of the shipped example spreadsheet (NVL-AX and JGS, one column each)."""
    return SPREADSHEET


@functools.cache
def _index() -> dict[str, tuple[str, Path, str | None]]:
    """Lookup key → (preset name, file, spreadsheet column or None)."""
    from layerscope.hardware.loaders import sheet_devices

    index: dict[str, tuple[str, Path, str | None]] = {}
    for path in sorted(PRESET_DIR.glob("*.yaml")):
        index[_key(path.stem)] = (path.stem, path, None)
    if SPREADSHEET.is_file():
        for device in sheet_devices(SPREADSHEET):
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

    name, path, device = _index()[key]
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
