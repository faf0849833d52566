"""``plan``: every valid way to split a model over a range of GPU counts, ranked by latency and by throughput per GPU.

A plan is tensor × pipeline × data parallelism (with expert parallelism over the devices of a stage for MoE models,
and micro-batches through the pipeline), checked against the model (:func:`layerscope.workload.check_parallel`:
heads, KV heads, experts, layers per stage), the GPUs the cluster has, each device's memory and the NVLink domain a
collective may need a network to leave; each valid plan is timed by the same :func:`layerscope.cost.api.estimate`
that ``estimate --tp --pp --ep --dp`` runs, so a plan's numbers are the estimate's. Plans whose per-device work is
the same (the same tensor and expert split and the same sequences per micro-batch) share one timed graph per
pipeline depth, so ranking a thousand plans times a few dozen graphs.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from layerscope.app.requests import MODEL_CONFIG, HardwareRef, ModelRef, ParallelPlan, WorkloadRequest
from layerscope.errors import LayerscopeError, WorkloadError

if TYPE_CHECKING:
    from layerscope.cost.api import Estimate, PhaseOps
    from layerscope.hardware import HardwareSpec
    from layerscope.model import ModelSpec
    from layerscope.workload import Workload

__all__ = ["PlanFailure", "PlanRequest", "PlanResult", "PlanRow", "enumerate_plans", "plan"]

Objective = Literal["latency", "throughput"]
#: The largest GPU count a plan request may span.
MAX_PLAN_GPUS = 4096


class PlanRequest(BaseModel):
    """What to plan: a model on a GPU or cluster, over a range of GPU counts, for one workload."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True,
                              arbitrary_types_allowed=True)

    model: ModelRef = "llama-3.1-8b"
    """Catalog name, Hugging Face id, ``config.json`` or directory, or a loaded ModelSpec."""
    hardware: HardwareRef = "dgx-h100"
    """A cluster preset or file (its GPU count bounds the plans), or a GPU preset or file (any count)."""
    nodes: int | None = Field(default=None, gt=0, le=MAX_PLAN_GPUS)
    """Override the cluster's node count."""
    gpus: tuple[int, int] = (1, 8)
    """Smallest and largest GPU count of a plan (``--gpus 8..64``)."""
    workload: WorkloadRequest = WorkloadRequest()
    """Phase, batch, lengths and dtypes (the batch is split over the data-parallel replicas)."""
    cost_model: str = "roofline"
    """Registered cost model."""
    objective: Objective = "latency"
    """Rank by ``latency`` (TTFT for prefill, TPOT for decode and chunked, end to end for generate) or by
    ``throughput`` per GPU."""
    max_micro_batches: int = Field(default=8, gt=0, le=64)
    """Pipelines try 1, p, 2p … micro-batches up to this many."""


class PlanRow(BaseModel):
    """One valid plan."""

    model_config = MODEL_CONFIG

    gpus: int
    """GPUs the plan occupies."""
    tensor_parallel: int
    pipeline_parallel: int
    expert_parallel: int
    data_parallel: int
    micro_batches: int
    latency_s: float
    """TTFT (prefill), TPOT (decode, chunked) or end to end (generate)."""
    output_tokens_per_s: float
    """Tokens per second of the whole plan."""
    output_tokens_per_s_per_gpu: float
    """``output_tokens_per_s`` over ``gpus``."""
    memory_per_gpu_bytes: float
    """Weights, KV cache and activations on the busiest device."""
    weights_per_gpu_bytes: float
    kv_cache_per_gpu_bytes: float
    memory_capacity_bytes: float
    communication_share: float
    """Communication ops' share of one device's op time (all phases)."""
    bubble_fraction: float | None
    """The pipeline's idle share (the first phase's); ``null`` without a pipeline or micro-batches."""


class PlanFailure(BaseModel):
    """A plan left out, and why."""

    model_config = MODEL_CONFIG

    gpus: int
    tensor_parallel: int
    pipeline_parallel: int
    expert_parallel: int
    data_parallel: int
    micro_batches: int
    reason: str
    """The broken constraint: heads, KV heads, experts, layers per stage, GPUs available, memory per GPU, a
    collective beyond the NVLink domain with no network."""


