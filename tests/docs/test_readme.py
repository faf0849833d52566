"""Every command of the README's ```bash blocks, run as written, in order, in one temporary folder.

The commands are read from README.md itself (:func:`readme_commands`): each ```bash block is split
into commands, whole-line comments and trailing ``# comments`` (outside quotes) dropped, ``\\``
continuations joined. Each command runs through the installed ``layerscope`` (the console script
beside this interpreter, :func:`layerscope_command`; its folder first on ``PATH`` for the lines a
shell runs: pipes and ``VAR=value`` prefixes), exits 0, and passes a sanity check of its own output
(:data:`STEPS`: a file it names exists and parses, JSON has the expected keys, numbers a model's
shape fixes, the compare's whole-forward error finite and well away from −100%).

Which command runs where:

* ``test_tour`` (``make test``): the tour in README order without its heavy commands (``Step.heavy``:
  the measuring ``calibrate --quick``, ``validate``, the qwen3-30b-a3b records run with the ``verify``
  of its records, and the traced example script, each tens of seconds to minutes), in about 35 s on
  the 2-core reference VM, most of it the one-layer capture. In place of ``layerscope calibrate
  --quick --out hw.yaml`` it writes what that command leaves behind, from a kept calibration of the
  2-core reference VM (``bench/accuracy-cpu.yaml``: the spec, and its ``calibration.measurements`` as
  ``hw.measurements.json``); the README's own refit line then fits hw.yaml from them, and the
  simulation and the compare after it run on that spec. The other heavy commands leave nothing a
  default command reads. (The ``LAYERSCOPE_TRACE`` mechanism itself is tested by
  tests/capture/test_recorder.py in ``make test``.)
* ``test_tour_slow`` (``make test-slow``): the whole tour as written, the heavy commands included:
  calibrate measures this machine (about a minute of the tour's 3 on the reference VM; more under
  load), and the compare's error, against a calibration of this machine, gets a tighter band.
* ``test_make_demo`` (slow): the set-up block's ``make demo`` is ``layerscope demo --out out/demo``
  (the Makefile's recipe, read and checked here), run end to end through the installed command.
* ``test_readme_commands_are_known``: every README command has an entry in :data:`STEPS` (or is
  excluded by :data:`EXCLUDED`) and every entry is a README command: a new or changed README line
  fails until it is given a check.

Excluded (:data:`EXCLUDED`): the set-up block's ``make test`` (it runs the suite this test is part
of) and ``make demo`` (run by ``test_make_demo`` as the command it stands for, without the install).

Environment of the commands: the repository files they read are copied into the folder
(:data:`REPOSITORY_FILES`; a command naming another repository file fails the known-commands test);
``BROWSER`` names a stand-in browser (:func:`fake_browser`) that Python's :mod:`webbrowser` runs with
the Perfetto UI address, as it would a real one; it fetches the served trace as the UI does, so
``simulate --open`` and ``layerscope open`` return once it was sent; ``LAYERSCOPE_CACHE_DIR`` is inside
the temporary folder, ``NO_COLOR`` and a 200-column terminal make the text checks stable.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import math
import os
import re
import shlex
import shutil
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from tests.conftest import layerscope_command

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
#: Repository files README commands read, copied into the tour's folder under the same path.
REPOSITORY_FILES = ("examples/my_chips.xlsx", "examples/trace_any_model.py")
#: A real ``calibrate --quick`` of the 2-core reference VM, kept with its measurements (bench/ACCURACY.md).
KEPT_SPEC = ROOT / "bench" / "accuracy-cpu.yaml"

#: README commands no tour runs, and why.
EXCLUDED = {
    "make demo": "the install, then `layerscope demo --out out/demo`: test_make_demo runs that command",
    "make test": "runs the test suite this test belongs to",
}


# --- reading the README ------------------------------------------------------------------------------------------

_BASH_BLOCK = re.compile(r"^```bash[ \t]*\n(.*?)^```[ \t]*$", re.S | re.M)


def strip_comment(line: str) -> str:
    """``line`` without its ``# comment``: a ``#`` outside quotes that starts a word, as bash reads it."""
    quote: str | None = None
    escaped = False
    for i, char in enumerate(line):
        if escaped:
            escaped = False
        elif char == "\\" and quote != "'":
            escaped = True
        elif quote is not None:
            if char == quote:
                quote = None
        elif char in "'\"":
            quote = char
        elif char == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip()
    return line.rstrip()


