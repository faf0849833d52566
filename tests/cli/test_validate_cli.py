"""``layerscope validate``: bad input is a one-line error and exit code 2; the table and ``--json``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from layerscope.cli.app import app
from layerscope.model import tiny_config


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(tiny_config("llama")))
    return path


@pytest.mark.parametrize(("args", "message"), [
    (["--batch", "0"], "batch (--batch): 0 is out of range"),
    (["--decode-steps", "-1"], "decode_steps (--decode-steps): -1 is out of range"),
    (["--repeats", "0"], "repeats (--repeats): 0 is out of range; must be >= 1"),
    (["--repeats", "-2"], "repeats (--repeats): -2 is out of range"),
    (["--prompt-len", "8", "--context", "16"], "disagree"),
    (["--hardware", "no-such-chip"], "no-such-chip"),
    (["--dtype", "int3"], "int3"),
    (["--hardware", "server-cpu", "--cost-model", "no-such-model"], "no-such-model"),
])
def test_bad_input_exits_2(run_cli, config: Path, tmp_path: Path, args: list[str], message: str) -> None:
    if "--cost-model" in args:
        pytest.importorskip("torch")
    proc = run_cli("validate", "--model", str(config), "--out", str(tmp_path / "out"), *args)
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "out" / "captured.json.gz").exists()  # failed before any capture


def test_unknown_model_exits_2(run_cli, tmp_path: Path) -> None:
    proc = run_cli("validate", "--model", "no-such-org/no-such-model", "--out", str(tmp_path / "out"))
    assert proc.returncode == 2 and proc.stderr.startswith("error: ")


@pytest.mark.slow  # the same run in-process: tests/app/test_validate.py::test_validate_tiny_llama_end_to_end
def test_table_and_json(config: Path, tmp_path: Path) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    common = ["validate", "--model", str(config), "--hardware", "server-cpu", "--context", "6", "--decode-steps",
              "1", "--warmup", "0", "--iterations", "1"]
    table = CliRunner().invoke(app, [*common, "--out", str(tmp_path / "a"), "--repeats", "2"])
    assert table.exit_code == 0, table.output
    for text in ("prefill: predicted vs measured", "decode: per kind", "layers.0.self_attn.q_proj",
                 "only measured: rotary_emb", "decode forward: predicted", "medians of 2 captures",
                 "forward measured over 2 captures:", "machine check: measured / predicted", "after capture 2",
                 "256x8192x2048 fp32"):
        assert text in table.stdout, text
    assert (tmp_path / "a" / "captured-2.json.gz").is_file()
    result = CliRunner().invoke(app, [*common, "--out", str(tmp_path / "b"), "--json", "--no-probe"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["machine_probes"] == []
    assert (doc["prompt_len"], doc["decode_steps"], doc["hardware"]) == (6, 1, "server-cpu")
    decode = doc["phases"][1]
    assert decode["phase"] == "decode" and [s["name"] for s in decode["steps"]] == ["decode_step_0"]
    assert {"name", "kind", "rule", "predicted_s", "measured_s", "error"} <= set(decode["ops"][0])
    assert Path(doc["traces"]["captured"]).is_file()
    assert (decode["repeats"], len(decode["forward_measured_all_s"]), decode["forward_spread"]) == (1, 1, None)
    # --json is the result model's dump, and validation.json the same document.
    from layerscope.app.validate import ValidateResult

    assert list(doc) == list(ValidateResult.model_validate(doc).model_dump())
    assert json.loads((tmp_path / "b" / "validation.json").read_text()) == doc
