"""Read Chrome Trace Event JSON (and Kineto's flavour of it) into :class:`TraceTables`.

Two paths give the same tables:

* **Fast path** (:mod:`layerscope.trace.chrome_fast`), tried first where the optional C scanner
  ``_chrome_scan`` is built: the whole file is inflated in memory and the ``traceEvents`` array
  scanned into columns (GIL released, two chunks on two threads); columns go to numpy/Arrow and
  through the same table logic as below (:func:`ids_for`, :func:`apply_metadata`,
  :func:`python_slices`, :func:`order_and_nest`, :func:`bind_flows`, :func:`counters`). No
  temporary file, no SQL: ~0.9 µs per event, 1.8-12x faster than the DuckDB path up to ~1M
  events, whose cost is mostly fixed per statement. It covers what traces contain (every phase
  read here, numbers or strings for pid/tid/id, fractional and string times) and returns
  ``None`` for anything else (the scanner not built, truncated or corrupt input, unexpected JSON
  types, exotic time strings, text over ``chrome_fast.MAX_TEXT_BYTES``), and then:
* **DuckDB path** (the general one and the only fallback; ``read_chrome_json(path, fast=False)``
  or ``LAYERSCOPE_JSON_FAST=0`` forces it), in three steps:

1. The file is decompressed as a stream (gzip or plain) and only the bytes of the
   ``traceEvents`` array are copied to a temporary file; the top-level fields before and after
   the array (``deviceProperties``, ``baseTimeNanoseconds`` …) become ``metadata``. Python never
   holds the decoded JSON tree, so memory is bounded by the columnar result.
2. DuckDB's JSON reader (C++, parallel) parses the array into typed columns: every event field
   as text, ``args`` as JSON. This is ~10× faster than ``orjson`` plus a Python loop.
3. Columns are turned into trace_processor's tables with DuckDB SQL and numpy: ``ts``/``dur``
   µs (with sub-µs fractions) → int64 ns through DECIMAL (no float rounding), threads and
   processes from pid/tid (numbers or strings), ``M`` metadata, B/E matched per thread stack,
   depth/parent by vectorized interval nesting per track, flows bound to slices.

The one difference between the paths is in ``arg_sets``: ``json`` holds the file's own text of
``args`` on the fast path and DuckDB's re-serialization (no whitespace, ``5.3`` for
``5.300000``) here, and the rows come in id order there and in DuckDB's output order here. They
are the same JSON under the same ids, so the ``args`` view and the reports see the same values.

When the events carry fractional µs timestamps (modern Kineto), ``"ts"`` numbers are quoted in
the copy so DuckDB keeps their digits (its JSON numbers are doubles: 0.25 µs resolution at 1.7e15
µs); trace_processor reads them through doubles, so on such traces its ``ts`` differ by up to
~250 ns from ours and it drops a few more slices as overlapping.

A file that ends inside the array (truncated gzip, JSON cut mid-event) keeps its complete
events and adds a warning; input that is not a trace raises :class:`TraceError`. Events with a
missing/garbled ``ts`` or a negative ``dur`` are skipped and counted in ``warnings``.

Semantics follow Perfetto's JSON importer: ``displayTimeUnit`` is ignored (it only affects
display); instants have ``dur = 0``; a ``B`` without ``E`` gets ``dur = -1``; counter tracks are
named ``"<name> <series>"`` per process; each process gets a main thread (``tid = pid``); a
string pid/tid gets a synthetic number and becomes the process/thread name; ``upid 0`` and
``utid 0`` are placeholder rows, as in trace_processor.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import queue
import re
import shutil
import stat
import tempfile
import threading
import time
import zlib
from collections.abc import Iterable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import duckdb
import numpy as np
import numpy.ma  # np.unique imports it on first use: at import time here, not mid-ingest
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from layerscope.errors import TraceError
from layerscope.trace.readers import MAX_JSON_DEPTH, inflate_budget, too_big
from layerscope.trace.tables import SCHEMAS, TraceTables

try:  # advisory locks (POSIX): how a stale ingest directory is told from a live one
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

try:  # the optional C scanner (setup.py builds it where a compiler is available)
    from layerscope.trace import _chrome_scan
except ImportError:  # pragma: no cover - installs without a compiler
    _chrome_scan = None  # type: ignore[assignment]

log = logging.getLogger(__name__)


def _inflate_module() -> ModuleType:
    """python-isal's zlib when installed (2–3× faster inflate), else the standard library's."""
    try:
        from isal import isal_zlib
    except ImportError:
        return zlib
    return isal_zlib


#: The zlib-compatible module that inflates gzip input (chosen once, at import).
_INFLATE = _inflate_module()

_CHUNK_BYTES = 1 << 22
_TAIL_BYTES = 1 << 23
_HEADER_LIMIT_BYTES = 1 << 28
_WS = b" \t\r\n"
_EVENTS_KEY = b'"traceEvents"'
_EVENT_END = re.compile(rb"\}[ \t\r\n]*,")
_LEADING = re.compile(rb"[ \t\r\n\xef\xbb\xbf]*")
_MAX_RECOVERY_TRIES = 8
#: DuckDB's memory limit while ingesting (it spills to the temporary directory beyond it).
_MEMORY_LIMIT = os.environ.get("LAYERSCOPE_INGEST_MEMORY", "512MB")
#: Use a database file instead of memory (slower; for machines with very little memory).
_FILE_DB = os.environ.get("LAYERSCOPE_INGEST_FILE_DB", "0") == "1"
#: ``LAYERSCOPE_JSON_FAST=0`` turns the in-memory fast path off (always DuckDB).
_FAST_ENABLED = os.environ.get("LAYERSCOPE_JSON_FAST", "1") != "0"
_FRACTIONAL_TS = re.compile(rb'"ts":[ \t\r\n]*-?[0-9]+\.[0-9]')
#: Fractional "ts" numbers in this many first bytes of the events array turn on exact quoting.
_FRACTION_PROBE_BYTES = 1 << 20
_TS_NUMBER = re.compile(rb'"ts":([ \t\r\n]*)(-?[0-9][0-9.eE+-]*)')

#: Event fields read; all as text (so a wrong type never aborts the parse), ``args`` as JSON.
_FIELDS = ("ph", "ts", "dur", "name", "cat", "pid", "tid", "id", "bp", "s", "tts", "tdur")
_COLUMNS = "{" + ", ".join(f"{f}: 'VARCHAR'" for f in (*_FIELDS, "args")) + "}"


# --------------------------------------------------------------------------- byte streaming


def json_depth_numpy(data: Any, depth: int, in_string: bool, escaped: bool,
                     limit: int) -> tuple[int, bool, bool, int]:
    """``_chrome_scan.json_depth`` in numpy (for installs without the C scanner), same results.

    A quote after an odd run of backslashes is escaped, every other quote toggles the string
    state; brackets outside strings open and close levels (never below 0). Returns the state
    after ``data`` and the offset of the bracket that opens level ``limit + 1`` (else -1; where
    it stops, the state just after that bracket). A quote at the chunk's start is escaped when
    ``escaped`` is carried in, whatever backslashes follow in the chunk.
    """
    a = np.frombuffer(data, dtype=np.uint8)
    n = len(a)
    if n == 0:
        return depth, in_string, escaped, -1
    slash = np.flatnonzero(a == 0x5C)
    quotes = np.flatnonzero(a == 0x22)
    # per quote, the parity of the backslash run just before it (carried in from the last chunk)
    odd = np.zeros(len(quotes), dtype=bool)
    run_end = np.zeros(0, dtype=np.int64)
    run_len = np.zeros(0, dtype=np.int64)
    if len(slash):
        breaks = np.flatnonzero(np.diff(slash) != 1) + 1
        run_start = slash[np.concatenate(([0], breaks))]
        run_end = slash[np.concatenate((breaks - 1, [len(slash) - 1]))]
        run_len = run_end - run_start + 1 + ((run_start == 0) & escaped)
        k = np.searchsorted(run_end, quotes - 1)
        hit = k < len(run_end)
        hit[hit] = run_end[k[hit]] == quotes[hit] - 1
        odd[hit] = run_len[k[hit]] % 2 == 1
    if escaped and len(quotes) and quotes[0] == 0:
        # the run of backslashes that escapes it ended the last chunk (there may be others here)
        odd[0] = True
    toggles = quotes[~odd]
    brackets = np.flatnonzero(np.isin(a, np.frombuffer(b"[]{}", dtype=np.uint8)))
    # inside a string before a bracket: an odd number of toggles before it (plus the carry)
    inside = (np.searchsorted(toggles, brackets) % 2 == 1) ^ in_string
    brackets = brackets[~inside]
    opens = (a[brackets] == 0x5B) | (a[brackets] == 0x7B)
    walk = depth + np.cumsum(np.where(opens, 1, -1))
    # a floor at 0: subtract the lowest the walk went below it so far
    level = walk - np.minimum(np.minimum.accumulate(walk), 0)
    over = np.flatnonzero(opens & (level > limit))
    if len(over):
        # the state after that bracket: outside a string, no backslash run before the next byte
        return int(level[over[0]]), False, False, int(brackets[over[0]])
    end_depth = int(level[-1]) if len(level) else depth
    trailing = len(run_end) and run_end[-1] == n - 1
    end_escaped = bool(trailing and run_len[-1] % 2 == 1)
    return end_depth, bool((len(toggles) % 2 == 1) ^ in_string), end_escaped, -1


#: The nesting walk: the C scanner's where built, else numpy's (the same results).
json_depth = _chrome_scan.json_depth if _chrome_scan is not None else json_depth_numpy


class DepthGuard:
    """Refuses a JSON text nested deeper than :data:`~layerscope.trace.readers.MAX_JSON_DEPTH`,
    fed chunk by chunk (or skipping spans known to be balanced); the error names the file."""

    def __init__(self, source: Path, limit: int = MAX_JSON_DEPTH) -> None:
        self.source = source
        self.limit = limit
        self.offset = 0
        self.state = (0, False, False)

    def feed(self, data: Any) -> None:
        depth, in_string, escaped, over = json_depth(data, *self.state, self.limit)
        if over >= 0:
            raise TraceError(f"{str(self.source)!r}: JSON nested deeper than {self.limit} levels (level "
                             f"{self.limit + 1} opens at byte {self.offset + over}); at most {self.limit} "
                             "are read")
        self.state = (depth, in_string, escaped)
        self.offset += len(memoryview(data))

    def at(self, offset: int) -> DepthGuard:
        """A guard in this one's state at byte ``offset``: for a later span reached over complete
        JSON values (which leave the state as it was)."""
        guard = DepthGuard(self.source, self.limit)
        guard.state, guard.offset = self.state, offset
        return guard


def _stream(path: Path, warnings: list[str]) -> Iterator[bytes]:
    """Yield decompressed chunks; a truncated or corrupt gzip stream ends with a warning.

    A gzip file is read and inflated by a helper thread (zlib and isal release the GIL), so
    inflating overlaps the consumer's work on the previous chunk; it inflates at most
    :func:`~layerscope.trace.readers.inflate_budget` bytes (else :class:`TraceError`, raised
    here) and at most one chunk at a time, so memory stays bounded whatever the ratio.
    """
    try:
        handle = open(path, "rb")  # noqa: SIM115 - closed in finally; generator
    except OSError as exc:
        raise TraceError(f"cannot open trace {str(path)!r}: {exc.strerror}") from None
    try:
        magic = handle.read(2)
        handle.seek(0)
        if magic != b"\x1f\x8b":
            while chunk := handle.read(_CHUNK_BYTES):
                yield chunk
            return
        budget = inflate_budget(path)
        chunks: queue.Queue[bytes | None] = queue.Queue(maxsize=4)
        stop = threading.Event()
        failure: list[BaseException] = []

        def put(item: bytes | None) -> bool:
            while not stop.is_set():
                try:
                    chunks.put(item, timeout=0.1)
                    return True
                except queue.Full:
                    continue
            return False

        def produce() -> None:
            try:
                total = 0
                for out in _inflate(handle, warnings):
                    total += len(out)
                    if total > budget[0]:
                        raise too_big(path, budget)
                    if not put(out):
                        return
            except BaseException as exc:  # re-raised by the consumer, in its thread
                failure.append(exc)
            finally:
                put(None)

        worker = threading.Thread(target=produce, name="layerscope-inflate", daemon=True)
        worker.start()
        try:
            while (item := chunks.get()) is not None:
                yield item
            if failure:
                raise failure[0]
        finally:
            stop.set()
            worker.join()
    finally:
        handle.close()


def _inflate(handle: Any, warnings: list[str]) -> Iterator[bytes]:
    """Inflate a gzip stream (multi-member too) in pieces of at most ``_CHUNK_BYTES``; damage ends
    it with a warning."""
    inflate = _INFLATE
    inflater = inflate.decompressobj(31)
    first_member = True
    pending = b""
    full = False  # the last piece filled its limit: the inflater may hold more without input
    while True:
        if not pending and not full:
            pending = handle.read(_CHUNK_BYTES)
            if not pending:
                if not inflater.eof:
                    warnings.append("gzip stream is truncated (no end marker); read what was there")
                break
        if inflater.eof:
            # a concatenated (multi-member) gzip file: start a new member
            inflater = inflate.decompressobj(31)
            first_member = False
        try:
            out = inflater.decompress(pending, _CHUNK_BYTES)
        except (zlib.error, inflate.error) as exc:
            if first_member:
                warnings.append(f"gzip stream is corrupt ({exc}); read what came before")
            return
        full = len(out) == _CHUNK_BYTES and not inflater.eof
        pending = inflater.unused_data if inflater.eof else inflater.unconsumed_tail
        if out:
            yield out


def inflate_all(path: Path, data: bytes, warnings: list[str]) -> bytes:
    """The inflated bytes of an in-memory gzip file (multi-member too), within its
    :func:`~layerscope.trace.readers.inflate_budget` (else :class:`TraceError`); damage ends it
    with a warning, as for a streamed file."""
    budget = inflate_budget(path)
    out: list[bytes] = []
    total = 0
    for piece in _inflate(io.BytesIO(data), warnings):
        total += len(piece)
        if total > budget[0]:
            raise too_big(path, budget)
        out.append(piece)
    return b"".join(out)


def _guarded(chunks: Iterator[bytes], guard: DepthGuard) -> Iterator[bytes]:
    for chunk in chunks:
        guard.feed(chunk)
        yield chunk


def _loads_object(text: bytes | bytearray) -> dict[str, Any] | None:
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def _last_non_ws(data: bytes, end: int) -> bytes:
    i = end - 1
    while i >= 0 and data[i] in _WS:
        i -= 1
    return data[i:i + 1] if i >= 0 else b""


_REST_EMPTY_OR_CLOSE = re.compile(rb"[ \t\r\n]*\}?[ \t\r\n]*")
_REST_CLOSE = re.compile(rb"[ \t\r\n]*\}[ \t\r\n]*")
#: a comma then what can follow ``{`` in an object: a key, or ``}`` (anything else cannot parse)
_REST_COMMA = re.compile(rb"[ \t\r\n]*,(?=[ \t\r\n]*[\"}])")


def _find_array_end(tail: bytes, top_level_array: bool, *,
                    array_start: bool = False) -> tuple[int, dict[str, Any]] | None:
    """Position of the ``]`` closing the events array in ``tail`` and the fields after it.

    ``array_start``: ``tail`` begins right after the array's ``[``, so a ``]`` with nothing but
    whitespace before it closes an empty array (elsewhere nothing before it means "unknown").

    Candidates are ``]`` after which the rest of the document parses; trailing fields may hold
    arrays too (Kineto's ``"INFO": [...]``), so the leftmost candidate wins, preferring one that
    follows an object (``}``) or opens an empty array. The rest is matched in place; a rest
    starting with ``,`` is parsed as ``{`` + what follows the comma, after the C scanner (when
    built) has ruled out the many that are not one object to the end, without an exception each.
    """
    pos = len(tail)
    found: list[tuple[int, dict[str, Any]]] = []
    for _ in range(256):
        pos = tail.rfind(b"]", 0, pos)
        if pos < 0:
            break
        before = _last_non_ws(tail, pos) or (b"[" if array_start else b"")
        if before in (b",", b":", b"{", b""):
            continue
        if top_level_array:
            if _REST_EMPTY_OR_CLOSE.fullmatch(tail, pos + 1):
                found.append((pos, {}))
        elif _REST_CLOSE.fullmatch(tail, pos + 1):
            found.append((pos, {}))
        else:
            comma = _REST_COMMA.match(tail, pos + 1)
            if comma is None:
                continue
            at = comma.end() - 1
            if _chrome_scan is not None and _chrome_scan.object_tail(tail, at) == 0:
                continue  # not an object to the end: what orjson would say, without raising
            rest = bytearray(memoryview(tail)[at:])
            rest[0] = 0x7B  # the comma read as '{'
            after = _loads_object(rest)
            if after is not None:
                found.append((pos, after))
    if not found:
        return None
    objects = [f for f in found if (_last_non_ws(tail, f[0]) or (b"[" if array_start else b"")) in (b"}", b"[")]
    return min(objects or found, key=lambda f: f[0])


def _extract_events(path: Path, out_path: Path, warnings: list[str]) -> tuple[dict[str, Any], list[int]]:
    """Copy the events array of ``path`` to ``out_path`` as ``[ … ]``.

    Returns the top-level metadata and, when the array was cut short, file offsets of earlier
    event ends to retry from (empty when the array is complete).
    """
    chunks = _guarded(_stream(path, warnings), DepthGuard(path))
    # the header grows in a bytearray (appends in place) and is searched only where it grew, so
    # a long header (or a file of whitespace) costs linear time; leading whitespace is dropped
    buf = bytearray()
    skipped = 0
    searched = 0
    start = -1
    top_level_array = False
    header = b""
    for chunk in chunks:
        if not buf:
            lead = _LEADING.match(chunk).end()  # type: ignore[union-attr]
            skipped += lead
            chunk = chunk[lead:]
        buf += chunk
        first = buf[:1]
        if first == b"[":
            start, top_level_array = 1, True
            break
        if first == b"{":
            key = buf.find(_EVENTS_KEY, max(0, searched - len(_EVENTS_KEY)))
            searched = len(buf) if key < 0 else key
            if key >= 0:
                rest = buf[key + len(_EVENTS_KEY):]
                stripped = rest.lstrip(_WS)
                if stripped[:1] == b":":
                    value = stripped[1:].lstrip(_WS)
                    if value[:1] == b"[":
                        start = len(buf) - len(value) + 1
                        header = bytes(buf[:key])
                        break
                    if value:
                        raise TraceError(f"{str(path)!r}: 'traceEvents' is not an array")
                elif stripped:
                    raise TraceError(f"{str(path)!r}: malformed JSON after 'traceEvents'")
        elif first:
            raise TraceError(f"{str(path)!r} is not a JSON trace (starts with {bytes(buf[:16])!r}); "
                             "expected a Chrome/Kineto JSON object or array")
        if skipped + len(buf) > _HEADER_LIMIT_BYTES:
            raise TraceError(f"{str(path)!r}: no 'traceEvents' array in the first "
                             f"{_HEADER_LIMIT_BYTES >> 20} MiB")
    if start < 0:
        damage = [w for w in warnings if w.startswith("gzip stream")]
        if damage:
            raise TraceError(f"{str(path)!r}: {damage[0].split(';')[0]}, and no trace before the damage")
        if not buf.strip(_WS):
            raise TraceError(f"{str(path)!r} is empty")
        raise TraceError(f"{str(path)!r} is not a Chrome/Kineto trace: no 'traceEvents' array")

    metadata: dict[str, Any] = {}
    if header:
        parsed = _loads_object(header.rstrip(_WS).rstrip(b",") + b"}")
        if parsed is not None:
            metadata.update(parsed)
    written = 0
    pieces: list[bytes] = []
    kept = 0
    with open(out_path, "wb") as out:
        out.write(b"[")
        written = 1
        first_body = bytes(buf[start:])
        del buf
        while len(first_body) < _FRACTION_PROBE_BYTES:
            # look at the same first MiB of the array however the input was chunked (the fast
            # path, holding the whole text, decides on exactly these bytes too)
            more = next(chunks, None)
            if more is None:
                break
            first_body += more
        pieces_in: Iterator[bytes] = _chain(first_body, chunks)
        if _FRACTIONAL_TS.search(first_body[:_FRACTION_PROBE_BYTES]):
            # DuckDB reads JSON numbers as doubles: a µs timestamp near 1.7e15 keeps only
            # 0.25 µs. Quoting "ts" values keeps their digits exact through DECIMAL.
            pieces_in = _quote_ts(pieces_in)
        for piece in pieces_in:
            out.write(piece)
            written += len(piece)
            pieces.append(piece)
            kept += len(piece)
            while len(pieces) > 1 and kept - len(pieces[0]) >= _TAIL_BYTES:
                kept -= len(pieces.pop(0))
        tail = b"".join(pieces)
        del pieces
        tail_offset = written - len(tail)
        found = _find_array_end(tail, top_level_array, array_start=tail_offset == 1)
        if found is not None:
            pos, after = found
            metadata.update(after)
            out.truncate(tail_offset + pos + 1)
            return metadata, []
        candidates = [tail_offset + m.start() for m in _EVENT_END.finditer(tail)]
        candidates = candidates[::-1][:_MAX_RECOVERY_TRIES]
        warnings.append("trace ends inside the traceEvents array (truncated or cut mid-event); "
                        "kept the complete events before the cut")
        if not candidates:
            out.truncate(1)
            out.seek(1)
            out.write(b"]")
            return metadata, []
        _cut(out, candidates[0])
        return metadata, candidates


def _quote_ts(pieces: Iterator[bytes]) -> Iterator[bytes]:
    """Turn ``"ts": 123.456`` into ``"ts": "123.456"``, chunk by chunk (cut after a comma)."""
    carry = b""
    for piece in pieces:
        data = carry + piece
        cut = data.rfind(b",") + 1
        carry = data[cut:]
        if cut:
            yield _TS_NUMBER.sub(rb'"ts":\1"\2"', data[:cut])
    if carry:
        yield _TS_NUMBER.sub(rb'"ts":\1"\2"', carry)


def _chain(first: bytes, rest: Iterator[bytes]) -> Iterator[bytes]:
    if first:
        yield first
    yield from rest


def _cut(out: Any, offset: int) -> None:
    """Truncate the events file just after the ``}`` at ``offset`` and close the array."""
    out.truncate(offset + 1)
    out.seek(offset + 1)
    out.write(b"]")
    out.flush()


# --------------------------------------------------------------------------- parsing


# µs text → ns: integers directly (the common, fast case), else exactly through DECIMAL, else
# through DOUBLE (exponent notation)
_TIME_NS = ("CASE WHEN strpos({c}, '.') = 0 AND strpos({c}, 'e') = 0 AND strpos({c}, 'E') = 0 "
            "THEN TRY_CAST({c} AS BIGINT) * 1000 "
            "ELSE TRY_CAST(ROUND(COALESCE(TRY_CAST({c} AS DECIMAL(38,6)), "
            "TRY_CAST(TRY_CAST({c} AS DOUBLE) AS DECIMAL(38,6))) * 1000) AS BIGINT) END")


def _read_json(con: duckdb.DuckDBPyConnection, path: Path, fmt: str) -> None:
    """Parse the events file into table ``ev``: typed times in ns, text fields, args as text."""
    con.execute(f"""
        CREATE OR REPLACE TABLE ev AS SELECT
            row_number() OVER () - 1 AS seq, ph,
            {_TIME_NS.format(c='ts')} AS ts,
            {_TIME_NS.format(c='dur')} AS dur,
            {_TIME_NS.format(c='tts')} AS tts,
            {_TIME_NS.format(c='tdur')} AS tdur,
            name, cat, COALESCE(pid, '0') AS pid, COALESCE(tid, '0') AS tid, id, bp, s,
            CASE WHEN args IN ('{{}}', 'null') OR args NOT LIKE '{{%' THEN NULL
                 ELSE '{{"args":' || args || '}}' END AS args
        FROM read_json(?, format='{fmt}', columns={_COLUMNS}, maximum_object_size=16777216)""",
        [str(path)])


def _tolerant_rewrite(source: Path, events_path: Path, out_path: Path, warnings: list[str]) -> None:
    """Slow path for arrays DuckDB rejects (non-object items): orjson, then NDJSON."""
    try:
        events = orjson.loads(events_path.read_bytes())
    except orjson.JSONDecodeError as exc:
        raise TraceError(f"{str(source)!r}: malformed JSON in traceEvents: {exc}") from None
    if not isinstance(events, list):
        raise TraceError(f"{str(source)!r}: traceEvents is not an array")
    skipped = 0
    with open(out_path, "wb") as out:
        for event in events:
            if not isinstance(event, dict):
                skipped += 1
                continue
            row: dict[str, Any] = {}
            for key in _FIELDS:
                value = event.get(key)
                if value is None:
                    continue
                row[key] = value if isinstance(value, str) else orjson.dumps(value).decode()
            args = event.get("args")
            if isinstance(args, dict):
                row["args"] = args
            out.write(orjson.dumps(row))
            out.write(b"\n")
    if skipped:
        warnings.append(f"skipped {skipped} traceEvents items that are not JSON objects")


def _load_raw(con: duckdb.DuckDBPyConnection, source: Path, events_path: Path, candidates: list[int],
              warnings: list[str]) -> None:
    tries = list(candidates[1:])
    while True:
        try:
            _read_json(con, events_path, "array")
            return
        except duckdb.Error as exc:
            if tries:
                with open(events_path, "r+b") as out:
                    _cut(out, tries.pop(0))
                continue
            log.info("DuckDB rejected the events array (%s); using the tolerant path", exc)
            break
    ndjson = events_path.with_suffix(".ndjson")
    _tolerant_rewrite(source, events_path, ndjson, warnings)
    try:
        _read_json(con, ndjson, "newline_delimited")
    except duckdb.Error as exc:
        raise TraceError(f"{str(source)!r}: cannot parse traceEvents: {exc}") from None


# --------------------------------------------------------------------------- processes and threads


def _as_int(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        return int(text)
    except ValueError:
        try:
            value = float(text)
        except ValueError:
            return None
        return int(value) if np.isfinite(value) and abs(value) < 2**62 else None


def _unwrap_args(args: str | None) -> Any:
    """The ``args`` object of the DuckDB path's ``{"args": …}`` text (``None`` when absent)."""
    parsed = _loads_object(args.encode()) if args else None
    return parsed.get("args") if parsed is not None else None


