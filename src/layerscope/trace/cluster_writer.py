"""A cluster timeline (:class:`~layerscope.schedule.cluster.ClusterTimeline`) as a trace: Chrome JSON or Perfetto
protobuf, chosen by the path's suffix as :func:`~layerscope.trace.writers.write_schedule_trace` chooses.

Layout: one process per GPU (pid :func:`~layerscope.trace.writers.sim_pid` of its rank, sort index the rank,
named ``GPU r (stage s, tp t, dp d)``); its threads are the compute engines (``engine k``) and the
communication lanes (``communication``, and ``communication 2`` … where transfers overlap on a GPU) and
``micro-batches`` (one slice per micro-batch its stage runs: the gaps are its share of the pipeline bubble), thread
ids ``pid·1000 + TID_BASE + track`` so no two GPUs share one (trace_processor keys threads by tid). Each op of
each micro-batch is a slice on its GPU's engine, a collective or a pipeline send on the communication lane,
with the op's args (shapes, FLOPs, bytes: :class:`~layerscope.trace.writers.TraceMetadata`) plus
``micro_batch``, ``stage``, ``step`` (multi-step graphs), ``peer`` (send, receive) and ``group`` (a collective's
GPUs); the next stage's receive of a send is a slice ``….pp_recv`` at the same instant. Flows: each send to
its receive (``send``), and within a collective's group each GPU's slice to the next GPU's (``collective``).
Counters per GPU: engines busy, memory bandwidth in use (GB/s), bytes sent on the interconnect (GB/s), and where
the metadata has op energies its power (W: each slice's dynamic joules over its duration plus idle power,
:func:`~layerscope.trace.writers.power_counter`; a receive's joules are its send's, on the sender).
"""

from __future__ import annotations

import dataclasses
import functools
import gzip as gzip_mod
import json
import os
import struct
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import numpy as np

from layerscope.errors import TraceError
from layerscope.registry import Registry
from layerscope.schedule.cluster import COLLECTIVE, RECV, SEND, ClusterTimeline, Counter
from layerscope.trace.protobuf_wire import f_bytes, f_double, f_string, f_varint, key, varint
from layerscope.trace.writers import (
    POWER_COUNTER,
    POWER_UNIT,
    TID_BASE,
    TraceMetadata,
    power_counter,
    sim_pid,
    trace_format,
)

__all__ = ["CLUSTER_WRITERS", "power_counters", "slice_names", "thread_id", "write_cluster_trace"]

_dumps = functools.partial(json.dumps, ensure_ascii=False, separators=(",", ":"))
_GZIP_LEVEL = 1
_FLOW_NAMES = {SEND: "send", COLLECTIVE: "collective"}


def thread_id(rank: int, track: int) -> int:
    """The tid of track ``track`` (engine k, or engines + lane) of GPU ``rank``."""
    return sim_pid(rank) * 1000 + TID_BASE + track


def slice_names(timeline: ClusterTimeline, meta: TraceMetadata) -> list[str]:
    """Each slice's name: its op's, a receive as ``….pp_recv``."""
    names = meta.names
    out = [names[i] for i in timeline.op.tolist()]
    for k in np.flatnonzero(timeline.cls == RECV).tolist():
        name = out[k]
        out[k] = name[: -len("pp_send")] + "pp_recv" if name.endswith("pp_send") else name + ".recv"
    return out


def power_counters(timeline: ClusterTimeline, meta: TraceMetadata) -> tuple[Counter, ...]:
    """Each GPU's power counter (``power W``) from its slices, from 0 to the makespan (idle before its stage's
    first micro-batch and after its last): every op slice's dynamic joules (the op's in ``meta``) over its
    duration, receives none; empty when ``meta`` has no op energies."""
    if meta.op_dynamic_j is None:
        return ()
    out = []
    name = f"{POWER_COUNTER} {POWER_UNIT}"
    for g in timeline.gpus:
        mine = (timeline.gpu == g.rank) & (timeline.cls != RECV)
        power = power_counter(meta, timeline.start_ns[mine], timeline.end_ns[mine], timeline.op[mine],
                              (0, timeline.makespan_ns))
        if power is not None:
            out.append(Counter(g.rank, name, *power))
    return tuple(out)


#: The track of each GPU that shows its micro-batches (one slice each, spanning its stage's work on it).
PIPELINE_TRACK = "micro-batches"
PIPELINE_CATEGORY = "pipeline"