def block_commands(block: str) -> list[str]:
    """The commands of one bash block: comments dropped, ``\\`` continuations joined with one space."""
    commands: list[str] = []
    pending: list[str] = []
    for raw in block.splitlines():
        line = strip_comment(raw)
        if line.endswith("\\"):
            pending.append(line[:-1].strip())
            continue
        if line.strip() or pending:
            commands.append(" ".join([*pending, line.strip()]).strip())
        pending = []
    if pending:
        commands.append(" ".join(pending))
    return [c for c in commands if c]


def readme_commands(text: str | None = None) -> list[str]:
    """Every command of the README's ```bash blocks, in order."""
    text = README.read_text(encoding="utf-8") if text is None else text
    return [c for block in _BASH_BLOCK.findall(text) for c in block_commands(block)]


_SHELL_OPERATORS = frozenset({"|", "||", "&", "&&", ";", "<", ">", ">>", "(", ")"})
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")


def needs_shell(command: str) -> bool:
    """Whether ``command`` needs a shell: a pipe, list or redirection, or ``VAR=value`` before the program."""
    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    tokens = list(lexer)
    return bool(tokens) and (bool(_ASSIGNMENT.match(tokens[0])) or any(t in _SHELL_OPERATORS for t in tokens))


def test_readme_parser_reads_comments_quotes_continuations_and_pipes() -> None:
    text = ("intro\n```bash\n# a comment\nlayerscope models   # trailing\n"
            "layerscope query t \"SELECT '#' AS x\" --json  # not the quoted one\n"
            "layerscope simulate --a 1 \\\n  --b 2   # continued\n\n"
            "echo \"SELECT 1\" | layerscope query t\nA=1 B=x/ python s.py\n```\n"
            "```python\nnot = 'bash'\n```\n")
    assert readme_commands(text) == [
        "layerscope models", "layerscope query t \"SELECT '#' AS x\" --json", "layerscope simulate --a 1 --b 2",
        "echo \"SELECT 1\" | layerscope query t", "A=1 B=x/ python s.py"]
    assert [needs_shell(c) for c in readme_commands(text)] == [False, False, False, True, True]


# --- running commands --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Ran:
    """One command's run, for its check."""

    command: str
    folder: Path
    stdout: str
    stderr: str
    fetched_log: Path
    """Where the stand-in browser notes each trace it fetched (``URL BYTES`` per line)."""
    measured_here: bool
    """Whether hw.yaml comes from a calibration of this machine in this tour (else the kept one)."""

    def file(self, name: str) -> Path:
        path = self.folder / name
        assert path.is_file() and path.stat().st_size > 0, f"{self.command}: {name} missing or empty"
        return path

    def json_out(self) -> object:
        try:
            return json.loads(self.stdout)
        except json.JSONDecodeError as exc:
            raise AssertionError(f"{self.command}: stdout is not JSON ({exc}): {self.stdout[:300]!r}") from None

    def fetched(self) -> dict[str, int]:
        """The traces the stand-in browser fetched: file name → bytes."""
        if not self.fetched_log.is_file():
            return {}
        lines = [line.rsplit(" ", 1) for line in self.fetched_log.read_text().splitlines() if line]
        return {url.rsplit("/", 1)[1]: int(size) for url, size in lines}


_FAKE_BROWSER = '''#!{python}
"""A stand-in browser: does with the Perfetto UI address what ui.perfetto.dev does, fetch its ?url= trace."""
import sys
import urllib.request

url = sys.argv[1].split("?url=", 1)[1]
request = urllib.request.Request(url, headers={{"Origin": "https://ui.perfetto.dev"}})
opener = urllib.request.build_opener(urllib.request.ProxyHandler({{}}))  # loopback, never a proxy
with opener.open(request, timeout=60) as response:
    size = len(response.read())
with open({log!r}, "a") as log:
    log.write(f"{{url}} {{size}}\\n")
'''


