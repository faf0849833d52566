"""``simulate``: model + hardware + workload → timed graph → schedules (one or a sweep) → trace.

The one library call behind ``layerscope simulate``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypedDict, Unpack

from layerscope.errors import ScheduleError
from layerscope.schedule.core import Schedule, ScheduleProblem, get_policy
from layerscope.schedule.sweep import Sweep, parse_engine_counts, sweep_engines

if TYPE_CHECKING:
    from layerscope.cost.timed import TimedGraph
    from layerscope.hardware import HardwareSpec
    from layerscope.model import ModelSpec

log = logging.getLogger(__name__)

__all__ = ["GraphOptions", "SimulationResult", "build_graph", "simulate"]


@dataclass(frozen=True)
class SimulationResult:
    """What ``simulate`` computed. ``schedule`` is the one written to the trace: the only one, or
    for a sweep the schedule at ``sweep.engines_used``."""

    model: str
    hardware: str
    timed: TimedGraph
    problem: ScheduleProblem
    sweep: Sweep
    schedule: Schedule
    trace_path: Path | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "hardware": self.hardware,
            "graph": self.problem.name,
            "ops": self.problem.n,
            "dependencies": self.problem.num_edges,
            "cost_model": self.timed.cost_model,
            "policy": self.schedule.policy,
            "share_bandwidth": self.schedule.share_bandwidth,
            "bandwidth_bytes_per_s": self.problem.bandwidth_bytes_per_s,
            "sum_of_op_times_ns": round(float(self.timed.time_s.sum()) * 1e9),
            "sweep": self.sweep.records(),
            "engines_used": self.sweep.engines_used,
            "schedule": self.schedule.summary(),
            "trace": str(self.trace_path) if self.trace_path else None,
        }


#: Phases :func:`build_graph` builds one graph of (``generate`` is a prefill and many decode steps).
SIMULATED_PHASES = ("prefill", "decode", "chunked")


def build_graph(
    spec: ModelSpec,
    *,
    phase: str = "decode",
    batch: int | None = None,
    context: int | None = None,
    input_len: int | None = None,
    chunk: int | None = None,
    all_layers: bool = False,
    steps: int | None = None,
    layer: int = 0,
    attention: Literal["fused", "unfused"] = "unfused",
    weight_dtype: str = "bf16",
    act_dtype: str = "bf16",
    kv_dtype: str = "bf16",
) -> Any:
    """The op graph of one layer (default), the whole model (``all_layers``), or ``steps`` decode
    steps with a growing KV cache."""
    from layerscope.graph import build_layer_graph, build_model_graph, build_steps_graph
    from layerscope.workload import make_workload

    if phase not in SIMULATED_PHASES:
        raise ScheduleError(f"phase: {phase!r} cannot be simulated as one graph; known: {', '.join(SIMULATED_PHASES)} "
                            "(decode steps of a generation: --phase decode --steps N)")
    fields: dict[str, object] = {"phase": phase, "weight_dtype": weight_dtype, "act_dtype": act_dtype,
                                 "kv_dtype": kv_dtype}
    for name, value in (("batch_size", batch), ("context_len", context), ("input_len", input_len),
                        ("chunk_size", chunk)):
        if value is not None:
            fields[name] = value
    workload = make_workload(**fields)
    if steps is not None:
        if steps < 1:
            raise ScheduleError(f"steps: {steps} must be >= 1")
        return build_steps_graph(spec, workload, steps, attention, all_layers=all_layers)
    fwd = workload.passes()[0]
    if all_layers:
        return build_model_graph(spec, fwd, workload, attention)
    return build_layer_graph(spec, fwd, workload, layer, attention)


class GraphOptions(TypedDict, total=False):
    """What graph :func:`simulate` builds: :func:`build_graph`'s keyword arguments (its defaults apply)."""

    phase: str
    batch: int | None
    context: int | None
    input_len: int | None
    chunk: int | None
    all_layers: bool
    steps: int | None
    layer: int
    attention: Literal["fused", "unfused"]
    weight_dtype: str
    act_dtype: str
    kv_dtype: str


def simulate(
    model: str | os.PathLike[str] | ModelSpec,
    hardware: str | os.PathLike[str] | HardwareSpec,
    *,
    engines: int | str | Sequence[int] = 4,
    policy: str = "list",
    share_bandwidth: bool = True,
    cost_model: str = "roofline",
    out: str | os.PathLike[str] | None = None,
    **graph: Unpack[GraphOptions],
) -> SimulationResult:
    """Build the graph (``graph``: :func:`build_graph`'s options, e.g. ``phase="prefill", input_len=512``),
    time it, schedule it on each engine count, and write the trace to ``out``."""
    from layerscope.cost import time_graph
    from layerscope.hardware import HardwareSpec, load_hardware
    from layerscope.model import ModelSpec, load_model_spec

    get_policy(policy)
    # "spec": one engine per core/SM/CU of the hardware spec, each owning 1/count of the chip.
    from_spec = isinstance(engines, str) and engines.strip().lower() == "spec"
    counts = [] if from_spec else parse_engine_counts(engines)
    inputs: list[str | os.PathLike[str]] = []
    if isinstance(model, ModelSpec):
        spec = model
    else:
        spec = load_model_spec(os.fspath(model))
        inputs.append(model)
    if isinstance(hardware, HardwareSpec):
        hw = hardware
    else:
        hw = load_hardware(os.fspath(hardware))
        inputs.append(hardware)
    if from_spec:
        counts = [hw.engines.count]
    op_graph = build_graph(spec, **graph)
    timed = time_graph(op_graph, hw, cost_model)
    problem = ScheduleProblem.from_timed(timed)
    log.info("scheduling %d ops on %s engines (%s)", problem.n, list(counts), policy)
    sweep = sweep_engines(problem, counts, policy, share_bandwidth)
    chosen = sweep.schedules[counts.index(sweep.engines_used)]
    path = None
    if out is not None:
        from layerscope.trace.writers import TraceMetadata, write_schedule_trace

        meta = TraceMetadata.from_timed(timed, process_name=f"{op_graph.name} on {hw.name}")
        path = write_schedule_trace(chosen, meta, out,
                                    inputs=tuple(p for p in inputs if Path(p).exists()))
    return SimulationResult(spec.name, hw.name, timed, problem, sweep, chosen, path)
