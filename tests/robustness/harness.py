"""The contract every bad input must keep, and the runner that checks it through the installed command.

A :class:`Case` is data: the arguments, the files it needs (made under the case's own folder) and
what its one error line must name. :func:`run_case` runs ``layerscope ARGS`` as a subprocess in that
folder, with its own Parquet cache outside it, and :func:`violations` lists every way the outcome
breaks the contract (an empty list is a pass):

- exit code 2 (a positive control: 0);
- stderr is exactly one non-empty line, ``error: …``, at most :data:`MAX_LINE_CHARS` characters,
  containing each of the case's expected substrings (case-insensitive);
- no ``Traceback`` anywhere in the output;
- no file in the case's folder changed (bytes, mtime, mode), vanished or appeared (hidden
  ``.NAME.*.tmp`` temporaries included);
- it finished within the case's time bound: at most :data:`CPU_LIMIT_S` seconds of CPU (its own
  and its children's: a bound that holds on a loaded machine) and never killed at the wall-clock
  limit :data:`WALL_LIMIT_S` (a hang: a FIFO read, a lock).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import signal
import stat
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

#: CPU seconds a case may use: a bad input is refused quickly, never after a blow-up (a bomb, an
#: unbounded loop). Refusing costs about one second (the interpreter and the CLI's imports).
CPU_LIMIT_S = float(os.environ.get("LAYERSCOPE_ROBUSTNESS_CPU_LIMIT_S", "30"))

#: Wall-clock seconds after which a case is killed: a hang spends no CPU. Generous, because CI
#: machines are shared (the CPU bound is the one that measures the work).
WALL_LIMIT_S = float(os.environ.get("LAYERSCOPE_ROBUSTNESS_WALL_LIMIT_S", "120"))

#: Longest accepted error line: the CLI cuts messages at 500 characters (``error: `` and the cut
#: marker come on top).
MAX_LINE_CHARS = 560

#: Exit code of a refused input (usage errors included).
USER_ERROR = 2



@dataclass(frozen=True)
class Make:
    """A path made by a function of that path (a directory, a link, a FIFO, a copy)."""

    make: Callable[[Path], None]


#: What a file to create may be: its bytes or text, a function making the bytes (large or costly
#: inputs are made only when the case runs), or a :class:`Make`.
Content = bytes | str | Callable[[], bytes] | Make


@dataclass(frozen=True)
class Case:
    """One input through the installed ``layerscope``; see the module docstring for the contract."""

    id: str
    argv: tuple[str, ...]
    """Arguments after ``layerscope``; ``{d}`` is replaced by the case folder's absolute path."""
    files: Mapping[str, Content] = field(default_factory=dict)
    """Relative path → content, made before the run (parents created)."""
    expect: tuple[str, ...] = ()
    """Substrings the error line must contain (case-insensitive, ``_`` as ``-``; ``a|b``: either): the
    option, the file, the field."""
    code: int = USER_ERROR
    """Expected exit code: 2 for a bad input, 0 for a positive control."""
    creates: tuple[str, ...] = ()
    """Positive controls: paths that must exist afterwards (the only new paths allowed)."""
    stdin: str = ""
    before: tuple[tuple[str, ...], ...] = ()
    """Commands run first in the same folder and cache (their outcome is not checked): a cache
    filled by another file, for instance."""
    stdout_forbid: tuple[str, ...] = ()
    """Text that must not reach stdout (a leaked /etc/passwd line)."""
    stderr_expect: tuple[str, ...] = ()
    """Positive controls: warnings stderr must contain (a truncated trace read as far as it goes)."""
    stdout_expect: tuple[str, ...] = ()
    """Positive controls: text stdout must contain, as it is (data printed literally)."""
    stdout_json: bool = False
    """Positive controls: stdout is one JSON document."""
    root_skip: bool = False
    """Meaningless as root (file modes do not stop root's writes): skipped when euid is 0."""
    cpu_limit_s: float = CPU_LIMIT_S


@dataclass(frozen=True)
class FileState:
    kind: str
    mode: int
    size: int
    mtime_ns: int
    digest: str


Snapshot = dict[str, FileState]