def fake_browser(folder: Path) -> tuple[Path, Path]:
    """An executable stand-in browser in ``folder`` and the log it appends to: ``BROWSER`` names it, and
    :func:`webbrowser.open` runs it with the UI address as its one argument."""
    folder.mkdir(parents=True, exist_ok=True)
    script, log = folder / "fetch-like-perfetto", folder / "fetched.log"
    script.write_text(_FAKE_BROWSER.format(python=sys.executable, log=str(log)))
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script, log


def tour_env(tmp: Path, browser: Path) -> dict[str, str]:
    bin_dir = str(Path(layerscope_command()[0]).parent)
    return {**os.environ, "PATH": bin_dir + os.pathsep + os.environ.get("PATH", ""), "BROWSER": str(browser),
            "LAYERSCOPE_CACHE_DIR": str(tmp / "cache"), "NO_COLOR": "1", "COLUMNS": "200"}


def run_command(command: str, folder: Path, env: dict[str, str], timeout_s: float) -> subprocess.CompletedProcess[str]:
    """``command`` in ``folder``: through ``sh -c`` where it needs a shell, else its words with ``layerscope``
    the installed one. A command past ``timeout_s`` is killed with everything it started, and fails."""
    if needs_shell(command):
        args: str | list[str] = command
    else:
        words = shlex.split(command)
        assert words[0] == "layerscope", f"{command}: only layerscope runs without a shell here"
        args = [*layerscope_command(), *words[1:]]
    with subprocess.Popen(args, shell=isinstance(args, str), cwd=folder, env=env, stdin=subprocess.DEVNULL,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          start_new_session=True) as proc:
        try:
            stdout, stderr = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            stdout, stderr = proc.communicate()
            pytest.fail(f"{command}: still running after {timeout_s:.0f} s\nstdout: {stdout[-2000:]}\n"
                        f"stderr: {stderr[-2000:]}")
    return subprocess.CompletedProcess(args, proc.returncode, stdout, stderr)


# --- the checks, one per README command --------------------------------------------------------------------------


def _has(*needles: str) -> Callable[[Ran], None]:
    def check(ran: Ran) -> None:
        for needle in needles:
            assert needle in ran.stdout, f"{ran.command}: {needle!r} not in its output:\n{ran.stdout[-3000:]}"

    return check


def _row(ran: Ran, label: str) -> str:
    """The value cell of the row ``label`` of a rich table in ``ran``'s output."""
    match = re.search(rf"│ {re.escape(label)}\s+│\s+(.+?)\s+│", ran.stdout)
    assert match, f"{ran.command}: no row {label!r} in:\n{ran.stdout[-3000:]}"
    return match.group(1)


def check_estimate_8b_decode(ran: Ran) -> None:
    _has("meta-llama/Llama-3.1-8B on h100-sxm · decode · batch 1")(ran)
    assert _row(ran, "weights") == "16.1 GB"  # 8.03 G parameters x 2 bytes (bf16)
    assert _row(ran, "fits in memory") == "yes"


def check_estimate_json(ran: Ran) -> None:
    doc = ran.json_out()
    assert isinstance(doc, dict)
    assert {"model", "hardware", "workload", "ttft_s", "tpot_s", "e2e_s", "ops", "memory_bytes"} <= set(doc)
    assert doc["model"] == "Qwen/Qwen3-30B-A3B" and doc["hardware"] == "h200" and doc["scope"] == "model"
    assert 0 < doc["ttft_s"] < doc["e2e_s"] and 0 < doc["tpot_s"] < doc["e2e_s"]


def check_estimate_fp8(ran: Ran) -> None:
    _has("deepseek-ai/DeepSeek-V3 on b200 · prefill")(ran)
    assert _row(ran, "weights") == "671 GB"  # 671 G parameters, fp8: one byte each
    assert _row(ran, "fits in memory") == "no"  # one 180 GB B200


