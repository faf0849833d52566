"""Per-module summary of a captured trace: time, calls and shapes per module and phase.

Times come from the trace's annotation ranges (``user_annotation`` on the CPU thread, and
``gpu_user_annotation`` on CUDA, which spans the module's kernels); call counts and shapes from
the forward hooks that opened those ranges.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict

from layerscope.capture.annotate import ModuleCalls

#: Trace categories of the annotation ranges, by clock.
CPU_ANNOTATION = "user_annotation"
GPU_ANNOTATION = "gpu_user_annotation"

_ANY_TRACK_ID = "*"
ANY_TRACK: tuple[Any, Any] = (_ANY_TRACK_ID, _ANY_TRACK_ID)
"""Key of the merged phase ranges of all tracks."""


class ModuleRecord(BaseModel):
    """One module in one phase, over all recorded iterations."""

    model_config = ConfigDict(frozen=True)

    name: str
    """Op name (``layers.0.self_attn.q_proj``)."""
    phase: str
    """``prefill`` or ``decode`` (all decode steps together)."""
    calls: int
    total_ms: float
    """Wall time inside the module's CPU-side range, summed over calls."""
    mean_ms: float
    device_ms: float | None = None
    """Time of the module's range on the GPU (kernels), when captured on CUDA."""
    input_shapes: list[list[int]] = []
    """Shapes of the tensor inputs of the first call (positional, then keyword)."""
    output_shapes: list[list[int]] = []


class PhaseRecord(BaseModel):
    """One phase annotation (``prefill``, ``decode_step_3``) over all recorded iterations."""

    model_config = ConfigDict(frozen=True)

    name: str
    calls: int
    total_ms: float
    mean_ms: float


def _is_phase(name: str) -> bool:
    return name == "prefill" or name.startswith("decode_step_")


def _phase_kind(name: str) -> str:
    return "prefill" if name == "prefill" else "decode"


def _annotations(events: Iterable[Mapping[str, Any]], cat: str) -> list[Mapping[str, Any]]:
    return [e for e in events if e.get("ph") == "X" and e.get("cat") == cat and "name" in e]


def _durations(events: list[Mapping[str, Any]], names: set[str],
               phase_events: list[Mapping[str, Any]]) -> dict[tuple[str, str], list[float]]:
    """Durations (µs) of the module ranges in ``events``, keyed by (phase kind, name); the phase
    of a range is the range of ``phase_events`` on the same track (pid, tid) that contains its start."""
    phases: dict[tuple[Any, Any], list[tuple[float, float, str]]] = defaultdict(list)
    for e in phase_events:
        if _is_phase(e["name"]):
            phases[(e.get("pid"), e.get("tid"))].append((float(e["ts"]), float(e["ts"]) + float(e["dur"]), e["name"]))
    # Ranges on a track without phase ranges (a GPU stream whose phase ranges Kineto put on
    # another stream) fall back to the phase ranges of every track: one clock, phases never overlap.
    phases[ANY_TRACK] = [span for spans in phases.values() for span in spans]
    starts: dict[tuple[Any, Any], list[float]] = {}
    for key, spans in phases.items():
        spans.sort()
        starts[key] = [s[0] for s in spans]
    out: dict[tuple[str, str], list[float]] = defaultdict(list)
    for e in events:
        name = e["name"]
        if name not in names:
            continue
        key = (e.get("pid"), e.get("tid"))
        if key not in phases:
            key = ANY_TRACK
        spans = phases[key]
        ts = float(e["ts"])
        i = bisect.bisect_right(starts[key], ts) - 1
        if i < 0 or ts > spans[i][1]:
            continue
        out[(_phase_kind(spans[i][2]), name)].append(float(e.get("dur", 0.0)))
    return out


def phase_records(trace: Mapping[str, Any]) -> list[PhaseRecord]:
    """The phase ranges of a trace (CPU clock), in first-seen order."""
    durations: dict[str, list[float]] = {}
    for e in _annotations(trace.get("traceEvents", []), CPU_ANNOTATION):
        if _is_phase(e["name"]):
            durations.setdefault(e["name"], []).append(float(e["dur"]))
    return [
        PhaseRecord(name=name, calls=len(d), total_ms=sum(d) / 1e3, mean_ms=sum(d) / 1e3 / len(d))
        for name, d in durations.items()
    ]


def module_records(trace: Mapping[str, Any], calls: Mapping[tuple[str, str], ModuleCalls],
                   order: list[str], extra: tuple[str, ...] = ()) -> list[ModuleRecord]:
    """One record per (phase, module) the hooks saw, prefill first, modules in ``order``; plus
    the ``extra`` annotations that are not modules (``sampling``), without shapes."""
    events = trace.get("traceEvents", [])
    names = {name for _, name in calls} | set(extra)
    cpu_events, gpu_events = _annotations(events, CPU_ANNOTATION), _annotations(events, GPU_ANNOTATION)
    cpu = _durations(cpu_events, names, cpu_events)
    gpu = _durations(gpu_events, names, gpu_events + cpu_events)
    seen_calls = dict(calls)
    for key, durs in cpu.items():
        if key not in seen_calls:
            seen_calls[key] = ModuleCalls(name=key[1], phase=key[0], calls=len(durs))
    rank = {name: i for i, name in enumerate((*order, *extra))}
    keys = sorted(seen_calls, key=lambda k: (k[0] != "prefill", rank.get(k[1], len(rank)), k[1]))
    records = []
    for key in keys:
        seen = seen_calls[key]
        durs = cpu.get(key, [])
        total_ms = sum(durs) / 1e3
        count = len(durs) or seen.calls
        gpu_durs = gpu.get(key)
        records.append(
            ModuleRecord(
                name=seen.name,
                phase=seen.phase,
                calls=count,
                total_ms=total_ms,
                mean_ms=total_ms / count if count else 0.0,
                device_ms=sum(gpu_durs) / 1e3 if gpu_durs else None,
                input_shapes=[list(s) for s in seen.input_shapes],
                output_shapes=[list(s) for s in seen.output_shapes],
            )
        )
    return records
