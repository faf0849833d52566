"""Native Perfetto protobuf (``.pftrace``) for a schedule, hand-encoded (no protobuf dependency).

A ``Trace`` is a stream of ``TracePacket``s (field 1 of Trace, so each packet is written as
``key(1, LEN) + length + bytes`` and the file can be streamed). Field numbers are those of
perfetto's ``protos/perfetto/trace/trace_packet.proto``, ``track_event/track_event.proto``,
``track_event/track_descriptor.proto``, ``track_event/debug_annotation.proto``,
``track_event/counter_descriptor.proto`` and ``interned_data/interned_data.proto``.

Layout: a process track (the chip, pid :func:`~layerscope.trace.writers.sim_pid` of the metadata's
device index: 1 for device 0), one thread track per engine (``engine k``, tid ``k + 1``),
counter tracks (memory bandwidth in use in GB/s, engines busy, and where the metadata has op energies the
chip's power in W: :func:`~layerscope.trace.writers.power_counter`). Each op is a
TYPE_SLICE_BEGIN/TYPE_SLICE_END pair on its engine's track with ``name``, an interned category
(the op kind), debug annotations (interned names; the template args of the op plus its layer, its module
where that is not the op's own name, and its dependency names; the engine is the track), ``flow_ids`` for the
edges leaving it and ``terminating_flow_ids`` for the edges entering it. Timestamps are nanoseconds. All
packets are on one sequence (``trusted_packet_sequence_id`` 1) whose first packet clears the incremental state; interned
strings are emitted in the packet that first uses them. Events are written in timestamp order
(ends before begins at the same instant), so the file needs no re-sorting.

Every byte piece is computed up front (NumPy and Python); one loop then joins them into a packet per event:
in C (``_perfetto_packets.c``, an optional extension ``setup.py`` builds) or, where it is not built or
``LAYERSCOPE_TRACE_NATIVE=0``, in Python (:func:`_write_events_python`, the reference the C loop matches byte
for byte: tests/trace/test_perfetto_native.py).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import IO, TYPE_CHECKING, Any, NamedTuple

import numpy as np

from layerscope.lazy import native_extension
from layerscope.trace.chrome_writer import process_title
from layerscope.trace.protobuf_wire import SMALL_VARINTS, f_bytes, f_double, f_string, f_varint, key, varint
from layerscope.trace.writers import (
    BANDWIDTH_COUNTER,
    BANDWIDTH_UNIT,
    ENGINES_COUNTER,
    POWER_COUNTER,
    POWER_UNIT,
    TID_BASE,
    TraceMetadata,
    power_counter,
    sim_pid,
)

try:
    from layerscope.trace import _perfetto_packets  # the C event loop (absent where setup.py could not build it)
except ImportError:  # pragma: no cover - installs without a compiler
    _perfetto_packets = None  # type: ignore[assignment]

if TYPE_CHECKING:
    from layerscope.schedule.core import Schedule

__all__ = ["write_perfetto_protobuf"]

# Trace
TRACE_PACKET = 1
# TracePacket
TP_TIMESTAMP = 8
TP_SEQUENCE_ID = 10
TP_TRACK_EVENT = 11
TP_INTERNED_DATA = 12
TP_SEQUENCE_FLAGS = 13
TP_TRACK_DESCRIPTOR = 60
TP_CLOCK_SNAPSHOT = 6
TP_TIMESTAMP_CLOCK_ID = 58
TP_DEFAULTS = 59  # TracePacketDefaults
TPD_TIMESTAMP_CLOCK_ID = 58
# ClockSnapshot { clocks = 1 }; Clock { clock_id = 1, timestamp = 2, is_incremental = 3 }
CS_CLOCKS = 1
CLK_ID, CLK_TIMESTAMP, CLK_IS_INCREMENTAL = 1, 2, 3
BUILTIN_CLOCK_BOOTTIME = 6
INCREMENTAL_CLOCK_ID = 64  # first sequence-scoped (user-defined) clock id
SEQ_INCREMENTAL_STATE_CLEARED = 1
SEQ_NEEDS_INCREMENTAL_STATE = 2
# TrackDescriptor
TD_UUID, TD_NAME, TD_PROCESS, TD_THREAD, TD_PARENT_UUID, TD_COUNTER = 1, 2, 3, 4, 5, 8
# ProcessDescriptor / ThreadDescriptor
PD_PID, PD_PROCESS_NAME = 1, 6
THD_PID, THD_TID, THD_THREAD_NAME = 1, 2, 5
# CounterDescriptor
CD_UNIT = 3
UNIT_COUNT = 2
# TrackEvent
TE_CATEGORY_IIDS = 3
TE_DEBUG_ANNOTATIONS = 4
TE_TYPE = 9
TE_TRACK_UUID = 11
TE_NAME = 23
TE_COUNTER_VALUE = 30
TE_DOUBLE_COUNTER_VALUE = 44
TE_FLOW_IDS = 47
TE_TERMINATING_FLOW_IDS = 48
TYPE_SLICE_BEGIN, TYPE_SLICE_END, TYPE_COUNTER = 1, 2, 4
# DebugAnnotation
DA_NAME_IID, DA_BOOL, DA_INT, DA_DOUBLE, DA_STRING, DA_ARRAY, DA_STRING_IID = 1, 2, 4, 5, 6, 12, 17
# InternedData: EventCategory / DebugAnnotationName {iid = 1, name = 2}
ID_EVENT_CATEGORIES = 1
ID_DEBUG_ANNOTATION_NAMES = 3
ID_DEBUG_ANNOTATION_STRING_VALUES = 29  # InternedString {iid = 1, str = 2}

SEQUENCE_ID = 1
PROCESS_UUID = 1
THREAD_UUID_BASE = 100
BANDWIDTH_UUID = 10
ENGINES_UUID = 11
POWER_UUID = 12

_PACKET_KEY = key(TRACE_PACKET, 2)
_SEQ = f_varint(TP_SEQUENCE_ID, SEQUENCE_ID)
_NEEDS = f_varint(TP_SEQUENCE_FLAGS, SEQ_NEEDS_INCREMENTAL_STATE)
_TS_KEY = key(TP_TIMESTAMP, 0)
_TE_KEY = key(TP_TRACK_EVENT, 2)
_FLOW_KEY = key(TE_FLOW_IDS, 1)
_TFLOW_KEY = key(TE_TERMINATING_FLOW_IDS, 1)
_STRING_FIELD = key(2, 2)


def _packet(body: bytes) -> bytes:
    return _PACKET_KEY + varint(len(body)) + body


class _Interner:
    """Assigns iids (from 1) to strings of one interned-data table; collects the new ones."""

    def __init__(self, field: int, first: int = 1) -> None:
        self.field = field
        self.first = first
        self.ids: dict[str, int] = {}
        self.pending: list[bytes] = []

    def iid(self, s: str) -> int:
        i = self.ids.get(s)
        if i is None:
            i = self.ids[s] = len(self.ids) + self.first
            self.pending.append(f_bytes(self.field, f_varint(1, i) + f_string(2, s)))
        return i

    def take(self) -> bytes:
        out = b"".join(self.pending)
        self.pending.clear()
        return out


def _annotation(name_iid: int, value: Any, strings: _Interner) -> bytes:
    if isinstance(value, bool):
        body = f_varint(DA_BOOL, int(value))
    elif isinstance(value, (int, np.integer)):
        body = f_varint(DA_INT, int(value))
    elif isinstance(value, (float, np.floating)):
        v = float(value)
        body = f_double(DA_DOUBLE, v) if math.isfinite(v) else f_string(DA_STRING, str(v))
    else:
        body = f_varint(DA_STRING_IID, strings.iid(str(value)))
    return f_bytes(TE_DEBUG_ANNOTATIONS, f_varint(DA_NAME_IID, name_iid) + body)


def _varint_rows(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Varints of many non-negative integers at once: row ``i`` of an ``(n, 10)`` uint8 array holds
    ``varint(values[i])`` in its first ``lengths[i]`` bytes; returns the rows and the lengths."""
    v = np.asarray(values, dtype=np.uint64)
    n = len(v)
    nb = np.ones(n, dtype=np.int64)
    for k in range(1, 10):
        nb += (v >> np.uint64(7 * k)) != 0
    arr = np.empty((n, 10), dtype=np.uint8)
    for k in range(10):
        group = ((v >> np.uint64(7 * k)) & np.uint64(0x7F)).astype(np.uint8)
        arr[:, k] = group | np.where(k < nb - 1, 0x80, 0).astype(np.uint8)
    return arr, nb