def snapshot(root: Path) -> Snapshot:
    """Every path under ``root`` (hidden ones too, links not followed) → its state.

    Directories are recorded by kind and mode only: a writer that made and removed a temporary
    changes its folder's mtime without leaving anything behind."""
    states: Snapshot = {}
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for name in [*dirnames, *filenames]:
            path = Path(dirpath, name)
            info = path.lstat()
            rel = str(path.relative_to(root))
            if stat.S_ISDIR(info.st_mode):
                states[rel] = FileState("dir", stat.S_IMODE(info.st_mode), 0, 0, "")
            elif stat.S_ISLNK(info.st_mode):
                states[rel] = FileState("link", 0, 0, info.st_mtime_ns, os.readlink(path))
            elif stat.S_ISREG(info.st_mode):
                digest = hashlib.sha256(path.read_bytes()).hexdigest()
                states[rel] = FileState("file", stat.S_IMODE(info.st_mode), info.st_size, info.st_mtime_ns, digest)
            else:
                states[rel] = FileState("special", stat.S_IMODE(info.st_mode), 0, info.st_mtime_ns, "")
    return states


def snapshot_changes(before: Snapshot, after: Snapshot, allowed_new: tuple[str, ...] = ()) -> list[str]:
    """What differs between two snapshots; new paths at or under ``allowed_new`` are allowed."""
    changes = [f"removed {rel}" for rel in sorted(before.keys() - after.keys())]
    changes += [f"changed {rel}" for rel in sorted(before.keys() & after.keys()) if before[rel] != after[rel]]
    for rel in sorted(after.keys() - before.keys()):
        if not any(rel == ok or rel.startswith(ok.rstrip("/") + "/") for ok in allowed_new):
            changes.append(f"new {rel}")
    return changes


@dataclass
class Outcome:
    """What one run did: exit code (None when killed at the wall-clock limit), output, seconds, file changes."""

    returncode: int | None
    stdout: str
    stderr: str
    seconds: float
    """Wall-clock seconds."""
    changes: list[str]
    missing: list[str]
    cpu_seconds: float = 0.0
    """User + system CPU seconds of the process and the children it waited for."""

    def summary(self) -> str:
        """Exit code and the first stderr line, for reports."""
        lines = self.stderr.strip().splitlines()
        first = lines[0] if lines else "(no stderr)"
        code = "killed (hang)" if self.returncode is None else f"exit {self.returncode}"
        extra = f" (+{len(lines) - 1} more stderr lines)" if len(lines) > 1 else ""
        return f"{code}: {first[:300]}{extra}"


def make_files(case: Case, work: Path) -> None:
    """Create the case's input files under ``work``."""
    for rel, content in case.files.items():
        path = work / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, Make):
            content.make(path)
            continue
        if callable(content):
            content = content()
        if isinstance(content, str):
            content = content.encode()
        path.write_bytes(content)


def expand(argv: tuple[str, ...], work: Path) -> list[str]:
    return [arg.replace("{d}", str(work)) for arg in argv]


@dataclass(frozen=True)
class Run:
    returncode: int | None
    stdout: bytes
    stderr: bytes
    seconds: float
    cpu_seconds: float


def run_process(argv: list[str], cwd: Path, env: dict[str, str], stdin: bytes, wall_limit_s: float) -> Run:
    """Run ``argv`` to its end (killed, with its process group, after ``wall_limit_s``); measure its CPU.

    ``os.wait4`` gives the child's resource usage, which ``subprocess.run`` drops; whatever the
    child left running in its group is killed when it exits, so the pipes close."""
    start = time.monotonic()
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True)
    chunks: dict[str, bytes] = {}

    def drain(name: str, stream: IO[bytes]) -> None:
        chunks[name] = stream.read()

    def feed(stream: IO[bytes]) -> None:
        with contextlib.suppress(BrokenPipeError):  # it exited before reading it all: nothing to feed
            stream.write(stdin)
        with contextlib.suppress(BrokenPipeError):
            stream.close()

    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    helpers = [threading.Thread(target=drain, args=("out", proc.stdout)),
               threading.Thread(target=drain, args=("err", proc.stderr)),
               threading.Thread(target=feed, args=(proc.stdin,))]
    for helper in helpers:
        helper.start()
    killed = threading.Event()

    def on_wall_limit() -> None:
        killed.set()
        kill_group_of(proc.pid)

    timer = threading.Timer(wall_limit_s, on_wall_limit)
    timer.start()
    _, status, usage = os.wait4(proc.pid, 0)
    timer.cancel()
    proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait again
    kill_group_of(proc.pid)
    for helper in helpers:
        helper.join()
    return Run(None if killed.is_set() else proc.returncode, chunks.get("out", b""), chunks.get("err", b""),
               time.monotonic() - start, usage.ru_utime + usage.ru_stime)


