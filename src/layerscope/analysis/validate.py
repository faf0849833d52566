"""The analysis behind ``validate`` (:mod:`layerscope.app.validate` runs it): predicted and measured time joined
op by op, the errors, and captures combined.

One validation runs the workload three ways with the same model spec (the capture's config, truncated
to ``layers``), dtype, batch and lengths: the cost model's :func:`~layerscope.cost.estimate`
(TTFT/TPOT), the 1-engine simulation (ops in sequence, as eager PyTorch runs them; its op times
are the predictions and its trace is written), and a torch.profiler capture (every module
annotated with its op name). A capture iteration is a prefill of ``prompt_len`` tokens and
``decode_steps`` decode steps over that prompt's KV cache, so decode is validated at context
``prompt_len``: decode step ``t`` runs at cached length ``prompt_len + t`` on both sides.

The join rule
-------------
Captured annotations nest (``layers.0`` ⊃ ``layers.0.self_attn`` ⊃ ``layers.0.self_attn.q_proj``)
and cover time that no child module accounts for (RoPE, SDPA, the residual adds, Python glue);
predicted ops are flat, and those that are not modules of their own carry the module that runs
them (``Op.module``: ``layers.0.self_attn`` for ``layers.0.self_attn.rope``). So, per phase:

1. The captured modules form a tree by name: the parent of a module is its longest captured
   dotted prefix; modules with none hang under the forward itself, ``(forward)``, whose time is
   the phase's range (``prefill`` / ``decode_step_K``).
2. Every predicted op is *anchored* at the captured module ``op.module`` (its own name for a
   module op), or, when that module was not captured, at its nearest captured ancestor, else
   ``(forward)``. A module op anchored elsewhere than its own name is listed in
   ``only_predicted`` with the node it was compared in.
3. A captured module with no predicted op anchored in its subtree (``act_fn``, ``rotary_emb``)
   is *folded*: its time stays in its parent's exclusive time, and it is listed in
   ``only_measured`` with the node that absorbed it.
4. Every remaining node ``N`` with anchored ops is one row: measured = inclusive time of ``N``
   minus the inclusive time of its kept (not folded) children; predicted = the sum of its
   anchored ops. A node with no kept children is a ``module`` row (inclusive time 1:1, e.g. a
   projection); one with kept children is a ``self`` row (exclusive time, e.g.
   ``layers.0.self_attn`` against rope + kv_write + attn). A node whose exclusive time has no
   anchored op (``(forward)``: embedding glue, masks, rotary tables) is listed in
   ``only_measured`` as unmodelled time; a row whose measured time is not positive in
   ``only_predicted``. Nothing is dropped: the rows and both lists together account for every
   predicted op and every captured module.

Instrumentation
---------------
Each annotated module call costs the capture the hooks that open and close its range (and the
module call around them), about 11 µs a call on the reference CPU with caches cold. That time
falls outside the child's range, inside its parent's: it inflates every ``self`` row by
(calls of its children) x (cost per call) and does not exist in an uninstrumented run. The cost
per call is measured in the trace itself: between two sibling module ranges with no code between
them (``post_attention_layernorm`` → ``mlp``) the gap is the instrumentation alone, so the
estimate is the smallest median gap over the pairs of consecutive siblings (a lower bound: a gap
with code in it is longer). ``validate`` subtracts it per child call from each node's measured
time, and per call from the forward; ``correct_instrumentation=False`` keeps the raw times. The
estimate and the total subtracted are reported per phase.

The profiler itself costs every recorded aten op its bookkeeping (``record_shapes=True``: an
event and its input shapes), inside whichever range runs the op: a decode step's RMSNorm module
(22 aten events) took 32-51 µs without the profiler and 58-84 µs with it on the reference CPU,
0.8-1.0 µs per event. The trace cannot tell that time from the op's dispatch (both sit between the
event's neighbours), so the capture measures it in its own process before the run, by A/B of the
same small eager op sequence with and without a profiler session
(:mod:`layerscope.capture.profiler_cost`; ``CaptureResult.profiler_event``), hot (0.4-0.6 µs per
event there) and cold (0.8-1.1 µs). ``validate`` subtracts the hot figure, a lower bound (a model
that fits in the caches runs whole small ops in less than the cold figure per event), per
``cpu_op`` event inside each range: from a ``module`` row every event in its range, from a ``self``
row the events outside its kept children, from the forward all of its events. The raw times stay
reported (``raw_error``, ``raw_median_abs_error``).

No one figure per event is right, though: the 2,939 events of a Qwen3-MoE experts block in decode
(``torch._grouped_mm``'s per-expert loop of tiny nested ops) cost 0.29 µs each, so the RMSNorm's
0.6-0.9 µs took 2.6 ms off a call that runs in 6-7 ms without the profiler. So on the CPU
``validate`` (``unprofiled=True``, the default there) has each capture run its recorded iterations
once more without the profiler, every module call and phase range timed by ``perf_counter``
(:mod:`layerscope.capture.unprofiled`), and joins *those* times by the same rule:
``PhaseValidation.timing`` is ``unprofiled``, nothing is estimated per event, the instrumentation's own
cost is subtracted as above (its per-call figure the smallest median sibling gap of that pass), and each
row's ``profiler_s`` is what the profiled trace measured on top of the unprofiled pass (so
``raw_error`` is the error against the trace's own time; noise can make it negative). There a
module's span is its whole call, not hook to hook: the call's own Python (``__call__``, the hook
dispatch) then counts in the module's row, where the cost model books it
(``cost.execution.HF_EAGER_MODULE_CALLS``), not in its parent's; a decode step's one-row RMSNorm is
~40-75 µs whole against 23-26 hook to hook on the reference CPU, and the per-call instrumentation
measured between siblings fell from ~9 µs to ~2.5. The trace stays what the Perfetto views show.

Times are per recorded iteration (a phase's ranges summed, divided by the iterations); decode
sums its steps per op (``decode_step_K.`` prefixes stripped) and also reports every step's
whole forward. Errors are signed, ``(predicted − measured) / measured``; the median and p90 of
``|error|`` are over the joined rows (:func:`~layerscope.analysis.compare.abs_error_stats`).

Repeats
-------
One capture is one sample of a noisy machine: on a shared 2-core VM two captures of the identical
workload differed by up to 13% (its GEMM rate flips between modes for seconds at a time), more
than many of the errors being measured. ``repeats=N`` estimates and simulates once, captures N
times (``captured.json.gz``, ``captured-2.json.gz``, …), joins each capture on its own and
combines the joins with :func:`combine_repeats`: every measured time (rows, the forward, each
step, the one-sided entries, the subtracted instrumentation and profiler times and their per-call
and per-event costs) is the median over the captures, matched by name; the predictions are the
same in every join and kept once; errors are recomputed from the medians. Each phase keeps every
capture's whole-forward time (``forward_measured_all_s``) and their spread, (max − min) / median.
"""

