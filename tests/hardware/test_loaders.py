"""Loaders: spreadsheet CSV/XLSX (units in row names, cells or a unit column), YAML/JSON with
units, round trips, and errors that name the file, cell, row, column and value."""

from __future__ import annotations

import csv
import logging
import math
from pathlib import Path
from typing import Any

import openpyxl
import pytest

from layerscope.errors import HardwareSpecError, OutputError
from layerscope.hardware import HardwareSpec, load_hardware, write_hardware_sheet
from layerscope.hardware.loaders import LOADERS, dump_hardware_json, dump_hardware_yaml, sheet_devices
from layerscope.hardware.presets import bundled_spreadsheet_example
from layerscope.units import DType

BASE = [
    ["Parameter", "NVL-AX", "JGS"],
    ["Num_Cores", "32", "192"],
    ["Frequency (GHz)", "2.5", "1.5"],
    ["MACs_per_cycle", "2048", "8192"],
    ["Bandwidth", "342 GB/s", "30 TB/s"],
    ["L3_cache_capacity", "36 MB", "120 MB"],
]


def _write_csv(path: Path, rows: list[list[Any]]) -> Path:
    with path.open("w", newline="", encoding="utf-8") as handle:
        csv.writer(handle).writerows(rows)
    return path


def _write_xlsx(path: Path, rows: list[list[Any]], title: str = "Sheet1") -> Path:
    workbook = openpyxl.Workbook()
    sheet = workbook.active
    assert sheet is not None
    sheet.title = title
    for row in rows:
        sheet.append(row)
    workbook.save(path)
    return path


def _numbers(spec: HardwareSpec) -> dict[str, Any]:
    """The spec without citations (they name the file they came from)."""
    data = spec.model_dump(exclude={"sources", "description"})
    for key in ("matmul_source", "vector_source", "memory_source", "matmul_per_dtype_source"):
        data["efficiency"].pop(key)
    return data


def test_loaders_are_registered_by_suffix() -> None:
    assert {".yaml", ".yml", ".json", ".csv", ".xlsx"} <= set(LOADERS)


def test_bundled_csv_two_devices() -> None:
    path = bundled_spreadsheet_example()
    assert sheet_devices(path) == ["NVL-AX", "JGS"]
    nvl = load_hardware(path, device="nvl_ax")
    assert nvl.name == "NVL-AX" and nvl.kind == "accelerator"
    assert nvl.engines.count == 32 and nvl.engines.clock_hz == 2.5e9
    assert nvl.engines.macs_per_cycle == {DType.FP16: 2048}
    assert nvl.peak_flops(DType.FP16) == pytest.approx(327.68e12)
    assert nvl.memory_bandwidth_bytes_per_s == 342 * 2**30  # the design notebook's sheet: binary units
    assert [lv.name for lv in nvl.memory] == ["l3", "dram"]
    assert nvl.level("l3").capacity_bytes == 36 * 2**20
    assert math.isinf(nvl.memory_capacity_bytes)
    assert nvl.sources["engines.clock_hz"].startswith("design notebook device sheet")
    assert "assumption" in nvl.sources["engines.vector_flops_per_s"]
    assert nvl.engines.vector_flops_per_s == pytest.approx(327.68e12 / 16)


def test_units_in_row_name_cell_or_unit_column_agree(tmp_path: Path) -> None:
    in_cells = [
        ["Parameter", "NVL-AX"], ["Num_Cores", 32], ["Frequency", "2.5 GHz"], ["MACs_per_cycle", 2048],
        ["Bandwidth", "342 GB/s"], ["L3_cache_capacity", "36 MB"],
    ]
    in_names = [
        ["Parameter", "NVL-AX"], ["Num_Cores", 32], ["Frequency (GHz)", 2.5], ["MACs_per_cycle", 2048],
        ["Bandwidth (GB/s)", 342], ["L3_cache_capacity [MB]", 36],
    ]
    in_column = [
        ["Parameter", "Unit", "NVL-AX"], ["Num_Cores", "", 32], ["Frequency", "MHz", 2500],
        ["MACs_per_cycle", "", 2048], ["Bandwidth", "MB/s", 342000], ["L3_cache_capacity", "KB", 36000],
    ]
    specs = [load_hardware(_write_csv(tmp_path / f"{i}.csv", rows))
             for i, rows in enumerate((in_cells, in_names, in_column))]
    assert _numbers(specs[0]) == _numbers(specs[1]) == _numbers(specs[2])
    assert specs[0].level("l3").capacity_bytes == 36e6