def check_estimate_plan(ran: Ran) -> None:
    _has("meta-llama/Llama-3.1-70B on dgx-h100 · decode", "8 GPUs: tp 4 · pp 2")(ran)
    assert _row(ran, "fits in memory") == "yes"


def check_plan(ran: Ran) -> None:
    _has("meta-llama/Llama-3.1-70B on dgx-h100 (16 GPUs) · decode", "best 10 plans", "plans left out")(ran)


def check_serving(ran: Ran) -> None:
    _has("llama-3.1-8b on h100-sxm · scheduler vllm", "Successful requests", "Request goodput (req/s)",
         "P99 TTFT (ms)")(ran)
    assert _row(ran, "Successful requests") == "500"


def check_estimate_sheet(ran: Ran) -> None:
    _has("meta-llama/Llama-3.2-1B on NVL-AX · decode", "cost model tiling")(ran)
    assert _row(ran, "weights") == "2.47 GB"  # 1.24 G parameters x 2 bytes


def _chrome_trace(path: Path) -> dict[str, object]:
    doc = json.loads(gzip.decompress(path.read_bytes()))
    assert isinstance(doc, dict) and doc.get("traceEvents"), f"{path.name}: no traceEvents"
    return doc


def check_simulate_sweep(ran: Ran) -> None:
    _has("engine sweep", "trace: layer.json.gz")(ran)
    for engines in range(1, 9):
        assert re.search(rf"│\s+{engines}( ◀)? │", ran.stdout), f"no row for {engines} engines"
    _chrome_trace(ran.file("layer.json.gz"))


def check_sweep(ran: Ran) -> None:
    _has("points (decode)", "on the Pareto front", "table: sweep.csv", "plot: sweep.html")(ran)
    rows = ran.file("sweep.csv").read_text().splitlines()
    assert len(rows) == 1 + 3 * 9 * 2, len(rows)  # 3 GPUs x batch 1..256 (9) x 2 dtypes, and the header
    assert ran.file("sweep.html").read_text().count("Plotly.newPlot") == 2


def check_simulate_add(ran: Ran) -> None:
    _has("engines of 0.125 of the chip each, added", "bound")(ran)
    for engines in range(1, 9):
        assert re.search(rf"│\s+{engines}( ◀)? │", ran.stdout), f"no row for {engines} engines"


def check_simulate_open(ran: Ran) -> None:
    _has("trace: steps.pftrace")(ran)
    size = ran.file("steps.pftrace").stat().st_size
    assert "trace sent to the Perfetto UI" in ran.stderr, ran.stderr
    assert ran.fetched().get("steps.pftrace") == size


def check_capture(ran: Ran) -> None:
    _has("1 of 16 layers", "fp32 on cpu", "prompt 128", "4 decode steps", "trace: real.json.gz")(ran)
    doc = _chrome_trace(ran.file("real.json.gz"))
    meta = doc.get("layerscope")
    assert isinstance(meta, dict), "the capture's trace carries no layerscope metadata"


def check_query_top(ran: Ran) -> None:
    _has("ProfilerStep#1", "prefill", "lm_head")(ran)


def check_query_pipe(ran: Ran) -> None:
    rows = ran.json_out()
    assert isinstance(rows, list) and len(rows) == 1 and rows[0]["n"] > 100, rows


def check_open(ran: Ran) -> None:
    served = ran.json_out()
    assert isinstance(served, dict) and {"path", "bytes", "url", "port", "ui_url"} <= set(served)
    size = ran.file("real.json.gz").stat().st_size
    assert served["bytes"] == size and str(served["ui_url"]).startswith("https://ui.perfetto.dev/")
    assert ran.fetched().get("real.json.gz") == size, "the trace was not sent to the (stand-in) browser"


def check_analyze(ran: Ran) -> None:
    _has("summary", "top_ops", "decode_step_0", "user_annotation")(ran)