from __future__ import annotations

import bisect
import dataclasses
import logging
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import pyarrow as pa

from layerscope.analysis.compare import abs_error_stats
from layerscope.errors import AnalysisError
from layerscope.hardware.host import CpuLoad
from layerscope.workload.steps import PHASE_RANGE_RE, STEP_PREFIX, step_range

if TYPE_CHECKING:
    from layerscope.analysis.engine import TraceDB
    from layerscope.capture import CaptureResult
    from layerscope.capture.machine import MachineMeasurement, ThreadChoice
    from layerscope.capture.probe import MachineProbe
    from layerscope.capture.unprofiled import UnprofiledTimes
    from layerscope.cost import Estimate
    from layerscope.cost.timed import TimedGraph
    from layerscope.hardware import HardwareSpec
    from layerscope.model import ModelSpec

log = logging.getLogger(__name__)

__all__ = [
    "FORWARD",
    "CapturedTimes",
    "ForwardError",
    "KindError",
    "OpRow",
    "PhaseValidation",
    "PredictedOp",
    "Unmatched",
    "ValidationResult",
    "captured_times",
    "combine_phases",
    "combine_repeats",
    "join_capture_times",
    "join_phase",
    "predicted_op",
    "predicted_ops",
    "unprofiled_captured_times",
]

#: Name of the node standing for the phase's whole forward (the root of the captured tree).
FORWARD = "(forward)"


def _error(predicted_s: float, measured_s: float) -> float:
    """Signed relative error; NaN when nothing was measured."""
    return (predicted_s - measured_s) / measured_s if measured_s > 0 else float("nan")


def _finite_or_none(x: float) -> float | None:
    return float(x) if np.isfinite(x) else None


class _Compared:
    """A predicted and a measured time (fields of the dataclass that mixes this in) and their error."""

    predicted_s: float
    measured_s: float

    @property
    def error(self) -> float:
        """Signed relative error of the prediction; NaN when nothing was measured."""
        return _error(self.predicted_s, self.measured_s)

    def _compared_dict(self) -> dict[str, Any]:
        return {"predicted_s": self.predicted_s, "measured_s": self.measured_s, "error": _finite_or_none(self.error)}


@dataclass(frozen=True)
class PredictedOp:
    """One predicted op of a phase (decode: summed over its steps)."""

    name: str
    module: str
    """The HF module that runs it (``Op.module``; ``name`` itself for module ops)."""
    kind: str
    time_s: float


@dataclass(frozen=True)
class OpRow(_Compared):
    """One joined row: a captured node against the predicted ops anchored at it."""

    name: str
    """Captured module path, or :data:`FORWARD`."""
    kind: str
    """The anchored ops' kind; several kinds joined with ``+`` (``attention+kv_write+rope``)."""
    rule: Literal["module", "self"]
    """``module``: the node's inclusive time; ``self``: its exclusive time (kept children subtracted)."""
    predicted_s: float
    measured_s: float
    predicted_ops: tuple[str, ...]
    folded: tuple[str, ...] = ()
    """Captured child modules with nothing predicted, whose time is counted in ``measured_s``."""
    instrumentation_s: float = 0.0
    """Hook time of its children's calls, subtracted from ``measured_s`` (the raw time is the sum)."""
    profiler_s: float = 0.0
    """The profiler's time for the aten events the row's time covers, subtracted from ``measured_s``."""

    @property
    def raw_error(self) -> float:
        """The error against the measured time with the instrumentation and profiler time left in."""
        return _error(self.predicted_s, self.measured_s + self.instrumentation_s + self.profiler_s)

    @property
    def abs_error(self) -> float:
        return abs(self.error)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "rule": self.rule, **self._compared_dict(),
                "instrumentation_s": self.instrumentation_s, "profiler_s": self.profiler_s,
                "raw_error": _finite_or_none(self.raw_error),
                "predicted_ops": list(self.predicted_ops), "folded": list(self.folded)}


@dataclass(frozen=True)
class Unmatched:
    """A predicted op or captured module with no counterpart of its own, and where it went."""

    name: str
    time_s: float
    note: str
    """``compared within X``, ``folded into X``, ``self time with no predicted op``, …"""
    counted_in: str | None = None
    """The node whose row or entry counts this time, or ``None`` when it is counted nowhere else
    (so rows plus the ``None`` entries add up to the phase's whole forward on each side)."""

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "time_s": self.time_s, "note": self.note, "counted_in": self.counted_in}


@dataclass(frozen=True)
class KindError(_Compared):
    """The joined rows of one kind, summed."""

    kind: str
    rows: int
    predicted_s: float
    measured_s: float

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "rows": self.rows, **self._compared_dict()}


