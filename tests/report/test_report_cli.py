"""``layerscope report`` through the installed entry point: exit codes, one-line errors, the file it writes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from tests.conftest import layerscope_command

pytest.importorskip("plotly", reason="the report's charts need plotly: pip install 'layerscope[report]'")


def _one_error_line(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 2, (done.returncode, done.stderr[-2000:])
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    return lines[0]


def test_several_kinds_in_one_file(run_cli, estimate_json: Path, serving_json: Path, plan_json: Path,
                                   tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    done = run_cli("report", str(estimate_json), str(serving_json), str(plan_json), "--out", str(out), "--json")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["out"] == str(out) and doc["bytes"] == out.stat().st_size > 4_000_000  # plotly.js inlined
    assert [s["kind"] for s in doc["sections"]] == ["estimate", "serving", "plan"]
    ids = [c["id"] for s in doc["sections"] for c in s["charts"]]
    assert ids == ["doc0-time-by-kind", "doc0-time-by-layer-decode", "doc0-roofline", "doc1-latency-cdfs",
                   "doc1-serving-over-time", "doc2-plan-ranking", "doc2-plan-tradeoff", "doc2-plan-failures"]
    assert all(c["traces"] > 0 and c["points"] > 0 for s in doc["sections"] for c in s["charts"])
    text = out.read_text(encoding="utf-8")
    assert all(f'id="{i}"' in text for i in ids)


def test_human_output_names_the_charts_and_the_file(run_cli, simulate_json: Path, tmp_path: Path) -> None:
    out = tmp_path / "sweep.html"
    done = run_cli("report", str(simulate_json), "-o", str(out))
    assert done.returncode == 0, done.stderr
    assert f"{simulate_json} (simulate): engine-sweep, engine-utilization" in done.stdout
    assert f"wrote {out} (" in done.stdout and done.stderr == ""


def test_an_existing_output_is_replaced_as_every_command_replaces_its_outputs(run_cli, simulate_json: Path,
                                                                              tmp_path: Path) -> None:
    out = tmp_path / "r.html"
    out.write_text("old")
    done = run_cli("report", str(simulate_json), "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert out.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")


@pytest.mark.parametrize(("content", "message"), [
    ('{"a": 1}', "is not the --json output of a command the report reads"),
    ("not json", "is not JSON"),
    ("[]", "holds a JSON list, not an object"),
])
def test_bad_documents_exit_2_and_write_nothing(run_cli, tmp_path: Path, content: str, message: str) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    out = tmp_path / "r.html"
    line = _one_error_line(run_cli("report", str(bad), "--out", str(out)))
    assert message in line and str(bad) in line
    assert not out.exists() and [p.name for p in tmp_path.iterdir()] == ["bad.json"]


def test_an_invalid_document_names_its_command_and_field(run_cli, plan_json: Path, tmp_path: Path) -> None:
    doc = json.loads(plan_json.read_text())
    doc["plans"][0]["gpus"] = "eight"
    bad = tmp_path / "plan.json"
    bad.write_text(json.dumps(doc))
    line = _one_error_line(run_cli("report", str(bad), "--out", str(tmp_path / "r.html")))
    assert "looks like `plan --json` output but is not valid: plans.0.gpus:" in line


@pytest.mark.parametrize("case", ["missing input", "output is the input", "no output folder", "no input"])
def test_bad_paths_exit_2(run_cli, estimate_json: Path, tmp_path: Path, case: str) -> None:
    before = estimate_json.read_bytes()
    args = {"missing input": [str(tmp_path / "nope.json"), "--out", str(tmp_path / "r.html")],
            "output is the input": [str(estimate_json), "--out", str(estimate_json)],
            "no output folder": [str(estimate_json), "--out", str(tmp_path / "no" / "r.html")],
            "no input": ["--out", str(tmp_path / "r.html")]}[case]
    line = _one_error_line(run_cli("report", *args))
    assert {"missing input": "does not exist", "output is the input": "refusing to overwrite the input",
            "no output folder": "does not exist", "no input": "Missing argument"}[case] in line
    assert estimate_json.read_bytes() == before
    assert not (tmp_path / "r.html").exists()


def test_without_plotly_the_error_names_the_extra(estimate_json: Path, tmp_path: Path) -> None:
    """The entry point's ``main`` with plotly made unimportable (``sys.modules['plotly'] = None``)."""
    entry = Path(layerscope_command()[0])
    assert entry.is_file()
    code = ("import sys; sys.modules['plotly'] = None; from layerscope.cli.app import main; "
            f"sys.argv = ['layerscope', 'report', {str(estimate_json)!r}, '--out', {str(tmp_path / 'r.html')!r}]; "
            "main()")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    line = _one_error_line(done)
    assert "plotly, which is not installed: pip install 'layerscope[report]'" in line
    assert not (tmp_path / "r.html").exists()
