"""``estimate``: a model on a hardware spec, broken into ops and timed (TTFT, TPOT, end to end, memory).

:func:`estimate` takes one :class:`EstimateRequest` and returns one :class:`EstimateResult`, the
JSON contract of ``layerscope estimate --json`` (its schema: docs/schema/estimate.json).
"""

from __future__ import annotations

import csv
import io
import math
import os
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from layerscope.app.requests import (
    DEFAULT_ATTENTION,
    MODEL_CONFIG,
    AttentionView,
    HardwareRef,
    ModelRef,
    ParallelPlan,
    WorkloadRequest,
)
from layerscope.docstrings import RESULT_CONFIG
from layerscope.errors import CostModelError
from layerscope.units import atomic_write
from layerscope.workload import Workload

if TYPE_CHECKING:
    from layerscope.cost.api import Estimate

__all__ = ["EnergySummary", "EstimateRequest", "EstimateResult", "Figure", "OpRow", "Parameters", "PhaseEnergyRow",
           "estimate", "estimate_raw", "result_of", "write_ops_csv"]

_RESULT_CONFIG = MODEL_CONFIG


class EstimateRequest(BaseModel):
    """What to estimate: a model on a hardware spec under a workload and a parallel plan."""

    model_config = ConfigDict(**RESULT_CONFIG, arbitrary_types_allowed=True)

    model: ModelRef = "llama-3.2-1b"
    """Catalog name, Hugging Face id, ``config.json`` or directory, or a loaded ModelSpec."""
    hardware: HardwareRef = "h100-sxm"
    """Preset name or YAML/JSON/CSV/XLSX file, or a loaded HardwareSpec."""
    device_column: str | None = None
    """The column of a multi-device spreadsheet."""
    workload: WorkloadRequest = WorkloadRequest()
    """Phase, batch, lengths and dtypes."""
    parallel: ParallelPlan = ParallelPlan()
    """How the model is split across devices."""
    cost_model: str = "roofline"
    """Registered cost model: roofline, tiling or hierarchical."""
    attention: AttentionView = DEFAULT_ATTENTION
    """``fused`` (one attention op) or ``unfused`` (QKᵀ, softmax and PV as their own ops)."""
    layer: int | None = Field(default=None, ge=0)
    """Estimate this decoder layer alone; ``None``: the whole model."""