@dataclass(frozen=True)
class ForwardError(_Compared):
    """A whole forward (``prefill``, ``decode_step_K``, or a phase's steps together)."""

    name: str
    predicted_s: float
    measured_s: float

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, **self._compared_dict()}


@dataclass(frozen=True)
class PhaseValidation:
    """Predicted vs measured for one phase, per recorded iteration."""

    phase: str
    """``prefill`` or ``decode`` (all decode steps of an iteration)."""
    rows: tuple[OpRow, ...]
    only_predicted: tuple[Unmatched, ...]
    only_measured: tuple[Unmatched, ...]
    forward: ForwardError
    """Sum of every predicted op of the phase vs the phase's measured ranges."""
    steps: tuple[ForwardError, ...] = ()
    """Each forward of the phase (one for prefill, one per decode step)."""
    call_overhead_s: float = 0.0
    """Instrumentation per annotated module call subtracted from the measured times (0: raw)."""
    instrumentation_s: float = 0.0
    """The instrumentation time subtracted from the phase's forward (calls x ``call_overhead_s``)."""
    event_overhead_s: float = 0.0
    """The profiler's time per recorded aten event subtracted from the measured times (0: raw)."""
    profiler_s: float = 0.0
    """The profiler time subtracted from the phase's forward (its events x ``event_overhead_s``)."""
    repeats: int = 1
    """Captures whose joins were combined (their measured times are medians when > 1)."""
    forward_measured_all_s: tuple[float, ...] = ()
    """Each capture's whole-forward measured time, in capture order (``forward.measured_s`` is their median)."""
    timing: Literal["profiled", "unprofiled"] = "profiled"
    """Where the measured times come from: the profiled trace (less the estimated profiler time per event),
    or the capture's unprofiled pass (``profiler_s``: what the trace adds on top of it)."""

    @property
    def forward_spread(self) -> float | None:
        """(max − min) / median of the captures' whole-forward times; ``None`` with fewer than two."""
        times = self.forward_measured_all_s
        if len(times) < 2:
            return None
        median = float(np.median(times))
        return (max(times) - min(times)) / median if median > 0 else None

    @property
    def median_abs_error(self) -> float | None:
        return abs_error_stats([r.error for r in self.rows])[0]

    @property
    def p90_abs_error(self) -> float | None:
        return abs_error_stats([r.error for r in self.rows])[1]

    @property
    def raw_median_abs_error(self) -> float | None:
        """The median |error| with the instrumentation left in the measured times."""
        return abs_error_stats([r.raw_error for r in self.rows])[0]

    @property
    def weighted_abs_error(self) -> float | None:
        """Σ|predicted − measured| / Σ measured over the joined rows (large ops weigh more)."""
        meas = sum(r.measured_s for r in self.rows)
        return sum(abs(r.predicted_s - r.measured_s) for r in self.rows) / meas if meas > 0 else None

    @property
    def ops(self) -> pa.Table:
        """The joined rows as a table: op, kind, rule, predicted_s, measured_s, error, abs_error."""
        return pa.table({
            "op": pa.array([r.name for r in self.rows], pa.string()),
            "kind": pa.array([r.kind for r in self.rows], pa.string()),
            "rule": pa.array([r.rule for r in self.rows], pa.string()),
            "predicted_s": pa.array([r.predicted_s for r in self.rows], pa.float64()),
            "measured_s": pa.array([r.measured_s for r in self.rows], pa.float64()),
            "error": pa.array([r.error for r in self.rows], pa.float64()),
            "abs_error": pa.array([r.abs_error for r in self.rows], pa.float64()),
        })

    def by_kind(self) -> list[KindError]:
        """Joined rows summed per kind, largest measured time first."""
        groups: dict[str, list[float]] = {}
        for r in self.rows:
            g = groups.setdefault(r.kind, [0, 0.0, 0.0])
            g[0] += 1
            g[1] += r.predicted_s
            g[2] += r.measured_s
        out = [KindError(k, int(v[0]), v[1], v[2]) for k, v in groups.items()]
        return sorted(out, key=lambda k: (-k.measured_s, k.kind))

    def worst(self, n: int = 5) -> list[OpRow]:
        """The ``n`` joined rows with the largest ``|predicted − measured|``."""
        return sorted(self.rows, key=lambda r: (-abs(r.predicted_s - r.measured_s), r.name))[:n]

    def summary(self) -> dict[str, Any]:
        return {"phase": self.phase, "ops_joined": len(self.rows), "forward_error": _finite_or_none(
                    self.forward.error),
                "median_abs_error": self.median_abs_error, "p90_abs_error": self.p90_abs_error,
                "weighted_abs_error": self.weighted_abs_error, "only_predicted": len(self.only_predicted),
                "only_measured": len(self.only_measured), "call_overhead_s": self.call_overhead_s,
                "instrumentation_s": self.instrumentation_s, "event_overhead_s": self.event_overhead_s,
                "profiler_s": self.profiler_s, "raw_median_abs_error": self.raw_median_abs_error,
                "repeats": self.repeats, "forward_spread": self.forward_spread, "timing": self.timing}

    def to_dict(self) -> dict[str, Any]:
        return {**self.summary(), "forward": self.forward.to_dict(),
                "forward_measured_all_s": list(self.forward_measured_all_s), "steps": [s.to_dict() for s in self.steps],
                "by_kind": [k.to_dict() for k in self.by_kind()], "ops": [r.to_dict() for r in self.rows],
                "only_predicted_ops": [u.to_dict() for u in self.only_predicted],
                "only_measured_ops": [u.to_dict() for u in self.only_measured]}


def _parent_path(name: str) -> str:
    return name.rsplit(".", 1)[0] if "." in name else ""


def _anchor(path: str, captured: Mapping[str, float]) -> str:
    """``path`` if captured, else its nearest captured dotted prefix, else :data:`FORWARD`."""
    while path:
        if path in captured:
            return path
        path = _parent_path(path)
    return FORWARD