def _join_rows(rows: np.ndarray, lengths: np.ndarray) -> tuple[bytes, np.ndarray]:
    """The first ``lengths[i]`` bytes of each row of a uint8 array, concatenated, and the offsets (``n + 1``)."""
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return rows[np.arange(rows.shape[1])[None, :] < lengths[:, None]].tobytes(), offsets


def encode_varints(values: np.ndarray) -> tuple[bytes, list[int]]:
    """Varints of many non-negative integers at once: the concatenation and the offsets."""
    blob, offsets = _join_rows(*_varint_rows(values))
    return blob, offsets.tolist()


class _VarintTable:
    """``table[x]`` is ``varint(x)``: a list lookup below 2**14, computed above."""

    __slots__ = ()

    def __getitem__(self, x: int) -> bytes:
        return SMALL_VARINTS[x] if x < 65536 else varint(x)


def _array_elements(iids: np.ndarray) -> tuple[bytes, list[int]]:
    """``DebugAnnotation{string_value_iid}`` as array_values elements (field 12), one per iid,
    concatenated; returns the blob and the offsets of each element."""
    blob, off = encode_varints(iids)
    n = len(iids)
    lens = np.diff(np.asarray(off, dtype=np.int64))
    # element = key(12, LEN) len key(17, VARINT) varint(iid); key(17, 0) is 2 bytes: 0x88 0x01.
    width = 4 + 10
    arr = np.zeros((n, width), dtype=np.uint8)
    arr[:, 0] = (DA_ARRAY << 3) | 2
    arr[:, 1] = 2 + lens
    arr[:, 2] = 0x88
    arr[:, 3] = 0x01
    raw = np.frombuffer(blob, dtype=np.uint8)
    starts = np.asarray(off[:-1], dtype=np.int64)
    for j in range(10):
        sel = lens > j
        arr[sel, 4 + j] = raw[starts[sel] + j]
    total = 4 + lens
    mask = np.arange(width)[None, :] < total[:, None]
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(total, out=offsets[1:])
    return arr[mask].tobytes(), offsets.tolist()


