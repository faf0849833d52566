"""Read Perfetto protobuf traces (``.pftrace``) into :class:`TraceTables`.

A hand-written decoder (:mod:`layerscope.trace.protobuf_wire`) for the TrackEvent subset:
``TrackDescriptor`` (uuid, name, parent_uuid, process, thread, counter), ``TrackEvent`` slice
begin/end, instants and counters with ``name``/``name_iid``, categories, debug annotations,
``flow_ids``/``terminating_flow_ids`` (and their legacy uint64 fields), interned data per
packet sequence (cleared by ``SEQ_INCREMENTAL_STATE_CLEARED``), ``TracePacketDefaults`` and
incremental clocks from ``ClockSnapshot``. Timestamps are ns. Debug annotations become args
with keys ``debug.<name>`` as in trace_processor. Other packets are skipped.

Field numbers are those of perfetto/protos/perfetto/trace/(trace_packet|track_event/*).proto.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pyarrow as pa

from layerscope.errors import TraceError
from layerscope.trace.chrome_reader import inflate_all, nest
from layerscope.trace.protobuf_wire import as_double, as_signed, decode_fields, next_field
from layerscope.trace.readers import MAX_PROTO_DEPTH
from layerscope.trace.tables import SCHEMAS, TraceTables

log = logging.getLogger(__name__)

# TracePacket
_TP_TIMESTAMP, _TP_CLOCK_SNAPSHOT, _TP_TRACK_EVENT, _TP_INTERNED = 8, 6, 11, 12
_TP_SEQ_ID, _TP_SEQ_FLAGS, _TP_CLOCK_ID, _TP_DEFAULTS, _TP_TRACK_DESC = 10, 13, 58, 59, 60
_TP_INCREMENTAL_CLEARED = 41
_SEQ_CLEARED = 1
# TrackEvent
_TE_CATEGORY_IIDS, _TE_DEBUG, _TE_TYPE, _TE_NAME_IID, _TE_TRACK_UUID = 3, 4, 9, 10, 11
_TE_CATEGORIES, _TE_NAME, _TE_COUNTER, _TE_DOUBLE_COUNTER = 22, 23, 30, 44
_TE_FLOW_OLD, _TE_TERM_OLD, _TE_FLOW, _TE_TERM = 36, 42, 47, 48
_BEGIN, _END, _INSTANT, _COUNTER = 1, 2, 3, 4
# InternedData
_ID_CATEGORIES, _ID_NAMES, _ID_DEBUG_NAMES, _ID_DEBUG_STRINGS = 1, 2, 3, 29


@dataclass
class _Sequence:
    categories: dict[int, str] = field(default_factory=dict)
    names: dict[int, str] = field(default_factory=dict)
    debug_names: dict[int, str] = field(default_factory=dict)
    debug_strings: dict[int, str] = field(default_factory=dict)
    clock_id: int | None = None
    default_track: int | None = None
    incremental: dict[int, int] = field(default_factory=dict)  # clock id -> last value
    #: decoded debug annotations by their bytes (shapes repeat across layers and steps)
    annotations: dict[bytes, tuple[str, Any]] = field(default_factory=dict)


_fields = decode_fields
iter_fields = decode_fields


class _TooDeep(Exception):
    """Debug annotations nested deeper than :data:`~layerscope.trace.readers.MAX_PROTO_DEPTH`:
    the whole trace is refused (not kept up to there, as a truncated one is)."""


def _decode_annotation(buf: bytes, seq: _Sequence, missing: list[int] | None = None,
                       depth: int = 1) -> tuple[str, Any]:
    """``(name, value)`` of a DebugAnnotation; iids not (yet) interned are added to ``missing``.
    ``depth``: its nesting (dict entries and array values are annotations inside one)."""
    if depth > MAX_PROTO_DEPTH:
        raise _TooDeep(f"debug annotations nested deeper than {MAX_PROTO_DEPTH} levels; at most "
                       f"{MAX_PROTO_DEPTH} are read (protobuf's own limit)")
    name = ""
    value: Any = None
    arr: list[Any] = []
    entries: dict[str, Any] = {}
    for f, wt, v in iter_fields(buf):
        if f == 1 and wt == 0:
            known = seq.debug_names.get(int(v))  # type: ignore[arg-type]
            if known is None and missing is not None:
                missing.append(int(v))  # type: ignore[arg-type]
            name = f"iid{int(v)}" if known is None else known
        elif f == 10 and isinstance(v, bytes):
            name = v.decode("utf-8", "replace")
        elif f == 2:
            value = bool(v)
        elif f == 3:
            value = int(v)  # type: ignore[arg-type]
        elif f == 4:
            value = as_signed(int(v))  # type: ignore[arg-type]
        elif f == 5 and wt == 1:
            value = as_double(int(v))  # type: ignore[arg-type]
        elif f in (6, 9) and isinstance(v, bytes):
            value = v.decode("utf-8", "replace")
        elif f == 17:
            value = seq.debug_strings.get(int(v))  # type: ignore[arg-type]
            if value is None:
                value = ""
                if missing is not None:
                    missing.append(int(v))  # type: ignore[arg-type]
        elif f == 7:
            value = hex(int(v))  # type: ignore[arg-type]
        elif f == 12 and isinstance(v, bytes):
            arr.append(_decode_annotation(v, seq, missing, depth + 1)[1])
            value = arr
        elif f == 11 and isinstance(v, bytes):
            key, item = _decode_annotation(v, seq, missing, depth + 1)
            entries[key] = item
            value = entries
    return name, value


def read_perfetto(path: str | os.PathLike[str]) -> TraceTables:
    """Read a Perfetto protobuf trace (``Trace { repeated TracePacket packet = 1; }``)."""
    source = Path(path)
    try:
        data = source.read_bytes()
    except OSError as exc:
        raise TraceError(f"cannot open trace {str(source)!r}: {exc.strerror}") from None
    warnings: list[str] = []
    if data[:2] == b"\x1f\x8b":
        data = inflate_all(source, data, warnings)
        if not data and warnings:
            raise TraceError(f"{str(source)!r}: {warnings[0].split(';')[0]}, and no trace before the damage")
    if not data:
        raise TraceError(f"{str(source)!r} is empty: a Perfetto trace holds at least one packet")
    reader = _Reader(warnings)
    pos, end = 0, len(data)
    try:
        while pos < end:
            # packets one at a time, so a damaged packet keeps those before it
            f, wt, v, pos = next_field(data, pos, end)
            if f == 1 and wt == 2 and isinstance(v, bytes):
                reader.packet(v)
            else:
                raise TraceError(f"{str(source)!r} is not a Perfetto trace (top-level field {f}, "
                                 f"wire type {wt}; expected TracePacket = 1)")
    except _TooDeep as exc:
        raise TraceError(f"{str(source)!r}: {exc}") from None
    except TraceError as exc:
        if reader.packets == 0:
            raise TraceError(f"{str(source)!r}: not a readable Perfetto trace: {exc}") from None
        warnings.append(f"trace is truncated or corrupt after {reader.packets} packets ({exc}); "
                        "kept what came before")
    except (UnicodeDecodeError, ValueError, IndexError) as exc:
        raise TraceError(f"{str(source)!r}: malformed Perfetto trace: {exc}") from None
    tables = reader.tables()
    for message in warnings:
        log.warning("%s: %s", source, message)
    return TraceTables.from_tables(tables, {"source": str(source), "format": "perfetto"}, warnings)


class _Reader:
    def __init__(self, warnings: list[str]) -> None:
        self.warnings = warnings
        self.packets = 0
        self.seqs: dict[int, _Sequence] = {}
        self.descs: dict[int, dict[str, Any]] = {}
        self.slices: list[tuple[int, int, int, str | None, str | None, str | None]] = []
        self.open: dict[int, list[int]] = {}
        self.counters: list[tuple[int, int, float]] = []
        self.flow_refs: list[tuple[int, int, bool]] = []  # (flow id, slice index, terminating)

    # ---------------------------------------------------------------- packets
    def packet(self, buf: bytes) -> None:
        fields = _fields(buf)
        self.packets += 1
        seq_id = 0
        flags = 0
        for f, _, v in fields:
            if f == _TP_SEQ_ID:
                seq_id = int(v)  # type: ignore[arg-type]
            elif f == _TP_SEQ_FLAGS:
                flags = int(v)  # type: ignore[arg-type]
            elif f == _TP_INCREMENTAL_CLEARED and v:
                flags |= _SEQ_CLEARED
        if flags & _SEQ_CLEARED or seq_id not in self.seqs:
            old = self.seqs.get(seq_id)
            seq = self.seqs[seq_id] = _Sequence()
            if old is not None:
                seq.clock_id, seq.default_track, seq.incremental = old.clock_id, old.default_track, old.incremental
        seq = self.seqs[seq_id]
        ts_raw: int | None = None
        clock: int | None = None
        event: bytes | None = None
        for f, _, v in fields:
            if f == _TP_TIMESTAMP:
                ts_raw = int(v)  # type: ignore[arg-type]
            elif f == _TP_CLOCK_ID:
                clock = int(v)  # type: ignore[arg-type]
            elif f == _TP_CLOCK_SNAPSHOT and isinstance(v, bytes):
                self._clocks(v, seq)
            elif f == _TP_DEFAULTS and isinstance(v, bytes):
                self._defaults(v, seq)
            elif f == _TP_INTERNED and isinstance(v, bytes):
                self._interned(v, seq)
            elif f == _TP_TRACK_DESC and isinstance(v, bytes):
                self._descriptor(v)
            elif f == _TP_TRACK_EVENT and isinstance(v, bytes):
                event = v
        if event is None:
            return
        clock = clock if clock is not None else seq.clock_id
        ts = ts_raw or 0
        if clock is not None and clock in seq.incremental:
            ts = seq.incremental[clock] + ts
            seq.incremental[clock] = ts
        self._event(event, ts, seq)

    def _clocks(self, buf: bytes, seq: _Sequence) -> None:
        for f, _, v in iter_fields(buf):
            if f == 1 and isinstance(v, bytes):
                cid = ts = 0
                incremental = False
                for g, _, w in iter_fields(v):
                    if g == 1:
                        cid = int(w)  # type: ignore[arg-type]
                    elif g == 2:
                        ts = int(w)  # type: ignore[arg-type]
                    elif g == 3:
                        incremental = bool(w)
                if incremental:
                    seq.incremental[cid] = ts

    def _defaults(self, buf: bytes, seq: _Sequence) -> None:
        for f, _, v in iter_fields(buf):
            if f == 58:
                seq.clock_id = int(v)  # type: ignore[arg-type]
            elif f == 11 and isinstance(v, bytes):
                for g, _, w in iter_fields(v):
                    if g == 11:
                        seq.default_track = int(w)  # type: ignore[arg-type]

    def _interned(self, buf: bytes, seq: _Sequence) -> None:
        targets = {_ID_CATEGORIES: seq.categories, _ID_NAMES: seq.names,
                   _ID_DEBUG_NAMES: seq.debug_names, _ID_DEBUG_STRINGS: seq.debug_strings}
        for f, _, v in iter_fields(buf):
            target = targets.get(f)
            if target is None or not isinstance(v, bytes):
                continue
            iid, name = 0, ""
            for g, _, w in iter_fields(v):
                if g == 1:
                    iid = int(w)  # type: ignore[arg-type]
                elif g == 2 and isinstance(w, bytes):
                    name = w.decode("utf-8", "replace")
            target[iid] = name

    def _descriptor(self, buf: bytes) -> None:
        desc: dict[str, Any] = {}
        for f, _, v in iter_fields(buf):
            if f == 1:
                desc["uuid"] = int(v)  # type: ignore[arg-type]
            elif f in (2, 10) and isinstance(v, bytes):
                desc["name"] = v.decode("utf-8", "replace")
            elif f == 5:
                desc["parent"] = int(v)  # type: ignore[arg-type]
            elif f == 3 and isinstance(v, bytes):
                for g, _, w in iter_fields(v):
                    if g == 1:
                        desc["pid"] = as_signed(int(w))  # type: ignore[arg-type]
                    elif g == 6 and isinstance(w, bytes):
                        desc["process_name"] = w.decode("utf-8", "replace")
            elif f == 4 and isinstance(v, bytes):
                for g, _, w in iter_fields(v):
                    if g == 1:
                        desc["pid"] = as_signed(int(w))  # type: ignore[arg-type]
                    elif g == 2:
                        desc["tid"] = as_signed(int(w))  # type: ignore[arg-type]
                    elif g == 5 and isinstance(w, bytes):
                        desc["thread_name"] = w.decode("utf-8", "replace")
            elif f == 8:
                desc["counter"] = True
                if isinstance(v, bytes):
                    for g, _, w in iter_fields(v):
                        if g == 3:
                            desc["unit"] = {1: "ns", 2: "count", 3: "bytes"}.get(int(w))  # type: ignore[arg-type]
                        elif g == 6 and isinstance(w, bytes):
                            desc["unit"] = w.decode("utf-8", "replace")
        if "uuid" in desc:
            self.descs.setdefault(desc["uuid"], {}).update(desc)

    def _event(self, buf: bytes, ts: int, seq: _Sequence) -> None:
        kind = 0
        track = seq.default_track
        name: str | None = None
        cats: list[str] = []
        debug: dict[str, Any] = {}
        value: float | None = None
        flows: list[tuple[int, bool]] = []
        annotations = seq.annotations
        # most frequent first: a slice carries many debug annotations
        for f, wt, v in iter_fields(buf):
            if f == _TE_DEBUG and wt == 2:
                decoded = annotations.get(v)  # type: ignore[arg-type]
                if decoded is None:
                    missing: list[int] = []
                    decoded = _decode_annotation(v, seq, missing)  # type: ignore[arg-type]
                    # trace_processor's key is debug.<name> with the name's dots made '_' (a dot
                    # separates nested keys): 'attr.activation' -> debug.attr_activation
                    decoded = (decoded[0].replace(".", "_"), decoded[1])
                    if not missing:  # an iid interned later must not stay unresolved
                        annotations[v] = decoded  # type: ignore[index]
                debug[decoded[0]] = decoded[1]
            elif wt == 0 and f == _TE_TYPE:
                kind = v  # type: ignore[assignment]
            elif wt == 0 and f == _TE_TRACK_UUID:
                track = v  # type: ignore[assignment]
            elif wt == 0 and f == _TE_NAME_IID:
                name = seq.names.get(v, name)  # type: ignore[arg-type]
            elif wt == 0 and f == _TE_COUNTER:
                value = float(as_signed(v))  # type: ignore[arg-type]
            elif f == _TE_DOUBLE_COUNTER and wt == 1:
                value = as_double(v)  # type: ignore[arg-type]
            elif f == _TE_NAME and wt == 2:
                name = v.decode("utf-8", "replace")  # type: ignore[union-attr]
            elif f == _TE_CATEGORY_IIDS:
                cats.append(seq.categories.get(int(v), ""))  # type: ignore[arg-type]
            elif f == _TE_CATEGORIES and wt == 2:
                cats.append(v.decode("utf-8", "replace"))  # type: ignore[union-attr]
            elif f in (_TE_FLOW, _TE_FLOW_OLD):
                flows.append((int(v), False))  # type: ignore[arg-type]
            elif f in (_TE_TERM, _TE_TERM_OLD):
                flows.append((int(v), True))  # type: ignore[arg-type]
        if track is None:
            track = 0
        if kind == _COUNTER:
            if value is not None:
                self.counters.append((ts, track, value))
            return
        if kind == _END:
            stack = self.open.get(track)
            if stack:
                i = stack.pop()
                t0, _, tr, nm, cat, args = self.slices[i]
                self.slices[i] = (t0, ts - t0, tr, nm, cat, args)
                self.flow_refs.extend((fid, i, term) for fid, term in flows)
            return
        if kind not in (_BEGIN, _INSTANT):
            return
        args = orjson.dumps({"debug": debug}).decode() if debug else None
        index = len(self.slices)
        self.slices.append((ts, 0 if kind == _INSTANT else -1, track, name,
                            ",".join(cats) if cats else None, args))
        if kind == _BEGIN:
            self.open.setdefault(track, []).append(index)
        for fid, term in flows:
            self.flow_refs.append((fid, index, term))

    # ---------------------------------------------------------------- tables
    def tables(self) -> dict[str, pa.Table]:
        procs: dict[int, int] = {}
        proc_rows: list[dict[str, Any]] = [{"upid": 0, "pid": 0, "name": None, "sort_index": None,
                                            "labels": None}]
        threads: dict[tuple[int, int], int] = {}
        thread_rows: list[dict[str, Any]] = [{"utid": 0, "tid": 0, "name": None, "upid": 0,
                                              "sort_index": None}]

        def process(pid: int, name: str | None = None) -> int:
            if pid not in procs:
                procs[pid] = len(proc_rows)
                proc_rows.append({"upid": procs[pid], "pid": pid, "name": None, "sort_index": None,
                                  "labels": None})
            if name is not None:
                proc_rows[procs[pid]]["name"] = name
            return procs[pid]

        def thread(pid: int, tid: int, name: str | None = None) -> int:
            upid = process(pid)
            if (pid, tid) not in threads:
                threads[(pid, tid)] = len(thread_rows)
                thread_rows.append({"utid": threads[(pid, tid)], "tid": tid, "name": None, "upid": upid,
                                    "sort_index": None})
            if name is not None:
                thread_rows[threads[(pid, tid)]]["name"] = name
            return threads[(pid, tid)]

        used = {s[2] for s in self.slices} | {c[1] for c in self.counters}
        track_ids: dict[int, int] = {}
        track_rows: list[dict[str, Any]] = []
        for uuid in sorted(set(self.descs) | used):
            d = self.descs.get(uuid, {})
            row: dict[str, Any] = {"id": len(track_rows), "name": d.get("name"), "type": "global",
                                   "utid": None, "upid": None, "parent_id": None, "unit": d.get("unit")}
            if "tid" in d:
                row["type"] = "thread"
                row["utid"] = thread(d.get("pid", 0), d["tid"], d.get("thread_name"))
                row["upid"] = thread_rows[row["utid"]]["upid"]
            elif d.get("counter"):
                row["type"] = "counter"
            elif "pid" in d:
                row["type"] = "process"
                row["upid"] = process(d["pid"], d.get("process_name"))
            elif "parent" in d:
                row["type"] = "async"
            track_ids[uuid] = row["id"]
            track_rows.append(row)
        for uuid, row in zip(track_ids, track_rows, strict=True):
            parent = self.descs.get(uuid, {}).get("parent")
            if parent in track_ids:
                row["parent_id"] = track_ids[parent]
                pdesc = self.descs.get(parent, {})
                if row["upid"] is None and "pid" in pdesc and "tid" not in pdesc:
                    row["upid"] = process(pdesc["pid"], pdesc.get("process_name"))

        unfinished = sum(1 for s in self.slices if s[1] < 0)
        if unfinished:
            self.warnings.append(f"{unfinished} slices never ended (dur = -1)")
        n = len(self.slices)
        ts = np.array([s[0] for s in self.slices], dtype=np.int64)
        dur = np.array([s[1] for s in self.slices], dtype=np.int64)
        track = np.array([track_ids[s[2]] for s in self.slices], dtype=np.int64)
        order = np.lexsort((np.arange(n), -np.where(dur < 0, np.iinfo(np.int64).max, dur), ts))
        rank = np.empty(n, dtype=np.int64)
        rank[order] = np.arange(n)
        depth, parent = nest(track, ts, dur)
        parent_ids = np.where(parent >= 0, rank[np.maximum(parent, 0)], -1)
        args = [s[5] for s in self.slices]
        has_args = np.array([a is not None for a in args], dtype=bool)
        slice_table = pa.table({
            "id": rank, "ts": ts, "dur": dur, "track_id": track,
            "category": pa.array([s[4] for s in self.slices], pa.string()),
            "name": pa.array([s[3] for s in self.slices], pa.string()),
            "depth": depth, "parent_id": pa.array(parent_ids, mask=parent_ids < 0),
            "arg_set_id": pa.array(rank, mask=~has_args),
            "thread_ts": pa.nulls(n, pa.int64()), "thread_dur": pa.nulls(n, pa.int64()),
        }).take(pa.array(order))
        arg_sets = pa.table({"arg_set_id": rank, "json": pa.array(args, pa.string())}).filter(
            pa.array(has_args)).sort_by("arg_set_id")

        flows_out: list[int] = []
        flows_in: list[int] = []
        last: dict[int, int] = {}
        for fid, index, term in sorted(self.flow_refs, key=lambda r: (ts[r[1]], r[1])):
            if fid in last:
                flows_out.append(int(rank[last[fid]]))
                flows_in.append(int(rank[index]))
            if term:
                last.pop(fid, None)
            else:
                last[fid] = index
        m = len(flows_out)
        flow = pa.table({"id": np.arange(m, dtype=np.int64), "slice_out": pa.array(flows_out, pa.int64()),
                         "slice_in": pa.array(flows_in, pa.int64()), "trace_id": pa.nulls(m, pa.int64()),
                         "arg_set_id": pa.nulls(m, pa.int64())})
        c = len(self.counters)
        counter = pa.table({
            "id": np.arange(c, dtype=np.int64),
            "ts": pa.array([x[0] for x in self.counters], pa.int64()),
            "track_id": pa.array([track_ids[x[1]] for x in self.counters], pa.int64()),
            "value": pa.array([x[2] for x in self.counters], pa.float64()),
            "arg_set_id": pa.nulls(c, pa.int64()),
        })
        return {
            "process": pa.Table.from_pylist(proc_rows, schema=SCHEMAS["process"]),
            "thread": pa.Table.from_pylist(thread_rows, schema=SCHEMAS["thread"]),
            "track": pa.Table.from_pylist(track_rows, schema=SCHEMAS["track"]),
            "slice": slice_table, "counter": counter, "flow": flow, "arg_sets": arg_sets,
        }
