"""Timing graphs and whole workloads: ``time_graph`` and ``estimate``.

``estimate`` answers the question of the ``estimate`` verb: for a model, a workload and a
hardware spec, the time of every op, TTFT, TPOT, throughput and the memory footprint. A
generation's decode cost is summed over every step of the growing KV cache: each op's FLOPs and
bytes are piecewise-affine in the cached length (attention and KV traffic grow by one token per
step; a sliding window caps them at its width), so the graph is built at the ends of the range
and at the window's breakpoints, and every step in between is interpolated exactly.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from typing import Literal

import numpy as np

from layerscope.cost.execution import NO_ENGINE, engine_terms, host_step_s, step_time_s
from layerscope.cost.features import OpFeatures, op_features
from layerscope.cost.models import BOUND_NAMES, CostArrays, get_cost_model
from layerscope.cost.timed import TimedGraph
from layerscope.graph.attention import AttentionView
from layerscope.graph.ops import OpGraph
from layerscope.hardware.spec import HardwareSpec
from layerscope.model.spec import ModelSpec
from layerscope.units import DType
from layerscope.workload import ForwardPass, Workload, context_warnings
from layerscope.workload.workload import pipeline_stages

#: Decode steps timed per chunk when summing a generation (bounds memory: steps x ops arrays).
_STEP_CHUNK = 256


def time_graph(graph: OpGraph, hardware: HardwareSpec, model: str = "roofline") -> TimedGraph:
    """Time every op of ``graph`` on ``hardware`` with the registered cost model ``model``."""
    cost = get_cost_model(model)(op_features(graph), hardware)
    return TimedGraph(
        graph=graph,
        hardware=hardware,
        cost_model=model,
        compute_s=cost.compute_s,
        memory_s=cost.memory_s,
        overhead_s=cost.overhead_s,
        time_s=cost.time_s,
        memory_bytes=cost.memory_bytes,
        bound=tuple(BOUND_NAMES[b] for b in cost.bound),
    )


@dataclass(frozen=True)
class OpEstimate:
    """One op's row of an estimate (for ``generate``: summed over the phase's passes)."""

    name: str
    kind: str
    phase: str
    definition: str
    matrix_class: str
    layer: int | None
    inputs: tuple[tuple[int, ...], ...]
    outputs: tuple[tuple[int, ...], ...]
    flops: float
    bytes: float
    weight_bytes: float
    act_bytes: float
    kv_bytes: float
    time_s: float
    bound: str


#: NCCL's buffer per channel and connection (``NCCL_BUFFSIZE``, 4 MiB by default: NCCL's environment-variable
#: documentation), allocated for each peer a communicator's rings and trees connect.
NCCL_BUFFER_BYTES = 4 * 2**20
#: Channels per NCCL communicator on an NVLink system (an assumption: NCCL's tuner picks 16 to 32 on H100 boards,
#: set by NCCL_MIN_NCHANNELS/NCCL_MAX_NCHANNELS).
NCCL_CHANNELS = 16


@dataclass(frozen=True)
class MemoryFootprint:
    """Bytes resident on one device."""

    weights: float
    kv_cache: float
    activations: float
    communication: float = 0.0
    """Communication buffers: NCCL's per-channel buffers of each communicator the device belongs to."""

    @property
    def total(self) -> float:
        return self.weights + self.kv_cache + self.activations + self.communication

    def as_dict(self) -> dict[str, float]:
        return {"weights": self.weights, "kv_cache": self.kv_cache, "activations": self.activations,
                "communication": self.communication, "total": self.total}


def communication_buffer_bytes(workload: Workload) -> float:
    """NCCL buffers one device holds for its plan's communicators: a tensor-parallel group, an expert-parallel
    group and the pipeline's neighbours, each ``NCCL_CHANNELS`` channels × ``NCCL_BUFFER_BYTES`` per connection,
    a send and a receive connection per channel (a ring's; a pipeline stage in the middle talks to two
    neighbours). The all-to-all's own receive buffer is the dispatch op's output, counted in the activations."""
    per_communicator = 2.0 * NCCL_CHANNELS * NCCL_BUFFER_BYTES
    groups = int(workload.tensor_parallel > 1) + int(workload.expert_parallel > 1)
    neighbours = min(2, workload.pipeline_parallel - 1)
    return per_communicator * (groups + neighbours / 2.0)