def _track_names(timeline: ClusterTimeline) -> list[str]:
    return [*timeline.engines.names, *(timeline.lane_name(lane) for lane in range(timeline.lanes)), PIPELINE_TRACK]


def _item_slices(timeline: ClusterTimeline) -> list[tuple[int, int, int, str, list[tuple[str, Any]]]]:
    """Per GPU, per (pass, micro-batch) of its stage: ``(rank, start_ns, end_ns, name, args)`` on the
    :data:`PIPELINE_TRACK` (the gaps between them are the GPU's bubble)."""
    many = timeline.passes > 1
    out: list[tuple[int, int, int, str, list[tuple[str, Any]]]] = []
    for g in timeline.gpus:
        for k, j, a, b in zip(*(x.tolist() for x in timeline.items(g.stage)), strict=True):
            name = f"step {k} micro-batch {j}" if many else f"micro-batch {j}"
            args: list[tuple[str, Any]] = [("micro_batch", j), ("stage", g.stage)] + ([("step", k)] if many else [])
            out.append((g.rank, a, b, name, args))
    return out


def _slice_args(timeline: ClusterTimeline, meta: TraceMetadata) -> list[list[tuple[str, Any]]]:
    """Per slice, its args besides the op's template: layer, module, micro-batch, stage, step, peer, group."""
    stage_of = {g.rank: g.stage for g in timeline.gpus}
    layer = meta.layer.tolist() if meta.layer is not None else None
    module = meta.module
    out: list[list[tuple[str, Any]]] = []
    groups: dict[tuple[int, int], str] = {}
    many = timeline.passes > 1
    for op, g, mb, step, peer, grp, size in zip(
            timeline.op.tolist(), timeline.gpu.tolist(), timeline.micro_batch.tolist(), timeline.step.tolist(),
            timeline.peer.tolist(), timeline.group.tolist(), timeline.group_gpus.tolist(), strict=True):
        row: list[tuple[str, Any]] = []
        if layer is not None and layer[op] >= 0:
            row.append(("layer", layer[op]))
        if module is not None and module[op]:
            row.append(("module", module[op]))
        row += [("micro_batch", mb), ("stage", stage_of[g])]
        if many:
            row.append(("step", step))
        if peer >= 0:
            row.append(("peer", peer))
        if grp >= 0:
            text = groups.get((grp, size))
            if text is None:
                text = groups[grp, size] = ",".join(str(r) for r in range(grp, grp + size))
            row.append(("group", text))
        out.append(row)
    return out


def _flow_kind(timeline: ClusterTimeline) -> list[str]:
    return [_FLOW_NAMES[SEND if c == SEND else COLLECTIVE] for c in timeline.cls[timeline.flow_src].tolist()]


# ---------------------------------------------------------------------------------------------- Chrome JSON


def _us(ns: int) -> str:
    """Integer ns as exact µs with three decimals."""
    q, r = divmod(int(ns), 1000)
    return f"{q}.{r:03d}"


def _json_value(v: Any) -> str:
    if isinstance(v, float):
        return repr(round(v, 9)) if np.isfinite(v) else "null"
    return _dumps(v)


def write_cluster_json(timeline: ClusterTimeline, meta: TraceMetadata, handle: IO[bytes], *,
                       gzip: bool = False) -> None:
    """Stream ``timeline`` as Chrome Trace Event JSON to a binary handle (gzip with mtime 0 when ``gzip``)."""
    if gzip:
        with gzip_mod.GzipFile(filename="", mode="wb", fileobj=handle, mtime=0, compresslevel=_GZIP_LEVEL) as gz:
            _write_json(timeline, meta, gz)
    else:
        _write_json(timeline, meta, handle)


