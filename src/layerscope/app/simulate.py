"""``simulate``: a model's op graph timed on a hardware spec and scheduled on N compute engines that share
memory bandwidth, one schedule per engine count, the chosen one written as a Perfetto trace.

:func:`simulate` takes one :class:`SimulateRequest` and returns one :class:`SimulateResult` (its schema:
docs/schema/simulate.json); :func:`run_simulation` returns the arrays behind it (:class:`SimulationRun`)
for verbs that go on computing with them (validate, demo, the golden traces).
"""

from __future__ import annotations

import dataclasses
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from layerscope.app.requests import (
    DEFAULT_ATTENTION,
    MODEL_CONFIG,
    AttentionView,
    HardwareRef,
    ModelRef,
    ParallelPlan,
    WorkloadRequest,
    check_devices,
)
from layerscope.docstrings import RESULT_CONFIG
from layerscope.errors import ScheduleError
from layerscope.schedule.core import Schedule, ScheduleProblem, get_policy
from layerscope.schedule.sweep import Sweep, parse_engine_counts, sweep_engines

if TYPE_CHECKING:
    from layerscope.cost.timed import TimedGraph
    from layerscope.graph import OpGraph
    from layerscope.model import ModelSpec
    from layerscope.schedule.cluster import ClusterTimeline
    from layerscope.trace.writers import TraceMetadata

log = logging.getLogger(__name__)

__all__ = ["SIMULATED_PHASES", "ClusterSummary", "SimulateRequest", "SimulateResult", "SimulationRun", "build_graph",
           "run_simulation", "simulate", "with_power"]

#: Phases one simulated graph is built for (``generate`` is a prefill and many decode steps: simulate
#: ``decode`` with ``decode_steps``).
SIMULATED_PHASES = ("prefill", "decode", "chunked")

_RESULT_CONFIG = MODEL_CONFIG


class SimulateRequest(BaseModel):
    """What to simulate: which graph (one layer, the first N layers, the whole model, decode steps), on which
    hardware, split into how many engines, scheduled by which policy, and where to write the trace."""

    model_config = ConfigDict(**RESULT_CONFIG, arbitrary_types_allowed=True)

    model: ModelRef = "llama-3.2-1b"
    """Catalog name, Hugging Face id, ``config.json`` or directory, or a loaded ModelSpec."""
    hardware: HardwareRef = "h100-sxm"
    """Preset name or YAML/JSON/CSV/XLSX file, or a loaded HardwareSpec."""
    workload: WorkloadRequest = WorkloadRequest()
    """Phase (prefill, decode, chunked), batch, lengths, dtypes; ``decode_steps`` stacks that many decode steps
    with a growing KV cache."""
    engines: int | str | list[int] = 4
    """Engine counts: 4, ``"1..8"``, ``"1,2,4,8"``, a list, or ``"spec"`` (one per core/SM of the hardware)."""
    engine_mode: Literal["split", "add"] = "split"
    """``split``: the chip's compute divided among N engines (the work and the chip fixed); ``add``: N engines of
    ``engine_size`` each (how many engines of this size does the work need?). The memory bandwidth is the chip's in
    both (``schedule.sweep``)."""
    engine_size: float | None = Field(default=None, gt=0)
    """In ``add`` mode: each engine's share of the chip's compute (0.25 = a quarter of the chip)."""

    @model_validator(mode="after")
    def _engine_size_with_add(self) -> SimulateRequest:
        if self.engine_mode == "add" and self.engine_size is None:
            raise ValueError("engine_mode 'add' needs engine_size, each engine's share of the chip's compute "
                             "(--engine-size 0.25: a quarter of the chip)")
        if self.engine_mode == "split" and self.engine_size is not None:
            raise ValueError("engine_size is for engine_mode 'add' (split divides the chip into N equal engines)")
        return self
    policy: str = "list"
    """Registered scheduling policy: ``list`` (HEFT ranks, never worse than program order) or ``in-order``."""
    share_bandwidth: bool = True
    """Engines share the chip's memory bandwidth (False: each sees all of it)."""
    cost_model: str = "roofline"
    """Registered cost model that times each op."""
    attention: AttentionView = DEFAULT_ATTENTION
    """``fused`` (one attention op) or ``unfused`` (QKᵀ, softmax and PV as their own ops)."""
    all_layers: bool = False
    """The whole model (embedding to lm_head), not one layer."""
    layer: int = Field(default=0, ge=0)
    """The decoder layer simulated alone (when not ``all_layers``)."""
    out: Path | None = None
    """Trace to write: ``.json``, ``.json.gz`` or ``.pftrace``; ``None`` writes none. With a plan of more than one
    device, a cluster trace: one process per GPU, the micro-batches through the pipeline (:func:`write_cluster`).
    Where the hardware spec has energy figures, each GPU gets a power counter (``power W``, :func:`with_power`)."""
    parallel: ParallelPlan = ParallelPlan()
    """How the model is split across devices: the graph simulated is one device's (its share of the batch, its
    heads and experts, its collectives and pipeline sends)."""


