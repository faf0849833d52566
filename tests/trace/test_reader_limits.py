"""The trace readers under hostile and degenerate input (layerscope/trace/readers.py and the readers
behind it): decompression bombs, deep nesting, empty files, random bytes, stale temporaries.

Each refusal is a :class:`TraceError` naming the file, from the readers called directly (the
in-memory fast path, ``read_trace`` with the C scanner switched off, and the DuckDB path) and from the installed
``layerscope`` command: exit 2, one ``error:`` line, no traceback.
"""

from __future__ import annotations

import gzip
import itertools
import json
import os
import random
import subprocess
import sys
import time
import tracemalloc
import zlib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from layerscope.errors import TraceError
from layerscope.trace import chrome_reader, readers
from layerscope.trace.chrome_reader import DepthGuard, json_depth_numpy, read_chrome_json
from layerscope.trace.perfetto_reader import read_perfetto
from layerscope.trace.protobuf_wire import f_bytes, f_string, f_varint
from layerscope.trace.readers import MAX_JSON_DEPTH, MAX_PROTO_DEPTH, read_trace

DATA = Path(__file__).resolve().parents[1] / "data" / "traces"
EVENT = {"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 2}


def _gzip_of_run(byte: bytes, size: int, head: bytes = b"") -> bytes:
    """A gzip member of ``head`` and ``size`` copies of ``byte``, made in 1 MiB steps."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    block = byte * (1 << 20)
    out = [packer.compress(head)]
    for _ in range(size >> 20):
        out.append(packer.compress(block))
    out.append(packer.flush())
    return b"".join(out)


def _read_every_way(path: Path, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The outcome (tables or the TraceError) of read_trace, of read_trace with the C scanner
    switched off (the DuckDB path reads then) and of the DuckDB path called directly."""
    outcomes: list[Any] = []
    for native, fast in (("1", True), ("0", True), ("1", False)):
        monkeypatch.setenv("LAYERSCOPE_JSON_NATIVE", native)
        try:
            outcomes.append(read_trace(path) if fast else read_chrome_json(path, fast=False))
        except TraceError as exc:
            outcomes.append(exc)
    return outcomes


def _refused_by_cli(run_cli: Any, tmp_path: Path, path: Path, *args: str, env: dict[str, str] | None = None,
                    command: str = "analyze") -> str:
    """The one ``error:`` line of ``layerscope <command> <path>``, which must exit 2."""
    proc = run_cli(command, str(path), *args, env={"LAYERSCOPE_CACHE_DIR": str(tmp_path / "cache"), **(env or {})})
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    assert path.name in lines[0]
    return str(lines[0])


# --------------------------------------------------------------------------- decompression bombs


def test_whitespace_bomb_is_refused_at_the_ratio_bound(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # 4 MiB of whitespace in ~4 KB: past the ratio floor (here 1 MiB) at more than 100:1
    monkeypatch.setattr(readers, "RATIO_FLOOR_BYTES", 1 << 20)
    path = tmp_path / "bomb.json.gz"
    path.write_bytes(_gzip_of_run(b" ", 4 << 20))
    assert path.stat().st_size < 10_000
    for outcome in _read_every_way(path, monkeypatch):
        assert isinstance(outcome, TraceError)
        assert "bomb.json.gz" in str(outcome) and "inflates to more than 1048576 bytes" in str(outcome)
        assert "100x" in str(outcome)


def test_default_limits_refuse_the_reported_bomb_quickly_in_bounded_memory(tmp_path: Path) -> None:
    # the shape of the report: a gzip of whitespace (here 256 MiB in ~250 KB; the report's was
    # 510 KB for ~500 MB) took 48-92 s and 2.2 GB. With the defaults it stops after 64 MiB.
    path = tmp_path / "bomb.json.gz"
    path.write_bytes(_gzip_of_run(b" ", 256 << 20))
    tracemalloc.start()
    started = time.perf_counter()
    try:
        with pytest.raises(TraceError, match=r"bomb\.json\.gz.*inflates to more than 67108864 bytes"):
            read_trace(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 200 << 20  # well under the 256 MiB it would inflate to
    assert time.perf_counter() - started < 30  # seconds; ~1 s on an idle machine


def test_events_array_of_whitespace_is_refused_at_the_absolute_limit(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAYERSCOPE_MAX_TRACE_MB", "1")
    monkeypatch.setenv("LAYERSCOPE_MAX_GZIP_RATIO", "100000")
    path = tmp_path / "inside.json.gz"
    path.write_bytes(_gzip_of_run(b" ", 3 << 20, head=b'{"traceEvents": ['))
    for outcome in _read_every_way(path, monkeypatch):
        assert isinstance(outcome, TraceError)
        assert "inflates to more than 1048576 bytes" in str(outcome) and "1 MiB limit" in str(outcome)


def test_real_traces_are_within_the_default_limits() -> None:
    for path in sorted(DATA.glob("*.json.gz")):
        ratio = len(gzip.decompress(path.read_bytes())) / path.stat().st_size
        assert ratio < readers.DEFAULT_MAX_GZIP_RATIO / 4, path.name
        assert read_trace(path).num_slices > 0


def test_perfetto_gzip_bomb_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(readers, "RATIO_FLOOR_BYTES", 1 << 20)
    path = tmp_path / "bomb.pftrace.gz"
    path.write_bytes(_gzip_of_run(b"\x00", 4 << 20))
    with pytest.raises(TraceError, match=r"bomb\.pftrace\.gz.*inflates to more than"):
        read_perfetto(path)


def test_cli_refuses_bombs(run_cli: Any, tmp_path: Path) -> None:
    bomb = tmp_path / "bomb.json.gz"
    bomb.write_bytes(_gzip_of_run(b" ", 3 << 20, head=b'{"traceEvents": ['))
    line = _refused_by_cli(run_cli, tmp_path, bomb, env={"LAYERSCOPE_MAX_TRACE_MB": "1"})
    assert "LAYERSCOPE_MAX_TRACE_MB" in line
    query = _refused_by_cli(run_cli, tmp_path, bomb, "SELECT 1", env={"LAYERSCOPE_MAX_TRACE_MB": "1"},
                            command="query")
    assert "inflates to more than" in query
    pf = tmp_path / "bomb.pftrace.gz"
    pf.write_bytes(_gzip_of_run(b"\x00", 3 << 20))
    assert "inflates to more than" in _refused_by_cli(run_cli, tmp_path, pf, env={"LAYERSCOPE_MAX_TRACE_MB": "1"})
    bad = _refused_by_cli(run_cli, tmp_path, bomb, env={"LAYERSCOPE_MAX_TRACE_MB": "lots"})
    assert "LAYERSCOPE_MAX_TRACE_MB='lots'" in bad


# --------------------------------------------------------------------------- deep nesting


def _deep_args(levels: int) -> bytes:
    """One event whose args hold arrays nested so that the document is ``levels`` deep."""
    inner = levels - 4  # the object, traceEvents, the event, args
    return (b'{"traceEvents": [{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 1, "args": {"a": '
            + b"[" * inner + b"]" * inner + b"}}]}")


DEEP = {
    "open-brackets": b"[" * 200_000,  # the report's case: an unclosed top-level array
    "closed-brackets": b"[" * 200_000 + b"]" * 200_000,
    "events-item": b'{"traceEvents": [' + b"[" * 5000 + b"]" * 5000 + b"]}",
    "args": _deep_args(5004),  # args nested 5,000 deep, as reported
    "meta-args": (b'{"traceEvents": [{"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"a": '
                  + b"{\"k\": " * 3000 + b"1" + b"}" * 3000 + b"}}]}"),
    "header": b'{"x": ' + b"[" * 3000 + b"]" * 3000 + b', "traceEvents": [' + json.dumps(EVENT).encode() + b"]}",
    "after-array": b'{"traceEvents": [' + json.dumps(EVENT).encode() + b'], "y": ' + b"[" * 3000 + b"]" * 3000 + b"}",
}


@pytest.mark.parametrize("name", sorted(DEEP))
@pytest.mark.parametrize("suffix", [".json", ".json.gz"])
def test_deep_nesting_is_refused_on_every_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str,
                                               suffix: str) -> None:
    path = tmp_path / f"deep{suffix}"
    path.write_bytes(gzip.compress(DEEP[name]) if suffix.endswith(".gz") else DEEP[name])
    for outcome in _read_every_way(path, monkeypatch):
        assert isinstance(outcome, TraceError), name
        assert path.name in str(outcome) and f"nested deeper than {MAX_JSON_DEPTH} levels" in str(outcome)


def test_nesting_up_to_the_limit_is_read_alike(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # 512 levels: past the C scanner's own bound (the DuckDB path reads the events), within everyone's
    path = tmp_path / "deep.json"
    path.write_bytes(_deep_args(MAX_JSON_DEPTH))
    outcomes = _read_every_way(path, monkeypatch)
    assert all(t.num_slices == 1 and t.warnings == [] for t in outcomes)
    documents = [json.loads(t.arg_sets.column("json")[0].as_py()) for t in outcomes]
    assert documents[0] == documents[1] == documents[2]
    path.write_bytes(_deep_args(MAX_JSON_DEPTH + 1))
    assert all(isinstance(o, TraceError) for o in _read_every_way(path, monkeypatch))


def test_depth_error_names_the_level_and_the_byte(tmp_path: Path) -> None:
    path = tmp_path / "deep.json"
    path.write_bytes(b"  " + b"[" * 1000)
    with pytest.raises(TraceError, match=r"'.*deep\.json': JSON nested deeper than 512 levels "
                                         r"\(level 513 opens at byte 514\)"):
        read_trace(path)


_JSONISH = st.lists(st.sampled_from([b"[", b"]", b"{", b"}", b'"', b"\\", b"\\\\", b'\\"', b"a", b" "]),
                    max_size=300).map(b"".join)


@given(_JSONISH, st.lists(st.integers(0, 300), max_size=4), st.integers(0, 12))
@settings(max_examples=400, deadline=None)
def test_numpy_walk_equals_the_c_walk_in_any_chunks(text: bytes, cuts: list[int], limit: int) -> None:
    scan = chrome_reader._chrome_scan
    if scan is None:
        pytest.skip("the C scanner is not built")
    whole = scan.json_depth(text, 0, False, False, limit)
    bounds = [0, *sorted(min(c, len(text)) for c in cuts), len(text)]
    state: tuple[int, bool, bool] = (0, False, False)
    over = -1
    for a, b in itertools.pairwise(bounds):
        *rest, at = json_depth_numpy(text[a:b], *state, limit)
        if at >= 0:
            over = a + at
            break
        state = (rest[0], rest[1], rest[2])
    assert over == whole[3]
    if over < 0:
        assert state == whole[:3]


def test_depth_walk_reads_strings_and_escapes() -> None:
    # brackets inside strings do not count; an escaped quote does not end a string
    text = b'[{"a": "[[[\\"[[[", "b\\\\": [1]}]'
    for walk in (json_depth_numpy, *([chrome_reader._chrome_scan.json_depth] if chrome_reader._chrome_scan else [])):
        assert walk(text, 0, False, False, 3) == (0, False, False, -1)
        assert walk(text, 0, False, False, 2)[3] == text.index(b"[1]")
        assert walk(b'"ab\\', 0, False, False, 3) == (0, True, True, -1)
        assert walk(b'"[', 0, True, True, 0) == (0, True, False, -1)  # the quote was escaped
    guard = DepthGuard(Path("t.json"), limit=2)
    guard.feed(b"[[")
    with pytest.raises(TraceError, match=r"'t\.json'.*level 3 opens at byte 3"):
        guard.feed(b" [")


def _annotation(depth: int) -> bytes:
    """A DebugAnnotation named "d" holding dicts nested ``depth`` deep."""
    inner = f_string(10, "leaf") + f_varint(4, 1)
    for _ in range(depth - 1):
        inner = f_string(10, "k") + f_bytes(11, inner)
    return inner


def _trace_with_annotation(depth: int) -> bytes:
    event = f_varint(9, 3) + f_string(23, "tick") + f_bytes(4, _annotation(depth))
    return f_bytes(1, f_varint(8, 5) + f_varint(10, 1) + f_bytes(11, event))


def test_perfetto_nested_annotations(tmp_path: Path) -> None:
    path = tmp_path / "deep.pftrace"
    path.write_bytes(_trace_with_annotation(MAX_PROTO_DEPTH))
    t = read_perfetto(path)
    doc = json.loads(t.arg_sets.column("json")[0].as_py())
    levels = 0
    node: Any = doc["debug"]
    while isinstance(node, dict):
        node = next(iter(node.values()))
        levels += 1
    assert levels == MAX_PROTO_DEPTH  # the "k" chain then "leaf"
    path.write_bytes(_trace_with_annotation(5000))
    with pytest.raises(TraceError, match=rf"deep\.pftrace.*nested deeper than {MAX_PROTO_DEPTH} levels"):
        read_perfetto(path)


def test_cli_refuses_deep_nesting(run_cli: Any, tmp_path: Path) -> None:
    for name in ("open-brackets", "args"):
        path = tmp_path / f"{name}.json"
        path.write_bytes(DEEP[name])
        assert f"nested deeper than {MAX_JSON_DEPTH}" in _refused_by_cli(run_cli, tmp_path, path)
    path = tmp_path / "deep.pftrace"
    path.write_bytes(_trace_with_annotation(5000))
    assert "nested deeper than" in _refused_by_cli(run_cli, tmp_path, path)


# --------------------------------------------------------------------------- empty and minimal


EMPTY_TRACES = {
    "events.json": b'{"traceEvents": []}',
    "spaced.json": b'{"traceEvents": [ \n ], "displayTimeUnit": "ns"}',
    "array.json": b"[]",
    "events.json.gz": gzip.compress(b'{"traceEvents": []}'),
}


@pytest.mark.parametrize("name", sorted(EMPTY_TRACES))
def test_an_empty_events_array_is_a_complete_empty_trace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         name: str) -> None:
    path = tmp_path / name
    path.write_bytes(EMPTY_TRACES[name])
    for t in _read_every_way(path, monkeypatch):
        assert not isinstance(t, Exception), t
        assert t.num_slices == 0 and t.counter.num_rows == 0 and t.flow.num_rows == 0
        assert t.warnings == []
    if name == "spaced.json":
        assert t.metadata["displayTimeUnit"] == "ns"


def test_a_cut_trace_still_warns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "cut.json"
    path.write_bytes(b'{"traceEvents": [' + json.dumps(EVENT).encode() + b", ")
    for t in _read_every_way(path, monkeypatch):
        assert t.num_slices == 1 and any("truncated" in w for w in t.warnings)


def test_cli_on_an_empty_trace(run_cli: Any, tmp_path: Path) -> None:
    path = tmp_path / "empty.json"
    path.write_bytes(b'{"traceEvents": []}')
    proc = run_cli("analyze", str(path), "--json", env={"LAYERSCOPE_CACHE_DIR": str(tmp_path / "cache")})
    assert proc.returncode == 0, proc.stderr
    assert "truncated" not in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize("name", ["empty.json", "empty.json.gz", "empty.pftrace", "empty.pftrace.gz", "gz.json.gz"])
def test_empty_files_are_errors(run_cli: Any, tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    path.write_bytes(gzip.compress(b"") if name.startswith("gz") else b"")
    with pytest.raises(TraceError, match=name.replace(".", r"\.")):
        read_trace(path)
    assert "empty" in _refused_by_cli(run_cli, tmp_path, path)


# --------------------------------------------------------------------------- random and damaged bytes


def _random_bytes(seed: int, size: int = 4096) -> bytes:
    return random.Random(seed).randbytes(size)


def _bad_crc() -> bytes:
    data = bytearray(gzip.compress(json.dumps({"traceEvents": [EVENT]}).encode()))
    data[-8] ^= 0xFF  # the CRC-32 of the trailer
    return bytes(data)


DAMAGED = {
    "random.json": _random_bytes(1),
    "random.json.gz": _random_bytes(2),
    "random-member.json.gz": b"\x1f\x8b\x08\x00" + _random_bytes(3),
    "random.pftrace": b"\x0a" + _random_bytes(4),
    "random.pftrace.gz": b"\x1f\x8b\x08\x00" + _random_bytes(5),
    "bad-crc.json.gz": _bad_crc(),
    "latin1.json": '{"traceEvents": [{"ph": "X", "name": "é", "ts": 1, "dur": 1}]}'.encode("latin-1"),
    "latin1-args.json": '{"traceEvents": [{"ph": "X", "ts": 1, "dur": 1, "args": {"k": "é"}}]}'.encode("latin-1"),
    "utf16.json": '{"traceEvents": []}'.encode("utf-16"),
}


@pytest.mark.parametrize("name", sorted(DAMAGED))
def test_random_and_damaged_bytes_are_trace_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   name: str) -> None:
    path = tmp_path / name
    path.write_bytes(DAMAGED[name])
    if ".pftrace" in name:
        outcomes: list[Any] = []
        with pytest.raises(TraceError) as raised:
            read_trace(path)
        outcomes.append(raised.value)
    else:
        outcomes = _read_every_way(path, monkeypatch)
    for outcome in outcomes:
        assert isinstance(outcome, TraceError) and name in str(outcome), outcome
    if name == "bad-crc.json.gz":
        with pytest.raises(TraceError, match="incorrect data check"):
            read_trace(path)


def test_cli_on_damaged_bytes(run_cli: Any, tmp_path: Path) -> None:
    for name in ("random.json.gz", "random.pftrace", "bad-crc.json.gz", "latin1.json"):
        path = tmp_path / name
        path.write_bytes(DAMAGED[name])
        _refused_by_cli(run_cli, tmp_path, path)


# --------------------------------------------------------------------------- stale temporaries


_KILLED_MID_INGEST = """
import os, signal, sys
from layerscope.trace import chrome_reader
with chrome_reader.ingest_dir() as tmp:
    (tmp / "events.json").write_bytes(b"[" + b"{}," * 1000 + b"{}]")
    print(tmp, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
"""


def _age(path: Path, seconds: float) -> None:
    then = time.time() - seconds
    for p in (path, *path.iterdir()):
        os.utime(p, (then, then))


def test_an_ingest_killed_midway_is_cleaned_by_the_next(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    proc = subprocess.run([sys.executable, "-c", _KILLED_MID_INGEST], capture_output=True, text=True, env=env,
                          timeout=120)
    assert proc.returncode == -9, proc.stderr
    left = Path(proc.stdout.strip())
    assert left.parent == tmp_path and (left / "events.json").exists()
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    trace = tmp_path / "t.json"
    trace.write_text(json.dumps({"traceEvents": [EVENT]}))
    read_chrome_json(trace, fast=False)
    assert left.exists()  # under a minute old: its reader may be starting
    _age(left, 120)
    t = read_chrome_json(trace, fast=False)
    assert t.num_slices == 1
    assert not left.exists()
    assert not list(tmp_path.glob(chrome_reader.INGEST_PREFIX + "*"))  # nor the reader's own


_HOLD_INGEST = """
import sys, time
from layerscope.trace import chrome_reader
with chrome_reader.ingest_dir() as tmp:
    print(tmp, flush=True)
    sys.stdin.read()
"""


def test_a_live_ingest_is_left_alone(tmp_path: Path) -> None:
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    holder = subprocess.Popen([sys.executable, "-c", _HOLD_INGEST], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True, env=env)
    try:
        assert holder.stdout is not None
        live = Path(holder.stdout.readline().strip())
        _age(live, 3600)
        stale = tmp_path / (chrome_reader.INGEST_PREFIX + "old")
        stale.mkdir()
        (stale / "events.json").write_bytes(b"[]")
        _age(stale, 3600)
        unrelated = tmp_path / "layerscope-other"
        unrelated.mkdir()
        _age(unrelated, 3600)
        assert chrome_reader.remove_stale_ingest_dirs(tmp_path) == [stale]
        assert live.exists() and unrelated.exists() and not stale.exists()
    finally:
        holder.communicate("", timeout=60)
    assert not live.exists()


def test_numpy_fallback_is_used_without_the_scanner(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # installs without a C compiler walk the nesting in numpy: the same refusals
    monkeypatch.setattr(chrome_reader, "json_depth", json_depth_numpy)
    path = tmp_path / "deep.json"
    path.write_bytes(DEEP["args"])
    for outcome in _read_every_way(path, monkeypatch):
        assert isinstance(outcome, TraceError) and "nested deeper than 512" in str(outcome)
