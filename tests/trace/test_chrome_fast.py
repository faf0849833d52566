"""The in-memory fast path for Chrome/Kineto JSON (layerscope/trace/chrome_fast.py) against the
DuckDB path (``read_chrome_json(path, fast=False)``): same tables, rows, warnings and metadata.

The fast path's columns come from the C scanner (layerscope/trace/_chrome_scan.c); whatever it
declines, or where it is not built, the DuckDB path reads (the one fallback), so every test here
compares the scanner's tables with the fallback's.

The one intended difference is ``arg_sets``: the fast path keeps the file's own JSON text of
``args`` (DuckDB re-serializes it) and lists the arg sets in id order (DuckDB in its output
order); the documents are compared as parsed JSON, by arg set id, and the ``args`` view of
:class:`TraceDB` (what queries see) is compared row by row.
"""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from layerscope.analysis.engine import TraceDB
from layerscope.errors import TraceError
from layerscope.trace import chrome_fast
from layerscope.trace.chrome_fast import read_chrome_json_fast
from layerscope.trace.chrome_reader import DepthGuard, _find_array_end, read_chrome_json
from layerscope.trace.tables import SCHEMAS, TraceTables

DATA = Path(__file__).resolve().parents[1] / "data" / "traces"
REAL = sorted(DATA.glob("*.json.gz"))

#: the column sources the fast path built during the running test
_RUN: dict[str, Any] = {"sources": []}


