"""Hardware files under bad and hostile input: YAML alias bombs, deep nesting, huge or broken files,
impossible figures, wrong names. Each is refused with one short HardwareSpecError that names the
file and what is wrong, quickly; through the CLI, one ``error:`` line and exit code 2."""

from __future__ import annotations

import io
import json
import logging
import os
import time
import zipfile
from pathlib import Path
from typing import Any

import pytest

from layerscope.errors import HardwareSpecError
from layerscope.hardware import dump_hardware_yaml, load_hardware
from layerscope.hardware.loaders import (
    MAX_NESTING,
    MAX_SHEET_ROWS,
    MAX_TEXT_FILE_BYTES,
    MAX_XLSX_UNPACKED_BYTES,
    MAX_YAML_ALIAS_NODES,
)
from layerscope.units import MAX_QUOTED_CHARS, quote

#: A bad file is refused within this many seconds (in-process; the CLI adds its start-up).
FAST_S = 5.0

SHEET = "Parameter,NVL-AX\nNum_Cores,32\nFrequency,2.5 GHz\nMACs_per_cycle,2048\nBandwidth,{bw}\n"


def yaml_bomb(levels: int = 9, width: int = 9) -> str:
    """"Billion laughs": each anchored list holds ``width`` aliases of the one before (9 x 9: 342 bytes)."""
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for level in range(1, levels):
        prev, name = chr(ord("a") + level - 1), chr(ord("a") + level)
        lines.append(f"{name}: &{name} [" + ",".join(f"*{prev}" for _ in range(width)) + "]")
    return "\n".join(lines) + "\n"


def _refused(path: Path, device: str | None = None) -> str:
    """The message of the HardwareSpecError that loading ``path`` raises, checked to be short and quick."""
    start = time.monotonic()
    with pytest.raises(HardwareSpecError) as info:
        load_hardware(path, device=device)
    assert time.monotonic() - start < FAST_S
    message = str(info.value)
    assert len(message) < 1200, message[:300]  # the CLI cuts at 500; a library message stays short too
    return message


def _write(path: Path, content: str | bytes) -> Path:
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    return path


# -- YAML and JSON bombs and nesting ---------------------------------------------------------


def test_the_billion_laughs_is_refused_before_it_is_expanded(tmp_path: Path) -> None:
    bomb = yaml_bomb()
    assert len(bomb) < 400
    message = _refused(_write(tmp_path / "bomb.yaml", bomb))
    assert "bomb.yaml" in message and f"aliases expand to more than {MAX_YAML_ALIAS_NODES} values" in message


def test_a_five_level_bomb_is_refused_too(tmp_path: Path) -> None:
    assert MAX_YAML_ALIAS_NODES < 9**5
    message = _refused(_write(tmp_path / "bomb5.yaml", yaml_bomb(levels=5)))
    assert "aliases expand" in message


def test_a_bomb_under_a_spec_field_is_refused(tmp_path: Path) -> None:
    spec = dump_hardware_yaml(load_hardware("h100-sxm"))
    text = yaml_bomb(levels=6) + spec.replace("name: h100-sxm", "name: *f")
    message = _refused(_write(tmp_path / "field.yaml", text))
    assert "aliases expand" in message


def test_a_few_small_aliases_are_fine(tmp_path: Path) -> None:
    text = dump_hardware_yaml(load_hardware("h100-sxm"))
    assert "&" not in text and "*" not in text  # the writer never emits aliases
    anchored = text.replace("kind: gpu", "kind: &k gpu") + "note_kind: *k\n"
    message = _refused(_write(tmp_path / "alias.yaml", anchored))
    assert "note_kind" in message and "Extra inputs" in message  # it got as far as validation
    shared = text.replace("launch_overhead_s: ", "launch_overhead_s: &t ", 1)
    spec = load_hardware(_write(tmp_path / "ok.yaml", shared))
    assert spec == load_hardware("h100-sxm")


def test_a_recursive_alias_is_refused(tmp_path: Path) -> None:
    message = _refused(_write(tmp_path / "loop.yaml", "a: &a [1, *a]\n"))
    assert "refers to a value that contains it" in message


@pytest.mark.parametrize("suffix, text", [
    (".json", "[" * 200_000 + "]" * 200_000),
    (".json", "[" * (MAX_NESTING + 1) + "]" * (MAX_NESTING + 1)),
    (".json", '{"a": ' * 500 + "1" + "}" * 500),
    (".yaml", "[" * 200_000 + "]" * 200_000),
    (".yaml", "[" * (MAX_NESTING + 1) + "]" * (MAX_NESTING + 1)),
    (".yaml", "".join(f"{' ' * i}k:\n" for i in range(MAX_NESTING + 5))),
])
def test_deep_nesting_is_refused(suffix: str, text: str, tmp_path: Path) -> None:
    message = _refused(_write(tmp_path / f"deep{suffix}", text))
    assert f"deep{suffix}" in message and ("nested deeper" in message or "nesting depth" in message)