def test_binary_units_bits_and_percentages(tmp_path: Path) -> None:
    rows = [*BASE[:4], ["Bandwidth", "1600 Gbps", "1 TiB/s"], ["L3_cache_capacity", "36 MiB", "120 MB"],
            ["Memory_capacity", "16 GiB", "80 GB"], ["Memory_efficiency", "83 %", "0.9"],
            ["Launch_overhead", "4 us", "2µs"], ["Peak_flops_fp8 (TFLOP/s)", "", "9000"]]
    path = _write_csv(tmp_path / "units.csv", rows)
    nvl = load_hardware(path, device="NVL-AX")
    assert nvl.memory_bandwidth_bytes_per_s == 200e9  # bits / 8
    assert nvl.level("l3").capacity_bytes == 36 * 2**20
    assert nvl.memory_capacity_bytes == 16 * 2**30
    assert nvl.efficiency.memory == pytest.approx(0.83)
    assert nvl.launch_overhead_s == pytest.approx(4e-6)
    assert DType.FP8 not in nvl.engines.peak_flops_per_s  # empty cell: not given for this device
    jgs = load_hardware(path, device="JGS")
    assert jgs.memory_bandwidth_bytes_per_s == 2**40
    assert jgs.memory_capacity_bytes == 80e9
    assert jgs.peak_flops(DType.FP8) == 9000e12
    assert jgs.launch_overhead_s == pytest.approx(2e-6)


def test_per_dtype_mac_rows(tmp_path: Path) -> None:
    rows = [*BASE[:3], ["MACs_per_cycle (int8)", 4096, 16384], ["MACs_per_cycle_bf16", 2048, 8192], *BASE[4:]]
    nvl = load_hardware(_write_csv(tmp_path / "dtypes.csv", rows), device="NVL-AX")
    assert nvl.peak_flops(DType.INT8) == pytest.approx(32 * 2.5e9 * 2 * 4096)
    assert nvl.peak_flops(DType.BF16) == pytest.approx(327.68e12)


def test_xlsx_matches_csv(tmp_path: Path) -> None:
    with bundled_spreadsheet_example().open(encoding="utf-8") as handle:
        rows: list[list[Any]] = list(csv.reader(handle))
    for row in rows:  # numbers as numbers, as a spreadsheet user would type them
        row[1:3] = [float(v) if v.replace(".", "").isdigit() else v for v in row[1:3]]
    path = _write_xlsx(tmp_path / "acc.xlsx", rows)
    for device in ("NVL-AX", "JGS"):
        assert _numbers(load_hardware(path, device=device)) == _numbers(
            load_hardware(bundled_spreadsheet_example(), device=device))


@pytest.mark.parametrize("suffix", [".csv", ".xlsx"])
def test_sheet_round_trip(suffix: str, tmp_path: Path) -> None:
    specs = [load_hardware(n) for n in ("nvl-ax", "jgs")]
    path = tmp_path / f"out{suffix}"
    write_hardware_sheet(specs, path)
    for spec in specs:
        assert _numbers(load_hardware(path, device=spec.name)) == _numbers(spec)