@dataclass(frozen=True)
class PhaseOps:
    """The timed ops of one phase as arrays aligned with ``graph.ops`` (rows built on demand)."""

    graph: OpGraph
    phase: str
    time_s: np.ndarray
    work: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]
    """FLOPs, weight, activation and KV bytes per op (summed over the phase's passes)."""
    bound: np.ndarray
    cost: CostArrays | None = None
    """The cost model's parts per op (summed over the phase's passes; ``bound`` at the last), for
    ``cost.explain``."""
    passes: int = 1
    """Forward passes summed into the arrays (a generation's decode steps)."""

    def rows(self) -> list[OpEstimate]:
        flops, wb, ab, kb = self.work
        out = []
        for i, op in enumerate(self.graph.ops):
            out.append(OpEstimate(
                name=op.name, kind=op.kind, phase=self.phase, definition=op.definition,
                matrix_class=op.matrix_class, layer=op.layer,
                inputs=tuple(t.shape for t in op.inputs), outputs=tuple(t.shape for t in op.outputs),
                flops=float(flops[i]), bytes=float(wb[i] + ab[i] + kb[i]), weight_bytes=float(wb[i]),
                act_bytes=float(ab[i]), kv_bytes=float(kb[i]), time_s=float(self.time_s[i]),
                bound=BOUND_NAMES[int(self.bound[i])],
            ))
        return out


@dataclass(frozen=True)
class Estimate:
    """The answer of ``layerscope estimate``; its JSON contract: docs/schema/estimate.md."""

    model: str
    hardware: str
    cost_model: str
    workload: Workload
    scope: str
    """``model`` or ``layer N``."""
    phases: tuple[PhaseOps, ...]
    ttft_s: float | None
    tpot_s: float | None
    e2e_s: float
    output_tokens_per_s: float
    memory: MemoryFootprint
    memory_capacity_bytes: float
    phase_times_s: dict[str, float] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    """What the user should know about the inputs (a context beyond the model's trained length)."""
    model_spec: ModelSpec | None = field(default=None, repr=False, compare=False)
    """The model estimated (parameter counts, ``cost.explain``)."""
    hardware_spec: HardwareSpec | None = field(default=None, repr=False, compare=False)
    """The spec the ops were timed on (the figures behind each op: ``cost.explain``)."""
    pipeline: dict[str, PipelineTimes] = field(default_factory=dict)
    """Per phase, its stages' times and micro-batches where the plan has a pipeline or micro-batches."""

    @cached_property
    def ops(self) -> tuple[OpEstimate, ...]:
        """One row per op and phase (for ``generate``: prefill ops, then decode ops over all steps)."""
        return tuple(row for part in self.phases for row in part.rows())

    @property
    def fits_in_memory(self) -> bool:
        return self.memory.total <= self.memory_capacity_bytes

    @property
    def total_time_s(self) -> float:
        return float(sum(part.time_s.sum() for part in self.phases))

    def breakdown(self, key: Literal["kind", "matrix_class", "bound", "phase"]) -> list[dict[str, object]]:
        """Time, FLOPs and bytes grouped by ``key``, largest time first, with its share."""
        groups: dict[str, list[float]] = {}
        for op in self.ops:
            g = groups.setdefault(str(getattr(op, key)), [0.0, 0.0, 0.0, 0.0])
            g[0] += op.time_s
            g[1] += op.flops
            g[2] += op.bytes
            g[3] += 1
        total = self.total_time_s or 1.0
        rows = [
            {key: k, "ops": int(v[3]), "time_s": v[0], "share": v[0] / total, "flops": v[1], "bytes": v[2]}
            for k, v in groups.items()
        ]
        return sorted(rows, key=lambda r: -float(r["time_s"]))  # type: ignore[arg-type]



def _build(spec: ModelSpec, fwd: ForwardPass, workload: Workload, attention: AttentionView,
           layer: int | None) -> OpGraph:
    from layerscope.graph import build_layer_graph, build_model_graph

    if layer is None:
        return build_model_graph(spec, fwd, workload, attention=attention)
    return build_layer_graph(spec, fwd, workload, layer=layer, attention=attention)


def _work(f: OpFeatures) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    return (f.flops, f.weight_bytes, f.act_bytes, f.kv_bytes)


