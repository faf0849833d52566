"""Compare two traces, or a simulated trace with a measured one.

``compare_traces(a, b)``: kernels of run A against run B — totals, per kernel name and per
category counts and times with deltas, and the kernels only one run has.

``compare_sim_real(sim, real)``: predicted vs measured time per op. The simulated trace (layerscope
``simulate``) names each slice after its op (``layers.3.mlp.up_proj``, ``decode_step_2.`` before it in
a multi-step run) with its kind as the category and, where an op is not a module of its own, the
module that runs it as the ``module`` arg. A layerscope capture (``prefill`` / ``decode_step_K``
ranges) is joined as ``validate`` joins it, one phase: module rows inclusive, parent rows exclusive,
instrumentation and profiler time subtracted as the capture measured them, the whole forward when
the simulation is the whole model. Any other trace is joined by slice name (HF's leading ``model.``
dropped): measured time per op is the sum of its annotation durations divided by the number of
recorded iterations (the count of ``ProfilerStep#N`` annotations when present, else 1, or
``iterations``). Error per op is ``(predicted − measured) / measured``.
"""

from __future__ import annotations

import gzip
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import orjson
import pyarrow as pa

from layerscope.analysis.engine import TraceDB
from layerscope.analysis.kernel_names import classify
from layerscope.analysis.reports import MODULE_NAME, PHASE_NAME
from layerscope.errors import AnalysisError
from layerscope.trace.tables import TraceTables
from layerscope.workload.steps import step_of_range, step_range

if TYPE_CHECKING:
    from layerscope.analysis.validate import CapturedTimes, ForwardError, PredictedOp

Source = str | os.PathLike[str] | TraceTables | TraceDB


def _open(source: Source, use_cache: bool) -> tuple[TraceDB, bool]:
    if isinstance(source, TraceDB):
        return source, False
    return TraceDB(source, use_cache=use_cache), True


@dataclass
class TraceComparison:
    """The result of :func:`compare_traces`; every table has ``_a``/``_b``/``delta`` columns."""

    summary: pa.Table
    by_name: pa.Table
    by_category: pa.Table
    only_in_a: pa.Table
    only_in_b: pa.Table

    def tables(self) -> dict[str, pa.Table]:
        return {"summary": self.summary, "by_name": self.by_name, "by_category": self.by_category,
                "only_in_a": self.only_in_a, "only_in_b": self.only_in_b}


def _kernel_stats(db: TraceDB) -> tuple[dict[str, Any], dict[str, tuple[int, int]]]:
    totals = db.records("""
        SELECT (MAX(ts + dur) FILTER (WHERE dur >= 0) - MIN(ts)) AS span_ns,
               COUNT(*) FILTER (WHERE category = 'kernel') AS kernels,
               COALESCE(SUM(dur) FILTER (WHERE category = 'kernel'), 0) AS kernel_ns
        FROM slice""")[0]
    per_name = {r["name"]: (r["n"], r["d"]) for r in db.records(
        "SELECT name, COUNT(*) AS n, SUM(dur) AS d FROM slice WHERE category = 'kernel' GROUP BY name")}
    return totals, per_name


def _delta_rows(keys: list[str], a: dict[str, tuple[int, int]], b: dict[str, tuple[int, int]],
                key_name: str) -> pa.Table:
    rows = []
    for k in keys:
        na, da = a.get(k, (0, 0))
        nb, db_ = b.get(k, (0, 0))
        rows.append({key_name: k, "count_a": na, "count_b": nb, "count_delta": nb - na,
                     "total_ms_a": da / 1e6, "total_ms_b": db_ / 1e6, "total_ms_delta": (db_ - da) / 1e6,
                     "mean_us_a": da / na / 1e3 if na else None, "mean_us_b": db_ / nb / 1e3 if nb else None,
                     "total_pct_delta": 100.0 * (db_ - da) / da if da else None})
    schema = pa.schema([(key_name, pa.string()), ("count_a", pa.int64()), ("count_b", pa.int64()),
                        ("count_delta", pa.int64()), ("total_ms_a", pa.float64()), ("total_ms_b", pa.float64()),
                        ("total_ms_delta", pa.float64()), ("mean_us_a", pa.float64()),
                        ("mean_us_b", pa.float64()), ("total_pct_delta", pa.float64())])
    table = pa.Table.from_pylist(rows, schema=schema)
    return table.sort_by([("total_ms_delta", "descending"), (key_name, "ascending")]) if rows else table