def join_phase(phase: str, predicted: Sequence[PredictedOp], measured: Mapping[str, float], forward_s: float,
               steps: Sequence[ForwardError] = (), *, calls: Mapping[str, float] | None = None,
               call_overhead_s: float = 0.0, events: Mapping[str, float] | None = None,
               forward_events: float = 0.0, event_overhead_s: float = 0.0) -> PhaseValidation:
    """Join one phase's predicted ops with its captured modules by the rule in the module docstring.

    ``measured`` maps each captured module to its inclusive time (s); ``forward_s`` is the
    phase's own measured time (the root's inclusive time). With ``calls`` (module → calls) and
    ``call_overhead_s``, each node's measured time loses ``call_overhead_s`` per call of its
    children and the forward per call of any module (see "Instrumentation" above). With
    ``events`` (module → aten events inside its ranges), ``forward_events`` (inside the phase's
    ranges) and ``event_overhead_s``, each node's measured time also loses ``event_overhead_s``
    per event its time covers (inclusive for a ``module`` row, outside its kept children for a
    ``self`` row) and the forward per event. ``steps`` are taken as given.
    """
    if call_overhead_s < 0:
        raise AnalysisError(f"call_overhead_s must be >= 0, got {call_overhead_s!r}")
    if event_overhead_s < 0:
        raise AnalysisError(f"event_overhead_s must be >= 0, got {event_overhead_s!r}")
    calls = calls or {}
    inclusive_events = {**(events or {}), FORWARD: float(forward_events)}
    captured = {k: float(v) for k, v in measured.items() if k != FORWARD}
    parent = {m: _anchor(_parent_path(m), captured) for m in captured}
    children: dict[str, list[str]] = {}
    for m in captured:  # dict order: the capture's order
        children.setdefault(parent[m], []).append(m)
    instrumentation_s = call_overhead_s * float(sum(calls.get(m, 0.0) for m in captured))
    inclusive = {**captured, FORWARD: float(forward_s)}

    def hooks_s(node: str) -> float:
        # the calls of the node's children, and of everything under a folded child (kept in its time)
        pending, n_calls = list(children.get(node, [])), 0.0
        while pending:
            child = pending.pop()
            n_calls += calls.get(child, 0.0)
            if child not in kept:
                pending.extend(children.get(child, []))
        return call_overhead_s * n_calls

    anchored: dict[str, list[PredictedOp]] = {}
    only_predicted: list[Unmatched] = []
    for op in predicted:
        node = _anchor(op.module, captured)
        anchored.setdefault(node, []).append(op)
        if op.module not in captured:
            what = "no captured module" if op.name == op.module else f"its module {op.module} was not captured"
            only_predicted.append(Unmatched(op.name, op.time_s, f"{what}; compared within {node}", node))

    kept = {FORWARD}
    for node in anchored:
        while node != FORWARD and node not in kept:
            kept.add(node)
            node = parent[node]

    rows: list[OpRow] = []
    only_measured: list[Unmatched] = []
    order = {node: i for i, node in enumerate(dict.fromkeys(_anchor(op.module, captured) for op in predicted))}
    nodes = sorted(kept, key=lambda n: (order.get(n, len(order)), n))
    for node in nodes:
        kids = children.get(node, [])
        kept_kids = [c for c in kids if c in kept]
        folded = tuple(c for c in kids if c not in kept)
        for c in folded:
            only_measured.append(Unmatched(c, inclusive[c], f"nothing predicted; folded into {node}", node))
        node_hooks_s = hooks_s(node)
        node_events = inclusive_events.get(node, 0.0) - sum(inclusive_events.get(c, 0.0) for c in kept_kids)
        node_profiler_s = event_overhead_s * max(0.0, node_events)
        measured_s = inclusive[node] - sum(inclusive[c] for c in kept_kids) - node_hooks_s - node_profiler_s
        ops = anchored.get(node, [])
        if not ops:
            if measured_s > 0:
                only_measured.append(Unmatched(node, measured_s, "self time with no predicted op"))
            continue
        predicted_s = float(sum(op.time_s for op in ops))
        if measured_s <= 0:
            only_predicted.append(Unmatched(node, predicted_s,
                                            f"measured self time {measured_s:.3g} s is not positive"))
            continue
        rows.append(OpRow(
            name=node, kind="+".join(sorted({op.kind for op in ops})), rule="self" if kept_kids else "module",
            predicted_s=predicted_s, measured_s=measured_s, predicted_ops=tuple(op.name for op in ops), folded=folded,
            instrumentation_s=node_hooks_s, profiler_s=node_profiler_s,
        ))
    total_predicted = float(sum(op.time_s for op in predicted))
    profiler_s = event_overhead_s * float(forward_events)
    forward_measured_s = float(forward_s) - instrumentation_s - profiler_s
    return PhaseValidation(phase, tuple(rows), tuple(only_predicted), tuple(only_measured),
                           ForwardError(phase, total_predicted, forward_measured_s),
                           tuple(steps), call_overhead_s, instrumentation_s, event_overhead_s, profiler_s,
                           repeats=1, forward_measured_all_s=(forward_measured_s,))


def _median(values: Iterable[float]) -> float:
    return float(np.median(np.asarray(list(values), dtype=np.float64)))


def _same_prediction(what: str, values: Sequence[float]) -> float:
    """The one predicted time of ``what`` across repeats (predictions are deterministic)."""
    if not np.allclose(values, values[0], rtol=1e-9, atol=0.0):
        raise AnalysisError(f"combine: predicted time of {what} differs between repeats ({values}); "
                            "are they validations of the same workload?")
    return values[0]