def _arg(args: Any, key: str) -> Any:
    return args.get(key) if isinstance(args, dict) else None


class _Ids:
    """Processes and threads in order of first appearance, with Perfetto's placeholders."""

    def __init__(self, numeric: set[int]) -> None:
        self.procs: dict[str, int] = {}
        self.threads: dict[tuple[str, str], int] = {}
        self.proc_rows: list[dict[str, Any]] = [{"upid": 0, "pid": 0, "name": None,
                                                  "sort_index": None, "labels": None}]
        self.thread_rows: list[dict[str, Any]] = [{"utid": 0, "tid": 0, "name": None, "upid": 0,
                                                    "sort_index": None}]
        self._next_synthetic = max(numeric, default=0) + 1
        self._synthetic: dict[str, int] = {}
        self._by_number: dict[tuple[int, int], int] = {}

    def _number(self, text: str) -> tuple[int, bool]:
        value = _as_int(text)
        if value is not None:
            return value, False
        if text not in self._synthetic:
            self._synthetic[text] = self._next_synthetic
            self._next_synthetic += 1
        return self._synthetic[text], True

    def process(self, pid: str) -> int:
        if pid in self.procs:
            return self.procs[pid]
        number, synthetic = self._number(pid)
        upid = len(self.proc_rows)
        self.procs[pid] = upid
        self.proc_rows.append({"upid": upid, "pid": number, "name": pid if synthetic else None,
                               "sort_index": None, "labels": None})
        self.thread(pid, str(number) if synthetic else pid, main=True)
        return upid

    def thread(self, pid: str, tid: str, main: bool = False) -> int:
        key = (pid, tid)
        if key in self.threads:
            return self.threads[key]
        upid = self.process(pid) if not main else self.procs[pid]
        if key in self.threads:
            return self.threads[key]
        number, synthetic = self._number(tid)
        if number < 0:
            # trace_processor reads tids as unsigned; a negative one lands on the main thread
            number, synthetic = int(self.proc_rows[upid]["pid"]), False
        by_number = self._by_number.get((upid, number))
        if by_number is not None:
            self.threads[key] = by_number
            return by_number
        utid = len(self.thread_rows)
        self.threads[key] = utid
        self._by_number[(upid, number)] = utid
        self.thread_rows.append({"utid": utid, "tid": number, "name": tid if synthetic else None,
                                 "upid": upid, "sort_index": None})
        return utid