def _calibrated_spec(ran: Ran) -> None:
    from layerscope.hardware import load_hardware

    hw = load_hardware(ran.file("hw.yaml"))
    assert hw.kind == "cpu" and hw.calibration is not None and hw.calibration.measurements.quick
    assert hw.engines.peak_flops_per_s["fp32"] > 1e9


def check_calibrate(ran: Ran) -> None:
    ran.file("hw.measurements.json")
    _calibrated_spec(ran)
    _has("GEMM fp32 peak")(ran)


def check_refit(ran: Ran) -> None:
    _calibrated_spec(ran)
    _has("GEMM fp32 peak")(ran)


def check_simulate_captured_workload(ran: Ran) -> None:
    _has("Llama-3.2-1B:decode_steps4", "trace: sim.json.gz (1 engines)")(ran)
    doc = _chrome_trace(ran.file("sim.json.gz"))
    names = {e.get("name") for e in doc["traceEvents"] if isinstance(e, dict)}  # type: ignore[union-attr]
    # The whole one-layer model, as the capture ran it: embedding to lm_head, each decode step.
    assert {"decode_step_0.embed_tokens", "decode_step_3.layers.0.mlp.down_proj", "decode_step_3.lm_head"} <= names
    assert not any(str(n).startswith("decode_step_0.layers.1.") for n in names)


#: The whole-forward error compare may show: with a calibration of this machine taken in the tour, and
#: with the kept calibration of the reference VM (another run, maybe another load: only the order of
#: magnitude). A simulation of other hardware (the old tour's accelerator against this CPU) reads -99.9%.
ERROR_BAND_HERE = (-0.6, 1.5)
ERROR_BAND_KEPT = (-0.9, 9.0)


def _error_band(ran: Ran) -> tuple[float, float]:
    return ERROR_BAND_HERE if ran.measured_here else ERROR_BAND_KEPT


def check_compare(ran: Ran) -> None:
    _has("decode, joined by module")(ran)
    assert "no whole-forward comparison" not in ran.stdout, ran.stdout[-2000:]
    match = re.search(r"forward ([\d.]+ \S+) predicted, ([\d.]+ \S+) measured \(([+-]?[\d.]+)%\)", ran.stdout)
    assert match, f"no whole-forward line in:\n{ran.stdout[-3000:]}"
    error = float(match.group(3)) / 100
    low, high = _error_band(ran)
    assert math.isfinite(error) and low < error < high, (
        f"forward {match.group(1)} predicted vs {match.group(2)} measured: error {error:+.1%} outside "
        f"({low:+.0%}, {high:+.0%})")


def check_compare_json(ran: Ran) -> None:
    doc = json.loads(ran.file("compare.json").read_text())
    assert doc["summary"]["join"] == "modules" and doc["summary"]["ops_joined"] > 0
    assert math.isfinite(doc["summary"]["forward_error"])


def check_report(ran: Ran) -> None:
    _has("compare.json (compare): predicted-vs-measured, error-by-op", "wrote report.html")(ran)
    text = ran.file("report.html").read_text(encoding="utf-8")
    assert "plotly.js v" in text and 'id="doc0-predicted-vs-measured"' in text
    assert not re.search(r"<script[^>]+src=", text), "the report loads a script from elsewhere"


def check_validate(ran: Ran) -> None:
    doc = json.loads(ran.file("out/validate/validation.json").read_text())
    phases = {p["phase"]: p for p in doc["phases"]}
    assert set(phases) == {"prefill", "decode"}
    low, high = _error_band(ran)
    for name, phase in phases.items():
        error = phase["forward"]["error"]
        assert error is not None and low < error < high, f"{name}: forward error {error}"


def _records(ran: Ran, folder: str) -> dict[str, object]:
    calls = json.loads(ran.file(f"{folder}/calls.json").read_text())
    assert isinstance(calls, dict) and calls["calls"], f"{folder}/calls.json has no calls"
    assert any((ran.folder / folder / "definitions").rglob("*.json")), f"{folder}: no definitions"
    assert any((ran.folder / folder / "workloads").rglob("*.jsonl")), f"{folder}: no workloads"
    meta = calls["meta"]
    assert isinstance(meta, dict)
    return meta