class OpRow(BaseModel):
    """One op of the estimate (for ``generate``: summed over every pass of its phase)."""

    model_config = _RESULT_CONFIG

    name: str
    """The HF module path that runs the op (``layers.0.self_attn.q_proj``), or a suffix under it
    (``layers.0.self_attn.rope``)."""
    kind: str
    """``gemm``, ``attention``, ``norm``, ``rope``, ``kv_write``, ``moe_experts``, …"""
    phase: str
    """``prefill``, ``decode`` or ``chunked``."""
    layer: int | None
    """Decoder layer index; ``null`` outside the layers (embedding, final norm, lm_head)."""
    definition: str
    """flashinfer-bench-style definition name (``gemm_n2048_k2048``, ``rmsnorm_h2048``, …)."""
    matrix_class: str
    """``Ma_Mw``, ``Va_Mw``, ``Ma_Ma``, ``Ma_Mqa``, ``Va_Mqa``, ``KVCache``, ``Elementwise``, ``Reduction``,
    ``Lookup`` or ``Collective``."""
    inputs: list[list[int]]
    """Input tensor shapes."""
    outputs: list[list[int]]
    """Output tensor shapes."""
    flops: float
    """Floating-point operations (a multiply-add is 2)."""
    bytes: float
    """Bytes read and written: weights + activations + KV cache."""
    weight_bytes: float
    """Weight bytes read."""
    act_bytes: float
    """Activation bytes read and written."""
    kv_bytes: float
    """KV-cache bytes read and written."""
    time_s: float
    """The cost model's time for the op, seconds."""
    share: float
    """The op's share of the summed op time, 0..1."""
    bound: str
    """``compute``, ``memory``, ``network`` (a collective on the interconnect) or ``overhead``: the term that sets
    the time."""
    compute_efficiency: float | None
    """The fraction of the datasheet peak the op's arithmetic got: FLOPs / its compute time / the peak of the unit
    that ran it (``engines.peak_flops_per_s`` of its dtype after the fallback rules, the TF32 peak or
    ``engines.vector_flops_per_s``); every shape term (Hockney's W½, the measured tables) included. ``null``
    for an op without FLOPs. For ``generate``'s decode: over every step (FLOP-weighted)."""
    memory_efficiency: float | None
    """The fraction of the datasheet main-memory bandwidth the op's traffic got: the bytes the cost model moves
    through main memory / its memory time / ``memory.<main>.bandwidth_bytes_per_s`` (``efficiency.memory``, weight
    streaming, a decode attention floor included; above 1 where a cache serves bytes). ``null`` without traffic."""
    overhead_s: float
    """The op's fixed time, seconds (summed over its phase's passes, like ``time_s``): ``launches`` × the cost
    per kernel (``launch_overhead_s``, or ``execution.cold_by_reuse``) + ``overhead_host_s``."""
    launches: float
    """Kernels per pass (the execution profile's; 1 for fused kernels)."""
    overhead_host_s: float
    """The part of ``overhead_s`` beyond the kernels' fixed cost: Python module calls, grouped-GEMM loops, page
    faults (0 for fused kernels)."""
    figures: list[str]
    """The spec figures that entered the op's time, keys of the result's ``figures`` (value, source, row ids)."""
    energy_j: float | None = None
    """Joules the op takes on one device: its dynamic energy (FLOPs, main-memory, cache, SRAM and wire bytes ×
    the spec's ``energy`` figures) + idle power × its time under the board's power limit (``cost.energy``);
    ``null`` when the spec has no energy figures."""


class PhaseParallel(BaseModel):
    """One phase of a parallel plan on one device."""

    model_config = _RESULT_CONFIG

    communication_s: float
    """Seconds of the phase's communication ops (collectives and pipeline sends) on one device, summed over
    its passes."""
    communication_share: float
    """``communication_s`` over the phase's summed op time, 0..1 (communication is not overlapped with
    compute: each collective waits for the op before it)."""
    stage_times_s: list[float] | None
    """Seconds per pipeline stage for one micro-batch (one decode step for decode phases); ``null`` without a
    pipeline or micro-batches."""
    bubble_fraction: float | None
    """Idle share of the pipeline's stages: ``1 − m·Σ t_s / (p · time)``, (p−1)/(m+p−1) for equal stages of a
    prefill; ``null`` without a pipeline or micro-batches."""


class ParallelSummary(BaseModel):
    """How the model is split, and what the split costs on one device."""

    model_config = _RESULT_CONFIG

    devices: int
    """GPUs the plan occupies: tensor × pipeline × data parallel (expert parallelism reuses them)."""
    tensor_parallel: int
    """Devices each layer's heads and FFN columns are split across."""
    pipeline_parallel: int
    """Pipeline stages."""
    expert_parallel: int
    """Devices the routed experts are spread over (1: split like the dense MLP)."""
    data_parallel: int
    """Model replicas (attention replicas with expert parallelism)."""
    micro_batches: int
    """Micro-batches per replica through the pipeline."""
    sequence_parallel: bool
    """Sequence parallelism over the tensor-parallel devices."""
    two_batch_overlap: bool
    """Two micro-batches side by side, communication under computation (the op rows are one micro-batch's)."""
    output_tokens_per_s_per_device: float
    """``output_tokens_per_s`` over ``devices``."""
    phases: dict[str, PhaseParallel]
    """Per phase: communication time and share, pipeline stage times and bubble."""


