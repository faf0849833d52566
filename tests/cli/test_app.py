"""The console entry point (:func:`layerscope.cli.app.main`): usage errors are messages with exit code 2."""

from __future__ import annotations

import subprocess
from collections.abc import Callable

import pytest

Run = Callable[..., subprocess.CompletedProcess[str]]


@pytest.mark.parametrize(("args", "message"), [
    (("analyze", "trace.json", "--no-such-option"), "No such option: --no-such-option"),
    (("no-such-command",), "No such command 'no-such-command'"),
    (("estimate", "-m", "llama-3.2-1b", "--batch", "many"), "Invalid value for '--batch'"),
])
def test_usage_errors_exit_2_without_traceback(run_cli: Run, args: tuple[str, ...], message: str) -> None:
    # typer >= 0.29 vendors click: its usage errors are not click.ClickException subclasses.
    done = run_cli(*args)
    assert done.returncode == 2, done.stderr
    assert message in done.stderr
    assert "Traceback" not in done.stderr


def test_layerscope_error_is_one_line_exit_2(run_cli: Run) -> None:
    done = run_cli("analyze", "/nonexistent/trace.json")
    assert done.returncode == 2
    assert done.stderr.startswith("error: ") and "does not exist" in done.stderr
    assert "Traceback" not in done.stderr