def check_records_run(ran: Ran) -> None:
    meta = _records(ran, "records")
    assert meta["model_type"] == "qwen3_moe" and meta["layers"] == 2
    assert any((ran.folder / "records" / "definitions").glob("moe*")), "no MoE definitions"


def check_records_graph(ran: Ran) -> None:
    meta = _records(ran, "records-70b")
    assert meta["layers"] == 80


def check_verify(ran: Ran) -> None:
    assert ran.stdout.rstrip().endswith("covered"), ran.stdout[-2000:]


def check_traced_script(ran: Ran) -> None:
    _has("generated 4 tokens")(ran)
    meta = _records(ran, "records-script")
    assert meta["source"] == "trace" and meta["model_type"] == "qwen3" and meta["layers"] == 2


def kept_calibration(folder: Path) -> None:
    """What ``calibrate --quick --out hw.yaml`` leaves, from the calibration kept in bench/accuracy-cpu.yaml:
    the spec, and its measurements as the measurements file beside it (the refit reproduces the spec)."""
    from layerscope.hardware import load_hardware
    from layerscope.hardware.calibration import CalibrationRun

    hw = load_hardware(KEPT_SPEC)
    assert hw.calibration is not None, f"{KEPT_SPEC} carries no calibration"
    measurements = hw.calibration.measurements
    tables = [v for v in measurements.model_dump().values() if isinstance(v, dict | list)]
    tasks = sum(len(next(iter(t.values()), [])) if isinstance(t, dict) else 1 for t in tables)
    levels = [{"name": m.name, "capacity_bytes": m.capacity_bytes, "per_engine": m.per_engine} for m in hw.memory]
    run = CalibrationRun(complete=True, measured=tasks, total=tasks, memory_levels=levels,
                         llc_bytes=hw.memory[-2].capacity_bytes, measurements=measurements)
    (folder / "hw.measurements.json").write_text(run.model_dump_json(indent=1))
    shutil.copyfile(KEPT_SPEC, folder / "hw.yaml")


@dataclass(frozen=True)
class Step:
    """How one README command is checked, and whether the default tour runs it."""

    check: Callable[[Ran], None]
    heavy: bool = False
    """Runs only in the slow tour (minutes, or many seconds of a model run); the default tour skips it."""
    stand_in: Callable[[Path], None] | None = None
    """What the default tour does in place of a heavy command whose files later commands read."""
    timeout_s: float = 180