class Parameters(BaseModel):
    """Parameter counts of the whole model (elements, not bytes; whatever ``scope`` was timed)."""

    model_config = _RESULT_CONFIG

    total: int
    """Every weight of the language model's checkpoint: embeddings, an untied ``lm_head``, norms, biases,
    routers and every expert (``model.params.param_counts``)."""
    active: int
    """The parameters one token uses: ``total`` less the routed experts its router does not pick (top-k of E per
    MoE layer; shared experts, attention, embeddings and ``lm_head`` counted), the convention of the model cards
    (Mixtral 8x7B: 47B total, 13B active, Jiang et al. 2024, arXiv 2401.04088) and of the model catalog's README.
    Equal to ``total`` for a dense model."""


class Figure(BaseModel):
    """One hardware-spec figure that entered some op's time."""

    model_config = _RESULT_CONFIG

    value: float | str | list[list[float]] | None
    """Its value in the spec's units (a fraction, FLOP/s, bytes/s, seconds, FLOPs), a name (the execution
    profile's kernels) or a measured table (one row per point, as the spec holds it)."""
    source: str
    """Where the spec says it comes from: the citation, the part of a per-dtype citation for the dtype, or
    ``uncalibrated: …`` where the spec records none."""
    row_ids: list[str]
    """The rows of the bundled kernel table (``data/gpu-kernels.md``: ``G-15``, ``GX-22``, ``MX-14``, …) the
    source cites."""
    term: str
    """The term of an op's time it enters: ``compute``, ``memory``, ``network``, ``overhead`` or ``execution``
    (the execution profile, which shapes both bytes and kernels)."""
    cited: bool
    """False where the spec records no source for it."""


class KindRow(BaseModel):
    """The ops of one kind, summed."""

    model_config = _RESULT_CONFIG

    kind: str
    """Op kind."""
    ops: int
    """Op rows of this kind."""
    time_s: float
    """Their summed time, seconds."""
    share: float
    """Share of the summed op time, 0..1."""
    flops: float
    """Their floating-point operations."""
    bytes: float
    """Their bytes read and written."""


class MatrixClassRow(BaseModel):
    """The ops of one matrix class, summed."""

    model_config = _RESULT_CONFIG

    matrix_class: str
    """Matrix class (``Ma_Mw``, ``Va_Mw``, …)."""
    ops: int
    """Op rows of this class."""
    time_s: float
    """Their summed time, seconds."""
    share: float
    """Share of the summed op time, 0..1."""
    flops: float
    """Their floating-point operations."""
    bytes: float
    """Their bytes read and written."""


class MemoryBytes(BaseModel):
    """Bytes resident on one device."""

    model_config = _RESULT_CONFIG

    weights: float
    """Weight bytes on the busiest device (at the weight dtype, its share under the parallel plan)."""
    kv_cache: float
    """KV-cache bytes at the workload's longest context (sliding-window layers capped)."""
    activations: float
    """Peak live activation bytes (the largest op's inputs and outputs, plus the residual stream)."""
    communication: float
    """Communication buffers: NCCL's per-channel buffers of each communicator of the plan (0 on one device)."""
    total: float
    """Sum of the four."""


class Totals(BaseModel):
    """Sums over every op row."""

    model_config = _RESULT_CONFIG

    time_s: float
    """Summed op time, seconds."""
    flops: float
    """Floating-point operations."""
    bytes: float
    """Bytes read and written."""
    ops: int
    """Op rows."""


class PhaseEnergyRow(BaseModel):
    """One phase's energy on one device (``cost.energy``)."""

    model_config = _RESULT_CONFIG

    energy_j: float
    """Joules of the phase's ops: Σ the op rows' ``energy_j``."""
    time_s: float
    """Σ the ops' times under the board's power limit, seconds."""
    average_power_w: float
    """``energy_j / time_s``, watts."""
    peak_power_w: float
    """The largest per-op average power, watts (an op shorter than the board's power-control window may exceed
    the limit)."""
    power_limited: bool
    """The phase's average power at the cost model's times exceeds ``energy.board_power_limit_w``."""
    clock_factor: float
    """How much longer the compute-bound ops take under the power limit (1.0: not stretched)."""
    compute_j: float
    """Joules of arithmetic (FLOPs × pJ/FLOP of the matrix or vector units)."""
    memory_j: float
    """Joules of main-memory and last-level-cache traffic."""
    sram_j: float
    """Joules of on-chip SRAM traffic."""
    wire_j: float
    """Joules of the bytes put on NVLink or the network."""
    static_j: float
    """Idle power × ``time_s``."""