def ids_for(pairs: Iterable[tuple[str, str, bool]]) -> _Ids:
    """Processes and threads from the distinct ``(pid, tid, is_meta)`` of the events.

    ``pairs`` are in order of first appearance in the file (pid/tid as text); a metadata
    event registers only its process, any other event its thread.
    """
    pairs = list(pairs)
    numeric = {v for pid, tid, _ in pairs for v in (_as_int(pid), _as_int(tid)) if v is not None}
    ids = _Ids(numeric)
    for pid, tid, is_meta in pairs:
        if is_meta:
            ids.process(pid)
        else:
            ids.thread(pid, tid)
    return ids


def apply_metadata(ids: _Ids, rows: Iterable[tuple[str, str, Any, Any]]) -> None:
    """Apply ``M`` events, given in file order as ``(pid, tid, name, args object)``."""
    for pid, tid, name, args in rows:
        proc = ids.proc_rows[ids.process(pid)]
        if name == "process_name":
            proc["name"] = _str_or_none(_arg(args, "name"))
        elif name == "process_labels":
            proc["labels"] = _str_or_none(_arg(args, "labels"))
        elif name == "process_sort_index":
            proc["sort_index"] = _int_or_none(_arg(args, "sort_index"))
        elif name in ("thread_name", "thread_sort_index"):
            thread = ids.thread_rows[ids.thread(pid, tid)]
            if name == "thread_name":
                thread["name"] = _str_or_none(_arg(args, "name"))
            else:
                thread["sort_index"] = _int_or_none(_arg(args, "sort_index"))