def _combine_unmatched(lists: Sequence[Sequence[Unmatched]]) -> tuple[Unmatched, ...]:
    """One entry per (name, counted_in) present in any repeat, its time the median over the repeats that
    have it; the note of its first occurrence."""
    groups: dict[tuple[str, str | None], list[Unmatched]] = {}
    for entries in lists:
        for u in entries:
            groups.setdefault((u.name, u.counted_in), []).append(u)
    return tuple(Unmatched(us[0].name, _median(u.time_s for u in us), us[0].note, us[0].counted_in)
                 for us in groups.values())


def _combine_forwards(what: str, forwards: Sequence[ForwardError]) -> ForwardError:
    return ForwardError(forwards[0].name, _same_prediction(what, [f.predicted_s for f in forwards]),
                        _median(f.measured_s for f in forwards))


def combine_phases(phases: Sequence[PhaseValidation]) -> PhaseValidation:
    """One phase joined in several captures of the same workload, combined by median.

    Every measured time (seconds) is the median over the captures: each row's ``measured_s``,
    ``instrumentation_s`` and ``profiler_s`` (rows matched by name; every capture must have the
    same rows), the forward and each step (steps matched by name), the one-sided entries (matched
    by name and ``counted_in``; an entry of any capture is kept, its median over the captures that
    have it), and the phase's ``call_overhead_s``, ``instrumentation_s``, ``event_overhead_s`` and
    ``profiler_s``. Predicted times must agree and are kept once. Each input must be one capture's
    join (``repeats == 1``: a median of medians is not the median). Raises
    :class:`~layerscope.errors.AnalysisError` on phases that do not match.
    """
    if not phases:
        raise AnalysisError("combine: no phases to combine")
    first = phases[0]
    if len(phases) == 1:
        return first
    for p in phases:
        if p.phase != first.phase:
            raise AnalysisError(f"combine: phase {p.phase!r} differs from {first.phase!r}")
        if p.repeats != 1:
            raise AnalysisError(f"combine: phase {p.phase!r} already combines {p.repeats} captures; "
                                "combine the single captures (a median of medians is not the median)")
        if p.timing != first.timing:
            raise AnalysisError(f"combine: {p.phase} times of one capture are {p.timing}, of another {first.timing}; "
                                "combine captures measured the same way")
    names = [r.name for r in first.rows]
    for i, p in enumerate(phases[1:], start=2):
        other = {r.name for r in p.rows}
        if other != set(names):
            differ = sorted(set(names) ^ other)
            raise AnalysisError(f"combine: {first.phase} rows of repeat {i} differ from repeat 1's: "
                                f"{', '.join(differ)} (in one of them only)")
        step_names = [s.name for s in p.steps]
        if sorted(step_names) != sorted(s.name for s in first.steps):
            raise AnalysisError(f"combine: {first.phase} steps of repeat {i} ({', '.join(step_names)}) differ from "
                                f"repeat 1's ({', '.join(s.name for s in first.steps)})")
    by_name = [{r.name: r for r in p.rows} for p in phases]
    rows = []
    for row in first.rows:
        same = [rows_of[row.name] for rows_of in by_name]
        rows.append(OpRow(
            name=row.name, kind=row.kind, rule=row.rule,
            predicted_s=_same_prediction(f"{first.phase} row {row.name}", [r.predicted_s for r in same]),
            measured_s=_median(r.measured_s for r in same), predicted_ops=row.predicted_ops, folded=row.folded,
            instrumentation_s=_median(r.instrumentation_s for r in same),
            profiler_s=_median(r.profiler_s for r in same),
        ))
    steps_by_name = [{s.name: s for s in p.steps} for p in phases]
    steps = tuple(_combine_forwards(f"{first.phase} step {s.name}", [st[s.name] for st in steps_by_name])
                  for s in first.steps)
    return PhaseValidation(
        phase=first.phase, rows=tuple(rows),
        only_predicted=_combine_unmatched([p.only_predicted for p in phases]),
        only_measured=_combine_unmatched([p.only_measured for p in phases]),
        forward=_combine_forwards(f"{first.phase} forward", [p.forward for p in phases]), steps=steps,
        call_overhead_s=_median(p.call_overhead_s for p in phases),
        instrumentation_s=_median(p.instrumentation_s for p in phases),
        event_overhead_s=_median(p.event_overhead_s for p in phases),
        profiler_s=_median(p.profiler_s for p in phases),
        repeats=len(phases), forward_measured_all_s=tuple(p.forward.measured_s for p in phases),
        timing=first.timing,
    )




@dataclass(frozen=True)
class CapturedTimes:
    """A captured trace's module times per phase range, per recorded iteration (seconds)."""

    modules: dict[str, dict[str, float]]
    """Phase range (``prefill``, ``decode_step_K``) → module op name → inclusive time."""
    ranges: dict[str, float]
    """Phase range → its own time."""
    iterations: int
    calls: dict[str, dict[str, float]] = field(default_factory=dict)
    """Phase range → module op name → calls per iteration."""
    call_overhead_s: float = 0.0
    """Instrumentation per module call: the smallest median gap between consecutive sibling ranges
    (0 when the trace has no sibling ranges)."""
    events: dict[str, dict[str, float]] = field(default_factory=dict)
    """Phase range → module op name → ``cpu_op`` events inside its ranges (all nesting depths), per iteration."""
    range_events: dict[str, float] = field(default_factory=dict)
    """Phase range → ``cpu_op`` events inside it, per iteration."""

    def instrumentation_s(self, phase_range: str) -> float:
        """Instrumentation inside one phase range per iteration: its module calls x the cost per call."""
        return self.call_overhead_s * float(sum(self.calls.get(phase_range, {}).values()))


