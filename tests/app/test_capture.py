"""``app.capture``: one request in, one result model out; the result is the capture layer's, field for field,
and ``capture --json`` is its dump."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from layerscope.app.capture import CaptureRequest, CaptureResult, capture, result_of
from layerscope.app.requests import build_request
from layerscope.errors import CaptureError
from layerscope.model import tiny_config


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(tiny_config("llama")))
    return path


def test_bad_request_fields_are_named(tmp_path: Path):
    """Refused before torch loads: the capture layer's checks name the field."""
    with pytest.raises(CaptureError, match="batch"):
        build_request(CaptureRequest, CaptureError, model="gpt2", batch="many")
    with pytest.raises(CaptureError, match="unprofiled"):
        build_request(CaptureRequest, CaptureError, model="gpt2", unprofiled="sometimes")
    for field, value in (("batch", 0), ("prompt_len", 0), ("decode_steps", -1), ("iterations", 0)):
        with pytest.raises(CaptureError, match=f"{field}: {value} is out of range"):
            capture(CaptureRequest(model="gpt2", out=tmp_path / "t.json.gz", **{field: value}))  # type: ignore[arg-type]
    with pytest.raises(CaptureError, match="paged"):
        capture(CaptureRequest(model="gpt2", cache="paged"))


def test_result_is_the_capture_layers_and_the_cli_json_its_dump(config: Path, tmp_path: Path):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from layerscope.capture import capture as run_capture

    run = run_capture(str(config), prompt_len=4, decode_steps=1, warmup=0, out=tmp_path / "a.json.gz")
    result = result_of(run)
    # every key, in order, and every value of the capture layer's own dump (what capture --json printed)
    assert result.model_dump(mode="json") == run.model_dump(mode="json")
    assert list(json.loads(result.model_dump_json())) == list(run.model_dump(mode="json"))
    assert CaptureResult.model_validate_json(result.model_dump_json()) == result

    from layerscope.cli.app import app

    out = tmp_path / "b.json.gz"
    cli = CliRunner().invoke(app, ["capture", "--model", str(config), "--prompt-len", "4", "--decode-steps", "1",
                                   "--warmup", "0", "--out", str(out), "--json"])
    assert cli.exit_code == 0, cli.output
    printed = json.loads(cli.stdout)
    assert printed["trace_path"] == str(out) and out.is_file()
    parsed = CaptureResult.model_validate(printed)  # the JSON is a dump of the result model: it parses back
    assert [(r.phase, r.name) for r in parsed.summary] == [(r.phase, r.name) for r in result.summary]
    assert parsed.model_dump(exclude={"trace_path", "phases", "summary", "profiler_event"}) == result.model_dump(
        exclude={"trace_path", "phases", "summary", "profiler_event"})  # the rest measures