class EnergySummary(BaseModel):
    """The estimate's energy (issue #30): present when the hardware spec has ``energy`` figures."""

    model_config = _RESULT_CONFIG

    energy_j: float
    """Joules of the run on every device of the plan: (tensor × data parallel) × Σ the ops' dynamic joules + idle
    power × devices × ``e2e_s``."""
    j_per_output_token: float
    """``energy_j`` / the output tokens (``output_tokens_per_s × e2e_s`` of the estimate)."""
    output_tokens_per_j: float
    """Output tokens per joule: 1 / ``j_per_output_token``."""
    e2e_s: float
    """End-to-end seconds under the power limit: the estimate's ``e2e_s`` plus what the limit adds (the other
    times of the result are the cost model's, unlimited)."""
    power_limited: bool
    """Some phase's average power exceeds the board limit."""
    idle_j: float
    """Joules one device draws at idle power outside its ops: the engine's host time between steps."""
    devices: int
    """Devices of the plan (tensor × pipeline × data parallel)."""
    idle_power_w: float
    """The spec's ``energy.idle_power_w``."""
    board_power_limit_w: float
    """The spec's ``energy.board_power_limit_w``."""
    phases: dict[str, PhaseEnergyRow]
    """Per phase (``prefill``, ``decode``, …), one device."""


class EstimateResult(BaseModel):
    """The answer of ``layerscope estimate``: its ``--json`` output. Field names, units and meaning are a
    stable contract across releases; new fields may be added. A value that does not apply is ``null``."""

    model_config = _RESULT_CONFIG

    model: str
    """The model's name."""
    hardware: str
    """The hardware spec's name."""
    cost_model: str
    """The cost model that timed the ops."""
    scope: str
    """``model`` or ``layer N``."""
    workload: Workload
    """The workload estimated, in the library's fields."""
    ttft_s: float | None
    """Time to first token, seconds: the prefill pass (``prefill``, ``generate``); ``null`` for ``decode`` and
    ``chunked``."""
    tpot_s: float | None
    """Time per output token, seconds: for ``generate`` the mean over the ``decode_steps`` decode steps, each
    timed at its own KV-cache length; for ``decode``/``chunked`` the pass time; ``null`` for ``prefill``."""
    e2e_s: float
    """End-to-end seconds: ``ttft_s`` + every decode step for ``generate``, else the pass time."""
    output_tokens_per_s: float
    """Generated tokens per second across the batch: ``batch × (decode_steps + 1) / e2e_s`` for ``generate``,
    ``batch / pass time`` otherwise."""
    phase_times_s: dict[str, float]
    """Seconds per phase (``prefill``, ``decode``, …)."""
    warnings: list[str]
    """What to know about the inputs, e.g. a context beyond the model's ``max_position_embeddings``."""
    memory_bytes: MemoryBytes
    """Bytes resident on one device."""
    memory_capacity_bytes: float
    """Main-memory capacity of the hardware, bytes."""
    fits_in_memory: bool
    """``memory_bytes.total <= memory_capacity_bytes``."""
    totals: Totals
    """Sums over every op row."""
    by_kind: list[KindRow]
    """Per op kind, largest time first."""
    by_matrix_class: list[MatrixClassRow]
    """Per matrix class, largest time first."""
    ops: list[OpRow]
    """One row per op (for ``generate``: the prefill ops, then the decode ops summed over every step)."""
    parameters: Parameters
    """Total and active-per-token parameter counts of the model."""
    figures: dict[str, Figure]
    """Every hardware-spec figure some op's time used, by its dotted path in the spec
    (``efficiency.matmul_per_dtype.bf16``, ``memory.hbm.bandwidth_bytes_per_s``); each op lists its keys."""
    parallel: ParallelSummary
    """The parallel plan (``--tp --pp --ep --dp --micro-batches``) and what it costs on one device."""
    energy: EnergySummary | None = None
    """Joules, joules per output token, tokens per joule and watts per phase (``cost.energy``); ``null`` when the
    hardware spec has no ``energy`` figures."""

    def row_ids(self, op: OpRow, *, governing: bool = True) -> list[str]:
        """The kernel-table rows behind ``op``'s figures: by default those of the term that bound it, its
        overhead and its execution profile."""
        keep = {op.bound, "overhead", "execution"}
        uses = [self.figures[k] for k in op.figures if k in self.figures]
        return list(dict.fromkeys(r for f in uses if not governing or f.term in keep for r in f.row_ids))