@pytest.fixture(autouse=True)
def sources(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Records the type of the columns each table build of the fast path got."""
    sources: list[str] = []
    real_builder = chrome_fast._Builder

    def builder(columns: Any, quoted: bool, warnings: list[str]) -> Any:
        sources.append(type(columns).__name__)
        return real_builder(columns, quoted, warnings)

    monkeypatch.setattr(chrome_fast, "_Builder", builder)
    _RUN.update(sources=sources)
    return sources


# --------------------------------------------------------------------------- comparison


def _plain(table: pa.Table) -> pa.Table:
    """Chunks combined and dictionaries decoded (their order depends on the reader)."""
    columns = {}
    for name in table.column_names:
        column = table.column(name).combine_chunks()
        if pa.types.is_dictionary(column.type):
            column = column.cast(column.type.value_type)
        columns[name] = column
    return pa.table(columns)


def assert_same_tables(fast: TraceTables, slow: TraceTables) -> None:
    for name in SCHEMAS:
        a, b = _plain(getattr(fast, name)), _plain(getattr(slow, name))
        assert a.schema == b.schema, name
        if name == "arg_sets":
            # rows in id order here, in DuckDB's output order there (the order is not specified)
            a, b = a.sort_by("arg_set_id"), b.sort_by("arg_set_id")
            assert a.column("arg_set_id").equals(b.column("arg_set_id"))
            assert [orjson.loads(x) for x in a.column("json").to_pylist()] == \
                [orjson.loads(x) for x in b.column("json").to_pylist()]
        else:
            assert a.equals(b), f"{name}:\nfast {a.slice(0, 5).to_pylist()}\nslow {b.slice(0, 5).to_pylist()}"
    assert fast.warnings == slow.warnings
    assert fast.metadata == slow.metadata


def fast_and_slow(path: Path, *, must_be_fast: bool = True) -> tuple[TraceTables, TraceTables]:
    if must_be_fast:
        if not chrome_fast.scanner_available():
            pytest.skip("the C scanner is not built (no C compiler at install) or pyarrow < 16")
        assert read_chrome_json_fast(path) is not None, "the fast path fell back"
        assert _RUN["sources"][-1] == "_ScannedColumns", f"columns from {_RUN['sources'][-1]}"
    fast = read_chrome_json(path)
    slow = read_chrome_json(path, fast=False)
    assert_same_tables(fast, slow)
    return fast, slow


def _write(tmp_path: Path, events: Any, name: str = "t.json.gz", **top: Any) -> Path:
    path = tmp_path / name
    data = json.dumps({"traceEvents": events, **top}).encode()
    path.write_bytes(gzip.compress(data) if name.endswith(".gz") else data)
    return path


# --------------------------------------------------------------------------- real traces


@pytest.mark.parametrize("path", REAL, ids=[p.name for p in REAL])
def test_real_traces_same_tables(path: Path) -> None:
    fast, _ = fast_and_slow(path)
    assert fast.slice.num_rows > 0


@pytest.mark.parametrize("name", ["gpu-sampled-rank0", "gpu-triton-example", "cpu-only"])
def test_args_view_is_the_same(name: str) -> None:
    # the raw args text (fast) and DuckDB's re-serialized text give the same args rows
    path = DATA / f"{name}.json.gz"
    sql = "SELECT * FROM args ORDER BY arg_set_id, key, display_value"
    with TraceDB(read_chrome_json(path)) as fast, TraceDB(read_chrome_json(path, fast=False)) as slow:
        rows = fast.records(sql)
        assert rows == slow.records(sql)
        assert rows


def test_ns_resolution_args_numbers_agree() -> None:
    # "blocks per SM": 5.300000 in the file; DuckDB's text says 5.3: the same double either way
    path = DATA / "gpu-training-ns-resolution.json.gz"
    sql = ("SELECT arg_set_id, key, real_value, int_value, display_value FROM args "
           "WHERE key IN ('args.blocks per SM', 'args.warps per SM', 'args.grid') ORDER BY 1, 2, 5")
    with TraceDB(read_chrome_json(path)) as fast, TraceDB(read_chrome_json(path, fast=False)) as slow:
        rows = fast.records(sql)
        assert rows == slow.records(sql)
        assert any(r["display_value"] == "5.3" for r in rows)


# --------------------------------------------------------------------------- features


def _events_all_features() -> list[dict[str, Any]]:
    return [
        {"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "proc"}},
        {"ph": "M", "name": "process_labels", "pid": 1, "tid": 0, "args": {"labels": "a,b"}},
        {"ph": "M", "name": "process_sort_index", "pid": 1, "tid": 0, "args": {"sort_index": 3}},
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 2, "args": {"name": "worker"}},
        {"ph": "M", "name": "thread_sort_index", "pid": 1, "tid": 2, "args": {"sort_index": 5}},
        {"ph": "M", "name": "thread_name", "pid": "Spans", "tid": "PyTorch Profiler", "args": {"name": "x"}},
        {"ph": "B", "name": "outer", "pid": 1, "tid": 2, "ts": 10, "cat": "c", "args": {"a": 1}, "tts": 3},
        {"ph": "X", "name": "inner", "pid": 1, "tid": 2, "ts": 11.5, "dur": 2.25, "args": {"k": [1, "a"]},
         "tts": 4.5, "tdur": 1.125},
        {"ph": "i", "name": "tick", "pid": 1, "tid": 2, "ts": 12, "s": "t", "tts": 5},
        {"ph": "I", "name": "glob", "pid": 1, "tid": 2, "ts": 12, "s": "g", "args": {"g": 1}},
        {"ph": "R", "name": "pinst", "pid": "Spans", "tid": 2, "ts": 13, "s": "p"},
        {"ph": "i", "name": "noscope", "pid": 1, "tid": 3, "ts": 13},
        {"ph": "E", "pid": 1, "tid": 2, "ts": 20},
        {"ph": "E", "pid": 1, "tid": 3, "ts": 20},  # no open B: warning
        {"ph": "B", "name": "open", "pid": 1, "tid": 2, "ts": 30},  # never ends: dur -1
        {"ph": "B", "name": "b2", "pid": 1, "tid": 4, "ts": 30},
        {"ph": "B", "name": "b3", "pid": 1, "tid": 4, "ts": 31},
        {"ph": "E", "pid": 1, "tid": 4, "ts": 33},
        {"ph": "C", "name": "mem", "pid": 1, "ts": 5, "args": {"used": 10, "free": 2.5}},
        {"ph": "C", "name": "mem", "pid": 1, "ts": 6, "id": 3, "args": {"used": 11, "free": "x", "b": True}},
        {"ph": "C", "name": "gpu", "pid": "Traces", "ts": 4, "args": {"util": 0.5}},
        {"ph": "C", "name": "empty", "pid": 1, "ts": 4, "args": {}},
        {"ph": "b", "name": "req", "cat": "a", "id": 7, "pid": 1, "tid": 2, "ts": 1},
        {"ph": "n", "name": "mark", "cat": "a", "id": 7, "pid": 1, "tid": 2, "ts": 2},
        {"ph": "e", "name": "req", "cat": "a", "id": 7, "pid": 1, "tid": 2, "ts": 4},
        {"ph": "b", "name": "never", "cat": "a", "id": "x", "pid": 1, "tid": 2, "ts": 3},
        {"ph": "s", "name": "f", "cat": "fl", "id": 1, "pid": 1, "tid": 2, "ts": 12.5},
        {"ph": "t", "name": "f", "cat": "fl", "id": "1", "pid": 1, "tid": 2, "ts": 13},
        {"ph": "f", "name": "f", "cat": "fl", "id": 1, "pid": 1, "tid": 2, "ts": 25, "bp": "e"},
        {"ph": "s", "name": "g", "cat": "fl", "id": 10, "pid": 1, "tid": 2, "ts": 11.6},
        {"ph": "f", "name": "g", "cat": "fl", "id": 10, "pid": 1, "tid": 3, "ts": 12.9},  # next slice
        {"ph": "s", "name": "g", "cat": "fl", "id": 9, "pid": 1, "tid": 2, "ts": 11.7},
        {"ph": "f", "name": "g", "cat": "fl", "id": 9, "pid": 1, "tid": 2, "ts": 28, "bp": "e"},
        {"ph": "f", "name": "h", "cat": None, "id": 2, "pid": 1, "tid": 2, "ts": 28},
        {"ph": "X", "name": "late", "pid": 1, "tid": 2, "ts": 24, "dur": 3},
        {"ph": "X", "name": "neg", "pid": 1, "tid": 2, "ts": 24, "dur": -3},
        {"ph": "X", "name": "nots", "pid": 1, "tid": 2, "dur": 3},
        {"ph": "X", "name": "nodur", "pid": 1, "tid": 2, "ts": 3},
        {"ph": "X", "name": "overlap", "pid": 1, "tid": 2, "ts": 11, "dur": 15},
        {"ph": "X", "name": "o2", "pid": 1, "tid": 2, "ts": 12, "dur": 100},
        {"ph": "X", "name": "strtid", "pid": "Traces", "tid": "stream 7", "ts": 1700000000123.456, "dur": 1},
        {"ph": "X", "name": "négatif ünïcode", "cat": "ÿ", "pid": -1, "tid": -5, "ts": 40, "dur": 0},
        {"ph": "X", "name": "zero", "pid": 1, "tid": 2, "ts": 26, "dur": 0, "args": {}},
        {"ph": "X", "name": "ws", "pid": 1, "tid": 2, "ts": 26, "dur": 0, "args": [1]},
        {"ph": "P", "name": "sample", "pid": 9, "tid": 9, "ts": 1},  # another phase: only a thread
        {"ph": "X", "name": "round", "pid": 1, "tid": 5, "ts": 50.0004999, "dur": 2.0005},
        {"ph": "X", "name": "round2", "pid": 1, "tid": 5, "ts": "60.1234565", "dur": "0.0000005"},
    ]


def test_all_features(tmp_path: Path) -> None:
    fast, _ = fast_and_slow(_write(tmp_path, _events_all_features(), displayTimeUnit="ns", after=[1, {"a": 2}]))
    names = fast.slice.column("name").to_pylist()
    assert "neg" not in names and "nots" not in names and "open" in names
    assert len(fast.warnings) >= 5


@pytest.mark.parametrize("ts", [1700000000123.456, 1712195495406752.797, 0.5, 1.25e-3])
def test_fractional_timestamps_are_exact(tmp_path: Path, ts: float) -> None:
    events = [{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": ts, "dur": 1.5},
              {"ph": "X", "name": "b", "pid": 1, "tid": 1, "ts": 17, "dur": 0.001}]
    text = json.dumps({"traceEvents": events}).replace(repr(ts), "1712195495406752.797" if ts > 1e15 else repr(ts))
    path = tmp_path / "t.json"
    path.write_text(text)
    fast, _ = fast_and_slow(path)
    if ts > 1e15:
        assert 1712195495406752797 in fast.slice.column("ts").to_pylist()


def test_ns_resolution_strings_and_rounding(tmp_path: Path) -> None:
    events = [{"ph": "X", "name": f"e{i}", "pid": 1, "tid": 1, "ts": f"{1000 + i}.{d}", "dur": dur}
              for i, (d, dur) in enumerate([("0004995", 0.0015), ("0005", 1.0005), ("999", "2.1234565"),
                                            ("1", 3), ("123456789", 0.5)])]
    fast_and_slow(_write(tmp_path, events))


def test_top_level_array_and_plain_json(tmp_path: Path) -> None:
    events = [{"ph": "X", "name": "a", "pid": "p", "tid": "t", "ts": 1, "dur": 1},
              {"ph": "X", "name": "b", "pid": 7, "tid": "stream 7", "ts": 1, "dur": 1}]
    path = tmp_path / "arr.json"
    path.write_text(json.dumps(events))
    fast_and_slow(path)


@pytest.mark.parametrize("how", ["no string views", "switched off", "not built"])
def test_without_the_scanner_duckdb_reads(monkeypatch: pytest.MonkeyPatch, how: str) -> None:
    # pyarrow < 16 (no string-view arrays), LAYERSCOPE_JSON_NATIVE=0, no C compiler at install:
    # the DuckDB path reads, without holding the text
    if how == "no string views":
        monkeypatch.setattr(chrome_fast, "_STRING_VIEW", False)
    elif how == "switched off":
        monkeypatch.setenv("LAYERSCOPE_JSON_NATIVE", "0")
    else:
        monkeypatch.setattr(chrome_fast, "_chrome_scan", None)
    monkeypatch.setattr(chrome_fast, "_read_text", lambda p: pytest.fail("the text was read"))
    _fallback(DATA / "gpu-sampled-rank0.json.gz")
    assert read_chrome_json(DATA / "gpu-sampled-rank0.json.gz").arg_sets.num_rows == 4811


def test_metadata_before_and_after_the_array(tmp_path: Path) -> None:
    text = ('{"schemaVersion": 1, "deviceProperties": [{"id": 0}], "traceEvents": [\n'
            '{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 2, "args": {"x": [1, 2]}}\n'
            '], "INFO": [1, [2]], "traceName": "t", "baseTimeNanoseconds": 17}')
    path = tmp_path / "m.json"
    path.write_text(text)
    fast, _ = fast_and_slow(path)
    assert fast.metadata["INFO"] == [1, [2]] and fast.metadata["baseTimeNanoseconds"] == 17


def test_whitespace_only_args_are_no_args(tmp_path: Path) -> None:
    text = ('{"traceEvents": [{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 2, "args": { \n }},'
            '{"ph": "X", "name": "b", "pid": 1, "tid": 1, "ts": 1, "dur": 1, "args": {\n  "k" : 1.500 }},'
            '{"ph": "X", "name": "c", "pid": 1, "tid": 1, "ts": 1, "dur": 1, "args": null}]}')
    path = tmp_path / "w.json"
    path.write_text(text)
    fast, _ = fast_and_slow(path)
    assert fast.arg_sets.num_rows == 1


def test_many_threads_and_flows(tmp_path: Path) -> None:
    events: list[dict[str, Any]] = []
    for i in range(300):
        pid, tid = i % 7, f"t{i % 13}" if i % 3 else i % 11
        events.append({"ph": "X", "name": f"k{i % 17}", "cat": "kernel" if i % 2 else "cpu_op", "pid": pid,
                       "tid": tid, "ts": i * 3, "dur": (i * 7) % 11, "args": {"i": i}})
        events.append({"ph": "s" if i % 4 == 0 else "f", "name": "ac2g", "cat": "ac2g", "id": i // 4,
                       "pid": pid, "tid": tid, "ts": i * 3 + 1, "bp": "e" if i % 8 else None})
    fast_and_slow(_write(tmp_path, events))


# --------------------------------------------------------------------------- fallback


def _fallback(path: Path) -> None:
    assert read_chrome_json_fast(path) is None
    try:
        slow = read_chrome_json(path, fast=False)
    except TraceError:
        with pytest.raises(TraceError):
            read_chrome_json(path)
        return
    assert_same_tables(read_chrome_json(path), slow)


@pytest.mark.parametrize("event", [
    {"ph": "X", "name": {"weird": 1}, "pid": 1, "tid": 1, "ts": 9, "dur": 2},
    {"ph": "X", "name": "a", "pid": 1.0, "tid": 1, "ts": 9, "dur": 2},
    {"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": "soon", "dur": 2},
    {"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": "1e3", "dur": 2},
    {"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": " 12", "dur": 2},
    {"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": "0x10", "dur": 2},
    {"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": True, "dur": 2},
    {"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 1e300, "dur": 2},
    {"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 10**17, "dur": 2},
    {"ph": "Q", "name": "a", "pid": 1, "tid": 1, "ts": 1},
    7,
])
def test_unsupported_input_falls_back(tmp_path: Path, event: Any) -> None:
    _fallback(_write(tmp_path, [{"ph": "X", "name": "ok", "pid": 1, "tid": 1, "ts": 1, "dur": 1}, event]))


def test_nested_ts_under_quoting_falls_back(tmp_path: Path) -> None:
    # the DuckDB path quotes every "ts" number once fractional ones appear, nested ones too
    events = [{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 1.5, "dur": 1, "args": {"ts": 3}}]
    _fallback(_write(tmp_path, events))


def test_truncated_and_multi_member_gzip_fall_back(tmp_path: Path) -> None:
    raw = (DATA / "gpu-sampled-rank0.json.gz").read_bytes()
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(raw[: len(raw) // 2])
    _fallback(cut)
    text = json.dumps({"traceEvents": [{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 1}]}).encode()
    multi = tmp_path / "multi.json.gz"
    multi.write_bytes(gzip.compress(text[:20]) + gzip.compress(text[20:]))
    _fallback(multi)


def test_json_cut_mid_event_falls_back(tmp_path: Path) -> None:
    text = json.dumps({"traceEvents": [{"ph": "X", "name": f"e{i}", "pid": 1, "tid": 1, "ts": i, "dur": 1}
                                       for i in range(20)]})
    path = tmp_path / "cut.json"
    path.write_text(text[: text.index('"e12"')])
    _fallback(path)


def test_invalid_utf8_in_args_falls_back(tmp_path: Path) -> None:
    path = tmp_path / "u.json"
    path.write_bytes(b'{"traceEvents": [{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 1, '
                     b'"args": {"x": "\xff"}}]}')
    _fallback(path)


def test_big_text_goes_to_duckdb(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _write(tmp_path, [{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 1}] * 50)
    monkeypatch.setattr(chrome_fast, "MAX_TEXT_BYTES", 1000)
    _fallback(path)


def test_fast_flag_and_environment_force_duckdb(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _write(tmp_path, [{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 1}])
    calls: list[Path] = []
    monkeypatch.setattr(chrome_fast, "read_chrome_json_fast", lambda p: calls.append(p))
    read_chrome_json(path, fast=False)
    assert calls == []
    read_chrome_json(path)
    assert calls == [path]


# --------------------------------------------------------------------------- random events

_NUMBER = (st.integers(-10, 10**6) | st.floats(allow_nan=False, allow_infinity=False, min_value=-1e7, max_value=1e7)
           | st.sampled_from([1712195495406752.797, 0.0005, 2.0005, 1e-7, 1.5e3]))
_ARGS = (st.dictionaries(st.sampled_from(["name", "sort_index", "labels", "k", "ts"]),
                         st.integers(-3, 3) | st.text(max_size=3) | st.floats(-10, 10) | st.booleans(), max_size=3)
         | st.integers() | st.none())
#: events the fast path takes (types as Kineto writes them)
_KINETO_EVENT = st.fixed_dictionaries(
    {"ph": st.sampled_from(list("XXXXBEiICMMstfben"))},
    optional={"ts": _NUMBER | st.sampled_from(["12.5", "7", "-3.25", "1712195495406752.797"]) | st.none(),
              "dur": _NUMBER | st.sampled_from(["2.5", "3"]), "tts": _NUMBER, "tdur": _NUMBER,
              "name": st.sampled_from(["process_name", "thread_name", "thread_sort_index", "process_sort_index",
                                       "process_labels", "k", "é"]) | st.text(max_size=4),
              "cat": st.sampled_from(["a", "b", "é"]) | st.none(),
              "pid": st.integers(-2, 3) | st.sampled_from(["a", "1", "Spans"]),
              "tid": st.integers(-2, 3) | st.sampled_from(["b", "2", "stream 7"]),
              "id": st.integers(0, 3) | st.sampled_from(["0x1", "2", "10"]),
              "bp": st.just("e"), "s": st.sampled_from(["g", "p", "t"]), "args": _ARGS},
)
#: anything goes (wrong types, odd phases): the fast path falls back or agrees
_ANY_EVENT = st.fixed_dictionaries(
    {"ph": st.sampled_from(list("XBEiICMstfben")) | st.text(max_size=2)},
    optional={"ts": _NUMBER | st.text(max_size=4) | st.none() | st.booleans(),
              "dur": _NUMBER | st.text(max_size=3), "name": st.text(max_size=6) | st.integers(0, 3),
              "pid": st.integers(0, 3) | st.text(max_size=3) | st.floats(0, 2),
              "tid": st.integers(0, 3) | st.text(max_size=3), "id": st.integers(0, 3) | st.text(max_size=2),
              "bp": st.just("e"), "s": st.sampled_from(["g", "p", "t"]),
              "args": _ARGS},
)


def _decline_reason(path: Path) -> str | None:
    """Why the fast path leaves ``path`` to DuckDB (its ``_Unsupported``, the scanner's reason among
    them, or a parse error of what surrounds the events), else ``None``."""
    if not chrome_fast.scanner_available():
        return "the C scanner is not available"
    try:
        text = chrome_fast._read_text(path)
        if text is None:
            return "not held in memory"
        chrome_fast._parse(text, DepthGuard(path))
    except chrome_fast._Unsupported as exc:
        return str(exc)
    except (ValueError, OverflowError) as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


def _same_or_fallback(tmp_path: Path, events: list[Any], gz: bool) -> str | None:
    """``None`` when the fast path built the tables (the DuckDB path's, compared), else why not."""
    text = json.dumps({"traceEvents": events})
    path = tmp_path / ("r.json.gz" if gz else "r.json")
    path.write_bytes(gzip.compress(text.encode()) if gz else text.encode())
    fast = read_chrome_json_fast(path)  # never raises
    reason = _decline_reason(path)
    assert (fast is None) == (reason is not None), reason
    try:
        slow = read_chrome_json(path, fast=False)
    except TraceError:
        assert fast is None
        return reason
    if fast is None:
        return reason
    tables, metadata, warnings = fast
    assert_same_tables(TraceTables.from_tables(tables, {**metadata, **slow.metadata}, warnings), slow)
    return None


_TIMES = ("ts", "dur", "tts", "tdur")


def _declined_by_design(events: list[dict[str, Any]], reason: str) -> bool:
    """Whether ``reason`` is one the fast path gives Kineto-like events by design, and holds:
    times DuckDB's casts read their own way (exponents, under ts quoting a float's digits too),
    a nested ``"ts"`` in args once fractional timestamps switch ts quoting on, or an int outside
    int64 (inside args: the scanner declines it)."""
    if reason == "a time that is not a plain decimal number":
        return any("e" in json.dumps(e[k]).lower() for e in events for k in _TIMES if k in e)
    if reason == "a nested 'ts' key in args under ts quoting":
        return any(isinstance(e.get("args"), dict) and "ts" in e["args"] for e in events)
    if reason == "the C scanner is not available":
        return True
    if reason == "the C scanner declined the events: an int outside int64":
        return _big_int(events)
    return False


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(events=st.lists(_KINETO_EVENT, min_size=1, max_size=16), gz=st.booleans())
def test_random_kineto_like_events_same(tmp_path: Path, events: list[dict[str, Any]], gz: bool) -> None:
    # events as Kineto writes them: the fast path must build the tables, unless by design
    reason = _same_or_fallback(tmp_path, events, gz)
    assert reason is None or _declined_by_design(events, reason), reason
    if reason is None:
        assert _RUN["sources"][-1] == "_ScannedColumns", _RUN["sources"][-1]


def _big_int(value: Any) -> bool:
    if isinstance(value, dict):
        return any(_big_int(v) for v in value.values())
    if isinstance(value, list):
        return any(_big_int(v) for v in value)
    return isinstance(value, int) and not isinstance(value, bool) and not -2**63 <= value < 2**63


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(events=st.lists(_ANY_EVENT | st.integers() | st.none(), min_size=1, max_size=12), gz=st.booleans())
def test_random_events_same_or_fallback(tmp_path: Path, events: list[Any], gz: bool) -> None:
    _same_or_fallback(tmp_path, events, gz)


def test_random_like_numbers_roundtrip(tmp_path: Path) -> None:
    # half-way and long fractions through both paths (DuckDB rounds half away from zero, twice)
    values = [0.0005, 0.0015, 2.0005, -2.0005, 1.2345675, 1.2345665, 123456.7895, 0.1 + 0.2, 1 / 3, math.pi * 1e9]
    events = [{"ph": "X", "name": "a", "pid": 1, "tid": i, "ts": 1, "dur": v} for i, v in enumerate(values)]
    events += [{"ph": "X", "name": "b", "pid": 1, "tid": i, "ts": 1, "dur": str(v)} for i, v in enumerate(values)]
    fast_and_slow(_write(tmp_path, events))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from([b"]", b" ", b"\n", b"}", b",", b'"a": 1', b"[", b"{"]), max_size=400),
       st.integers(0, 40), st.integers(1 << 6, 1 << 9))
def test_tail_window_finds_the_same_array_end(pieces: list[bytes], start: int, tail_bytes: int) -> None:
    # the fast path's window vs the DuckDB path's tail (its last _TAIL_BYTES bytes)
    text = b"".join(pieces) + b'], "x": [1]}'
    start = min(start, len(text))
    old = chrome_fast._TAIL_BYTES
    chrome_fast._TAIL_BYTES = tail_bytes
    try:
        window = chrome_fast._tail_offset(text, start)
        full = max(start, len(text) - tail_bytes)
    finally:
        chrome_fast._TAIL_BYTES = old
    assert window >= full
    a = _find_array_end(text[window:], False)
    b = _find_array_end(text[full:], False)
    assert (a and (a[0] + window, a[1])) == (b and (b[0] + full, b[1]))