def test_nesting_within_the_bound_reaches_validation(tmp_path: Path) -> None:
    depth = MAX_NESTING - 1
    message = _refused(_write(tmp_path / "ok.json", "[" * depth + "]" * depth))
    assert "expected a mapping" in message


# -- files too big, empty, of the wrong bytes -------------------------------------------------


def test_a_file_over_the_size_limit_is_refused_unread(tmp_path: Path) -> None:
    path = tmp_path / "big.csv"
    path.write_text(",A\nNum_Cores," + "9" * 10_000_000 + "\n")
    assert path.stat().st_size > MAX_TEXT_FILE_BYTES
    assert "larger than 4 MiB" in _refused(path)


def test_a_csv_cell_over_the_csv_field_limit(tmp_path: Path) -> None:
    message = _refused(_write(tmp_path / "cell.csv", ",A\nDescription," + "x" * 200_000 + "\n"))
    assert "not a readable CSV sheet" in message and "field larger than field limit" in message


def test_a_long_number_cell_is_quoted_shortened(tmp_path: Path) -> None:
    message = _refused(_write(tmp_path / "long.csv", SHEET.format(bw="9" * 50_000)))
    assert "50000 characters long, not a number" in message and "..." in message
    assert "row 'Bandwidth', column 'NVL-AX'" in message


def test_non_utf8_csv(tmp_path: Path) -> None:
    content = SHEET.format(bw="342 GB/s").encode() + "é,1\n".encode("latin-1")
    message = _refused(_write(tmp_path / "latin1.csv", content))
    assert "not UTF-8 text (byte 0xe9 at offset" in message and "CSV UTF-8" in message


@pytest.mark.parametrize("name, content, needle", [
    ("empty.csv", b"", "the sheet is empty"),
    ("empty.xlsx", b"", "cannot read as XLSX"),
    ("empty.yaml", b"", "expected a mapping of HardwareSpec fields, got NoneType"),
    ("empty.json", b"", "invalid JSON"),
    ("random.xlsx", os.urandom(4096), "cannot read as XLSX"),
    ("random.yaml", bytes(range(256)) * 8, "empty"),  # not UTF-8: refused as text
    ("random.json", b"\x89PNG\r\n\x1a\n" + bytes(200), "not UTF-8 text"),
    ("nul.csv", b"Parameter,NVL-AX\n\x00\x00\x00,1\n", "missing required row"),
])
def test_empty_and_garbage_files(name: str, content: bytes, needle: str, tmp_path: Path) -> None:
    message = _refused(_write(tmp_path / name, content))
    assert name in message
    if name != "random.yaml":
        assert needle in message
    else:
        assert "not UTF-8 text" in message or "invalid YAML" in message


