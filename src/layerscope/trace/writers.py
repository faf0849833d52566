"""Writing schedules as traces: the metadata writers need, and the registry of writers by suffix.

``write_schedule_trace(schedule, source, path)`` picks the writer from the path's suffix:
``.json`` / ``.json.gz`` (Chrome Trace Event JSON, :mod:`layerscope.trace.chrome_writer`) and
``.pftrace`` / ``.perfetto-trace`` (Perfetto protobuf, :mod:`layerscope.trace.perfetto_writer`).
Files are written atomically and never over an input.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from layerscope.errors import TraceError
from layerscope.registry import Registry
from layerscope.units import NS_PER_S
from layerscope.workload.steps import without_step

if TYPE_CHECKING:
    from layerscope.cost.timed import TimedGraph
    from layerscope.schedule.core import Schedule

__all__ = [
    "TRACE_WRITERS",
    "TraceMetadata",
    "power_counter",
    "sim_pid",
    "slice_order",
    "trace_format",
    "write_schedule_trace",
]

#: Name of the counter track of memory bandwidth in use, and its unit.
BANDWIDTH_COUNTER = "memory bandwidth"
BANDWIDTH_UNIT = "GB/s"
#: Name of the counter track of how many engines run an op (JSON: event "engines", arg "busy").
ENGINES_COUNTER = "engines busy"
#: Name of the counter track of the device's power (JSON: event "power", arg "W"; the track "power W").
POWER_COUNTER = "power"
POWER_UNIT = "W"
#: Category of flow (dependency) events in JSON.
FLOW_CATEGORY = "dependency"
#: pid of the simulated chip of device 0 and the tid of engine k (k + TID_BASE): small fixed numbers
#: so files are deterministic and never collide with real processes of a merged trace. The chip of
#: device index d is process :func:`sim_pid` ``(d)`` = ``SIM_PID + d``, one process per device.
SIM_PID = 1
TID_BASE = 1


def sim_pid(device: int) -> int:
    """The trace's process id of the simulated chip with device index ``device``: ``SIM_PID + device``
    (device 0, every single-device simulation, keeps pid 1; multi-GPU traces get one process per
    device, in device order)."""
    return SIM_PID + device


@dataclass(frozen=True)
class TraceMetadata:
    """What a trace shows about each op besides its timing.

    Op args are split into *templates* (static facts shared by many ops: shapes, FLOPs, bytes …;
    encoded once per template) and per-op facts (layer, dependency names), so writing a
    million-op trace does not encode a million identical dicts.
    """

    process_name: str
    names: Sequence[str]
    template: np.ndarray
    """int per op: index into ``templates``."""
    templates: Sequence[Mapping[str, Any]]
    """Static args of each template; must include ``"kind"`` (the slice category)."""
    layer: np.ndarray | None = None
    """int per op, -1 for none."""
    module: Sequence[str] | None = None
    """Per op, the HF module that runs it (``Op.module``; arg ``module``) where that is not the op's own
    name less its decode-step prefix, else ``""`` (written as no arg): ``layers.0.self_attn`` for
    ``layers.0.self_attn.rope``. What ``compare --sim`` anchors predicted ops at."""
    device: int = 0
    """Index of the device the schedule ran on: the trace's process is :func:`sim_pid` ``(device)``
    (and its process sort index is ``device``)."""
    op_dynamic_j: np.ndarray | None = None
    """Dynamic joules per op (:func:`layerscope.cost.energy.timed_dynamic_energy_j`): with ``idle_power_w`` the
    trace's power counter (:func:`power_counter`); None: no power track."""
    idle_power_w: float = 0.0
    """The device's idle power, watts: the power counter's level between ops."""

    def __post_init__(self) -> None:
        n = len(self.names)
        if self.op_dynamic_j is not None and len(self.op_dynamic_j) != n:
            raise TraceError(f"metadata: {len(self.op_dynamic_j)} op energies for {n} ops")
        if len(self.template) != n:
            raise TraceError(f"metadata: {len(self.template)} template ids for {n} ops")
        if n and (self.template.min() < 0 or self.template.max() >= len(self.templates)):
            raise TraceError("metadata: template id out of range")
        if self.layer is not None and len(self.layer) != n:
            raise TraceError(f"metadata: {len(self.layer)} layers for {n} ops")
        if self.module is not None and len(self.module) != n:
            raise TraceError(f"metadata: {len(self.module)} modules for {n} ops")
        if isinstance(self.device, bool) or not isinstance(self.device, (int, np.integer)) or self.device < 0:
            raise TraceError(f"metadata: device index must be a whole number >= 0, got {self.device!r}")

    def kind(self, i: int) -> str:
        return str(self.templates[int(self.template[i])]["kind"])

    @classmethod
    def from_timed(cls, tg: TimedGraph, process_name: str | None = None, *, device: int = 0) -> TraceMetadata:
        """Args from the ops of a timed graph: shapes, dtypes, FLOPs, bytes by kind, intensity,
        bound, definition, matrix class, attrs, and the cost model's whole-chip times.
        ``device``: the index of the device the schedule ran on (the trace's process)."""
        from layerscope.schedule.core import paused_gc

        with paused_gc():
            return cls._from_timed(tg, process_name, device)

    @classmethod
    def _from_timed(cls, tg: TimedGraph, process_name: str | None, device: int) -> TraceMetadata:
        keys: dict[tuple[object, ...], int] = {}
        templates: list[dict[str, Any]] = []
        template = np.empty(len(tg.graph.ops), dtype=np.int64)
        layer = np.full(len(tg.graph.ops), -1, dtype=np.int64)
        time_ns = np.rint(np.asarray(tg.time_s) * NS_PER_S).astype(np.int64).tolist()
        compute_ns = np.rint(np.asarray(tg.compute_s) * NS_PER_S).astype(np.int64).tolist()
        memory_ns = np.rint(np.asarray(tg.memory_s) * NS_PER_S).astype(np.int64).tolist()
        mem_bytes = np.asarray(tg.memory_bytes).tolist()
        module = [op.module if op.module != without_step(op.name) else "" for op in tg.graph.ops]
        for i, op in enumerate(tg.graph.ops):
            if op.layer is not None:
                layer[i] = op.layer
            k = (
                op.kind,
                tuple((t.shape, t.dtype) for t in op.inputs),
                tuple((t.shape, t.dtype) for t in op.outputs),
                op.flops, op.weight_bytes, op.act_read_bytes, op.act_write_bytes, op.kv_read_bytes,
                op.kv_write_bytes, op.matrix_class, op.definition, op.multiplicity, op.attrs,
                tg.bound[i], time_ns[i], compute_ns[i], memory_ns[i], mem_bytes[i],
            )
            t_id = keys.get(k)
            if t_id is None:
                t_id = keys[k] = len(templates)
                templates.append(_op_args(op, tg.bound[i], time_ns[i], compute_ns[i], memory_ns[i],
                                          mem_bytes[i]))
            template[i] = t_id
        if process_name is None:
            hw = getattr(tg.hardware, "name", None) or "hardware"
            process_name = f"{tg.graph.name} on {hw} ({tg.cost_model})"
        return cls(process_name, [op.name for op in tg.graph.ops], template, templates, layer,
                   module if any(module) else None, device)

    @classmethod
    def minimal(cls, names: Sequence[str], kinds: Sequence[str], process_name: str = "simulation",
                extra: Mapping[str, Mapping[str, Any]] | None = None, *, device: int = 0) -> TraceMetadata:
        """One template per kind (args: the kind, plus ``extra[kind]``); ``device`` as in the class."""
        ids: dict[str, int] = {}
        templates: list[dict[str, Any]] = []
        template = np.empty(len(names), dtype=np.int64)
        for i, k in enumerate(kinds):
            t = ids.get(k)
            if t is None:
                t = ids[k] = len(templates)
                templates.append({"kind": k, **(extra or {}).get(k, {})})
            template[i] = t
        return cls(process_name, list(names), template, templates, device=device)