def _fixed64_records(field_key: bytes, ids: np.ndarray) -> bytes:
    """``key + fixed64`` for each id, concatenated (each record ``len(field_key) + 8`` bytes)."""
    rec = np.zeros(len(ids), dtype=[("k", f"V{len(field_key)}"), ("v", "<u8")])
    rec["k"] = np.frombuffer(field_key, dtype=f"V{len(field_key)}")[0]
    rec["v"] = ids
    return rec.tobytes()


def write_perfetto_protobuf(schedule: Schedule, meta: TraceMetadata, out: IO[bytes]) -> None:
    """Stream the trace to a binary handle."""
    buf: list[bytes] = []
    write = out.write

    # Descriptors, on the packet that clears the sequence's incremental state.
    pid = sim_pid(meta.device)
    descs = [
        f_varint(TD_UUID, PROCESS_UUID)
        + f_bytes(TD_PROCESS, f_varint(PD_PID, pid) + f_string(PD_PROCESS_NAME, process_title(schedule, meta)))
    ]
    for k, ename in enumerate(schedule.engines.names):
        descs.append(
            f_varint(TD_UUID, THREAD_UUID_BASE + k) + f_varint(TD_PARENT_UUID, PROCESS_UUID)
            + f_bytes(TD_THREAD, f_varint(THD_PID, pid) + f_varint(THD_TID, k + TID_BASE)
                      + f_string(THD_THREAD_NAME, ename))
        )
    descs.append(f_varint(TD_UUID, BANDWIDTH_UUID) + f_varint(TD_PARENT_UUID, PROCESS_UUID)
                 + f_string(TD_NAME, f"{BANDWIDTH_COUNTER} {BANDWIDTH_UNIT}") + f_bytes(TD_COUNTER, b""))
    descs.append(f_varint(TD_UUID, ENGINES_UUID) + f_varint(TD_PARENT_UUID, PROCESS_UUID)
                 + f_string(TD_NAME, ENGINES_COUNTER) + f_bytes(TD_COUNTER, f_varint(CD_UNIT, UNIT_COUNT)))
    power = power_counter(meta, schedule.start_ns, schedule.end_ns)
    if power is not None:
        descs.append(f_varint(TD_UUID, POWER_UUID) + f_varint(TD_PARENT_UUID, PROCESS_UUID)
                     + f_string(TD_NAME, f"{POWER_COUNTER} {POWER_UNIT}") + f_bytes(TD_COUNTER, b""))
    # The first packet clears the incremental state and defines the sequence's incremental clock
    # (its timestamps are deltas from the previous packet's; clock 64 at 0 is BOOTTIME at 0).
    clocks = (f_bytes(CS_CLOCKS, f_varint(CLK_ID, INCREMENTAL_CLOCK_ID) + f_varint(CLK_TIMESTAMP, 0)
                      + f_varint(CLK_IS_INCREMENTAL, 1))
              + f_bytes(CS_CLOCKS, f_varint(CLK_ID, BUILTIN_CLOCK_BOOTTIME) + f_varint(CLK_TIMESTAMP, 0)))
    buf.append(_packet(f_varint(TP_TIMESTAMP, 0) + f_varint(TP_TIMESTAMP_CLOCK_ID, BUILTIN_CLOCK_BOOTTIME)
                       + _SEQ + f_varint(TP_SEQUENCE_FLAGS, SEQ_INCREMENTAL_STATE_CLEARED)
                       + f_bytes(TP_CLOCK_SNAPSHOT, clocks)
                       + f_bytes(TP_DEFAULTS, f_varint(TPD_TIMESTAMP_CLOCK_ID, INCREMENTAL_CLOCK_ID))))
    for d in descs:
        buf.append(_packet(_TS_KEY + varint(0) + _SEQ + _NEEDS + f_bytes(TP_TRACK_DESCRIPTOR, d)))

    cats = _Interner(ID_EVENT_CATEGORIES)
    anames = _Interner(ID_DEBUG_ANNOTATION_NAMES)
    iid_layer, iid_deps, iid_module = anames.iid("layer"), anames.iid("dependencies"), anames.iid("module")
    # String values: ids 1..K are the names of ops that are someone's dependency (interned at
    # that op's begin); other strings (template args) follow from K + 1.
    n = schedule.problem.n
    n_deps_of = np.bincount(schedule.problem.indices, minlength=n) if n else np.zeros(0, np.int64)
    has_out = n_deps_of > 0
    svals = _Interner(ID_DEBUG_ANNOTATION_STRING_VALUES, first=int(has_out.sum()) + 1)
    track_field = [f_varint(TE_TRACK_UUID, THREAD_UUID_BASE + k) for k in range(schedule.engines.count)]
    end_tail = [_TE_KEY + varint(len(ev)) + ev
                for ev in (f_varint(TE_TYPE, TYPE_SLICE_END) + tf for tf in track_field)]
    layer_ann: dict[int, bytes] = defaultdict(bytes)
    if meta.layer is not None:
        for v in np.unique(meta.layer).tolist():
            if v >= 0:
                layer_ann[v] = _annotation(iid_layer, v, svals)

    p = schedule.problem
    n = p.n
    # The module annotation of an op whose module is not its own name; its strings interned up front.
    module = meta.module
    module_ann: dict[str, bytes] = {"": b""}
    if module is not None:
        for name in sorted(set(module) - {""}):
            module_ann[name] = _annotation(iid_module, name, svals)
    # Flow ids: edge k of the dependency CSR has id k + 1. Out-edges grouped by producer.
    out_order = np.argsort(p.indices, kind="stable")
    out_ptr = np.zeros(n + 1, dtype=np.int64)
    if len(p.indices):
        np.cumsum(np.bincount(p.indices, minlength=n), out=out_ptr[1:])
    out_blob = _fixed64_records(_FLOW_KEY, out_order + 1)
    in_blob = _fixed64_records(_TFLOW_KEY, np.arange(1, len(p.indices) + 1))
    out_ptr_b = out_ptr * (len(_FLOW_KEY) + 8)
    in_ptr_b = p.indptr.astype(np.int64) * (len(_TFLOW_KEY) + 8)
    # Ops that are someone's dependency get a string-value iid: their name, interned at their begin.
    str_iid = np.zeros(n, dtype=np.int64)
    str_iid[has_out] = np.arange(1, int(has_out.sum()) + 1)
    # Dependency array elements: DebugAnnotation{string_value_iid}, one per edge.
    elem_blob, elem_off = _array_elements(str_iid[p.indices])
    deps_key = f_varint(DA_NAME_IID, iid_deps)

    order, ts_all, is_end = _event_order(schedule)
    c_ts, c_blob, c_off = _counter_events(schedule, power)
    # One stream in time order: counter values first at an instant, then slice ends/begins.
    n_ev, n_c = len(order), len(c_ts)
    ts_m = np.concatenate([c_ts, ts_all])
    grp = np.concatenate([np.zeros(n_c, np.int8), np.ones(n_ev, np.int8)])
    seqno = np.concatenate([np.arange(n_c), np.arange(n_ev)])
    merged = np.lexsort((seqno, grp, ts_m))
    # Timestamps on the incremental clock: deltas from the previous packet (descriptors are at 0).
    ts_sorted = ts_m[merged]
    delta = np.diff(ts_sorted, prepend=0)
    keys = _Keys(
        packet=_PACKET_KEY, head=_TS_KEY, seq=_SEQ, seq_needs=_SEQ + _NEEDS, te=_TE_KEY,
        begin=f_varint(TE_TYPE, TYPE_SLICE_BEGIN), name=key(TE_NAME, 2), da=key(TE_DEBUG_ANNOTATIONS, 2),
        deps=deps_key, interned=key(TP_INTERNED_DATA, 2), svals=key(ID_DEBUG_ANNOTATION_STRING_VALUES, 2),
        iid=key(1, 0), str=_STRING_FIELD)
    # Template annotations, encoded once each (their strings interned in template order).
    tmpl_bytes = [f_varint(TE_CATEGORY_IIDS, cats.iid(str(items["kind"]))) + b"".join(
        _annotation(anames.iid(k), v, svals) for k, v in items.items() if k != "kind") for items in meta.templates]
    # Every category, annotation name and template string is known now: it rides on the first begin.
    first_interned = cats.take() + anames.take() + svals.take()
    write(b"".join(buf))

    native = _native_writer()
    if native is not None:
        if meta.layer is not None:
            layer_values, layer_index = np.unique(np.asarray(meta.layer, dtype=np.int64), return_inverse=True)
            layer_pieces = [layer_ann[v] for v in layer_values.tolist()]
            layer_arg: np.ndarray | None = np.ascontiguousarray(layer_index, dtype=np.int64)
        else:
            layer_pieces, layer_arg = [], None
        native.write_events(
            write, np.ascontiguousarray(merged, dtype=np.int64), n_c, np.ascontiguousarray(delta, dtype=np.int64),
            c_blob, c_off, np.ascontiguousarray(order, dtype=np.int64), np.ascontiguousarray(is_end, dtype=np.uint8),
            np.ascontiguousarray(schedule.engine, dtype=np.int64), meta.names,
            np.ascontiguousarray(meta.template, dtype=np.int64), tmpl_bytes, layer_arg, layer_pieces, module,
            module_ann, np.ascontiguousarray(p.indptr, dtype=np.int64), elem_blob,
            np.asarray(elem_off, dtype=np.int64), out_blob, out_ptr_b, in_blob, in_ptr_b, str_iid,
            first_interned, track_field, end_tail, tuple(keys))
        return
    _write_events_python(
        write, merged, n_c, delta, c_blob, c_off, order, is_end, schedule.engine, meta.names, meta.template, tmpl_bytes,
        meta.layer, layer_ann, module, module_ann, p.indptr, out_ptr, elem_blob, elem_off,
        out_blob, out_ptr_b, in_blob, in_ptr_b, str_iid, first_interned, track_field, end_tail, keys)