@pytest.mark.parametrize("suffix", [".csv", ".xlsx"])
def test_preset_survives_a_sheet_round_trip(suffix: str, tmp_path: Path) -> None:
    h100 = load_hardware("h100-sxm")
    path = tmp_path / f"h100{suffix}"
    write_hardware_sheet([h100, load_hardware("mi300x")], path)
    back = load_hardware(path, device="h100-sxm")
    assert back.engines == h100.engines
    assert back.main_memory == h100.main_memory
    # the sheet keeps the link's name, bandwidth and latency (not the domain, network or fitted collective terms)
    assert back.interconnect is not None and h100.interconnect is not None
    assert (back.interconnect.name, back.interconnect.bandwidth_bytes_per_s, back.interconnect.latency_s) == \
        (h100.interconnect.name, h100.interconnect.bandwidth_bytes_per_s, h100.interconnect.latency_s)
    assert back.launch_overhead_s == h100.launch_overhead_s
    assert (back.efficiency.matmul, back.efficiency.memory) == (h100.efficiency.matmul, h100.efficiency.memory)
    assert back.level("l1").capacity_bytes == h100.level("smem").capacity_bytes
    assert back.level("l2").capacity_bytes == 50e6
    mi = load_hardware(path, device="MI300X")
    assert mi.level("l3").bandwidth_bytes_per_s == 17e12  # infinity cache as the second cache


def test_write_refuses_unknown_suffix_and_overwriting_an_input(tmp_path: Path) -> None:
    with pytest.raises(HardwareSpecError, match=r"cannot write '\.ods'"):
        write_hardware_sheet([load_hardware("jgs")], tmp_path / "x.ods")
    source = _write_csv(tmp_path / "in.csv", BASE)
    with pytest.raises(OutputError, match="refusing to overwrite"):
        write_hardware_sheet([load_hardware(source, device="JGS")], source, inputs=(source,))


# -- errors ---------------------------------------------------------------------------------


def _error(path: Path, device: str | None = "NVL-AX") -> str:
    with pytest.raises(HardwareSpecError) as info:
        load_hardware(path, device=device)
    return str(info.value)


def test_non_numeric_csv_cell_names_line_row_column_and_value(tmp_path: Path) -> None:
    rows = [list(r) for r in BASE]
    rows[2][1] = "fast"
    message = _error(_write_csv(tmp_path / "bad.csv", rows))
    assert "bad.csv" in message
    assert "line 3, column 2" in message
    assert "row 'Frequency (GHz)', column 'NVL-AX'" in message
    assert "'fast'" in message and "not a number" in message


def test_non_numeric_xlsx_cell_names_sheet_and_cell(tmp_path: Path) -> None:
    rows = [list(r) for r in BASE]
    rows[3][2] = "lots"
    message = _error(_write_xlsx(tmp_path / "bad.xlsx", rows, title="Specs"), device="JGS")
    assert "sheet 'Specs' cell C4" in message
    assert "row 'MACs_per_cycle', column 'JGS'" in message
    assert "'lots'" in message


@pytest.mark.parametrize("cell, unit", [("342 GB/hour", "GB/hour"), ("342 furlongs", "furlongs")])
def test_unknown_unit_is_named_with_the_allowed_ones(cell: str, unit: str, tmp_path: Path) -> None:
    rows = [list(r) for r in BASE]
    rows[4][1] = cell
    message = _error(_write_csv(tmp_path / "unit.csv", rows))
    assert f"unknown unit {unit!r}" in message and "GB/s" in message
    assert "row 'Bandwidth', column 'NVL-AX'" in message


def test_wrong_dimension_unit_is_rejected(tmp_path: Path) -> None:
    rows = [list(r) for r in BASE]
    rows[5][1] = "36 GHz"
    assert "unknown unit 'GHz'" in _error(_write_csv(tmp_path / "dim.csv", rows))


def test_plain_numbers_are_base_units(tmp_path: Path) -> None:
    rows = [["", "A"], ["Num_Cores", "32"], ["Frequency", "2.5e9"], ["MACs_per_cycle", "2048"],
            ["Bandwidth", "367219703808"], ["L3_cache_capacity", 37748736], ["Memory_capacity", "16e9"],
            ["Vector_flops", "2e13"], ["Launch_overhead", "4e-6"], ["Peak_flops_fp8", "6.5e14"]]
    spec = load_hardware(_write_csv(tmp_path / "plain.csv", rows))
    assert spec.engines.clock_hz == 2.5e9
    assert spec.memory_bandwidth_bytes_per_s == 342 * 2**30
    assert spec.level("l3").capacity_bytes == 36 * 2**20
    assert spec.memory_capacity_bytes == 16e9
    assert spec.engines.vector_flops_per_s == 2e13
    assert spec.launch_overhead_s == 4e-6
    assert spec.engines.peak_flops_per_s[DType.FP8] == 6.5e14