def power_counter(meta: TraceMetadata, start_ns: np.ndarray, end_ns: np.ndarray, op: np.ndarray | None = None,
                  span_ns: tuple[int, int] | None = None) -> tuple[np.ndarray, np.ndarray] | None:
    """The power counter ``(time_ns, watts)`` of one device whose slices run ``op`` (indices into ``meta``'s ops;
    default: every op in order) from ``start_ns`` to ``end_ns``, over ``span_ns`` (default: first start to last
    end; :func:`layerscope.cost.energy.power_steps`); None when ``meta`` has no op energies."""
    if meta.op_dynamic_j is None:
        return None
    from layerscope.cost.energy import power_steps

    joules = meta.op_dynamic_j if op is None else meta.op_dynamic_j[op]
    time_ns, watts = power_steps(start_ns, end_ns, joules, meta.idle_power_w, span_ns)
    # milliwatts: both formats then hold the same numbers (JSON writes decimals)
    return time_ns, np.round(watts, 3)


def _shape(shape: tuple[int, ...]) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


def _op_args(op: Any, bound: str, time_ns: int, compute_ns: int, memory_ns: int,
             memory_bytes: float) -> dict[str, Any]:
    args: dict[str, Any] = {
        "kind": op.kind,
        "input_shapes": "; ".join(_shape(t.shape) for t in op.inputs),
        "input_dtypes": "; ".join(t.dtype.value for t in op.inputs),
        "output_shapes": "; ".join(_shape(t.shape) for t in op.outputs),
        "output_dtypes": "; ".join(t.dtype.value for t in op.outputs),
        "flops": int(op.flops),
        "weight_bytes": int(op.weight_bytes),
        "act_read_bytes": int(op.act_read_bytes),
        "act_write_bytes": int(op.act_write_bytes),
        "kv_read_bytes": int(op.kv_read_bytes),
        "kv_write_bytes": int(op.kv_write_bytes),
        "memory_bytes": round(memory_bytes),
    }
    ai = op.arithmetic_intensity
    if math.isfinite(ai):
        args["arithmetic_intensity"] = round(float(ai), 6)
    args["bound"] = bound
    args["matrix_class"] = op.matrix_class
    if op.definition:
        args["definition"] = op.definition
    args["chip_time_ns"] = time_ns
    args["chip_compute_ns"] = compute_ns
    args["chip_memory_ns"] = memory_ns
    if op.multiplicity != 1:
        args["multiplicity"] = int(op.multiplicity)
    for k, v in op.attrs:
        if v is not None:
            args[f"attr.{k}"] = v if isinstance(v, (int, float, str, bool)) else str(v)
    return args


