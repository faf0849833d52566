"""The C scanner for trace JSON (layerscope/trace/_chrome_scan.c) against the one fallback, the
DuckDB path (``read_chrome_json(path, fast=False)``).

Whatever the scanner accepts must give the same tables as the DuckDB path; whatever it does not
reproduce exactly it must leave to it (a reason string, never wrong columns), and no input may
crash it. Its two-chunk scans are compared with its one-chunk scan column by column. More table
comparisons (real traces, every feature, fallbacks) are in tests/trace/test_chrome_fast.py.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from layerscope.errors import TraceError
from layerscope.trace import chrome_fast
from layerscope.trace.chrome_fast import _ScannedColumns, _Unsupported, read_chrome_json_fast
from layerscope.trace.chrome_reader import read_chrome_json
from layerscope.trace.tables import SCHEMAS

scan_module = chrome_fast._chrome_scan
pytestmark = pytest.mark.skipif(scan_module is None, reason="the C scanner is not built (no C compiler)")

ALL, HEAD, TAIL = (scan_module.MODE_ALL, scan_module.MODE_HEAD, scan_module.MODE_TAIL) if scan_module else (0, 1, 2)


def test_scanner_is_built_where_a_compiler_is() -> None:
    if shutil.which("cc") or shutil.which("gcc"):
        assert chrome_fast._chrome_scan is not None, "setup.py should have built layerscope.trace._chrome_scan"


# --------------------------------------------------------------------------- helpers


def _array(events: list[Any] | bytes) -> bytes:
    return events if isinstance(events, bytes) else json.dumps(events, ensure_ascii=False).encode()


def scanned(events: list[Any] | bytes, quoted: bool = False) -> _ScannedColumns | str:
    text = _array(events)
    result = scan_module.scan(text, 1, len(text) - 1, ALL, quoted, 1)
    return result if isinstance(result, str) else _ScannedColumns(text, [result])


def _all(columns: _ScannedColumns) -> np.ndarray:
    return np.arange(columns.n, dtype=np.int64)


def assert_same_columns(a: _ScannedColumns, b: _ScannedColumns) -> None:
    idx = _all(a)
    assert a.n == b.n
    assert np.array_equal(a.kind, b.kind)
    for name in ("ts", "ts_ok", "dur", "dur_ok"):
        assert np.array_equal(getattr(a, name), getattr(b, name)), name
    for name in ("tts", "tdur"):
        x, y = getattr(a, name), getattr(b, name)
        assert (x is None) == (y is None), name
        if x is not None:
            assert np.array_equal(x[0][x[1]], y[0][y[1]]) and np.array_equal(x[1], y[1]), name
    assert a.name_arr.to_pylist() == b.name_arr.to_pylist()
    assert a.name_arr.dictionary.to_pylist() == b.name_arr.dictionary.to_pylist()
    assert a.cat_arr.to_pylist() == b.cat_arr.to_pylist()
    assert np.array_equal(a.pid_code, b.pid_code) and a.pid_texts == b.pid_texts
    assert np.array_equal(a.tid_code, b.tid_code) and a.tid_texts == b.tid_texts
    for field in ("ph", "name", "cat", "s", "bp"):
        assert a.strings(field, idx) == b.strings(field, idx), field  # type: ignore[arg-type]
    assert a.idents(idx) == b.idents(idx)
    assert [a.raw_args(i) for i in idx.tolist()] == [b.raw_args(i) for i in idx.tolist()]
    for quoted in (False, True):
        try:
            x_flags = a.arg_flags(idx, quoted)
        except _Unsupported:
            with pytest.raises(_Unsupported):
                b.arg_flags(idx, quoted)
            continue
        assert np.array_equal(x_flags, b.arg_flags(idx, quoted))
        chosen = np.flatnonzero(x_flags)[::-1]  # any positions, any order
        assert a.arg_json(idx, chosen).equals(b.arg_json(idx, chosen))


def _plain(table: pa.Table) -> pa.Table:
    """Chunks combined and dictionaries decoded (their order depends on the reader)."""
    columns = {}
    for name in table.column_names:
        column = table.column(name).combine_chunks()
        if pa.types.is_dictionary(column.type):
            column = column.cast(column.type.value_type)
        columns[name] = column
    return pa.table(columns)


#: an event with a fractional ``ts`` put first switches ts quoting on (both paths see it)
_QUOTING = b'{"ph": "M", "name": "other", "ts": 0.5},'


def same_tables_or_left_to_duckdb(events: list[Any] | bytes, quoted: bool = False) -> bool:
    """The tables through the scanner equal the DuckDB path's; or the scanner declined (the DuckDB
    path reads then, whatever it makes of the input). ``True`` when the scanner took the input.

    The events array is the trace's ``traceEvents``; ``quoted`` puts an event with a fractional
    ``ts`` first, which switches ``ts`` quoting on.
    """
    text = _array(events)
    if quoted and text[:1] == b"[":
        text = b"[" + _QUOTING + text[1:]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "t.json"
        path.write_bytes(b'{"traceEvents": ' + text + b"}")
        try:
            fast = read_chrome_json_fast(path)
        except TraceError:  # nested past MAX_JSON_DEPTH: refused on every path
            with pytest.raises(TraceError):
                read_chrome_json(path, fast=False)
            return False
        if fast is None:
            return False
        try:
            slow = read_chrome_json(path, fast=False)
        except TraceError as exc:
            raise AssertionError(f"the scanner took input the DuckDB path refuses ({exc})") from None
    tables, _, warnings = fast
    for name in SCHEMAS:
        a, b = _plain(tables[name]), _plain(getattr(slow, name))
        if name == "arg_sets":  # the file's own args text there, DuckDB's re-serialization here
            a, b = a.sort_by("arg_set_id"), b.sort_by("arg_set_id")
            assert a.column("arg_set_id").equals(b.column("arg_set_id"))
            assert [orjson.loads(x) for x in a.column("json").to_pylist()] == \
                [orjson.loads(x) for x in b.column("json").to_pylist()]
        else:
            assert a.equals(b), f"{name}:\nscanner {a.slice(0, 5).to_pylist()}\nduckdb {b.slice(0, 5).to_pylist()}"
    assert warnings == slow.warnings
    return True


# --------------------------------------------------------------------------- fields


def test_kineto_event_fields() -> None:
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 7, "tid": "stream 7", "ts": 1661203462598738,
         "dur": 19, "args": {"External id": 1, "Input Dims": [[2, 3], []]}},
        {"ph": "f", "id": 12, "pid": 1102, "tid": 1262, "ts": 1712195495519695.812, "cat": "fwdbwd", "name": "fwdbwd",
         "bp": "e"},
        {"ph": "i", "s": "g", "name": "Record Window End", "pid": "", "tid": "", "ts": "17.25", "args": None},
        {"name": "esc \"q\" \\ \n \u00e9 \U0001f600 \u0000", "cat": "ÿ", "ph": "C", "ts": -3, "id": "x",
         "args": {"v": 1.5}},
        {},
    ]
    got = scanned(events)
    assert isinstance(got, _ScannedColumns)
    assert same_tables_or_left_to_duckdb(events)
    idx = _all(got)
    assert got.strings("name", idx)[3] == "esc \"q\" \\ \n \u00e9 \U0001f600 \u0000"
    assert got.strings("ph", idx) == ["X", "f", "i", "C", None]
    # a JSON float: its double's shortest decimal (1712195495519695.8), as DuckDB reads it
    assert got.ts.tolist() == [1661203462598738000, 1712195495519695800, 17250, -3000, 0]
    assert got.ts_ok.tolist() == [True, True, True, True, False]
    assert got.pid_texts == ["7", "1102", "", "0"]
    assert got.idents(idx) == [None, 12, None, "x", None]
    assert got.raw_args(2) == b"null" and got.raw_args(4) == b""
    assert got.arg_flags(idx, False).tolist() == [True, False, False, True, False]
    assert got.arg_json(idx, np.array([3, 0])).to_pylist() == [
        '{"args":{"v": 1.5}}', '{"args":{"External id": 1, "Input Dims": [[2, 3], []]}}']


@pytest.mark.parametrize(("text", "quoted", "tag", "ns"), [
    (b"1", False, 4, 1000),
    (b"-5", False, 4, -5000),
    (b"9223372036854775", False, 4, 9223372036854775000),
    (b"9223372036854776", False, 1, None),  # µs x 1000 overflows: an int, the caller raises
    (b"1.5", False, 4, 1500),
    (b"0.001", False, 4, 1),
    (b"-0.0", False, 4, 0),
    (b"1.2345", False, 2, None),  # a fourth decimal: rounded by the caller as DuckDB does
    (b"1e3", False, 2, None),
    (b"123456789012.345", False, 4, 123456789012345),  # 15 digits: the text is the double's shortest
    (b"1234567890123.456", False, 2, None),  # 16 digits: through the double
    (b"1712195495519689.047", True, 4, 1712195495519689047),  # quoted: the text itself
    (b"1712195495519689.0475", True, 3, None),
    (b'"12.5"', False, 4, 12500),
    (b'"12.3456"', False, 3, None),
    (b'"1e3"', False, 3, None),
    (b'" 12"', False, 3, None),
    (b'"-"', False, 3, None),
    (b'"9223372036854775807"', False, 3, None),
])
def test_time_tags(text: bytes, quoted: bool, tag: int, ns: int | None) -> None:
    events = b'[{"ts": ' + text + b"}]"
    result = scan_module.scan(events, 1, len(events) - 1, ALL, quoted, 1)
    assert not isinstance(result, str)
    assert np.frombuffer(result[2][3], np.uint8).tolist() == [tag]
    if ns is not None:
        assert np.frombuffer(result[3][3], np.int64).tolist() == [ns]


@given(st.lists(st.integers(-10**17, 10**17) | st.floats(-1e12, 1e12, allow_nan=False)
                | st.builds(lambda i, f: f"{i}.{f}" if f else str(i), st.integers(-10**13, 10**13),
                            st.sampled_from(["", "5", "25", "125", "0625", "5000001", "123456789"])),
                min_size=1, max_size=8), st.booleans())
@settings(max_examples=60, deadline=None)
def test_times_as_duckdb_reads_them(values: list[Any], quoted: bool) -> None:
    events = [{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": v, "dur": v} for v in values]
    same_tables_or_left_to_duckdb(events, quoted)


# --------------------------------------------------------------------------- left to DuckDB


@pytest.mark.parametrize("text", [
    b'[{"n\\u0061me": "x"}]',  # an escaped key of interest
    b'[{"ph": "X", "ph": "B"}]',  # a duplicated key
    b'[{"pid": 1.0}]',
    b'[{"pid": 9223372036854775808}]',
    b'[{"name": true}]',
    b'[{"name": "\\ud800"}]',  # a lone surrogate
    b'[{"name": "\\udc00\\ud800"}]',
    b'[{"cat": "\xff"}]',  # invalid UTF-8, in a field and in one no table reads
    b'[{"other": "\xc0\xaf"}]',
    b'[{"args": {"x": "\xed\xa0\x80"}}]',
    b'[{"args": ' + b"[" * 300 + b"]" * 300 + b"}]",
    b'[{"ph": "X"},]',
    b'[{"ph": "X"} {"ph": "B"}]',
    b'[{"name": "a\tb"}]',  # a raw control character
    b'[{"x": 01}]', b'[{"x": 1.}]', b'[{"x": -}]', b'[{"x": .5}]', b'[{"x": 1e}]', b'[{"x": tru}]',
    b'[{"x": "\\q"}]', b'[{"x": "\\u12"}]',
    b"[7]", b'[{"ph": "Q"}]', b'[{"ph": "XX"}]', b'[{"ph": ""}]', b'[{"ph": 1}]',
    b'[{"ts": true}]', b'[{"ts": {"a": 1}}]', b'[{"id": 1.5}]', b'[{"s": 1}]',
    b'[{"name": "unterminated}]', b'[{"name"}]', b'[{"name": }]',
])
def test_left_to_duckdb(text: bytes) -> None:
    result = scanned(text)
    assert isinstance(result, str) and result
    assert not same_tables_or_left_to_duckdb(text)


def test_quoted_ts_of_another_type_is_left_to_duckdb() -> None:
    assert isinstance(scanned(b'[{"ts": [1.5]}]', quoted=True), str)


@given(st.binary(max_size=200))
@settings(max_examples=400, deadline=None)
def test_random_bytes_never_crash(data: bytes) -> None:
    text = b"[" + data + b"]"
    for mode in (ALL, HEAD, TAIL):
        result = scan_module.scan(text, 1, len(text) - 1, mode, False, 1)
        assert isinstance(result, (str, tuple))


_SNIPPET = _array([
    {"ph": "X", "cat": "kernel", "name": "void gemm<128>(float*)", "pid": 0, "tid": "stream 7", "ts": 12.5,
     "dur": 3, "args": {"grid": [1, 2, 3], "name": "é\"\\", "x": None, "y": True, "z": -1.5e-3}},
    {"ph": "s", "id": "0x1", "pid": 1, "tid": 2, "ts": 13, "cat": "ac2g", "name": "ac2g", "bp": "e"},
])


@given(st.lists(st.tuples(st.integers(1, len(_SNIPPET) - 2), st.integers(0, 255)), min_size=1, max_size=4))
@settings(max_examples=60, deadline=None)
def test_mutated_events_same_or_declined(edits: list[tuple[int, int]]) -> None:
    text = bytearray(_SNIPPET)
    for at, byte in edits:
        text[at] = byte
    same_tables_or_left_to_duckdb(bytes(text))


def test_snippet_is_taken() -> None:
    assert same_tables_or_left_to_duckdb(_SNIPPET)  # unchanged, the scanner takes it
    assert same_tables_or_left_to_duckdb(_SNIPPET, quoted=True)


_SCALAR = (st.integers(-2**63, 2**63) | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=5)
           | st.booleans() | st.none())


_TIME = (st.integers(-2**63, 2**63 - 1) | st.floats(allow_nan=False, allow_infinity=False) | st.none()
         | st.builds(lambda i, f: f"{i}.{f}" if f else str(i), st.integers(-10**16, 10**16),
                     st.sampled_from(["", "5", "25", "125", "0625", "5000001"])))
_JSON = st.recursive(_SCALAR, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner,
                                                                                           max_size=3), max_leaves=6)
#: events with the types Kineto writes, mostly
_TYPED_EVENT = st.fixed_dictionaries({}, optional={
    "ph": st.sampled_from(list("XBEiIRMCstfbenP")) | st.none(), "cat": st.text(max_size=4) | st.none(),
    "name": st.text(max_size=6) | st.none(), "bp": st.just("e"), "s": st.sampled_from(["g", "p", "t"]),
    "pid": st.integers(-2**63, 2**63 - 1) | st.text(max_size=3) | st.none(),
    "tid": st.integers(-3, 3) | st.text(max_size=3), "id": st.integers(0, 2**40) | st.text(max_size=3),
    "ts": _TIME, "dur": _TIME, "tts": _TIME, "tdur": _TIME, "args": _JSON, "other": _JSON})
#: anything in any field
_WILD_EVENT = st.dictionaries(
    st.sampled_from(["ph", "cat", "name", "pid", "tid", "ts", "dur", "args", "id", "bp", "s", "tts", "tdur", "o"]),
    _SCALAR | st.sampled_from(["X", "B", "E", "i", "M", "C", "s", "f", "b", "e", "n"]) | _JSON, max_size=6)


@given(st.lists(_TYPED_EVENT | _WILD_EVENT, min_size=1, max_size=6), st.booleans())
@settings(max_examples=60, deadline=None)
def test_random_events_same_or_declined(events: list[dict[str, Any]], quoted: bool) -> None:
    same_tables_or_left_to_duckdb(events, quoted)


# --------------------------------------------------------------------------- chunks on two threads


def test_head_and_tail_chunks() -> None:
    text = _array([{"ph": "X", "ts": 1}, {"ph": "B", "ts": 2}, {"ph": "E", "ts": 3}])
    split = text.index(b'{"ph": "B"')
    head = scan_module.scan(text, 1, split, HEAD, False, 1)
    tail = scan_module.scan(text, split, len(text) - 1, TAIL, False, 2)
    assert not isinstance(head, str) and not isinstance(tail, str)
    assert (head[0], tail[0]) == (1, 2)
    both = _ScannedColumns(text, [head, tail])
    assert_same_columns(both, scanned(text))  # type: ignore[arg-type]
    # a split point inside an event is not a boundary: the head says so
    inside = text.index(b'"ts": 2')
    assert isinstance(scan_module.scan(text, 1, inside, HEAD, False, 1), str)
    # the last event with nothing after it is not a head
    assert isinstance(scan_module.scan(text, 1, len(text) - 1, HEAD, False, 1), str)


def _nested_trace(count: int) -> bytes:
    """Events whose args hold arrays of objects spread over lines (``},\\n{`` inside an event)."""
    lines = [json.dumps({"ph": "X", "name": f"op{i}", "pid": 1, "tid": 1, "ts": i * 10, "dur": 5,
                         "args": {"list": [{"a": i}, {"b": i}]}}).replace("}, {", "},\n  {") for i in range(count)]
    return ("[" + ",\n".join(lines) + "]").encode()


def _scan_modes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Splitting from 1 KiB on; the modes of the scanner's calls are recorded in the list returned."""
    calls: list[int] = []
    real_scan = scan_module.scan
    monkeypatch.setattr(scan_module, "scan", lambda *a: calls.append(a[3]) or real_scan(*a))
    monkeypatch.setattr(chrome_fast, "_SPLIT_MIN_BYTES", 1024)
    return calls