def decode_breakpoints(spec: ModelSpec, contexts: range) -> list[int]:
    """Cached lengths at which to build decode graphs so that interpolation is exact.

    Per-op work is affine in the cached length c except where a sliding window W starts to
    cap the attended span min(c + 1, W): at c = W - 1. Both ends of the range are included.
    """
    lo, hi = contexts.start, contexts.stop - 1
    points = {lo, hi}
    if spec.sliding_window is not None and any(spec.layer_is_sliding(i) for i in range(spec.num_layers)):
        for c in (spec.sliding_window - 1, spec.sliding_window):
            if lo < c < hi:
                points.add(c)
    return sorted(points)


@dataclass(frozen=True)
class DecodeSum:
    """Per-op totals over every decode step of a generation and the per-step times."""

    graph: OpGraph
    step_times_s: np.ndarray
    op_time_s: np.ndarray
    op_work: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]
    last_bound: np.ndarray
    """Per op, the BOUND_* code at the last (longest-context) step."""
    op_cost: CostArrays | None = None
    """Per op, the cost model's parts summed over every step (``bound`` at the last step)."""


def sum_decode_steps(spec: ModelSpec, workload: Workload, hardware: HardwareSpec, cost_model: str,
                     attention: AttentionView = "fused", layer: int | None = None,
                     contexts: range | None = None) -> DecodeSum:
    """Time every decode step of a generation, vectorized over steps.

    Exact for the roofline (work is piecewise linear in the context between the breakpoints).
    The ``tiling`` and ``hierarchical`` models also read each GEMM's shape, taken here from the
    longest context for every step: attention's tile traffic at shorter contexts is then slightly
    off (tests/cost/test_api.py holds the mean TPOT within 0.5% of timing each step separately).
    """
    ctx = contexts if contexts is not None else workload.decode_contexts()
    points = decode_breakpoints(spec, ctx)
    graphs = [_build(spec, workload.decode_pass(c), workload, attention, layer) for c in points]
    names = [op.name for op in graphs[0].ops]
    for g in graphs[1:]:
        # Interpolation needs the same ops at every sample point.
        assert [op.name for op in g.ops] == names, "decode graphs differ in ops across contexts"
    feats = [op_features(g) for g in graphs]
    xs = np.array(points, dtype=np.float64)
    stacked = {
        attr: np.stack([getattr(f, attr) for f in feats])  # [points, ops]
        for attr in ("flops", "weight_bytes", "act_bytes", "kv_bytes")
    }
    model = get_cost_model(cost_model)
    base = feats[-1]
    all_ctx = np.arange(ctx.start, ctx.stop, dtype=np.float64)
    step_times = np.empty(len(all_ctx))
    op_time = np.zeros(len(names))
    op_work = [np.zeros(len(names)) for _ in range(4)]
    last_bound: np.ndarray | None = None
    parts = [np.zeros(len(names)) for _ in range(4)]  # compute, memory, overhead seconds and memory bytes
    for lo in range(0, len(all_ctx), _STEP_CHUNK):
        c = all_ctx[lo:lo + _STEP_CHUNK]
        work = [_interp(c, xs, stacked[a]) for a in ("flops", "weight_bytes", "act_bytes", "kv_bytes")]
        cost = model(base.with_work(*work), hardware)
        step_times[lo:lo + len(c)] = cost.time_s.sum(axis=1)
        op_time += cost.time_s.sum(axis=0)
        for acc, w in zip(op_work, work, strict=True):
            acc += w.sum(axis=0)
        for acc, part in zip(parts, (cost.compute_s, cost.memory_s, cost.overhead_s, cost.memory_bytes), strict=True):
            acc += np.broadcast_to(part, cost.time_s.shape).sum(axis=0)
        last_bound = cost.bound[-1]
    assert last_bound is not None
    return DecodeSum(graphs[-1], step_times, op_time, (op_work[0], op_work[1], op_work[2], op_work[3]),
                     last_bound, CostArrays(parts[0], parts[1], parts[2], op_time, parts[3], last_bound))


