"""A parallel plan's GPUs on one timeline: every GPU's stage scheduled as one device is, micro-batch after
micro-batch through the pipeline (GPipe), collectives at the same instant on every GPU of their group.

The graph is one device's (:func:`layerscope.graph.build_model_graph` under a plan): every GPU of a pipeline
stage runs that stage's ops of it, so one schedule per (pass, stage) serves the stage's ``tp × dp`` GPUs. Each
(pass, stage) sub-graph (the stage's ops, the edges between them) is scheduled by :func:`schedule` exactly as
``simulate`` schedules a whole graph; its makespan ``T`` is the stage's time per micro-batch. The stages then
run the micro-batches in turn (GPipe, Huang et al. 2019, arXiv 1811.06965 §2.2): stage ``s`` starts micro-batch
``j`` of pass ``k`` once stage ``s − 1`` has finished it (stage 0: once the last stage finished the pass before,
whose token it embeds) and once it has finished its own previous item, so

    start[k, j, s] = max(finish[k, j, s − 1], finish[k, j − 1, s]),   finish = start + T[k, s]

(the items of a stage in (pass, micro-batch) order; ``finish[k, −1, s]`` is the stage's last item of pass
``k − 1``). For a prefill the last stage ends at ``Σ_s T_s + (m − 1)·max_s T_s``, the fill and drain of
:class:`~layerscope.cost.api.PipelineTimes`; the bubble is each GPU's idle time before its first item and
after its last.

GPUs are numbered as the cost model places them (:func:`layerscope.cost.collectives.stage_send_crosses_node`):
stage ``s`` holds GPUs ``s·S … (s+1)·S − 1`` (``S = tp × dp``), tensor-parallel rank fastest, so GPU
``r = t + tp·(d + dp·s)``. A collective of ``g`` GPUs (``gpus`` or ``tp`` attr) spans ``g`` consecutive GPUs of
a stage (``g = tp``: a replica's tensor-parallel group; ``g = ep``: the expert-parallel group); a pipeline send
goes from GPU ``r`` to ``r + S``. No new timing: every time is the scheduler's, shifted by its item's start; a
communication op holds an engine in its stage's schedule, as ``simulate`` times it, and is drawn on the GPU's
communication track.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from layerscope.errors import ScheduleError
from layerscope.schedule.core import EngineSet, Schedule, ScheduleProblem, schedule, step_function
from layerscope.workload.steps import STEP_PREFIX

if TYPE_CHECKING:
    from layerscope.cost.timed import TimedGraph
    from layerscope.model import ModelSpec

__all__ = [
    "COLLECTIVE",
    "COMPUTE",
    "ENGINES_BUSY",
    "MAX_CLUSTER_GPUS",
    "MAX_CLUSTER_SLICES",
    "MEMORY_BANDWIDTH",
    "RECV",
    "SEND",
    "WIRE_BANDWIDTH",
    "ClusterOps",
    "ClusterTimeline",
    "Counter",
    "GpuRank",
    "cluster_timeline",
    "gpu_ranks",
    "stage_bubble",
    "sub_problem",
]

#: Most GPUs one cluster trace shows (a process each); a bigger plan is refused, naming its size.
MAX_CLUSTER_GPUS = 64
#: Most slices one cluster trace holds (every GPU's, every micro-batch's): bounds the file and its writing time.
MAX_CLUSTER_SLICES = 4_000_000

#: Slice classes: an op on a compute engine, a collective, the pipeline send, and its receive on the next stage.
COMPUTE, COLLECTIVE, SEND, RECV = 0, 1, 2, 3

#: Counter tracks of each GPU, their unit last: engines running an op, main-memory bandwidth in use, bytes the GPU
#: puts on the interconnect per second.
ENGINES_BUSY = "engines busy"
MEMORY_BANDWIDTH = "memory bandwidth GB/s"
WIRE_BANDWIDTH = "interconnect sent GB/s"


@dataclass(frozen=True)
class GpuRank:
    """Where GPU ``rank`` sits in the plan."""

    rank: int
    stage: int
    tp: int
    dp: int

    @property
    def name(self) -> str:
        return f"GPU {self.rank} (stage {self.stage}, tp {self.tp}, dp {self.dp})"


def gpu_ranks(tensor_parallel: int, pipeline_parallel: int, data_parallel: int) -> tuple[GpuRank, ...]:
    """Every GPU of the plan in rank order: ``r = t + tp·(d + dp·s)``."""
    tp, dp = tensor_parallel, data_parallel
    return tuple(GpuRank(t + tp * (d + dp * s), s, t, d)
                 for s in range(pipeline_parallel) for d in range(dp) for t in range(tp))


@dataclass(frozen=True, eq=False)
class ClusterOps:
    """What the cluster timeline needs of each op of the device graph."""

    stage: np.ndarray
    """int64 pipeline stage of each op (:func:`layerscope.cost.api.op_stages`)."""
    step: np.ndarray
    """int64 pass of each op: 0 for a one-pass graph, the decode step's order in a multi-step graph."""
    comm: np.ndarray
    """int8 class of each op: :data:`COMPUTE`, :data:`COLLECTIVE` or :data:`SEND`."""
    group_gpus: np.ndarray
    """int64 GPUs of each collective's group (1 for other ops)."""
    wire_bytes: np.ndarray
    """float64 bytes each op puts on the wire from one GPU (``Op.comm_bytes``)."""

    @classmethod
    def from_timed(cls, timed: TimedGraph, spec: ModelSpec, pipeline_parallel: int) -> ClusterOps:
        from layerscope.cost.api import op_stages

        ops = timed.graph.ops
        n = len(ops)
        comm = np.zeros(n, dtype=np.int8)
        group = np.ones(n, dtype=np.int64)
        wire = np.zeros(n, dtype=np.float64)
        step_no = np.full(n, -1, dtype=np.int64)
        for i, op in enumerate(ops):
            m = STEP_PREFIX.match(op.name)
            if m:
                step_no[i] = int(m.group(1))
            if op.kind != "communication":
                continue
            attrs = dict(op.attrs)
            wire[i] = float(op.comm_bytes)
            if attrs.get("collective") == "send_recv":
                comm[i] = SEND
            else:
                comm[i] = COLLECTIVE
                group[i] = int(attrs.get("gpus") or attrs.get("tp") or 1)  # type: ignore[call-overload]
        _, step = np.unique(step_no, return_inverse=True)
        return cls(op_stages(timed.graph, spec, pipeline_parallel), step.astype(np.int64), comm, group, wire)


