"""Read and write hardware specs: YAML, JSON, and spreadsheet-style CSV/XLSX.

Loaders are registered by file suffix in :data:`LOADERS`; :func:`load_hardware` also takes a
preset name. YAML/JSON hold a :class:`HardwareSpec` as nested mappings (numbers may carry units
as strings, ``"3.35 TB/s"``, for fields whose name ends in ``_hz``, ``_bytes``, ``_bytes_per_s``,
``_flops_per_s`` or ``_s``).

Spreadsheets (CSV, XLSX) have one column per device and the row names in the first column
(the header row's first cell may be empty). Plain numbers are in base units, as the design
notebook's device sheet writes them (``examples/seed-hardware-sheet.csv``)::

    ,                   NVL-AX,         JGS
    Num_Cores,          32,             192
    Frequency,          2500000000.0,   1500000000.0
    MACs_per_cycle,     2048,           8192
    Bandwidth,          367219703808,   32985348833280
    L3_cache_capacity,  37748736,       125829120

The base unit of a row is the one its name says (:data:`SHEET_ROWS`, :data:`BASE_UNITS`): Hz
(``Frequency``), bytes (``*_capacity``), bytes/s (``Bandwidth``, ``*_bandwidth``), FLOP/s
(``*_flops``, ``Peak_flops_<dtype>``), MACs per cycle per core (``MACs_per_cycle``), seconds
(``Launch_overhead``, ``Interconnect_latency``), a fraction in (0, 1] (``*_efficiency``). A unit may
instead sit in the row name (``Frequency (GHz)``), in the cell (``2.5 GHz``) or in an optional
``Unit`` column; the cell's own unit wins. Decimal prefixes are powers of 1000 (``MB`` = 1e6
bytes), ``KiB``/``MiB``/``GiB`` powers of 1024. A plain number that is implausible in its base unit
(a clock below 1 MHz, a bandwidth or FLOP rate below 1e6 per second, a capacity below 1 KiB, an
overhead above 1 s: ``Bandwidth, 342`` meant as GB/s) is refused with a message saying so
(:data:`PLAIN_NUMBER_RANGE`). An optional ``Source`` column gives each row's citation. The known rows
are listed in :data:`SHEET_ROWS`; unknown rows are logged and ignored. What a sheet does not say is
filled with labelled assumptions (see :func:`spec_from_sheet_column`), each recorded in
``HardwareSpec.sources``.

What is read is bounded (:data:`MAX_TEXT_FILE_BYTES`, :data:`MAX_XLSX_UNPACKED_BYTES`,
:data:`MAX_SHEET_ROWS`, :data:`MAX_NESTING`, :data:`MAX_YAML_ALIAS_NODES`: a YAML alias bomb is refused
before it is expanded) and values quoted in errors are shortened
(:func:`layerscope.hardware.quantities.quote`).
"""

from __future__ import annotations

import contextlib
import csv
import functools
import io
import json
import logging
import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_args

from layerscope.errors import HardwareSpecError, WorkloadError
from layerscope.hardware.quantities import BASE_UNITS, Dimension, parse_quantity, split_number
from layerscope.hardware.spec import HardwareKind, HardwareSpec, MemoryLevel
from layerscope.registry import Registry
from layerscope.units import DType, atomic_write, note_input, parse_dtype, quote

logger = logging.getLogger(__name__)

#: Largest YAML/JSON/CSV hardware file read: presets are a few KB, a calibrated spec tens of KB.
MAX_TEXT_FILE_BYTES = 4 * 2**20
#: Largest XLSX file, and the most its zip members may unpack to (a zip bomb is refused unread).
MAX_XLSX_FILE_BYTES = 16 * 2**20
MAX_XLSX_UNPACKED_BYTES = 64 * 2**20
#: Most rows and device columns a spreadsheet may have.
MAX_SHEET_ROWS = 1000
MAX_SHEET_COLUMNS = 256
#: Deepest nesting of mappings/lists in a YAML/JSON spec (a spec nests 5 levels).
MAX_NESTING = 64
#: Most YAML values that aliases may stand for, expanded (a spec needs no alias at all; a few small
#: ones are let through, a "billion laughs" is not).
MAX_YAML_ALIAS_NODES = 10_000
#: Longest cell read as a number.
MAX_NUMBER_CHARS = 100

# -- spreadsheet model --------------------------------------------------------------------


@dataclass(frozen=True)
class SheetRowSpec:
    """A row a spreadsheet may have: its canonical name, dimension and accepted spellings."""

    name: str
    dimension: Dimension | None
    """None for text rows (``Description``, ``Kind``, ``MACs_dtype``)."""
    required: bool = False
    aliases: tuple[str, ...] = ()


SHEET_ROWS: tuple[SheetRowSpec, ...] = (
    SheetRowSpec("Description", None, aliases=("name_long", "device")),
    SheetRowSpec("Kind", None, aliases=("type", "device_kind")),
    SheetRowSpec("Num_Cores", "count", True, ("cores", "core_count", "num_engines", "engines", "num_sms",
                                               "sms", "num_cus", "cus")),
    SheetRowSpec("Frequency", "hz", True, ("clock", "clock_frequency", "clock_hz", "freq", "clock_rate")),
    SheetRowSpec("MACs_per_cycle", "count", aliases=("macs", "macs_per_cycle_per_core", "macs_per_core")),
    SheetRowSpec("MACs_dtype", None, aliases=("mac_dtype", "macs_data_type", "dtype")),
    SheetRowSpec("TF32_flops", "flops_per_s", aliases=("tf32_flops_per_s", "peak_flops_tf32")),
    SheetRowSpec("Vector_flops", "flops_per_s", aliases=("vector_flops_per_s", "fp32_vector_flops",
                                                         "simd_flops")),
    SheetRowSpec("Bandwidth", "bytes_per_s", True, ("memory_bandwidth", "dram_bandwidth", "hbm_bandwidth",
                                                    "mem_bandwidth", "main_memory_bandwidth")),
    SheetRowSpec("Memory_capacity", "bytes", aliases=("memory", "dram_capacity", "hbm_capacity",
                                                      "memory_size", "main_memory_capacity")),
    SheetRowSpec("Memory_type", None, aliases=("main_memory", "main_memory_type")),
    SheetRowSpec("L1_cache_capacity", "bytes", aliases=("l1_capacity", "l1", "sram_per_core",
                                                        "local_buffer_capacity")),
    SheetRowSpec("L2_cache_capacity", "bytes", aliases=("l2_capacity", "l2")),
    SheetRowSpec("L3_cache_capacity", "bytes", aliases=("l3_capacity", "l3", "llc_capacity")),
    SheetRowSpec("L2_bandwidth", "bytes_per_s", aliases=("l2_cache_bandwidth",)),
    SheetRowSpec("L3_bandwidth", "bytes_per_s", aliases=("l3_cache_bandwidth", "llc_bandwidth")),
    SheetRowSpec("Launch_overhead", "s", aliases=("kernel_launch_overhead", "launch_overhead_s",
                                                  "op_overhead")),
    SheetRowSpec("Matmul_efficiency", "fraction", aliases=("gemm_efficiency",)),
    SheetRowSpec("Vector_efficiency", "fraction"),
    SheetRowSpec("Memory_efficiency", "fraction", aliases=("bandwidth_efficiency",)),
    SheetRowSpec("Interconnect", None, aliases=("interconnect_name", "link")),
    SheetRowSpec("Interconnect_bandwidth", "bytes_per_s", aliases=("link_bandwidth",)),
    SheetRowSpec("Interconnect_latency", "s", aliases=("link_latency",)),
    SheetRowSpec("Vector_energy", "pj_per_flop", aliases=("vector_pj_per_flop",)),
    SheetRowSpec("Main_memory_energy", "pj_per_byte", aliases=("main_memory_pj_per_byte", "dram_energy",
                                                               "hbm_energy")),
    SheetRowSpec("Cache_energy", "pj_per_byte", aliases=("cache_pj_per_byte", "l2_energy", "llc_energy")),
    SheetRowSpec("SRAM_energy", "pj_per_byte", aliases=("sram_pj_per_byte", "l1_energy")),
    SheetRowSpec("Interconnect_energy", "pj_per_byte", aliases=("interconnect_pj_per_byte", "link_energy")),
    SheetRowSpec("Network_energy", "pj_per_byte", aliases=("network_pj_per_byte",)),
    SheetRowSpec("Idle_power", "w", aliases=("idle_power_w", "static_power")),
    SheetRowSpec("Board_power_limit", "w", aliases=("board_power_limit_w", "power_limit")),
)
"""Rows a spreadsheet may have. Also ``MACs_per_cycle_<dtype>`` (``MACs_per_cycle (fp8)``) and
``Peak_flops_<dtype>`` for per-dtype matrix throughput, and ``Matrix_energy_<dtype>`` (pJ per matrix FLOP).
The energy rows (``energy.*``, issue #30) are all or nothing: ``Vector_energy``, ``Main_memory_energy``,
``Idle_power`` and ``Board_power_limit`` are needed once any energy row is given."""


