"""Benchmark: whole ``layerscope`` processes timed by GNU time, beside an older revision and a peer's process.

    python bench/bench_cli_startup.py [--rounds N] [--baseline REV] [--append]

Each round runs every command once, in turn, so that the load of this shared machine falls on all of them alike;
the table gives the least and the median wall time, the least CPU time (user + system) and the largest resident
set of the rounds. Commands:

* ``layerscope estimate --model llama-3.1-8b --hardware h100-sxm`` (#31's command), output to /dev/null;
* ``layerscope --help`` (the app alone: typer and the command list);
* with ``--baseline REV``: the same estimate run from REV's source (``git archive`` into a temporary directory,
  put first on ``PYTHONPATH``), for the before/after ratio measured in the same run;
* llm-analysis, when bench/.peer-venv has it (``bench/bench_estimate_peers.py --setup``): one fresh process that
  imports it, builds Llama-3.1-8B from the HF config's numbers and an H100 SXM, and runs one
  ``LLMAnalysis.inference`` (bench/peers/llm_analysis_once.py): the same whole-process task.

Every process reads compiled bytecode, as an installed package does: ``PYTHONDONTWRITEBYTECODE`` is cleared and
bytecode goes to one temporary ``PYTHONPYCACHEPREFIX``, filled by one untimed run of each command. The floor below
our own code is measured too: a process that only imports typer, numpy and pydantic.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from _util import cpu_model

ROOT = Path(__file__).resolve().parents[1]
PEER_PYTHON = ROOT / "bench" / ".peer-venv" / "bin" / "python"
TIME = "/usr/bin/time"
ESTIMATE = ["estimate", "--model", "llama-3.1-8b", "--hardware", "h100-sxm"]


def _layerscope(*args: str) -> list[str]:
    return [sys.executable, "-m", "layerscope", *args]


def _timed(cmd: list[str], env: dict[str, str]) -> tuple[float, float, float]:
    """(wall s, user + system s, max RSS MiB) of one run of ``cmd`` under GNU time."""
    with tempfile.NamedTemporaryFile("r", suffix=".time") as out:
        done = subprocess.run([TIME, "-o", out.name, "-f", "%e %U %S %M", *cmd], env=env, cwd=ROOT,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=600)
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)} failed ({done.returncode}): {done.stderr[-2000:]}")
        wall, user, system, rss_kib = out.read().split()[-4:]
    return float(wall), float(user) + float(system), float(rss_kib) / 1024


def _baseline_tree(rev: str, into: Path) -> Path:
    archive = subprocess.run(["git", "archive", rev, "src"], cwd=ROOT, capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into / "src"


def _llm_analysis_arch(into: Path) -> Path | None:
    """The HF config's numbers llm-analysis's model is built from (bench_estimate_peers' ``arch``), as a file."""
    if not PEER_PYTHON.is_file():
        return None
    from bench_estimate_peers import arch

    from layerscope.model import load_model_spec

    path = into / "arch.json"
    path.write_text(json.dumps(arch(load_model_spec("llama-3.1-8b"))))
    return path


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--baseline", metavar="REV", help="also time the estimate from this git revision's source")
    ap.add_argument("--append", action="store_true", help="append the section to bench/RESULTS.md")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="ls-startup-") as tmp:
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPATH")}
        # this checkout's source, not whichever the environment installed (a worktree shares its venv)
        env.update(PYTHONPYCACHEPREFIX=str(Path(tmp) / "pycache"), OPENBLAS_NUM_THREADS="1",
                   PYTHONPATH=str(ROOT / "src"))
        cases: list[tuple[str, list[str], dict[str, str]]] = [
            ("`layerscope estimate --model llama-3.1-8b --hardware h100-sxm`", _layerscope(*ESTIMATE), env),
            ("`layerscope --help`", _layerscope("--help"), env),
            ("import typer, numpy, pydantic (floor)", [sys.executable, "-c", "import typer, numpy, pydantic"], env),
        ]
        if args.baseline:
            src = _baseline_tree(args.baseline, Path(tmp))
            cases.insert(1, (f"the same estimate at {args.baseline}", _layerscope(*ESTIMATE),
                             {**env, "PYTHONPATH": str(src)}))
        arch = _llm_analysis_arch(Path(tmp))
        if arch is not None:
            peer_env = {**env, "PYTHONPATH": str(ROOT / "bench" / "peers")}
            cases.append(("llm-analysis: one `LLMAnalysis.inference` (Llama-3.1-8B, H100)",
                          [str(PEER_PYTHON), str(ROOT / "bench" / "peers" / "llm_analysis_once.py"), str(arch)],
                          peer_env))
        for _, cmd, case_env in cases:  # fill the bytecode cache; not timed
            _timed(cmd, case_env)
        samples: dict[str, list[tuple[float, float, float]]] = {name: [] for name, _, _ in cases}
        for _ in range(args.rounds):
            for name, cmd, case_env in cases:
                samples[name].append(_timed(cmd, case_env))

    ours = min(w for w, _, _ in samples[cases[0][0]])
    lines = [f"## whole process\n\n`python bench/bench_cli_startup.py --rounds {args.rounds}"
             f"{' --baseline ' + args.baseline if args.baseline else ''}` · {os.cpu_count()} cores, {cpu_model()} · "
             f"Python {platform.python_version()} · {datetime.date.today().isoformat()}\n",
             f"GNU time, {args.rounds} interleaved rounds; bytecode compiled (as installed).\n",
             "| process | wall least | wall median | CPU least | max RSS | least wall / ours |",
             "|---|---|---|---|---|---|"]
    for name, _, _ in cases:
        s = samples[name]
        least = min(w for w, _, _ in s)
        lines.append(f"| {name} | {least:.2f} s | {statistics.median(w for w, _, _ in s):.2f} s | "
                     f"{min(c for _, c, _ in s):.2f} s | {max(r for _, _, r in s):.0f} MiB | {least / ours:.2f} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.append:
        with open(ROOT / "bench" / "RESULTS.md", "a", encoding="utf-8") as fh:
            fh.write("\n" + text)


if __name__ == "__main__":
    main()
