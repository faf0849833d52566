"""Compare two traces, or a simulated trace with a measured one.

``compare_traces(a, b)``: kernels of run A against run B — totals, per kernel name and per
category counts and times with deltas, and the kernels only one run has.

``compare_sim_real(sim, real)``: predicted vs measured time per op, joined by op name. The
simulated trace (layerscope ``simulate``) names each slice after its op (``layers.3.mlp.up_proj``);
a captured trace names ``user_annotation`` slices after the module path (HF's leading ``model.``
is dropped before joining). Measured time per op is the sum of its annotation durations divided
by the number of recorded iterations: the count of ``ProfilerStep#N`` annotations when present,
else 1 (pass ``iterations`` to override). Error per op is ``(predicted − measured) / measured``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from layerscope.analysis.engine import TraceDB
from layerscope.analysis.kernel_names import classify
from layerscope.analysis.reports import MODULE_NAME, PHASE_NAME
from layerscope.errors import AnalysisError
from layerscope.trace.tables import TraceTables

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
    """op, predicted_us, measured_us, error (``(pred − meas) / meas``), abs_error."""
    median_abs_error: float | None
    p90_abs_error: float | None
    iterations: int
    only_sim: list[str]
    only_real: list[str]

    def summary(self) -> dict[str, Any]:
        return {"ops_joined": self.ops.num_rows, "median_abs_error": self.median_abs_error,
                "p90_abs_error": self.p90_abs_error, "iterations": self.iterations,
                "only_sim": len(self.only_sim), "only_real": len(self.only_real)}


def compare_sim_real(sim: Source, real: Source, *, iterations: int | None = None,
                     use_cache: bool = True) -> SimRealComparison:
    """Predicted (simulated trace) vs measured (captured trace) time per op, joined by name."""
    db_s, close_s = _open(sim, use_cache)
    try:
        predicted: dict[str, float] = {}
        for r in db_s.records("SELECT name, SUM(dur) AS d FROM slice WHERE dur >= 0 AND name IS NOT NULL "
                              "GROUP BY name"):
            key = _op_name(r["name"])
            predicted[key] = predicted.get(key, 0.0) + float(r["d"])
    finally:
        if close_s:
            db_s.close()
    db_r, close_r = _open(real, use_cache)
    try:
        measured: dict[str, float] = {}
        for r in db_r.records("SELECT name, SUM(dur) AS d FROM slice WHERE category = 'user_annotation' "
                              "AND dur >= 0 GROUP BY name"):
            key = _op_name(r["name"])
            if key in predicted or MODULE_NAME.match(key) or PHASE_NAME.match(key):
                measured[key] = measured.get(key, 0.0) + float(r["d"])
        steps = db_r.scalar("SELECT COUNT(DISTINCT name) FROM slice WHERE name LIKE 'ProfilerStep#%'") or 0
    finally:
        if close_r:
            db_r.close()
    n_iter = iterations if iterations is not None else max(int(steps), 1)
    if n_iter < 1:
        raise AnalysisError(f"iterations: {n_iter} is not allowed; it must be at least 1")
    joined = sorted(set(predicted) & set(measured))
    pred = np.array([predicted[k] for k in joined], dtype=float) / 1e3
    meas = np.array([measured[k] for k in joined], dtype=float) / n_iter / 1e3
    with np.errstate(divide="ignore", invalid="ignore"):
        error = np.where(meas > 0, (pred - meas) / meas, np.nan)
    ops = pa.table({"op": pa.array(joined, pa.string()), "predicted_us": pred, "measured_us": meas,
                    "error": error, "abs_error": np.abs(error)})
    median, p90 = abs_error_stats(error)
    return SimRealComparison(
        ops=ops,
        median_abs_error=median,
        p90_abs_error=p90,
        iterations=n_iter,
        only_sim=sorted(set(predicted) - set(measured)),
        only_real=sorted(set(measured) - set(predicted)),
    )