def compare_traces(a: Source, b: Source, *, use_cache: bool = True) -> TraceComparison:
    """Compare the GPU kernels of trace ``a`` (control) and trace ``b`` (test)."""
    db_a, close_a = _open(a, use_cache)
    try:
        db_b, close_b = _open(b, use_cache)
        try:
            tot_a, names_a = _kernel_stats(db_a)
            tot_b, names_b = _kernel_stats(db_b)
        finally:
            if close_b:
                db_b.close()
    finally:
        if close_a:
            db_a.close()

    def metric(name: str, va: float, vb: float) -> dict[str, Any]:
        return {"metric": name, "a": va, "b": vb, "delta": vb - va,
                "delta_pct": 100.0 * (vb - va) / va if va else None}

    summary = pa.Table.from_pylist([
        metric("span_ms", (tot_a["span_ns"] or 0) / 1e6, (tot_b["span_ns"] or 0) / 1e6),
        metric("kernel_count", tot_a["kernels"], tot_b["kernels"]),
        metric("kernel_time_ms", tot_a["kernel_ns"] / 1e6, tot_b["kernel_ns"] / 1e6),
        metric("kernel_mean_us", tot_a["kernel_ns"] / tot_a["kernels"] / 1e3 if tot_a["kernels"] else 0.0,
               tot_b["kernel_ns"] / tot_b["kernels"] / 1e3 if tot_b["kernels"] else 0.0),
        metric("distinct_kernels", len(names_a), len(names_b)),
    ], schema=pa.schema([("metric", pa.string()), ("a", pa.float64()), ("b", pa.float64()),
                         ("delta", pa.float64()), ("delta_pct", pa.float64())]))
    by_name = _delta_rows(sorted(set(names_a) | set(names_b)), names_a, names_b, "name")

    def per_category(names: dict[str, tuple[int, int]]) -> dict[str, tuple[int, int]]:
        out: dict[str, tuple[int, int]] = {}
        for name, (n, d) in names.items():
            c = classify(name)
            pn, pd = out.get(c, (0, 0))
            out[c] = (pn + n, pd + d)
        return out

    cat_a, cat_b = per_category(names_a), per_category(names_b)
    by_category = _delta_rows(sorted(set(cat_a) | set(cat_b)), cat_a, cat_b, "category")
    only_a = _delta_rows(sorted(set(names_a) - set(names_b)), names_a, {}, "name").select(
        ["name", "count_a", "total_ms_a", "mean_us_a"]).sort_by([("total_ms_a", "descending")])
    only_b = _delta_rows(sorted(set(names_b) - set(names_a)), {}, names_b, "name").select(
        ["name", "count_b", "total_ms_b", "mean_us_b"]).sort_by([("total_ms_b", "descending")])
    return TraceComparison(summary, by_name, by_category, only_a, only_b)


def _op_name(name: str) -> str:
    name = name.strip()
    return name[len("model."):] if name.startswith("model.") else name