def _write_json(timeline: ClusterTimeline, meta: TraceMetadata, out: IO[bytes] | gzip_mod.GzipFile) -> None:
    events: list[str] = []
    tracks = _track_names(timeline)
    for g in timeline.gpus:
        pid = sim_pid(g.rank)
        events.append(_dumps({"ph": "M", "pid": pid, "tid": 0, "name": "process_name", "args": {"name": g.name}}))
        events.append(_dumps({"ph": "M", "pid": pid, "tid": 0, "name": "process_sort_index",
                              "args": {"sort_index": g.rank}}))
        for k, tname in enumerate(tracks):
            tid = thread_id(g.rank, k)
            events.append(_dumps({"ph": "M", "pid": pid, "tid": tid, "name": "thread_name", "args": {"name": tname}}))
            events.append(_dumps({"ph": "M", "pid": pid, "tid": tid, "name": "thread_sort_index",
                                  "args": {"sort_index": k}}))
    template_args = [",".join(f"{_dumps(k)}:{_json_value(v)}" for k, v in t.items() if k != "kind")
                     for t in meta.templates]
    cats = [_dumps(str(t["kind"])) for t in meta.templates]
    template = meta.template.tolist()
    names = slice_names(timeline, meta)
    extra = _slice_args(timeline, meta)
    gpu = timeline.gpu.tolist()
    track = timeline.track.tolist()
    start = timeline.start_ns.tolist()
    end = timeline.end_ns.tolist()
    op = timeline.op.tolist()
    cls = timeline.cls.tolist()
    comm_cat = _dumps("communication")
    for k in np.lexsort((timeline.track, timeline.gpu, timeline.start_ns)).tolist():
        t = template[op[k]]
        args = ",".join(x for x in (template_args[t], ",".join(f"{_dumps(a)}:{_json_value(v)}"
                                                               for a, v in extra[k])) if x)
        events.append(
            f'{{"ph":"X","pid":{sim_pid(gpu[k])},"tid":{thread_id(gpu[k], track[k])},"ts":{_us(start[k])},'
            f'"dur":{_us(end[k] - start[k])},"name":{_dumps(names[k])},'
            f'"cat":{comm_cat if cls[k] == RECV else cats[t]},"args":{{{args}}}}}')
    item_tid = len(tracks) - 1
    for rank, a, b, name, item_args in _item_slices(timeline):
        body = ",".join(f"{_dumps(key_)}:{_json_value(v)}" for key_, v in item_args)
        events.append(f'{{"ph":"X","pid":{sim_pid(rank)},"tid":{thread_id(rank, item_tid)},"ts":{_us(a)},'
                      f'"dur":{_us(b - a)},"name":{_dumps(name)},"cat":"{PIPELINE_CATEGORY}","args":{{{body}}}}}')
    # Flows (v1): "s" at the middle of the sender's slice, "f" bound to the enclosing slice at the receiver's.
    for f, (a, b, kind) in enumerate(zip(timeline.flow_src.tolist(), timeline.flow_dst.tolist(),
                                         _flow_kind(timeline), strict=True), 1):
        events.append(f'{{"ph":"s","pid":{sim_pid(gpu[a])},"tid":{thread_id(gpu[a], track[a])},'
                      f'"ts":{_us((start[a] + end[a]) // 2)},"name":"{kind}","cat":"communication","id":{f}}}')
        events.append(f'{{"ph":"f","bp":"e","pid":{sim_pid(gpu[b])},"tid":{thread_id(gpu[b], track[b])},'
                      f'"ts":{_us((start[b] + end[b]) // 2)},"name":"{kind}","cat":"communication","id":{f}}}')
    for c in timeline.counters:
        # trace_processor names a JSON counter track "<name> <arg>": the unit rides as the arg.
        name, unit = c.name.rsplit(" ", 1)
        head = f'{{"ph":"C","pid":{sim_pid(c.gpu)},"tid":0,"name":{_dumps(name)},"ts":'
        tail = f'"args":{{{_dumps(unit)}:'
        events += [f"{head}{_us(t)},{tail}{round(float(v), 6)!r}}}}}"
                   for t, v in zip(c.time_ns.tolist(), c.value.tolist(), strict=True)]
    other = {"generator": "layerscope", "gpus": len(timeline.gpus), "micro_batches": timeline.micro_batches,
             "policy": timeline.policy}
    out.write(f'{{"displayTimeUnit":"ns","otherData":{_dumps(other)},"traceEvents":[\n'.encode())
    for i in range(0, len(events), 20_000):
        chunk = ",\n".join(events[i : i + 20_000])
        out.write(((",\n" if i else "") + chunk).encode("utf-8"))
    out.write(b"\n]}\n")


# ---------------------------------------------------------------------------------------------- Perfetto protobuf