def slice_order(schedule: Schedule) -> np.ndarray:
    """Op indices by start time, then engine, then index (the order slices are written in)."""
    return np.lexsort((np.arange(len(schedule.start_ns)), schedule.engine, schedule.start_ns))


def dependency_names(schedule: Schedule, names: Sequence[str], i: int) -> str:
    p = schedule.problem
    return ", ".join(names[j] for j in p.indices[p.indptr[i] : p.indptr[i + 1]].tolist())


WriterFn = Callable[["Schedule", TraceMetadata, Any], None]


def _chrome(schedule: Schedule, meta: TraceMetadata, handle: Any, *, gzip: bool) -> None:
    from layerscope.trace.chrome_writer import write_chrome_json

    write_chrome_json(schedule, meta, handle, gzip=gzip)


def _perfetto(schedule: Schedule, meta: TraceMetadata, handle: Any) -> None:
    from layerscope.trace.perfetto_writer import write_perfetto_protobuf

    write_perfetto_protobuf(schedule, meta, handle)


#: Writers by file suffix (longest suffix first when matching).
TRACE_WRITERS: Registry[WriterFn] = Registry("trace output suffix", TraceError, {
    ".json.gz": lambda s, m, h: _chrome(s, m, h, gzip=True),
    ".json": lambda s, m, h: _chrome(s, m, h, gzip=False),
    ".pftrace": _perfetto,
    ".perfetto-trace": _perfetto,
})


def trace_format(path: str | os.PathLike[str]) -> str:
    """The registered suffix ``path`` ends with, or a TraceError listing the known ones."""
    name = Path(path).name.lower()
    for suffix in sorted(TRACE_WRITERS, key=len, reverse=True):
        if name.endswith(suffix):
            return suffix
    raise TraceError(
        f"output {str(path)!r}: unknown trace format; known suffixes: {', '.join(TRACE_WRITERS)}"
    )


def write_schedule_trace(
    schedule: Schedule,
    source: TimedGraph | TraceMetadata,
    path: str | os.PathLike[str],
    inputs: tuple[str | os.PathLike[str], ...] = (),
) -> Path:
    """Write ``schedule`` to ``path`` (format from the suffix), atomically; returns the path.

    ``source`` is the timed graph the schedule came from (its ops give the slices' args) or
    ready :class:`TraceMetadata`. ``inputs`` are files the output must never overwrite.
    """
    from layerscope.units import atomic_write

    writer = TRACE_WRITERS.lookup(trace_format(path))
    meta = source if isinstance(source, TraceMetadata) else TraceMetadata.from_timed(source)
    if len(meta.names) != schedule.problem.n:
        raise TraceError(f"metadata has {len(meta.names)} ops but the schedule has {schedule.problem.n}")
    from layerscope.schedule.core import paused_gc

    with atomic_write(path, "wb", inputs=inputs) as handle, paused_gc():
        writer(schedule, meta, handle)
    return Path(path)