class PlanResult(BaseModel):
    """The answer of ``layerscope plan``: valid plans ranked, and the rest with their reasons."""

    model_config = MODEL_CONFIG

    model: str
    hardware: str
    """The GPU's spec name (the cluster's, where a cluster was given)."""
    gpus_available: int | None
    """GPUs of the cluster; ``null`` for a bare GPU spec (any count)."""
    objective: Objective
    phase: str
    plans: list[PlanRow]
    """Valid plans, best first by ``objective`` (ties: the other objective, then fewer GPUs)."""
    failures: list[PlanFailure]
    """Plans left out, with the constraint each breaks."""
    graphs_timed: int
    """Distinct per-device graphs timed (plans sharing one are timed once)."""


@dataclass(frozen=True)
class Candidate:
    tp: int
    pp: int
    ep: int
    dp: int
    m: int

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.dp

    def parallel(self) -> ParallelPlan:
        return ParallelPlan(tensor_parallel=self.tp, pipeline_parallel=self.pp, expert_parallel=self.ep,
                            data_parallel=self.dp, micro_batches=self.m)


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def enumerate_plans(gpus: tuple[int, int], *, num_layers: int, num_experts: int | None, batch: int,
                    max_micro_batches: int) -> list[Candidate]:
    """Every (tp, pp, ep, dp, micro-batches) whose GPU count lies in ``gpus``: tp a power of two (the head
    counts of every catalog model are), pp up to the layers, dp any factor left, ep 1 or (MoE) a divisor of
    ``tp × dp`` greater than 1, micro-batches 1 without a pipeline and 1, p, 2p … up to ``max_micro_batches``
    with one. The model's own constraints are checked later, each failure kept with its reason."""
    lo, hi = gpus
    out: list[Candidate] = []
    for total in range(lo, hi + 1):
        tp = 1
        while tp <= total:
            if total % tp == 0:
                for pp in _divisors(total // tp):
                    if pp > num_layers:
                        continue
                    dp = total // (tp * pp)
                    if dp > batch:
                        continue
                    eps = [1] + ([e for e in _divisors(tp * dp) if e > 1] if num_experts else [])
                    ms = [1] if pp == 1 else sorted({1, *range(pp, max_micro_batches + 1, pp)})
                    for ep in eps:
                        for m in ms:
                            if m <= -(-batch // dp):
                                out.append(Candidate(tp, pp, ep, dp, m))
            tp *= 2
    return out


def plan(request: PlanRequest) -> PlanResult:
    """Enumerate, check and time the plans of ``request`` (module docstring)."""
    from layerscope.hardware import HardwareSpec, load_hardware
    from layerscope.hardware.cluster import cluster_of
    from layerscope.model import ModelSpec, load_model_spec

    lo, hi = request.gpus
    if not 1 <= lo <= hi <= MAX_PLAN_GPUS:
        raise WorkloadError(f"gpus: {lo}..{hi} is not a range of GPU counts within 1..{MAX_PLAN_GPUS}")
    model = request.model
    spec = model if isinstance(model, ModelSpec) else load_model_spec(os.fspath(model))
    hardware = request.hardware
    available: int | None = None
    if isinstance(hardware, HardwareSpec):
        hw = hardware
    else:
        cluster = cluster_of(os.fspath(hardware))
        if cluster is not None:
            if request.nodes is not None:
                cluster = cluster.with_nodes(request.nodes)
            hw = cluster.device_spec()
            available = cluster.total_gpus
        else:
            if request.nodes is not None:
                raise WorkloadError(f"--nodes: {hardware!r} is a GPU spec, not a cluster; give a cluster "
                                    "(`layerscope hardware` lists them)")
            hw = load_hardware(os.fspath(hardware))
    base = request.workload.to_workload()
    candidates = enumerate_plans((lo, hi), num_layers=spec.num_layers,
                                 num_experts=spec.moe.num_experts if spec.moe else None, batch=base.batch,
                                 max_micro_batches=request.max_micro_batches)
    timer = _PlanTimer(spec, hw, request)
    rows: list[PlanRow] = []
    failures: list[PlanFailure] = []
    for c in candidates:
        def fail(reason: str, c: Candidate = c) -> None:
            failures.append(PlanFailure(gpus=c.gpus, tensor_parallel=c.tp, pipeline_parallel=c.pp,
                                        expert_parallel=c.ep, data_parallel=c.dp, micro_batches=c.m, reason=reason))

        if available is not None and c.gpus > available:
            fail(f"needs {c.gpus} GPUs; {hw.name} has {available}")
            continue
        try:
            row = timer.row(c)
        except LayerscopeError as exc:
            fail(str(exc))
            continue
        if row.memory_per_gpu_bytes > row.memory_capacity_bytes:
            fail(f"needs {row.memory_per_gpu_bytes / 1e9:.1f} GB per GPU (weights "
                 f"{row.weights_per_gpu_bytes / 1e9:.1f}, KV {row.kv_cache_per_gpu_bytes / 1e9:.1f}); a GPU has "
                 f"{row.memory_capacity_bytes / 1e9:.1f} GB")
            continue
        rows.append(row)
    if request.objective == "latency":
        rows.sort(key=lambda r: (r.latency_s, -r.output_tokens_per_s_per_gpu, r.gpus))
    else:
        rows.sort(key=lambda r: (-r.output_tokens_per_s_per_gpu, r.latency_s, r.gpus))
    return PlanResult(model=spec.name, hardware=hw.name, gpus_available=available, objective=request.objective,
                      phase=base.phase, plans=rows, failures=failures, graphs_timed=len(timer.timed))


class _PlanTimer:
    """Times plans through shared per-device estimates.

    A device's ops depend on the tensor and expert split and on the sequences it runs per micro-batch, not on
    how many replicas or stages there are: one :func:`~layerscope.cost.api.estimate` of a one-stage plan with the
    same per-device work (``timed``) serves every such plan. A pipeline's phase time is then its stages' times
    (the ops binned by :func:`~layerscope.cost.api.op_stages`) plus each stage's send, timed alone by the same
    cost model, through :class:`~layerscope.cost.api.PipelineTimes`; the engine's host time per step is the
    one-stage estimate's. Memory per device is :func:`~layerscope.cost.api.memory_footprint` of the plan itself."""

    def __init__(self, spec: ModelSpec, hw: HardwareSpec, request: PlanRequest) -> None:
        self.spec, self.hw, self.request = spec, hw, request
        self.timed: dict[tuple[int, int, int], Estimate] = {}
        self._stages: dict[tuple[int, int], np.ndarray] = {}
        self._sends: dict[tuple[float, bool], float] = {}

    def _base(self, c: Candidate, workload: Workload) -> Estimate:
        from layerscope.cost.api import estimate

        key = (c.tp, c.ep, workload.micro_batch)
        est = self.timed.get(key)
        if est is None:
            # the fewest replicas an expert-parallel group of ep devices needs at this tp, each with the
            # candidate's sequences per micro-batch
            dp = c.ep // math.gcd(c.ep, c.tp)
            one = self.request.workload.model_copy(update={"batch": workload.micro_batch * dp})
            w1 = one.to_workload(ParallelPlan(tensor_parallel=c.tp, expert_parallel=c.ep, data_parallel=dp))
            est = self.timed[key] = estimate(self.spec, self.hw, w1, cost_model=self.request.cost_model)
        return est

    def _send_s(self, part: PhaseOps, crosses: bool) -> float:
        """One stage's activation send for ``part``'s pass, timed by the cost model as the graph's send op."""
        from layerscope.cost.api import time_graph
        from layerscope.graph.builder import stage_send
        from layerscope.graph.ops import OpGraph

        ctx_tokens = _pass_tokens(part)
        message = float(ctx_tokens * self.spec.hidden_size * self.request.workload.to_workload().act_dtype.bytes)
        key = (message, crosses)
        t = self._sends.get(key)
        if t is None:
            from layerscope.graph._common import Group, make_context

            w = self.request.workload.to_workload()
            ctx = make_context(self.spec, (Group(1, ctx_tokens, 0),), w.weight_dtype, w.act_dtype, w.kv_dtype, 1,
                               stage_ends=(0,), stage_gpus=1 if crosses else 0)
            op = stage_send(ctx, "pp_send", "layers.0", 0, "x")
            if crosses:  # stage 0 of one-GPU stages on one-GPU domains: the pair crosses a node
                hw = self.hw.model_copy(update={"interconnect": self.hw.interconnect.model_copy(
                    update={"domain_gpus": 1})}) if self.hw.interconnect is not None else self.hw
            else:
                hw = self.hw.model_copy(update={"interconnect": self.hw.interconnect.model_copy(
                    update={"domain_gpus": None})}) if self.hw.interconnect is not None else self.hw
            t = self._sends[key] = float(time_graph(OpGraph(ops=(op,), name="send"), hw,
                                                    self.request.cost_model).time_s.sum())
        return t

    def row(self, c: Candidate) -> PlanRow:
        from layerscope.cost.api import PipelineTimes, memory_footprint, op_stages
        from layerscope.cost.collectives import stage_send_crosses_node
        from layerscope.workload import check_parallel

        workload = self.request.workload.to_workload(c.parallel())
        check_parallel(self.spec, workload)
        est = self._base(c, workload)
        phase_s: dict[str, float] = {}
        pipe_first: PipelineTimes | None = None
        comm = total = 0.0
        domain = self.hw.interconnect.domain_gpus if self.hw.interconnect is not None else None
        for part in est.phases:
            base_s = est.phase_times_s[part.phase]
            total += float(part.time_s.sum())
            comm += float(part.time_s[_communication_mask(part)].sum())
            if c.pp == 1 and c.m == 1:
                phase_s[part.phase] = base_s
                continue
            key = (id(part.graph), c.pp)
            stages = self._stages.get(key)
            if stages is None:
                stages = self._stages[key] = op_stages(part.graph, self.spec, c.pp)
            passes = max(part.passes, 1)
            first = part.phase == "prefill"
            times = np.bincount(stages, weights=np.asarray(part.time_s, dtype=np.float64), minlength=c.pp) / passes
            for s in range(c.pp - 1):
                send = self._send_s(part, stage_send_crosses_node(s, c.tp * c.dp, domain))
                times[s] += send
                comm += send * passes
                total += send * passes
            pipe = PipelineTimes(times, c.m, first)
            if pipe_first is None:
                pipe_first = pipe
            phase_s[part.phase] = pipe.time_s * passes
        host_s = est.e2e_s - sum(est.phase_times_s.get(p, 0.0) for p in ("prefill", "decode", "chunked"))
        e2e = sum(phase_s.values()) + host_s
        # the estimate's latency of the phase: TTFT (prefill), TPOT (a decode or chunked step), end to end
        # (generate): each is the pass (or passes) plus the engine's host time, which is e2e here
        latency = e2e
        tokens = workload.batch * (workload.output_tokens if workload.phase == "generate" else 1)
        memory = memory_footprint(self.spec, workload, [p.graph for p in est.phases])
        tps = tokens / e2e
        return PlanRow(
            gpus=c.gpus, tensor_parallel=c.tp, pipeline_parallel=c.pp, expert_parallel=c.ep, data_parallel=c.dp,
            micro_batches=c.m, latency_s=latency, output_tokens_per_s=tps, output_tokens_per_s_per_gpu=tps / c.gpus,
            memory_per_gpu_bytes=memory.total, weights_per_gpu_bytes=memory.weights,
            kv_cache_per_gpu_bytes=memory.kv_cache, memory_capacity_bytes=est.memory_capacity_bytes,
            communication_share=comm / total if total > 0 else 0.0,
            bubble_fraction=None if pipe_first is None else pipe_first.bubble_fraction)


def _pass_tokens(part: PhaseOps) -> int:
    """Tokens of one pass of ``part`` (the M of its first projection)."""
    for op in part.graph.ops:
        if op.kind in ("norm", "embedding") and op.outputs:
            return int(op.outputs[0].shape[0])
    raise WorkloadError(f"{part.graph.name}: no op gives the pass's token count")


def _communication_mask(part: PhaseOps) -> np.ndarray:
    return np.fromiter((op.kind == "communication" for op in part.graph.ops), dtype=bool, count=len(part.graph.ops))
