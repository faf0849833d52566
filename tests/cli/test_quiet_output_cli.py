"""Quiet, consistent output (issue #31, point 6), through the installed entry point: a plain run of ``capture``,
``validate`` or ``demo`` prints no third-party warning and none of the profiler's native lines on stderr (``-v``
logs them); on a terminal they draw a progress bar on stderr, none with ``--json``; errors print as percentages.
Analyze's units: tests/cli/test_analyze_cli.py."""

from __future__ import annotations

import json
import os
import pty
import re
import subprocess
from pathlib import Path

import pytest
from tests.conftest import layerscope_command

from layerscope.model import tiny_config

pytest.importorskip("torch")
pytest.importorskip("transformers")

#: What a stray warning or the profiler's chatter looks like on stderr.
NOISE = re.compile(r"warn|USDT|profiler_start|profiler_stop|STAGE:|Traceback", re.IGNORECASE)


@pytest.fixture(scope="module")
def config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("tiny") / "config.json"
    path.write_text(json.dumps(tiny_config("llama")))
    return path


def run_on_terminal(*args: str, env: dict[str, str] | None = None, timeout: float = 300
                    ) -> tuple[int, str, str]:
    """Run ``layerscope ARGS`` with stderr on a pseudo-terminal (as a user's shell has it) and stdout on a pipe;
    returns the exit code, stdout and what the terminal showed (escape sequences removed)."""
    master, slave = pty.openpty()
    proc = subprocess.Popen([*layerscope_command(), *args], stdout=subprocess.PIPE, stderr=slave,
                            stdin=subprocess.DEVNULL, env={**os.environ, **(env or {})})
    os.close(slave)
    shown = bytearray()
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        shown += chunk
    os.close(master)
    assert proc.stdout is not None
    stdout = proc.stdout.read().decode()
    code = proc.wait(timeout=timeout)
    terminal = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", shown.decode("utf-8", "replace"))
    return code, stdout, terminal


def test_capture_is_quiet_and_draws_a_progress_bar_on_a_terminal(config: Path, tmp_path: Path) -> None:
    code, stdout, terminal = run_on_terminal("capture", "--model", str(config), "--prompt-len", "4", "--warmup",
                                             "1", "--out", str(tmp_path / "t.json.gz"), "--top", "3")
    assert code == 0, terminal
    assert "random weights" in stdout  # what the warning said is in the result
    assert not NOISE.search(terminal), terminal
    # The bar: its name, done of total, each step as it starts (redrawn in place, then cleared).
    for step in ("capture", "loading the model", "measuring the profiler's own cost", "warm-up 1/1 (profiler)",
                 "profiled iteration 1/1", "writing the trace", "5/5"):
        assert step in terminal, step


@pytest.mark.slow  # 13 s (two captures); make test keeps the capture's quiet stderr
def test_verbose_logs_what_a_plain_run_hides_and_json_draws_no_bar(config: Path, tmp_path: Path) -> None:
    code, stdout, terminal = run_on_terminal("-v", "capture", "--model", str(config), "--prompt-len", "4",
                                             "--warmup", "0", "--out", str(tmp_path / "t.json.gz"), "--json")
    assert code == 0, terminal
    assert json.loads(stdout)["weights"] == "random"
    # The profiler's native lines and the random-weights note, as log records.
    assert "INFO layerscope.capture.quiet: torch profiler: USDT:" in terminal and "profiler_start" in terminal
    assert "no weights found (config only); building it with random weights" in terminal
    assert "profiled iteration" not in terminal and "━" not in terminal  # --json: no bar


@pytest.mark.slow  # 13 s (a validate run); make test keeps the capture's quiet stderr
def test_validate_is_quiet_and_prints_errors_as_percentages(run_cli, config: Path, tmp_path: Path) -> None:
    proc = run_cli("validate", "--model", str(config), "--hardware", "server-cpu", "--prompt-len", "6", "--warmup",
                   "0", "--iterations", "1", "--no-probe", "--profiled-times", "--threads", "1",
                   "--out", str(tmp_path / "v"), "--top", "50", timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    per_op = [line for line in proc.stdout.splitlines() if line.startswith("│ ") and "│ module │" in line]
    assert per_op and all(re.search(r"│\s+[+-]\d+% │$", line) for line in per_op), per_op
    assert re.search(r"prefill forward: predicted .+, error [+-]\d+%; per-op median \|error\| \d+%, p90 \d+%",
                     proc.stdout)


@pytest.mark.slow  # about a minute here: the machine checks and the profiler's A/B; in-process: tests/app/test_demo.py
def test_demo_is_quiet_and_ends_with_its_files_and_what_to_open(run_cli, config: Path, tmp_path: Path) -> None:
    out = tmp_path / "demo"
    proc = run_cli("demo", "--model", str(config), "--hardware", "server-cpu", "--prompt-len", "8", "--iterations",
                   "1", "--engines", "2", "--out", str(out), timeout=600,
                   env={"LAYERSCOPE_MACHINES_DIR": str(tmp_path / "machines")})
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    tail = proc.stdout[proc.stdout.index("Files written"):]
    written = sorted(p.name for p in out.iterdir())
    assert written == ["captured.json.gz", "simulated-1engine.json.gz", "simulated-2engines.json.gz",
                       "simulated-prefill.json.gz", "validation.json"]
    for name in written:
        assert str(out / name) in tail, name
    assert f"layerscope open {out / 'simulated-2engines.json.gz'}" in tail
    assert f"layerscope open {out / 'captured.json.gz'}" in tail
    assert f"layerscope compare --sim {out / 'simulated-prefill.json.gz'} --real {out / 'captured.json.gz'}" in tail
