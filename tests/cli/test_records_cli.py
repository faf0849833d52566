"""``layerscope workloads`` and ``layerscope verify``: files, --json, exit codes 0 / 1 / 2."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from layerscope.cli.app import app
from layerscope.model import tiny_config

Run = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(tiny_config("qwen3_moe")))
    return path


def _invoke(*args: str) -> object:
    return CliRunner().invoke(app, list(args))


def test_from_graph_json_and_files(tmp_path: Path) -> None:
    out = tmp_path / "r"
    result = _invoke("workloads", "--model", "meta-llama/Llama-3.1-70B", "--from-graph", "--layers", "2",
                     "--prompt-len", "16", "--decode-steps", "1", "--out", str(out), "--json")
    assert result.exit_code == 0, result.output  # type: ignore[attr-defined]
    data = json.loads(result.stdout)  # type: ignore[attr-defined]
    rows = {r["definition"]: r for r in data["records"]}
    assert rows["rmsnorm_h8192"]["layers"] == 2 and rows["rmsnorm_h8192"]["calls"] == 2 * (2 * 2 + 1)
    assert (out / "definitions/gqa_ragged/gqa_ragged_prefill_causal_h64_kv8_d128.json").is_file()
    assert (out / "workloads/gqa_paged/gqa_paged_decode_h64_kv8_d128.jsonl").is_file()
    ok = _invoke("verify", "--traces", str(out), "--model", "meta-llama/Llama-3.1-70B", "--json")
    assert ok.exit_code == 0, ok.output  # type: ignore[attr-defined]
    assert json.loads(ok.stdout)["ok"] is True  # type: ignore[attr-defined]


def test_verify_exits_1_with_a_report_on_gaps(tmp_path: Path) -> None:
    out = tmp_path / "r"
    assert _invoke("workloads", "--model", "Qwen/Qwen3-30B-A3B", "--from-graph", "--layers", "2", "--prompt-len", "4",
                   "--out", str(out)).exit_code == 0  # type: ignore[attr-defined]
    calls = out / "calls.json"
    data = json.loads(calls.read_text())
    data["calls"] = [c for c in data["calls"] if c["category"] != "moe_experts"]
    calls.write_text(json.dumps(data))
    result = _invoke("verify", "--traces", str(out), "--model", "Qwen/Qwen3-30B-A3B")
    assert result.exit_code == 1
    assert "missing_category moe_experts: moe_experts: expected moe_fused_e128_h2048_i768_topk8" in result.output  # type: ignore[attr-defined]


def test_bad_input_exits_2_without_traceback(run_cli: Run, tmp_path: Path) -> None:
    missing = run_cli("verify", "--traces", str(tmp_path / "nope"), "--model", "meta-llama/Llama-3.1-70B")
    assert missing.returncode == 2 and "does not exist" in missing.stderr and "Traceback" not in missing.stderr
    both = run_cli("verify", "--traces", str(tmp_path), "--model", "x", "--against", str(tmp_path))
    assert both.returncode == 2 and "exactly one of --model" in both.stderr
    form = run_cli("workloads", "--model", "meta-llama/Llama-3.1-70B", "--from-graph", "--mla-form", "weird",
                   "--out", str(tmp_path / "o"))
    assert form.returncode == 2 and "unknown form 'weird'" in form.stderr


def test_captured_run_verifies_against_graph(config: Path, tmp_path: Path) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    run, graph = tmp_path / "run", tmp_path / "graph"
    common = ["--model", str(config), "--prompt-len", "5", "--decode-steps", "1"]
    assert _invoke("workloads", *common, "--out", str(run)).exit_code == 0  # type: ignore[attr-defined]
    assert _invoke("workloads", *common, "--from-graph", "--out", str(graph)).exit_code == 0  # type: ignore[attr-defined]
    result = _invoke("verify", "--traces", str(graph), "--against", str(run), "--json")
    assert result.exit_code == 0, result.output  # type: ignore[attr-defined]
    report = json.loads(result.stdout)  # type: ignore[attr-defined]
    assert report["ok"] and {c["category"] for c in report["categories"]} >= {"moe_router", "moe_topk", "moe_experts"}


@pytest.mark.slow  # 15 s; the graph path's size check runs in make test
def test_captured_run_of_a_model_too_big_fails_before_building(run_cli: Run, tmp_path: Path) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    out = tmp_path / "r"
    proc = run_cli("workloads", "--model", "meta-llama/Llama-3.1-405B", "--out", str(out))
    # 405.8e9 params x 2 bytes of bf16 = 811.7 GB of weights, whatever this machine has: capture's guard.
    assert proc.returncode == 2 and "would not fit" in proc.stderr and "weights 811.7 GB" in proc.stderr
    assert "Traceback" not in proc.stderr and not out.exists()
