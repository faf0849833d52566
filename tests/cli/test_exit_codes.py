"""Exit codes of every command, through the installed ``layerscope`` entry point.

0: the command did what was asked; 1: it ran and found what it checks for (``verify``'s gaps);
2: bad input, one ``error:`` line and no traceback. The in-process runner hides the entry
point's handling of the code a command returns, so every case runs the console script."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from layerscope.cli.app import COMMAND_MODULES, app

Run = Callable[..., subprocess.CompletedProcess[str]]


def _commands() -> list[str]:
    import typer.main

    group = typer.main.get_command(app)
    return sorted(group.commands)  # type: ignore[attr-defined]


def test_every_command_module_is_listed() -> None:
    assert len(COMMAND_MODULES) >= 9
    assert {"estimate", "simulate", "capture", "query", "analyze", "compare", "demo", "validate", "calibrate",
            "workloads", "verify", "models", "hardware", "open"} <= set(_commands())


@pytest.mark.parametrize("command", _commands())
def test_help_exits_0_and_every_command_takes_json(run_cli: Run, command: str) -> None:
    done = run_cli(command, "--help")
    assert done.returncode == 0, done.stderr
    assert "--json" in done.stdout, f"{command} has no --json"


@pytest.mark.parametrize("command", _commands())
def test_unknown_option_exits_2_with_one_line(run_cli: Run, command: str) -> None:
    done = run_cli(command, "--no-such-option")
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: No such option: --no-such-option"), done.stderr
    assert f"layerscope {command} --help" in lines[0]


def test_no_arguments_prints_help_and_exits_2(run_cli: Run) -> None:
    done = run_cli()
    assert done.returncode == 2
    assert "Usage: layerscope" in done.stdout + done.stderr and "Traceback" not in done.stderr


@pytest.fixture(scope="module")
def llama_records(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from layerscope.model import load_model_spec
    from layerscope.records.from_graph import records_from_spec

    out = tmp_path_factory.mktemp("records") / "llama"
    records_from_spec(load_model_spec("llama-3.2-1b"), prompt_len=16, decode_steps=2).write(out)
    return out


def test_verify_exits_0_when_covered_and_1_on_gaps(run_cli: Run, llama_records: Path) -> None:
    covered = run_cli("verify", "--traces", str(llama_records), "--model", "llama-3.2-1b")
    assert covered.returncode == 0, covered.stdout + covered.stderr
    gaps = run_cli("verify", "--traces", str(llama_records), "--model", "qwen3-0.6b")
    assert gaps.returncode == 1, gaps.stdout + gaps.stderr
    assert "gap(s)" in gaps.stdout and "Traceback" not in gaps.stderr
    as_json = run_cli("verify", "--traces", str(llama_records), "--model", "qwen3-0.6b", "--json")
    assert as_json.returncode == 1


@pytest.mark.parametrize(("args", "message"), [
    (("estimate", "--model", "llama-3.2-1c"), "model 'llama-3.2-1c' not found"),
    (("estimate", "--batch", "100000000000000000000000"), "batch"),
    (("estimate", "--tp", "3"), "tensor_parallel=3 does not divide the 32 attention heads"),
    (("estimate", "--model", "gpt2", "--phase", "prefill", "--prompt-len", "2000"), "1024 learned positions"),
    (("simulate", "--engines", "0"), "engines"),
    (("hardware", "no-such-chip"), "no-such-chip"),
    (("query", "/nonexistent/trace.json", "SELECT 1"), "does not exist"),
    (("analyze", "/nonexistent/trace.json"), "does not exist"),
    (("compare", "/nonexistent/a.json", "/nonexistent/b.json"), "does not exist"),
    (("verify", "--traces", "/nonexistent/records", "--model", "llama-3.2-1b"), "/nonexistent/records"),
    (("workloads", "--model", "llama-3.2-1c", "--from-graph", "--out", "/tmp/x"), "'llama-3.2-1c' not found"),
    (("validate", "--model", "llama-3.2-1c"), "unknown model 'llama-3.2-1c'"),
    (("capture", "--model", "llama-3.2-1c"), "unknown model 'llama-3.2-1c'"),
    (("calibrate", "--out", "/nonexistent/dir/hw.yaml"), "/nonexistent/dir"),
    (("demo", "--out", "/proc/layerscope-demo"), "layerscope-demo"),
    (("open", "/nonexistent/trace.json"), "/nonexistent/trace.json"),
])
def test_bad_input_exits_2_with_one_line(run_cli: Run, args: tuple[str, ...], message: str) -> None:
    done = run_cli(*args)
    assert done.returncode == 2, (done.returncode, done.stderr[-2000:])
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr[-2000:]
    assert message in lines[0]


def test_a_range_warning_is_not_an_error(run_cli: Run) -> None:
    done = run_cli("estimate", "--phase", "prefill", "--prompt-len", "200000", "--json")
    assert done.returncode == 0, done.stderr
    assert "warning: the longest context, 200000 tokens, exceeds" in done.stderr
    import json

    assert any("max_position_embeddings" in w for w in json.loads(done.stdout)["warnings"])
