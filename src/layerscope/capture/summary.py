"""Per-module summary of a captured trace: time, calls and shapes per module and phase.

Times come from the trace's annotation ranges (``user_annotation`` on the CPU thread); on CUDA a
module's device time is the span of the GPU work it launched (:func:`launched_spans`); call counts
and shapes from the forward hooks that opened those ranges.

Why not Kineto's ``gpu_user_annotation`` ranges: Kineto tags each kernel with the *innermost*
``record_function`` range open when it was launched and draws one GPU range per range over its own
kernels only. ``layers.0`` then spans its residual adds, ``mlp`` its one multiply, ``prefill`` the
input's ``arange``; a module that launches nothing itself has no GPU range at all. The CPU ranges
nest; the launches inside one (``cuda_runtime`` events, linked to their kernels by ``correlation``)
are exactly the GPU work of the module and its children.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict

from layerscope.capture.annotate import ModuleCalls
from layerscope.workload.steps import is_phase_range

#: Trace category of the annotation ranges (the CPU thread's).
CPU_ANNOTATION = "user_annotation"

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
    """Span of the GPU work the module's calls launched (first start to last end per call, summed), when
    captured on CUDA (:func:`launched_spans`)."""
    device_busy_ms: float | None = None
    """The GPU's own time on that work (kernels, copies and memsets, summed): ``device_ms`` less the idle gaps
    where the host issued the work slower than the GPU ran it (:func:`launched_work`)."""
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


#: Categories of the GPU work a launch makes (Kineto), and of the host calls that launch it.
GPU_WORK = ("kernel", "gpu_memcpy", "gpu_memset")
LAUNCH = ("cuda_runtime", "cuda_driver")


def launched_work(range_track: Sequence[Any], range_start: Sequence[float], range_end: Sequence[float],
                  launch_track: Sequence[Any], launch_ts: Sequence[float], work_start: Sequence[float],
                  work_end: Sequence[float]) -> list[tuple[float, float] | None]:
    """Per range, ``(span, busy)`` of the GPU work launched inside it (a launch on the range's track with
    ``start <= ts < end``); None where nothing was launched. The span runs from the work's first start to its
    last end; busy is the sum of the work's own durations, the device's time on it: the span less the idle
    gaps, where the host issued the work slower than the GPU ran it.

    Launch ``i`` made the work ``[work_start[i], work_end[i])`` (one entry per launch, joined to its work by
    Kineto's correlation id). The ranges nest, so a module's span and busy time cover its children's work.
    """
    by_track: dict[Any, list[int]] = defaultdict(list)
    for i, track in enumerate(launch_track):
        by_track[track].append(i)
    sorted_ts: dict[Any, np.ndarray] = {}
    starts: dict[Any, np.ndarray] = {}
    ends: dict[Any, np.ndarray] = {}
    busy_before: dict[Any, np.ndarray] = {}  # per track: work time of the launches before index i
    for track, idx in by_track.items():
        ts = np.asarray([launch_ts[i] for i in idx], dtype=np.float64)
        order = np.argsort(ts, kind="stable")
        sorted_ts[track] = ts[order]
        starts[track] = np.asarray([work_start[i] for i in idx], dtype=np.float64)[order]
        ends[track] = np.asarray([work_end[i] for i in idx], dtype=np.float64)[order]
        busy_before[track] = np.concatenate(([0.0], np.cumsum(ends[track] - starts[track])))
    out: list[tuple[float, float] | None] = []
    for track, start, end in zip(range_track, range_start, range_end, strict=True):
        at = sorted_ts.get(track)
        if at is None:
            out.append(None)
            continue
        lo, hi = np.searchsorted(at, start, "left"), np.searchsorted(at, end, "left")
        if hi <= lo:
            out.append(None)
            continue
        span = float(ends[track][lo:hi].max() - starts[track][lo:hi].min())
        out.append((span, float(busy_before[track][hi] - busy_before[track][lo])))
    return out


def launched_spans(range_track: Sequence[Any], range_start: Sequence[float], range_end: Sequence[float],
                   launch_track: Sequence[Any], launch_ts: Sequence[float], work_start: Sequence[float],
                   work_end: Sequence[float]) -> list[float | None]:
    """Per range, the span from the first start to the last end of the GPU work launched inside it
    (:func:`launched_work`'s span); None where nothing was launched."""
    work = launched_work(range_track, range_start, range_end, launch_track, launch_ts, work_start, work_end)
    return [None if w is None else w[0] for w in work]


def _gpu_durations(events: list[Mapping[str, Any]],
                   cpu_ranges: list[Mapping[str, Any]]) -> tuple[list[Mapping[str, Any]], list[Mapping[str, Any]]]:
    """``cpu_ranges`` twice, with ``dur`` replaced by the span (µs) of the GPU work launched inside each, then by
    its busy time (:func:`launched_work`, launches joined to their work by ``args.correlation``); ranges that
    launched nothing are left out."""
    work: dict[Any, tuple[float, float]] = {}
    for e in events:
        corr = (e.get("args") or {}).get("correlation")
        if e.get("ph") == "X" and e.get("cat") in GPU_WORK and corr is not None:
            t0 = float(e["ts"])
            prev = work.get(corr)
            t1 = t0 + float(e.get("dur", 0.0))
            work[corr] = (t0, t1) if prev is None else (min(prev[0], t0), max(prev[1], t1))
    launches = [(e.get("pid"), e.get("tid"), float(e["ts"]), work[c]) for e in events
                if e.get("ph") == "X" and e.get("cat") in LAUNCH
                and (c := (e.get("args") or {}).get("correlation")) is not None and c in work]
    found = launched_work([(r.get("pid"), r.get("tid")) for r in cpu_ranges], [float(r["ts"]) for r in cpu_ranges],
                          [float(r["ts"]) + float(r.get("dur", 0.0)) for r in cpu_ranges],
                          [(p, t) for p, t, _, _ in launches], [ts for _, _, ts, _ in launches],
                          [w[0] for *_, w in launches], [w[1] for *_, w in launches])
    kept = [(r, w) for r, w in zip(cpu_ranges, found, strict=True) if w is not None]
    return [{**r, "dur": w[0]} for r, w in kept], [{**r, "dur": w[1]} for r, w in kept]


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
        if is_phase_range(e["name"]):
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
        if is_phase_range(e["name"]):
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
    cpu_events = _annotations(events, CPU_ANNOTATION)
    cpu = _durations(cpu_events, names, cpu_events)
    module_ranges = [e for e in cpu_events if e["name"] in names]
    spans, busy = _gpu_durations(events, module_ranges) if module_ranges else ([], [])
    gpu = _durations(spans, names, cpu_events) if spans else {}
    gpu_busy = _durations(busy, names, cpu_events) if busy else {}
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
        busy_durs = gpu_busy.get(key)
        records.append(
            ModuleRecord(
                name=seen.name,
                phase=seen.phase,
                calls=count,
                total_ms=total_ms,
                mean_ms=total_ms / count if count else 0.0,
                device_ms=sum(gpu_durs) / 1e3 if gpu_durs else None,
                device_busy_ms=sum(busy_durs) / 1e3 if busy_durs else None,
                input_shapes=[list(s) for s in seen.input_shapes],
                output_shapes=[list(s) for s in seen.output_shapes],
            )
        )
    return records