def estimate(request: EstimateRequest, *, activity: str | os.PathLike[str] | None = None) -> EstimateResult:
    """Load the model and hardware of ``request``, build its workload and time it; with ``activity``, also write
    its per-op activity table there (:func:`layerscope.app.activity.write_activity`: ``.csv`` or ``.parquet``,
    never over the request's model or hardware file)."""
    if activity is not None:  # a bad path or a missing writer dependency is refused before the work
        from layerscope.app.activity import activity_format

        activity_format(activity)
    est = estimate_raw(request)
    if activity is not None:
        from layerscope.app.activity import write_activity

        inputs = tuple(ref for ref in (request.model, request.hardware)
                       if isinstance(ref, (str, os.PathLike)) and Path(ref).is_file())
        write_activity(est, activity, inputs)
    return result_of(est)


def estimate_raw(request: EstimateRequest) -> Estimate:
    """The cost layer's :class:`~layerscope.cost.api.Estimate` of ``request`` (arrays, for callers that
    go on computing: sweeps, validation)."""
    from layerscope.app.requests import check_devices
    from layerscope.model import ModelSpec, load_model_spec

    # The inputs first, the cost layer after: a bad model, hardware or plan is refused before numpy-heavy code loads.
    model = request.model
    spec = model if isinstance(model, ModelSpec) else load_model_spec(os.fspath(model))
    from layerscope.hardware import HardwareSpec, load_hardware

    hardware = request.hardware
    hw = hardware if isinstance(hardware, HardwareSpec) else load_hardware(os.fspath(hardware),
                                                                          device=request.device_column)
    check_devices(request.hardware, request.parallel)
    workload = request.workload.to_workload(request.parallel)
    from layerscope.cost.api import estimate as time_workload

    return time_workload(spec, hw, workload, cost_model=request.cost_model, attention=request.attention,
                         layer=request.layer)