def captured_times(trace: str | os.PathLike[str] | TraceDB, *, device: str = "cpu") -> CapturedTimes:
    """Read the annotation ranges of a layerscope capture (a file, or an open :class:`TraceDB`, left open)
    and sum them per phase range: the ``user_annotation`` ranges of the CPU thread; on CUDA each module
    range's time is the span of the GPU work launched inside it (``reports.launched_gpu_spans``: the
    launches joined to their kernels by correlation id; Kineto's own ``gpu_user_annotation`` ranges
    cover each range's innermost kernels only), the phase ranges' their host time (each ends in a
    synchronize), and no instrumentation is estimated per call (the hooks cost host time, not GPU time)."""
    from layerscope.analysis.engine import TraceDB

    category = "user_annotation"
    gpu = device != "cpu"
    phase_re = PHASE_RANGE_RE.pattern  # the capture's phase-range names, as a DuckDB regex
    not_module_re = f"{phase_re}|ProfilerStep#[0-9]+"
    # A range belongs to the phase range that contains its start (one clock; phases never overlap).
    sql = f"""
        WITH ann AS (SELECT ts, dur, name FROM slice WHERE category = '{category}' AND dur >= 0
                     AND name IS NOT NULL),
             ph AS (SELECT ts, dur, name FROM ann WHERE regexp_full_match(name, '{phase_re}'))
        SELECT ph.name AS phase, ann.name AS name, SUM(ann.dur) AS dur_ns, COUNT(*) AS n
        FROM ann JOIN ph ON ann.ts >= ph.ts AND ann.ts < ph.ts + ph.dur
        WHERE NOT regexp_full_match(ann.name, '{not_module_re}')
        GROUP BY 1, 2"""
    # Gaps between consecutive sibling module ranges (same parent slice), per (previous, next) pair.
    gaps_sql = f"""
        WITH m AS (SELECT ts, dur, name, parent_id FROM slice WHERE category = '{category}' AND dur >= 0
                   AND name IS NOT NULL AND parent_id IS NOT NULL
                   AND NOT regexp_full_match(name, '{not_module_re}')),
             g AS (SELECT name, ts - LAG(ts + dur) OVER (PARTITION BY parent_id ORDER BY ts) AS gap,
                          LAG(name) OVER (PARTITION BY parent_id ORDER BY ts) AS prev FROM m)
        SELECT MIN(med) AS gap_ns FROM (SELECT MEDIAN(gap) AS med FROM g WHERE prev IS NOT NULL AND gap >= 0
                                        GROUP BY prev, name)"""
    # cpu_op events (aten ops, every nesting depth) inside each range on the range's own thread:
    # what the profiler's per-event cost is charged on. Phase ranges count under the name '' .
    events_sql = f"""
        WITH ann AS (SELECT ts, dur, name, track_id FROM slice WHERE category = '{category}' AND dur >= 0
                     AND name IS NOT NULL),
             ph AS (SELECT ts, dur, name FROM ann WHERE regexp_full_match(name, '{phase_re}')),
             r AS (SELECT ph.name AS phase, ann.name AS name, ann.ts, ann.dur, ann.track_id
                   FROM ann JOIN ph ON ann.ts >= ph.ts AND ann.ts < ph.ts + ph.dur
                   WHERE NOT regexp_full_match(ann.name, 'ProfilerStep#[0-9]+')),
             op AS (SELECT ts, dur, track_id FROM slice WHERE category = 'cpu_op' AND dur >= 0)
        SELECT r.phase AS phase, CASE WHEN r.name = r.phase THEN '' ELSE r.name END AS name, COUNT(*) AS n
        FROM r JOIN op ON op.track_id = r.track_id AND op.ts >= r.ts AND op.ts + op.dur <= r.ts + r.dur
        GROUP BY 1, 2"""
    own = not isinstance(trace, TraceDB)
    db = trace if isinstance(trace, TraceDB) else TraceDB(trace, use_cache=False)
    try:
        ranges = {r["name"]: (int(r["n"]), float(r["d"])) for r in db.records(
            f"SELECT name, COUNT(*) AS n, SUM(dur) AS d FROM slice WHERE category = '{category}' AND dur >= 0 "
            f"AND regexp_full_match(name, '{phase_re}') GROUP BY name")}
        if gpu:
            rows, gap = _gpu_module_rows(db, phase_re, not_module_re), []
        else:
            rows, gap = db.records(sql), db.records(gaps_sql)
        event_rows = db.records(events_sql)
    finally:
        if own:
            db.close()
    gap_ns = gap[0]["gap_ns"] if gap and gap[0]["gap_ns"] is not None else 0.0
    iterations = ranges.get("prefill", (0, 0.0))[0]
    if iterations < 1:
        where = "the trace" if isinstance(trace, TraceDB) else os.fspath(trace)
        raise AnalysisError(f"{where}: no 'prefill' range of category {category!r}; is it a layerscope capture?")
    modules: dict[str, dict[str, float]] = {name: {} for name in ranges}
    calls: dict[str, dict[str, float]] = {name: {} for name in ranges}
    for r in sorted(rows, key=lambda r: (r["phase"], r["name"])):
        modules[r["phase"]][r["name"]] = float(r["dur_ns"]) / 1e9 / iterations
        calls[r["phase"]][r["name"]] = float(r["n"]) / iterations
    events: dict[str, dict[str, float]] = {name: {} for name in ranges}
    range_events: dict[str, float] = dict.fromkeys(ranges, 0.0)
    for r in sorted(event_rows, key=lambda r: (r["phase"], r["name"])):
        if r["name"]:
            events[r["phase"]][r["name"]] = float(r["n"]) / iterations
        else:
            range_events[r["phase"]] = float(r["n"]) / iterations
    return CapturedTimes(modules, {k: d / 1e9 / iterations for k, (_, d) in ranges.items()}, iterations,
                         calls, float(gap_ns) / 1e9, events, range_events)


def predicted_op(name: str, module: str | None, kind: str, time_s: float) -> tuple[str | None, PredictedOp]:
    """(decode step range or None, the op) of a simulated op named ``name`` (step prefix and all); a
    ``module`` of None or "" is the op's own name less the prefix (a module op)."""
    m = STEP_PREFIX.match(name)
    step = step_range(int(m.group(1))) if m else None
    own = name[m.end():] if m else name
    return step, PredictedOp(own, module or own, kind, float(time_s))


