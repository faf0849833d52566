"""``layerscope capture``: the table, ``--json`` and ``--open`` without a Perfetto server."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from layerscope.cli.app import app
from layerscope.model import tiny_config

pytest.importorskip("torch")
pytest.importorskip("transformers")


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(tiny_config("qwen3_moe")))
    return path


def test_json_output(config: Path, tmp_path: Path) -> None:
    out = tmp_path / "trace.json.gz"
    result = CliRunner().invoke(app, ["capture", "--model", str(config), "--prompt-len", "6", "--decode-steps", "1",
                                      "--warmup", "0", "--out", str(out), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["trace_path"] == str(out) and out.is_file()
    assert data["weights"] == "random" and data["model_type"] == "qwen3_moe"
    assert [p["name"] for p in data["phases"]] == ["prefill", "decode_step_0"]
    experts = {(r["phase"], r["name"]): r for r in data["summary"]}[("prefill", "layers.0.mlp.experts")]
    assert experts["calls"] == 1 and experts["total_ms"] > 0


def test_table_and_open_without_server(config: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "layerscope.trace.serve", None)  # no server: --open prints the path
    out = tmp_path / "trace.json.gz"
    result = CliRunner().invoke(app, ["capture", "--model", str(config), "--prompt-len", "6", "--warmup", "0",
                                      "--out", str(out), "--open", "--top", "5"])
    assert result.exit_code == 0, result.output
    assert "modules by time (5 of" in result.stdout and "prefill" in result.stdout
    assert f"trace: {out}" in result.stdout.replace("\n", "")
    assert "https://ui.perfetto.dev" in result.stderr


@pytest.mark.parametrize(("content", "model", "message"), [
    (b"\x00\xff not json", None, "not a JSON config"),
    (b"{}", "gpt22", "gpt2"),  # an unknown name, with the near one
])
def test_a_bad_model_is_refused_before_torch_loads(tmp_path: Path, content: bytes, model: str | None,
                                                   message: str) -> None:
    import subprocess

    config = tmp_path / "config.json"
    config.write_bytes(content)
    code = ("import sys; from layerscope.cli.app import main\n"
            f"sys.argv = ['layerscope', 'capture', '--model', {model or str(config)!r}, '--prompt-len', '8']\n"
            "try:\n    main()\nexcept SystemExit as exc:\n    print('exit', exc.code, 'torch' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.stdout.split()[-3:] == ["exit", "2", "False"], done.stderr
    assert message in done.stderr