def result_of(est: Estimate) -> EstimateResult:
    """The result model of a cost-layer estimate.

    The op rows are validated (in one call: faster than ``model_construct`` per row); the models around them are
    built with ``model_construct``, not validated: their values come from our own cost layer, each given here the
    type its field validates to, so the result equals the validated one field for field and type for type
    (``tests/app/test_estimate_result.py``) without building those models' validators."""
    rows = est.ops
    total = est.total_time_s or 1.0
    memory = est.memory
    explained, figures = _explain(est)
    energy, op_energy = _energy(est)
    op_rows = _op_rows().validate_python([
        {"name": op.name, "kind": op.kind, "phase": op.phase, "layer": op.layer, "definition": op.definition,
         "matrix_class": op.matrix_class, "inputs": op.inputs, "outputs": op.outputs, "flops": op.flops,
         "bytes": op.bytes, "weight_bytes": op.weight_bytes, "act_bytes": op.act_bytes, "kv_bytes": op.kv_bytes,
         "time_s": op.time_s, "share": op.time_s / total, "bound": op.bound, **why,
         **({} if op_energy is None else {"energy_j": op_energy[i]})}
        for i, (op, why) in enumerate(zip(rows, explained, strict=True))])
    return EstimateResult.model_construct(
        model=est.model, hardware=est.hardware, cost_model=est.cost_model, scope=est.scope, workload=est.workload,
        ttft_s=_float_or_none(est.ttft_s), tpot_s=_float_or_none(est.tpot_s), e2e_s=float(est.e2e_s),
        output_tokens_per_s=float(est.output_tokens_per_s),
        phase_times_s={k: float(v) for k, v in est.phase_times_s.items()}, warnings=list(est.warnings),
        memory_bytes=MemoryBytes.model_construct(
            weights=float(memory.weights), kv_cache=float(memory.kv_cache), activations=float(memory.activations),
            communication=float(memory.communication), total=float(memory.total)),
        memory_capacity_bytes=float(est.memory_capacity_bytes), fits_in_memory=bool(est.fits_in_memory),
        totals=Totals.model_construct(time_s=float(est.total_time_s), flops=float(sum(op.flops for op in rows)),
                                      bytes=float(sum(op.bytes for op in rows)), ops=len(rows)),
        by_kind=[KindRow.model_construct(**_group_row(r)) for r in est.breakdown("kind")],
        by_matrix_class=[MatrixClassRow.model_construct(**_group_row(r)) for r in est.breakdown("matrix_class")],
        ops=op_rows,
        parameters=_parameters(est),
        figures=figures,
        parallel=_parallel(est),
        energy=energy,
    )


def _float_or_none(value: float | None) -> float | None:
    return None if value is None else float(value)


def _group_row(row: dict[str, Any]) -> dict[str, Any]:
    """A row of ``Estimate.breakdown`` with its fields' types: the group's name, ``ops`` an int, floats."""
    return {k: v if isinstance(v, str) else int(v) if k == "ops" else float(v) for k, v in row.items()}


def _energy(est: Estimate) -> tuple[EnergySummary | None, list[float] | None]:
    """The energy summary and the op rows' joules (in ``est.ops`` order); None, None without energy figures."""
    from layerscope.cost.energy import estimate_energy

    result = estimate_energy(est)
    hw = est.hardware_spec
    if result is None or hw is None or hw.energy is None:
        return None, None
    phases = {}
    for p in result.phases:
        d = p.dynamic
        phases[p.phase] = PhaseEnergyRow.model_construct(
            energy_j=float(p.energy_j), time_s=float(p.time_s), average_power_w=float(p.average_power_w),
            peak_power_w=float(p.peak_power_w), power_limited=bool(p.power_limited),
            clock_factor=float(p.clock_factor), compute_j=float(d.compute_j.sum()), memory_j=float(d.memory_j.sum()),
            sram_j=float(d.sram_j.sum()), wire_j=float(d.wire_j.sum()),
            static_j=float(hw.energy.idle_power_w * p.time_s))
    summary = EnergySummary.model_construct(
        energy_j=float(result.energy_j), j_per_output_token=float(result.j_per_output_token),
        output_tokens_per_j=float(result.output_tokens_per_j), e2e_s=float(result.e2e_s),
        power_limited=any(p.power_limited for p in result.phases), idle_j=float(result.idle_j),
        devices=int(result.devices), idle_power_w=float(hw.energy.idle_power_w),
        board_power_limit_w=float(hw.energy.board_power_limit_w), phases=phases)
    return summary, [float(x) for p in result.phases for x in p.op_energy_j.tolist()]


