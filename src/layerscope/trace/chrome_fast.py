"""In-memory fast path for Chrome/Kineto JSON: the C scanner's columns, then numpy/pyarrow tables.

How: the file is read and inflated whole (gzip through python-isal when installed); the
``traceEvents`` array is located as the DuckDB path locates it (first ``"traceEvents"`` key,
end found from the tail) and scanned by the C extension :mod:`layerscope.trace._chrome_scan`
(GIL released; texts of a MiB or more in two chunks on two threads) into columns: the phase
byte, type tags and int64 values for pid/tid/id and the times (exact ns where the text makes that
simple), Arrow string views into the text for names, categories and other strings, and each
``args`` value's offset and length (never decoded, except for ``M`` and ``C`` events).
Everything after that reuses the DuckDB path's table logic in
:mod:`layerscope.trace.chrome_reader` (:func:`~layerscope.trace.chrome_reader.ids_for`,
:func:`~layerscope.trace.chrome_reader.nest` through
:func:`~layerscope.trace.chrome_reader.order_and_nest`,
:func:`~layerscope.trace.chrome_reader.python_slices`,
:func:`~layerscope.trace.chrome_reader.bind_flows`,
:func:`~layerscope.trace.chrome_reader.counters`), fed with the same rows in the same order.

Why: for traces up to ~1M events the DuckDB path's cost is mostly fixed per statement (a
temporary file, a JSON parse into a table, ~15 queries); here the whole ingest is one C parse
plus vectorized work, 1.8-12x faster (bench/RESULTS.md, "Chrome JSON reader paths"). Holding the
text costs memory, so files whose inflated text exceeds :data:`MAX_TEXT_BYTES` go to the DuckDB
path, which streams.

Scope: every phase the DuckDB path reads (X, B/E, i/I/R, M, C, s/t/f, b/e/n; other phases only
name threads, as there). Anything else returns ``None`` so the caller falls back to DuckDB, the
one fallback, which handles everything and gives the same tables: the scanner not built (no C
compiler at install), switched off (``LAYERSCOPE_JSON_NATIVE=0``) or pyarrow without string
views (< 16); a gzip stream that is truncated, corrupt or multi-member; anything the scanner
declines (any JSON syntax error, a field of an unexpected JSON type (``name`` not a string,
``pid`` a float, ``ts`` a bool, ``ph`` not a Trace Event Format phase), an escaped or duplicated
key, an int outside int64, invalid UTF-8, nesting past 256 levels: see _chrome_scan.c); a time
string that is not a plain decimal number (``"1e3"``, ``" 12"``, ``"soon"``: DuckDB's casts
have their own rules for those); a time whose µs × 1000 overflows int64; a nested ``"ts"`` key
in output ``args`` when fractional timestamps switch on the DuckDB path's ``ts`` quoting (which
quotes those too).

Times follow the DuckDB path's casts exactly: ints × 1000; text (a JSON string, or under ``ts``
quoting a number's own digits) through DECIMAL(38,6) and ROUND, both half away from zero; a JSON
float through its double, as DuckDB reads it (double → shortest decimal → DECIMAL).

The one intended difference: ``arg_sets.json`` holds the file's own text of ``args`` (wrapped as
``{"args": …}``), where DuckDB re-serializes it (no whitespace, ``5.3`` for ``5.300000``, escapes
resolved), and the rows are in id order (DuckDB's path leaves them in its output order). The
documents are equal as JSON, so the ``args`` view and every report see the same values;
re-serializing ~10 MB of args would cost more than all of this path's table building.
"""

from __future__ import annotations

import logging
import os
import re
import threading
from collections.abc import Callable
from decimal import ROUND_HALF_UP, Decimal
from functools import cached_property
from pathlib import Path
from typing import Any, Literal

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from layerscope.trace.chrome_reader import (
    _EVENTS_KEY,
    _FRACTION_PROBE_BYTES,
    _FRACTIONAL_TS,
    _HEADER_LIMIT_BYTES,
    _INFLATE,
    _LEADING,
    _WS,
    DepthGuard,
    _chrome_scan,  # the C scanner (None where setup.py could not build it)
    _find_array_end,
    _loads_object,
    apply_metadata,
    bind_flows,
    counters,
    ids_for,
    order_and_nest,
    other_tables,
    python_slices,
    skipped_warnings,
    slice_table,
)
from layerscope.trace.readers import inflate_budget, too_big

log = logging.getLogger(__name__)

#: Inflated JSON text above this size goes to the DuckDB path, which streams. Measured on 2 cores
#: (gpu-training-control repeated, bench/RESULTS.md): the C scanner's path costs ~0.9 µs per event
#: and holds the text, the columns and the tables at once (1125 MiB peak at 982k events, 314 MB of
#: text), where DuckDB's takes ~1.6 µs per event and 816 MiB; past ~1.2M events (384 MiB) the
#: peak would pass 1.4 GB, so the DuckDB path keeps 3M-event traces within 2 GB.
MAX_TEXT_BYTES = int(os.environ.get("LAYERSCOPE_JSON_FAST_MAX_MB", "384")) << 20
_TAIL_BYTES = 1 << 23
_MAX_US = (2**63 - 1) // 1000
_PLAIN_DECIMAL = r"^-?[0-9]+(\.[0-9]+)?$"
#: Events text from this size on is scanned in two chunks on two threads.
_SPLIT_MIN_BYTES = 1 << 20
#: Between two events: where the second chunk may start (the first chunk's scan checks it).
_EVENT_GAP = re.compile(rb"\}[ \t\r\n]*,[ \t\r\n]*\{")
_ARRAY_OPENING = re.compile(rb"[ \t\r\n]*:[ \t\r\n]*\[")
#: String-view arrays (pyarrow >= 16): the scanner's strings point into the text (without them,
#: the DuckDB path reads).
_STRING_VIEW = hasattr(pa, "string_view")