@dataclass(frozen=True)
class SimulationRun:
    """What :func:`run_simulation` computed. ``schedule`` is the one written to the trace: the only one, or
    for a sweep the schedule at ``sweep.engines_used``."""

    model: str
    hardware: str
    timed: TimedGraph
    problem: ScheduleProblem
    sweep: Sweep
    schedule: Schedule
    trace_path: Path | None
    cluster: ClusterTimeline | None = None
    """The plan's GPUs on one timeline, where a cluster trace was written (:func:`write_cluster`)."""


class SweepRow(BaseModel):
    """One engine count of the sweep."""

    model_config = _RESULT_CONFIG

    engines: int
    """Engines the chip is split into."""
    makespan_ns: int
    """Time from the first op's start to the last op's end, nanoseconds."""
    speedup: float
    """One engine's makespan over this one's."""
    engine_utilization: float
    """Busy engine-time over ``engines × makespan``, 0..1."""
    bandwidth_utilization: float
    """Bytes moved over what the memory bandwidth could move in the makespan, 0..1."""
    within_tolerance: bool
    """Makespan within 2% of the sweep's best."""
    bandwidth_bound_ns: float
    """Lower bound: the memory traffic over the shared bandwidth (0 when each engine has all of it), ns."""
    dependencies_bound_ns: float
    """Lower bound: the longest chain of dependent ops, each at its time alone on one engine, ns."""
    compute_bound_ns: float
    """Lower bound: every op's engine time (arithmetic at the engine's share, overhead) over the engines, ns."""
    bound: str
    """The largest lower bound, what sets the makespan: ``bandwidth``, ``compute`` or ``dependencies``."""


class ScheduleSummary(BaseModel):
    """The schedule written to the trace."""

    model_config = _RESULT_CONFIG

    graph: str
    """The graph's name (``<model>:<phase>…``)."""
    ops: int
    """Ops scheduled."""
    engines: int
    """Engines used."""
    policy: str
    """The scheduling policy."""
    share_bandwidth: bool
    """Whether the engines shared the memory bandwidth."""
    makespan_ns: int
    """First start to last end, nanoseconds."""
    engine_utilization: float
    """Busy engine-time over ``engines × makespan``, 0..1."""
    bandwidth_utilization: float
    """Bytes moved over what the memory bandwidth could move in the makespan, 0..1."""
    engine_busy_ns: list[int]
    """Busy time of each engine, nanoseconds."""