def _parallel(est: Estimate) -> ParallelSummary:
    from layerscope.cost.api import communication_mask

    w = est.workload
    phases = {}
    for part in est.phases:
        comm = float(part.time_s[communication_mask(part.graph)].sum())
        total = float(part.time_s.sum())
        pipe = est.pipeline.get(part.phase)
        phases[part.phase] = PhaseParallel.model_construct(
            communication_s=comm, communication_share=comm / total if total > 0 else 0.0,
            stage_times_s=None if pipe is None else [float(x) for x in pipe.stage_times_s],
            bubble_fraction=None if pipe is None else float(pipe.bubble_fraction))
    return ParallelSummary.model_construct(
        devices=int(w.devices), tensor_parallel=int(w.tensor_parallel), pipeline_parallel=int(w.pipeline_parallel),
        expert_parallel=int(w.expert_parallel), data_parallel=int(w.data_parallel),
        micro_batches=int(w.micro_batches), sequence_parallel=bool(w.sequence_parallel),
        two_batch_overlap=bool(w.two_batch_overlap),
        output_tokens_per_s_per_device=float(est.output_tokens_per_s / w.devices), phases=phases)


@cache
def _op_rows() -> TypeAdapter[list[OpRow]]:
    """The validator of the op rows: all rows in one call (a whole model has thousands; faster than one
    ``OpRow(...)`` or ``OpRow.model_construct(...)`` each)."""
    return TypeAdapter(list[OpRow])


def _parameters(est: Estimate) -> Parameters:
    from layerscope.model.params import param_counts

    if est.model_spec is None:
        raise CostModelError(f"estimate of {est.model}: carries no model spec to count parameters of")
    counts = param_counts(est.model_spec)
    return Parameters.model_construct(total=int(counts.total), active=int(counts.active))


def _explain(est: Estimate) -> tuple[list[dict[str, Any]], dict[str, Figure]]:
    """Per op row (in ``est.ops`` order), the fields of :class:`OpRow` that explain its time, and the figure
    table they point into (``cost.explain``)."""
    from layerscope.cost.explain import explain, merge_figures
    from layerscope.cost.features import op_features

    hw = est.hardware_spec
    if hw is None:
        raise CostModelError(f"estimate of {est.model}: carries no hardware spec to explain its times with")
    rows: list[dict[str, Any]] = []
    tables = []
    for part in est.phases:
        if part.cost is None:
            raise CostModelError(f"estimate of {est.model}: phase {part.phase} carries no cost-model parts")
        ex = explain(op_features(part.graph).with_work(*part.work), hw, part.cost, cost_model=est.cost_model,
                     passes=part.passes)
        tables.append(ex.figures)
        compute = [None if math.isnan(x) else x for x in ex.compute_efficiency.tolist()]
        memory = [None if math.isnan(x) else x for x in ex.memory_efficiency.tolist()]
        rows.extend({"compute_efficiency": c, "memory_efficiency": m, "overhead_s": float(o), "launches": float(n),
                     "overhead_host_s": float(h), "figures": list(f)}
                    for c, m, o, n, h, f in zip(compute, memory, ex.overhead_s.tolist(), ex.launches.tolist(),
                                                ex.overhead_host_s.tolist(), ex.op_figures, strict=True))
    figures = {path: Figure.model_construct(value=_json_value(use.value), source=use.source,
                                            row_ids=list(use.row_ids), term=use.term, cited=bool(use.cited))
               for path, use in merge_figures(*tables).items()}
    return rows, figures


def _json_value(value: object) -> float | str | list[list[float]] | None:
    """A figure's value as ``Figure.value`` validates it: a table's rows as lists of floats, a number a float."""
    if isinstance(value, tuple):
        return [[float(x) for x in row] for row in value]
    if value is None or isinstance(value, str):
        return value
    return float(value)  # type: ignore[arg-type]


#: The columns of ``estimate --csv``, in order.
OPS_CSV_COLUMNS = ("name", "phase", "kind", "layer", "definition", "matrix_class", "flops", "bytes",
                   "weight_bytes", "act_bytes", "kv_bytes", "time_s", "bound")


def write_ops_csv(result: EstimateResult, path: str | os.PathLike[str]) -> None:
    """Write the per-op table as CSV, atomically."""
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(OPS_CSV_COLUMNS)
    for op in result.ops:
        writer.writerow([getattr(op, c) for c in OPS_CSV_COLUMNS])
    with atomic_write(path, "w") as fh:
        fh.write(buf.getvalue())
