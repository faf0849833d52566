"""The design notebook's device sheet (``examples/seed-hardware-sheet.csv``, a copy of
``../shared/data/seed-hardware-sheet.csv``) loads as written, the NVL-AX and JGS presets carry its
exact numbers, and the README's example workbook is generated from it and runs."""

from __future__ import annotations

import csv
import importlib.util
import json
import shlex
from pathlib import Path
from types import ModuleType
from typing import Any

import openpyxl
import pytest

from layerscope.hardware import HardwareSpec, load_hardware
from layerscope.hardware.loaders import sheet_devices
from layerscope.units import DType

ROOT = Path(__file__).resolve().parents[2]
SEED = ROOT / "examples" / "seed-hardware-sheet.csv"
SHARED_SEED = ROOT.parent / "shared" / "data" / "seed-hardware-sheet.csv"
MY_CHIPS = ROOT / "examples" / "my_chips.xlsx"
PRESETS = {"NVL-AX": "nvl-ax", "JGS": "jgs"}


def _seed_numbers() -> dict[str, dict[str, float]]:
    """Device → row → the sheet's number, read with the csv module alone (not our loader)."""
    with SEED.open(encoding="utf-8", newline="") as handle:
        header, *rows = list(csv.reader(handle))
    return {device: {row[0]: float(row[col]) for row in rows} for col, device in enumerate(header) if col}


def _figures(spec: HardwareSpec, macs_dtype: DType) -> dict[str, float]:
    """The spec's figures that the sheet's rows give, by row name."""
    return {
        "Num_Cores": spec.engines.count,
        "Frequency": spec.engines.clock_hz,
        "MACs_per_cycle": spec.engines.macs_per_cycle[macs_dtype],
        "Bandwidth": spec.memory_bandwidth_bytes_per_s,
        "L3_cache_capacity": spec.level("l3").capacity_bytes,
    }


def _numbers(spec: HardwareSpec) -> dict[str, Any]:
    """The spec without its description and citations (they name the file they came from)."""
    data = spec.model_dump(exclude={"sources", "description"})
    for key in [k for k in data["efficiency"] if k.endswith("_source")]:
        data["efficiency"].pop(key)
    return data


def test_the_sheet_is_the_notebooks_numbers_in_base_units() -> None:
    numbers = _seed_numbers()
    assert set(numbers) == {"NVL-AX", "JGS"}
    assert numbers["NVL-AX"]["Bandwidth"] == 342 * 2**30
    assert numbers["NVL-AX"]["L3_cache_capacity"] == 36 * 2**20
    assert numbers["JGS"]["Bandwidth"] == 30 * 2**40
    assert numbers["JGS"]["L3_cache_capacity"] == 120 * 2**20
    assert (numbers["NVL-AX"]["Frequency"], numbers["JGS"]["Frequency"]) == (2.5e9, 1.5e9)


@pytest.mark.skipif(not SHARED_SEED.is_file(), reason="../shared is not beside this checkout")
def test_the_project_copy_is_the_shared_sheet_byte_for_byte() -> None:
    assert SEED.read_bytes() == SHARED_SEED.read_bytes()


@pytest.mark.parametrize("device", ["NVL-AX", "JGS"])
def test_the_sheet_loads_as_written(device: str) -> None:
    spec = load_hardware(SEED, device=device)
    assert spec.name == device
    # The sheet does not say the MACs' dtype: the loader's fp16 assumption, said so in the sources.
    assert list(spec.engines.macs_per_cycle) == [DType.FP16]
    assert "assumption" in spec.sources["engines.macs_dtype"]
    assert _figures(spec, DType.FP16) == _seed_numbers()[device]
    sheet = _seed_numbers()[device]
    assert spec.peak_flops(DType.FP16) == sheet["Num_Cores"] * sheet["Frequency"] * 2 * sheet["MACs_per_cycle"]


@pytest.mark.parametrize(("device", "macs_dtype"), [("NVL-AX", DType.FP16), ("JGS", DType.FP32)])
def test_each_preset_figure_equals_the_sheets_value(device: str, macs_dtype: DType) -> None:
    preset = load_hardware(PRESETS[device])
    assert _figures(preset, macs_dtype) == _seed_numbers()[device]
    assert list(preset.engines.macs_per_cycle) == [macs_dtype]
    for field in ("engines.count", "engines.clock_hz", f"engines.macs_per_cycle.{macs_dtype.value}"):
        assert "design notebook device sheet" in preset.sources[field], field
    bandwidth_field = f"memory.{preset.main_memory.name}.bandwidth_bytes_per_s"
    assert "design notebook device sheet" in preset.sources[bandwidth_field]
    assert "layerscope hardware brief" in preset.sources[bandwidth_field]  # the earlier citation is kept