def _processes_and_threads(con: duckdb.DuckDBPyConnection) -> _Ids:
    ids = ids_for((pid, tid, bool(is_meta)) for pid, tid, is_meta, _ in con.execute("""
        SELECT pid, tid, ph = 'M' AS is_meta, MIN(seq) AS first FROM ev
        GROUP BY pid, tid, is_meta ORDER BY first""").fetchall())
    apply_metadata(ids, ((pid, tid, name, _unwrap_args(args)) for pid, tid, name, args in con.execute(
        "SELECT pid, tid, name, args FROM ev WHERE ph = 'M' ORDER BY seq").fetchall()))
    return ids


def _str_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _int_or_none(value: Any) -> int | None:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


# --------------------------------------------------------------------------- slices


_OPEN_END = np.iinfo(np.int64).max // 4


def _time_ordered(ts: np.ndarray, dur_eff: np.ndarray) -> bool:
    """Whether the rows are already ordered by ``(ts, -dur)`` (ties in input order)."""
    if len(ts) < 2:
        return True
    dts = np.diff(ts)
    return bool(np.all((dts > 0) | ((dts == 0) & (np.diff(dur_eff) <= 0))))


def nest(track: np.ndarray, ts: np.ndarray, dur: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Depth and parent index of each slice, nesting by time within each track.

    Inputs are parallel arrays in any order; ``dur < 0`` (never ended) extends to infinity.
    A slice's depth is the number of earlier-starting slices of its track not ended before its
    start (ties: longer first), and its parent the last of those one level up. Returns
    ``(depth, parent)`` with ``parent = -1`` for roots; indices refer to the input order.
    """
    n = len(ts)
    depth = np.zeros(n, dtype=np.int64)
    parent = np.full(n, -1, dtype=np.int64)
    if n == 0:
        return depth, parent
    dur_eff = np.where(dur < 0, _OPEN_END, dur)
    if _time_ordered(ts, dur_eff):
        # readers hand slices over in id order already: a stable sort by track keeps it
        order = np.argsort(track, kind="stable")
    else:
        order = np.lexsort((np.arange(n), -dur_eff, ts, track))
    t_sorted = track[order]
    ts_s = ts[order]
    end_s = ts_s + dur_eff[order]
    bounds = np.flatnonzero(t_sorted[1:] != t_sorted[:-1]) + 1
    starts = np.concatenate(([0], bounds))
    stops = np.concatenate((bounds, [n]))
    depth_s = np.empty(n, dtype=np.int64)
    for a, b in zip(starts.tolist(), stops.tolist(), strict=True):
        # trace_processor's rule: a slice is closed for a later start at ts when it ended before
        # ts, or ended exactly at ts and is not zero-length (a zero-length slice encloses the
        # slices starting at its own ts). Every closed slice precedes this one in the order.
        seg_ts = ts_s[a:b]
        seg_end = end_s[a:b]
        nonzero_end = np.sort(seg_end[seg_end > seg_ts])
        ended = (np.searchsorted(np.sort(seg_end), seg_ts, side="left")
                 + np.searchsorted(nonzero_end, seg_ts, side="right")
                 - np.searchsorted(nonzero_end, seg_ts, side="left"))
        depth_s[a:b] = np.arange(b - a) - ended
    # the parent is the last earlier slice one level up: one search over (depth, position) keys
    positions = np.arange(n, dtype=np.int64)
    keys = depth_s * n + positions
    by_level = keys[np.argsort(depth_s, kind="stable")]
    # children in (depth, position) order, so the searched keys ascend (numpy's binary search
    # then starts from the previous hit: ~4x faster than unordered keys)
    child_keys = by_level[np.searchsorted(by_level, n):]
    child = child_keys % n
    level_base = (child_keys // n - 1) * n
    k = np.searchsorted(by_level, level_base + child) - 1
    cand = by_level[np.maximum(k, 0)] - level_base
    ok = (k >= 0) & (cand >= 0)
    cand = np.maximum(cand, 0)
    ok &= t_sorted[cand] == t_sorted[child]
    parent_s = np.full(n, -1, dtype=np.int64)
    parent_s[child[ok]] = cand[ok]
    depth[order] = depth_s
    parent[order] = np.where(parent_s >= 0, order[np.maximum(parent_s, 0)], -1)
    return depth, parent


def _nest_dropping_overlaps(track: np.ndarray, ts: np.ndarray, dur: np.ndarray,
                            warnings: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Nest slices (given in id order); drop those that end after their parent, as Perfetto does.

    Returns the positions kept and, for them, depth and parent (a position among the kept).
    Dropping a slice changes the nesting of its own track only, so later passes re-nest just
    the tracks that lost slices.
    """
    n = len(ts)
    alive = np.ones(n, dtype=bool)
    depth_all = np.zeros(n, dtype=np.int64)
    parent_all = np.full(n, -1, dtype=np.int64)
    sel = np.arange(n)
    dropped = 0
    while len(sel):
        t, s, d = track[sel], ts[sel], dur[sel]
        depth, parent = nest(t, s, d)
        depth_all[sel] = depth
        parent_all[sel] = np.where(parent >= 0, sel[np.maximum(parent, 0)], -1)
        p = np.maximum(parent, 0)
        parent_end = s[p] + d[p]
        # only judge slices whose computed parent really is open at their start: the others'
        # nesting is an artefact of an earlier bad slice and is redone on the next pass
        parent_open = (parent_end > s) | ((parent_end == s) & (d[p] == 0))
        bad = (parent >= 0) & (d >= 0) & (d[p] >= 0) & parent_open & (s + d > parent_end)
        if not bad.any():
            break
        dropped += int(bad.sum())
        alive[sel[bad]] = False
        redo = np.zeros(n, dtype=bool)
        redo[sel] = np.isin(t, np.unique(t[bad]))
        sel = np.flatnonzero(redo & alive)
    keep = np.flatnonzero(alive)
    if dropped:
        warnings.append(f"dropped {dropped} slices that end after the slice enclosing their start "
                        "(improper nesting; trace_processor drops them too)")
    if len(keep) == n:
        return keep, depth_all, parent_all
    new_index = np.full(n, -1, dtype=np.int64)
    new_index[keep] = np.arange(len(keep))
    parent_kept = parent_all[keep]
    return keep, depth_all[keep], np.where(parent_kept >= 0, new_index[np.maximum(parent_kept, 0)], -1)


def order_and_nest(seq: np.ndarray, ts: np.ndarray, dur: np.ndarray, track: np.ndarray,
                   warnings: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Slice ids in trace_processor's order (by ts, longer first, then file order), nested.

    Inputs are the candidate slices in any order (``seq`` = position in the file). Returns the
    positions of the kept slices in id order, and their depth and parent id.
    """
    order = np.lexsort((seq, -np.where(dur < 0, np.iinfo(np.int64).max, dur), ts))
    keep, depth, parent = _nest_dropping_overlaps(track[order], ts[order], dur[order], warnings)
    return order[keep], depth, parent


def slice_table(ts: np.ndarray, dur: np.ndarray, track: np.ndarray, category: pa.Array, name: pa.Array,
                depth: np.ndarray, parent: np.ndarray, has_args: np.ndarray, thread_ts: pa.Array,
                thread_dur: pa.Array) -> pa.Table:
    """The ``slice`` table from columns in id order (a slice's arg set id is its id)."""
    ids_arr = np.arange(len(ts), dtype=np.int64)
    return pa.table({
        "id": ids_arr, "ts": ts, "dur": dur, "track_id": track,
        "category": category, "name": name, "depth": depth,
        "parent_id": pa.array(parent, mask=parent < 0),
        "arg_set_id": pa.array(ids_arr, mask=~has_args),
        "thread_ts": thread_ts, "thread_dur": thread_dur,
    })


def skipped_warnings(bad_ts: int, neg_dur: int, bad_dur: int, warnings: list[str]) -> None:
    """Warnings for events skipped for their times (counted as the DuckDB path counts them)."""
    if bad_ts:
        warnings.append(f"skipped {bad_ts} events with a missing or non-numeric 'ts'")
    if neg_dur:
        warnings.append(f"skipped {neg_dur} 'X' events with a negative 'dur'")
    if bad_dur:
        warnings.append(f"skipped {bad_dur} 'X' events with a missing or non-numeric 'dur'")


EXTRA_COLUMNS = ("seq", "ts", "dur", "track_id", "cat", "name", "args", "tts", "tdur")


def python_slices(ids: _Ids, thread_track: dict[int, int], tracks: list[dict[str, Any]], warnings: list[str],
                  begin_end: Iterable[tuple[Any, ...]], scoped_instants: Iterable[tuple[Any, ...]],
                  async_events: Iterable[tuple[Any, ...]]) -> dict[str, list[Any]]:
    """B/E pairs, process/global instants and async b/e/n: rare in Kineto, so plain Python.

    ``begin_end``: ``(seq, ph, ts, name, cat, pid, tid, args, tts)`` of B/E events with a ts,
    ordered by (ts, seq); ``scoped_instants``: ``(seq, ts, name, cat, pid, s, args)`` of i/I/R
    events with ``s`` g or p, in file order; ``async_events``: ``(seq, ph, ts, name, cat, pid,
    id, args)`` of b/e/n events, ordered by (ts, seq). ``args`` is carried through untouched.
    Returns the slices as columns (:data:`EXTRA_COLUMNS`); new tracks are appended to ``tracks``.
    """
    rows: dict[str, list[Any]] = {k: [] for k in EXTRA_COLUMNS}

    def add(seq: int, ts: int, dur: int, track_id: int, cat: Any, name: Any, args: Any,
            tts: Any = None, tdur: Any = None) -> None:
        for key, value in zip(rows, (seq, ts, dur, track_id, cat, name, args, tts, tdur), strict=True):
            rows[key].append(value)

    track_index: dict[tuple[Any, ...], int] = {}

    def track_for(key: tuple[Any, ...], **row: Any) -> int:
        if key in track_index:
            return track_index[key]
        track_id = len(tracks)
        track_index[key] = track_id
        tracks.append({"id": track_id, "utid": None, "upid": None, "parent_id": None, "unit": None, **row})
        return track_id

    stacks: dict[int, list[tuple[Any, ...]]] = {}
    unmatched_end = 0
    for seq, ph, ts, name, cat, pid, tid, args, tts in begin_end:
        utid = ids.thread(pid, tid)
        track_id = thread_track[utid]
        stack = stacks.setdefault(track_id, [])
        if ph == "B":
            stack.append((seq, ts, name, cat, args, tts))
        elif stack:
            b_seq, b_ts, b_name, b_cat, b_args, b_tts = stack.pop()
            add(b_seq, b_ts, ts - b_ts, track_id, b_cat, b_name, b_args, b_tts)
        else:
            unmatched_end += 1
    for track_id, stack in stacks.items():
        for b_seq, b_ts, b_name, b_cat, b_args, b_tts in stack:
            add(b_seq, b_ts, -1, track_id, b_cat, b_name, b_args, b_tts)
    if unmatched_end:
        warnings.append(f"skipped {unmatched_end} 'E' events with no open 'B' on their thread")

    for seq, ts, name, cat, pid, scope, args in scoped_instants:
        if scope == "g":
            track_id = track_for(("global",), name=None, type="global")
        else:
            upid = ids.process(pid)
            track_id = track_for(("process", upid), name=None, type="process", upid=upid)
        add(seq, ts, 0, track_id, cat, name, args)

    async_stacks: dict[int, list[tuple[Any, ...]]] = {}
    for seq, ph, ts, name, cat, pid, ident, args in async_events:
        upid = ids.process(pid)
        track_id = track_for(("async", upid, cat, ident), name=name, type="async", upid=upid)
        stack = async_stacks.setdefault(track_id, [])
        if ph == "b":
            stack.append((seq, ts, name, cat, args))
        elif ph == "n":
            add(seq, ts, 0, track_id, cat, name, args)
        elif stack:
            b_seq, b_ts, b_name, b_cat, b_args = stack.pop()
            add(b_seq, b_ts, ts - b_ts, track_id, b_cat, b_name, b_args)
    for track_id, stack in async_stacks.items():
        for b_seq, b_ts, b_name, b_cat, b_args in stack:
            add(b_seq, b_ts, -1, track_id, b_cat, b_name, b_args)
    return rows


def _python_slices(con: duckdb.DuckDBPyConnection, ids: _Ids, thread_track: dict[int, int],
                   tracks: list[dict[str, Any]], warnings: list[str]) -> pa.Table:
    rows = python_slices(
        ids, thread_track, tracks, warnings,
        con.execute("""SELECT seq, ph, ts, name, cat, pid, tid, args, tts FROM ev
            WHERE ph IN ('B', 'E') AND ts IS NOT NULL ORDER BY ts, seq""").fetchall(),
        con.execute("""SELECT seq, ts, name, cat, pid, s, args FROM ev
            WHERE ph IN ('i', 'I', 'R') AND s IN ('g', 'p') AND ts IS NOT NULL ORDER BY seq""").fetchall(),
        con.execute("""SELECT seq, ph, ts, name, cat, pid, id, args FROM ev
            WHERE ph IN ('b', 'e', 'n') AND ts IS NOT NULL ORDER BY ts, seq""").fetchall())
    types = {"seq": pa.int64(), "ts": pa.int64(), "dur": pa.int64(), "track_id": pa.int64(),
             "cat": pa.string(), "name": pa.string(), "args": pa.string(), "tts": pa.int64(),
             "tdur": pa.int64()}
    return pa.table({k: pa.array(v, type=types[k]) for k, v in rows.items()})


# --------------------------------------------------------------------------- flows and counters


def bind_flows(fin: np.ndarray, start: np.ndarray, enclosing: np.ndarray, ts: np.ndarray, track: np.ndarray,
               key: np.ndarray, sl_track: np.ndarray, sl_ts: np.ndarray, sl_dur: np.ndarray,
               sl_parent: np.ndarray) -> pa.Table:
    """Flow v1 events (s/t/f) → (slice_out, slice_in) pairs, bound as Perfetto binds them.

    Inputs: the flow events with a ts and an id, ordered by (key, ts, file order): ``fin``
    (ph ``f``), ``start`` (ph ``s``), ``enclosing`` (``s``/``t``, or ``f`` with ``bp: "e"``),
    ``ts``, their thread's slice ``track`` (-1 if none) and ``key``, the dense rank of
    (cat, name, id), which becomes ``trace_id``. Enclosing events bind to the deepest slice
    enclosing ``ts`` on their thread; an ``f`` without ``bp: "e"`` binds to the next slice
    starting at or after ``ts``. ``sl_*``: the slices in id order.
    """
    n = len(ts)
    if n == 0 or len(sl_ts) == 0:
        return SCHEMAS["flow"].empty_table()
    order = np.lexsort((sl_ts, sl_track))
    o_track = sl_track[order]
    o_ts = sl_ts[order]
    bound = np.full(n, -1, dtype=np.int64)
    sl_end = np.where(sl_dur < 0, np.iinfo(np.int64).max // 4, sl_ts + sl_dur)
    for t in np.unique(track[track >= 0]).tolist():
        a = int(np.searchsorted(o_track, t, side="left"))
        b = int(np.searchsorted(o_track, t, side="right"))
        if a == b:
            continue
        sel = np.flatnonzero(track == t)
        seg_ts = o_ts[a:b]
        enc = sel[enclosing[sel]]
        if len(enc):
            k = np.searchsorted(seg_ts, ts[enc], side="right") - 1
            cand = np.where(k >= 0, order[a + np.maximum(k, 0)], -1)
            for _ in range(64):
                open_ = cand >= 0
                stale = open_ & (sl_end[np.maximum(cand, 0)] < ts[enc])
                if not stale.any():
                    break
                cand = np.where(stale, sl_parent[np.maximum(cand, 0)], cand)
            bound[enc] = cand
        nxt = sel[~enclosing[sel]]
        if len(nxt):
            k = np.searchsorted(seg_ts, ts[nxt], side="left")
            bound[nxt] = np.where(k < b - a, order[a + np.minimum(k, b - a - 1)], -1)
    # trace_processor keeps the source of a flow after an 'f': every later 't'/'f' of the
    # same id links from the last 's'/'t' (Kineto reuses correlation ids this way)
    sources = np.flatnonzero(~fin)
    if len(sources) == 0:
        # Only flow ends ('f') and no start: nothing to link (a truncated or odd trace).
        src = np.full(n, -1, dtype=np.int64)
    else:
        k = np.searchsorted(sources, np.arange(n), side="left") - 1
        src = np.where(k >= 0, sources[np.maximum(k, 0)], -1)
    ok = (~start) & (src >= 0)
    ok &= key[np.maximum(src, 0)] == key
    ok &= (bound[np.maximum(src, 0)] >= 0) & (bound >= 0)
    out = bound[np.maximum(src, 0)][ok]
    inn = bound[ok]
    m = len(out)
    return pa.table({"id": np.arange(m, dtype=np.int64), "slice_out": out, "slice_in": inn,
                     "trace_id": key[ok], "arg_set_id": pa.nulls(m, pa.int64())})


def _bind_flows(con: duckdb.DuckDBPyConnection, sl_track: np.ndarray, sl_ts: np.ndarray, sl_dur: np.ndarray,
                sl_parent: np.ndarray) -> pa.Table:
    fl = con.sql("""
        SELECT ph = 'f' AS fin, ph = 's' AS start, (ph <> 'f' OR bp = 'e') AS enclosing, ts,
               COALESCE(m.track_id, -1) AS track,
               dense_rank() OVER (ORDER BY cat, name, id) AS key
        FROM ev LEFT JOIN tmap m USING (pid, tid)
        WHERE ph IN ('s', 't', 'f') AND ts IS NOT NULL AND id IS NOT NULL
        ORDER BY key, ts, seq""").to_arrow_table()
    return bind_flows(fl.column("fin").to_numpy(zero_copy_only=False),
                      fl.column("start").to_numpy(zero_copy_only=False),
                      fl.column("enclosing").fill_null(False).to_numpy(zero_copy_only=False),
                      fl.column("ts").to_numpy(), fl.column("track").to_numpy(),
                      fl.column("key").to_numpy().astype(np.int64), sl_track, sl_ts, sl_dur, sl_parent)


def counters(ids: _Ids, tracks: list[dict[str, Any]], warnings: list[str],
             events: Iterable[tuple[int, Any, str, Any, Any]]) -> pa.Table:
    """The ``counter`` table from C events ``(ts, name, pid, id, args object)`` ordered by (ts, seq).

    Each numeric series of ``args`` is a value on the process's track ``"<name> <series>"``
    (created in order of first value); anything else is skipped with a warning.
    """
    keys: dict[tuple[int, str], int] = {}
    ts_out: list[int] = []
    track_out: list[int] = []
    values: list[float] = []
    bad = 0
    for ts, name, pid, ident, parsed in events:
        if not isinstance(parsed, dict) or not parsed:
            bad += 1
            continue
        prefix = (name or "") + (f" id: {ident}" if ident is not None else "")
        upid = ids.process(pid)
        for series, value in parsed.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                bad += 1
                continue
            track_name = f"{prefix} {series}"
            track_key = (upid, track_name)
            if track_key not in keys:
                keys[track_key] = len(tracks)
                tracks.append({"id": len(tracks), "name": track_name, "type": "counter", "utid": None,
                               "upid": upid, "parent_id": None, "unit": None})
            ts_out.append(ts)
            track_out.append(keys[track_key])
            values.append(float(value))
    if bad:
        warnings.append(f"skipped {bad} counter values that are not numbers")
    return pa.table({"id": np.arange(len(ts_out), dtype=np.int64),
                     "ts": pa.array(ts_out, pa.int64()), "track_id": pa.array(track_out, pa.int64()),
                     "value": pa.array(values, pa.float64()),
                     "arg_set_id": pa.nulls(len(ts_out), pa.int64())})


def _counters(con: duckdb.DuckDBPyConnection, ids: _Ids, tracks: list[dict[str, Any]],
              warnings: list[str]) -> pa.Table:
    return counters(ids, tracks, warnings, ((ts, name, pid, ident, _unwrap_args(args)) for ts, name, pid, ident, args
                                            in con.execute("""SELECT ts, name, pid, id, args FROM ev
                                                WHERE ph = 'C' AND ts IS NOT NULL ORDER BY ts, seq""").fetchall()))


def other_tables(ids: _Ids, tracks: list[dict[str, Any]]) -> dict[str, pa.Table]:
    """The ``process``, ``thread`` and ``track`` tables."""
    return {
        "process": pa.Table.from_pylist(ids.proc_rows, schema=SCHEMAS["process"]),
        "thread": pa.Table.from_pylist(ids.thread_rows, schema=SCHEMAS["thread"]),
        "track": pa.Table.from_pylist(tracks, schema=SCHEMAS["track"]),
    }


# --------------------------------------------------------------------------- entry point


def read_chrome_json(path: str | os.PathLike[str], *, fast: bool = True) -> TraceTables:
    """Read a Chrome Trace Event / Kineto JSON file (``.json`` or ``.json.gz``).

    ``fast=False`` (or ``LAYERSCOPE_JSON_FAST=0`` in the environment) skips the in-memory
    C-scanner path and always uses DuckDB (the two give the same tables; tests compare them).
    """
    source = Path(path)
    result = None
    if fast and _FAST_ENABLED:
        from layerscope.trace.chrome_fast import read_chrome_json_fast

        result = read_chrome_json_fast(source)
    if result is None:
        tables, metadata, warnings = _read_with_duckdb(source)
    else:
        tables, metadata, warnings = result
    metadata.update({"source": str(source), "format": "chrome_json"})
    for message in warnings:
        # dropping improperly nested slices is routine (trace_processor does it silently)
        level = logging.INFO if message.startswith("dropped") else logging.WARNING
        log.log(level, "%s: %s", source, message)
    return TraceTables.from_tables(tables, metadata, warnings)


#: The DuckDB path's temporary directories (the events copy, DuckDB's spill files) are
#: ``<tmp>/layerscope-ingest-*``, each with a lock file its reader holds locked while it runs. A
#: reader killed mid-ingest (kill -9, out of memory) cannot remove its directory; the kernel drops
#: its lock, and the next reader removes it (:func:`remove_stale_ingest_dirs`).
INGEST_PREFIX = "layerscope-ingest-"
_LOCK_NAME = ".lock"
#: A directory this young is never removed: its reader may be between creating and locking it.
_STALE_AFTER_S = 60.0


@contextlib.contextmanager
def ingest_dir() -> Iterator[Path]:
    """A fresh temporary directory for one ingest, locked while in use, removed afterwards
    (after removing those that readers killed mid-ingest left behind)."""
    remove_stale_ingest_dirs()
    tmp = Path(tempfile.mkdtemp(prefix=INGEST_PREFIX))
    try:
        with open(tmp / _LOCK_NAME, "wb") as lock:
            if fcntl is not None:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def remove_stale_ingest_dirs(root: Path | None = None) -> list[Path]:
    """Remove this user's ingest directories under ``root`` (the system temporary directory)
    whose reader is gone: lock file free (or never made) and older than a minute. Returns them."""
    if fcntl is None or not hasattr(os, "getuid"):
        return []  # no advisory locks: leave them (no way to tell a live reader's)
    removed: list[Path] = []
    for entry in Path(root or tempfile.gettempdir()).glob(INGEST_PREFIX + "*"):
        try:
            info = entry.lstat()
            if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
                continue
            lock_path = entry / _LOCK_NAME
            made = lock_path.stat().st_mtime if lock_path.exists() else info.st_mtime
            if time.time() - made < _STALE_AFTER_S:
                continue
            with open(lock_path, "ab") as lock:
                try:
                    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    continue  # its reader is alive
                shutil.rmtree(entry, ignore_errors=True)
        except OSError:
            continue  # vanished meanwhile, or not ours to touch
        removed.append(entry)
    return removed


def _read_with_duckdb(source: Path) -> tuple[dict[str, pa.Table], dict[str, Any], list[str]]:
    """The general path: events array to a temporary file, parsed by DuckDB, tables by SQL."""
    warnings: list[str] = []
    with ingest_dir() as tmp:
        events_path = Path(tmp) / "events.json"
        metadata, candidates = _extract_events(source, events_path, warnings)
        # a memory limit: DuckDB spills the raw events to the temporary directory beyond it,
        # so peak memory follows the result tables, not the JSON text
        con = duckdb.connect(str(Path(tmp) / "ingest.duckdb") if _FILE_DB else ":memory:")
        try:
            con.execute(f"SET temp_directory = '{tmp}'")
            con.execute(f"SET memory_limit = '{_MEMORY_LIMIT}'")
            _load_raw(con, source, events_path, candidates, warnings)
            events_path.unlink()
            tables = _build(con, warnings)
        except duckdb.Error as exc:
            raise TraceError(f"{str(source)!r}: cannot read events: {exc}") from None
        finally:
            con.close()
    return tables, metadata, warnings


def _build(con: duckdb.DuckDBPyConnection, warnings: list[str]) -> dict[str, pa.Table]:
    bad_ts, neg_dur, bad_dur = con.execute("""
        SELECT count(*) FILTER (WHERE ts IS NULL AND ph IS DISTINCT FROM 'M'),
               count(*) FILTER (WHERE ph = 'X' AND dur < 0),
               count(*) FILTER (WHERE ph = 'X' AND dur IS NULL AND ts IS NOT NULL)
        FROM ev""").fetchone() or (0, 0, 0)
    skipped_warnings(bad_ts, neg_dur, bad_dur, warnings)

    ids = _processes_and_threads(con)
    slice_utids = [ids.thread(pid, tid) for pid, tid in con.execute("""
        SELECT DISTINCT pid, tid FROM ev WHERE ts IS NOT NULL AND (ph IN ('X', 'B', 'E')
            OR (ph IN ('i', 'I', 'R') AND (s IS NULL OR s NOT IN ('g', 'p'))))""").fetchall()]
    tracks: list[dict[str, Any]] = []
    thread_track: dict[int, int] = {}
    for utid in sorted(set(slice_utids)):
        thread_track[utid] = len(tracks)
        tracks.append({"id": len(tracks), "name": None, "type": "thread", "utid": utid,
                       "upid": ids.thread_rows[utid]["upid"], "parent_id": None, "unit": None})
    tmap = pa.table({
        "pid": [k[0] for k in ids.threads], "tid": [k[1] for k in ids.threads],
        "track_id": pa.array([thread_track.get(u, -1) for u in ids.threads.values()], pa.int64()),
    })
    con.register("tmap", tmap)
    extra = _python_slices(con, ids, thread_track, tracks, warnings)
    con.register("extra", extra)
    # One fetch of the narrow columns and the names of every slice (file order does not matter:
    # numpy orders them), then the args, the widest column, alone.
    thread_slices = """
        ev.ts IS NOT NULL AND ((ev.ph = 'X' AND ev.dur >= 0) OR (ev.ph IN ('i', 'I', 'R')
            AND (ev.s IS NULL OR ev.s NOT IN ('g', 'p'))))"""
    narrow = con.sql(f"""
        SELECT ev.seq, ev.ts, CASE WHEN ev.ph = 'X' THEN ev.dur ELSE 0 END AS dur, m.track_id,
               ev.tts, CASE WHEN ev.ph = 'X' THEN ev.tdur END AS tdur, ev.cat, ev.name
        FROM ev JOIN tmap m USING (pid, tid) WHERE {thread_slices}
        UNION ALL SELECT seq, ts, dur, track_id, tts, tdur, cat, name FROM extra""").to_arrow_table()
    seq = narrow.column("seq").to_numpy()
    ts_all = narrow.column("ts").to_numpy()
    dur_all = narrow.column("dur").to_numpy()
    track_all = narrow.column("track_id").to_numpy()
    rows, depth, parent = order_and_nest(seq, ts_all, dur_all, track_all, warnings)
    n = len(rows)
    rank_by_seq = np.full(int(seq.max()) + 1 if len(seq) else 0, -1, dtype=np.int64)
    rank_by_seq[seq[rows]] = np.arange(n)
    take = pa.array(rows)
    track_arr, ts_arr, dur_arr = track_all[rows], ts_all[rows], dur_all[rows]

    category = pc.dictionary_encode(narrow.column("cat")).take(take)
    name = pc.dictionary_encode(narrow.column("name")).take(take)
    thread_ts, thread_dur = narrow.column("tts").take(take), narrow.column("tdur").take(take)
    del narrow  # before the args, the widest column, arrive
    args = con.sql(f"""
        SELECT seq, args FROM ev WHERE args IS NOT NULL AND {thread_slices}
        UNION ALL SELECT seq, args FROM extra WHERE args IS NOT NULL""").to_arrow_table()
    con.unregister("extra")
    arg_ids = rank_by_seq[args.column("seq").to_numpy()]
    has_args = np.zeros(n, dtype=bool)
    has_args[arg_ids[arg_ids >= 0]] = True
    table = slice_table(ts_arr, dur_arr, track_arr, category, name, depth, parent, has_args, thread_ts, thread_dur)
    # one arg set per slice with args (slices dropped as overlapping have none), in the order
    # DuckDB returns them: sorting 3M rows of args here would copy them twice (+700 MB at peak)
    arg_sets = pa.table({"arg_set_id": arg_ids, "json": args.column("args")})
    if (arg_ids < 0).any():
        arg_sets = arg_sets.filter(pa.array(arg_ids >= 0))
    del args
    flow = _bind_flows(con, track_arr, ts_arr, dur_arr, parent)
    counter = _counters(con, ids, tracks, warnings)
    return {**other_tables(ids, tracks), "slice": table, "counter": counter, "flow": flow, "arg_sets": arg_sets}
