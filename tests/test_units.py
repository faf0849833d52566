"""``layerscope.units``: the output guard every writer passes and its temporaries."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from layerscope.errors import OutputError
from layerscope.units import (
    STALE_TEMP_S,
    atomic_write,
    check_output,
    note_input,
    reading_inputs,
    remove_stale_temporaries,
)


def _write(path: Path, text: str = "x") -> Path:
    path.write_text(text)
    return path


def test_refuses_an_input_named_directly_through_dotdot_and_a_symlink(tmp_path: Path) -> None:
    cfg = _write(tmp_path / "cfg.json", "{}")
    (tmp_path / "hw").mkdir()
    ok = _write(tmp_path / "hw" / "ok.yaml", "a: 1")
    (tmp_path / "link.json").symlink_to(cfg)
    for out, src in ((cfg, cfg), (tmp_path / "hw" / ".." / "hw" / "ok.yaml", ok), (tmp_path / "link.json", cfg)):
        with pytest.raises(OutputError, match="refusing to overwrite the input"):
            check_output(out, inputs=(src,))
    assert cfg.read_text() == "{}" and ok.read_text() == "a: 1"


def test_refuses_a_hard_link_to_an_input(tmp_path: Path) -> None:
    cfg = _write(tmp_path / "cfg.json", "{}")
    os.link(cfg, tmp_path / "hard.json")
    with pytest.raises(OutputError, match="refusing"), atomic_write(tmp_path / "hard.json", "w", inputs=(cfg,)) as fh:
        fh.write("lost")
    assert cfg.read_text() == "{}"


def test_a_file_inside_an_input_directory_is_an_input_a_new_file_is_not(tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    config = _write(model / "config.json", "{}")
    with pytest.raises(OutputError, match="inside the input directory"):
        check_output(config, inputs=(model,))
    assert check_output(model / "trace.json", inputs=(model,)) == (model / "trace.json").resolve()


def test_inputs_noted_by_loaders_guard_writers_inside_the_scope_only(tmp_path: Path) -> None:
    sheet = _write(tmp_path / "hw.csv", "name,a\n")
    with reading_inputs():
        note_input(sheet)
        with pytest.raises(OutputError, match=r"hw\.csv"), atomic_write(sheet, "w") as fh:
            fh.write("lost")
    assert sheet.read_text() == "name,a\n"
    note_input(sheet)  # outside a scope nothing is remembered: library callers pass inputs=
    with atomic_write(sheet, "w") as fh:
        fh.write("replaced")
    assert sheet.read_text() == "replaced"


def test_unwritable_places_are_output_errors_naming_the_path(tmp_path: Path) -> None:
    with pytest.raises(OutputError, match="does not exist"), atomic_write(tmp_path / "missing" / "x.json") as fh:
        fh.write(b"x")
    with pytest.raises(OutputError, match="is a directory"), atomic_write(tmp_path) as fh:
        fh.write(b"x")
    with pytest.raises(OutputError, match=r"cannot write '/proc/layerscope-test\.json'"), \
            atomic_write("/proc/layerscope-test.json") as fh:
        fh.write(b"x")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories")
def test_read_only_directory_is_an_output_error(tmp_path: Path) -> None:
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        with pytest.raises(OutputError, match="cannot write"), atomic_write(ro / "x.json") as fh:
            fh.write(b"x")
    finally:
        ro.chmod(0o755)


def test_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path: Path) -> None:
    out = _write(tmp_path / "out.json", "old")
    with pytest.raises(RuntimeError), atomic_write(out, "w") as fh:
        fh.write("half")
        raise RuntimeError("boom")
    assert out.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]


def test_a_killed_writers_temporary_is_removed_by_the_next_write(tmp_path: Path) -> None:
    # A writer killed with SIGKILL between mkstemp and the rename leaves .out.json.<pid>.<random>.tmp.
    code = ("import os, sys; from layerscope.units import atomic_write\n"
            "with atomic_write(sys.argv[1], 'w') as fh:\n"
            "    fh.write('half'); fh.flush(); os.kill(os.getpid(), 9)\n")
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path / "out.json")], capture_output=True)
    assert done.returncode == -9
    left = [p.name for p in tmp_path.iterdir()]
    assert len(left) == 1 and left[0].startswith(".out.json.") and left[0].endswith(".tmp"), left
    with atomic_write(tmp_path / "out.json", "w") as fh:
        fh.write("whole")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json"]
    assert (tmp_path / "out.json").read_text() == "whole"


def test_a_live_writers_temporary_and_others_files_are_kept(tmp_path: Path) -> None:
    live = _write(tmp_path / f".out.json.{os.getpid()}.abc.tmp")
    old_style = _write(tmp_path / ".out.json.abc123.tmp")
    fresh_old_style = _write(tmp_path / ".out.json.def456.tmp")
    other = _write(tmp_path / ".other.json.1.abc.tmp")
    past = time.time() - 2 * STALE_TEMP_S
    os.utime(old_style, (past, past))
    removed = remove_stale_temporaries(tmp_path, "out.json")
    assert removed == [old_style]
    assert live.exists() and fresh_old_style.exists() and other.exists()


def test_json_value_converts_what_sql_results_and_results_hold():
    import datetime
    import decimal
    import enum
    import uuid

    from layerscope.units import json_value

    class Colour(enum.Enum):
        RED = "red"

    assert json_value({"a": [1, 2.5, float("nan"), (True, None)]}) == {"a": [1, 2.5, None, [True, None]]}
    assert json_value(datetime.date(2026, 11, 26)) == "2026-11-26"
    assert json_value(datetime.timedelta(milliseconds=1500)) == 1.5
    assert json_value(decimal.Decimal("3")) == 3 and json_value(decimal.Decimal("0.25")) == 0.25
    assert json_value(decimal.Decimal("NaN")) is None
    assert json_value(uuid.UUID(int=1)) == "00000000-0000-0000-0000-000000000001"
    assert json_value(b"ok\xff") == "ok\\xff"
    assert json_value(Colour.RED) == "red"
    with pytest.raises(TypeError, match="object"):
        json_value(object())


def test_readable_seconds_by_magnitude() -> None:
    from layerscope.units import readable_seconds

    assert readable_seconds(1.5) == "1.500 s"
    assert readable_seconds(0.0123) == "12.300 ms"
    assert readable_seconds(-4.5e-6) == "-4.50 µs"
    assert readable_seconds(3e-9) == "3 ns"
    assert readable_seconds(0.0) == "0 ns"
    assert readable_seconds(1.2345e-5, significant=3) == "12.3 µs"
    assert readable_seconds(None, missing="n/a") == "n/a" and readable_seconds(float("nan")) == "-"