# Field numbers of perfetto's trace_packet.proto, track_event.proto, track_descriptor.proto, debug_annotation.proto.
_TRACE_PACKET = 1
_TP_TIMESTAMP, _TP_SEQUENCE_ID, _TP_TRACK_EVENT, _TP_INTERNED_DATA, _TP_SEQUENCE_FLAGS = 8, 10, 11, 12, 13
_TP_TRACK_DESCRIPTOR = 60
_SEQ_INCREMENTAL_STATE_CLEARED, _SEQ_NEEDS_INCREMENTAL_STATE = 1, 2
# InternedData: event_categories, event_names, debug_annotation_names, debug_annotation_string_values
_ID_CATEGORIES, _ID_NAMES, _ID_ANNOTATION_NAMES, _ID_STRING_VALUES = 1, 2, 3, 29
_TD_UUID, _TD_NAME, _TD_PROCESS, _TD_THREAD, _TD_PARENT_UUID, _TD_COUNTER = 1, 2, 3, 4, 5, 8
_PD_PID, _PD_PROCESS_NAME = 1, 6
_THD_PID, _THD_TID, _THD_THREAD_NAME = 1, 2, 5
_TE_CATEGORY_IIDS, _TE_DEBUG_ANNOTATIONS, _TE_TYPE, _TE_NAME_IID, _TE_TRACK_UUID = 3, 4, 9, 10, 11
_TE_DOUBLE_COUNTER_VALUE, _TE_FLOW_IDS, _TE_TERMINATING_FLOW_IDS = 44, 47, 48
_TYPE_SLICE_BEGIN, _TYPE_SLICE_END, _TYPE_COUNTER = 1, 2, 4
_DA_NAME_IID, _DA_BOOL, _DA_INT, _DA_DOUBLE, _DA_STRING, _DA_STRING_IID = 1, 2, 4, 5, 6, 17
_SEQUENCE_ID = 1
_SEQ = f_varint(_TP_SEQUENCE_ID, _SEQUENCE_ID)
_pack_q = struct.Struct("<Q").pack


def _process_uuid(rank: int) -> int:
    return (rank + 1) << 16


class _Interned:
    """The sequence's interned strings: each table's iids from 1, the entries not yet emitted pending (they ride
    on the packet that first uses them)."""

    def __init__(self) -> None:
        self.ids: dict[tuple[int, str], int] = {}
        self.count: dict[int, int] = {}
        self.pending: dict[int, list[bytes]] = {}

    def iid(self, table: int, text: str) -> int:
        i = self.ids.get((table, text))
        if i is None:
            i = self.ids[table, text] = self.count[table] = self.count.get(table, 0) + 1
            self.pending.setdefault(table, []).append(f_bytes(table, f_varint(1, i) + f_string(2, text)))
        return i

    def take(self) -> bytes:
        out = b"".join(b"".join(entries) for _, entries in sorted(self.pending.items()))
        self.pending.clear()
        return out

    def annotation(self, name: str, value: Any) -> bytes:
        if isinstance(value, bool):
            body = f_varint(_DA_BOOL, int(value))
        elif isinstance(value, (int, np.integer)):
            body = f_varint(_DA_INT, int(value))
        elif isinstance(value, (float, np.floating)):
            body = f_double(_DA_DOUBLE, float(value)) if np.isfinite(value) else f_string(_DA_STRING, str(value))
        else:
            body = f_varint(_DA_STRING_IID, self.iid(_ID_STRING_VALUES, str(value)))
        return f_bytes(_TE_DEBUG_ANNOTATIONS, f_varint(_DA_NAME_IID, self.iid(_ID_ANNOTATION_NAMES, name)) + body)


_NEEDS = f_varint(_TP_SEQUENCE_FLAGS, _SEQ_NEEDS_INCREMENTAL_STATE)


def _packet(ts: int, body: bytes, interned: bytes = b"") -> bytes:
    data = f_bytes(_TP_INTERNED_DATA, interned) if interned else b""
    inner = f_varint(_TP_TIMESTAMP, ts) + _SEQ + _NEEDS + data + body
    return key(_TRACE_PACKET, 2) + varint(len(inner)) + inner