def _gpu_module_rows(db: TraceDB, phase_re: str, not_module_re: str) -> list[dict[str, Any]]:
    """(phase, name, dur_ns, n) per module range of a CUDA capture, its time the span of the GPU work
    launched inside it (``reports.launched_gpu_spans``); ranges that launched nothing are left out
    (nothing of theirs ran on the GPU)."""
    from layerscope.analysis.reports import launched_gpu_spans

    ranges = launched_gpu_spans(db)
    phase = re.compile(phase_re)
    not_module = re.compile(not_module_re)
    phases = sorted((r["ts"], r["ts"] + r["dur"], r["name"]) for r in ranges if phase.fullmatch(r["name"]))
    starts = [p[0] for p in phases]
    acc: dict[tuple[str, str], list[float]] = {}
    for r in ranges:
        i = bisect.bisect_right(starts, r["ts"]) - 1
        if r["gpu_ns"] is None or not_module.fullmatch(r["name"]) or i < 0 or r["ts"] >= phases[i][1]:
            continue
        total = acc.setdefault((phases[i][2], r["name"]), [0.0, 0.0])
        total[0] += r["gpu_ns"]
        total[1] += 1
    return [{"phase": k[0], "name": k[1], "dur_ns": v[0], "n": v[1]} for k, v in acc.items()]


def predicted_ops(timed: TimedGraph) -> list[tuple[str | None, PredictedOp]]:
    """(decode step or None, op with the step prefix stripped) for each op of a timed graph (a simulation's)."""
    return [predicted_op(op.name, op.module, op.kind, t)
            for op, t in zip(timed.graph.ops, np.asarray(timed.time_s).tolist(), strict=True)]


def _sum_by_name(ops: Iterable[PredictedOp]) -> list[PredictedOp]:
    acc: dict[str, PredictedOp] = {}
    for op in ops:
        prev = acc.get(op.name)
        acc[op.name] = op if prev is None else PredictedOp(op.name, op.module, op.kind, prev.time_s + op.time_s)
    return list(acc.values())


def _sum_modules(tables: Iterable[Mapping[str, float]]) -> dict[str, float]:
    out: dict[str, float] = {}
    for table in tables:
        for name, t in table.items():
            out[name] = out.get(name, 0.0) + t
    return out


@dataclass(frozen=True)
class ValidationResult:
    """What :func:`validate` ran, predicted and measured."""

    model: str
    hardware: HardwareSpec
    hardware_path: Path | None
    """The measured spec written as YAML (``hardware="measure"``), else ``None``."""
    cost_model: str
    device: str
    dtype: str
    layers: int
    batch: int
    prompt_len: int
    decode_steps: int
    threads: int
    """Intra-op threads torch ran the capture with."""
    estimate: Estimate
    capture: CaptureResult
    phases: tuple[PhaseValidation, ...]
    traces: dict[str, Path] = field(default_factory=dict)
    """``simulated_prefill``, ``simulated_decode`` (with decode steps) and ``captured``."""
    spec: ModelSpec | None = field(default=None, repr=False)
    """The model spec predicted (the captured config, truncated): what :func:`rejoin` predicts again."""
    corrected: bool = True
    """Whether the instrumentation and profiler time were subtracted (``correct_instrumentation``)."""
    probes: tuple[MachineProbe, ...] = ()
    """The machine check before and after each capture (:mod:`layerscope.capture.probe`), if run."""
    measurement: MachineMeasurement | None = None
    """How this machine was measured (``hardware="measure"``): rounds, spread, other processes' load."""
    capture_loads: tuple[CpuLoad | None, ...] = ()
    """Other processes' CPU load during each capture (``None`` where the OS cannot tell)."""
    thread_choice: ThreadChoice | None = None
    """How ``threads`` was chosen (``threads="auto"`` or a count); ``None``: torch's count as it was."""

    @property
    def busiest_capture_load(self) -> CpuLoad | None:
        """The capture load that left our threads the fewest cores."""
        known = [c for c in self.capture_loads if c is not None]
        return max(known, key=lambda c: c.oversubscribed_cores(self.threads), default=None)

    def phase(self, name: str) -> PhaseValidation:
        for p in self.phases:
            if p.phase == name:
                return p
        raise AnalysisError(f"phase: no {name!r} in this validation; known: {', '.join(p.phase for p in self.phases)}")



#: The fields of a :class:`ValidationResult` that name its workload: repeats combine only when all agree.
_WORKLOAD_FIELDS = ("model", "hardware", "cost_model", "device", "dtype", "layers", "batch", "prompt_len",
                    "decode_steps")


def combine_repeats(results: Sequence[ValidationResult]) -> ValidationResult:
    """Validations of the same workload (one capture each), combined by median per phase
    (:func:`combine_phases`; module docstring, "Repeats").

    The result is the first validation's (its estimate, capture, hardware and traces) with the
    combined phases, and its ``traces`` gain ``captured_<i>``: the ``i``-th capture's trace from the
    second on (the first's stays ``captured``).
    One result is returned as it is. Raises :class:`~layerscope.errors.AnalysisError` when the
    workloads or the phases differ.
    """
    if not results:
        raise AnalysisError("combine: no validations to combine")
    first = results[0]
    if len(results) == 1:
        return first

    def workload_value(r: ValidationResult, name: str) -> Any:
        return r.hardware.name if name == "hardware" else getattr(r, name)

    for i, r in enumerate(results[1:], start=2):
        for name in _WORKLOAD_FIELDS:
            a, b = workload_value(first, name), workload_value(r, name)
            if a != b:
                raise AnalysisError(f"combine: {name} of repeat {i} ({b!r}) differs from repeat 1's ({a!r}); "
                                    "repeats must validate the same workload")
        names = [p.phase for p in r.phases]
        if names != [p.phase for p in first.phases]:
            raise AnalysisError(f"combine: phases of repeat {i} ({', '.join(names)}) differ from repeat 1's "
                                f"({', '.join(p.phase for p in first.phases)})")
    phases = tuple(combine_phases([r.phase(p.phase) for r in results]) for p in first.phases)
    traces = {**first.traces,
              **{f"captured_{i}": r.capture.trace_path for i, r in enumerate(results[1:], start=2)}}
    # The i-th result's probes belong to capture i (separate validations each number theirs 1).
    probes = tuple(dataclasses.replace(p, capture=i) for i, r in enumerate(results, start=1) for p in r.probes)
    loads = tuple(c for r in results for c in r.capture_loads)
    return dataclasses.replace(first, phases=phases, traces=traces, probes=probes, capture_loads=loads)