def abs_error_stats(errors: Sequence[float] | np.ndarray) -> tuple[float | None, float | None]:
    """Median and 90th percentile of ``|error|`` over the finite errors (``None`` when there are none).

    Percentile definition: linear interpolation between closest ranks (numpy's default,
    Hyndman & Fan type 7): over the n sorted values x₀ ≤ … ≤ xₙ₋₁, the p-th percentile is at
    rank h = (n − 1)·p/100, i.e. x⌊h⌋ + (h − ⌊h⌋)·(x⌊h⌋₊₁ − x⌊h⌋). The median is p = 50.
    """
    values = np.asarray(errors, dtype=float)
    finite = np.abs(values[np.isfinite(values)])
    if not len(finite):
        return None, None
    return float(np.percentile(finite, 50)), float(np.percentile(finite, 90))


@dataclass
class SimRealComparison:
    """The result of :func:`compare_sim_real`."""

    ops: pa.Table
    """op, kind, rule, predicted_us, measured_us, error (``(pred − meas) / meas``), abs_error."""
    median_abs_error: float | None
    p90_abs_error: float | None
    iterations: int
    only_sim: list[str]
    only_real: list[str]
    join: Literal["modules", "names"] = "names"
    """``modules``: the real trace is a layerscope capture, joined by validate's rule; ``names``: by slice name."""
    phase: str | None = None
    """The captured phase compared (``prefill`` / ``decode``; module join only)."""
    forward: ForwardError | None = None
    """The phase's whole forward, when the simulation covers every captured decoder layer (module join only)."""
    notes: list[str] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        fwd = self.forward
        return {"join": self.join, "phase": self.phase, "ops_joined": self.ops.num_rows,
                "median_abs_error": self.median_abs_error, "p90_abs_error": self.p90_abs_error,
                "forward_predicted_us": None if fwd is None else fwd.predicted_s * 1e6,
                "forward_measured_us": None if fwd is None else fwd.measured_s * 1e6,
                "forward_error": None if fwd is None or fwd.error != fwd.error else fwd.error,
                "iterations": self.iterations, "only_sim": len(self.only_sim), "only_real": len(self.only_real),
                "notes": self.notes}


#: The phase in a simulated trace's process name (``<model>:prefill…``, ``<model>:decode@1024…``,
#: ``<model>:decode_steps4``; ``app.simulate.build_graph`` names the graph, the writers the process).
_SIM_PHASE = re.compile(r":(prefill|decode)(?:@\d+|_steps\d+)?(?::layer\d+)?\b")
#: Phases of a simulation that a capture (a prefill, then decode steps) has a counterpart for.
COMPARABLE_PHASES = ("prefill", "decode")


def _simulated_ops(db: TraceDB) -> tuple[list[tuple[str | None, PredictedOp]], str | None]:
    """The simulated trace's ops (each slice on its engines: name, kind, module arg, duration) as validate's
    predicted ops, and the phase its process name states (None when it states none)."""
    from layerscope.analysis.validate import predicted_op

    # The module arg straight from each arg set's JSON (the ``args`` view would expand every arg of every op).
    rows = db.records(
        "SELECT s.name, s.category AS kind, s.dur, COALESCE(json_extract_string(a.json, '$.args.module'), "
        "json_extract_string(a.json, '$.debug.module')) AS module FROM slice s "
        "LEFT JOIN __arg_sets a ON a.arg_set_id = s.arg_set_id "
        "WHERE s.dur >= 0 AND s.name IS NOT NULL ORDER BY s.ts, s.id")
    ops = [predicted_op(r["name"], r["module"], r["kind"] or "", float(r["dur"]) / 1e9) for r in rows]
    names = [r["name"] for r in db.records("SELECT name FROM process WHERE name IS NOT NULL")]
    phases = {m.group(1) for n in names for m in [_SIM_PHASE.search(n)] if m}
    return ops, (phases.pop() if len(phases) == 1 else None)