def _interp(c: np.ndarray, xs: np.ndarray, ys: np.ndarray) -> np.ndarray:
    """Piecewise-linear interpolation of every column of ys [points, ops] at c -> [len(c), ops]."""
    if len(xs) == 1:
        return np.broadcast_to(ys[0], (len(c), ys.shape[1])).copy()
    seg = np.clip(np.searchsorted(xs, c, side="right") - 1, 0, len(xs) - 2)
    x0, x1 = xs[seg], xs[seg + 1]
    t = ((c - x0) / (x1 - x0))[:, None]
    return ys[seg] * (1.0 - t) + ys[seg + 1] * t


@lru_cache(maxsize=256)
def _weight_bytes(spec: ModelSpec, dtype: DType) -> float:
    from layerscope.model.params import weight_bytes

    return float(weight_bytes(spec, dtype))


@lru_cache(maxsize=64)
def _layer_param_table(spec: ModelSpec) -> tuple[np.ndarray, float, dict[str, int]]:
    """Per decoder layer: parameters split by tensor parallelism (attention, dense MLP, router), routed experts,
    shared experts and norms (a ``layers × 4`` array); all parameters; the parameters outside the layers."""
    from layerscope.model.params import global_param_counts, layer_param_counts

    rows = []
    total = 0.0
    for layer in range(spec.num_layers):
        c = layer_param_counts(spec, layer)
        total += sum(v for k, v in c.items() if k != "routed_experts_active")
        rows.append((c["attention"] + c["dense_mlp"] + c["router"], c["routed_experts"], c["shared_experts"],
                     c["norms"]))
    glob = global_param_counts(spec)
    return np.array(rows, dtype=np.float64).reshape(-1, 4), total + sum(glob.values()), glob


def _per_device_weight_share(spec: ModelSpec, workload: Workload) -> float:
    """The largest fraction of the model's parameters one device holds under ``workload``'s plan.

    Per pipeline stage (:func:`~layerscope.workload.workload.pipeline_stages`): its layers' attention, dense MLP
    and router divided by ``tensor_parallel`` (Megatron-LM column/row parallel), routed experts by
    ``expert_parallel`` when set (whole experts) else by ``tensor_parallel``, shared experts by
    ``tensor_parallel`` without expert parallelism and whole with it (they run on each device's own tokens),
    norms whole; the vocabulary-parallel embedding on the first stage and lm_head and the final norm on the last,
    divided by ``tensor_parallel``. The busiest stage's share; 1/tp of everything without a pipeline."""
    return _weight_share(spec, workload.tensor_parallel, workload.expert_parallel, workload.pipeline_parallel)


@lru_cache(maxsize=256)
def _weight_share(spec: ModelSpec, tp: int, ep: int, pp: int) -> float:
    """:func:`_per_device_weight_share` by the plan's degrees (an estimate's fixed part: kept per plan)."""
    table, total, glob = _layer_param_table(spec)
    scale = np.array([1.0 / tp, 1.0 / (ep if ep > 1 else tp), 1.0 if ep > 1 else 1.0 / tp, 1.0])
    per_layer = table @ scale
    stages = pipeline_stages(spec.num_layers, pp)
    per_stage = np.array([per_layer[r.start:r.stop].sum() for r in stages])
    per_stage[0] += (glob["embedding"] + glob["position_embedding"]) / tp
    per_stage[-1] += glob["lm_head"] / tp + glob["norms"]
    return float(per_stage.max()) / total if total else 1.0 / tp