#: Predicted ops of one simulated phase: (decode step range or None, the op with its step prefix stripped).
StepOps = Sequence[tuple[str | None, "PredictedOp"]]


def _join_times(measured: CapturedTimes, prefill: StepOps | None, decode: StepOps | None, *, decode_steps: int,
                per_call_s: float, per_event_s: float, correct: bool) -> list[PhaseValidation]:
    """One capture's times joined with predicted ops: the prefill phase when ``prefill`` is given, and
    decode (its first ``decode_steps`` steps summed per op) when ``decode`` is."""

    def range_s(name: str) -> float:  # a phase range's time, less its instrumentation when correcting
        if not correct:
            return measured.ranges.get(name, 0.0)
        return (measured.ranges.get(name, 0.0) - measured.instrumentation_s(name)
                - per_event_s * measured.range_events.get(name, 0.0))

    phases = []
    if prefill is not None:
        prefill_ops = [op for _, op in prefill]
        phases.append(join_phase(
            "prefill", prefill_ops, measured.modules.get("prefill", {}), measured.ranges.get("prefill", 0.0),
            [ForwardError("prefill", sum(op.time_s for op in prefill_ops), range_s("prefill"))],
            calls=measured.calls.get("prefill", {}), call_overhead_s=per_call_s,
            events=measured.events.get("prefill", {}),
            forward_events=measured.range_events.get("prefill", 0.0), event_overhead_s=per_event_s))
    if decode is not None and decode_steps:
        names = [step_range(t) for t in range(decode_steps)]
        steps = [ForwardError(s, sum(op.time_s for step, op in decode if step == s), range_s(s)) for s in names]
        phases.append(join_phase(
            "decode", _sum_by_name(op for _, op in decode),
            _sum_modules(measured.modules.get(s, {}) for s in names), sum(measured.ranges.get(s, 0.0) for s in names),
            steps, calls=_sum_modules(measured.calls.get(s, {}) for s in names), call_overhead_s=per_call_s,
            events=_sum_modules(measured.events.get(s, {}) for s in names),
            forward_events=sum(measured.range_events.get(s, 0.0) for s in names), event_overhead_s=per_event_s))
    return phases


def _with_profiled(clean: PhaseValidation, raw: PhaseValidation) -> PhaseValidation:
    """``clean`` (the unprofiled pass, hooks subtracted) with the profiler's time of each row and of the
    forward set to what the profiled trace (``raw``, uncorrected) adds on top of it, so that
    ``raw_error`` is the error against the trace's own times. Noise can make it negative."""
    raw_rows = {r.name: r for r in raw.rows}
    rows = tuple(dataclasses.replace(r, profiler_s=raw_rows[r.name].measured_s - r.measured_s - r.instrumentation_s)
                 if r.name in raw_rows else r for r in clean.rows)
    profiler_s = raw.forward.measured_s - clean.forward.measured_s - clean.instrumentation_s
    return dataclasses.replace(clean, rows=rows, profiler_s=profiler_s, event_overhead_s=0.0, timing="unprofiled")


def unprofiled_captured_times(times: UnprofiledTimes) -> CapturedTimes:
    """A capture's unprofiled pass (``CaptureResult.unprofiled``) in the form :func:`captured_times` reads a trace."""
    return CapturedTimes(modules={k: dict(v) for k, v in times.modules.items()}, ranges=dict(times.ranges),
                         iterations=times.iterations, calls={k: dict(v) for k, v in times.calls.items()},
                         call_overhead_s=times.call_overhead_s)


def join_capture_times(measured: CapturedTimes, prefill: StepOps | None, decode: StepOps | None, *,
                       decode_steps: int, unprofiled: UnprofiledTimes | None = None,
                       per_event_s: float | None = None,
                       correct_instrumentation: bool = True) -> tuple[PhaseValidation, ...]:
    """A capture's times (``measured``, read from its trace) joined with predicted ops (module docstring,
    "Instrumentation"): from its unprofiled pass (``unprofiled``) when it has one and the times are
    corrected, else from the trace less the instrumentation per call and the profiler's ``per_event_s``
    (the capture's hot figure; None: not known, nothing subtracted per event)."""
    if correct_instrumentation and unprofiled is not None:
        clean = _join_times(unprofiled_captured_times(unprofiled), prefill, decode, decode_steps=decode_steps,
                            per_call_s=unprofiled.call_overhead_s, per_event_s=0.0, correct=True)
        raw = _join_times(measured, prefill, decode, decode_steps=decode_steps, per_call_s=0.0, per_event_s=0.0,
                          correct=False)
        return tuple(_with_profiled(c, r) for c, r in zip(clean, raw, strict=True))
    per_call_s = measured.call_overhead_s if correct_instrumentation else 0.0
    event_s = per_event_s if correct_instrumentation and per_event_s is not None else 0.0
    return tuple(_join_times(measured, prefill, decode, decode_steps=decode_steps, per_call_s=per_call_s,
                             per_event_s=event_s, correct=correct_instrumentation))