def kill_group_of(pgid: int) -> None:
    """SIGKILL the process group ``pgid`` if anything is left in it."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def run_case(case: Case, folder: Path, command: list[str]) -> Outcome:
    """Run ``case`` in ``folder/work`` (created here) with a Parquet cache in ``folder/cache``."""
    work = folder / "work"
    work.mkdir(parents=True)
    make_files(case, work)
    env = {**os.environ, "LAYERSCOPE_CACHE_DIR": str(folder / "cache"), "NO_COLOR": "1", "COLUMNS": "200"}
    for argv in case.before:
        run_process([*command, *expand(argv, work)], work, env, b"", WALL_LIMIT_S)
    before = snapshot(work)
    done = run_process([*command, *expand(case.argv, work)], work, env, case.stdin.encode(), WALL_LIMIT_S)
    after = snapshot(work)
    missing = [rel for rel in case.creates if rel not in after]
    return Outcome(done.returncode, done.stdout.decode(errors="replace"), done.stderr.decode(errors="replace"),
                   done.seconds, snapshot_changes(before, after, case.creates), missing, done.cpu_seconds)


def loose(text: str) -> str:
    """``text`` lower-cased with ``_`` read as ``-``: ``prompt_len`` names ``--prompt-len``."""
    return text.lower().replace("_", "-")


@dataclass
class Corpus:
    """Outcomes of the selected cases, keyed by case id, and the wall time of the whole run."""

    outcomes: dict[str, Outcome]
    seconds: float


def is_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


def violations(case: Case, outcome: Outcome) -> list[str]:
    """Every way ``outcome`` breaks the contract of ``case`` (empty: it keeps it)."""
    problems: list[str] = []
    if outcome.returncode is None:
        problems.append(f"still running after {outcome.seconds:.0f} s of wall-clock time (killed: a hang)")
    elif outcome.returncode != case.code:
        problems.append(f"exit code {outcome.returncode}, expected {case.code}")
    if outcome.cpu_seconds > case.cpu_limit_s:
        problems.append(f"used {outcome.cpu_seconds:.1f} s of CPU, bound {case.cpu_limit_s:.0f} s")
    if "Traceback" in outcome.stdout or "Traceback" in outcome.stderr:
        problems.append("a Traceback was printed")
    if case.code == USER_ERROR:
        lines = outcome.stderr.splitlines()
        if len(lines) != 1:
            problems.append(f"stderr has {len(lines)} lines, expected exactly one")
        line = lines[0] if lines else ""
        if not line.startswith("error: ") or not line[len("error: "):].strip():
            problems.append(f"stderr does not start with a non-empty 'error: …' line: {line[:200]!r}")
        if len(line) > MAX_LINE_CHARS:
            problems.append(f"error line is {len(line)} characters (at most {MAX_LINE_CHARS})")
        for text in case.expect:
            if not any(loose(choice) in loose(line) for choice in text.split("|")):
                problems.append(f"error line does not name {text!r}: {line[:300]!r}")
    elif case.stdout_json:
        import json

        try:
            json.loads(outcome.stdout)
        except ValueError as exc:
            problems.append(f"stdout is not one JSON document ({exc})")
    if case.code != USER_ERROR:
        problems += [f"stderr does not contain {text!r}" for text in case.stderr_expect
                     if not any(loose(choice) in loose(outcome.stderr) for choice in text.split("|"))]
    for text in case.stdout_expect:
        if text not in outcome.stdout:
            problems.append(f"stdout does not contain {text!r}")
    for text in case.stdout_forbid:
        if text in outcome.stdout:
            problems.append(f"stdout contains {text!r}")
    problems += [f"file {change}" for change in outcome.changes]
    problems += [f"expected output {rel} was not written" for rel in outcome.missing]
    return problems


def layerscope_command() -> list[str]:
    """The installed console script, found as ``tests/conftest.py:layerscope_command`` finds it
    (beside this interpreter, else on PATH); ``None``-safe for collection without it."""
    import shutil
    import sys

    beside = Path(sys.executable).with_name("layerscope")
    if beside.is_file():
        return [str(beside)]
    found = shutil.which("layerscope")
    if found is None:
        raise RuntimeError("the `layerscope` entry point is not installed (pip install -e .)")
    return [found]