class _Keys(NamedTuple):
    """The wire pieces the event loop joins, in the order ``_perfetto_packets.c`` takes them."""

    packet: bytes
    head: bytes
    seq: bytes
    seq_needs: bytes
    te: bytes
    begin: bytes
    name: bytes
    da: bytes
    deps: bytes
    interned: bytes
    svals: bytes
    iid: bytes
    str: bytes


def _native_writer() -> Any | None:
    """The C event loop (``_perfetto_packets.c``), or None where setup.py could not build it or
    ``LAYERSCOPE_TRACE_NATIVE=0`` asks for the Python loop."""
    return native_extension(_perfetto_packets, "LAYERSCOPE_TRACE_NATIVE")


def _write_events_python(
    write: Callable[[bytes], Any], merged: np.ndarray, n_c: int, delta: np.ndarray, c_blob: bytes, c_off_a: np.ndarray,
    order_a: np.ndarray, is_end_a: np.ndarray, engine_a: np.ndarray, names: Sequence[str],
    template_a: np.ndarray, tmpl_bytes: list[bytes], layer_a: np.ndarray | None,
    layer_ann: dict[int, bytes], module: Sequence[str] | None, module_ann: dict[str, bytes],
    indptr_a: np.ndarray, out_ptr: np.ndarray, elem_blob: bytes, elem_off: list[int], out_blob: bytes,
    out_ptr_b: np.ndarray, in_blob: bytes, in_ptr_b: np.ndarray, str_iid: np.ndarray, first_interned: bytes,
    track_field: list[bytes], end_tail: list[bytes], keys: _Keys,
) -> None:
    """The event loop in Python (where the C loop is not built, or with ``LAYERSCOPE_TRACE_NATIVE=0``):
    one TracePacket per merged event, joined from the pieces; the reference the C loop must match."""
    buf: list[bytes] = []
    engine = engine_a.tolist()
    indptr = indptr_a.tolist()
    template = template_a.tolist()
    layer = layer_a.tolist() if layer_a is not None else None
    order = order_a.tolist()
    is_end = is_end_a.tolist()
    out_ptr_l = out_ptr_b.tolist()
    in_ptr_l = in_ptr_b.tolist()
    str_iid_l = str_iid.tolist()
    si_blob, si_off = encode_varints(str_iid)
    d_blob, d_off = encode_varints(delta)
    merged_l = merged.tolist()
    c_off = c_off_a.tolist()
    str_field = keys.str
    packet_key = keys.packet
    head = keys.head
    seq_needs = keys.seq_needs
    seq = keys.seq
    te_key = keys.te
    begin_type = keys.begin
    name_key = keys.name
    id_svals = keys.svals
    interned_key = keys.interned
    da_key = keys.da
    iid_key = keys.iid
    deps_key = keys.deps
    # Lengths of names, annotation arrays and packets: a list lookup when they surely stay below
    # 2**16 (names < 8 KiB, < 1000 edges per op, template annotations < 16 KiB), else computed.
    n = len(names)
    degree = np.diff(indptr_a) + np.diff(out_ptr) if n else np.zeros(1, np.int64)
    fast = (max((len(x) for x in names), default=0) < 2048 and int(degree.max(initial=0)) < 1000
            and max((len(b) for b in tmpl_bytes), default=0) < 16384)
    V: Any = SMALL_VARINTS if fast else _VarintTable()
    _v = V.__getitem__

    for m, code in enumerate(merged_l):
        vts = d_blob[d_off[m] : d_off[m + 1]]
        if code < n_c:
            ev = c_blob[c_off[code] : c_off[code + 1]]
            body = head + vts + seq + te_key + V[len(ev)] + ev
            buf.append(packet_key + V[len(body)] + body)
            continue
        k = code - n_c
        i = order[k]
        if is_end[k]:
            body = head + vts + seq + end_tail[engine[i]]
            buf.append(packet_key + V[len(body)] + body)
            continue
        tb = tmpl_bytes[template[i]]
        nm = names[i].encode()
        a, b = indptr[i], indptr[i + 1]
        if b > a:
            arr = deps_key + elem_blob[elem_off[a] : elem_off[b]]
            deps = da_key + V[len(arr)] + arr
        else:
            deps = b""
        ev = b"".join((
            begin_type, track_field[engine[i]], name_key, V[len(nm)], nm, tb,
            layer_ann[layer[i]] if layer is not None else b"",
            module_ann[module[i]] if module is not None else b"",
            deps,
            out_blob[out_ptr_l[i] : out_ptr_l[i + 1]], in_blob[in_ptr_l[i] : in_ptr_l[i + 1]],
        ))
        interned = b""
        if str_iid_l[i]:
            entry = b"".join((iid_key, si_blob[si_off[i] : si_off[i + 1]], str_field, V[len(nm)], nm))
            interned = id_svals + V[len(entry)] + entry
        if first_interned:
            interned = first_interned + interned
            first_interned = b""
        if interned:
            # Interned data can be long (all template strings ride on the first begin).
            body = b"".join((head, vts, seq_needs, interned_key, varint(len(interned)), interned,
                             te_key, _v(len(ev)), ev))
            buf.append(packet_key + varint(len(body)) + body)
        else:
            body = b"".join((head, vts, seq_needs, te_key, _v(len(ev)), ev))
            buf.append(packet_key + _v(len(body)) + body)
        if len(buf) >= 50_000:
            write(b"".join(buf))
            buf.clear()
    write(b"".join(buf))