def _norm(text: str) -> str:
    """Row/preset/device key: lower case, runs of non-alphanumerics → ``_``."""
    return re.sub(r"[^0-9a-z%]+", "_", text.strip().lower()).strip("_")


_ROW_INDEX: dict[str, SheetRowSpec] = {
    _norm(alias): spec for spec in SHEET_ROWS for alias in (spec.name, *spec.aliases)
}
_DTYPE_ROWS: dict[str, Dimension] = {"macs_per_cycle": "count", "peak_flops": "flops_per_s",
                                     "matrix_energy": "pj_per_flop"}
_DTYPE_TITLES = {"macs_per_cycle": "MACs_per_cycle", "peak_flops": "Peak_flops", "matrix_energy": "Matrix_energy"}
#: The scalar energy rows → ``EnergySpec`` fields; the first four are required once any energy row is given.
_ENERGY_ROWS = (("Vector_energy", "vector_pj_per_flop"), ("Main_memory_energy", "main_memory_pj_per_byte"),
                ("Idle_power", "idle_power_w"), ("Board_power_limit", "board_power_limit_w"),
                ("Cache_energy", "cache_pj_per_byte"), ("SRAM_energy", "sram_pj_per_byte"),
                ("Interconnect_energy", "interconnect_pj_per_byte"), ("Network_energy", "network_pj_per_byte"))

_LABEL = re.compile(r"^(.*?)\s*[(\[]\s*([^)\]]*?)\s*[)\]]\s*$")
_UNIT_HEADERS = {"unit", "units"}
_SOURCE_HEADERS = {"source", "sources", "reference", "references", "citation", "notes", "note"}


@dataclass(frozen=True)
class Cell:
    """One cell: its raw value and where it is, for error messages."""

    value: Any
    ref: str
    """``sheet 'Sheet1' cell C4`` or ``line 4, column 3``."""


@dataclass
class SheetRow:
    """One named row of a spreadsheet."""

    label: str
    """The row name as written (``Frequency (GHz)``)."""
    spec: SheetRowSpec
    dtype: DType | None
    unit: str
    """Unit from the row name or the unit column ('' if none)."""
    source: str
    cells: dict[str, Cell] = field(default_factory=dict)


@dataclass
class Sheet:
    """A spreadsheet in the one-column-per-device layout, after header parsing."""

    origin: str
    devices: list[str]
    rows: dict[str, SheetRow]
    """Keyed by ``SheetRowSpec.name`` (plus ``_<dtype>`` for per-dtype rows)."""
    ignored: list[str] = field(default_factory=list)
    """A note per unknown row, logged once a spec is read from the sheet (a sheet that
    fails reports only its error)."""


def _row_spec(label: str, origin: str, ref: str) -> tuple[SheetRowSpec, DType | None, str] | None:
    """(row spec, dtype qualifier, unit in the name) for a row label, or None if unknown."""
    match = _LABEL.match(label)
    name, paren = (match.group(1), match.group(2)) if match else (label, "")
    dtype: DType | None = None
    unit = paren
    if paren:
        with contextlib.suppress(WorkloadError):  # "(fp8)" qualifies the dtype, "(GHz)" is a unit
            dtype, unit = parse_dtype(paren), ""
    key = _norm(name)
    if key in _ROW_INDEX and dtype is None:
        return _ROW_INDEX[key], None, unit
    for prefix, dimension in _DTYPE_ROWS.items():
        base = prefix if key == prefix else None
        suffix = key[len(prefix) + 1:] if key.startswith(prefix + "_") else ""
        if base is None and not suffix:
            continue
        if suffix:
            try:
                dtype = parse_dtype(suffix)
            except WorkloadError:
                known = ", ".join(d.value for d in DType)
                raise HardwareSpecError(
                    f"{origin}: {ref}: row {quote(label)} names unknown dtype {quote(suffix)}; known: {known}"
                ) from None
        if dtype is None:
            if prefix == "macs_per_cycle":
                return _ROW_INDEX["macs_per_cycle"], None, unit
            continue
        title = _DTYPE_TITLES[prefix]
        spec = SheetRowSpec(f"{title}_{dtype.value}", dimension)
        return spec, dtype, unit
    return None


def sheet_from_grid(grid: Sequence[Sequence[Any]], origin: str,
                    ref: Callable[[int, int], str]) -> Sheet:
    """Parse a grid of cell values (row-major, 0-based ``ref(row, col)`` names a cell)."""
    rows = [(i, list(r)) for i, r in enumerate(grid) if any(_text(v) for v in r)]
    if not rows:
        raise HardwareSpecError(f"{origin}: the sheet is empty")
    if len(rows) > MAX_SHEET_ROWS:
        raise HardwareSpecError(f"{origin}: {len(rows)} rows, more than the {MAX_SHEET_ROWS} a hardware sheet may have")
    header_index, header = rows[0]
    devices: dict[int, str] = {}
    unit_col = source_col = None
    for col, value in enumerate(header[1:], start=1):
        text = _text(value)
        if not text:
            continue
        if text.lower() in _UNIT_HEADERS:
            unit_col = col
        elif text.lower() in _SOURCE_HEADERS:
            source_col = col
        elif any(_norm(text) == _norm(d) for d in devices.values()):
            raise HardwareSpecError(
                f"{origin}: {ref(header_index, col)}: device column {quote(text)} appears twice"
            )
        else:
            devices[col] = text
    if len(devices) > MAX_SHEET_COLUMNS:
        raise HardwareSpecError(
            f"{origin}: {len(devices)} device columns, more than the {MAX_SHEET_COLUMNS} a hardware sheet may have"
        )
    if not devices:
        raise HardwareSpecError(
            f"{origin}: no device columns in the header row {quote([_text(v) for v in header])}; "
            "expected the row names in the first column and one column per device"
        )
    sheet = Sheet(origin, list(devices.values()), {})
    for index, values in rows[1:]:
        label = _text(values[0]) if values else ""
        if not label:
            raise HardwareSpecError(f"{origin}: {ref(index, 0)}: a row with values has no name")
        found = _row_spec(label, origin, ref(index, 0))
        if found is None:
            sheet.ignored.append(f"{ref(index, 0)}: ignoring unknown row {quote(label)}")
            continue
        spec, dtype, unit = found
        if unit_col is not None and unit_col < len(values) and _text(values[unit_col]):
            unit = unit or _text(values[unit_col])
        source = _text(values[source_col]) if source_col is not None and source_col < len(values) else ""
        row = SheetRow(label, spec, dtype, unit, source)
        for col, device in devices.items():
            value = values[col] if col < len(values) else None
            row.cells[device] = Cell(value, ref(index, col))
        if spec.name in sheet.rows:
            raise HardwareSpecError(
                f"{origin}: {ref(index, 0)}: row {quote(label)} repeats row {quote(sheet.rows[spec.name].label)}"
            )
        sheet.rows[spec.name] = row
    return sheet


