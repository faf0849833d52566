"""Perfetto protobuf reader (layerscope/trace/perfetto_reader.py): what layerscope writes, and
hand-built TrackEvent packets (interned names, categories, counters, flows, debug annotations)."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from layerscope.errors import TraceError
from layerscope.schedule.core import ScheduleProblem, schedule
from layerscope.trace.perfetto_reader import read_perfetto
from layerscope.trace.protobuf_wire import f_bytes, f_double, f_fixed64, f_string, f_varint
from layerscope.trace.readers import read_trace
from layerscope.trace.writers import TraceMetadata, write_schedule_trace

NAMES = ["embed", "layers.0.self_attn.q_proj", "layers.0.self_attn.k_proj", "layers.0.self_attn.attn",
         "layers.0.mlp.up_proj", "lm_head"]
KINDS = ["embedding", "gemm", "gemm", "attention", "gemm", "gemm"]


@pytest.fixture(scope="module")
def sim_schedule():  # type: ignore[no-untyped-def]
    deps = [[], [0], [0], [1, 2], [3], [4]]
    problem = ScheduleProblem.from_dependencies(deps, [1e-6, 2e-6, 2e-6, 3e-6, 4e-6, 1e-6], [1e3] * 6,
                                                [1e-7] * 6, 1e12)
    return schedule(problem, 2)


def _write_sim(tmp_path: Path, sim_schedule, suffix: str) -> Path:  # type: ignore[no-untyped-def]
    meta = TraceMetadata.minimal(NAMES, KINDS, process_name="sim")
    return write_schedule_trace(sim_schedule, meta, tmp_path / f"sim{suffix}")


def test_reads_what_layerscope_writes(tmp_path: Path, sim_schedule) -> None:  # type: ignore[no-untyped-def]
    t = read_trace(_write_sim(tmp_path, sim_schedule, ".pftrace"))
    assert t.warnings == []
    s = t.slice.to_pylist()
    assert [r["name"] for r in s] == NAMES  # ids in time order
    assert [(r["ts"], r["ts"] + r["dur"]) for r in s] == list(zip(sim_schedule.start_ns.tolist(),
                                                               sim_schedule.end_ns.tolist(), strict=True))
    assert [r["category"] for r in s] == KINDS
    assert {r["name"] for r in t.thread.to_pylist()} >= {"engine 0", "engine 1"}
    # one flow per dependency edge
    flows = {(s[f["slice_out"]]["name"], s[f["slice_in"]]["name"]) for f in t.flow.to_pylist()}
    assert flows == {("embed", "layers.0.self_attn.q_proj"), ("embed", "layers.0.self_attn.k_proj"),
                     ("layers.0.self_attn.q_proj", "layers.0.self_attn.attn"),
                     ("layers.0.self_attn.k_proj", "layers.0.self_attn.attn"),
                     ("layers.0.self_attn.attn", "layers.0.mlp.up_proj"), ("layers.0.mlp.up_proj", "lm_head")}
    counter_tracks = {r["name"] for r in t.track.to_pylist() if r["type"] == "counter"}
    assert counter_tracks == {"memory bandwidth GB/s", "engines busy"}
    assert t.counter.num_rows > 0


def test_protobuf_and_json_of_one_schedule_agree(tmp_path: Path, sim_schedule) -> None:  # type: ignore[no-untyped-def]
    pb = read_trace(_write_sim(tmp_path, sim_schedule, ".pftrace"))
    js = read_trace(_write_sim(tmp_path, sim_schedule, ".json.gz"))
    cols = ["ts", "dur", "name", "depth"]
    assert pb.slice.select(cols).to_pylist() == js.slice.select(cols).to_pylist()
    assert pb.flow.num_rows == js.flow.num_rows


def _packet(*fields: bytes) -> bytes:
    return f_bytes(1, b"".join(fields))


def _hand_built() -> bytes:
    seq = f_varint(10, 7)
    process = _packet(f_bytes(60, f_varint(1, 1) + f_bytes(3, f_varint(1, 42) + f_string(6, "proc"))))
    thread = _packet(f_bytes(60, f_varint(1, 2) + f_varint(5, 1)
                             + f_bytes(4, f_varint(1, 42) + f_varint(2, 43) + f_string(5, "worker"))))
    counter = _packet(f_bytes(60, f_varint(1, 3) + f_string(2, "queue") + f_bytes(8, b"")))
    interned = f_bytes(12, f_bytes(1, f_varint(1, 1) + f_string(2, "cat")) + f_bytes(2, f_varint(1, 5)
                       + f_string(2, "interned_name")) + f_bytes(3, f_varint(1, 9) + f_string(2, "bytes")))
    begin = _packet(f_varint(8, 100), seq, f_varint(13, 1), interned,
                    f_bytes(11, f_varint(9, 1) + f_varint(11, 2) + f_varint(10, 5) + f_varint(3, 1)
                            + f_bytes(4, f_varint(1, 9) + f_varint(4, 1024)) + f_fixed64(47, 99)))
    inner = _packet(f_varint(8, 120), seq, f_bytes(11, f_varint(9, 1) + f_varint(11, 2) + f_string(23, "inner")
                                                    + f_bytes(4, f_string(10, "note") + f_string(6, "hi"))))
    inner_end = _packet(f_varint(8, 130), seq, f_bytes(11, f_varint(9, 2) + f_varint(11, 2)))
    end = _packet(f_varint(8, 200), seq, f_bytes(11, f_varint(9, 2) + f_varint(11, 2)))
    instant = _packet(f_varint(8, 300), seq, f_bytes(11, f_varint(9, 3) + f_varint(11, 2) + f_string(23, "tick")
                                                      + f_fixed64(48, 99)))
    value = _packet(f_varint(8, 150), seq, f_bytes(11, f_varint(9, 4) + f_varint(11, 3) + f_double(44, 2.5)))
    return process + thread + counter + begin + inner + value + inner_end + end + instant


def test_hand_built_track_events(tmp_path: Path) -> None:
    path = tmp_path / "hand.pftrace"
    path.write_bytes(_hand_built())
    t = read_perfetto(path)
    s = t.slice.to_pylist()
    assert [(r["name"], r["ts"], r["dur"], r["depth"], r["category"]) for r in s] == [
        ("interned_name", 100, 100, 0, "cat"), ("inner", 120, 10, 1, None), ("tick", 300, 0, 0, None)]
    assert s[1]["parent_id"] == s[0]["id"]
    (flow,) = t.flow.to_pylist()
    assert (flow["slice_out"], flow["slice_in"]) == (s[0]["id"], s[2]["id"])
    assert t.counter.column("value").to_pylist() == [2.5]
    args = {r["arg_set_id"]: json.loads(r["json"]) for r in t.arg_sets.to_pylist()}
    assert args[s[0]["arg_set_id"]] == {"debug": {"bytes": 1024}}
    assert args[s[1]["arg_set_id"]] == {"debug": {"note": "hi"}}
    (thread,) = [r for r in t.thread.to_pylist() if r["tid"] == 43]
    assert thread["name"] == "worker"
    assert "proc" in t.process.column("name").to_pylist()


def test_truncated_protobuf_keeps_complete_packets(tmp_path: Path) -> None:
    data = _hand_built()
    path = tmp_path / "cut.pftrace"
    path.write_bytes(data[:-5])
    t = read_perfetto(path)
    assert [r["name"] for r in t.slice.to_pylist()] == ["interned_name", "inner"]
    assert any("truncated" in w for w in t.warnings)


@pytest.mark.parametrize("content", [b"\xff\xff\xff", b"\x12\x03abc", b"\x0a\xff\xff\xff\xff\x0f"])
def test_garbage_raises_trace_error(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "bad.pftrace"
    path.write_bytes(content)
    with pytest.raises(TraceError):
        read_perfetto(path)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(max_size=200), flips=st.lists(st.integers(0, 10_000), max_size=4))
def test_fuzz_only_trace_error(tmp_path: Path, data: bytes, flips: list[int]) -> None:
    base = bytearray(_hand_built())
    for f in flips:
        base[f % len(base)] ^= 0x5A
    for payload in (data, bytes(base)):
        path = tmp_path / "f.pftrace"
        path.write_bytes(payload)
        with contextlib.suppress(TraceError):
            read_perfetto(path)
