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
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from layerscope.app.requests import MODEL_CONFIG, HardwareRef, ModelRef, ParallelPlan, WorkloadRequest
from layerscope.errors import LayerscopeError, WorkloadError

if TYPE_CHECKING:
    from layerscope.cost.api import Estimate
    from layerscope.graph.ops import OpGraph
    from layerscope.hardware import HardwareSpec
    from layerscope.model import ModelSpec
    from layerscope.workload import Workload

__all__ = ["PlanFailure", "PlanRequest", "PlanResult", "PlanRow", "PlanShape", "enumerate_plans", "plan"]

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


class PlanShape(BaseModel):
    """How a plan splits the model: its GPUs and degrees of parallelism."""

    model_config = MODEL_CONFIG

    gpus: int
    """GPUs the plan occupies."""
    tensor_parallel: int
    """Devices each layer's heads and FFN columns are split across."""
    pipeline_parallel: int
    """Pipeline stages."""
    expert_parallel: int
    """Devices the routed experts are spread over (1: split like the dense MLP)."""
    data_parallel: int
    """Replicas, each with its share of the batch."""
    micro_batches: int
    """Micro-batches per replica through the pipeline."""


class PlanRow(PlanShape):
    """One valid plan."""

    latency_s: float
    """TTFT (prefill), TPOT (decode, chunked) or end to end (generate)."""
    output_tokens_per_s: float
    """Tokens per second of the whole plan."""
    output_tokens_per_s_per_gpu: float
    """``output_tokens_per_s`` over ``gpus``."""
    memory_per_gpu_bytes: float
    """Weights, KV cache and activations on the busiest device."""
    weights_per_gpu_bytes: float
    """Weights on the busiest device."""
    kv_cache_per_gpu_bytes: float
    """KV cache on the busiest device."""
    memory_capacity_bytes: float
    """Main memory of one GPU."""
    communication_share: float
    """Communication ops' share of one device's op time (all phases)."""
    bubble_fraction: float | None
    """The pipeline's idle share (the first phase's); ``null`` without a pipeline or micro-batches."""


class PlanFailure(PlanShape):
    """A plan left out, and why."""

    reason: str
    """The broken constraint: heads, KV heads, experts, layers per stage, GPUs available, memory per GPU, a
    collective beyond the NVLink domain with no network."""


class PlanResult(BaseModel):
    """The answer of ``layerscope plan``: valid plans ranked, and the rest with their reasons."""

    model_config = MODEL_CONFIG

    model: str
    """The model's name."""
    hardware: str
    """The GPU's spec name (the cluster's, where a cluster was given)."""
    gpus_available: int | None
    """GPUs of the cluster; ``null`` for a bare GPU spec (any count)."""
    objective: Objective
    """What the plans are ranked by: ``latency`` or ``throughput`` (per GPU)."""
    phase: str
    """The workload's phase (what ``latency_s`` measures)."""
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

    def shape(self) -> dict[str, int]:
        """The :class:`PlanShape` fields of this candidate."""
        return {"gpus": self.gpus, "tensor_parallel": self.tp, "pipeline_parallel": self.pp,
                "expert_parallel": self.ep, "data_parallel": self.dp, "micro_batches": self.m}

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


def plan(request: PlanRequest, progress: Callable[[float], None] | None = None) -> PlanResult:
    """Enumerate, check and time the plans of ``request`` (module docstring); ``progress`` is called with the
    share of candidates done."""
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
    for done, c in enumerate(candidates):
        if progress is not None and done % 64 == 0:
            progress(done / len(candidates))
        def fail(reason: str, c: Candidate = c) -> None:
            failures.append(PlanFailure(**c.shape(), reason=reason))

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


@dataclass(frozen=True)
class _DevicePhase:
    """One phase of one device's ops, timed: each op's time (summed over the phase's passes), where it sits
    (its decoder layer; -1 before the layers, -2 after them) and whether it communicates."""

    phase: str
    time_s: np.ndarray
    layer: np.ndarray
    comm: np.ndarray
    passes: int
    tokens: int
    """Tokens of one pass (what a pipeline send carries)."""


@dataclass(frozen=True)
class _Device:
    """A device's timed phases, with what the estimate of a one-stage plan adds around them."""

    phases: tuple[_DevicePhase, ...]
    graphs: tuple[OpGraph, ...]
    capacity_bytes: float
    base: Estimate | None
    """The one-stage estimate (the generate path), else None (its phases rebuilt from layer graphs)."""