def test_the_sheet_as_xlsx_gives_the_same_spec_as_the_csv(tmp_path: Path) -> None:
    with SEED.open(encoding="utf-8", newline="") as handle:
        grid = [[float(v) if i else v for i, v in enumerate(row)] if row[0] else row
                for row in csv.reader(handle)]
    workbook = openpyxl.Workbook()
    sheet = workbook.active
    assert sheet is not None
    for row in grid:
        sheet.append(row)
    workbook.save(tmp_path / "seed.xlsx")
    assert sheet_devices(tmp_path / "seed.xlsx") == ["NVL-AX", "JGS"]
    for device in ("NVL-AX", "JGS"):
        assert _numbers(load_hardware(tmp_path / "seed.xlsx", device=device)) == _numbers(
            load_hardware(SEED, device=device))


def _make_my_chips() -> ModuleType:
    spec = importlib.util.spec_from_file_location("make_my_chips", ROOT / "examples" / "make_my_chips.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_example_workbook_is_what_its_script_writes() -> None:
    script = _make_my_chips()
    assert script.read_grid(MY_CHIPS) == script.example_grid()
    assert script.main(["--check"]) == 0


def test_the_script_writes_the_workbook_afresh(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script = _make_my_chips()
    monkeypatch.setattr(script, "EXAMPLE", tmp_path / "my_chips.xlsx")
    assert script.main(["--check"]) == 1  # no file yet
    assert script.main([]) == 0
    assert script.read_grid(tmp_path / "my_chips.xlsx") == script.read_grid(MY_CHIPS)
    grid = script.read_grid(tmp_path / "my_chips.xlsx")
    bandwidth = next(row for row in grid if row[0] == "Bandwidth")
    assert bandwidth[1:3] == [342 * 2**30, 30 * 2**40]  # numbers as numbers, not text


@pytest.mark.parametrize("device", ["NVL-AX", "JGS"])
def test_the_example_workbook_gives_the_presets(device: str) -> None:
    assert _numbers(load_hardware(MY_CHIPS, device=device)) == _numbers(load_hardware(PRESETS[device]))


def test_the_readme_line_runs_as_written(run_cli: Any) -> None:
    lines = [line for line in (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
             if "my_chips.xlsx" in line and line.startswith("layerscope ")]
    assert len(lines) == 1, lines
    argv = shlex.split(lines[0])
    out = run_cli(*argv[1:], cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert "TPOT" in out.stdout
    # The same estimate on the nvl-ax preset: the workbook's column is that preset.
    args = argv[1:]
    column = args.index("--device-column")
    on_preset = args[:column] + args[column + 2:]
    on_preset[on_preset.index("--hardware") + 1] = "nvl-ax"
    as_json = run_cli(*args, "--json", cwd=ROOT)
    preset = run_cli(*on_preset, "--json", cwd=ROOT)
    assert as_json.returncode == preset.returncode == 0, (as_json.stderr, preset.stderr)
    assert json.loads(as_json.stdout)["totals"] == json.loads(preset.stdout)["totals"]


def _listing(run_cli: Any, *args: str) -> dict[str, dict[str, Any]]:
    out = run_cli("hardware", *args, "--json")
    assert out.returncode == 0, out.stderr
    return {row["name"]: row for row in json.loads(out.stdout)}


def test_hardware_json_shows_the_presets_figures_in_base_units(run_cli: Any) -> None:
    rows = _listing(run_cli)
    sheet = _seed_numbers()
    for device, macs_dtype in (("NVL-AX", "fp16"), ("JGS", "fp32")):
        row = rows[device]
        assert row["engines"] == sheet[device]["Num_Cores"]
        assert row["clock_hz"] == sheet[device]["Frequency"]
        assert row["macs_per_cycle"] == {macs_dtype: sheet[device]["MACs_per_cycle"]}
        assert row["peak_flops_per_s"] == {
            macs_dtype: sheet[device]["Num_Cores"] * sheet[device]["Frequency"] * 2 * sheet[device]["MACs_per_cycle"]
        }
        assert row["memory_bandwidth_bytes_per_s"] == sheet[device]["Bandwidth"]
        l3 = next(level for level in row["memory_levels"] if level["name"] == "l3")
        assert l3["capacity_bytes"] == sheet[device]["L3_cache_capacity"]
        assert row["memory_bytes"] is None  # unbounded: the sheet gives no capacity
    h100 = rows["h100-sxm"]
    assert h100["peak_flops_per_s"]["bf16"] == 989e12 and h100["memory_bandwidth_bytes_per_s"] == 3.35e12


def test_hardware_json_of_a_sheet_file(run_cli: Any) -> None:
    rows = _listing(run_cli, "--hardware", str(SEED), "--device-column", "jgs")
    assert list(rows) == ["JGS"]
    assert rows["JGS"]["clock_hz"] == 1.5e9
    assert rows["JGS"]["memory_bandwidth_bytes_per_s"] == 32985348833280
    assert rows["JGS"]["macs_per_cycle"] == {"fp16": 8192}