def _text(value: Any) -> str:
    return "" if value is None else str(value).strip()


def pick_device(sheet: Sheet, device: str | None) -> str:
    """The device column named ``device`` (case/dash-insensitive), or the only one."""
    columns = ", ".join(quote(d) for d in sheet.devices)
    if device is None:
        if len(sheet.devices) == 1:
            return sheet.devices[0]
        raise HardwareSpecError(
            f"{sheet.origin}: the sheet has several devices; pick one of: {columns} (--device-column)"
        )
    for name in sheet.devices:
        if _norm(name) == _norm(device):
            return name
    raise HardwareSpecError(f"{sheet.origin}: no device column {quote(device)}; columns: {columns}")


class _Column:
    """Typed access to one device column of a sheet, raising errors that name the cell."""

    def __init__(self, sheet: Sheet, device: str) -> None:
        self.sheet = sheet
        self.device = device
        self.sources: dict[str, str] = {}

    def _where(self, row: SheetRow) -> str:
        cell = row.cells[self.device]
        return f"{self.sheet.origin}: {cell.ref} (row {quote(row.label)}, column {quote(self.device)})"

    def has(self, name: str) -> bool:
        row = self.sheet.rows.get(name)
        return row is not None and bool(_text(row.cells[self.device].value))

    def missing(self, name: str) -> HardwareSpecError:
        if name in self.sheet.rows:
            return HardwareSpecError(f"{self._where(self.sheet.rows[name])}: required value is empty")
        return HardwareSpecError(
            f"{self.sheet.origin}: missing required row {name!r} (device {quote(self.device)}); "
            f"rows present: {', '.join(quote(r.label) for r in self.sheet.rows.values()) or 'none'}"
        )

    def number(self, name: str, field_path: str) -> float:
        """The row's value in this column, in the base unit of its dimension; a finite number, > 0
        (>= 0 for times, in (0, 1] for fractions), and plausible when written without a unit."""
        row = self.sheet.rows[name]
        cell = row.cells[self.device]
        dimension = row.spec.dimension
        assert dimension is not None, name
        if isinstance(cell.value, str) and len(cell.value) > MAX_NUMBER_CHARS:
            raise HardwareSpecError(
                f"{self._where(row)}: {quote(cell.value)} is {len(cell.value)} characters long, not a number"
            )
        try:
            if isinstance(cell.value, str | bool):
                value = parse_quantity(cell.value, dimension, row.unit)
            else:
                value = parse_quantity(float(cell.value), dimension, row.unit)
        except (TypeError, ValueError) as exc:
            raise HardwareSpecError(f"{self._where(row)}: {exc}") from None
        if dimension == "fraction":
            if not 0 < value <= 1:
                raise HardwareSpecError(f"{self._where(row)}: {quote(cell.value)} must be in (0, 1] (or 0–100 %)")
        elif dimension in ("s", "pj_per_flop", "pj_per_byte"):
            if not value >= 0:
                raise HardwareSpecError(f"{self._where(row)}: {quote(cell.value)} must be a finite number >= 0")
        elif not value > 0:
            raise HardwareSpecError(f"{self._where(row)}: {quote(cell.value)} must be a finite number > 0")
        if _is_plain(cell.value) and not row.unit:
            self._check_plausible(row, value)
        where = f"{self.sheet.origin}: row {quote(row.label)}, column {quote(self.device)}"
        self.sources[field_path] = row.source or where
        return value

    def _check_plausible(self, row: SheetRow, value: float) -> None:
        """Refuse a plain number that is implausible in its base unit (a unit was left out)."""
        assert row.spec.dimension is not None
        bounds = PLAIN_NUMBER_RANGE.get(row.spec.dimension)
        if bounds is None or bounds[0] <= value <= bounds[1]:
            return
        unit = BASE_UNITS[row.spec.dimension]
        low, high = bounds
        raise HardwareSpecError(
            f"{self._where(row)}: a plain number is in base units, so {quote(row.cells[self.device].value)} is "
            f"{value:g} {unit}, outside the plausible {low:g}–{high:g} {unit}; write the unit in the cell "
            f"or the row name (e.g. '{_PLAIN_EXAMPLE[row.spec.dimension]}')"
        )

    def text(self, name: str) -> str:
        return _text(self.sheet.rows[name].cells[self.device].value)

    def rows_by_dtype(self, prefix: str) -> list[SheetRow]:
        return [r for r in self.sheet.rows.values() if r.dtype is not None and r.spec.name.startswith(prefix)]


PLAIN_NUMBER_RANGE: dict[Dimension, tuple[float, float]] = {
    "hz": (1e6, 1e12),
    "bytes": (1024.0, 1e18),
    "bytes_per_s": (1e6, 1e18),
    "flops_per_s": (1e6, 1e21),
    "s": (0.0, 1.0),
    "pj_per_flop": (0.0, 1e3),
    "pj_per_byte": (0.0, 1e5),
    "w": (1.0, 1e5),
}
"""Per dimension, the range a number written without any unit must fall in (base units); outside
it the unit was almost surely left out (``Frequency, 2.5`` meant as GHz)."""
_PLAIN_EXAMPLE: dict[Dimension, str] = {
    "hz": "2.5 GHz", "bytes": "36 MiB", "bytes_per_s": "342 GB/s", "flops_per_s": "300 TFLOP/s", "s": "4 us",
    "pj_per_flop": "0.7 pJ/FLOP", "pj_per_byte": "3.9 pJ/bit", "w": "700 W",
}


def _is_plain(value: Any) -> bool:
    """Whether a cell holds a number without a unit of its own (``2500000000.0``, ``"2.5e9"``)."""
    if not isinstance(value, str):
        return True
    split = split_number(value)
    return split is not None and not split[1].strip()


# Assumptions for figures a sheet leaves out; each one is recorded as the field's source.
_DEFAULT_MACS_DTYPE = DType.FP16
_VECTOR_FRACTION = 1.0 / 16.0
_VECTOR_ASSUMPTION = (
    "assumption: no Vector_flops row; 1/16 of the 16-bit matrix peak, the A100 ratio of FP32 "
    "non-tensor to dense BF16 (19.5/312, hardware-specs.md S5)"
)