def test_split_on_two_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    text = _nested_trace(400)
    calls = _scan_modes(monkeypatch)
    columns = chrome_fast._scan_columns(text, 1, len(text) - 1, False)
    assert isinstance(columns, _ScannedColumns)
    assert len(columns.chunks) == 2 and sorted(calls) == [HEAD, TAIL]
    assert_same_columns(columns, scanned(text))  # type: ignore[arg-type]


def test_split_inside_an_event_scans_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    # a candidate that lies inside an event's args (``},\n  {"b"``): the head scan disproves it
    text = _nested_trace(400)
    calls = _scan_modes(monkeypatch)
    monkeypatch.setattr(chrome_fast, "_EVENT_GAP", __import__("re").compile(rb'\},\n  \{"b"'))
    columns = chrome_fast._scan_columns(text, 1, len(text) - 1, False)
    assert isinstance(columns, _ScannedColumns)
    assert len(columns.chunks) == 1 and sorted(calls) == [ALL, HEAD, TAIL]
    assert_same_columns(columns, scanned(text))  # type: ignore[arg-type]


def test_a_bad_tail_after_a_good_split_declines(monkeypatch: pytest.MonkeyPatch) -> None:
    text = _nested_trace(400)
    text = text.replace(b'"ts": 3990,', b'"ts": 3990 3,')  # broken in the last event
    monkeypatch.setattr(chrome_fast, "_SPLIT_MIN_BYTES", 1024)
    assert isinstance(chrome_fast._scan_columns(text, 1, len(text) - 1, False), str)