class ClusterSummary(BaseModel):
    """The plan's GPUs in the cluster trace: each stage's schedule, the micro-batches through the pipeline."""

    model_config = _RESULT_CONFIG

    gpus: int
    """GPUs in the trace, one process each."""
    micro_batches: int
    """Micro-batches of each replica through the stages."""
    makespan_ns: int
    """First start to last end over every GPU, nanoseconds."""
    stage_ns: list[int]
    """Each stage's time per micro-batch (its schedule's makespan, summed over the passes), nanoseconds."""
    bubble: list[float]
    """Each stage's idle share of the makespan (the pipeline bubble), 0..1."""
    slices: int
    """Op slices in the trace (every GPU, every micro-batch; the micro-batches track not counted)."""
    flows: int
    """Flows: each send to its receive, and GPU to GPU along each collective's group."""


class SimulateResult(BaseModel):
    """The answer of ``layerscope simulate``: its ``--json`` output."""

    model_config = _RESULT_CONFIG

    model: str
    """The model's name."""
    hardware: str
    """The hardware spec's name."""
    graph: str
    """The simulated graph's name."""
    ops: int
    """Ops in the graph."""
    dependencies: int
    """Dependency edges between them."""
    cost_model: str
    """The cost model that timed the ops."""
    policy: str
    """The scheduling policy."""
    share_bandwidth: bool
    """Whether the engines shared the memory bandwidth."""
    bandwidth_bytes_per_s: float
    """The memory bandwidth the engines share, bytes per second."""
    sum_of_op_times_ns: int
    """The ops' durations summed (one engine with no overlap), nanoseconds."""
    sweep: list[SweepRow]
    """One row per engine count."""
    engine_mode: str = "split"
    """The question the sweep asked: ``split`` (a fixed chip divided into N engines) or ``add`` (N engines of
    ``engine_size`` each)."""
    engine_size: float | None = None
    """In ``add`` mode: each engine's share of the chip's compute."""
    curve: str = ""
    """Why the makespan moves as it does over the engine counts, in words (from each row's ``bound``)."""
    engines_used: int
    """The smallest engine count whose makespan is within 2% of the best (its schedule is the one written)."""
    schedule: ScheduleSummary
    """The schedule written to the trace."""
    trace: str | None
    """The trace written, or ``null``."""
    cluster: ClusterSummary | None = None
    """The cluster trace's timeline (a plan of more than one GPU with a trace), else ``null``."""


def build_graph(spec: ModelSpec, workload: WorkloadRequest, *, all_layers: bool = False, layer: int = 0,
                attention: AttentionView = DEFAULT_ATTENTION, plan: ParallelPlan | None = None) -> OpGraph:
    """The op graph of one layer (default), the whole model (``all_layers``), or ``workload.decode_steps``
    decode steps with a growing KV cache (from ``context`` for decode and chunked, from ``prompt_len`` after a
    prefill)."""
    from layerscope.graph import build_layer_graph, build_model_graph, build_steps_graph

    if workload.phase not in SIMULATED_PHASES:
        raise ScheduleError(f"phase: {workload.phase!r} cannot be simulated as one graph; known: "
                            f"{', '.join(SIMULATED_PHASES)} (decode steps of a generation: --phase decode "
                            "--decode-steps N)")
    built = workload.to_workload(plan)
    steps = workload.decode_steps
    if steps is not None:
        if steps < 1:
            raise ScheduleError(f"decode_steps: {steps} must be >= 1")
        return build_steps_graph(spec, built, steps, attention, all_layers=all_layers)
    fwd = built.passes()[0]
    if all_layers:
        return build_model_graph(spec, fwd, built, attention)
    return build_layer_graph(spec, fwd, built, layer, attention)