def spec_from_sheet_column(sheet: Sheet, device: str) -> HardwareSpec:
    """Build the :class:`HardwareSpec` of one device column.

    Required rows: ``Num_Cores``, ``Frequency``, ``Bandwidth`` and either ``MACs_per_cycle`` or a
    ``Peak_flops_<dtype>`` row. Assumed when absent (and said so in ``sources``): MACs are fp16
    (``MACs_dtype``); ``Vector_flops`` = 1/16 of the 16-bit matrix peak; no launch overhead; ideal
    efficiencies; unknown main-memory capacity (``inf``).
    """
    col = _Column(sheet, device)
    for required in (r.name for r in SHEET_ROWS if r.required):
        if not col.has(required):
            raise col.missing(required)
    count_f = col.number("Num_Cores", "engines.count")
    if count_f != int(count_f) or count_f < 1:
        row = sheet.rows["Num_Cores"]
        raise HardwareSpecError(f"{col._where(row)}: {quote(row.cells[device].value)} must be a whole number >= 1")
    count = int(count_f)
    clock_hz = col.number("Frequency", "engines.clock_hz")

    macs: dict[DType, float] = {}
    if col.has("MACs_per_cycle"):
        macs_dtype = _DEFAULT_MACS_DTYPE
        if col.has("MACs_dtype"):
            row = sheet.rows["MACs_dtype"]
            try:
                macs_dtype = parse_dtype(col.text("MACs_dtype"))
            except WorkloadError as exc:
                raise HardwareSpecError(f"{col._where(row)}: {exc}") from None
        else:
            col.sources["engines.macs_dtype"] = "assumption: no MACs_dtype row; MACs_per_cycle taken as fp16"
        macs[macs_dtype] = col.number("MACs_per_cycle", f"engines.macs_per_cycle.{macs_dtype.value}")
    for row in col.rows_by_dtype("MACs_per_cycle_"):
        if col.has(row.spec.name):
            assert row.dtype is not None
            macs[row.dtype] = col.number(row.spec.name, f"engines.macs_per_cycle.{row.dtype.value}")
    peaks: dict[DType, float] = {}
    for row in col.rows_by_dtype("Peak_flops_"):
        if col.has(row.spec.name):
            assert row.dtype is not None
            peaks[row.dtype] = col.number(row.spec.name, f"engines.peak_flops_per_s.{row.dtype.value}")
    for dtype in macs:
        path = f"engines.peak_flops_per_s.{dtype.value}"
        if dtype not in peaks:
            macs_source = col.sources[f"engines.macs_per_cycle.{dtype.value}"]
            col.sources[path] = f"derived: Num_Cores x Frequency x 2 x MACs_per_cycle ({macs_source})"
    if not macs and not peaks:
        raise HardwareSpecError(
            f"{sheet.origin}: device {quote(device)} needs a MACs_per_cycle or Peak_flops_<dtype> row; "
            f"rows present: {', '.join(quote(r.label) for r in sheet.rows.values())}"
        )

    if col.has("Vector_flops"):
        vector = col.number("Vector_flops", "engines.vector_flops_per_s")
    else:
        vector = _VECTOR_FRACTION * _sixteen_bit_peak(count, clock_hz, macs, peaks)
        col.sources["engines.vector_flops_per_s"] = _VECTOR_ASSUMPTION
        logger.info("%s: %s: %s", sheet.origin, device, _VECTOR_ASSUMPTION)
    engines: dict[str, Any] = {"count": count, "clock_hz": clock_hz, "macs_per_cycle": macs,
                               "peak_flops_per_s": peaks, "vector_flops_per_s": vector}
    if col.has("TF32_flops"):
        engines["tf32_flops_per_s"] = col.number("TF32_flops", "engines.tf32_flops_per_s")

    memory: list[dict[str, Any]] = []
    for level, capacity_row, bandwidth_row, per_engine in (
        ("l1", "L1_cache_capacity", None, True),
        ("l2", "L2_cache_capacity", "L2_bandwidth", False),
        ("l3", "L3_cache_capacity", "L3_bandwidth", False),
    ):
        if not col.has(capacity_row):
            continue
        entry: dict[str, Any] = {"name": level, "per_engine": per_engine,
                                 "capacity_bytes": col.number(capacity_row, f"memory.{level}.capacity_bytes")}
        if bandwidth_row and col.has(bandwidth_row):
            entry["bandwidth_bytes_per_s"] = col.number(
                bandwidth_row, f"memory.{level}.bandwidth_bytes_per_s"
            )
        memory.append(entry)
    main = _norm(col.text("Memory_type")) if col.has("Memory_type") else "dram"
    if col.has("Memory_capacity"):
        capacity = col.number("Memory_capacity", f"memory.{main}.capacity_bytes")
    else:
        capacity = math.inf
        col.sources[f"memory.{main}.capacity_bytes"] = "not given in the sheet (Memory_capacity); unbounded"
    memory.append({"name": main, "capacity_bytes": capacity,
                   "bandwidth_bytes_per_s": col.number("Bandwidth", f"memory.{main}.bandwidth_bytes_per_s")})

    if col.has("Launch_overhead"):
        launch_overhead_s = col.number("Launch_overhead", "launch_overhead_s")
    else:
        launch_overhead_s = 0.0
        col.sources["launch_overhead_s"] = "assumption: no Launch_overhead row; no per-op launch cost"

    efficiency: dict[str, Any] = {}
    for key, row_name in (("matmul", "Matmul_efficiency"), ("vector", "Vector_efficiency"),
                          ("memory", "Memory_efficiency")):
        if col.has(row_name):
            efficiency[key] = col.number(row_name, f"efficiency.{key}")
            efficiency[f"{key}_source"] = col.sources.pop(f"efficiency.{key}")

    interconnect = None
    if col.has("Interconnect_bandwidth"):
        interconnect = {
            "name": col.text("Interconnect") if col.has("Interconnect") else "interconnect",
            "bandwidth_bytes_per_s": col.number(
                "Interconnect_bandwidth", "interconnect.bandwidth_bytes_per_s"
            ),
            "latency_s": col.number("Interconnect_latency", "interconnect.latency_s")
            if col.has("Interconnect_latency") else 0.0,
        }
    data = {
        "energy": _sheet_energy(col),
        "name": device,
        "description": (
            col.text("Description") if col.has("Description")
            else f"{device} (from {Path(sheet.origin).name})"
        ),
        "kind": _kind(col) if col.has("Kind") else "accelerator",
        "engines": engines,
        "memory": memory,
        "interconnect": interconnect,
        "launch_overhead_s": launch_overhead_s,
        "efficiency": efficiency,
        "sources": col.sources,
    }
    return HardwareSpec.from_dict(data, origin=f"{sheet.origin}, column {quote(device)}")


def _sheet_energy(col: _Column) -> dict[str, Any] | None:
    """The column's ``energy`` block, or None when it has no energy row."""
    matrix = {row.dtype.value: col.number(row.spec.name, f"energy.matrix_pj_per_flop.{row.dtype.value}")
              for row in col.rows_by_dtype("Matrix_energy_") if row.dtype is not None and col.has(row.spec.name)}
    given = [name for name, _ in _ENERGY_ROWS if col.has(name)]
    if not matrix and not given:
        return None
    missing = [name for name, _ in _ENERGY_ROWS[:4] if not col.has(name)]
    if missing:
        raise HardwareSpecError(f"{col.sheet.origin}, column {quote(col.device)}: energy rows given but not "
                                f"{', '.join(missing)}; an energy block needs all four")
    energy: dict[str, Any] = {"matrix_pj_per_flop": matrix}
    for name, key in _ENERGY_ROWS:
        if col.has(name):
            energy[key] = col.number(name, f"energy.{key}")
    return energy


def _kind(col: _Column) -> str:
    kind = col.text("Kind").lower()
    allowed = get_args(HardwareKind)
    if kind not in allowed:
        raise HardwareSpecError(f"{col._where(col.sheet.rows['Kind'])}: kind {quote(kind)} not one of {allowed}")
    return kind