def test_switched_off_by_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "t.json"
    path.write_bytes(b'{"traceEvents": ' + _array([{"ph": "X", "ts": 1, "dur": 1}]) + b"}")
    assert chrome_fast.scanner_available() and read_chrome_json_fast(path) is not None
    monkeypatch.setenv("LAYERSCOPE_JSON_NATIVE", "0")
    assert not chrome_fast.scanner_available() and read_chrome_json_fast(path) is None


# --------------------------------------------------------------------------- args texts


def test_args_strings_and_search() -> None:
    text = b'xx{"a": 1}yy[2]zz{}'
    offsets = np.array([2, 12, 17, 0], dtype=np.int32)
    lengths = np.array([8, 3, 2, 0], dtype=np.int32)
    rows = np.array([2, 0, 3, 1, 0], dtype=np.int64)
    offs, data = scan_module.args_strings(text, offsets, lengths, rows)
    arr = pa.Array.from_buffers(pa.string(), len(rows), [None, pa.py_buffer(offs), pa.py_buffer(data)])
    arr.validate(full=True)
    assert arr.to_pylist() == ['{"args":{}}', '{"args":{"a": 1}}', '{"args":}', '{"args":[2]}', '{"args":{"a": 1}}']
    empty = scan_module.args_strings(text, offsets, lengths, np.zeros(0, np.int64))
    assert empty == (b"\0\0\0\0", b"")
    assert scan_module.args_contain(text, offsets, lengths, rows, b'"a":')
    assert not scan_module.args_contain(text, offsets, lengths, np.array([1, 2, 3], np.int64), b'"a":')
    assert not scan_module.args_contain(text, offsets, lengths, np.array([1], np.int64), b"]y")  # span ends first
    for bad_rows, bad_off, bad_len in ((np.array([4], np.int64), offsets, lengths),
                                       (np.array([0], np.int64), np.array([15], np.int32), np.array([9], np.int32))):
        with pytest.raises(IndexError):
            scan_module.args_strings(text, bad_off, bad_len, bad_rows)
        with pytest.raises(IndexError):
            scan_module.args_contain(text, bad_off, bad_len, bad_rows, b"x")


