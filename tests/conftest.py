"""Suite-wide settings and the fixture that runs the installed ``layerscope`` command."""

from __future__ import annotations

import ast
import functools
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import pytest
from hypothesis import settings

# No test reads or writes the user's own machine specs: calibrate keeps one there and demo prefers it, which
# would make a demo test time on whatever the developer calibrated last.
os.environ["LAYERSCOPE_MACHINES_DIR"] = tempfile.mkdtemp(prefix="layerscope-machines-")

# Most CLI tests start a `layerscope` process. Where PYTHONDONTWRITEBYTECODE is set (this machine's environment
# sets it), every such process would compile the whole package from source again, ~0.35 s each: the processes
# keep their bytecode under one temporary prefix instead, so only the first compiles (the checkout is untouched).
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
os.environ.setdefault("PYTHONPYCACHEPREFIX", tempfile.mkdtemp(prefix="layerscope-pycache-"))

# CI runs a fixed, reproducible set of examples (a red CI must be reproducible); local runs explore.
settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")


def modules_loaded(code: str, names: Iterable[str]) -> list[str]:
    """Which of ``names`` a fresh interpreter has imported after running ``code`` (sorted): what a command or an
    import costs a process is what it loads."""
    probe = f"{code}\nimport sys\nprint(sorted(m for m in {sorted(names)!r} if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    loaded: list[str] = ast.literal_eval(done.stdout.strip().splitlines()[-1])
    return loaded


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
def playwright_session() -> Iterator[object]:
    """One started sync Playwright for the session: the Perfetto oracle and the report's browser tests launch
    their Chromium from it (Playwright's sync API refuses a second instance in a thread that runs one).
    Skips where Playwright is not installed."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("Playwright is not installed: pip install -e '.[oracle]'")
    playwright = sync_playwright().start()
    try:
        yield playwright
    finally:
        playwright.stop()


@pytest.fixture(scope="session")
def perfetto_oracle(request: pytest.FixtureRequest) -> Iterator[object]:
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
    with oracle.PerfettoOracle(playwright=request.getfixturevalue("playwright_session")) as session:
        yield session


#: A real run's measurements file: a tiny fp32 + bf16 grid on the 2-core reference VM, under load.
KEPT_CALIBRATION = Path(__file__).parent / "data" / "calibration" / "tiny.measurements.json"
#: How much slower a disturbed GEMV reference reads: its weight-stream bandwidth (1.7 GB/s in the kept
#: run) then fits at 35 MB/s, below the 100 MB/s floor of a CPU.
REFERENCE_SLOWDOWN = 50.0

ReplayFn = Callable[..., list[int]]


@pytest.fixture
def replay_calibration(monkeypatch: pytest.MonkeyPatch) -> ReplayFn:
    """Make ``calibrate`` replay :data:`KEPT_CALIBRATION` instead of measuring: the same session (tasks,
    checkpoints, re-measuring, the fit), each task appending its rows of the kept run, in milliseconds and
    the same on any machine. ``replay(slow_calls=N)`` makes the first N takes of the GEMV reference rows
    (2048 x 2048 fp32 weights beyond the LLC) :data:`REFERENCE_SLOWDOWN` times slower, as a busy machine
    can; it returns a one-item list counting the reference takes."""
    import contextlib
    from types import SimpleNamespace

    from layerscope.capture import calibrate as module
    from layerscope.hardware.calibration import read_calibration_run

    run = read_calibration_run(KEPT_CALIBRATION)
    meas = run.measurements

    def replay(slow_calls: int = 0) -> list[int]:
        calls = [0]

        def plan(device: str, grid: object, quick: bool) -> object:
            if device != "cpu":
                raise module.CaptureError(f"calibrate: device {device!r}: use cpu or cuda")
            tables = module._Tables()
            tasks: list[tuple[str, Callable[[], None]]] = []

            def add_row(name: str, row: dict[str, object], reference: bool) -> None:
                if reference:
                    calls[0] += 1
                    if calls[0] <= slow_calls:
                        row = {**row, "time_s": REFERENCE_SLOWDOWN * row["time_s"],  # type: ignore[operator]
                               "median_s": REFERENCE_SLOWDOWN * row["median_s"]}  # type: ignore[operator]
                tables.add(getattr(tables, name), **row)

            def add_samples(name: str, samples: list[float]) -> None:
                getattr(tables, name).extend(samples)

            for name, value in vars(tables).items():
                source = getattr(meas, name)
                if not isinstance(value, dict):
                    tasks.append((name, functools.partial(add_samples, name, list(source))))
                    continue
                columns = {column: list(getattr(source, column)) for column in value}
                for i in range(len(next(iter(columns.values())))):
                    row = {column: values[i] for column, values in columns.items()}
                    reference = name == "stream" and row["kernel"] == "gemv"
                    tasks.append((f"{name} {i}", functools.partial(add_row, name, row, reference)))
            return module._Session(
                torch=SimpleNamespace(inference_mode=contextlib.nullcontext), tasks=tasks, tables=tables,
                levels=run.memory_levels, llc_bytes=run.llc_bytes, release=lambda: None,
                meta={"device": meas.device, "device_name": meas.device_name, "threads": meas.threads,
                      "torch_version": meas.torch_version, "quick": quick})

        monkeypatch.setattr(module, "_plan", plan)
        return calls

    return replay


@pytest.fixture(autouse=True)
def _own_machines_dir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test its own (empty) folder of kept machine specs: a spec one test's calibrate keeps is never the one
    another test's demo times on."""
    monkeypatch.setenv("LAYERSCOPE_MACHINES_DIR", str(tmp_path_factory.mktemp("machines")))