class _PlanTimer:
    """Times plans through shared per-device timings.

    A device's ops depend on the tensor and expert split and on the sequences it runs per micro-batch, not on
    how many replicas or stages there are: one timing of a one-stage plan with the same per-device work serves
    every such plan (``timed``). Prefill, decode and chunked passes under the ``fused`` profile are timed one
    decoder layer per distinct layer kind (:func:`~layerscope.graph.builder.layer_signature`) plus the
    embedding and head, each op at the time the whole graph gives it (the cost models time ops one by one);
    generations and other profiles by :func:`~layerscope.cost.api.estimate` whole. A pipeline's phase is its
    stages' times plus each stage's send (timed alone by the same cost model) through
    :class:`~layerscope.cost.api.PipelineTimes`, the engine's host time per step added as ``estimate`` adds it;
    memory per device is :func:`~layerscope.cost.api.memory_footprint` of the plan itself."""

    def __init__(self, spec: ModelSpec, hw: HardwareSpec, request: PlanRequest) -> None:
        from layerscope.cost.execution import engine_terms

        self.spec, self.hw, self.request = spec, hw, request
        self.timed: dict[tuple[int, int, int], _Device] = {}
        self._sends: dict[tuple[float, bool], float] = {}
        self._of_layer: dict[int, np.ndarray] = {}
        self.terms = engine_terms(hw.execution)
        self.fast = request.workload.phase != "generate" and hw.execution.kernels == "fused"
        self._plain = request.workload.to_workload()

    def _base(self, c: Candidate, workload: Workload) -> _Device:
        key = (c.tp, c.ep, workload.micro_batch)
        dev = self.timed.get(key)
        if dev is None:
            # the fewest replicas an expert-parallel group of ep devices needs at this tp, each with the
            # candidate's sequences per micro-batch
            dp = c.ep // math.gcd(c.ep, c.tp)
            one = self.request.workload.model_copy(update={"batch": workload.micro_batch * dp})
            w1 = one.to_workload(ParallelPlan(tensor_parallel=c.tp, expert_parallel=c.ep, data_parallel=dp))
            dev = self.timed[key] = self._by_layers(w1) if self.fast else self._whole(w1)
        return dev

    def _whole(self, w1: Workload) -> _Device:
        from layerscope.cost.api import communication_mask, estimate, op_layers

        est = estimate(self.spec, self.hw, w1, cost_model=self.request.cost_model)
        phases = [_DevicePhase(part.phase, np.asarray(part.time_s, dtype=np.float64), op_layers(part.graph),
                               communication_mask(part.graph), max(part.passes, 1), _pass_tokens(part.graph))
                  for part in est.phases]
        return _Device(tuple(phases), tuple(p.graph for p in est.phases), est.memory_capacity_bytes, est)

    def _by_layers(self, w1: Workload) -> _Device:
        from layerscope.cost.api import AFTER_LAYERS, BEFORE_LAYERS, communication_mask, time_graph
        from layerscope.graph.builder import build_layer_graph, build_model_graph, layer_signature

        spec = self.spec
        fwd = w1.passes()[0]
        shell = build_model_graph(spec, fwd, w1, layers=())  # embedding and head
        shell_t = np.asarray(time_graph(shell, self.hw, self.request.cost_model).time_s, dtype=np.float64)
        # the head starts at the final norm (graph.embedding.build_head: final norm, lm_head, sampling)
        first_head = next(i for i, op in enumerate(shell.ops) if op.name == spec.modules.final_norm)
        kinds: dict[tuple[bool, bool], tuple[np.ndarray, np.ndarray, OpGraph]] = {}
        shell_comm = communication_mask(shell)
        times, layers, comms = [shell_t[:first_head]], [np.full(first_head, BEFORE_LAYERS)], [shell_comm[:first_head]]
        for layer in range(spec.num_layers):
            sig = layer_signature(spec, layer)
            if sig not in kinds:
                g = build_layer_graph(spec, fwd, w1, layer=layer)
                t = np.asarray(time_graph(g, self.hw, self.request.cost_model).time_s, dtype=np.float64)
                kinds[sig] = (t, communication_mask(g), g)
            t, comm, _ = kinds[sig]
            times.append(t)
            layers.append(np.full(len(t), layer))
            comms.append(comm)
        rest = len(shell.ops) - first_head
        times.append(shell_t[first_head:])
        layers.append(np.full(rest, AFTER_LAYERS))
        comms.append(shell_comm[first_head:])
        phase = _DevicePhase(w1.phase, np.concatenate(times), np.concatenate(layers), np.concatenate(comms), 1,
                             _pass_tokens(shell))
        return _Device((phase,), (shell, *(g for _, _, g in kinds.values())), self.hw.memory_capacity_bytes, None)

    def _stage_of(self, layer: np.ndarray, pp: int) -> np.ndarray:
        from layerscope.cost.api import stage_of_layer

        table = self._of_layer.get(pp)
        if table is None:
            table = self._of_layer[pp] = stage_of_layer(self.spec, pp)
        return table[layer]

    def _send_s(self, tokens: int, crosses: bool) -> float:
        """One stage's activation send of a pass of ``tokens`` tokens, timed by the cost model as the graph's
        send op."""
        from layerscope.cost.api import time_graph
        from layerscope.graph._common import Group, make_context
        from layerscope.graph.builder import stage_send
        from layerscope.graph.ops import OpGraph

        w = self._plain
        key = (float(tokens), crosses)
        t = self._sends.get(key)
        if t is None:
            ctx = make_context(self.spec, (Group(1, tokens, 0),), w.weight_dtype, w.act_dtype, w.kv_dtype, 1,
                               stage_ends=(0,), stage_gpus=1)
            op = stage_send(ctx, "pp_send", "layers.0", 0, "x")
            hw = self.hw
            if hw.interconnect is not None:  # stage 0 of one-GPU stages: on one-GPU domains the pair crosses
                hw = hw.model_copy(update={"interconnect": hw.interconnect.model_copy(
                    update={"domain_gpus": 1 if crosses else None})})
            t = self._sends[key] = float(time_graph(OpGraph(ops=(op,), name="send"), hw,
                                                    self.request.cost_model).time_s.sum())
        return t

    def row(self, c: Candidate) -> PlanRow:
        from layerscope.cost.api import PipelineTimes, memory_footprint
        from layerscope.cost.collectives import stage_send_crosses_node
        from layerscope.cost.execution import host_step_s, step_time_s
        from layerscope.workload import check_parallel

        workload = self.request.workload.to_workload(c.parallel())
        check_parallel(self.spec, workload)
        dev = self._base(c, workload)
        phase_s: dict[str, float] = {}
        pipe_first: PipelineTimes | None = None
        comm = total = 0.0
        domain = self.hw.interconnect.domain_gpus if self.hw.interconnect is not None else None
        for ph in dev.phases:
            total += float(ph.time_s.sum())
            comm += float(ph.time_s[ph.comm].sum())
            if c.pp == 1 and c.m == 1:
                phase_s[ph.phase] = float(ph.time_s.sum())
                continue
            times = np.bincount(self._stage_of(ph.layer, c.pp), weights=ph.time_s, minlength=c.pp) / ph.passes
            for s in range(c.pp - 1):
                send = self._send_s(ph.tokens, stage_send_crosses_node(s, c.tp * c.dp, domain))
                times[s] += send
                comm += send * ph.passes
                total += send * ph.passes
            pipe = PipelineTimes(times, c.m, ph.phase == "prefill")
            if pipe_first is None:
                pipe_first = pipe
            phase_s[ph.phase] = pipe.time_s * ph.passes
        if dev.base is not None:  # a generation: the one-stage estimate's host time around the new phases
            est = dev.base
            e2e = est.e2e_s - sum(est.phase_times_s.get(p, 0.0) for p in ("prefill", "decode")) + sum(
                phase_s.values())
        else:
            first = workload.phase == "prefill"
            seqs = -(-workload.passes()[0].num_sequences // workload.data_parallel)
            e2e = float(step_time_s(phase_s[workload.phase], host_step_s(self.terms, seqs), self.terms,
                                    first=first)) + (self.terms.request_overhead_s if first else 0.0)
        # the estimate's latency of the phase: TTFT (prefill), TPOT (a decode or chunked step), end to end
        # (generate), each the pass (or passes) with the engine's host time
        tokens = workload.batch * (workload.output_tokens if workload.phase == "generate" else 1)
        memory = memory_footprint(self.spec, workload, dev.graphs)
        tps = tokens / e2e
        return PlanRow(
            **c.shape(), latency_s=e2e, output_tokens_per_s=tps, output_tokens_per_s_per_gpu=tps / c.gpus,
            memory_per_gpu_bytes=memory.total, weights_per_gpu_bytes=memory.weights,
            kv_cache_per_gpu_bytes=memory.kv_cache, memory_capacity_bytes=dev.capacity_bytes,
            communication_share=comm / total if total > 0 else 0.0,
            bubble_fraction=None if pipe_first is None else pipe_first.bubble_fraction)


def _pass_tokens(graph: OpGraph) -> int:
    """Tokens of one pass of ``graph`` (the rows of its embedding's or first norm's output)."""
    for op in graph.ops:
        if op.kind in ("norm", "embedding") and op.outputs:
            return int(op.outputs[0].shape[0])
    raise WorkloadError(f"{graph.name}: no op gives the pass's token count")