# --------------------------------------------------------------------------- after the events array


@given(st.one_of(_JSON.map(lambda v: json.dumps({"k": v, "x": [1, {"y": "]"}]})[1:]),
                 st.text(max_size=30), st.binary(max_size=30).map(lambda b: b.decode("latin-1"))))
@settings(max_examples=400, deadline=None)
def test_object_tail_agrees_with_orjson(rest: str) -> None:
    # "," + rest is what follows a candidate "]"; 0 must mean orjson fails on "{" + rest
    text = b"]," + rest.encode()
    verdict = scan_module.object_tail(text, 1)
    try:
        parsed = orjson.loads(b"{" + text[2:])
        ok = isinstance(parsed, dict)
    except orjson.JSONDecodeError:
        ok = False
    if verdict == 0:
        assert not ok
    elif verdict == 1:
        assert ok


def test_object_tail_cases() -> None:
    assert scan_module.object_tail(b'], "a": [1, 2], "b": {"c": "]"} }\n', 1) == 1
    assert scan_module.object_tail(b"], }", 1) == 1  # an empty object
    assert scan_module.object_tail(b'], "a": 1}, {"ph": "X"}]}', 1) == 0  # inside the events array
    assert scan_module.object_tail(b'], "a": "\xff"}', 1) == -1  # left to orjson
    with pytest.raises(ValueError):
        scan_module.object_tail(b"],", 5)