class _Unsupported(Exception):
    """The input needs the DuckDB path."""


class _Beside:
    """``fn()`` run in a thread beside the caller's work (numpy, Arrow and the C scanner release
    the GIL): :meth:`wait` for it in a ``finally``, then :meth:`result` gives its value or raises
    its exception in the caller's thread."""

    def __init__(self, fn: Callable[[], Any], name: str) -> None:
        self._outcome: list[tuple[bool, Any]] = []
        self._worker = threading.Thread(target=self._run, args=(fn,), name=name, daemon=True)
        self._worker.start()

    def _run(self, fn: Callable[[], Any]) -> None:
        try:
            self._outcome.append((True, fn()))
        except BaseException as exc:  # re-raised by result(), in the caller's thread
            self._outcome.append((False, exc))

    def wait(self) -> None:
        self._worker.join()

    def result(self) -> Any:
        self.wait()
        ok, value = self._outcome[0]
        if not ok:
            raise value
        return value


# phase kinds
_OTHER, _X, _B, _E, _INSTANT, _M, _S, _T, _F, _C, _AB, _AE, _AN = range(13)
_KIND = {"X": _X, "B": _B, "E": _E, "i": _INSTANT, "I": _INSTANT, "R": _INSTANT, "M": _M, "s": _S,
         "t": _T, "f": _F, "C": _C, "b": _AB, "e": _AE, "n": _AN}


def scanner_available() -> bool:
    """Whether this path can run: the C scanner is built, not switched off
    (``LAYERSCOPE_JSON_NATIVE=0``), and pyarrow has string views (>= 16)."""
    return _chrome_scan is not None and _STRING_VIEW and os.environ.get("LAYERSCOPE_JSON_NATIVE", "1") != "0"


def read_chrome_json_fast(path: Path) -> tuple[dict[str, pa.Table], dict[str, Any], list[str]] | None:
    """Tables, top-level metadata and warnings of the trace at ``path``, or ``None``.

    ``None`` means "use the DuckDB path": the scanner is not available
    (:func:`scanner_available`), the file is too big to hold, or it uses something this path
    does not reproduce exactly (see the module docstring). Bad input raises only what no path
    reads, as the DuckDB path would: :class:`TraceError` for JSON nested deeper than
    :data:`~layerscope.trace.readers.MAX_JSON_DEPTH` or gzip inflating past its
    :func:`~layerscope.trace.readers.inflate_budget`.
    """
    if not scanner_available():
        log.debug("%s: fast JSON path not used (the C scanner is not available)", path)
        return None
    try:
        text = _read_text(path)
        if text is None:
            return None
        return _parse(text, DepthGuard(path))
    except _Unsupported as exc:
        log.debug("%s: fast JSON path not used (%s)", path, exc)
        return None
    except (pa.ArrowException, orjson.JSONDecodeError, ValueError, OverflowError, OSError, MemoryError) as exc:
        log.debug("%s: fast JSON path not used (%s: %s)", path, type(exc).__name__, exc)
        return None


# --------------------------------------------------------------------------- bytes


def _read_text(path: Path) -> bytes | None:
    """The whole JSON text: a plain file, or one complete gzip member (else ``None``)."""
    with open(path, "rb") as handle:
        magic = handle.read(2)
        size = handle.seek(0, os.SEEK_END)
        if magic == b"\x1f\x8b" and size >= 18:
            handle.seek(-4, os.SEEK_END)
            # ISIZE, the inflated size modulo 4 GiB (max_length below catches the rest)
            if int.from_bytes(handle.read(4), "little") > MAX_TEXT_BYTES:
                return None
        elif size > MAX_TEXT_BYTES:
            return None
        handle.seek(0)
        data = handle.read()
    if magic != b"\x1f\x8b":
        return data
    budget = inflate_budget(path)
    cap = min(MAX_TEXT_BYTES, budget[0])
    inflater = _INFLATE.decompressobj(31)
    try:
        text = inflater.decompress(data, cap + 1)
    except _INFLATE.error:
        return None
    if len(text) > budget[0]:
        raise too_big(path, budget)  # as the DuckDB path would, without inflating it again
    if not inflater.eof or inflater.unused_data or len(text) > cap:
        return None  # truncated, multi-member or trailing bytes, too big: the DuckDB path
    return text


