"""Perfetto protobuf of schedules (layerscope/trace/perfetto_writer.py, trace/protobuf_wire.py).

Read back twice: with our own wire decoder (below, no dependency), and with the real Perfetto
trace processor (the ``perfetto_oracle`` fixture, tests/oracle.py), whose answers are checked
against the schedule itself (so a bug shared by our encoder and our decoder fails) and against
our SQL engine on the same file.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from layerscope.analysis.engine import TraceDB
from layerscope.schedule import ScheduleProblem, schedule
from layerscope.trace import protobuf_wire as pw
from layerscope.trace.perfetto_writer import encode_varints
from layerscope.trace.writers import write_schedule_trace


def _fields(buf: bytes) -> dict[int, list[Any]]:
    out: dict[int, list[Any]] = defaultdict(list)
    for f, _, v in pw.iter_fields(buf):
        out[f].append(v)
    return out


def decode(data: bytes) -> dict[str, Any]:
    """Tracks, slices (with args and flows) and counters of a trace we wrote."""
    tracks: dict[int, str] = {}
    threads: dict[int, str] = {}
    process = ""
    names: dict[str, dict[int, str]] = defaultdict(dict)
    slices: list[dict[str, Any]] = []
    open_: dict[int, list[dict[str, Any]]] = defaultdict(list)
    counters: dict[int, list[tuple[int, float]]] = defaultdict(list)
    ts = 0
    for field, _, pkt in pw.iter_fields(data):
        assert field == 1
        p = _fields(pkt)
        assert p[10] == [1], "every packet is on sequence 1"
        if 58 in p and p[58][0] == 6:
            ts = p[8][0]
        elif 8 in p:
            ts += p[8][0]  # incremental clock 64: deltas
        for idata in p.get(12, []):
            d = _fields(idata)
            for key, table in ((1, "cat"), (3, "ann"), (29, "str")):
                for entry in d.get(key, []):
                    e = _fields(entry)
                    names[table][e[1][0]] = e[2][0].decode()
        for desc in p.get(60, []):
            d = _fields(desc)
            uuid = d[1][0]
            if 3 in d:
                process = _fields(d[3][0])[6][0].decode()
            if 4 in d:
                threads[uuid] = _fields(d[4][0])[5][0].decode()
            if 2 in d:
                tracks[uuid] = d[2][0].decode()
        for ev in p.get(11, []):
            e = _fields(ev)
            track = e[11][0]
            kind = e[9][0]
            if kind == 1:
                args: dict[str, Any] = {}
                for ann in e.get(4, []):
                    a = _fields(ann)
                    key = names["ann"][a[1][0]]
                    if 4 in a:
                        args[key] = pw.as_signed(a[4][0])
                    elif 5 in a:
                        args[key] = pw.as_double(a[5][0])
                    elif 17 in a:
                        args[key] = names["str"][a[17][0]]
                    elif 12 in a:
                        args[key] = [names["str"][_fields(x)[17][0]] for x in a[12]]
                s = {"name": e[23][0].decode(), "cat": names["cat"][e[3][0]], "track": track, "ts": ts,
                     "args": args, "flow_out": e.get(47, []), "flow_in": e.get(48, [])}
                open_[track].append(s)
            elif kind == 2:
                s = open_[track].pop()
                assert not open_[track], "slices on an engine never nest"
                s["dur"] = ts - s["ts"]
                slices.append(s)
            elif kind == 4:
                value = pw.as_double(e[44][0]) if 44 in e else float(e[30][0])
                counters[track].append((ts, value))
    assert not any(open_.values())
    return {"process": process, "threads": threads, "tracks": tracks, "slices": slices, "counters": counters}


def test_slices_tracks_args_flows_counters(tmp_path: Path, timed, sched) -> None:  # type: ignore[no-untyped-def]
    path = write_schedule_trace(sched, timed, tmp_path / "t.pftrace")
    t = decode(path.read_bytes())
    assert sorted(t["threads"].values()) == ["engine 0", "engine 1", "engine 2"]
    assert "tiny-llama" in t["process"] and "3 engines" in t["process"]
    assert sorted(t["tracks"].values()) == ["engines busy", "memory bandwidth GB/s"]
    g = timed.graph
    assert len(t["slices"]) == len(g.ops)
    by_name = {s["name"]: s for s in t["slices"]}
    for i, op in enumerate(g.ops):
        s = by_name[op.name]
        assert (s["ts"], s["dur"]) == (sched.start_ns[i], sched.end_ns[i] - sched.start_ns[i])
        assert t["threads"][s["track"]] == f"engine {sched.engine[i]}"
        assert s["cat"] == op.kind
        assert s["args"].get("dependencies", []) == [g.ops[j].name for j in g.dependencies[i]]
        assert s["args"]["flops"] == op.flops
        assert s["args"]["kv_read_bytes"] == op.kv_read_bytes
        assert s["args"]["bound"] == timed.bound[i]
    q = next(s for s in t["slices"] if s["name"].endswith("layers.0.self_attn.q_proj"))
    assert q["args"]["input_shapes"] == "[1, 64]; [64, 64]"
    assert q["args"]["matrix_class"] == "Va_Mw"
    # Every edge: one flow id leaving the producer and terminating at the consumer.
    out_ids = sorted(f for s in t["slices"] for f in s["flow_out"])
    in_ids = sorted(f for s in t["slices"] for f in s["flow_in"])
    edges = sum(len(d) for d in g.dependencies)
    assert out_ids == in_ids == list(range(1, edges + 1))
    # Counters match the schedule's step functions (bandwidth in GB/s).
    bw_uuid = next(u for u, n in t["tracks"].items() if n.startswith("memory"))
    assert [v for _, v in t["counters"][bw_uuid]] == pytest.approx((sched.bandwidth_bytes_per_s / 1e9).tolist())
    busy_uuid = next(u for u, n in t["tracks"].items() if n == "engines busy")
    bt, bv = sched.engines_busy()
    assert t["counters"][busy_uuid] == list(zip(bt.tolist(), map(float, bv.tolist()), strict=True))


def test_byte_identical(tmp_path: Path, timed, sched) -> None:  # type: ignore[no-untyped-def]
    a = write_schedule_trace(sched, timed, tmp_path / "a.pftrace").read_bytes()
    b = write_schedule_trace(schedule(ScheduleProblem.from_timed(timed), 3), timed, tmp_path / "b.pftrace")
    assert a == b.read_bytes()


def test_a_third_of_the_json_size(tmp_path: Path) -> None:
    # A real model: per-op strings (names, shapes) dominate tiny graphs, so the ratio is measured
    # on Llama-3.2-1B's 16 layers (324 ops); bench/bench_simulate.py measures it at 1M ops.
    from layerscope.app.simulate import SimulateRequest, run_simulation

    pb = run_simulation(SimulateRequest(model="llama-3.2-1b", engines=3, all_layers=True, out=tmp_path / "m.pftrace"))
    js = run_simulation(SimulateRequest(model="llama-3.2-1b", engines=3, all_layers=True, out=tmp_path / "m.json"))
    assert pb.trace_path is not None and js.trace_path is not None
    assert pb.trace_path.stat().st_size <= js.trace_path.stat().st_size / 3


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 2**63 - 1), max_size=50))
def test_varints_round_trip(values: list[int]) -> None:
    import numpy as np

    blob, off = encode_varints(np.asarray(values, dtype=np.int64))
    assert blob == b"".join(pw.varint(v) for v in values)
    pos = 0
    for k, v in enumerate(values):
        got, pos = pw.read_varint(blob, pos)
        assert got == v and pos == off[k + 1]


def test_real_trace_processor_reads_it(perfetto_oracle: Any, tmp_path: Path, timed, sched) -> None:  # type: ignore[no-untyped-def]
    path = write_schedule_trace(sched, timed, tmp_path / "t.pftrace")
    trace = perfetto_oracle.load(path)
    assert trace.errors() == []
    g = timed.graph
    # Every op one slice, at the schedule's ns (clock 64, incremental deltas), on its engine's thread;
    # one flow per dependency edge, from the producer's slice to the consumer's.
    trace.assert_is_schedule(g, sched)
    processes = trace.query("SELECT DISTINCT p.name FROM slice s JOIN thread_track tt ON s.track_id = tt.id "
                            "JOIN thread t USING (utid) JOIN process p USING (upid)")
    assert [r["name"] for r in processes] == ["tiny-llama:decode@64 on h100-sxm (roofline) · 3 engines (list)"]
    # Debug annotations of every op: ints, strings and the dependency list in order.
    args = trace.args_by_slice()
    for i, op in enumerate(g.ops):
        a = args[op.name]
        assert (a["debug.flops"], a["debug.memory_bytes"], a["debug.kv_read_bytes"], a["debug.bound"]) == (
            op.flops, int(timed.memory_bytes[i]), op.kv_read_bytes, timed.bound[i])
        deps = [a.get(f"debug.dependencies[{k}]") for k in range(len(g.dependencies[i]) + 1)]
        assert deps == [g.ops[j].name for j in g.dependencies[i]] + [None]
    assert args["layers.0.self_attn.q_proj"]["debug.input_shapes"] == "[1, 64]; [64, 64]"
    # Counters: the schedule's step functions (bandwidth in GB/s).
    counters: dict[str, list[tuple[int, float]]] = defaultdict(list)
    for r in trace.query("SELECT t.name, c.ts, c.value FROM counter c JOIN counter_track t ON c.track_id = t.id "
                         "ORDER BY c.ts"):
        counters[r["name"]].append((r["ts"], r["value"]))
    assert sorted(counters) == ["engines busy", "memory bandwidth GB/s"]
    bt, bv = sched.engines_busy()
    assert counters["engines busy"] == list(zip(bt.tolist(), map(float, bv.tolist()), strict=True))
    assert [t for t, _ in counters["memory bandwidth GB/s"]] == sched.bandwidth_time_ns.tolist()
    assert [v for _, v in counters["memory bandwidth GB/s"]] == pytest.approx(
        (sched.bandwidth_bytes_per_s / 1e9).tolist())
    with TraceDB(path, use_cache=False) as db:
        assert trace.disagreements(db.records) == []


def test_counter_events_are_the_per_value_encoding() -> None:
    """The vectorized counter TrackEvents equal ``head + struct.pack("<d", v)`` / ``head + varint(n)`` per value,
    in time order (bandwidth, engines busy, power at one instant); 200 engines make busy counts of 2-byte varints."""
    import struct
    from itertools import pairwise

    import numpy as np

    from layerscope.trace import perfetto_writer as pwr

    n = 300
    problem = ScheduleProblem(np.zeros(n + 1, np.int64), np.zeros(0, np.int64), np.full(n, 1e-6), np.full(n, 1e3),
                              np.zeros(n), 1e12)
    sched = schedule(problem, 200)
    busy_t, busy_v = sched.engines_busy()
    assert busy_v.max() >= 128
    power = (np.array([0, 500, 1000], np.int64), np.array([-0.0, 1e300, 2.5]))
    ts, blob, off = pwr._counter_events(sched, power)
    head = {track: pw.f_varint(pwr.TE_TYPE, pwr.TYPE_COUNTER) + pw.f_varint(pwr.TE_TRACK_UUID, track)
            for track in (pwr.BANDWIDTH_UUID, pwr.ENGINES_UUID, pwr.POWER_UUID)}
    expect = [(int(t), 0, head[pwr.BANDWIDTH_UUID] + pw.key(pwr.TE_DOUBLE_COUNTER_VALUE, 1) + struct.pack("<d", v))
              for t, v in zip(sched.bandwidth_time_ns, (sched.bandwidth_bytes_per_s / 1e9).tolist(), strict=True)]
    expect += [(int(t), 1, head[pwr.ENGINES_UUID] + pw.key(pwr.TE_COUNTER_VALUE, 0) + pw.varint(int(v)))
               for t, v in zip(busy_t, busy_v, strict=True)]
    expect += [(int(t), 2, head[pwr.POWER_UUID] + pw.key(pwr.TE_DOUBLE_COUNTER_VALUE, 1) + struct.pack("<d", v))
               for t, v in zip(*power, strict=True)]
    expect.sort(key=lambda e: e[:2])  # stable: values of one track keep their order
    assert ts.tolist() == [t for t, _, _ in expect]
    assert [blob[a:b] for a, b in pairwise(off.tolist())] == [e for _, _, e in expect]