def write_cluster_protobuf(timeline: ClusterTimeline, meta: TraceMetadata, out: IO[bytes]) -> None:
    """Stream ``timeline`` as a Perfetto protobuf trace (absolute ns on the default clock) to a binary handle."""
    tracks = _track_names(timeline)
    n_tracks = len(tracks)
    first = f_varint(_TP_SEQUENCE_ID, _SEQUENCE_ID) + f_varint(_TP_SEQUENCE_FLAGS, _SEQ_INCREMENTAL_STATE_CLEARED)
    buf = [key(_TRACE_PACKET, 2) + varint(len(first)) + first]
    counter_uuid: dict[tuple[int, str], int] = {}
    for g in timeline.gpus:
        puuid = _process_uuid(g.rank)
        buf.append(_packet(0, f_bytes(_TP_TRACK_DESCRIPTOR, f_varint(_TD_UUID, puuid) + f_bytes(
            _TD_PROCESS, f_varint(_PD_PID, sim_pid(g.rank)) + f_string(_PD_PROCESS_NAME, g.name)))))
        for k, tname in enumerate(tracks):
            buf.append(_packet(0, f_bytes(_TP_TRACK_DESCRIPTOR, f_varint(_TD_UUID, puuid + 1 + k)
                                          + f_varint(_TD_PARENT_UUID, puuid) + f_bytes(
                _TD_THREAD, f_varint(_THD_PID, sim_pid(g.rank)) + f_varint(_THD_TID, thread_id(g.rank, k))
                + f_string(_THD_THREAD_NAME, tname)))))
    for c in timeline.counters:
        uuid = counter_uuid.setdefault((c.gpu, c.name), _process_uuid(c.gpu) + 1 + n_tracks + len(
            [1 for (gpu, _) in counter_uuid if gpu == c.gpu]))
        buf.append(_packet(0, f_bytes(_TP_TRACK_DESCRIPTOR, f_varint(_TD_UUID, uuid)
                                      + f_varint(_TD_PARENT_UUID, _process_uuid(c.gpu))
                                      + f_string(_TD_NAME, c.name) + f_bytes(_TD_COUNTER, b""))))
    out.write(b"".join(buf))
    buf.clear()

    strings = _Interned()
    iid = strings.iid
    annotation = strings.annotation
    template_cat = [f_varint(_TE_CATEGORY_IIDS, iid(_ID_CATEGORIES, str(t["kind"]))) for t in meta.templates]
    template_ann = [b"".join(annotation(k, v) for k, v in t.items() if k != "kind") for t in meta.templates]
    recv_cat = f_varint(_TE_CATEGORY_IIDS, iid(_ID_CATEGORIES, "communication"))
    template = meta.template.tolist()
    names = slice_names(timeline, meta)
    extra = _slice_args(timeline, meta)
    n = len(names)
    # Flow ids: flow f (from 1) leaves its sender's slice and ends at the receiver's.
    out_ids: list[list[int]] = [[] for _ in range(n)]
    in_ids: list[list[int]] = [[] for _ in range(n)]
    for f, (a, b) in enumerate(zip(timeline.flow_src.tolist(), timeline.flow_dst.tolist(), strict=True), 1):
        out_ids[a].append(f)
        in_ids[b].append(f)
    track_uuid = [_process_uuid(g) + 1 + t for g, t in zip(timeline.gpu.tolist(), timeline.track.tolist(),
                                                          strict=True)]
    op = timeline.op.tolist()
    cls = timeline.cls.tolist()
    # The micro-batch slices follow the ops' (index n + i), their begin events encoded here.
    items = _item_slices(timeline)
    pipeline_cat = f_varint(_TE_CATEGORY_IIDS, iid(_ID_CATEGORIES, PIPELINE_CATEGORY))
    item_begin = [b"".join((f_varint(_TE_TYPE, _TYPE_SLICE_BEGIN),
                            f_varint(_TE_TRACK_UUID, _process_uuid(r) + n_tracks),
                            f_varint(_TE_NAME_IID, iid(_ID_NAMES, name)), pipeline_cat,
                            *(annotation(a, v) for a, v in args)))
                  for r, _, _, name, args in items]
    track_uuid += [_process_uuid(r) + n_tracks for r, *_ in items]
    n_ops = n
    n = n_ops + len(items)

    # Events in time order: counters first at an instant, then slice ends, then begins (an empty slice's end
    # right after its begin); a sender's begin before its receiver's (lower rank first).
    start = np.concatenate([timeline.start_ns, np.array([it[1] for it in items], dtype=np.int64)])
    end = np.concatenate([timeline.end_ns, np.array([it[2] for it in items], dtype=np.int64)])
    idx = np.arange(n, dtype=np.int64)
    empty = end == start
    c_t = [c.time_ns for c in timeline.counters]
    c_n = [len(t) for t in c_t]
    nc = int(sum(c_n))
    ts = np.concatenate([np.concatenate(c_t) if c_t else np.zeros(0, np.int64), start, end]).astype(np.int64)
    rank = np.concatenate([np.zeros(nc, np.int8), np.full(n, 2, np.int8), np.where(empty, 2, 1).astype(np.int8)])
    sub = np.concatenate([np.arange(nc, dtype=np.int64), 2 * idx, 2 * idx + 1])
    order = np.lexsort((sub, rank, ts)).tolist()
    c_uuid = [counter_uuid[c.gpu, c.name] for c in timeline.counters]
    c_owner = np.repeat(np.arange(len(c_n)), c_n).tolist()
    c_val = np.concatenate([c.value for c in timeline.counters]).tolist() if nc else []
    ts_l = ts.tolist()
    begin = f_varint(_TE_TYPE, _TYPE_SLICE_BEGIN)
    end_type = f_varint(_TE_TYPE, _TYPE_SLICE_END)
    counter_type = f_varint(_TE_TYPE, _TYPE_COUNTER)
    dbl = key(_TE_DOUBLE_COUNTER_VALUE, 1)
    pack_d = struct.Struct("<d").pack
    flow_key, tflow_key = key(_TE_FLOW_IDS, 1), key(_TE_TERMINATING_FLOW_IDS, 1)
    ev_key = key(_TP_TRACK_EVENT, 2)
    for code in order:
        t = ts_l[code]
        if code < nc:
            ev = counter_type + f_varint(_TE_TRACK_UUID, c_uuid[c_owner[code]]) + dbl + pack_d(c_val[code])
        else:
            k = code - nc
            if k >= n:
                ev = end_type + f_varint(_TE_TRACK_UUID, track_uuid[k - n])
            elif k >= n_ops:
                ev = item_begin[k - n_ops]
            else:
                ev = b"".join((
                    begin, f_varint(_TE_TRACK_UUID, track_uuid[k]), f_varint(_TE_NAME_IID, iid(_ID_NAMES, names[k])),
                    recv_cat if cls[k] == RECV else template_cat[template[op[k]]], template_ann[template[op[k]]],
                    b"".join(annotation(a, v) for a, v in extra[k]),
                    b"".join(flow_key + _pack_q(f) for f in out_ids[k]),
                    b"".join(tflow_key + _pack_q(f) for f in in_ids[k]),
                ))
        buf.append(_packet(t, ev_key + varint(len(ev)) + ev, strings.take() if strings.pending else b""))
        if len(buf) >= 50_000:
            out.write(b"".join(buf))
            buf.clear()
    out.write(b"".join(buf))