def run_simulation(request: SimulateRequest) -> SimulationRun:
    """Build the graph of ``request``, time it, schedule it on each engine count, and write the trace."""
    from layerscope.hardware import HardwareSpec, load_hardware
    from layerscope.model import ModelSpec, load_model_spec

    get_policy(request.policy)
    engines = request.engines
    # "spec": one engine per core/SM/CU of the hardware spec, each owning 1/count of the chip.
    from_spec = isinstance(engines, str) and engines.strip().lower() == "spec"
    counts = [] if from_spec else list(parse_engine_counts(engines))
    inputs: list[str | os.PathLike[str]] = []
    if isinstance(request.model, ModelSpec):
        spec = request.model
    else:
        spec = load_model_spec(os.fspath(request.model))
        inputs.append(request.model)
    check_devices(request.hardware, request.parallel)
    if request.engine_mode == "add" and request.parallel.devices > 1:
        from layerscope.errors import ScheduleError

        raise ScheduleError("--engine-mode add times one chip's engines; a plan over several GPUs splits each GPU "
                            "(engine mode split)")
    if isinstance(request.hardware, HardwareSpec):
        hw = request.hardware
    else:
        hw = load_hardware(os.fspath(request.hardware))
        inputs.append(request.hardware)
    if from_spec:
        counts = [hw.engines.count]
    op_graph = build_graph(spec, request.workload, all_layers=request.all_layers, layer=request.layer,
                           attention=request.attention, plan=request.parallel)
    from layerscope.cost import time_graph  # after the inputs are checked: a bad one exits before it loads

    timed = time_graph(op_graph, hw, request.cost_model)
    problem = ScheduleProblem.from_timed(timed)
    log.info("scheduling %d ops on %s engines (%s)", problem.n, counts, request.policy)
    sweep = sweep_engines(problem, counts, request.policy, request.share_bandwidth, mode=request.engine_mode,
                          engine_fraction=request.engine_size)
    chosen = sweep.schedules[counts.index(sweep.engines_used)]
    path = None
    cluster = None
    if request.out is not None:
        from layerscope.trace.writers import TraceMetadata, write_schedule_trace

        meta = with_power(TraceMetadata.from_timed(timed, process_name=f"{op_graph.name} on {hw.name}"), timed)
        kept = tuple(p for p in inputs if Path(p).exists())
        if request.parallel.devices > 1:
            path, cluster = write_cluster(timed, spec, request, chosen, meta, request.out, kept)
        else:
            path = write_schedule_trace(chosen, meta, request.out, inputs=kept)
    return SimulationRun(spec.name, hw.name, timed, problem, sweep, chosen, path, cluster)


def with_power(meta: TraceMetadata, timed: TimedGraph) -> TraceMetadata:
    """``meta`` with each op's dynamic joules and the device's idle power (the traces' power counter,
    :func:`layerscope.trace.writers.power_counter`) where the hardware spec has energy figures."""
    energy = timed.hardware.energy
    if energy is None:
        return meta
    from layerscope.cost.energy import timed_dynamic_energy_j

    return dataclasses.replace(meta, op_dynamic_j=timed_dynamic_energy_j(timed).total_j,
                               idle_power_w=energy.idle_power_w)


def write_cluster(timed: TimedGraph, spec: ModelSpec, request: SimulateRequest, chosen: Schedule,
                  meta: TraceMetadata, out: Path,
                  inputs: tuple[str | os.PathLike[str], ...]) -> tuple[Path, ClusterTimeline]:
    """The plan's GPUs as one trace (:mod:`layerscope.schedule.cluster`): each stage scheduled on the chosen
    engine count by the request's policy, the micro-batches through the pipeline, one process per GPU."""
    from layerscope.schedule.cluster import ClusterOps, cluster_timeline
    from layerscope.trace.cluster_writer import write_cluster_trace

    plan = request.parallel
    ops = ClusterOps.from_timed(timed, spec, plan.pipeline_parallel)
    timeline = cluster_timeline(
        ScheduleProblem.from_timed(timed), ops, tensor_parallel=plan.tensor_parallel,
        pipeline_parallel=plan.pipeline_parallel, data_parallel=plan.data_parallel,
        micro_batches=plan.micro_batches, engines=chosen.engines, policy=request.policy,
        share_bandwidth=request.share_bandwidth)
    log.info("cluster trace: %d GPUs, %d slices, %d flows", len(timeline.gpus), len(timeline.op),
             len(timeline.flow_src))
    return write_cluster_trace(timeline, meta, out, inputs), timeline


