"""``plan``: every valid way to split a model over a range of GPU counts, ranked by latency, by throughput per GPU or
by output tokens per joule.

A plan is tensor × pipeline × data parallelism (with expert parallelism over the devices of a stage for MoE models,
and micro-batches through the pipeline), checked against the model (:func:`layerscope.workload.check_parallel`:
heads, KV heads, experts, layers per stage), the GPUs the cluster has, each device's memory and the NVLink domain a
collective may need a network to leave; each valid plan is timed by the same :func:`layerscope.cost.api.estimate`
that ``estimate --tp --pp --ep --dp`` runs, so a plan's numbers are the estimate's. Plans whose per-device work is
the same (the same tensor and expert split and the same sequences per micro-batch) share one timed graph per
pipeline depth, so ranking a thousand plans times a few dozen graphs. Where the hardware spec has ``energy`` figures
each plan's joules are :func:`layerscope.cost.energy.estimate_energy`'s for the same plan (every rank's dynamic
joules, the power limit's stretch of each phase, idle power on every GPU for the run).
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
from layerscope.docstrings import RESULT_CONFIG
from layerscope.errors import HardwareSpecError, LayerscopeError, WorkloadError

if TYPE_CHECKING:
    from layerscope.cost.api import Estimate
    from layerscope.cost.timed import TimedGraph
    from layerscope.graph.ops import OpGraph
    from layerscope.hardware import HardwareSpec
    from layerscope.model import ModelSpec
    from layerscope.workload import Workload

__all__ = ["PlanFailure", "PlanRequest", "PlanResult", "PlanRow", "PlanShape", "enumerate_plans", "plan"]

Objective = Literal["latency", "throughput", "tokens-per-joule"]
#: The largest GPU count a plan request may span.
MAX_PLAN_GPUS = 4096


class PlanRequest(BaseModel):
    """What to plan: a model on a GPU or cluster, over a range of GPU counts, for one workload."""

    model_config = ConfigDict(**RESULT_CONFIG, arbitrary_types_allowed=True)

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
    """Rank by ``latency`` (TTFT for prefill, TPOT for decode and chunked, end to end for generate), by
    ``throughput`` per GPU, or by output ``tokens-per-joule`` (needs the hardware spec's ``energy`` figures)."""
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
    energy_j: float | None = None
    """Joules of the plan's run on all its GPUs, as ``estimate`` reports them for the same plan (``energy.energy_j``);
    ``null`` when the hardware spec has no ``energy`` figures."""
    output_tokens_per_j: float | None = None
    """Output tokens (those of ``output_tokens_per_s``) per joule of ``energy_j``; ``null`` without energy figures."""


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
    """What the plans are ranked by: ``latency``, ``throughput`` (per GPU) or ``tokens-per-joule``."""
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
    if request.objective == "tokens-per-joule" and hw.energy is None:
        raise HardwareSpecError(f"--objective tokens-per-joule: {hw.name} has no energy figures (its spec's "
                                "energy:); rank by latency or throughput, or give a spec with them (docs/energy.md)")
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
    rows.sort(key=RANKINGS[request.objective])
    return PlanResult(model=spec.name, hardware=hw.name, gpus_available=available, objective=request.objective,
                      phase=base.phase, plans=rows, failures=failures, graphs_timed=len(timer.timed))


#: Sort key of each objective: best first; ties by the other figures, then fewer GPUs.
RANKINGS: dict[str, Callable[[PlanRow], tuple[float, ...]]] = {
    "latency": lambda r: (r.latency_s, -r.output_tokens_per_s_per_gpu, r.gpus),
    "throughput": lambda r: (-r.output_tokens_per_s_per_gpu, r.latency_s, r.gpus),
    "tokens-per-joule": lambda r: (-(r.output_tokens_per_j or 0.0), r.latency_s, r.gpus),
}


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
    dynamic_j: np.ndarray | None = None
    """Each op's dynamic joules (summed over the passes, :mod:`layerscope.cost.energy`); None without energy
    figures."""
    compute: np.ndarray | None = None
    """Whether each op is compute-bound (what the power limit stretches)."""


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
        self._sends: dict[tuple[float, bool], tuple[float, float]] = {}
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
        from layerscope.cost.energy import op_dynamic_energy_j
        from layerscope.cost.models import BOUND_NAMES

        energy = self.hw.energy is not None
        phases = [_DevicePhase(part.phase, np.asarray(part.time_s, dtype=np.float64), op_layers(part.graph),
                               communication_mask(part.graph), max(part.passes, 1), _pass_tokens(part.graph),
                               op_dynamic_energy_j(part, self.hw).total_j if energy else None,
                               np.asarray(part.bound) == BOUND_NAMES.index("compute"))
                  for part in est.phases]
        return _Device(tuple(phases), tuple(p.graph for p in est.phases), est.memory_capacity_bytes, est)

    def _by_layers(self, w1: Workload) -> _Device:
        from layerscope.cost.api import AFTER_LAYERS, BEFORE_LAYERS, communication_mask, time_graph
        from layerscope.graph.builder import build_layer_graph, build_model_graph, layer_signature

        spec = self.spec
        fwd = w1.passes()[0]
        shell = build_model_graph(spec, fwd, w1, layers=())  # embedding and head
        shell_timed = time_graph(shell, self.hw, self.request.cost_model)
        shell_t = np.asarray(shell_timed.time_s, dtype=np.float64)
        # the head starts at the final norm (graph.embedding.build_head: final norm, lm_head, sampling)
        first_head = next(i for i, op in enumerate(shell.ops) if op.name == spec.modules.final_norm)
        kinds: dict[tuple[bool, bool], tuple[np.ndarray, np.ndarray, OpGraph, np.ndarray, np.ndarray]] = {}
        shell_comm = communication_mask(shell)
        shell_dyn, shell_compute = self._energy_of(shell_timed)
        times, layers, comms = [shell_t[:first_head]], [np.full(first_head, BEFORE_LAYERS)], [shell_comm[:first_head]]
        dyns, computes = [shell_dyn[:first_head]], [shell_compute[:first_head]]
        for layer in range(spec.num_layers):
            sig = layer_signature(spec, layer)
            if sig not in kinds:
                g = build_layer_graph(spec, fwd, w1, layer=layer)
                timed = time_graph(g, self.hw, self.request.cost_model)
                kinds[sig] = (np.asarray(timed.time_s, dtype=np.float64), communication_mask(g), g,
                              *self._energy_of(timed))
            t, comm, _, dyn, compute = kinds[sig]
            times.append(t)
            layers.append(np.full(len(t), layer))
            comms.append(comm)
            dyns.append(dyn)
            computes.append(compute)
        rest = len(shell.ops) - first_head
        times.append(shell_t[first_head:])
        layers.append(np.full(rest, AFTER_LAYERS))
        comms.append(shell_comm[first_head:])
        dyns.append(shell_dyn[first_head:])
        computes.append(shell_compute[first_head:])
        phase = _DevicePhase(w1.phase, np.concatenate(times), np.concatenate(layers), np.concatenate(comms), 1,
                             _pass_tokens(shell), np.concatenate(dyns) if self.hw.energy is not None else None,
                             np.concatenate(computes))
        return _Device((phase,), (shell, *(k[2] for k in kinds.values())), self.hw.memory_capacity_bytes, None)

    def _energy_of(self, timed: TimedGraph) -> tuple[np.ndarray, np.ndarray]:
        """Each op's dynamic joules (zeros without energy figures) and whether it is compute-bound."""
        from layerscope.cost.energy import timed_dynamic_energy_j

        compute = np.array([b == "compute" for b in timed.bound], dtype=bool)
        if self.hw.energy is None:
            return np.zeros(len(compute)), compute
        return timed_dynamic_energy_j(timed).total_j, compute

    def _stage_of(self, layer: np.ndarray, pp: int) -> np.ndarray:
        from layerscope.cost.api import stage_of_layer

        table = self._of_layer.get(pp)
        if table is None:
            table = self._of_layer[pp] = stage_of_layer(self.spec, pp)
        return table[layer]

    def _send_s(self, tokens: int, crosses: bool) -> float:
        """One stage's activation send of a pass of ``tokens`` tokens, timed by the cost model as the graph's
        send op."""
        return self._send(tokens, crosses)[0]

    def _send(self, tokens: int, crosses: bool) -> tuple[float, float]:
        """One stage's activation send of a pass of ``tokens`` tokens: its time by the cost model as the graph's
        send op, and its dynamic joules (0 without energy figures)."""
        from layerscope.cost.api import time_graph
        from layerscope.graph._common import Group, make_context
        from layerscope.graph.builder import stage_send
        from layerscope.graph.ops import OpGraph

        w = self._plain
        key = (float(tokens), crosses)
        sent = self._sends.get(key)
        if sent is None:
            ctx = make_context(self.spec, (Group(1, tokens, 0),), w.weight_dtype, w.act_dtype, w.kv_dtype, 1,
                               stage_ends=(0,), stage_gpus=1)
            op = stage_send(ctx, "pp_send", "layers.0", 0, "x")
            hw = self.hw
            if hw.interconnect is not None:  # stage 0 of one-GPU stages: on one-GPU domains the pair crosses
                hw = hw.model_copy(update={"interconnect": hw.interconnect.model_copy(
                    update={"domain_gpus": 1 if crosses else None})})
            timed = time_graph(OpGraph(ops=(op,), name="send"), hw, self.request.cost_model)
            sent = self._sends[key] = (float(timed.time_s.sum()), float(self._energy_of(timed)[0].sum()))
        return sent

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
        energy = _PlanEnergy()
        for ph in dev.phases:
            total += float(ph.time_s.sum())
            comm += float(ph.time_s[ph.comm].sum())
            sends_s = sends_j = 0.0
            if c.pp == 1 and c.m == 1:
                phase_s[ph.phase] = float(ph.time_s.sum())
                energy.add_phase(ph, 0.0, 0.0, self.hw)
                continue
            times = np.bincount(self._stage_of(ph.layer, c.pp), weights=ph.time_s, minlength=c.pp) / ph.passes
            for s in range(c.pp - 1):
                send, send_j = self._send(ph.tokens, stage_send_crosses_node(s, c.tp * c.dp, domain))
                times[s] += send
                comm += send * ph.passes
                total += send * ph.passes
                sends_s += send * ph.passes
                sends_j += send_j * ph.passes
            energy.add_phase(ph, sends_s, sends_j, self.hw)
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
        energy_j = energy.energy_j(self.hw, ranks=c.tp * c.dp, gpus=c.gpus, e2e_s=e2e)
        return PlanRow(
            **c.shape(), latency_s=e2e, output_tokens_per_s=tps, output_tokens_per_s_per_gpu=tps / c.gpus,
            memory_per_gpu_bytes=memory.total, weights_per_gpu_bytes=memory.weights,
            kv_cache_per_gpu_bytes=memory.kv_cache, memory_capacity_bytes=dev.capacity_bytes,
            communication_share=comm / total if total > 0 else 0.0,
            bubble_fraction=None if pipe_first is None else pipe_first.bubble_fraction, energy_j=energy_j,
            output_tokens_per_j=None if energy_j is None else tokens / energy_j)


class _PlanEnergy:
    """A plan's joules, as :func:`layerscope.cost.energy.estimate_energy` counts them for the same plan: per phase
    one device graph's dynamic joules (its sends included) and the stretch the board's power limit gives its
    compute-bound ops (:func:`layerscope.cost.energy.phase_energy`'s rule on the phase's summed op times); then
    ``ranks × Σ dynamic + P_idle × GPUs × (end to end + Σ stretch)``."""

    def __init__(self) -> None:
        self.dynamic_j = 0.0
        self.stretch_s = 0.0

    def add_phase(self, ph: _DevicePhase, sends_s: float, sends_j: float, hw: HardwareSpec) -> None:
        if ph.dynamic_j is None or hw.energy is None or ph.compute is None:
            return
        from layerscope.cost.energy import power_limit_factor

        dyn_j = float(ph.dynamic_j.sum()) + sends_j
        total_s = float(ph.time_s.sum()) + sends_s
        compute_s = float(ph.time_s[ph.compute].sum())
        factor = power_limit_factor(dyn_j, total_s, compute_s, hw.energy)
        self.dynamic_j += dyn_j
        self.stretch_s += (factor - 1.0) * compute_s

    def energy_j(self, hw: HardwareSpec, *, ranks: int, gpus: int, e2e_s: float) -> float | None:
        if hw.energy is None:
            return None
        return ranks * self.dynamic_j + hw.energy.idle_power_w * gpus * (e2e_s + self.stretch_s)


def _pass_tokens(graph: OpGraph) -> int:
    """Tokens of one pass of ``graph`` (the rows of its embedding's or first norm's output)."""
    for op in graph.ops:
        if op.kind in ("norm", "embedding") and op.outputs:
            return int(op.outputs[0].shape[0])
    raise WorkloadError(f"{graph.name}: no op gives the pass's token count")