@pytest.mark.parametrize("row, cell, shown", [
    ("Bandwidth", "342", "342 B/s"),  # meant as GB/s
    ("Frequency", "2.5", "2.5 Hz"),  # meant as GHz
    ("L3_cache_capacity", "36", "36 B"),  # meant as MB
    ("Vector_flops", "20", "20 FLOP/s"),  # meant as TFLOP/s
    ("Launch_overhead", "4", "4 s"),  # meant as us
])
def test_implausible_plain_number_says_it_was_read_in_base_units(
        row: str, cell: str, shown: str, tmp_path: Path) -> None:
    rows = [[r[0], r[1]] for r in BASE if r[0].split(" ")[0] != row] + [[row, cell]]
    message = _error(_write_csv(tmp_path / "plain.csv", rows))
    assert f"a plain number is in base units, so '{cell}' is {shown}" in message
    assert f"row '{row}', column 'NVL-AX'" in message and "write the unit" in message


def test_a_unit_in_the_row_name_makes_small_numbers_fine(tmp_path: Path) -> None:
    rows = [*BASE[:4], ["Bandwidth (GB/s)", "342", "30000"], BASE[5], ["Launch_overhead (us)", "4", "2"]]
    spec = load_hardware(_write_csv(tmp_path / "named.csv", rows), device="NVL-AX")
    assert spec.memory_bandwidth_bytes_per_s == 342e9 and spec.launch_overhead_s == pytest.approx(4e-6)


def test_missing_frequency_row_is_named(tmp_path: Path) -> None:
    rows = [r for r in BASE if not r[0].startswith("Frequency")]
    message = _error(_write_csv(tmp_path / "nofreq.csv", rows))
    assert "missing required row 'Frequency'" in message and "device 'NVL-AX'" in message


def test_empty_required_cell_is_named(tmp_path: Path) -> None:
    rows = [list(r) for r in BASE]
    rows[1][2] = ""
    message = _error(_write_csv(tmp_path / "empty.csv", rows), device="JGS")
    assert "line 2, column 3" in message and "required value is empty" in message


def test_no_mac_or_peak_rows(tmp_path: Path) -> None:
    rows = [r for r in BASE if r[0] != "MACs_per_cycle"]
    message = _error(_write_csv(tmp_path / "nomac.csv", rows))
    assert "needs a MACs_per_cycle or Peak_flops_<dtype> row" in message


def test_device_selection_errors_list_the_columns(tmp_path: Path) -> None:
    path = _write_csv(tmp_path / "two.csv", BASE)
    assert "several devices; pick one of: 'NVL-AX', 'JGS'" in _error(path, device=None)
    assert "no device column 'TPU'; columns: 'NVL-AX', 'JGS'" in _error(path, device="TPU")
    single = _write_csv(tmp_path / "one.csv", [r[:2] for r in BASE])
    assert load_hardware(single).name == "NVL-AX"