def sub_problem(problem: ScheduleProblem, ops: np.ndarray) -> ScheduleProblem:
    """The problem of the ops ``ops`` (increasing indices) and the edges between them, in their order."""
    n = problem.n
    keep = np.zeros(n, dtype=bool)
    keep[ops] = True
    new_index = np.cumsum(keep) - 1
    owner = np.repeat(np.arange(n, dtype=np.int64), np.diff(problem.indptr))
    edge = keep[owner] & keep[problem.indices]
    counts = np.bincount(new_index[owner[edge]], minlength=len(ops))
    indptr = np.zeros(len(ops) + 1, dtype=np.int64)
    np.cumsum(counts, out=indptr[1:])
    return ScheduleProblem(indptr, new_index[problem.indices[edge]], problem.compute_s[ops],
                           problem.memory_bytes[ops], problem.overhead_s[ops], problem.bandwidth_bytes_per_s,
                           problem.name)


@dataclass(frozen=True, eq=False)
class Counter:
    """One counter track of one GPU: a step function."""

    gpu: int
    name: str
    time_ns: np.ndarray
    value: np.ndarray


@dataclass(frozen=True, eq=False)
class ClusterTimeline:
    """Every GPU's slices, flows and counters. Slices are laid out GPU after GPU, each GPU's in time order.

    A slice's track is its compute engine (``0 … engines − 1``) or communication lane ``engines + l`` (lane 0:
    the ``communication`` track; a lane more wherever transfers overlap on one GPU, e.g. a stage receiving the
    next micro-batch while it sends its own)."""

    gpus: tuple[GpuRank, ...]
    engines: EngineSet
    lanes: int
    """Communication lanes of the busiest GPU (every GPU gets as many tracks)."""
    policy: str
    micro_batches: int
    passes: int
    stage_times_ns: np.ndarray
    """int64 ``[passes, stages]``: each stage's makespan per micro-batch."""
    item_start_ns: np.ndarray
    """int64 ``[passes, micro_batches, stages]``: when each stage starts each micro-batch of each pass."""
    gpu: np.ndarray
    """int64 GPU rank of each slice."""
    track: np.ndarray
    op: np.ndarray
    """int64 op of each slice (for a receive, the send's op)."""
    cls: np.ndarray
    """int8 :data:`COMPUTE`, :data:`COLLECTIVE`, :data:`SEND` or :data:`RECV`."""
    start_ns: np.ndarray
    end_ns: np.ndarray
    micro_batch: np.ndarray
    step: np.ndarray
    peer: np.ndarray
    """int64 the other GPU of a send or receive, -1 for other slices."""
    group: np.ndarray
    """int64 first GPU of a collective's group, -1 for other slices."""
    group_gpus: np.ndarray
    flow_src: np.ndarray
    """int64 slice each flow leaves (the sender; a collective's lower-ranked GPU)."""
    flow_dst: np.ndarray
    counters: tuple[Counter, ...]

    @property
    def makespan_ns(self) -> int:
        return int(self.end_ns.max()) if len(self.end_ns) else 0

    def lane_name(self, lane: int) -> str:
        return "communication" if lane == 0 else f"communication {lane + 1}"

    def items(self, stage: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The (pass, micro-batch) items a GPU of ``stage`` runs, in order: ``(step, micro_batch, start_ns,
        end_ns)``; the gaps before the first, between and after the last are its share of the bubble."""
        starts = self.item_start_ns[:, :, stage]
        steps, mbs = np.indices(starts.shape)
        ends = starts + self.stage_times_ns[:, stage][:, None]
        return steps.ravel(), mbs.ravel(), starts.ravel(), ends.ravel()


@dataclass
class _Stage:
    """One stage's slices for one of its GPUs (every GPU of the stage has the same)."""

    op: list[np.ndarray]
    start: list[np.ndarray]
    end: list[np.ndarray]
    engine: list[np.ndarray]
    mb: list[np.ndarray]
    step: list[np.ndarray]
    cls: list[np.ndarray]
    bw_t: list[np.ndarray]
    bw_v: list[np.ndarray]


def _lanes(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Interval partitioning: each interval on the lowest lane free at its start (intervals by start)."""
    lane = np.zeros(len(start), dtype=np.int64)
    free: list[int] = []  # lanes free again, lowest first
    busy: list[tuple[int, int]] = []  # (end, lane) of lanes in use
    count = 0
    for i in np.lexsort((end, start)).tolist():
        s = int(start[i])
        while busy and busy[0][0] <= s:
            _, ln = heapq.heappop(busy)
            heapq.heappush(free, ln)
        if free:
            ln = heapq.heappop(free)
        else:
            ln, count = count, count + 1
        lane[i] = ln
        heapq.heappush(busy, (int(end[i]), ln))
    return lane


def cluster_timeline(problem: ScheduleProblem, ops: ClusterOps, *, tensor_parallel: int, pipeline_parallel: int,
                     data_parallel: int, micro_batches: int, engines: int | EngineSet, policy: str = "list",
                     share_bandwidth: bool = True) -> ClusterTimeline:
    """The timeline of every GPU of the plan (module docstring) for the device graph of ``problem``."""
    tp, pp, dp, m = tensor_parallel, pipeline_parallel, data_parallel, micro_batches
    ranks = gpu_ranks(tp, pp, dp)
    if len(ranks) > MAX_CLUSTER_GPUS:
        raise ScheduleError(f"a cluster trace shows at most {MAX_CLUSTER_GPUS} GPUs; the plan has {len(ranks)} "
                            f"(tp {tp} x pp {pp} x dp {dp}): lower --tp, --pp or --dp")
    if len(ops.stage) != problem.n:
        raise ScheduleError(f"cluster ops: {len(ops.stage)} for a problem of {problem.n}")
    passes = int(ops.step.max(initial=-1)) + 1
    per_stage = tp * dp
    scheds: dict[tuple[int, int], tuple[np.ndarray, Schedule]] = {}
    stage_ns = np.zeros((passes, pp), dtype=np.int64)
    for k in range(passes):
        for s in range(pp):
            idx = np.flatnonzero((ops.step == k) & (ops.stage == s))
            if len(idx) == 0:
                raise ScheduleError(f"pipeline stage {s} has no ops in this graph: a cluster trace with "
                                    f"pipeline_parallel={pp} needs the whole model (--all-layers or --layers N)")
            sch = schedule(sub_problem(problem, idx), engines, policy, share_bandwidth)
            scheds[k, s] = (idx, sch)
            stage_ns[k, s] = sch.makespan_ns
    n_slices = sum(len(idx) for idx, _ in scheds.values()) * m * per_stage
    if n_slices > MAX_CLUSTER_SLICES:
        raise ScheduleError(f"a cluster trace of {n_slices} slices exceeds {MAX_CLUSTER_SLICES}: simulate fewer "
                            "decode steps, micro-batches or GPUs")
    first = next(iter(scheds.values()))[1]
    engine_set = first.engines
    n_eng = engine_set.count

    # GPipe: start[k, j, s] = max(finish[k, j, s-1], finish of the stage's previous item).
    start = np.zeros((passes, m, pp), dtype=np.int64)
    free = np.zeros(pp, dtype=np.int64)
    for k in range(passes):
        for j in range(m):
            for s in range(pp):
                if s > 0:
                    ready = start[k, j, s - 1] + stage_ns[k, s - 1]
                elif k > 0:
                    ready = start[k - 1, j, pp - 1] + stage_ns[k - 1, pp - 1]
                else:
                    ready = 0
                start[k, j, s] = max(int(ready), int(free[s]))
                free[s] = start[k, j, s] + stage_ns[k, s]

    # One GPU's slices per stage; every GPU of the stage repeats them.
    stages = [_Stage([], [], [], [], [], [], [], [], []) for _ in range(pp)]
    for k in range(passes):
        for j in range(m):
            for s in range(pp):
                idx, sch = scheds[k, s]
                off = start[k, j, s]
                st = stages[s]
                cls = ops.comm[idx]
                st.op.append(idx)
                st.start.append(sch.start_ns + off)
                st.end.append(sch.end_ns + off)
                st.engine.append(sch.engine.astype(np.int64))
                st.mb.append(np.full(len(idx), j, np.int64))
                st.step.append(np.full(len(idx), k, np.int64))
                st.cls.append(cls)
                st.bw_t.append(sch.bandwidth_time_ns + off)
                st.bw_v.append(sch.bandwidth_bytes_per_s)
                if s + 1 < pp:
                    send = np.flatnonzero(cls == SEND)
                    nxt = stages[s + 1]
                    nxt.op.append(idx[send])
                    nxt.start.append(sch.start_ns[send] + off)
                    nxt.end.append(sch.end_ns[send] + off)
                    nxt.engine.append(np.zeros(len(send), np.int64))
                    nxt.mb.append(np.full(len(send), j, np.int64))
                    nxt.step.append(np.full(len(send), k, np.int64))
                    nxt.cls.append(np.full(len(send), RECV, np.int8))

    base: list[dict[str, np.ndarray]] = []
    lanes = 1
    counters_of_stage: list[list[tuple[str, np.ndarray, np.ndarray]]] = []
    for st in stages:
        b = {name: np.concatenate(getattr(st, name)) for name in ("op", "start", "end", "engine", "mb", "step")}
        b["cls"] = np.concatenate(st.cls).astype(np.int8)
        comm = b["cls"] != COMPUTE
        track = b["engine"].copy()
        lane = _lanes(b["start"][comm], b["end"][comm])
        track[comm] = n_eng + lane
        lanes = max(lanes, int(lane.max(initial=-1)) + 1)
        b["track"] = track
        order = np.lexsort((b["track"], b["start"]))
        b = {key: v[order] for key, v in b.items()}
        base.append(b)
        counters_of_stage.append(_counters(b, st, ops))

    # Every GPU's slices: its stage's, GPU after GPU.
    count = np.array([len(base[g.stage]["op"]) for g in ranks], dtype=np.int64)
    first_slice = np.zeros(len(ranks) + 1, dtype=np.int64)
    np.cumsum(count, out=first_slice[1:])
    cols: dict[str, list[np.ndarray]] = {key: [] for key in ("op", "start", "end", "track", "mb", "step", "cls")}
    gpu_col, peer_col, group_col, ggpus_col = [], [], [], []
    counters: list[Counter] = []
    for g in ranks:
        b = base[g.stage]
        n = len(b["op"])
        for key in cols:
            cols[key].append(b[key])
        gpu_col.append(np.full(n, g.rank, np.int64))
        peer = np.full(n, -1, np.int64)
        peer[b["cls"] == SEND] = g.rank + per_stage
        peer[b["cls"] == RECV] = g.rank - per_stage
        peer_col.append(peer)
        size = np.where(b["cls"] == COLLECTIVE, ops.group_gpus[b["op"]], 1)
        local = g.rank - g.stage * per_stage
        group_col.append(np.where(b["cls"] == COLLECTIVE, g.stage * per_stage + local // size * size, -1))
        ggpus_col.append(size)
        counters += [Counter(g.rank, name, t, v) for name, t, v in counters_of_stage[g.stage]]
    col = {key: np.concatenate(v) for key, v in cols.items()}
    gpu = np.concatenate(gpu_col)
    group = np.concatenate(group_col)
    group_gpus = np.concatenate(ggpus_col)

    # Flows: within each collective's group, GPU to the next GPU; each send to its receive.
    src: list[np.ndarray] = []
    dst: list[np.ndarray] = []
    for g in ranks:
        b = base[g.stage]
        here = first_slice[g.rank]
        coll = np.flatnonzero(b["cls"] == COLLECTIVE)
        size = ops.group_gpus[b["op"][coll]]
        local = g.rank - g.stage * per_stage
        chained = coll[(size > 1) & ((local + 1) % size != 0) & (local + 1 < per_stage)]
        src.append(here + chained)
        dst.append(first_slice[g.rank + 1] + chained)
        if g.stage + 1 < pp:
            send = np.flatnonzero(b["cls"] == SEND)
            nb = base[g.stage + 1]
            recv = np.flatnonzero(nb["cls"] == RECV)
            # A send and its receive have the same (pass, micro-batch, op); both lists are in time order.
            if len(send) != len(recv):
                raise ScheduleError(f"stage {g.stage}: {len(send)} sends but {len(recv)} receives")
            src.append(here + send)
            dst.append(first_slice[g.rank + per_stage] + recv)
    flow_src, flow_dst = np.concatenate(src), np.concatenate(dst)
    # A flow binds to the slice around its midpoint: an empty slice has none.
    bound = (col["end"][flow_src] > col["start"][flow_src]) & (col["end"][flow_dst] > col["start"][flow_dst])
    return ClusterTimeline(
        ranks, engine_set, lanes, first.policy, m, passes, stage_ns, start, gpu, col["track"], col["op"], col["cls"],
        col["start"], col["end"], col["mb"], col["step"], np.concatenate(peer_col), group, group_gpus,
        flow_src[bound], flow_dst[bound], tuple(counters))


#: Counter levels within this of each other are one value, and within this of 0 are 0 (float sums of +x and -x).
_COUNTER_ATOL = 1e-9


def _counters(b: dict[str, np.ndarray], st: _Stage, ops: ClusterOps) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """A stage GPU's counters: engines running an op, main-memory bandwidth in use (the schedules' own step
    functions, item after item), and bytes it puts on the wire per second (each transfer's bytes spread over its
    slice: bytes per ns are GB/s)."""
    compute = b["cls"] == COMPUTE
    ones = np.ones(int(compute.sum()), np.float64)
    busy = step_function(np.concatenate([b["start"][compute], b["end"][compute]]), np.concatenate([ones, -ones]),
                         atol=_COUNTER_ATOL)
    # Items never overlap on a stage: concatenated in order, a later item's first value wins at a shared instant.
    bw_t = np.concatenate(st.bw_t) if st.bw_t else np.zeros(0, np.int64)
    bw_v = np.concatenate(st.bw_v) / 1e9 if st.bw_v else np.zeros(0)
    keep = np.ones(len(bw_t), dtype=bool)
    keep[:-1] = bw_t[1:] != bw_t[:-1]
    bw = (bw_t[keep], bw_v[keep])
    sent = (b["cls"] == SEND) | (b["cls"] == COLLECTIVE)
    dur = (b["end"] - b["start"]).astype(np.float64)
    sent &= dur > 0
    rate = ops.wire_bytes[b["op"][sent]] / dur[sent]
    wire = step_function(np.concatenate([b["start"][sent], b["end"][sent]]), np.concatenate([rate, -rate]),
                         atol=_COUNTER_ATOL)
    return [(ENGINES_BUSY, busy[0], busy[1]), (MEMORY_BANDWIDTH, *bw), (WIRE_BANDWIDTH, *wire)]


def stage_bubble(timeline: ClusterTimeline) -> Sequence[float]:
    """Each stage's idle share of the makespan (the pipeline bubble), 0..1."""
    span = timeline.makespan_ns
    busy = timeline.stage_times_ns.sum(axis=0) * timeline.micro_batches
    return [1.0 - float(b) / span if span else 0.0 for b in busy.tolist()]