def _parse(text: bytes, guard: DepthGuard) -> tuple[dict[str, pa.Table], dict[str, Any], list[str]]:
    """Locate the events array as the DuckDB path does, scan it, build the tables.

    ``guard`` walks the text outside the events before any parser sees it; the scanner's columns
    prove the events nested less than 259 levels (where it declines, the DuckDB path guards them).
    """
    lead = _LEADING.match(text).end()  # type: ignore[union-attr]
    first = text[lead:lead + 1]
    metadata: dict[str, Any] = {}
    if first == b"[":
        start, top_level_array = lead + 1, True
    elif first == b"{":
        key = text.find(_EVENTS_KEY)
        if key < 0:
            raise _Unsupported("no traceEvents key")
        if key > _HEADER_LIMIT_BYTES:
            raise _Unsupported("traceEvents too far in")
        opening = _ARRAY_OPENING.match(text, key + len(_EVENTS_KEY))
        if opening is None:
            raise _Unsupported("traceEvents is not an array")
        bracket = opening.end() - 1
        start, top_level_array = bracket + 1, False
        guard.feed(memoryview(text)[:start])
        header = _loads_object(text[lead:key].rstrip(_WS).rstrip(b",") + b"}")
        if header is not None:
            metadata.update(header)
    else:
        raise _Unsupported("not a JSON object or array")
    if top_level_array:
        guard.feed(memoryview(text)[:start])
    tail_offset = _tail_offset(text, start)
    found = _find_array_end(text[tail_offset:], top_level_array, array_start=tail_offset == start)
    if found is None:
        raise _Unsupported("events array not closed")
    end = tail_offset + found[0]
    # the events are complete values (else no parser takes them): what follows them starts in
    # the header's state (orjson parsed it above, but stops at 1024 levels on its own)
    guard.at(end).feed(memoryview(text)[end:])
    metadata.update(found[1])
    quoted = _FRACTIONAL_TS.search(text, start, start + _FRACTION_PROBE_BYTES) is not None
    if quoted and text.find(b'"ts":', end) >= 0:
        raise _Unsupported("a 'ts' key after the events array would be quoted")
    columns = _scan_columns(text, start, end, quoted)
    if isinstance(columns, str):
        raise _Unsupported(f"the C scanner declined the events: {columns}")
    if columns.n == 0:
        raise _Unsupported("no events")
    warnings: list[str] = []
    tables = _Builder(columns, quoted, warnings).tables()
    return tables, metadata, warnings