def _sixteen_bit_peak(
    count: int, clock_hz: float, macs: dict[DType, float], peaks: dict[DType, float]
) -> float:
    """The fp16/bf16 matrix peak (else the widest listed) for the vector-rate assumption."""
    derived = {d: count * clock_hz * 2.0 * m for d, m in macs.items()}
    merged = {**derived, **peaks}
    for dtype in (DType.FP16, DType.BF16, DType.FP32, DType.FP8, DType.INT8, DType.FP4, DType.INT4):
        if dtype in merged:
            return merged[dtype]
    raise AssertionError("caller checked that a matrix peak exists")


# -- readers ------------------------------------------------------------------------------


def _read_bytes(path: Path, limit: int) -> bytes:
    """The file's bytes, refusing one larger than ``limit``."""
    try:
        with path.open("rb") as handle:
            data = handle.read(limit + 1)
    except OSError as exc:
        raise HardwareSpecError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if len(data) > limit:
        raise HardwareSpecError(
            f"{path}: larger than {limit // 2**20} MiB, the most a hardware file may be; is this a hardware spec?"
        )
    return data


def _read_text(path: Path) -> str:
    """The file as UTF-8 text (a byte-order mark is dropped), at most :data:`MAX_TEXT_FILE_BYTES`."""
    data = _read_bytes(path, MAX_TEXT_FILE_BYTES)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise HardwareSpecError(
            f"{path}: not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start}); "
            "save it as UTF-8 (spreadsheets: 'CSV UTF-8')"
        ) from None


Grid = tuple[list[list[Any]], Callable[[int, int], str]]
"""A spreadsheet's cell values (row-major) and the name of a cell by its 0-based (row, column)."""


def _csv_grid(path: Path) -> Grid:
    text = _read_text(path)
    try:
        grid = list(csv.reader(io.StringIO(text)))
    except csv.Error as exc:
        raise HardwareSpecError(f"{path}: not a readable CSV sheet: {exc}") from None
    return grid, lambda r, c: f"line {r + 1}, column {c + 1}"


def _csv_sheet(path: Path) -> Sheet:
    return sheet_from_grid(*_read_grid(path))


def _check_xlsx_package(path: Path) -> None:
    """Refuse an XLSX that is too large, not a zip, or that unpacks to more than
    :data:`MAX_XLSX_UNPACKED_BYTES` (a zip bomb), before openpyxl reads it."""
    import zipfile  # deferred, as every spreadsheet-only module: a YAML or preset spec never needs it

    data = _read_bytes(path, MAX_XLSX_FILE_BYTES)
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as package:
            unpacked = sum(member.file_size for member in package.infolist())
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, EOFError) as exc:
        raise HardwareSpecError(f"{path}: cannot read as XLSX (not a zip package: {exc})") from None
    if unpacked > MAX_XLSX_UNPACKED_BYTES:
        raise HardwareSpecError(
            f"{path}: unpacks to {unpacked / 2**20:.0f} MiB, more than the "
            f"{MAX_XLSX_UNPACKED_BYTES // 2**20} MiB a hardware sheet may"
        )


def _xlsx_errors() -> tuple[type[BaseException], ...]:
    """What openpyxl raises on a zip that is not a well-formed workbook: it reports a malformed package with
    whatever its XML or zip layer hit."""
    import zipfile
    import zlib
    from xml.etree.ElementTree import ParseError

    return (OSError, zipfile.BadZipFile, KeyError, ValueError, TypeError, IndexError, AttributeError, ParseError,
            zlib.error, EOFError)


def _xlsx_grid(path: Path) -> Grid:
    import openpyxl  # deferred: openpyxl is slow to import and only spreadsheets need it
    from openpyxl.utils import get_column_letter
    from openpyxl.utils.exceptions import InvalidFileException

    _check_xlsx_package(path)
    try:
        workbook = openpyxl.load_workbook(path, read_only=True, data_only=True)
        try:
            if not workbook.worksheets:
                raise HardwareSpecError(f"{path}: the workbook has no worksheet")
            worksheet = workbook.worksheets[0]
            title = worksheet.title
            # One row and column beyond the limits, so that sheet_from_grid sees a sheet is too big;
            # the declared dimension of a sheet is not trusted (a crafted one pads every row).
            grid = [list(row) for row in worksheet.iter_rows(
                max_row=MAX_SHEET_ROWS + 1, max_col=MAX_SHEET_COLUMNS + 2, values_only=True)]
        finally:
            workbook.close()
    except (InvalidFileException, *_xlsx_errors()) as exc:
        raise HardwareSpecError(f"{path}: cannot read as XLSX: {quote(str(exc))}") from None
    return grid, lambda r, c: f"sheet {quote(title)} cell {get_column_letter(c + 1)}{r + 1}"


def _xlsx_sheet(path: Path) -> Sheet:
    return sheet_from_grid(*_read_grid(path))


def _read_grid(path: Path) -> tuple[list[list[Any]], str, Callable[[int, int], str]]:
    """(cells, origin, cell namer) of a CSV or XLSX file."""
    grid, ref = _xlsx_grid(path) if path.suffix.lower() in (".xlsx", ".xlsm") else _csv_grid(path)
    return grid, str(path), ref


#: First-column labels that make a spreadsheet a cluster's (its rows are the dotted fields of a cluster mapping:
#: ``nodes``, ``gpus_per_node``, ``gpu``, ``fabric.bandwidth_bytes_per_s`` …) rather than a chip's.
CLUSTER_SHEET_KEYS = frozenset({"nodes", "gpus_per_node"})


def _sheet_rows(grid: list[list[Any]]) -> list[list[Any]]:
    return [list(r) for r in grid if any(_text(v) for v in r)]


def is_cluster_sheet(path: Path) -> bool:
    """A CSV/XLSX whose first column names ``nodes`` or ``gpus_per_node``: a cluster (``hardware.cluster``)."""
    grid, _, _ = _read_grid(path)
    return any(_text(r[0]) in CLUSTER_SHEET_KEYS for r in _sheet_rows(grid)[1:] if r)