#: Every README command (exactly as :func:`readme_commands` reads it), in README order, with its check.
STEPS: dict[str, Step] = {
    "layerscope models": Step(_has("31 bundled models", "llama-3.2-1b", "qwen3-30b-a3b", "deepseek-v3")),
    "layerscope hardware": Step(_has("14 hardware presets", "h100-sxm", "mi300x", "NVL-AX", "server-cpu")),
    "layerscope estimate --model llama-3.1-8b --hardware h100-sxm --phase decode --batch 1 --context 4096":
        Step(check_estimate_8b_decode),
    "layerscope estimate --model qwen3-30b-a3b --hardware h200 --phase "
    "generate --prompt-len 1024 --decode-steps 255 --json":
        Step(check_estimate_json),
    "layerscope estimate --model deepseek-v3 --hardware b200 --phase prefill --prompt-len 2048 --weight-dtype fp8":
        Step(check_estimate_fp8),
    "layerscope estimate --model llama-3.2-1b --hardware "
    "examples/my_chips.xlsx --device-column NVL-AX --cost-model tiling":
        Step(check_estimate_sheet),
    "layerscope estimate --model llama-3.1-70b --hardware dgx-h100 --phase decode --batch 64 --tp 4 --pp 2 "
    "--micro-batches 2": Step(check_estimate_plan),
    "layerscope plan --model llama-3.1-70b --hardware dgx-h100 --nodes 2 --gpus 8..16 --phase decode --batch 64 "
    "--context 4096": Step(check_plan),
    "layerscope serving --model llama-3.1-8b --hardware h100-sxm --rate 10 --requests 500 "
    "--slo ttft=200ms,tpot=50ms": Step(check_serving),
    "layerscope sweep --model llama-3.1-8b --hardware h100-sxm,h200,a100-sxm --batch 1..256 --length 4096 "
    "--dtypes bf16,fp8 --out sweep.csv --html sweep.html": Step(check_sweep),
    "layerscope simulate --model llama-3.2-1b --hardware nvl-ax --engines 1..8 --out layer.json.gz":
        Step(check_simulate_sweep),
    "layerscope simulate --model llama-3.2-1b --hardware nvl-ax --phase prefill --engines 1..8 --engine-mode add "
    "--engine-size 0.125": Step(check_simulate_add),
    "layerscope simulate --model llama-3.1-8b --hardware h100-sxm "
    "--all-layers --decode-steps 4 --out steps.pftrace --open":
        Step(check_simulate_open),
    "layerscope capture --model llama-3.2-1b --layers 1 --dtype fp32 --prompt-len 128 --decode-steps 4 "
    "--out real.json.gz": Step(check_capture, timeout_s=300),
    "layerscope query real.json.gz \"SELECT name, COUNT(*) AS n, SUM(dur)/1e6 AS ms FROM slices GROUP BY name "
    "ORDER BY ms DESC LIMIT 10\"": Step(check_query_top),
    "echo \"SELECT COUNT(*) AS n FROM slice\" | layerscope query real.json.gz --json": Step(check_query_pipe),
    "layerscope open real.json.gz --json": Step(check_open),
    "layerscope analyze real.json.gz": Step(check_analyze),
    "layerscope calibrate --quick --out hw.yaml": Step(check_calibrate, heavy=True, stand_in=kept_calibration,
                                                       timeout_s=900),
    "layerscope calibrate --from-measurements hw.measurements.json --out hw.yaml --force": Step(check_refit),
    "layerscope simulate --model llama-3.2-1b --layers 1 --hardware hw.yaml --engines 1 --attention fused "
    "--weight-dtype fp32 --act-dtype fp32 --kv-dtype fp32 --context 128 --decode-steps 4 --out sim.json.gz":
        Step(check_simulate_captured_workload),
    "layerscope compare --sim sim.json.gz --real real.json.gz": Step(check_compare),
    "layerscope compare --sim sim.json.gz --real real.json.gz --json > compare.json": Step(check_compare_json),
    "layerscope report compare.json --out report.html": Step(check_report),
    "layerscope validate --model llama-3.2-1b --layers 1 --hardware hw.yaml --prompt-len 128 --decode-steps 4":
        Step(check_validate, heavy=True, timeout_s=600),
    "layerscope workloads --model qwen3-30b-a3b --layers 2 --random-weights --out records/":
        Step(check_records_run, heavy=True, timeout_s=600),
    "layerscope workloads --model llama-3.1-70b --from-graph --out records-70b/": Step(check_records_graph),
    "layerscope verify --traces records/ --model qwen3-30b-a3b": Step(check_verify, heavy=True),
    "LAYERSCOPE_TRACE=1 LAYERSCOPE_TRACE_DIR=records-script/ python examples/trace_any_model.py":
        Step(check_traced_script, heavy=True, timeout_s=300),
}


def test_readme_commands_are_known() -> None:
    """Both directions: no README command without a check, no check of a command the README lost."""
    commands = readme_commands()
    known = [c for c in commands if c not in EXCLUDED]
    unknown = [c for c in known if c not in STEPS]
    assert not unknown, ("README commands with no check in tests/docs/test_readme.py STEPS (add one):\n"
                         + "\n".join(unknown))
    missing = [c for c in STEPS if c not in commands] + [c for c in EXCLUDED if c not in commands]
    assert not missing, "checks of commands the README no longer has:\n" + "\n".join(missing)
    assert known == list(STEPS), "STEPS lists the README's commands in another order"
    for command in known:
        for word in shlex.split(command):
            path = word.split("=", 1)[-1]
            if (ROOT / path).is_file():
                assert path in REPOSITORY_FILES, f"{command}: reads {path} from the repository; copy it"