def test_other_sheet_errors(tmp_path: Path) -> None:
    fractional = [list(r) for r in BASE]
    fractional[1][1] = "32.5"
    assert "must be a whole number" in _error(_write_csv(tmp_path / "frac.csv", fractional))
    twice = [*BASE, ["Frequency", "2 GHz", "1 GHz"]]
    assert "repeats row 'Frequency (GHz)'" in _error(_write_csv(tmp_path / "twice.csv", twice))
    bad_dtype = [*BASE, ["MACs_per_cycle_fp7", "1", "1"]]
    assert "unknown dtype 'fp7'" in _error(_write_csv(tmp_path / "fp7.csv", bad_dtype))
    bad_eff = [*BASE, ["Matmul_efficiency", "120 %", "0.5"]]
    assert "must be in (0, 1]" in _error(_write_csv(tmp_path / "eff.csv", bad_eff))
    dup_col = [["Parameter", "A", "a"], *[[r[0], r[1], r[1]] for r in BASE[1:]]]
    assert "device column 'a' appears twice" in _error(_write_csv(tmp_path / "dup.csv", dup_col), "A")
    bad_kind = [*BASE, ["Kind", "fpga", "gpu"]]
    message = _error(_write_csv(tmp_path / "kind.csv", bad_kind))
    assert "row 'Kind', column 'NVL-AX'): kind 'fpga' not one of" in message
    assert "the sheet is empty" in _error(_write_csv(tmp_path / "empty.csv", []))


