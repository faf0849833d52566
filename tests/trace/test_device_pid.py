"""The simulated trace's process comes from the device the schedule ran on (``TraceMetadata.device``,
pid ``sim_pid(device)`` = ``SIM_PID + device``): in Chrome JSON and in Perfetto protobuf, and read
back through our readers with the process name. Device 0 keeps today's pid 1 (the golden traces,
tests/trace/test_golden.py, prove its bytes unchanged)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from layerscope.errors import TraceError
from layerscope.trace import protobuf_wire as pw
from layerscope.trace.chrome_writer import process_title
from layerscope.trace.readers import read_trace
from layerscope.trace.writers import SIM_PID, TID_BASE, TraceMetadata, sim_pid, write_schedule_trace


def test_sim_pid_is_documented_function_of_the_device() -> None:
    assert sim_pid(0) == SIM_PID == 1
    assert [sim_pid(d) for d in range(4)] == [1, 2, 3, 4]


def _chrome_pids(path: Path) -> tuple[set[int], list[dict[str, Any]]]:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt") as fh:
        events = json.load(fh)["traceEvents"]
    return {e["pid"] for e in events if "pid" in e}, events


def _perfetto_pids(path: Path) -> tuple[set[int], set[int], str]:
    """pids of the process descriptor and of the thread descriptors, and the process name."""
    proc_pids: set[int] = set()
    thread_pids: set[int] = set()
    name = ""
    for field, _, packet in pw.iter_fields(path.read_bytes()):
        assert field == 1
        for f, _, desc in pw.iter_fields(packet):
            if f != 60:  # TrackDescriptor
                continue
            for g, _, sub in pw.iter_fields(desc):
                if g == 3:  # ProcessDescriptor: pid 1, process_name 6
                    fields = {k: v for k, _, v in pw.iter_fields(sub)}
                    proc_pids.add(fields[1])
                    name = fields[6].decode()
                elif g == 4:  # ThreadDescriptor: pid 1, tid 2
                    thread_pids.add(next(v for k, _, v in pw.iter_fields(sub) if k == 1))
    return proc_pids, thread_pids, name


@pytest.mark.parametrize("suffix", [".json", ".json.gz", ".pftrace"])
@pytest.mark.parametrize("device", [0, 1, 3])
def test_trace_pid_from_device(tmp_path: Path, timed, sched, suffix: str, device: int) -> None:  # type: ignore[no-untyped-def]
    meta = TraceMetadata.from_timed(timed, device=device)
    assert meta.device == device
    path = write_schedule_trace(sched, meta, tmp_path / f"t{suffix}")
    pid = sim_pid(device)
    title = process_title(sched, meta)
    if suffix == ".pftrace":
        proc_pids, thread_pids, name = _perfetto_pids(path)
        assert proc_pids == {pid} and thread_pids == {pid} and name == title
    else:
        pids, events = _chrome_pids(path)
        assert pids == {pid}
        sort = next(e for e in events if e["name"] == "process_sort_index")["args"]["sort_index"]
        assert sort == device
    tables = read_trace(path)
    procs = [r for r in tables.process.to_pylist() if r["upid"] != 0]
    assert [(r["pid"], r["name"]) for r in procs] == [(pid, title)]
    upid = procs[0]["upid"]
    names = list(sched.engines.names)
    engines = {r["name"]: (r["tid"], r["upid"]) for r in tables.thread.to_pylist() if r["name"] in names}
    assert engines == {name: (k + TID_BASE, upid) for k, name in enumerate(names)}
    assert tables.slice.num_rows == len(timed.graph.ops)


def test_minimal_metadata_takes_a_device(tmp_path: Path, sched) -> None:  # type: ignore[no-untyped-def]
    n = sched.problem.n
    meta = TraceMetadata.minimal([f"op{i}" for i in range(n)], ["gemm"] * n, "chip", device=2)
    pids, _ = _chrome_pids(write_schedule_trace(sched, meta, tmp_path / "m.json"))
    assert pids == {sim_pid(2)}
    assert TraceMetadata.minimal(["a"], ["gemm"]).device == 0


@pytest.mark.parametrize("bad", [-1, 1.0, True, "1", None])
def test_device_must_be_a_whole_number(bad: Any) -> None:
    with pytest.raises(TraceError, match="device index"):
        TraceMetadata.minimal(["a"], ["gemm"], device=bad)
