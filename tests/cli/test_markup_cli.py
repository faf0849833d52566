"""Names from user files print as they are, in every command that renders them (layerscope/cli/common.py).

A hardware sheet's name is data: rich must neither read ``[/bold]`` as markup (it would raise) nor turn
``:x:`` into an emoji. Traces' names are covered in test_analyze_cli.py.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

import layerscope.hardware

Run = Callable[..., subprocess.CompletedProcess[str]]
NAME = "[/bold] :x: [red]r[/red] [link=file:///etc/passwd]p[/link]"
PRESET = Path(layerscope.hardware.__file__).parent / "presets" / "h100-sxm.yaml"


@pytest.fixture()
def sheet(tmp_path: Path) -> Path:
    text = PRESET.read_text().replace("name: h100-sxm", f"name: '{NAME}'", 1)
    text = text.replace("description: NVIDIA", "description: ':warning: [/] NVIDIA", 1).replace(
        "3.35 TB/s)", "3.35 TB/s)'", 1)
    path = tmp_path / "[chip] :x:.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("command", [["hardware"], ["estimate"], ["simulate", "--engines", "2"]])
def test_a_sheet_name_prints_literally(run_cli: Run, sheet: Path, command: list[str]) -> None:
    out = run_cli(*command, "--hardware", str(sheet))
    assert out.returncode == 0, out.stderr
    assert NAME in out.stdout
    assert "❌" not in out.stdout and "⚠" not in out.stdout
    if command == ["hardware"]:
        assert str(sheet) in out.stdout and ":warning: [/] NVIDIA" in out.stdout