def test_unknown_rows_are_logged_and_ignored(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = _write_csv(tmp_path / "extra.csv", [*BASE, ["TDP (W)", "300", "500"]])
    with caplog.at_level(logging.WARNING, logger="layerscope.hardware.loaders"):
        assert load_hardware(path, device="JGS").engines.count == 192
    assert "ignoring unknown row 'TDP (W)'" in caplog.text


def test_file_errors(tmp_path: Path) -> None:
    with pytest.raises(HardwareSpecError, match="no such file"):
        load_hardware(tmp_path / "missing.yaml")
    with pytest.raises(HardwareSpecError, match="not a file and not a preset; presets: a100-pcie"):
        load_hardware(tmp_path / "missing")
    (tmp_path / "spec.toml").write_text("x = 1")
    with pytest.raises(HardwareSpecError, match=r"unknown hardware file type '\.toml'; known: \.csv, \.json"):
        load_hardware(tmp_path / "spec.toml")
    with pytest.raises(HardwareSpecError, match=r"spec\.toml: unknown hardware file type '\.toml'; known: \.csv"):
        load_hardware(tmp_path / "spec.toml")
    with pytest.raises(HardwareSpecError,
                       match=r"not a spreadsheet: unknown spreadsheet type '\.toml'; known: \.csv, \.xlsm, \.xlsx$"):
        sheet_devices(tmp_path / "spec.toml")
    (tmp_path / "broken.yaml").write_text("name: [unclosed")
    with pytest.raises(HardwareSpecError, match="invalid YAML"):
        load_hardware(tmp_path / "broken.yaml")
    (tmp_path / "list.json").write_text("[1, 2]")
    with pytest.raises(HardwareSpecError, match="expected a mapping"):
        load_hardware(tmp_path / "list.json")
    (tmp_path / "fake.xlsx").write_text("not a zip")
    with pytest.raises(HardwareSpecError, match="cannot read as XLSX"):
        load_hardware(tmp_path / "fake.xlsx")


YAML_WITH_UNITS = """
name: toy
kind: accelerator
engines:
  count: 8
  clock_hz: 1.2 GHz
  peak_flops_per_s: {bf16: 100 TFLOP/s, int8: "200 TOPS"}
  vector_flops_per_s: 5 TFLOPS
memory:
  - {name: sram, capacity_bytes: 2 MiB, bandwidth_bytes_per_s: 10 TB/s, per_engine: true}
  - {name: dram, capacity_bytes: 32 GB, bandwidth_bytes_per_s: 1.5e12}
launch_overhead_s: 3 us
sources:
  launch_overhead_s: "3 us, a guess"
"""


def test_yaml_accepts_units_in_strings(tmp_path: Path) -> None:
    path = tmp_path / "toy.yaml"
    path.write_text(YAML_WITH_UNITS)
    spec = load_hardware(path)
    assert spec.engines.clock_hz == 1.2e9
    assert spec.engines.peak_flops_per_s == {DType.BF16: 100e12, DType.INT8: 200e12}
    assert spec.level("sram").capacity_bytes == 2 * 2**20
    assert spec.memory_bandwidth_bytes_per_s == 1.5e12
    assert spec.launch_overhead_s == pytest.approx(3e-6)
    assert spec.sources["launch_overhead_s"] == "3 us, a guess"  # citations are left alone


def test_yaml_errors_name_the_field_and_value(tmp_path: Path) -> None:
    path = tmp_path / "toy.yaml"
    path.write_text(YAML_WITH_UNITS.replace("clock_hz: 1.2 GHz", "clock_hz: 1.2 GB"))
    with pytest.raises(HardwareSpecError, match=r"toy.yaml: field 'engines.clock_hz': unknown unit 'GB'"):
        load_hardware(path)
    path.write_text(YAML_WITH_UNITS.replace("count: 8", "count: -8"))
    with pytest.raises(HardwareSpecError, match=r"toy.yaml: field 'engines.count'.*greater than 0.*-8"):
        load_hardware(path)


@pytest.mark.parametrize("suffix", [".yaml", ".json"])
def test_energy_figures_survive_a_yaml_or_json_round_trip(suffix: str, tmp_path: Path) -> None:
    h100 = load_hardware("h100-sxm")
    assert h100.energy is not None and h100.energy.board_power_limit_w == 700.0
    path = tmp_path / f"h100{suffix}"
    path.write_text(dump_hardware_yaml(h100) if suffix == ".yaml" else dump_hardware_json(h100))
    back = load_hardware(path)
    assert back.energy == h100.energy
    assert {k: v for k, v in back.sources.items() if k.startswith("energy.")} == \
        {k: v for k, v in h100.sources.items() if k.startswith("energy.")}
    # a spec without energy figures dumps without the block, as before the field existed
    bare = h100.model_copy(update={"energy": None})
    assert "energy" not in dump_hardware_yaml(bare).split("\nsources:")[0]
    assert load_hardware(_dumped(bare, tmp_path / f"bare{suffix}")).energy is None


def _dumped(spec: HardwareSpec, path: Path) -> Path:
    path.write_text(dump_hardware_yaml(spec) if path.suffix == ".yaml" else dump_hardware_json(spec))
    return path


@pytest.mark.parametrize("suffix", [".csv", ".xlsx"])
def test_energy_figures_survive_a_sheet_round_trip(suffix: str, tmp_path: Path) -> None:
    h100 = load_hardware("h100-sxm")
    path = tmp_path / f"h100{suffix}"
    mi300x = load_hardware("mi300x")
    write_hardware_sheet([h100, mi300x, load_hardware("a100-pcie")], path)
    assert load_hardware(path, device="h100-sxm").energy == h100.energy
    assert mi300x.energy is not None and load_hardware(path, device="mi300x").energy == mi300x.energy
    assert load_hardware(path, device="a100-pcie").energy is None  # no energy figures, no energy rows read


def test_energy_rows_in_units_and_all_or_nothing(tmp_path: Path) -> None:
    rows = [*BASE, ["Matrix_energy (bf16)", "0.5 pJ/FLOP", ""], ["Vector_energy", "2 pJ/FLOP", ""],
            ["Main_memory_energy", "3.9 pJ/bit", ""], ["Idle_power (W)", "50", ""],
            ["Board_power_limit", "0.4 kW", ""], ["Network_energy (pJ/B)", "0", ""]]
    energy = load_hardware(_write_csv(tmp_path / "e.csv", rows), device="NVL-AX").energy
    assert energy is not None
    assert energy.matrix_pj_per_flop == {DType.BF16: 0.5}
    assert energy.main_memory_pj_per_byte == pytest.approx(3.9 * 8)
    assert (energy.idle_power_w, energy.board_power_limit_w, energy.network_pj_per_byte) == (50.0, 400.0, 0.0)
    assert load_hardware(_write_csv(tmp_path / "none.csv", BASE), device="NVL-AX").energy is None
    partial = _write_csv(tmp_path / "p.csv", [*BASE, ["Idle_power (W)", "50", ""]])
    with pytest.raises(HardwareSpecError, match="Vector_energy, Main_memory_energy, Board_power_limit"):
        load_hardware(partial, device="NVL-AX")