WriterFn = Callable[[ClusterTimeline, TraceMetadata, Any], None]

#: Cluster trace writers by file suffix (the suffixes of :data:`~layerscope.trace.writers.TRACE_WRITERS`).
CLUSTER_WRITERS: Registry[WriterFn] = Registry("trace output suffix", TraceError, {
    ".json.gz": lambda t, m, h: write_cluster_json(t, m, h, gzip=True),
    ".json": lambda t, m, h: write_cluster_json(t, m, h, gzip=False),
    ".pftrace": write_cluster_protobuf,
    ".perfetto-trace": write_cluster_protobuf,
})


def write_cluster_trace(timeline: ClusterTimeline, meta: TraceMetadata, path: str | os.PathLike[str],
                        inputs: tuple[str | os.PathLike[str], ...] = ()) -> Path:
    """Write ``timeline`` to ``path`` (format from the suffix), atomically; ``meta`` describes the device graph's
    ops (``timeline.op`` indexes them); ``inputs`` are files the output must never overwrite."""
    from layerscope.schedule.core import paused_gc
    from layerscope.units import atomic_write

    writer = CLUSTER_WRITERS.lookup(trace_format(path))
    if len(timeline.op) and int(timeline.op.max()) >= len(meta.names):
        raise TraceError(f"metadata has {len(meta.names)} ops but the timeline names op {int(timeline.op.max())}")
    power = power_counters(timeline, meta)
    if power:
        timeline = dataclasses.replace(timeline, counters=timeline.counters + power)
    with atomic_write(path, "wb", inputs=inputs) as handle, paused_gc():
        writer(timeline, meta, handle)
    return Path(path)