def _capture_metadata(real: Source) -> dict[str, Any]:
    """The ``layerscope`` object a capture writes into its trace (empty for other traces and sources)."""
    if not isinstance(real, (str, os.PathLike)):
        return {}
    path = Path(real)
    try:
        with open(path, "rb") as raw:
            gz = raw.read(2) == b"\x1f\x8b"
        with (gzip.open(path, "rb") if gz else open(path, "rb")) as fh:
            doc = orjson.loads(fh.read())
    except (OSError, orjson.JSONDecodeError, EOFError):
        return {}  # not JSON (a protobuf trace) or unreadable here: the reader says what is wrong
    meta = doc.get("layerscope") if isinstance(doc, dict) else None
    return meta if isinstance(meta, dict) else {}


_LAYER = re.compile(r"layers\.\d+")


def _layers(names: Iterable[str]) -> set[str]:
    return {m.group(0) for n in names for m in [_LAYER.match(n)] if m}


def compare_sim_real(sim: Source, real: Source, *, iterations: int | None = None, phase: str | None = None,
                     use_cache: bool = True) -> SimRealComparison:
    """Predicted (simulated trace) vs measured (captured trace) time per op.

    A layerscope capture (its ``prefill`` / ``decode_step_K`` ranges) is joined as ``validate`` joins it
    (:mod:`layerscope.analysis.validate`: one phase, module rows inclusive, parent rows exclusive, the
    instrumentation and the profiler's own time subtracted as the capture measured them). The phase is the
    simulation's: ``phase`` when given, else the one its process name states. A multi-step simulation
    (``decode_step_K.`` op names) is joined with the capture's first K+1 decode steps; a single decode
    pass with its first decode step. Any other trace is joined by slice name (``_op_name``): measured
    time per op is the sum of its ``user_annotation`` durations divided by ``iterations`` (default: the
    number of ``ProfilerStep#N`` annotations, else 1).
    """
    if phase is not None and phase not in COMPARABLE_PHASES:
        raise AnalysisError(f"phase: unknown phase {phase!r}; known: {', '.join(COMPARABLE_PHASES)}")
    db_s, close_s = _open(sim, use_cache)
    try:
        sim_is_simulation, sim_is_capture = _is_simulation(db_s), _is_capture(db_s)
        sim_ops, sim_phase = _simulated_ops(db_s)
    finally:
        if close_s:
            db_s.close()
    db_r, close_r = _open(real, use_cache)
    try:
        real_is_simulation = _is_simulation(db_r)
        if real_is_simulation and not sim_is_simulation:
            what = "a layerscope capture" if sim_is_capture else "not a layerscope simulation"
            raise AnalysisError(
                f"--sim and --real look swapped: the real trace {_label(real)} is a layerscope simulation and the "
                f"simulated trace {_label(sim)} is {what}; give --sim {_label(real)} --real {_label(sim)}")
        if sim_is_capture:
            raise AnalysisError(f"the simulated trace {_label(sim)} is a layerscope capture (its prefill / "
                                "decode_step ranges); --sim takes a trace of layerscope simulate --out")
        # A capture's phase ranges are on its CPU thread on either device; a CUDA one has kernels too.
        is_capture = _is_capture(db_r)
        device = "cuda" if db_r.scalar("SELECT COUNT(*) FROM slice WHERE category = 'kernel'") else "cpu"
        if is_capture:
            from layerscope.analysis.validate import captured_times

            measured = captured_times(db_r, device=device)
        else:
            return _joined_something(_compare_by_name(sim_ops, db_r, iterations), sim, real, real_is_simulation)
    finally:
        if close_r:
            db_r.close()
    if iterations is not None:
        raise AnalysisError(f"iterations: the real trace is a layerscope capture of {measured.iterations} recorded "
                            "iterations, which it says itself; --iterations is for other traces")
    return _joined_something(_compare_capture(sim_ops, phase or sim_phase, measured, _capture_metadata(real)),
                             sim, real, real_is_simulation)


#: The process a layerscope simulation's trace draws its engines in: ``<graph> · N engines (<policy>)``
#: (``trace.chrome_writer.process_title``, used by the protobuf writer too).
_SIM_PROCESS = re.compile(r" · \d+ engines? \([^()]*\)$")