def result_of(run: SimulationRun) -> SimulateResult:
    """The result model of a simulation run."""
    summary: dict[str, Any] = run.schedule.summary()
    return SimulateResult(
        model=run.model, hardware=run.hardware, graph=run.problem.name, ops=run.problem.n,
        dependencies=run.problem.num_edges, cost_model=run.timed.cost_model, policy=run.schedule.policy,
        share_bandwidth=run.schedule.share_bandwidth, bandwidth_bytes_per_s=run.problem.bandwidth_bytes_per_s,
        sum_of_op_times_ns=round(float(run.timed.time_s.sum()) * 1e9),
        sweep=[SweepRow.model_validate(row) for row in run.sweep.rows], engines_used=run.sweep.engines_used,
        engine_mode=run.sweep.mode, engine_size=run.sweep.engine_fraction, curve=explain_curve(run.sweep),
        schedule=ScheduleSummary.model_validate(summary),
        trace=str(run.trace_path) if run.trace_path else None,
        cluster=None if run.cluster is None else _cluster_summary(run.cluster),
    )


#: What each bound means for the curve, in the words of :func:`explain_curve`.
_BOUND_WORDS = {
    "bandwidth": "bandwidth-bound (the memory traffic over the shared bandwidth sets the time; engines cannot help)",
    "dependencies": "dependency-bound (the chain of dependent ops, each on one engine, sets the time)",
    "compute": "compute-bound (the engines' arithmetic sets the time: more engine capacity helps)",
}


def explain_curve(sweep: Sweep) -> str:
    """The sweep's question and why its makespan moves as it does: consecutive engine counts with the same bound
    grouped, each group with its makespans."""
    rows = sweep.rows
    if sweep.mode == "add":
        question = (f"engines of {sweep.engine_fraction:g} of the chip each, added (the memory bandwidth the "
                    "chip's)")
    else:
        question = "one chip's compute split into N engines of 1/N each (the work and the bandwidth fixed)"
    parts = []
    start = 0
    for i in range(1, len(rows) + 1):
        if i == len(rows) or rows[i]["bound"] != rows[start]["bound"]:
            a, b = rows[start], rows[i - 1]
            span = (f"{a['engines']} engine{'s' if a['engines'] != 1 else ''}" if a is b else
                    f"{a['engines']}-{b['engines']} engines")
            ms_a, ms_b = float(a["makespan_ns"]) / 1e6, float(b["makespan_ns"]) / 1e6  # type: ignore[arg-type]
            times = f"{ms_a:.4g} ms" if a is b else f"{ms_a:.4g} -> {ms_b:.4g} ms"
            parts.append(f"{span}: {times}, {_BOUND_WORDS[str(a['bound'])]}")
            start = i
    why = ""
    if sweep.mode == "split" and len(rows) > 1 and rows[-1]["makespan_ns"] > rows[0]["makespan_ns"]:  # type: ignore[operator]
        why = (" More engines are slower here: each op runs on 1/N of the chip, so the ops that cannot overlap "
               "take N times longer; ask --engine-mode add to grow the chip instead.")
    return f"{question}. " + "; ".join(parts) + "." + why


def _cluster_summary(timeline: ClusterTimeline) -> ClusterSummary:
    from layerscope.schedule.cluster import stage_bubble

    return ClusterSummary(
        gpus=len(timeline.gpus), micro_batches=timeline.micro_batches, makespan_ns=timeline.makespan_ns,
        stage_ns=timeline.stage_times_ns.sum(axis=0).tolist(), bubble=[round(b, 6) for b in stage_bubble(timeline)],
        slices=len(timeline.op), flows=len(timeline.flow_src))


def simulate(request: SimulateRequest) -> SimulateResult:
    """Simulate ``request`` (see :func:`run_simulation`) and describe what was computed."""
    return result_of(run_simulation(request))
