"""Chrome Trace Event JSON of schedules (layerscope/trace/chrome_writer.py, trace/writers.py).

Read back as JSON here, and by the real Perfetto trace processor (the ``perfetto_oracle``
fixture, tests/oracle.py), checked against the schedule and against our SQL engine."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from layerscope.analysis.engine import TraceDB
from layerscope.errors import OutputError, TraceError
from layerscope.schedule import ScheduleProblem, schedule
from layerscope.trace.writers import TraceMetadata, trace_format, write_schedule_trace


def _events(path: Path) -> list[dict]:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt") as fh:
        return json.load(fh)["traceEvents"]


@pytest.mark.parametrize("suffix", [".json", ".json.gz"])
def test_slices_tracks_args_flows_counters(tmp_path: Path, timed, sched, suffix: str) -> None:  # type: ignore[no-untyped-def]
    path = write_schedule_trace(sched, timed, tmp_path / f"t{suffix}")
    ev = _events(path)
    n = len(timed.graph.ops)
    xs = [e for e in ev if e["ph"] == "X"]
    assert len(xs) == n
    threads = {e["tid"]: e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "thread_name"}
    assert sorted(threads.values()) == ["engine 0", "engine 1", "engine 2"]
    order = {e["tid"]: e["args"]["sort_index"] for e in ev if e["name"] == "thread_sort_index"}
    assert all(order[t] == int(threads[t].split()[1]) for t in threads)
    proc = next(e for e in ev if e["name"] == "process_name")["args"]["name"]
    assert "tiny-llama" in proc and "h100-sxm" in proc and "3 engines" in proc
    # Times in µs with ns precision, matching the schedule exactly.
    by_name = {e["name"]: e for e in xs}
    for i, op in enumerate(timed.graph.ops):
        e = by_name[op.name]
        assert round(e["ts"] * 1000) == sched.start_ns[i]
        assert round(e["dur"] * 1000) == sched.end_ns[i] - sched.start_ns[i]
        assert e["tid"] == sched.engine[i] + 1
        assert e["cat"] == op.kind
    q = by_name["model.layers.0.self_attn.q_proj"] if "model.layers.0.self_attn.q_proj" in by_name else next(
        e for e in xs if e["name"].endswith("layers.0.self_attn.q_proj"))
    i = timed.graph.index[q["name"]]
    op = timed.graph.ops[i]
    a = q["args"]
    assert a["flops"] == op.flops == 2 * 64 * 64
    assert a["weight_bytes"] == op.weight_bytes == 64 * 64 * 2
    assert a["input_shapes"] == "[1, 64]; [64, 64]"
    assert a["input_dtypes"] == "bf16; bf16"
    assert a["output_shapes"] == "[1, 64]"
    assert a["bound"] == timed.bound[i]
    assert a["matrix_class"] == "Va_Mw"
    assert a["definition"] == op.definition
    assert a["arithmetic_intensity"] == pytest.approx(op.arithmetic_intensity, rel=1e-5)
    assert a["dependencies"] == [timed.graph.ops[j].name for j in timed.graph.dependencies[i]]
    assert a["layer"] == 0
    # One flow (s + f pair) per dependency edge, bound to the slices' midpoints.
    edges = sum(len(d) for d in timed.graph.dependencies)
    starts = [e for e in ev if e["ph"] == "s"]
    ends = [e for e in ev if e["ph"] == "f"]
    assert len(starts) == len(ends) == edges
    assert all(e["bp"] == "e" for e in ends)
    assert sorted(e["id"] for e in starts) == sorted(e["id"] for e in ends) == list(range(1, edges + 1))
    counters = {e["name"] for e in ev if e["ph"] == "C"}
    assert counters == {"memory bandwidth", "engines"}
    bw = [e["args"]["GB/s"] for e in ev if e["ph"] == "C" and e["name"] == "memory bandwidth"]
    assert max(bw) <= sched.problem.bandwidth_bytes_per_s / 1e9 + 1e-6
    busy = [e["args"]["busy"] for e in ev if e["ph"] == "C" and e["name"] == "engines"]
    assert max(busy) <= 3 and busy[-1] == 0


def test_byte_identical(tmp_path: Path, timed, sched) -> None:  # type: ignore[no-untyped-def]
    for suffix in (".json", ".json.gz"):
        a = write_schedule_trace(sched, timed, tmp_path / f"a{suffix}").read_bytes()
        b = write_schedule_trace(schedule(ScheduleProblem.from_timed(timed), 3), timed,
                                 tmp_path / f"b{suffix}").read_bytes()
        assert a == b


def test_suffix_registry(tmp_path: Path, sched) -> None:  # type: ignore[no-untyped-def]
    assert trace_format("x.JSON.GZ") == ".json.gz"
    assert trace_format("x.perfetto-trace") == ".perfetto-trace"
    with pytest.raises(TraceError, match=r"known suffixes: \.json\.gz, \.json, \.pftrace"):
        trace_format("x.csv")


def test_never_overwrites_an_input(tmp_path: Path, timed, sched) -> None:  # type: ignore[no-untyped-def]
    src = tmp_path / "config.json"
    src.write_text("{}")
    with pytest.raises(OutputError, match="refusing to overwrite"):
        write_schedule_trace(sched, timed, src, inputs=(src,))
    assert src.read_text() == "{}"
    with pytest.raises(OutputError, match="does not exist"):
        write_schedule_trace(sched, timed, tmp_path / "missing" / "t.json")


def test_minimal_metadata_and_escaping(tmp_path: Path) -> None:
    p = ScheduleProblem.from_dependencies([[], [0]], [1.234e-6, 1e-9], [0, 0], [0, 0], 1e9)
    meta = TraceMetadata.minimal(['a"quoted"\\name', "b"], ["gemm", "norm"], "proc")
    ev = _events(write_schedule_trace(schedule(p, 1), meta, tmp_path / "m.json"))
    xs = [e for e in ev if e["ph"] == "X"]
    assert xs[0]["name"] == 'a"quoted"\\name' and xs[0]["ts"] == 0 and xs[0]["dur"] == 1.234
    assert xs[1]["ts"] == 1.234 and xs[1]["dur"] == 0.001
    assert xs[1]["args"]["dependencies"] == ['a"quoted"\\name']
    with pytest.raises(TraceError, match="metadata has 2 ops but the schedule has 1"):
        write_schedule_trace(schedule(ScheduleProblem.from_dependencies([[]], [0], [0], [0], 1e9), 1), meta,
                             tmp_path / "x.json")


@pytest.mark.parametrize("suffix", [".json", ".json.gz"])
def test_real_trace_processor_reads_it(perfetto_oracle: Any, tmp_path: Path, timed, sched, suffix: str) -> None:  # type: ignore[no-untyped-def]
    path = write_schedule_trace(sched, timed, tmp_path / f"t{suffix}")
    trace = perfetto_oracle.load(path)
    assert trace.errors() == []
    g = timed.graph
    # µs with three decimals in the file: trace_processor's ns must be the schedule's exactly.
    # Spans at exact ns; the s/f pairs bind to the producer's and the consumer's slices (by time on their threads).
    trace.assert_is_schedule(g, sched)
    args = trace.args_by_slice()
    for i, op in enumerate(g.ops):
        a = args[op.name]
        assert (a["args.flops"], a["args.weight_bytes"], a["args.bound"]) == (op.flops, op.weight_bytes,
                                                                              timed.bound[i])
        deps = [a.get(f"args.dependencies[{k}]") for k in range(len(g.dependencies[i]) + 1)]
        assert deps == [g.ops[j].name for j in g.dependencies[i]] + [None]
    counters = trace.query("SELECT t.name, COUNT(*) AS n, MAX(c.value) AS peak FROM counter c "
                           "JOIN counter_track t ON c.track_id = t.id GROUP BY t.name ORDER BY t.name")
    bt, bv = sched.engines_busy()
    assert [(r["name"], r["n"]) for r in counters] == [("engines busy", len(bt)),
                                                       ("memory bandwidth GB/s", len(sched.bandwidth_time_ns))]
    assert counters[0]["peak"] == bv.max()
    assert counters[1]["peak"] == pytest.approx(sched.bandwidth_bytes_per_s.max() / 1e9)
    with TraceDB(path, use_cache=False) as db:
        assert trace.disagreements(db.records) == []


def test_real_trace_processor_reads_escaped_names(perfetto_oracle: Any, tmp_path: Path) -> None:
    p = ScheduleProblem.from_dependencies([[], [0]], [1.234e-6, 1e-9], [0, 0], [0, 0], 1e9)
    # (no control characters: trace_processor keeps "\\n" in a JSON name as backslash and n)
    meta = TraceMetadata.minimal(['a"quoted"\\name', "b\u00e9/\u4e2d"], ["gemm", "norm"], 'proc "x"')
    path = write_schedule_trace(schedule(p, 1), meta, tmp_path / "m.json")
    trace = perfetto_oracle.load(path)
    assert trace.errors() == []
    assert trace.query("SELECT name, ts, dur, category FROM slice ORDER BY ts") == [
        {"name": 'a"quoted"\\name', "ts": 0, "dur": 1234, "category": "gemm"},
        {"name": "b\u00e9/\u4e2d", "ts": 1234, "dur": 1, "category": "norm"}]
    assert trace.query("SELECT name FROM process WHERE pid = 1") == [{"name": 'proc "x" · 1 engines (list)'}]
    with TraceDB(path, use_cache=False) as db:
        assert trace.disagreements(db.records) == []