def _scan_columns(text: bytes, start: int, end: int, quoted: bool) -> _ScannedColumns | str:
    """The C scanner's columns of the events in ``text[start:end]``, or why it declined them
    (the DuckDB path reads them then; see _chrome_scan.c). Texts of a MiB or more are
    scanned in two chunks on two threads (the scanner releases the GIL): the second starts at an
    event boundary found after the middle, which the first chunk's scan proves (it must end
    with a comma after a complete event); where it does not, the text is scanned whole.
    """
    chunks: list[Any] | None = None
    if end - start >= _SPLIT_MIN_BYTES and (os.cpu_count() or 1) > 1:
        gap = _EVENT_GAP.search(text, start + (end - start) // 2, end)
        if gap is not None:
            split = gap.end() - 1
            tail = _Beside(lambda: _chrome_scan.scan(text, split, end, _chrome_scan.MODE_TAIL, quoted, 2),
                           "layerscope-scan")
            try:
                head = _chrome_scan.scan(text, start, split, _chrome_scan.MODE_HEAD, quoted, 1)
            finally:
                tail.wait()
            rest = tail.result()
            if not isinstance(head, str):  # the split point starts an event
                chunks = [head, rest]
    if chunks is None:
        chunks = [_chrome_scan.scan(text, start, end, _chrome_scan.MODE_ALL, quoted, 1)]
    reasons = [c for c in chunks if isinstance(c, str)]
    if reasons:
        return str(reasons[0])
    return _ScannedColumns(text, chunks)


def _tail_offset(text: bytes, start: int) -> int:
    """Where the DuckDB path's tail begins, or later where that gives the same array end.

    ``_find_array_end`` looks at the 256 rightmost ``]`` of the tail (the last 8 MiB there) and
    at the last non-whitespace byte before each; a window starting at that byte before the
    256th ``]`` from the right sees the same, and copies far less.
    """
    floor = max(start, len(text) - _TAIL_BYTES)
    pos = len(text)
    for _ in range(256):
        pos = text.rfind(b"]", floor, pos)
        if pos < 0:
            return floor
    while pos > floor and text[pos - 1] in _WS:
        pos -= 1
    return max(floor, pos - 1)


# --------------------------------------------------------------------------- columns


def _text(value: Any) -> str | None:
    if value is None or value.__class__ is str:
        return value
    if value.__class__ is int:
        return str(value)
    raise _Unsupported(f"a value of type {type(value).__name__}")


def _typed_array(values: list[Any]) -> pa.Array:
    """Ints (and ``None``) as int64, else everything as text (ints in decimal)."""
    try:
        return pa.array(values, pa.int64())
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        pass
    try:
        return pa.array(values, pa.string())
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return pa.array([_text(v) for v in values], pa.string())


def _round_half_away(x: np.ndarray, div: np.ndarray | int) -> np.ndarray:
    mag = np.abs(x)
    q, r = np.divmod(mag, div)
    q += 2 * r >= div
    return np.where(x < 0, -q, q)


def _decimal_ns(micros: Decimal) -> int:
    """DuckDB's ``ROUND(CAST(µs AS DECIMAL(38,6)) * 1000)``: both roundings half away from zero."""
    six = micros.quantize(Decimal("0.000001"), rounding=ROUND_HALF_UP)
    return int((six * 1000).quantize(Decimal(1), rounding=ROUND_HALF_UP))


def _float_times(us: np.ndarray) -> np.ndarray:
    """Doubles → ns as DuckDB does (through their shortest decimal text).

    ``us * 1000`` rounded half away from zero is that, except near a .5: DuckDB rounds the
    shortest decimal (to 6 decimals, then to ns), which moves a value by up to 0.0005 ns, and the
    product is off by up to ~1.5 ulp (2e-5 ns below 2^36 ns, ~69 s). Values within 0.001 ns of a
    .5, or beyond 2^36 ns, take the exact decimal path (a handful: Kineto durations have 3
    decimals; timestamps with decimals are quoted text, not floats).
    """
    with np.errstate(over="ignore", invalid="ignore"):  # beyond int64 ns: the exact path refuses it
        x = us * 1000.0
        ns = np.where(x < 0, np.ceil(x - 0.5), np.floor(x + 0.5))
        exact = (np.abs(np.abs(x - np.trunc(x)) - 0.5) < 1e-3) | ~(np.abs(x) < 2.0**36)
    out = np.where(exact, 0.0, ns).astype(np.int64)
    for i in np.flatnonzero(exact).tolist():
        value = float(us[i])
        if not abs(value) < _MAX_US:
            raise _Unsupported("a time overflows int64 ns")
        out[i] = _decimal_ns(Decimal(repr(value)))
    return out


def _has_byte(arr: pa.Array, chars: bytes) -> bool:
    """Whether any of ``chars`` occurs in the bytes of a string array (nulls' bytes included)."""
    data = arr.buffers()[2]
    if data is None:
        return False
    view = np.frombuffer(data, dtype=np.uint8)
    return bool(np.isin(view, np.frombuffer(chars, dtype=np.uint8)).any())


def _text_times(arr: pa.Array, valid: np.ndarray) -> np.ndarray:
    """Decimal texts → ns through DECIMAL(38,6) (rounded half away from zero), × 1000, rounded.

    Only ``-?digits(.digits)?`` is accepted (DuckDB's casts also take ``" 12"``, ``"0x10"``,
    ``"1e3"``… and those go to it); the digits without the dot are one int64.
    """
    dot = pc.find_substring(arr, ".").fill_null(-1).to_numpy().astype(np.int64)
    length = pc.binary_length(arr).fill_null(0).to_numpy().astype(np.int64)
    negative = pc.starts_with(arr, "-").fill_null(False).to_numpy(zero_copy_only=False)
    has_dot = dot >= 0
    # a digit on both sides of the dot; hex ('0x…') would pass the int64 cast
    if ((has_dot & ((dot < 1 + negative) | (dot > length - 2))).any()
            or _has_byte(arr, b"xX")):
        raise _Unsupported("a time that is not a plain decimal number")
    digits = pc.replace_substring(arr, ".", "", max_replacements=1) if has_dot.any() else arr
    try:
        unscaled = pc.cast(digits, pa.int64()).fill_null(0).to_numpy()  # rejects a second dot, signs, spaces
    except pa.ArrowInvalid:
        raise _Unsupported("a time that is not a plain decimal number") from None
    unscaled = np.where(valid, unscaled, 0)
    frac = np.where(has_dot, length - dot - 1, 0)
    if frac.max() > 18:
        raise _Unsupported("a time with more than 18 decimals")
    scale = 10 ** np.maximum(3 - frac, 0)  # up to 3 decimals: exact
    if (np.abs(unscaled) > (2**63 - 1) // scale).any():
        raise _Unsupported("a time overflows int64 ns")
    ns = unscaled * scale
    if frac.max() <= 3:
        return ns
    mid = (frac > 3) & (frac <= 6)  # DECIMAL(38,6) holds it: × 1000 then ROUND is one rounding
    ns[mid] = _round_half_away(unscaled[mid], 10 ** (frac[mid] - 3))
    fine = frac > 6  # rounded to 6 decimals first, then to ns
    ns[fine] = _round_half_away(_round_half_away(unscaled[fine], 10 ** (frac[fine] - 6)), 1000)
    return ns


def _first_seen(keys: np.ndarray, size: int) -> np.ndarray:
    """Distinct values of ``keys`` (ints in ``[0, size)``) in order of first appearance."""
    if size <= 4 * len(keys) + 1024:
        first = np.full(size, len(keys), dtype=np.int64)
        np.minimum.at(first, keys, np.arange(len(keys), dtype=np.int64))
        present = np.flatnonzero(first < len(keys))
        return present[np.argsort(first[present], kind="stable")]
    uniq, index = np.unique(keys, return_index=True)
    return uniq[np.argsort(index, kind="stable")]


def _text_ranks(values: list[Any]) -> np.ndarray:
    """Dense ranks of the values' texts (ints in decimal) in byte order, as DuckDB orders VARCHAR."""
    arr = _typed_array(values)
    if arr.type != pa.string():
        arr = arr.cast(pa.string())
    return pc.rank(arr, sort_keys="ascending", tiebreaker="dense").to_numpy().astype(np.int64)


def _ranks(strings: pa.DictionaryArray) -> np.ndarray:
    """Per element, the rank of its string in byte order, nulls last (DuckDB's ORDER BY)."""
    values = strings.dictionary.to_pylist()
    rank = np.empty(len(values) + 1, dtype=np.int64)
    rank[sorted(range(len(values)), key=values.__getitem__)] = np.arange(len(values))
    rank[len(values)] = len(values)
    return rank[strings.indices.fill_null(len(values)).to_numpy()]


#: ``_chrome_scan.scan`` tag values (``_TAG_NS``: a time's exact ns, in the int column)
_TAG_NONE, _TAG_INT, _TAG_FLOAT, _TAG_STR, _TAG_NS = range(5)
#: index of each field in the scanner's tags/ints (pid, tid, id, times) and views (strings first)
_TAGGED = {"pid": 0, "tid": 1, "id": 2, "ts": 3, "dur": 4, "tts": 5, "tdur": 6}
_VIEWED = {"cat": 0, "name": 1, "bp": 2, "s": 3, "pid": 4, "tid": 5, "id": 6, "ts": 7, "dur": 8, "tts": 9,
           "tdur": 10}
_PH_KIND = np.full(256, _OTHER, dtype=np.int8)
for _ph, _k in _KIND.items():
    _PH_KIND[ord(_ph)] = _k


class _ScannedColumns:
    """The per-event columns the tables are built from, from the C scanner
    (:mod:`layerscope.trace._chrome_scan`), one or two chunks.

    Numpy/Arrow columns for every event (phase kind, times, names, categories, pid/tid codes),
    and accessors for the fields only some events need (taken by event index). Strings are
    Arrow string views into the JSON text (or a chunk's side buffer, for escaped strings); times
    arrive as exact ns where the text makes that simple; nothing is decoded per event in Python.
    """

    def __init__(self, text: bytes, chunks: list[tuple[Any, ...]]) -> None:
        self.text = text
        self.chunks = chunks
        self.n = sum(c[0] for c in chunks)
        self._data = [pa.py_buffer(text), *(pa.py_buffer(c[8] if len(memoryview(c[8])) else b"") for c in chunks)]
        self._views: dict[int, np.ndarray] = {}
        self.ph = self._column(lambda c: c[1], np.uint8)
        self.tags = [self._column(lambda c, k=k: c[2][k], np.uint8) for k in range(len(_TAGGED))]  # type: ignore[misc]
        self.ints = [self._column(lambda c, k=k: c[3][k], np.int64) for k in range(len(_TAGGED))]  # type: ignore[misc]
        self.has = [self._column(lambda c, k=k: c[5][k], np.bool_) for k in range(4)]  # type: ignore[misc]
        self.args_off = self._column(lambda c: c[6], np.int32)
        self.args_len = self._column(lambda c: c[7], np.int32)
        self.args_obj = self._column(lambda c: c[9], np.bool_)
        self.kind = _PH_KIND[self.ph]
        self.ts, self.ts_ok = self._times("ts")
        self.dur, self.dur_ok = self._times("dur")
        self.tts = self._times("tts") if self.tags[_TAGGED["tts"]].any() else None
        self.tdur = self._times("tdur") if self.tags[_TAGGED["tdur"]].any() else None
        # pyarrow's kernels release the GIL: tid's codes in a thread while pid's are taken here
        tid = _Beside(lambda: self._text_codes("tid"), "layerscope-codes")
        try:
            self.pid_code, self.pid_texts = self._text_codes("pid")
        finally:
            tid.wait()
        self.tid_code, self.tid_texts = tid.result()

    # Names and categories are needed whole only for the slice table and the flows, after the
    # nesting has started in its thread: encoded then, in its shadow.
    @cached_property
    def name_arr(self) -> pa.DictionaryArray:
        return self._dictionary("name")

    @cached_property
    def cat_arr(self) -> pa.DictionaryArray:
        return self._dictionary("cat")

    def _column(self, get: Any, dtype: Any) -> np.ndarray:
        parts = [np.frombuffer(get(c), dtype=dtype) for c in self.chunks]
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def _view(self, field: str) -> np.ndarray:
        """The field's 16-byte string views (uint8, 16 per event), joined across chunks once."""
        k = _VIEWED[field]
        if k not in self._views:
            self._views[k] = self._column(lambda c: c[4][k], np.uint8)
        return self._views[k]

    def _strings(self, field: str, valid: np.ndarray | None, index: np.ndarray | None = None) -> pa.Array:
        """The field's views (at ``index``, else all) as a string-view array, null where not ``valid``."""
        views = self._view(field)
        if index is not None:
            views = np.ascontiguousarray(views.reshape(-1, 16)[index])
        n = views.size // 16
        validity = None if valid is None or valid.all() else pa.py_buffer(np.packbits(valid, bitorder="little"))
        return pa.Array.from_buffers(pa.string_view(), n, [validity, pa.py_buffer(views), *self._data])

    def _dictionary(self, field: str) -> pa.DictionaryArray:
        """Dictionary-encoded plain strings (first-seen order, as ``pa.array(...).dictionary_encode()``)."""
        encoded = self._strings(field, self.has[_VIEWED[field]]).dictionary_encode()
        return pa.DictionaryArray.from_arrays(encoded.indices, encoded.dictionary.cast(pa.string()))

    def _times(self, field: str) -> tuple[np.ndarray, np.ndarray]:
        """(int64 ns, valid) of a time field, exactly as the DuckDB path's ``_TIME_NS`` casts it:
        the scanner's exact ns, else ints × 1000, floats (JSON numbers DuckDB reads as doubles)
        through the double's shortest decimal text, texts through DECIMAL(38,6)."""
        tag, ints = self.tags[_TAGGED[field]], self.ints[_TAGGED[field]]
        valid = tag != _TAG_NONE
        if (tag == _TAG_NS).sum() == int(valid.sum()):
            return np.where(valid, ints, 0), valid
        ns = np.where(tag == _TAG_NS, ints, 0)
        if (tag == _TAG_INT).any():  # µs × 1000 overflows int64 (the scanner took the others)
            raise _Unsupported("a time overflows int64 ns")
        for kind in (_TAG_FLOAT, _TAG_STR):
            rows = np.flatnonzero(tag == kind)
            if len(rows) == 0:
                continue
            part = self._strings(field, None, rows).cast(pa.string())
            if kind == _TAG_FLOAT:
                ns[rows] = _float_times(pc.cast(part, pa.float64()).to_numpy())
            else:
                ns[rows] = _text_times(part, np.ones(len(rows), dtype=bool))
        return ns, valid

    def _text_codes(self, field: str) -> tuple[np.ndarray, list[str]]:
        """Per event the index of its text (ints in decimal, none → ``"0"``) in first-seen order:
        the DuckDB path reads pid/tid as text, so ``7`` and ``"7"`` are one key."""
        tag, ints = self.tags[_TAGGED[field]], self.ints[_TAGGED[field]]
        is_str = tag == _TAG_STR
        if not is_str.any():  # ints and none (the int column holds 0 there): codes of the ints
            encoded = pa.array(ints).dictionary_encode()
            return encoded.indices.to_numpy().astype(np.int64), [str(v) for v in encoded.dictionary.to_pylist()]
        # views are read only where the tag says string (elsewhere the scanner never wrote them)
        texts = pc.replace_with_mask(pc.cast(pa.array(ints), pa.string()), pa.array(is_str),
                                     self._strings(field, None, np.flatnonzero(is_str)).cast(pa.string()))
        encoded = texts.dictionary_encode()
        return encoded.indices.to_numpy().astype(np.int64), encoded.dictionary.to_pylist()

    def strings(self, field: Literal["ph", "name", "cat", "s", "bp"], index: np.ndarray) -> list[str | None]:
        if field == "ph":
            return [chr(c) if c else None for c in self.ph[index].tolist()]
        return self._strings(field, self.has[_VIEWED[field]][index], index).to_pylist()  # type: ignore[no-any-return]

    def idents(self, index: np.ndarray) -> list[int | str | None]:
        k = _TAGGED["id"]
        tag = self.tags[k][index]
        out: list[int | str | None] = self.ints[k][index].tolist()
        for j in np.flatnonzero(tag == _TAG_NONE).tolist():
            out[j] = None
        strs = np.flatnonzero(tag == _TAG_STR)
        if len(strs):
            for j, text in zip(strs.tolist(), self._strings("id", None, index[strs]).to_pylist(), strict=True):
                out[j] = text
        return out

    def raw_args(self, i: int) -> bytes:
        """The raw JSON text of event ``i``'s ``args`` (``b""`` when it has none)."""
        start = int(self.args_off[i])
        return self.text[start:start + int(self.args_len[i])]

    def arg_flags(self, seq: np.ndarray, quoted: bool) -> np.ndarray:
        """Per candidate slice (events ``seq``), whether it has args (a non-empty object): the
        scanner's flags (it checked the UTF-8 of every string). Under ts quoting the texts are
        searched for a nested ``"ts":`` in place (then :class:`_Unsupported`: the DuckDB path)."""
        seq = np.ascontiguousarray(seq, dtype=np.int64)
        if quoted and _chrome_scan.args_contain(self.text, self.args_off, self.args_len, seq, b'"ts":'):
            raise _Unsupported("a nested 'ts' key in args under ts quoting")
        return self.args_obj[seq]

    def arg_json(self, seq: np.ndarray, chosen: np.ndarray) -> pa.Array:
        """The ``{"args": …}`` texts (raw, as in the file) of candidates ``chosen`` (positions in
        ``seq``), written by the scanner straight into an Arrow string array's buffers."""
        events = np.ascontiguousarray(seq[chosen], dtype=np.int64)
        offsets, data = _chrome_scan.args_strings(self.text, self.args_off, self.args_len, events)
        return pa.Array.from_buffers(pa.string(), len(events), [None, pa.py_buffer(offsets), pa.py_buffer(data)])


class _Builder:
    """Tables from the columns; each method mirrors one step of ``chrome_reader._build``."""

    def __init__(self, columns: _ScannedColumns, quoted: bool, warnings: list[str]) -> None:
        self.columns = columns
        self.n = columns.n
        self.warnings = warnings
        self.kind = columns.kind
        self.ts, self.ts_ok = columns.ts, columns.ts_ok
        self.dur, self.dur_ok = columns.dur, columns.dur_ok
        self.tts, self.tdur = columns.tts, columns.tdur
        self.pid_code, self.pid_texts = columns.pid_code, columns.pid_texts
        self.tid_code, self.tid_texts = columns.tid_code, columns.tid_texts
        self.quoted = quoted

    def _is(self, *kinds: int) -> np.ndarray:
        return np.isin(self.kind, kinds) if len(kinds) > 1 else self.kind == kinds[0]

    def _parsed_args(self, i: int) -> Any:
        raw = self.columns.raw_args(i)
        if self.quoted and b'"ts":' in raw:
            raise _Unsupported("a nested 'ts' key in args under ts quoting")
        return orjson.loads(raw) if raw else None

    def _pid(self, i: int) -> str:
        return self.pid_texts[self.pid_code[i]]

    def _tts_at(self, i: int) -> int | None:
        return int(self.tts[0][i]) if self.tts is not None and self.tts[1][i] else None

    def tables(self) -> dict[str, pa.Table]:
        kind, ts_ok = self.kind, self.ts_ok
        is_x = kind == _X
        skipped_warnings(int(np.count_nonzero(~ts_ok & (kind != _M))),
                         int(np.count_nonzero(is_x & self.dur_ok & (self.dur < 0))),
                         int(np.count_nonzero(is_x & ~self.dur_ok & ts_ok)), self.warnings)
        self._threads()
        self._tracks()
        extra = self._extra()
        slices = self._slices(extra)
        counter = self._counters()
        return {**other_tables(self.ids, self.track_rows), **slices, "counter": counter}

    # ----------------------------------------------------------------------- threads and tracks

    def _threads(self) -> None:
        pid_code, tid_code = self.pid_code, self.tid_code
        ntid = len(self.tid_texts)
        pair = pid_code * ntid + tid_code
        meta = self.kind == _M
        firsts = _first_seen(pair * 2 + meta, 2 * len(self.pid_texts) * ntid)
        self.ids = ids_for((self.pid_texts[k // 2 // ntid], self.tid_texts[k // 2 % ntid], bool(k & 1))
                           for k in firsts.tolist())
        metas = np.flatnonzero(meta)
        apply_metadata(self.ids, ((self.pid_texts[pid_code[i]], self.tid_texts[tid_code[i]], name,
                                   self._parsed_args(i))
                                  for i, name in zip(metas.tolist(), self.columns.strings("name", metas), strict=True)))
        # per event, its thread (-1 for a pair seen only on metadata events)
        pairs = np.unique(firsts // 2)
        utid_of = np.array([self.ids.threads.get((self.pid_texts[p // ntid], self.tid_texts[p % ntid]), -1)
                            for p in pairs.tolist()], dtype=np.int64)
        self.utid = utid_of[np.searchsorted(pairs, pair)]

    def _tracks(self) -> None:
        kind = self.kind
        instants = np.flatnonzero(kind == _INSTANT)
        scopes = self.columns.strings("s", instants)
        scoped = np.array([s in ("g", "p") for s in scopes], dtype=bool)
        self.instants, self.scoped = instants, scoped
        on_thread = self._is(_X, _B, _E)
        on_thread[instants[~scoped]] = True
        slice_utids = np.unique(self.utid[on_thread & self.ts_ok])
        self.track_rows: list[dict[str, Any]] = []
        self.thread_track: dict[int, int] = {}
        track_of_utid = np.full(len(self.ids.thread_rows) + 1, -1, dtype=np.int64)
        for utid in slice_utids.tolist():
            self.thread_track[utid] = len(self.track_rows)
            track_of_utid[utid] = len(self.track_rows)
            self.track_rows.append({"id": len(self.track_rows), "name": None, "type": "thread", "utid": utid,
                                    "upid": self.ids.thread_rows[utid]["upid"], "parent_id": None, "unit": None})
        self.ev_track = np.where(self.utid >= 0, track_of_utid[self.utid], -1)

    def _by_time(self, mask: np.ndarray) -> list[int]:
        idx = np.flatnonzero(mask & self.ts_ok)
        return idx[np.lexsort((idx, self.ts[idx]))].tolist()

    def _extra(self) -> dict[str, list[Any]]:
        """B/E, process/global instants and async events through the DuckDB path's own loop."""
        cols, ts, pid = self.columns, self.ts, self._pid
        # ``i`` stands in for the args: the slices' texts are taken by event index later
        idx = np.array(self._by_time(self._is(_B, _E)), dtype=np.int64)
        begin_end = [(i, ph, int(ts[i]), name, cat, pid(i), self.tid_texts[self.tid_code[i]], i, self._tts_at(i))
                     for i, ph, name, cat in zip(idx.tolist(), cols.strings("ph", idx), cols.strings("name", idx),
                                                 cols.strings("cat", idx), strict=True)]
        scoped = self.instants[self.scoped]
        idx = scoped[self.ts_ok[scoped]]
        scoped_instants = [(i, int(ts[i]), name, cat, pid(i), scope, i)
                           for i, name, cat, scope in zip(idx.tolist(), cols.strings("name", idx),
                                                          cols.strings("cat", idx), cols.strings("s", idx),
                                                          strict=True)]
        idx = np.array(self._by_time(self._is(_AB, _AE, _AN)), dtype=np.int64)
        async_events = [(i, ph, int(ts[i]), name, cat, pid(i), _text(ident), i)
                        for i, ph, name, cat, ident in zip(idx.tolist(), cols.strings("ph", idx),
                                                           cols.strings("name", idx), cols.strings("cat", idx),
                                                           cols.idents(idx), strict=True)]
        return python_slices(self.ids, self.thread_track, self.track_rows, self.warnings, begin_end,
                             scoped_instants, async_events)

    # ----------------------------------------------------------------------- slices, args, flows

    def _slices(self, extra: dict[str, list[Any]]) -> dict[str, pa.Table]:
        kind, ts_ok = self.kind, self.ts_ok
        x_rows = np.flatnonzero((kind == _X) & ts_ok & self.dur_ok & (self.dur >= 0))
        inst = self.instants[~self.scoped]
        inst_rows = inst[ts_ok[inst]]
        m = len(extra["seq"])
        seq = np.concatenate((x_rows, inst_rows, np.array(extra["seq"], dtype=np.int64)))
        ts = np.concatenate((self.ts[x_rows], self.ts[inst_rows], np.array(extra["ts"], dtype=np.int64)))
        dur = np.concatenate((self.dur[x_rows], np.zeros(len(inst_rows), dtype=np.int64),
                              np.array(extra["dur"], dtype=np.int64)))
        track = np.concatenate((self.ev_track[x_rows], self.ev_track[inst_rows],
                                np.array(extra["track_id"], dtype=np.int64)))
        # Nesting is numpy (sorts and searches that release the GIL): it runs in a thread while
        # this one encodes names (scanner columns), flags the args and prepares the flow events,
        # which need no nesting.
        nest_warnings: list[str] = []
        nested = _Beside(lambda: order_and_nest(seq, ts, dur, track, nest_warnings), "layerscope-nest")
        try:
            names, cats = self.columns.name_arr, self.columns.cat_arr  # encoded here if lazily (scanner columns)
            has = self.columns.arg_flags(seq, self.quoted)
            flow_events = self._flow_events()
        finally:
            nested.wait()
        rows, depth, parent = nested.result()
        self.warnings.extend(nest_warnings)
        kept = seq[rows]
        take = pa.array(kept)
        track_arr, ts_arr, dur_arr = track[rows], ts[rows], dur[rows]
        if self.tts is None:
            thread_ts = pa.nulls(len(rows), pa.int64())
        else:
            tts, ok = self.tts
            cand_ok = np.concatenate((ok[x_rows], ok[inst_rows],
                                      np.array([v is not None for v in extra["tts"]], dtype=bool)))
            cand = np.concatenate((tts[x_rows], tts[inst_rows],
                                   np.array([v or 0 for v in extra["tts"]], dtype=np.int64)))
            thread_ts = pa.array(cand[rows], mask=~cand_ok[rows])
        if self.tdur is None:
            thread_dur = pa.nulls(len(rows), pa.int64())
        else:
            tdur, ok = self.tdur
            size = len(inst_rows) + m
            cand_ok = np.concatenate((ok[x_rows], np.zeros(size, dtype=bool)))
            cand = np.concatenate((tdur[x_rows], np.zeros(size, dtype=np.int64)))
            thread_dur = pa.array(cand[rows], mask=~cand_ok[rows])
        has_args = has[rows]
        arg_json = self.columns.arg_json(seq, rows[has_args])
        table = slice_table(ts_arr, dur_arr, track_arr, cats.take(take), names.take(take), depth, parent, has_args,
                            thread_ts, thread_dur)
        arg_sets = pa.table({"arg_set_id": np.flatnonzero(has_args).astype(np.int64), "json": arg_json})
        flow = bind_flows(*flow_events, track_arr, ts_arr, dur_arr, parent)
        return {"slice": table, "arg_sets": arg_sets, "flow": flow}

    def _flow_events(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The flow events as :func:`~layerscope.trace.chrome_reader.bind_flows` takes them."""
        kind = self.kind
        cand = np.flatnonzero(self._is(_S, _T, _F) & self.ts_ok)
        idents = self.columns.idents(cand)
        has_id = np.array([v is not None for v in idents], dtype=bool)
        idx = cand[has_id]
        if len(idx) == 0:
            none = np.zeros(0, dtype=np.int64)
            return none.astype(bool), none.astype(bool), none.astype(bool), none, none, none
        take = pa.array(idx)
        keys = np.stack((_ranks(self.columns.cat_arr.take(take)), _ranks(self.columns.name_arr.take(take)),
                         _text_ranks([v for v in idents if v is not None])))
        composite = np.lexsort(keys[::-1])
        sorted_keys = keys[:, composite]
        new = np.concatenate(([True], (sorted_keys[:, 1:] != sorted_keys[:, :-1]).any(axis=0)))
        key = np.empty(len(idx), dtype=np.int64)
        key[composite] = np.cumsum(new)
        ts = self.ts[idx]
        order = np.lexsort((idx, ts, key))
        idx, key, ts = idx[order], key[order], ts[order]
        k = kind[idx]
        bps = self.columns.strings("bp", idx[k == _F])
        enclosing = k != _F
        enclosing[k == _F] = np.array([bp == "e" for bp in bps], dtype=bool)
        return k == _F, k == _S, enclosing, ts, self.ev_track[idx], key

    def _counters(self) -> pa.Table:
        idx = np.array(self._by_time(self.kind == _C), dtype=np.int64)
        rows = [(int(self.ts[i]), name, self._pid(i), _text(ident), self._parsed_args(i))
                for i, name, ident in zip(idx.tolist(), self.columns.strings("name", idx), self.columns.idents(idx),
                                          strict=True)]
        return counters(self.ids, self.track_rows, self.warnings, rows)