def _event_order(schedule: Schedule) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Begin/end events sorted by time; at one instant ends of non-empty slices come first,
    then in op order each begin followed by its end if the slice is empty."""
    n = len(schedule.start_ns)
    start, end = schedule.start_ns, schedule.end_ns
    ops = np.arange(n, dtype=np.int64)
    ts = np.concatenate([start, end])
    zero = end == start
    rank = np.concatenate([np.ones(n, np.int8), np.where(zero, 1, 0).astype(np.int8)])
    sub = np.concatenate([2 * ops, 2 * ops + 1])
    order = np.lexsort((sub, rank, ts))
    op = np.concatenate([ops, ops])[order]
    return op, ts[order].astype(np.int64, copy=False), order >= n


def _doubles(values: np.ndarray) -> np.ndarray:
    """Each value as the 8 bytes of a little-endian double (``struct.pack("<d", v)``): an ``(n, 8)`` uint8 array."""
    return np.ascontiguousarray(values, dtype="<f8").view(np.uint8).reshape(-1, 8)


def _counter_events(schedule: Schedule, power: tuple[np.ndarray, np.ndarray] | None = None
                    ) -> tuple[np.ndarray, bytes, np.ndarray]:
    """Time (int64 ns) and encoded TrackEvent of every counter value, in time order (bandwidth, engines, then
    power): the events concatenated and the offsets of each (``n + 1``)."""
    busy_t, busy_v = schedule.engines_busy()
    bw_t = schedule.bandwidth_time_ns
    pw_t, pw_v = power if power is not None else (np.zeros(0, np.int64), np.zeros(0))
    ts = np.concatenate([bw_t, busy_t, pw_t]).astype(np.int64)
    nbw, nbusy, npw = len(bw_t), len(busy_t), len(pw_t)
    track = np.concatenate([np.zeros(nbw, np.int8), np.ones(nbusy, np.int8), np.full(npw, 2, np.int8)])
    order = np.lexsort((track, ts))
    bw_head = (f_varint(TE_TYPE, TYPE_COUNTER) + f_varint(TE_TRACK_UUID, BANDWIDTH_UUID)
               + key(TE_DOUBLE_COUNTER_VALUE, 1))
    busy_head = f_varint(TE_TYPE, TYPE_COUNTER) + f_varint(TE_TRACK_UUID, ENGINES_UUID) + key(TE_COUNTER_VALUE, 0)
    power_head = (f_varint(TE_TYPE, TYPE_COUNTER) + f_varint(TE_TRACK_UUID, POWER_UUID)
                  + key(TE_DOUBLE_COUNTER_VALUE, 1))
    # One row per value, head then payload (a little-endian double, or the busy count's varint), padded to
    # a common width; rows put in time order, then the padding masked out. A list of bytes objects per value
    # (2.1M at the 1M-op bench) took 0.54 s of the C-path write under cProfile; these array steps 0.11 s.
    busy_rows, busy_len = _varint_rows(np.asarray(busy_v, dtype=np.int64))
    width = max(len(bw_head), len(busy_head), len(power_head)) + 10
    rows = np.zeros((nbw + nbusy + npw, width), dtype=np.uint8)
    lens = np.empty(nbw + nbusy + npw, dtype=np.int64)
    for part, head, payload, payload_len in (
        (slice(0, nbw), bw_head, _doubles(schedule.bandwidth_bytes_per_s / 1e9), 8),
        (slice(nbw, nbw + nbusy), busy_head, busy_rows, busy_len),
        (slice(nbw + nbusy, nbw + nbusy + npw), power_head, _doubles(pw_v), 8),
    ):
        h = len(head)
        rows[part, :h] = np.frombuffer(head, dtype=np.uint8)
        rows[part, h : h + payload.shape[1]] = payload
        lens[part] = h + payload_len
    blob, offsets = _join_rows(rows[order], lens[order])
    return ts[order], blob, offsets
