"""``simulate`` with a plan of more than one GPU writes a cluster trace (schedule/cluster.py, trace/cluster_writer.py):
one process per GPU with its engines and a communication track, the micro-batches through the pipeline (GPipe),
collectives at one instant on their group, flows from each send to its receive and along each collective's
group, counters per GPU. Read back by our readers, and by the real Perfetto trace processor (tests/oracle.py)."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from layerscope.app.requests import ParallelPlan, WorkloadRequest
from layerscope.app.simulate import SimulateRequest, build_graph, result_of, run_simulation
from layerscope.cost import time_graph
from layerscope.cost.api import PipelineTimes
from layerscope.errors import ScheduleError
from layerscope.hardware import load_hardware
from layerscope.model import load_model_spec
from layerscope.schedule import ScheduleProblem, schedule
from layerscope.schedule.cluster import (
    COLLECTIVE,
    COMPUTE,
    ENGINES_BUSY,
    RECV,
    SEND,
    WIRE_BANDWIDTH,
    ClusterOps,
    ClusterTimeline,
    _lanes,
    cluster_timeline,
    gpu_ranks,
    sub_problem,
)
from layerscope.trace.cluster_writer import slice_names, write_cluster_trace
from layerscope.trace.readers import read_trace
from layerscope.trace.writers import TraceMetadata

# Llama-3.2-1B prefill, 8 GPUs: tp 2 x pp 2 x dp 2, 3 micro-batches of one sequence per replica.
TP, PP, DP, MB = 2, 2, 2, 3
ENGINES = 3


@pytest.fixture(scope="module")
def case() -> tuple[Any, ClusterOps, ClusterTimeline, TraceMetadata]:
    spec = load_model_spec("llama-3.2-1b")
    plan = ParallelPlan(tensor_parallel=TP, pipeline_parallel=PP, data_parallel=DP, micro_batches=MB)
    graph = build_graph(spec, WorkloadRequest(phase="prefill", batch=6, prompt_len=128), all_layers=True, plan=plan)
    timed = time_graph(graph, load_hardware("dgx-h100"))
    ops = ClusterOps.from_timed(timed, spec, PP)
    timeline = cluster_timeline(ScheduleProblem.from_timed(timed), ops, tensor_parallel=TP, pipeline_parallel=PP,
                                data_parallel=DP, micro_batches=MB, engines=ENGINES)
    return timed, ops, timeline, TraceMetadata.from_timed(timed)


def test_gpu_ranks_place_stages_on_consecutive_gpus_tp_fastest() -> None:
    ranks = gpu_ranks(2, 2, 2)
    assert [(g.rank, g.stage, g.tp, g.dp) for g in ranks] == [
        (0, 0, 0, 0), (1, 0, 1, 0), (2, 0, 0, 1), (3, 0, 1, 1), (4, 1, 0, 0), (5, 1, 1, 0), (6, 1, 0, 1), (7, 1, 1, 1)]
    assert ranks[5].name == "GPU 5 (stage 1, tp 1, dp 0)"


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 50), st.integers(1, 20)), max_size=40))
def test_lanes_are_an_interval_partitioning(spans: list[tuple[int, int]]) -> None:
    start = np.array([a for a, _ in spans], dtype=np.int64)
    end = start + np.array([d for _, d in spans], dtype=np.int64)
    lane = _lanes(start, end)
    for ln in set(lane.tolist()):
        s, e = start[lane == ln], end[lane == ln]
        order = np.lexsort((e, s))
        assert np.all(s[order][1:] >= e[order][:-1])  # one lane never holds two transfers at once
    # as few lanes as the most transfers in flight at one instant (greedy by start is optimal)
    depth = max((int(((start <= t) & (end > t)).sum()) for t in start.tolist()), default=0)
    assert len(set(lane.tolist())) == max(depth, 1 if spans else 0)


def test_sub_problem_keeps_the_edges_inside() -> None:
    deps = [[], [0], [0, 1], [2], [1, 3]]
    problem = ScheduleProblem.from_dependencies(deps, [1.0] * 5, [0.0] * 5, [0.0] * 5, 1.0)
    sub = sub_problem(problem, np.array([1, 3, 4]))
    assert [sub.dependencies(i).tolist() for i in range(3)] == [[], [], [0, 1]]


def test_every_gpu_runs_its_stage_every_micro_batch(case: Any) -> None:
    _, ops, tl, _ = case
    assert len(tl.gpus) == TP * PP * DP
    for g in tl.gpus:
        mine = (tl.gpu == g.rank) & (tl.cls != RECV)
        # every op of its stage once per micro-batch, and nothing else
        want = np.flatnonzero(ops.stage == g.stage)
        for j in range(MB):
            assert sorted(tl.op[mine & (tl.micro_batch == j)].tolist()) == want.tolist()
        # engines and communication lanes: no two slices of one track overlap
        for track in np.unique(tl.track[tl.gpu == g.rank]).tolist():
            sel = (tl.gpu == g.rank) & (tl.track == track)
            s, e = tl.start_ns[sel], tl.end_ns[sel]
            order = np.argsort(s, kind="stable")
            assert np.all(s[order][1:] >= e[order][:-1])
        comm = (tl.gpu == g.rank) & (tl.cls != COMPUTE)
        assert np.all(tl.track[comm] >= ENGINES) and np.all(tl.track[(tl.gpu == g.rank) & ~comm] < ENGINES)


def test_times_are_the_schedulers(case: Any) -> None:
    timed, ops, tl, _ = case
    problem = ScheduleProblem.from_timed(timed)
    for s in range(PP):
        idx = np.flatnonzero(ops.stage == s)
        sched = schedule(sub_problem(problem, idx), ENGINES)
        assert tl.stage_times_ns[0, s] == sched.makespan_ns
        rank = s * TP * DP
        for j in range(MB):
            sel = (tl.gpu == rank) & (tl.micro_batch == j) & (tl.cls != RECV)
            by_op = dict(zip(tl.op[sel].tolist(), zip(tl.start_ns[sel].tolist(), tl.end_ns[sel].tolist(),
                                                      strict=True), strict=True))
            offset = by_op[int(idx[0])][0] - int(sched.start_ns[0])
            assert [by_op[i] for i in idx.tolist()] == [
                (int(a) + offset, int(b) + offset) for a, b in zip(sched.start_ns, sched.end_ns, strict=True)]


def test_one_stage_one_micro_batch_is_todays_schedule_on_every_gpu() -> None:
    spec = load_model_spec("llama-3.2-1b")
    plan = ParallelPlan(tensor_parallel=2, data_parallel=2)
    timed = time_graph(build_graph(spec, WorkloadRequest(phase="decode", batch=4, context=256), plan=plan),
                       load_hardware("h100-sxm"))
    problem = ScheduleProblem.from_timed(timed)
    tl = cluster_timeline(problem, ClusterOps.from_timed(timed, spec, 1), tensor_parallel=2, pipeline_parallel=1,
                          data_parallel=2, micro_batches=1, engines=4)
    sched = schedule(problem, 4)
    for g in range(4):
        sel = tl.gpu == g
        order = np.argsort(tl.op[sel])
        assert tl.op[sel][order].tolist() == list(range(problem.n))
        assert tl.start_ns[sel][order].tolist() == sched.start_ns.tolist()
        assert tl.end_ns[sel][order].tolist() == sched.end_ns.tolist()


def test_collective_slices_of_a_group_share_start_and_duration(case: Any) -> None:
    tl = case[2]
    coll = np.flatnonzero(tl.cls == COLLECTIVE)
    assert len(coll)
    groups: dict[tuple[int, int, int, int], set[tuple[int, int]]] = defaultdict(set)
    members: dict[tuple[int, int, int, int], set[int]] = defaultdict(set)
    for k in coll.tolist():
        key = (int(tl.group[k]), int(tl.op[k]), int(tl.micro_batch[k]), int(tl.step[k]))
        groups[key].add((int(tl.start_ns[k]), int(tl.end_ns[k])))
        members[key].add(int(tl.gpu[k]))
    for key, times in groups.items():
        assert len(times) == 1, key  # one start, one duration on every GPU of the group
        first = key[0]
        assert members[key] == set(range(first, first + TP))  # the all-reduce's tp group: consecutive GPUs


def test_pipeline_bubble_and_gpipe_makespan(case: Any) -> None:
    _, _, tl, _ = case
    per_stage = TP * DP
    for g in tl.gpus[per_stage:]:
        prev = g.rank - per_stage
        send = (tl.gpu == prev) & (tl.cls == SEND) & (tl.micro_batch == 0)
        assert send.sum() == 1
        mine = (tl.gpu == g.rank) & (tl.cls != RECV)
        first_start = int(tl.start_ns[mine].min())
        # stage s starts micro-batch 0 after stage s-1's send ends: the bubble at its start
        assert first_start >= int(tl.end_ns[send][0]) > 0
    stage0 = (tl.gpu == 0)
    # the first stage idles at the end while the last drains (the bubble at its end)
    assert int(tl.end_ns[stage0].max()) < tl.makespan_ns
    # GPipe's fill and drain, as cost.api.PipelineTimes computes it: sum of stages + (m-1) x slowest
    times = PipelineTimes(tl.stage_times_ns[0].astype(np.float64), MB, first=True)
    assert tl.makespan_ns == round(times.time_s)


def test_flows_link_sender_and_receiver_and_each_group(case: Any) -> None:
    _, _, tl, meta = case
    names = slice_names(tl, meta)
    per_stage = TP * DP
    sends = receives = 0
    for a, b in zip(tl.flow_src.tolist(), tl.flow_dst.tolist(), strict=True):
        assert (tl.start_ns[a], tl.end_ns[a]) == (tl.start_ns[b], tl.end_ns[b])
        assert tl.micro_batch[a] == tl.micro_batch[b] and tl.op[a] == tl.op[b]
        if tl.cls[a] == SEND:
            sends += 1
            assert tl.cls[b] == RECV and tl.gpu[b] == tl.gpu[a] + per_stage
            assert names[a].endswith("pp_send") and names[b] == names[a].replace("pp_send", "pp_recv")
        else:
            receives += 1
            assert tl.cls[a] == tl.cls[b] == COLLECTIVE and tl.gpu[b] == tl.gpu[a] + 1
            assert tl.group[a] == tl.group[b]
    # one send a micro-batch from each GPU of stage 0; one link per all-reduce, micro-batch and tp group
    assert sends == MB * per_stage
    assert receives == int((tl.cls == COLLECTIVE).sum()) // TP


def test_counters_per_gpu(case: Any) -> None:
    _, ops, tl, _ = case
    by_gpu: dict[int, dict[str, Any]] = defaultdict(dict)
    for c in tl.counters:
        by_gpu[c.gpu][c.name] = c
    assert sorted(by_gpu) == list(range(TP * PP * DP))
    for g, counters in by_gpu.items():
        busy = counters[ENGINES_BUSY]
        assert busy.value.max() <= ENGINES and busy.value[-1] == 0
        # the interconnect counter integrates to the bytes the GPU's sends and collectives put on the wire
        wire = counters[WIRE_BANDWIDTH]
        sent_bytes = float(np.sum(wire.value[:-1] * np.diff(wire.time_ns)))
        mine = (tl.gpu == g) & ((tl.cls == SEND) | (tl.cls == COLLECTIVE))
        assert sent_bytes == pytest.approx(float(ops.wire_bytes[tl.op[mine]].sum()), rel=1e-9)


@pytest.mark.parametrize("suffix", [".json", ".json.gz", ".pftrace"])
def test_written_trace_read_back(case: Any, tmp_path: Path, suffix: str) -> None:
    _, _, tl, meta = case
    path = write_cluster_trace(tl, meta, tmp_path / f"c{suffix}")
    t = read_trace(path)
    procs = {r["upid"]: r["name"] for r in t.process.to_pylist() if r["name"]}
    assert sorted(procs.values()) == sorted(g.name for g in tl.gpus)
    threads = [r for r in t.thread.to_pylist() if r["name"]]
    for upid in procs:
        assert "communication" in {r["name"] for r in threads if r["upid"] == upid}
    items = len(tl.gpus) * tl.passes * MB
    assert t.slice.num_rows == len(tl.op) + items
    assert t.flow.num_rows == len(tl.flow_src)
    # the micro-batches track: one slice per micro-batch on every GPU, stage s's first after stage s-1's
    thread_of = {r["utid"]: r for r in threads}
    track_thread = {r["id"]: r["utid"] for r in t.track.to_pylist()}
    first: dict[str, int] = {}
    for r in t.slice.to_pylist():
        th = thread_of.get(track_thread.get(r["track_id"]))  # type: ignore[arg-type]
        if th is not None and th["name"] == "micro-batches":
            proc = procs[th["upid"]]
            first[proc] = min(first.get(proc, r["ts"]), r["ts"])
            assert r["category"] == "pipeline" and r["name"].startswith("micro-batch ")
    assert len(first) == len(tl.gpus)
    stage_start = {s: {v for k, v in first.items() if f"(stage {s}," in k} for s in range(PP)}
    assert stage_start[0] == {0} and min(stage_start[1]) == int(tl.stage_times_ns[0, 0])


def _slices_with_args(path: Path) -> dict[tuple[str, str, int, int], dict[str, Any]]:
    """(process, thread, ts, dur) -> (name, category, args) of every slice, as our reader reads ``path``."""
    t = read_trace(path)
    process = {r["upid"]: r["name"] for r in t.process.to_pylist()}
    thread = {r["utid"]: (process[r["upid"]], r["name"]) for r in t.thread.to_pylist()}
    track = {r["id"]: thread[r["utid"]] for r in t.track.to_pylist() if r["utid"] is not None}
    # our Perfetto reader spells a dotted annotation name ("attr.tp", a nested key to trace_processor) "attr_tp"
    args = {r["arg_set_id"]: {k.replace(".", "_"): v for k, v in next(iter(json.loads(r["json"]).values())).items()}
            for r in t.arg_sets.to_pylist()}
    return {(*track[r["track_id"]], r["ts"], r["dur"]): {"name": r["name"], "category": r["category"],
                                                         "args": args[r["arg_set_id"]]}
            for r in t.slice.to_pylist()}


def test_json_and_protobuf_hold_the_same_slices(case: Any, tmp_path: Path) -> None:
    _, _, tl, meta = case
    from_json = _slices_with_args(write_cluster_trace(tl, meta, tmp_path / "c.json"))
    from_proto = _slices_with_args(write_cluster_trace(tl, meta, tmp_path / "c.pftrace"))
    assert len(from_json) == len(tl.op) + len(tl.gpus) * tl.passes * MB
    assert from_json == from_proto
    recv = next(v for v in from_json.values() if v["name"].endswith("pp_recv"))
    assert recv["category"] == "communication" and recv["args"]["peer"] == 0 and recv["args"]["stage"] == 1
    reduce = next(v for v in from_json.values() if v["name"].endswith("all_reduce"))
    assert reduce["args"]["group"] in ("0,1", "2,3", "4,5", "6,7") and reduce["args"]["attr_collective"] == "all_reduce"


def test_gpu_cap_and_empty_stage_are_refused() -> None:
    spec = load_model_spec("llama-3.2-1b")
    timed = time_graph(build_graph(spec, WorkloadRequest(phase="decode", batch=4, context=64),
                                   plan=ParallelPlan(pipeline_parallel=2)), load_hardware("h100-sxm"))
    problem = ScheduleProblem.from_timed(timed)
    with pytest.raises(ScheduleError, match="at most 64 GPUs; the plan has 128"):
        cluster_timeline(problem, ClusterOps.from_timed(timed, spec, 2), tensor_parallel=8, pipeline_parallel=4,
                         data_parallel=4, micro_batches=1, engines=1)
    # one layer (layer 0: stage 0) leaves stage 1 without ops
    with pytest.raises(ScheduleError, match=r"stage 1 has no ops.*--all-layers"):
        cluster_timeline(problem, ClusterOps.from_timed(timed, spec, 2), tensor_parallel=1, pipeline_parallel=2,
                         data_parallel=1, micro_batches=1, engines=1)


def test_simulate_writes_the_cluster_trace_and_one_device_is_unchanged(tmp_path: Path) -> None:
    common = dict(model="llama-3.2-1b", all_layers=True, engines=2,
                  workload=WorkloadRequest(phase="prefill", batch=2, prompt_len=64))
    run = run_simulation(SimulateRequest(**common, out=tmp_path / "c.json",  # type: ignore[arg-type]
                                         parallel=ParallelPlan(tensor_parallel=2, pipeline_parallel=2,
                                                               micro_batches=2)))
    assert run.trace_path is not None
    events = json.loads(run.trace_path.read_text())["traceEvents"]
    assert sorted(e["args"]["name"] for e in events if e.get("name") == "process_name") == [
        "GPU 0 (stage 0, tp 0, dp 0)", "GPU 1 (stage 0, tp 1, dp 0)", "GPU 2 (stage 1, tp 0, dp 0)",
        "GPU 3 (stage 1, tp 1, dp 0)"]
    summary = result_of(run).cluster
    assert run.cluster is not None and summary is not None
    assert (summary.gpus, summary.micro_batches, summary.slices) == (4, 2, len(run.cluster.op))
    assert summary.makespan_ns == run.cluster.makespan_ns
    # GPipe, 2 stages x 2 micro-batches: each stage idles while the other runs one micro-batch
    stage_ns = run.cluster.stage_times_ns[0]
    assert summary.stage_ns == stage_ns.tolist()
    assert summary.bubble == pytest.approx([1 - 2 * t / summary.makespan_ns for t in stage_ns.tolist()], abs=1e-6)
    one = run_simulation(SimulateRequest(**common, out=tmp_path / "one.json"))  # type: ignore[arg-type]
    assert one.trace_path is not None and result_of(one).cluster is None
    events = json.loads(one.trace_path.read_text())["traceEvents"]
    assert {e["pid"] for e in events} == {1}
    assert len([e for e in events if e["ph"] == "X"]) == one.problem.n


def test_cli_cluster_trace_and_bad_request(run_cli: Any, tmp_path: Path) -> None:
    out = tmp_path / "x.json"
    done = run_cli("simulate", "--model", "llama-3.2-1b", "--layers", "4", "--phase", "prefill", "--prompt-len", "64",
                   "--batch", "2", "--tp", "2", "--pp", "2", "--micro-batches", "2", "-o", str(out))
    assert done.returncode == 0, done.stderr
    assert "4 GPUs, one process each" in done.stdout
    assert "pipeline: 4 GPUs, 2 micro-batches, makespan" in done.stdout
    events = json.loads(out.read_text())["traceEvents"]
    assert len({e["pid"] for e in events}) == 4
    # 128 GPUs: over the cap, one line, exit 2, no file
    bad = tmp_path / "bad.json"
    done = run_cli("simulate", "--model", "llama-3.2-1b", "--layers", "4", "--batch", "4", "--tp", "8", "--pp", "4",
                   "--dp", "4", "-o", str(bad))
    assert done.returncode == 2
    assert "at most 64 GPUs" in done.stderr and "Traceback" not in done.stderr
    assert not bad.exists()


@pytest.mark.parametrize("suffix", [".json", ".pftrace"])
def test_real_trace_processor_reads_it(perfetto_oracle: Any, case: Any, tmp_path: Path, suffix: str) -> None:
    _, _, tl, meta = case
    path = write_cluster_trace(tl, meta, tmp_path / f"c{suffix}")
    trace = perfetto_oracle.load(path)
    assert trace.errors() == []
    gpus = len(tl.gpus)
    assert trace.query("SELECT COUNT(DISTINCT upid) AS n FROM process WHERE name LIKE 'GPU %'") == [{"n": gpus}]
    assert trace.query("SELECT COUNT(*) AS n FROM thread WHERE name = 'communication'") == [{"n": gpus}]
    items = gpus * tl.passes * MB  # the micro-batches track's slices
    assert trace.query("SELECT COUNT(*) AS n, MAX(depth) AS depth FROM slice") == [
        {"n": len(tl.op) + items, "depth": 0}]
    assert trace.query("SELECT COUNT(*) AS n FROM slice WHERE category = 'pipeline'") == [{"n": items}]
    assert trace.query("SELECT COUNT(*) AS n FROM flow") == [{"n": len(tl.flow_src)}]
    # every flow joins slices at one instant: a send and its receive, or two GPUs of one collective
    assert trace.query("SELECT COUNT(*) AS n FROM flow f JOIN slice o ON f.slice_out = o.id "
                       "JOIN slice i ON f.slice_in = i.id WHERE o.ts != i.ts OR o.dur != i.dur") == [{"n": 0}]
    # each GPU's three counters
    rows = trace.query("SELECT COUNT(*) AS n FROM process_counter_track t JOIN process p USING (upid) "
                       "WHERE p.name LIKE 'GPU %'")
    assert rows == [{"n": 3 * gpus}]