def _zip(members: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as package:
        for name, data in members.items():
            package.writestr(name, data)
    return out.getvalue()


def test_a_zip_without_a_workbook(tmp_path: Path) -> None:
    message = _refused(_write(tmp_path / "hello.xlsx", _zip({"hello.txt": b"not a workbook"})))
    assert "cannot read as XLSX" in message


def test_an_xlsx_zip_bomb_is_refused_unpacked(tmp_path: Path) -> None:
    data = _zip({"xl/worksheets/sheet1.xml": bytes(MAX_XLSX_UNPACKED_BYTES + 1)})
    assert len(data) < 1_000_000
    message = _refused(_write(tmp_path / "bomb.xlsx", data))
    assert "unpacks to 64 MiB, more than the 64 MiB" in message


def test_too_many_rows(tmp_path: Path) -> None:
    rows = "".join(f"Extra_{i},1\n" for i in range(MAX_SHEET_ROWS + 1))
    message = _refused(_write(tmp_path / "rows.csv", SHEET.format(bw="342 GB/s") + rows))
    assert f"more than the {MAX_SHEET_ROWS} a hardware sheet may have" in message


# -- impossible figures ----------------------------------------------------------------------


H100 = dump_hardware_yaml(load_hardware("h100-sxm"))


@pytest.mark.parametrize("old, new, field", [
    ("bandwidth_bytes_per_s: 3350000000000.0", "bandwidth_bytes_per_s: .inf", "memory.2.bandwidth_bytes_per_s"),
    ("bandwidth_bytes_per_s: 3350000000000.0", "bandwidth_bytes_per_s: .nan", "memory.2.bandwidth_bytes_per_s"),
    ("bandwidth_bytes_per_s: 3350000000000.0", "bandwidth_bytes_per_s: 0", "memory.2.bandwidth_bytes_per_s"),
    ("bandwidth_bytes_per_s: 3350000000000.0", "bandwidth_bytes_per_s: -3.35e12", "memory.2.bandwidth_bytes_per_s"),
    ("bandwidth_bytes_per_s: 3350000000000.0", "bandwidth_bytes_per_s: 3.35 TQ/s", "memory.2.bandwidth_bytes_per_s"),
    ("clock_hz: 1830000000.0", "clock_hz: .inf", "engines.clock_hz"),
    ("clock_hz: 1830000000.0", "clock_hz: 0", "engines.clock_hz"),
    ("vector_flops_per_s: 67000000000000.0", "vector_flops_per_s: .nan", "engines.vector_flops_per_s"),
    ("bf16: 989000000000000.0", "bf16: .inf", "engines.peak_flops_per_s"),
    ("bf16: 989000000000000.0", "bf16: -1", "engines.peak_flops_per_s"),
    ("count: 132", "count: 1000000000000000000000000000000", "engines.count"),
    ("count: 132", "count: 0", "engines.count"),
    ("latency_s: ", "latency_s: .inf #", "interconnect.latency_s"),
    ("launch_overhead_s: ", "launch_overhead_s: .inf #", "launch_overhead_s"),
])
def test_impossible_yaml_figures_name_the_field(old: str, new: str, field: str, tmp_path: Path) -> None:
    assert old in H100, old
    message = _refused(_write(tmp_path / "hw.yaml", H100.replace(old, new, 1)))
    assert "hw.yaml" in message and field in message


@pytest.mark.parametrize("cell, needle", [
    ("nan", "'nan' is not a finite number"),
    ("inf GB/s", "'inf GB/s' is not a finite number"),
    ("1e400", "'1e400' is not a finite number"),
    ("-342 GB/s", "'-342 GB/s' must be a finite number > 0"),
    ("0 GB/s", "'0 GB/s' must be a finite number > 0"),
    ("342 GQ/s", "unknown unit 'GQ/s'"),
])
def test_impossible_sheet_figures_name_the_cell(cell: str, needle: str, tmp_path: Path) -> None:
    message = _refused(_write(tmp_path / "chips.csv", SHEET.format(bw=cell)))
    assert needle in message and "line 5, column 2 (row 'Bandwidth', column 'NVL-AX')" in message


def test_a_spec_missing_required_figures(tmp_path: Path) -> None:
    no_engines = "name: x\nmemory:\n  - {name: hbm, capacity_bytes: 1e9, bandwidth_bytes_per_s: 1e12}\n"
    assert "field 'engines': Field required" in _refused(_write(tmp_path / "x.yaml", no_engines))
    no_bandwidth = SHEET.format(bw="342 GB/s").replace("Bandwidth,342 GB/s\n", "")
    assert "missing required row 'Bandwidth'" in _refused(_write(tmp_path / "x.csv", no_bandwidth))


def test_many_bad_fields_are_counted_not_all_listed(tmp_path: Path) -> None:
    extra = "".join(f"extra_{i}: {'v' * 1000}\n" for i in range(50))
    message = _refused(_write(tmp_path / "many.yaml", H100 + extra))
    assert "and 42 more" in message  # 8 listed of 50


def test_quote_bounds_what_it_prints() -> None:
    assert len(quote("x" * 10_000_000)) <= 2 * MAX_QUOTED_CHARS
    nested: Any = ["lol"] * 9
    for _ in range(8):  # 9**9 leaves, shared: quoting must not walk them
        nested = [nested] * 9
    start = time.monotonic()
    assert len(quote(nested)) <= 2 * MAX_QUOTED_CHARS
    assert time.monotonic() - start < 0.1
    assert quote("2.5 GHz") == "'2.5 GHz'"


# -- names, columns, paths -------------------------------------------------------------------


def test_an_unknown_preset_lists_the_known_ones() -> None:
    with pytest.raises(HardwareSpecError, match=r"unknown hardware 'h900': .*presets: a100-pcie, .*nvl-ax"):
        load_hardware("h900")


def test_an_unknown_device_column_lists_the_columns(tmp_path: Path) -> None:
    path = _write(tmp_path / "two.csv", "Parameter,NVL-AX,JGS\n" + "\n".join(
        f"{r.split(',')[0]},{r.split(',')[1]},{r.split(',')[1]}" for r in SHEET.format(bw="1 TB/s").splitlines()[1:]))
    assert "no device column 'TPU'; columns: 'NVL-AX', 'JGS'" in _refused(path, device="TPU")
    assert "pick one of: 'NVL-AX', 'JGS' (--device-column)" in _refused(path)


@pytest.mark.parametrize("source", ["h100-sxm", "spec.yaml", "spec.json"])
def test_a_device_column_is_refused_where_there_are_no_columns(source: str, tmp_path: Path) -> None:
    spec = load_hardware("h100-sxm")
    (tmp_path / "spec.yaml").write_text(dump_hardware_yaml(spec))
    (tmp_path / "spec.json").write_text(json.dumps(json.loads(json.dumps(spec.model_dump(mode="json")))))
    path = source if source == "h100-sxm" else tmp_path / source
    with pytest.raises(HardwareSpecError, match=r"a device column \('X'\) picks a column of a spreadsheet"):
        load_hardware(path, device="X")


@pytest.mark.parametrize("name", ["hwdir", "hw.yaml", "hw.csv"])
def test_a_directory_is_named_as_one(name: str, tmp_path: Path) -> None:
    (tmp_path / name).mkdir()
    assert f"{name}: is a directory; give a hardware file" in _refused(tmp_path / name)


def test_a_fifo_is_not_read(tmp_path: Path) -> None:
    fifo = tmp_path / "hw.yaml"
    os.mkfifo(fifo)
    assert "hw.yaml: not a regular file" in _refused(fifo)


def test_unknown_rows_are_logged_only_when_the_sheet_loads(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    bad = _write(tmp_path / "bad.csv", SHEET.format(bw="fast") + "TDP (W),300\n")
    with caplog.at_level(logging.WARNING, logger="layerscope.hardware.loaders"):
        _refused(bad)
    assert "ignoring unknown row" not in caplog.text  # a failing sheet reports only its error
    good = _write(tmp_path / "good.csv", SHEET.format(bw="1 TB/s") + "TDP (W),300\n")
    with caplog.at_level(logging.WARNING, logger="layerscope.hardware.loaders"):
        load_hardware(good)
    assert "line 6, column 1: ignoring unknown row 'TDP (W)'" in caplog.text


# -- through the installed command -----------------------------------------------------------


CLI_CASES: dict[str, tuple[str, str | bytes, str]] = {
    "billion-laughs": ("hw.yaml", yaml_bomb(), "aliases expand"),
    "bomb-5-level": ("hw.yaml", yaml_bomb(levels=5), "aliases expand"),
    "deep-json": ("hw.json", "[" * 200_000 + "]" * 200_000, "nested deeper than"),
    "random-xlsx": ("hw.xlsx", os.urandom(4096), "cannot read as XLSX"),
    "empty-csv": ("hw.csv", b"", "the sheet is empty"),
    "10mb-cell-csv": ("hw.csv", ",A\nNum_Cores," + "9" * 10_000_000 + "\n", "larger than 4 MiB"),
    "latin1-csv": ("hw.csv", ",A\nNum_Cores,32\nDescription,caf\xe9\n".encode("latin-1"), "not UTF-8 text"),
    "inf-bandwidth": ("hw.yaml", H100.replace("bandwidth_bytes_per_s: 3350000000000.0", "bandwidth_bytes_per_s: .inf"),
                      "finite"),
}


@pytest.mark.parametrize("case", sorted(CLI_CASES))
def test_cli_refuses_in_one_line(case: str, tmp_path: Path, run_cli: Any) -> None:
    name, content, needle = CLI_CASES[case]
    path = _write(tmp_path / name, content)
    start = time.monotonic()
    out = run_cli("estimate", "--model", "llama-3.2-1b", "--hardware", str(path), timeout=60)
    assert time.monotonic() - start < 30
    assert out.returncode == 2, out.stderr[-2000:]
    lines = out.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), out.stderr[-2000:]
    assert len(lines[0]) <= 560 and needle in lines[0] and name in lines[0]
    assert "Traceback" not in out.stderr + out.stdout


def test_cli_directory_and_device_column(tmp_path: Path, run_cli: Any) -> None:
    out = run_cli("estimate", "--hardware", str(tmp_path))
    assert out.returncode == 2 and "is a directory" in out.stderr
    out = run_cli("estimate", "--hardware", "h100-sxm", "--device-column", "NVL-AX")
    assert out.returncode == 2 and "picks a column of a spreadsheet" in out.stderr