def sheet_mapping(path: Path, column: str | None = None) -> dict[str, Any]:
    """The nested mapping of one column of a field-per-row spreadsheet (a cluster's): the first column holds dotted
    field names (``fabric.latency_s``), the header row the column names (a column's name is its ``name`` unless a
    ``name`` row gives one), a ``source`` column a citation per row (into ``sources``); ``column`` picks a column
    (default: the only one). Cells with units convert as in YAML
    files; ``true``/``false`` and numbers are read as such."""
    grid, origin, ref = _read_grid(path)
    rows = _sheet_rows(grid)
    if len(rows) < 2:
        raise HardwareSpecError(f"{origin}: the sheet has no field rows under its header")
    if len(rows) > MAX_SHEET_ROWS:
        raise HardwareSpecError(f"{origin}: {len(rows)} rows, more than the {MAX_SHEET_ROWS} a hardware sheet may have")
    header = rows[0]
    columns = {i: _text(v) for i, v in enumerate(header) if i > 0 and _text(v)}
    source_col = next((i for i, name in columns.items() if name.lower() in _SOURCE_HEADERS), None)
    named = {i: name for i, name in columns.items() if i != source_col and name.lower() not in _UNIT_HEADERS}
    if not named:
        raise HardwareSpecError(f"{origin}: no value column in the header row {quote([_text(v) for v in header])}")
    if column is None:
        if len(named) > 1:
            raise HardwareSpecError(f"{origin}: {len(named)} columns ({', '.join(named.values())}); pick one")
        col = next(iter(named))
    else:
        found = [i for i, name in named.items() if _norm(name) == _norm(column)]
        if not found:
            raise HardwareSpecError(f"{origin}: no column {quote(column)}; columns: {', '.join(named.values())}")
        col = found[0]
    data: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for index, values in enumerate(rows[1:], start=1):
        key = _text(values[0])
        value = values[col] if col < len(values) else None
        if not key or _text(value) == "":
            continue
        parts = key.split(".")
        node = data
        for part in parts[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise HardwareSpecError(f"{origin}: {ref(index, 0)}: field {quote(key)} nests under a value")
            node = child
        if parts[-1] in node:
            raise HardwareSpecError(f"{origin}: {ref(index, 0)}: field {quote(key)} appears twice")
        node[parts[-1]] = _cell_value(value)
        if source_col is not None and source_col < len(values) and _text(values[source_col]):
            sources[key] = _text(values[source_col])
    if sources:
        data.setdefault("sources", {}).update(sources)
    data.setdefault("name", named[col])  # the column names what it describes, as a chip sheet's device column does
    converted: dict[str, Any] = _with_units(data, "", origin, "")
    return converted


def _cell_value(value: Any) -> Any:
    """A cell as YAML would read it: booleans, integers and floats from their text, other text as it is."""
    if not isinstance(value, str):
        return value
    text = value.strip()
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


_SUFFIXES = ("_hz", "_bytes", "_bytes_per_s", "_flops_per_s", "_s")
_DIMENSION_BY_SUFFIX: dict[str, Dimension] = {
    "_bytes_per_s": "bytes_per_s", "_flops_per_s": "flops_per_s", "_hz": "hz", "_bytes": "bytes", "_s": "s",
}


def _with_units(value: Any, key: str, origin: str, path: str) -> Any:
    """Convert strings with units (``"3.35 TB/s"``) under unit-named keys to base-unit floats."""
    if isinstance(value, dict):
        inherit = key.endswith(_SUFFIXES)  # {bf16: "989 TFLOP/s"} under peak_flops_per_s
        return {k: v if str(k) == "sources" else
                _with_units(v, key if inherit else str(k), origin, f"{path}.{k}" if path else str(k))
                for k, v in value.items()}
    if isinstance(value, list):
        return [_with_units(v, key, origin, f"{path}.{i}") for i, v in enumerate(value)]
    if isinstance(value, str) and key.endswith(_SUFFIXES):
        dimension = next(d for s, d in _DIMENSION_BY_SUFFIX.items() if key.endswith(s))
        try:
            return parse_quantity(value, dimension)
        except ValueError as exc:
            raise HardwareSpecError(f"{origin}: field {quote(path)}: {exc}") from None
    return value


def is_cluster_mapping(data: Any) -> bool:
    """True for a mapping that describes a cluster: a top-level ``cluster:`` mapping, or ``nodes`` or
    ``gpus_per_node`` among its keys (a chip's spec has neither)."""
    if not isinstance(data, dict):
        return False
    return isinstance(data.get("cluster"), dict) or "nodes" in data or "gpus_per_node" in data


def spec_from_mapping(data: Any, origin: str, file: Path | None = None) -> HardwareSpec:
    """The spec a YAML/JSON mapping holds; a cluster's (``hardware.cluster``) is its one GPU, ``device_spec()``."""
    if not isinstance(data, dict):
        raise HardwareSpecError(
            f"{origin}: expected a mapping of HardwareSpec fields, got {type(data).__name__}"
        )
    if is_cluster_mapping(data):
        from layerscope.hardware.cluster import cluster_from_mapping  # only for a cluster's file

        return cluster_from_mapping(_with_units(data, "", origin, ""), file or Path(origin)).device_spec()
    return HardwareSpec.from_dict(_with_units(data, "", origin, ""), origin=origin)


def _check_yaml_events(events: Iterable[Any], origin: str) -> None:
    """Refuse YAML nested deeper than :data:`MAX_NESTING`, with a recursive alias, or whose aliases
    stand for more than :data:`MAX_YAML_ALIAS_NODES` values in all, expanded ("billion laughs"), from
    the event stream, before anything is built."""
    import yaml

    expanded: dict[str, int] = {}  # anchor -> nodes of the anchored value, aliases expanded
    open_anchors: set[str] = set()
    stack: list[tuple[str | None, list[int]]] = []  # open collections: (anchor, [nodes so far])
    total = 0
    for event in events:
        if isinstance(event, yaml.CollectionStartEvent):
            if len(stack) >= MAX_NESTING:
                raise HardwareSpecError(f"{origin}: nested deeper than {MAX_NESTING} levels")
            stack.append((event.anchor, [1]))
            if event.anchor:
                open_anchors.add(event.anchor)
            continue
        if isinstance(event, yaml.CollectionEndEvent):
            anchor, (nodes,) = stack.pop()
            if anchor:
                expanded[anchor] = nodes
                open_anchors.discard(anchor)
        elif isinstance(event, yaml.ScalarEvent):
            nodes = 1
            if event.anchor:
                expanded[event.anchor] = 1
        elif isinstance(event, yaml.AliasEvent):
            anchor = event.anchor or ""
            if anchor in open_anchors:
                raise HardwareSpecError(f"{origin}: alias {quote(anchor)} refers to a value that contains it")
            nodes = expanded.get(anchor, 1)  # an undefined anchor is the composer's error
            total += nodes
            if total > MAX_YAML_ALIAS_NODES:
                raise HardwareSpecError(
                    f"{origin}: aliases expand to more than {MAX_YAML_ALIAS_NODES} values; a hardware spec "
                    "needs none (a YAML alias bomb?)"
                )
        else:
            continue
        if stack:
            stack[-1][1][0] += nodes


def _yaml_data(path: Path) -> Any:
    import yaml

    text = _read_text(path)
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        _check_yaml_events(yaml.parse(text, Loader=loader), str(path))
        return yaml.load(text, Loader=loader)  # a safe loader, checked above
    except yaml.YAMLError as exc:
        raise HardwareSpecError(f"{path}: invalid YAML: {exc}") from None


def _load_yaml(path: Path, device: str | None) -> HardwareSpec:
    _refuse_device(path, device)
    return spec_from_mapping(_yaml_data(path), str(path), path)


def _check_nesting(data: Any, origin: str) -> None:
    """Refuse data nested deeper than :data:`MAX_NESTING` (walked without recursion)."""
    pending: list[tuple[Any, int]] = [(data, 0)]
    while pending:
        value, depth = pending.pop()
        if isinstance(value, dict | list):
            if depth >= MAX_NESTING:
                raise HardwareSpecError(f"{origin}: nested deeper than {MAX_NESTING} levels")
            children = value.values() if isinstance(value, dict) else value
            pending.extend((child, depth + 1) for child in children)


def _json_data(path: Path) -> Any:
    text = _read_text(path)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise HardwareSpecError(f"{path}: invalid JSON: {exc}") from None
    except RecursionError:
        raise HardwareSpecError(f"{path}: nested deeper than {MAX_NESTING} levels") from None
    _check_nesting(data, str(path))
    return data


def _load_json(path: Path, device: str | None) -> HardwareSpec:
    _refuse_device(path, device)
    return spec_from_mapping(_json_data(path), str(path), path)


def _sheet_spec(sheet: Sheet, device: str | None) -> HardwareSpec:
    """The spec of the picked column; the unknown rows are logged once it is read."""
    spec = spec_from_sheet_column(sheet, pick_device(sheet, device))
    for row in sheet.ignored:
        logger.warning("%s: %s", sheet.origin, row)
    return spec


def _load_sheet(path: Path, device: str | None) -> HardwareSpec:
    """A chip's column of a spreadsheet, or a cluster sheet's column (its GPU, the cluster's links merged in)."""
    if is_cluster_sheet(path):
        from layerscope.hardware.cluster import cluster_from_mapping

        return cluster_from_mapping(sheet_mapping(path, device), path).device_spec()
    return _sheet_spec(sheet_from_grid(*_read_grid(path)), device)


def _refuse_device(source: str | Path, device: str | None) -> None:
    """A device column only picks a column of a spreadsheet; refuse one given for anything else."""
    if device is not None:
        raise HardwareSpecError(
            f"{source}: a device column ({quote(device)}) picks a column of a spreadsheet "
            f"({', '.join(sorted(SHEET_READERS))}); this is not one"
        )


Loader = Callable[[Path, str | None], HardwareSpec]

LOADERS: Registry[Loader] = Registry("hardware file type", HardwareSpecError, {
    ".yaml": _load_yaml,
    ".yml": _load_yaml,
    ".json": _load_json,
    ".csv": _load_sheet,
    ".xlsx": _load_sheet,
    ".xlsm": _load_sheet,
})
"""File suffix → loader ``(path, device) -> HardwareSpec``; ``device`` picks a spreadsheet column
(and is refused for YAML/JSON)."""

MAPPING_READERS: Registry[Callable[[Path], Any]] = Registry("mapping file type", HardwareSpecError, {
    ".yaml": _yaml_data,
    ".yml": _yaml_data,
    ".json": _json_data,
})
"""File suffix → reader of the nested mapping a YAML/JSON file holds (bounded as :data:`LOADERS`' are), for files
that hold a mapping other than a chip's: a cluster (:func:`layerscope.hardware.cluster.load_cluster`)."""


def read_mapping(path: Path) -> dict[str, Any]:
    """The mapping a YAML/JSON file holds, unit strings converted to base-unit numbers (:func:`_with_units`)."""
    try:
        reader = MAPPING_READERS.lookup(path.suffix.lower())
    except HardwareSpecError as exc:
        raise HardwareSpecError(f"{path}: {exc}") from None
    _check_is_file(path)
    data = reader(path)
    if not isinstance(data, dict):
        raise HardwareSpecError(f"{path}: expected a mapping, got {type(data).__name__}")
    converted: dict[str, Any] = _with_units(data, "", str(path), "")
    return converted


SHEET_READERS: Registry[Callable[[Path], Sheet]] = Registry("spreadsheet type", HardwareSpecError, {
    ".csv": _csv_sheet,
    ".xlsx": _xlsx_sheet,
    ".xlsm": _xlsx_sheet,
})
"""Spreadsheet suffix → reader, for listing the devices of a sheet."""


def _check_is_file(file: Path) -> None:
    if file.is_dir():
        raise HardwareSpecError(f"{file}: is a directory; give a hardware file ({', '.join(sorted(LOADERS))}) "
                                "or a preset name")
    if not file.exists():
        raise HardwareSpecError(f"{file}: no such file")
    if not file.is_file():
        raise HardwareSpecError(f"{file}: not a regular file")


def load_hardware_file(path: str | Path, device: str | None = None) -> HardwareSpec:
    """Load a spec file by its suffix (see :data:`LOADERS`)."""
    file = Path(path)
    note_input(file)
    try:
        loader = LOADERS.lookup(file.suffix.lower())
    except HardwareSpecError as exc:
        if file.is_dir():
            _check_is_file(file)
        raise HardwareSpecError(f"{file}: {exc}") from None
    _check_is_file(file)
    return loader(file, device)


def sheet_devices(path: str | Path) -> list[str]:
    """The device columns of a CSV/XLSX spreadsheet."""
    file = Path(path)
    try:
        reader = SHEET_READERS.lookup(file.suffix.lower())
    except HardwareSpecError as exc:
        raise HardwareSpecError(f"{file}: not a spreadsheet: {exc}") from None
    _check_is_file(file)
    return reader(file).devices


def load_hardware(source: str | Path, device: str | None = None) -> HardwareSpec:
    """A :class:`HardwareSpec` from a preset name (``h100-sxm``, ``H100_SXM``) or a file.

    A path that exists, or that ends in a known suffix, is read as a file; anything else is
    looked up among the presets (:func:`layerscope.hardware.presets.list_presets`), then among the
    cluster presets (a cluster stands for its one GPU: :meth:`~layerscope.hardware.cluster.ClusterSpec.device_spec`).
    ``device`` picks the column of a multi-device spreadsheet (and is refused for anything else).
    """
    from layerscope.hardware.presets import find_preset, load_preset, preset_names

    path = Path(source)
    if path.suffix.lower() in LOADERS:
        return load_hardware_file(path, device)
    preset = find_preset(str(source))
    if preset is not None:
        _refuse_device(f"preset {preset!r}", device)
        return load_preset(preset)
    from layerscope.hardware.cluster import cluster_names, find_cluster, load_cluster  # only when not a preset

    cluster = find_cluster(str(source))
    if cluster is not None:
        _refuse_device(f"cluster {cluster!r}", device)
        return load_cluster(cluster).device_spec()
    if path.exists():
        return load_hardware_file(path, device)  # raises: a directory, or an unknown file type
    raise HardwareSpecError(
        f"unknown hardware {quote(str(source))}: not a file and not a preset; presets: "
        f"{', '.join(preset_names())}; clusters: {', '.join(cluster_names())}; files: {', '.join(sorted(LOADERS))}"
    )


# -- writers ------------------------------------------------------------------------------


def _plain(value: Any) -> Any:
    """Model dump → YAML/JSON-safe builtins (enums to values, tuples to lists, inf kept)."""
    if isinstance(value, dict):
        return {_plain(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, DType):
        return value.value
    return value


def hardware_to_dict(spec: HardwareSpec) -> dict[str, Any]:
    """The spec as plain builtins (``inf`` stays a float), the inverse of ``HardwareSpec.from_dict``.

    The optional calibration fields (``efficiency``'s measured tables, ``calibration``,
    ``execution``) and ``energy`` are left out when unset, so specs without them dump exactly as before those
    fields existed.
    """
    data: dict[str, Any] = _plain(spec.model_dump(mode="python"))
    efficiency = data["efficiency"]
    for table in ("matmul_half_flops", "matmul_rows", "matmul_shapes", "attention_rows", "vector_per_kind"):
        if not efficiency[table] and not efficiency[f"{table}_source"]:
            del efficiency[table], efficiency[f"{table}_source"]
    if efficiency["activation_stream"] is None and not efficiency["activation_stream_source"]:
        del efficiency["activation_stream"], efficiency["activation_stream_source"]
    if data["calibration"] is None:
        del data["calibration"]
    if data["energy"] is None:
        del data["energy"]
    if data["interconnect"] is not None:
        # the collective fields at their defaults are left out: a link of name, bandwidth and latency dumps as before
        link = data["interconnect"]
        defaults: dict[str, Any] = {"domain_gpus": None, "in_switch_reduction": False,
                                    "in_switch_bandwidth_bytes_per_s": None, "in_switch_min_gpus": 2,
                                    "network": None, "algorithms": {}}
        for key, default in defaults.items():
            if link.get(key) == default:
                del link[key]
    if spec.execution.is_default:
        del data["execution"]
    return data


def dump_hardware_yaml(spec: HardwareSpec) -> str:
    """YAML text that :func:`load_hardware` reads back into an equal spec."""
    import yaml

    class _NoAliases(yaml.SafeDumper):
        """Writes every value out: the loader bounds aliases, and a spec needs none."""

        def ignore_aliases(self, data: Any) -> bool:
            return True

    return yaml.dump(hardware_to_dict(spec), Dumper=_NoAliases, sort_keys=False, allow_unicode=True, width=110)


def dump_hardware_json(spec: HardwareSpec) -> str:
    """JSON text (``Infinity`` for an unbounded capacity) that :func:`load_hardware` reads back."""
    return json.dumps(hardware_to_dict(spec), indent=2, ensure_ascii=False) + "\n"


def sheet_grid(specs: Iterable[HardwareSpec]) -> list[list[Any]]:
    """Specs as a spreadsheet grid (one column per device, base units in the row names).

    Keeps the numbers the sheet format carries; memory levels become L1 (the per-engine level),
    L2/L3 (the other caches, in order) and main memory, so level names other than ``l1``/``l2``/
    ``l3`` and the per-figure sources are not kept. Nor is anything beyond the three scalar
    efficiencies: per-dtype GEMM efficiencies, Hockney's W½, the weight-streaming and attention
    tables (the fitted GPU presets carry all of these), the execution profile, a calibration
    record, and the interconnect beyond its name, bandwidth and latency (domain, network, collective
    terms). A spec that must keep them is written as YAML or JSON (:func:`dump_hardware_yaml`).
    """
    specs = list(specs)
    dtypes_macs = sorted({d for s in specs for d in s.engines.macs_per_cycle}, key=lambda d: d.value)
    dtypes_peak = sorted({d for s in specs for d in s.engines.peak_flops_per_s}, key=lambda d: d.value)
    rows: list[tuple[str, Callable[[HardwareSpec], Any]]] = [
        ("Description", lambda s: s.description),
        ("Kind", lambda s: s.kind),
        ("Num_Cores", lambda s: s.engines.count),
        ("Frequency (Hz)", lambda s: s.engines.clock_hz),
    ]
    rows += [(f"MACs_per_cycle_{d.value}", functools.partial(_macs, dtype=d)) for d in dtypes_macs]
    rows += [(f"Peak_flops_{d.value} (FLOP/s)", functools.partial(_peak, dtype=d)) for d in dtypes_peak]
    rows += [
        ("TF32_flops (FLOP/s)", lambda s: s.engines.tf32_flops_per_s),
        ("Vector_flops (FLOP/s)", lambda s: s.engines.vector_flops_per_s),
        ("L1_cache_capacity (B)", lambda s: _cache(s, "l1", "capacity_bytes")),
        ("L2_cache_capacity (B)", lambda s: _cache(s, "l2", "capacity_bytes")),
        ("L2_bandwidth (B/s)", lambda s: _cache(s, "l2", "bandwidth_bytes_per_s")),
        ("L3_cache_capacity (B)", lambda s: _cache(s, "l3", "capacity_bytes")),
        ("L3_bandwidth (B/s)", lambda s: _cache(s, "l3", "bandwidth_bytes_per_s")),
        ("Memory_type", lambda s: s.main_memory.name),
        ("Memory_capacity (B)", lambda s: _finite_or_none(s.memory_capacity_bytes)),
        ("Bandwidth (B/s)", lambda s: s.memory_bandwidth_bytes_per_s),
        ("Launch_overhead (s)", lambda s: s.launch_overhead_s),
        ("Matmul_efficiency", lambda s: s.efficiency.matmul),
        ("Vector_efficiency", lambda s: s.efficiency.vector),
        ("Memory_efficiency", lambda s: s.efficiency.memory),
        ("Interconnect", lambda s: s.interconnect.name if s.interconnect else None),
        ("Interconnect_bandwidth (B/s)",
         lambda s: s.interconnect.bandwidth_bytes_per_s if s.interconnect else None),
        ("Interconnect_latency (s)", lambda s: s.interconnect.latency_s if s.interconnect else None),
    ]
    dtypes_energy = sorted({d for s in specs if s.energy for d in s.energy.matrix_pj_per_flop}, key=lambda d: d.value)
    rows += [(f"Matrix_energy_{d.value} (pJ/FLOP)", functools.partial(_matrix_energy, dtype=d)) for d in dtypes_energy]
    units = {"pj_per_flop": "pJ/FLOP", "pj_per_byte": "pJ/B", "w": "W"}
    rows += [(f"{name} ({units[_ROW_INDEX[_norm(name)].dimension or 'w']})",
              functools.partial(_energy_figure, key=key)) for name, key in _ENERGY_ROWS]
    grid: list[list[Any]] = [["Parameter", *(s.name for s in specs)]]
    for label, getter in rows:
        values = [getter(s) for s in specs]
        if any(v is not None for v in values):
            grid.append([label, *values])
    return grid


def _macs(spec: HardwareSpec, dtype: DType) -> float | None:
    return spec.engines.macs_per_cycle.get(dtype)


def _peak(spec: HardwareSpec, dtype: DType) -> float | None:
    return spec.engines.peak_flops_per_s.get(dtype)


def _matrix_energy(spec: HardwareSpec, dtype: DType) -> float | None:
    return spec.energy.matrix_pj_per_flop.get(dtype) if spec.energy is not None else None


def _energy_figure(spec: HardwareSpec, key: str) -> float | None:
    return getattr(spec.energy, key) if spec.energy is not None else None


def _finite_or_none(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _cache(spec: HardwareSpec, row: str, field: str) -> Any:
    """``field`` of the cache level the sheet row ``l1``/``l2``/``l3`` stands for, or None."""
    level = _sheet_levels(spec).get(row)
    return None if level is None else getattr(level, field)


def _sheet_levels(spec: HardwareSpec) -> dict[str, MemoryLevel]:
    """Cache levels → sheet rows: the first per-engine level is L1; shared levels named ``l2``/``l3``
    keep their row and the others fill the free one of L2, L3 in order (e.g. MI300X's Infinity
    Cache becomes L3). Levels beyond these are not representable in a sheet and are dropped."""
    caches = spec.memory[:-1]
    rows: dict[str, MemoryLevel] = {}
    private = [lv for lv in caches if lv.per_engine]
    if private:
        rows["l1"] = private[0]
    shared = [lv for lv in caches if not lv.per_engine]
    for level in shared:
        if level.name.lower() in ("l2", "l3"):
            rows[level.name.lower()] = level
    for level in shared:
        if level.name.lower() not in ("l2", "l3"):
            free = next((r for r in ("l2", "l3") if r not in rows), None)
            if free is not None:
                rows[free] = level
    return rows


def _write_csv(grid: list[list[Any]], path: Path, inputs: tuple[Path, ...]) -> None:
    with atomic_write(path, "w", inputs=inputs) as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerows([["" if v is None else (repr(v) if isinstance(v, float) else v) for v in row]
                          for row in grid])


def _write_xlsx(grid: list[list[Any]], path: Path, inputs: tuple[Path, ...]) -> None:
    import openpyxl

    workbook = openpyxl.Workbook()
    worksheet = workbook.active
    assert worksheet is not None
    worksheet.title = "hardware"
    for row in grid:
        worksheet.append(row)
    with atomic_write(path, "wb", inputs=inputs) as handle:
        workbook.save(handle)


SHEET_WRITERS: dict[str, Callable[[list[list[Any]], Path, tuple[Path, ...]], None]] = {
    ".csv": _write_csv,
    ".xlsx": _write_xlsx,
}
"""Spreadsheet suffix → writer of a grid."""


def write_hardware_sheet(specs: Iterable[HardwareSpec], path: str | Path,
                         inputs: tuple[str | Path, ...] = ()) -> None:
    """Write ``specs`` as a one-column-per-device CSV/XLSX (atomically, never over ``inputs``)."""
    file = Path(path)
    writer = SHEET_WRITERS.get(file.suffix.lower())
    if writer is None:
        known = ", ".join(sorted(SHEET_WRITERS))
        raise HardwareSpecError(f"{file}: cannot write {file.suffix!r}; known: {known}")
    writer(sheet_grid(specs), file, tuple(Path(p) for p in inputs))