def memory_footprint(spec: ModelSpec, workload: Workload, graphs: Sequence[OpGraph]) -> MemoryFootprint:
    """Weights, KV cache and peak activations resident on one device (the busiest pipeline stage's).

    * weights: every parameter at the workload's weight dtype (modules the checkpoint leaves
      unquantized keep 16 bits), the device's share by :func:`_per_device_weight_share` (1/tp without
      pipeline or expert parallelism);
    * KV cache: the sequences of the device's data-parallel replica (every micro-batch's) x (longest context) x
      per-layer values per token (2·kv_heads·head_dim, or MLA's latent + RoPE key) over the stage's layers,
      sliding-window layers capped at the window, at the KV dtype, KV heads split by ``tensor_parallel``
      (never below one; MLA's latent replicated);
    * activations: the largest live set at any op — its inputs and outputs — plus the residual
      stream (tokens x hidden), at the activation dtype;
    * communication: NCCL's buffers (:func:`communication_buffer_bytes`), 0 on one device.
    """
    tp = workload.tensor_parallel
    weights = _weight_bytes(spec, workload.weight_dtype) * _per_device_weight_share(spec, workload)
    ctx = workload.max_context_len()
    seqs = workload.replica_batch + (1 if workload.phase == "chunked" else 0)
    spans = _kv_spans(spec, ctx)
    kv_values = max(int(spans[r.start:r.stop].sum()) for r in pipeline_stages(spec.num_layers,
                                                                              workload.pipeline_parallel))
    kv_heads_split = 1 if spec.mla is not None else min(tp, spec.num_kv_heads)
    kv = seqs * kv_values * workload.kv_dtype.bytes / kv_heads_split
    peak_act = max(float(op_features(g).act_bytes.max(initial=0.0)) for g in graphs)
    split = workload.data_parallel * workload.micro_batches
    tokens = max(-(-fwd.num_tokens // split) for fwd in workload.passes())
    act = peak_act + tokens * spec.hidden_size * workload.act_dtype.bytes
    return MemoryFootprint(weights=weights, kv_cache=kv, activations=act,
                           communication=communication_buffer_bytes(workload))


@lru_cache(maxsize=256)
def _kv_spans(spec: ModelSpec, context: int) -> np.ndarray:
    """KV values one sequence of ``context`` tokens holds per decoder layer (sliding-window layers capped)."""
    per_token = spec.kv_values_per_token_per_layer()
    return np.array([(min(context, spec.sliding_window) if spec.layer_is_sliding(layer) and spec.sliding_window
                      else context) * per_token for layer in range(spec.num_layers)], dtype=np.int64)


#: :func:`op_layers`' marks of the ops outside the decoder layers: before them (the embedding) and after them (final
#: norm, lm_head, sampling). Negative, so that ``layer >= 0`` selects the layers' ops.
BEFORE_LAYERS, AFTER_LAYERS = -1, -2


def op_layers(graph: OpGraph) -> np.ndarray:
    """Each op's decoder layer; :data:`BEFORE_LAYERS` for ops outside the layers before the first layer op,
    :data:`AFTER_LAYERS` after it. A multi-step graph starts over at each step's embedding."""
    out = np.empty(len(graph.ops), dtype=np.int64)
    seen_layer = False
    for i, op in enumerate(graph.ops):
        if op.layer is not None:
            out[i], seen_layer = op.layer, True
        else:
            if op.kind == "embedding":
                seen_layer = False
            out[i] = AFTER_LAYERS if seen_layer else BEFORE_LAYERS
    return out


def stage_of_layer(spec: ModelSpec, stages: int) -> np.ndarray:
    """The pipeline stage of each decoder layer (:func:`~layerscope.workload.workload.pipeline_stages`), indexable
    by :func:`op_layers`' values: :data:`BEFORE_LAYERS` on the first stage, :data:`AFTER_LAYERS` on the last."""
    table = np.zeros(spec.num_layers + 2, dtype=np.int64)
    for s, layers in enumerate(pipeline_stages(spec.num_layers, stages)):
        table[layers.start:layers.stop] = s
    table[AFTER_LAYERS], table[BEFORE_LAYERS] = stages - 1, 0
    return table


def op_stages(graph: OpGraph, spec: ModelSpec, stages: int) -> np.ndarray:
    """The pipeline stage of every op of ``graph``: its layer's stage; ops outside the layers before the first
    layer (embedding) on stage 0, after it (final norm, lm_head, sampling) on the last. A multi-step graph
    restarts at stage 0 with each step's embedding."""
    return stage_of_layer(spec, stages)[op_layers(graph)]


@dataclass(frozen=True)
class PipelineTimes:
    """A phase through the pipeline: each stage's time per micro-batch (the phase's passes summed) and the
    factor from the ops' summed time to the phase's time."""

    stage_times_s: np.ndarray
    micro_batches: int
    first: bool
    """A prefill (the micro-batches fill and drain the stages) rather than decode steps."""

    @property
    def time_s(self) -> float:
        """Prefill (GPipe, Huang et al. 2019, arXiv 1811.06965 §2.2): the first micro-batch crosses every stage,
        each later one follows a slowest-stage time behind: ``Σ_s t_s + (m − 1)·max_s t_s``. A decode step:
        every micro-batch's tokens cross every stage, and a stage serves the m micro-batches in turn:
        ``max(Σ_s t_s, m·max_s t_s)``."""
        total = float(self.stage_times_s.sum())
        slowest = float(self.stage_times_s.max(initial=0.0))
        m = self.micro_batches
        return total + (m - 1) * slowest if self.first else max(total, m * slowest)

    @property
    def factor(self) -> float:
        total = float(self.stage_times_s.sum())
        return self.time_s / total if total > 0 else 1.0

    @property
    def bubble_fraction(self) -> float:
        """Idle share of the stages: ``1 − m·Σ_s t_s / (p · time)`` — ``(p−1)/(m+p−1)`` for equal stages of a
        prefill (Huang et al. 2019)."""
        p = len(self.stage_times_s)
        t = self.time_s
        return 1.0 - self.micro_batches * float(self.stage_times_s.sum()) / (p * t) if t > 0 else 0.0


def communication_mask(graph: OpGraph) -> np.ndarray:
    """Per op of ``graph``: a communication op (a collective or a pipeline send)."""
    return np.fromiter((op.kind == "communication" for op in graph.ops), dtype=bool, count=len(graph.ops))


def overlapped_time_s(part: PhaseOps, first: bool) -> float:
    """One pass of two micro-batches run together (two-batch overlap), from one micro-batch's timed ops.

    Each decoder layer's computation runs on the compute engines and its communication on the links, so while
    one micro-batch computes layer ``l`` the other's collectives of that layer proceed: the layer takes
    ``2·max(c_l, m_l)`` (both micro-batches' computation, or both's communication, whichever is longer; DeepSeek-V3,
    arXiv 2412.19437 §3.4, overlaps attention and MoE of one micro-batch with the other's dispatch and combine).
    Ops outside the layers run twice, unoverlapped. Per pass (a decode sum's passes averaged)."""
    t = np.asarray(part.time_s, dtype=np.float64) / (1 if first else max(part.passes, 1))
    layer = op_layers(part.graph)
    comm = communication_mask(part.graph)
    inside = layer >= 0
    n = int(layer.max(initial=-1)) + 1
    c = np.bincount(layer[inside & ~comm], weights=t[inside & ~comm], minlength=n)
    m = np.bincount(layer[inside & comm], weights=t[inside & comm], minlength=n)
    return float(2.0 * np.maximum(c, m).sum() + 2.0 * t[~inside].sum())


def pipeline_times(part: PhaseOps, spec: ModelSpec, workload: Workload, first: bool) -> PipelineTimes:
    """:class:`PipelineTimes` of a timed phase."""
    stage = op_stages(part.graph, spec, workload.pipeline_parallel)
    times = np.bincount(stage, weights=np.asarray(part.time_s, dtype=np.float64),
                        minlength=workload.pipeline_parallel)
    return PipelineTimes(times / max(part.passes, 1) if not first else times, workload.micro_batches, first)


def estimate(spec: ModelSpec, hardware: HardwareSpec, workload: Workload, *, cost_model: str = "roofline",
             attention: AttentionView = "fused", layer: int | None = None) -> Estimate:
    """Time every op of ``workload`` and derive TTFT, TPOT, end-to-end time and memory.

    For ``prefill`` TPOT is ``None``; for ``decode`` and ``chunked`` TTFT is ``None`` and the
    pass time is the TPOT (every decode sequence gains one token per pass); for ``generate``,
    TTFT is the prefill time and TPOT the mean over the ``decode_steps`` decode steps.

    Each forward pass is one engine step and pays the execution profile's host time per step
    (``cost.execution.engine_terms``: a fixed part and one per running request), added to the pass,
    or, for steps after a request's first when the engine overlaps host work with the previous
    forward, the larger of the two; TTFT also pays ``request_overhead_s``. What that adds is
    ``phase_times_s["host"]`` (absent when the profile has no host terms), so the phase times still sum to
    ``e2e_s``.
    """
    if layer is not None and not 0 <= layer < spec.num_layers:
        from layerscope.errors import WorkloadError

        raise WorkloadError(f"layer: {layer} is out of range; {spec.name} has layers 0..{spec.num_layers - 1}")
    notes = context_warnings(spec, workload)
    model_fn = get_cost_model(cost_model)
    scope = "model" if layer is None else f"layer {layer}"
    parts: list[PhaseOps] = []
    graphs: list[OpGraph] = []
    phase_times: dict[str, float] = {}
    ttft: float | None = None
    tpot: float | None = None
    batch = workload.replica_batch  # each data-parallel replica is its own engine, stepping its own requests
    terms = engine_terms(hardware.execution) if layer is None else NO_ENGINE  # a layer alone is no engine step
    # A pipeline (or micro-batches) changes how the ops' times add up; a layer alone is no pipeline.
    piped = layer is None and (workload.pipeline_parallel > 1 or workload.micro_batches > 1)
    pipes: dict[str, PipelineTimes] = {}
    tbo = layer is None and workload.two_batch_overlap
    if workload.phase == "generate":
        pre = _build(spec, workload.prefill_pass(), workload, attention, layer)
        feats = op_features(pre)
        cost = model_fn(feats, hardware)
        parts.append(PhaseOps(pre, "prefill", cost.time_s, _work(feats), cost.bound, cost))
        graphs.append(pre)
        phase_times["prefill"] = float(cost.time_s.sum())
        if piped:
            pipes["prefill"] = pipeline_times(parts[-1], spec, workload, first=True)
            phase_times["prefill"] = pipes["prefill"].time_s
        elif tbo:
            phase_times["prefill"] = overlapped_time_s(parts[-1], first=True)
        ttft = float(step_time_s(phase_times["prefill"], host_step_s(terms, batch), terms, first=True)) \
            + terms.request_overhead_s
        decode_total = 0.0
        if workload.decode_steps > 0:
            ds = sum_decode_steps(spec, workload, hardware, cost_model, attention, layer)
            parts.append(PhaseOps(ds.graph, "decode", ds.op_time_s, ds.op_work, ds.last_bound, ds.op_cost,
                                  len(ds.step_times_s)))
            graphs.append(ds.graph)
            step_times = ds.step_times_s
            if piped:
                pipes["decode"] = pipeline_times(parts[-1], spec, workload, first=False)
                step_times = step_times * pipes["decode"].factor
            elif tbo:
                per_pass = float(ds.step_times_s.mean()) if len(ds.step_times_s) else 0.0
                step_times = step_times * (overlapped_time_s(parts[-1], first=False) / per_pass if per_pass else 1.0)
            steps_s = step_time_s(step_times, host_step_s(terms, batch), terms, first=False)
            decode_total = float(np.sum(steps_s))
            tpot = float(np.mean(steps_s))
            phase_times["decode"] = float(step_times.sum())
        e2e = ttft + decode_total
        tokens_per_s = workload.batch * workload.output_tokens / e2e
    else:
        fwd = workload.passes()[0]
        g = _build(spec, fwd, workload, attention, layer)
        feats = op_features(g)
        cost = model_fn(feats, hardware)
        parts.append(PhaseOps(g, workload.phase, cost.time_s, _work(feats), cost.bound, cost))
        graphs.append(g)
        phase_times[workload.phase] = float(cost.time_s.sum())
        first = workload.phase == "prefill"  # a decode or chunked pass is a step of running requests
        if piped:
            pipes[workload.phase] = pipeline_times(parts[-1], spec, workload, first=first)
            phase_times[workload.phase] = pipes[workload.phase].time_s
        elif tbo:
            phase_times[workload.phase] = overlapped_time_s(parts[-1], first=True)
        e2e = float(step_time_s(phase_times[workload.phase],
                                host_step_s(terms, -(-fwd.num_sequences // workload.data_parallel)), terms,
                                first=first)) + (terms.request_overhead_s if first else 0.0)
        if workload.phase == "prefill":
            ttft = e2e
        else:
            tpot = e2e
        tokens_per_s = workload.batch / e2e
    if terms.step_overhead_s or terms.step_overhead_per_request_s or terms.request_overhead_s:
        phase_times["host"] = max(e2e - sum(phase_times.values()), 0.0)
    return Estimate(
        model=spec.name,
        hardware=hardware.name,
        cost_model=cost_model,
        workload=workload,
        scope=scope,
        phases=tuple(parts),
        ttft_s=ttft,
        tpot_s=tpot,
        e2e_s=e2e,
        output_tokens_per_s=tokens_per_s,
        memory=memory_footprint(spec, workload, graphs),
        memory_capacity_bytes=hardware.memory_capacity_bytes,
        phase_times_s=phase_times,
        warnings=tuple(notes),
        model_spec=spec,
        hardware_spec=hardware,
        pipeline=pipes,
    )