def _is_simulation(db: TraceDB) -> bool:
    """Whether ``db`` is a trace layerscope ``simulate`` wrote (its JSON says so in ``otherData``; both
    formats name the process after the simulated graph and its engines)."""
    other = db.metadata.get("otherData")
    if isinstance(other, dict) and other.get("generator") == "layerscope":
        return True
    names = db.records("SELECT name FROM process WHERE name IS NOT NULL")
    return any(_SIM_PROCESS.search(str(r["name"])) for r in names)


def _is_capture(db: TraceDB) -> bool:
    """Whether ``db`` is a layerscope capture: its ``layerscope`` metadata object, or its ``prefill`` range."""
    if isinstance(db.metadata.get("layerscope"), dict):
        return True
    return bool(db.scalar("SELECT COUNT(*) FROM slice WHERE category = 'user_annotation' AND name = 'prefill'"))


def _label(source: Source) -> str:
    return repr(str(source)) if isinstance(source, (str, os.PathLike)) else f"({type(source).__name__})"


def _joined_something(result: SimRealComparison, sim: Source, real: Source,
                      real_is_simulation: bool) -> SimRealComparison:
    """``result``, unless no op was joined: then there is nothing to compare, and that is an error."""
    if result.ops.num_rows:
        return result
    hint = (f"; the real trace {_label(real)} is itself a layerscope simulation" if real_is_simulation else
            "; the real trace needs user_annotation ranges named after the ops (layerscope capture writes them)")
    raise AnalysisError(
        f"no op of the simulated trace {_label(sim)} matches one of the real trace {_label(real)} "
        f"({len(result.only_sim)} simulated, {len(result.only_real)} measured, 0 in both){hint}")


def _compare_capture(sim_ops: list[tuple[str | None, PredictedOp]], phase: str | None, measured: CapturedTimes,
                     meta: dict[str, Any]) -> SimRealComparison:
    from layerscope.analysis.validate import join_capture_times
    from layerscope.capture.unprofiled import UnprofiledTimes

    steps = sorted({int(step.rsplit("_", 1)[1]) for step, _ in sim_ops if step is not None})
    if steps:
        phase = phase or "decode"
    if phase is None:
        raise AnalysisError("phase: the simulated trace does not say which phase it is; give --phase prefill or "
                            "--phase decode")
    if phase not in COMPARABLE_PHASES:
        raise AnalysisError(f"phase: a capture has no {phase!r} phase to compare with; known: "
                            f"{', '.join(COMPARABLE_PHASES)}")
    captured_steps = sorted(s for k in measured.ranges if (s := step_of_range(k)) is not None)
    notes: list[str] = []
    if phase == "prefill":
        if steps:
            raise AnalysisError("phase: the simulated trace has decode steps (decode_step_K. ops); it is not a prefill")
        prefill, decode, decode_steps = sim_ops, None, 0
    else:
        if not steps:  # one decode pass: the capture's first decode step
            sim_ops = [(step_range(0), op) for _, op in sim_ops]
            steps = [0]
            notes.append("one simulated decode pass, compared with the capture's first decode step")
        if steps != list(range(len(steps))):
            raise AnalysisError(f"the simulated decode steps {steps} do not start at 0 or skip one")
        if len(steps) > len(captured_steps):
            raise AnalysisError(f"the simulation has {len(steps)} decode steps but the capture only "
                                f"{len(captured_steps)}")
        prefill, decode, decode_steps = None, sim_ops, len(steps)
    unprofiled = meta.get("unprofiled")
    profiler_event = meta.get("profiler_event") or {}
    phases = join_capture_times(
        measured, prefill, decode, decode_steps=decode_steps,
        unprofiled=UnprofiledTimes.model_validate(unprofiled) if isinstance(unprofiled, dict) else None,
        per_event_s=profiler_event.get("per_event_s") if isinstance(profiler_event, dict) else None)
    p = phases[0]
    predicted_layers = _layers(op.name for _, op in sim_ops)
    captured_layers = _layers(name for table in measured.modules.values() for name in table)
    forward: ForwardError | None = p.forward
    if predicted_layers != captured_layers and captured_layers:
        forward = None
        notes.append(f"the simulation has {len(predicted_layers)} of the capture's {len(captured_layers)} decoder "
                     "layers: no whole-forward comparison")
    elif all(_LAYER.match(op.name) for _, op in sim_ops):
        forward = None
        notes.append("the simulation is decoder layers only (no embedding, final norm or lm_head): no whole-forward "
                     "comparison")
    ops = pa.table({
        "op": pa.array([r.name for r in p.rows], pa.string()),
        "kind": pa.array([r.kind for r in p.rows], pa.string()),
        "rule": pa.array([r.rule for r in p.rows], pa.string()),
        "predicted_us": np.array([r.predicted_s * 1e6 for r in p.rows], dtype=float),
        "measured_us": np.array([r.measured_s * 1e6 for r in p.rows], dtype=float),
        "error": np.array([r.error for r in p.rows], dtype=float),
        "abs_error": np.abs(np.array([r.error for r in p.rows], dtype=float)),
    })
    return SimRealComparison(
        ops=ops, median_abs_error=p.median_abs_error, p90_abs_error=p.p90_abs_error, iterations=measured.iterations,
        only_sim=[u.name for u in p.only_predicted], only_real=[u.name for u in p.only_measured], join="modules",
        phase=p.phase, forward=forward, notes=notes)