def _require_torch() -> None:
    missing = [name for name in ("torch", "transformers") if importlib.util.find_spec(name) is None]
    if missing:
        pytest.skip(f"the tour captures and traces models: {', '.join(missing)} not installed "
                    "(pip install 'layerscope[capture]')")


def run_tour(tmp: Path, *, heavy: bool) -> list[tuple[str, float]]:
    """The README's commands in order in ``tmp/tour``; returns each command run with its seconds."""
    folder = tmp / "tour"
    folder.mkdir()
    for name in REPOSITORY_FILES:
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ROOT / name, folder / name)
    browser, log = fake_browser(tmp / "browser")
    env = tour_env(tmp, browser)
    measured_here = False
    timings: list[tuple[str, float]] = []
    for command in readme_commands():
        if command in EXCLUDED:
            continue
        if command not in STEPS:
            pytest.fail(f"README command with no check (see test_readme_commands_are_known): {command}")
        step = STEPS[command]
        if step.heavy and not heavy:
            if step.stand_in is not None:
                step.stand_in(folder)
            continue
        start = time.perf_counter()
        proc = run_command(command, folder, env, step.timeout_s)
        timings.append((command, time.perf_counter() - start))
        assert proc.returncode == 0, (f"{command}\nexit {proc.returncode}\nstdout: {proc.stdout[-2000:]}\n"
                                      f"stderr: {proc.stderr[-3000:]}")
        measured_here = measured_here or command.startswith("layerscope calibrate --quick")
        step.check(Ran(command, folder, proc.stdout, proc.stderr, log, measured_here))
    for command, seconds in timings:
        print(f"{seconds:7.1f} s  {command}")
    return timings


def test_tour(tmp_path: Path) -> None:
    """The tour without its heavy commands (module docstring), each run as written and checked."""
    _require_torch()
    timings = run_tour(tmp_path, heavy=False)
    assert len(timings) == sum(1 for c in readme_commands() if c in STEPS and not STEPS[c].heavy)


@pytest.mark.slow
def test_tour_slow(tmp_path: Path) -> None:
    """The whole tour as written, calibrating this machine: minutes."""
    _require_torch()
    timings = run_tour(tmp_path, heavy=True)
    assert len(timings) == len(STEPS)


def make_recipe(target: str) -> list[str]:
    """The recipe lines of ``target`` in the Makefile."""
    lines = (ROOT / "Makefile").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if re.match(rf"{re.escape(target)}:", line))
    recipe = []
    for line in lines[start + 1:]:
        if not line.startswith("\t"):
            break
        recipe.append(line.strip())
    return recipe


@pytest.mark.slow
def test_make_demo(tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    """``make demo`` is the install, then ``layerscope demo --out out/demo``: that command, end to end."""
    _require_torch()
    assert make_recipe("demo") == ["$(VENV)/bin/layerscope demo --out out/demo"]
    proc = run_cli("demo", "--out", "out/demo", cwd=tmp_path, timeout=900,  # no kept spec: it measures
                   env={"LAYERSCOPE_CACHE_DIR": str(tmp_path / "cache"), "NO_COLOR": "1", "COLUMNS": "200"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = tmp_path / "out" / "demo"
    traces = sorted(p.name for p in out.glob("*.json.gz"))
    assert any(name.startswith("captured") for name in traces), traces
    assert any(name.startswith("simulated") for name in traces), traces
    assert proc.stdout.strip(), "the demo printed nothing"
    # It ends by saying what the numbers mean, the sign of its errors included, and where to look.
    text = " ".join(proc.stdout.split())
    assert "What this means" in text
    assert "(predicted − measured) / measured" in text
    assert "Where the time went (measured):" in text and "layerscope open" in text
    assert "Hardware: this machine measured now in 3 rounds" in text  # no kept calibration in the test's cache