def _compare_by_name(sim_ops: list[tuple[str | None, PredictedOp]], db_r: TraceDB,
                     iterations: int | None) -> SimRealComparison:
    """Any trace: measured time per op name over its ``user_annotation`` slices, per iteration."""
    predicted: dict[str, float] = {}
    kinds: dict[str, str] = {}
    for step, op in sim_ops:
        key = _op_name(f"{step}.{op.name}" if step else op.name)
        predicted[key] = predicted.get(key, 0.0) + op.time_s * 1e9
        kinds.setdefault(key, op.kind)
    measured: dict[str, float] = {}
    for r in db_r.records("SELECT name, SUM(dur) AS d FROM slice WHERE category = 'user_annotation' "
                          "AND dur >= 0 GROUP BY name"):
        key = _op_name(r["name"])
        if key in predicted or MODULE_NAME.match(key) or PHASE_NAME.match(key):
            measured[key] = measured.get(key, 0.0) + float(r["d"])
    steps = db_r.scalar("SELECT COUNT(DISTINCT name) FROM slice WHERE name LIKE 'ProfilerStep#%'") or 0
    n_iter = iterations if iterations is not None else max(int(steps), 1)
    if n_iter < 1:
        raise AnalysisError(f"iterations: {n_iter} is not allowed; it must be at least 1")
    joined = sorted(set(predicted) & set(measured))
    pred = np.array([predicted[k] for k in joined], dtype=float) / 1e3
    meas = np.array([measured[k] for k in joined], dtype=float) / n_iter / 1e3
    with np.errstate(divide="ignore", invalid="ignore"):
        error = np.where(meas > 0, (pred - meas) / meas, np.nan)
    ops = pa.table({"op": pa.array(joined, pa.string()), "kind": pa.array([kinds[k] for k in joined], pa.string()),
                    "rule": pa.array(["name"] * len(joined), pa.string()), "predicted_us": pred,
                    "measured_us": meas, "error": error, "abs_error": np.abs(error)})
    median, p90 = abs_error_stats(error)
    return SimRealComparison(
        ops=ops,
        median_abs_error=median,
        p90_abs_error=p90,
        iterations=n_iter,
        only_sim=sorted(set(predicted) - set(measured)),
        only_real=sorted(set(measured) - set(predicted)),
    )
