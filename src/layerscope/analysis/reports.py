"""Reports over a trace: one analysis per function, each returning a :class:`pyarrow.Table`.

Every function takes a :class:`~layerscope.analysis.engine.TraceDB`. Times in the output are in
milliseconds (``*_ms``) or microseconds (``*_us``) as the column name says.

What counts as GPU: slices of Kineto categories ``kernel``, ``gpu_memcpy``, ``gpu_memset`` (a module's GPU
time is the span of the work its CPU range launched, :func:`launched_gpu_spans`); a GPU device is the
process those slices sit in (Kineto uses the device index as pid). Everything else on thread tracks is CPU
side (ops, runtime calls, annotations). Time by category is the *union* of the category's intervals, so
overlapping slices (nested CPU ops, kernels on concurrent streams) count once; ``sum_ms`` is given next to it.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from layerscope.analysis.engine import TraceDB
from layerscope.analysis.kernel_names import CATEGORIES, classify, decode_kernel
from layerscope.errors import AnalysisError, OutputError
from layerscope.workload.steps import PHASE_RANGE_RE

GPU_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")
_GPU_IN = "('kernel', 'gpu_memcpy', 'gpu_memset')"


def union_ns(ts: np.ndarray, end: np.ndarray) -> int:
    """Total length of the union of intervals ``[ts, end)`` (ns); overlaps count once."""
    if len(ts) == 0:
        return 0
    order = np.argsort(ts, kind="stable")
    start = ts[order]
    stop = np.maximum.accumulate(end[order])
    new = np.empty(len(start), dtype=bool)
    new[0] = True
    new[1:] = start[1:] > stop[:-1]
    first = np.flatnonzero(new)
    last = np.r_[first[1:] - 1, len(start) - 1]
    return int((stop[last] - start[first]).sum())


def top_ops(db: TraceDB, limit: int = 50) -> pa.Table:
    """Operations (slices grouped by name) by total time: count, total, mean, max."""
    return db.query(f"""
        SELECT name, any_value(category) AS category, COUNT(*) AS count,
               SUM(dur) / 1e6 AS total_ms, AVG(dur) / 1e3 AS mean_us, MAX(dur) / 1e3 AS max_us
        FROM slice WHERE dur >= 0 GROUP BY name ORDER BY total_ms DESC, name LIMIT {int(limit)}""")


def check_threshold_ms(threshold_ms: float, field: str = "threshold_ms") -> float:
    """``threshold_ms`` if it is a finite duration ≥ 0, else :class:`AnalysisError` naming ``field``."""
    if not isinstance(threshold_ms, (int, float)) or not math.isfinite(threshold_ms) or threshold_ms < 0:
        raise AnalysisError(f"{field}: {threshold_ms!r} is not allowed; give a duration in milliseconds, "
                            "a finite number >= 0")
    return float(threshold_ms)


def major_events(db: TraceDB, threshold_ms: float = 100.0) -> pa.Table:
    """Slices longer than ``threshold_ms``, in time order, with their depth and thread."""
    threshold_ns = check_threshold_ms(threshold_ms) * 1e6
    return db.query(f"""
        SELECT s.id, (s.ts - (SELECT MIN(ts) FROM slice)) / 1e6 AS start_ms, s.dur / 1e6 AS dur_ms,
               s.name, s.category, s.depth, t.name AS thread, t.tid
        FROM slice s LEFT JOIN thread_track tt ON s.track_id = tt.id LEFT JOIN thread t USING (utid)
        WHERE s.dur > {threshold_ns!r} ORDER BY s.ts, s.depth""")


def small_frequent_ops(db: TraceDB, max_mean_us: float = 10.0, min_count: int = 100,
                       limit: int = 50) -> pa.Table:
    """Many short slices: where launch overhead hides (count ≥ ``min_count``, mean ≤ ``max_mean_us``)."""
    return db.query(f"""
        SELECT name, any_value(category) AS category, COUNT(*) AS count, AVG(dur) / 1e3 AS mean_us,
               SUM(dur) / 1e6 AS total_ms
        FROM slice WHERE dur >= 0 GROUP BY name
        HAVING COUNT(*) >= {int(min_count)} AND AVG(dur) <= {float(max_mean_us) * 1e3}
        ORDER BY count DESC, name LIMIT {int(limit)}""")


_DIRECTION = r"Memcpy (HtoD|DtoH|DtoD|PtoP|HtoH|DtoA|AtoD|AtoA)"


def memory_ops(db: TraceDB) -> pa.Table:
    """GPU memory copies by direction (HtoD, DtoH, DtoD, PtoP …) and memsets: count, time, bytes."""
    return db.query(f"""
        SELECT CASE WHEN s.name ILIKE 'memset%' THEN 'memset'
                    ELSE COALESCE(NULLIF(regexp_extract(s.name, '{_DIRECTION}', 1), ''), 'other') END
                   AS direction,
               COUNT(*) AS count, SUM(s.dur) / 1e6 AS total_ms, AVG(s.dur) / 1e3 AS mean_us,
               SUM(TRY_CAST(json_extract(a.json, '$.args.bytes') AS BIGINT)) AS bytes,
               SUM(TRY_CAST(json_extract(a.json, '$.args.bytes') AS BIGINT)) / NULLIF(SUM(s.dur), 0)
                   AS gb_per_s
        FROM slice s LEFT JOIN __arg_sets a ON a.arg_set_id = s.arg_set_id
        WHERE s.category IN ('gpu_memcpy', 'gpu_memset')
           OR (s.category IS NULL AND (s.name LIKE 'Memcpy %' OR s.name LIKE 'Memset %'))
        GROUP BY direction ORDER BY direction""")


def _kernels(db: TraceDB) -> pa.Table:
    return db.query("""
        SELECT name, COUNT(*) AS count, SUM(dur) AS total_ns FROM slice
        WHERE category = 'kernel' GROUP BY name""")


def _with_columns(table: pa.Table, **columns: Callable[[str], object]) -> pa.Table:
    names = table.column("name").to_pylist()
    for column, fn in columns.items():
        table = table.append_column(column, pa.array([fn(n) for n in names]))
    return table


def attention_kernels(db: TraceDB) -> pa.Table:
    """Kernels the classifier calls attention, with their decoded family."""
    kernels = _with_columns(_kernels(db), category=classify)
    kernels = kernels.filter(pc.equal(kernels.column("category"), "attention"))
    kernels = _with_columns(kernels, family=lambda n: decode_kernel(n).family)
    return pa.table({
        "name": kernels.column("name"), "family": kernels.column("family"),
        "count": kernels.column("count"),
        "total_ms": pc.divide(pc.cast(kernels.column("total_ns"), pa.float64()), 1e6),
    }).sort_by([("total_ms", "descending")])


def kernel_decode(db: TraceDB, limit: int = 100) -> pa.Table:
    """The kernels by total time, with what their names encode (family, tile, dtype, arch)."""
    kernels = _kernels(db).sort_by([("total_ns", "descending"), ("name", "ascending")]).slice(0, limit)
    rows = []
    for row in kernels.to_pylist():
        info = decode_kernel(row["name"])
        rows.append({"name": row["name"], "count": row["count"], "total_ms": row["total_ns"] / 1e6,
                     "category": classify(row["name"]), "family": info.family, "library": info.library,
                     "op": info.op, "tile": info.tile, "dtype": info.dtype, "arch": info.arch,
                     "layout": info.layout,
                     "extra": ";".join(f"{k}={v}" for k, v in sorted(info.extra.items()))})
    schema = pa.schema([("name", pa.string()), ("count", pa.int64()), ("total_ms", pa.float64()),
                        ("category", pa.string()), ("family", pa.string()), ("library", pa.string()),
                        ("op", pa.string()), ("tile", pa.string()), ("dtype", pa.string()),
                        ("arch", pa.string()), ("layout", pa.string()), ("extra", pa.string())])
    return pa.Table.from_pylist(rows, schema=schema)


def category_time(db: TraceDB) -> pa.Table:
    """Time by category, GPU side and CPU side separately; ``union_ms`` counts overlaps once.

    ``share`` is the category's union over the union of all of that side's slices.
    """
    rows = []
    for side, where in (("gpu", f"s.category IN {_GPU_IN}"),
                        ("cpu", f"(s.category IS NULL OR s.category NOT IN {_GPU_IN}) AND "
                                "(s.category IS NULL OR s.category NOT IN ('Trace', 'gpu_user_annotation', "
                                "'user_annotation', 'python_function'))")):
        table = db.query(f"""
            SELECT s.name, s.ts, s.ts + s.dur AS stop FROM slice s JOIN thread_track tt ON s.track_id = tt.id
            WHERE s.dur > 0 AND {where}""")
        if table.num_rows == 0:
            continue
        names = table.column("name")
        unique = pc.unique(names)
        cats = pa.array([classify(n) for n in unique.to_pylist()])
        category = pc.take(cats, pc.index_in(names, unique)).to_numpy(zero_copy_only=False)
        ts = table.column("ts").to_numpy()
        stop = table.column("stop").to_numpy()
        busy = union_ns(ts, stop)
        for cat in CATEGORIES:
            mask = category == cat
            if not mask.any():
                continue
            union = union_ns(ts[mask], stop[mask])
            rows.append({"side": side, "category": cat, "count": int(mask.sum()),
                         "sum_ms": float((stop[mask] - ts[mask]).sum()) / 1e6, "union_ms": union / 1e6,
                         "share": union / busy if busy else 0.0})
    schema = pa.schema([("side", pa.string()), ("category", pa.string()), ("count", pa.int64()),
                        ("sum_ms", pa.float64()), ("union_ms", pa.float64()), ("share", pa.float64())])
    return pa.Table.from_pylist(rows, schema=schema)


def gpu_idle(db: TraceDB) -> pa.Table:
    """Per GPU device: span from first to last GPU activity, busy (union), idle = span − busy."""
    table = db.query(f"""
        SELECT p.pid AS device, s.ts, s.ts + s.dur AS stop, s.category, tt.id AS track
        FROM slice s JOIN thread_track tt ON s.track_id = tt.id JOIN thread t USING (utid)
        JOIN process p USING (upid)
        WHERE s.category IN {_GPU_IN} AND s.dur >= 0""")
    rows = []
    if table.num_rows:
        device = table.column("device").to_numpy()
        ts = table.column("ts").to_numpy()
        stop = table.column("stop").to_numpy()
        is_kernel = pc.equal(table.column("category"), "kernel").to_numpy(zero_copy_only=False)
        track = table.column("track").to_numpy()
        for dev in np.unique(device).tolist():
            m = device == dev
            span = int(stop[m].max() - ts[m].min())
            busy = union_ns(ts[m], stop[m])
            kernel_busy = union_ns(ts[m & is_kernel], stop[m & is_kernel])
            rows.append({"device": int(dev), "streams": len(np.unique(track[m])),
                         "kernels": int((m & is_kernel).sum()), "span_ms": span / 1e6,
                         "busy_ms": busy / 1e6, "kernel_busy_ms": kernel_busy / 1e6,
                         "idle_ms": (span - busy) / 1e6, "idle_pct": 100.0 * (span - busy) / span if span else 0.0})
    schema = pa.schema([("device", pa.int64()), ("streams", pa.int64()), ("kernels", pa.int64()),
                        ("span_ms", pa.float64()), ("busy_ms", pa.float64()), ("kernel_busy_ms", pa.float64()),
                        ("idle_ms", pa.float64()), ("idle_pct", pa.float64())])
    return pa.Table.from_pylist(rows, schema=schema)


#: A module path as layerscope capture names annotations (``layers.3.self_attn.q_proj``,
#: ``model.layers.0.mlp``, ``lm_head``) or a phase (``prefill``, ``decode_step_7``).
MODULE_NAME = re.compile(r"^(?:[A-Za-z_]\w*\.)*(?:layers|h|blocks|layer)\.\d+(?:\.[A-Za-z_]\w*)*$|"
                         r"^(?:model\.)?(?:embed_tokens|norm|lm_head|wte|wpe|ln_f)$")
PHASE_NAME = re.compile(rf"^(?:{PHASE_RANGE_RE.pattern}|decode)$")
_LAYER = re.compile(r"(?:^|\.)(?:layers|h|blocks|layer)\.(\d+)(?:\.|$)")


def launched_gpu_spans(db: TraceDB) -> list[dict[str, Any]]:
    """Each CPU ``user_annotation`` range (name, ts, dur, track_id) with ``gpu_ns``: the span from the first
    start to the last end of the GPU work launched inside it, its nested ranges' included
    (:func:`layerscope.capture.summary.launched_spans`; launches joined to their kernels by Kineto's
    correlation id), or None when it launched nothing.

    Not Kineto's ``gpu_user_annotation`` ranges: each kernel is tagged with the *innermost* range open at its
    launch, so those cover a range's own kernels only (an outer module's residual adds, not its children's
    GEMMs). Nor the ``ac2g`` flows: a flow ends on the outermost slice at the kernel's start, which is that
    ``gpu_user_annotation`` range whenever the kernel opens one (trace_processor binds it the same way).
    """
    from layerscope.capture.summary import GPU_WORK, LAUNCH, launched_spans

    ranges = db.records("SELECT name, ts, dur, track_id FROM slice WHERE category = 'user_annotation' "
                        "AND dur >= 0 AND name IS NOT NULL ORDER BY ts, id")
    work = ", ".join(f"'{c}'" for c in GPU_WORK)
    launch = ", ".join(f"'{c}'" for c in LAUNCH)
    launches = db.records(f"""
        WITH c AS (SELECT s.id, s.ts, s.dur, s.track_id, s.category,
                          TRY_CAST(json_extract(a.json, '$.args.correlation') AS BIGINT) AS corr
                   FROM slice s JOIN __arg_sets a ON a.arg_set_id = s.arg_set_id
                   WHERE s.category IN ({work}, {launch}) AND s.dur >= 0)
        SELECT r.track_id, r.ts AS launch_ts, MIN(g.ts) AS start_ts, MAX(g.ts + g.dur) AS end_ts
        FROM c r JOIN c g ON g.corr = r.corr AND g.category IN ({work})
        WHERE r.category IN ({launch}) AND r.corr IS NOT NULL GROUP BY r.id, r.track_id, r.ts""")
    spans = launched_spans([r["track_id"] for r in ranges], [r["ts"] for r in ranges],
                           [r["ts"] + r["dur"] for r in ranges], [x["track_id"] for x in launches],
                           [x["launch_ts"] for x in launches], [x["start_ts"] for x in launches],
                           [x["end_ts"] for x in launches])
    return [{**r, "gpu_ns": span} for r, span in zip(ranges, spans, strict=True)]


def _annotations(db: TraceDB) -> pa.Table:
    return db.query("""
        SELECT name, category, ts, ts + dur AS stop FROM slice
        WHERE category IN ('user_annotation', 'gpu_user_annotation') AND dur >= 0""")


def module_time(db: TraceDB) -> pa.Table:
    """Time per annotated module (and phase): count and total of its CPU ranges (``side`` cpu) and, in a
    trace with GPU work, of the spans of the GPU work each call launched, its children's included (``side``
    gpu; :func:`launched_gpu_spans`).

    Empty when the trace has no layerscope module annotations.
    """
    rows: dict[tuple[str, str], dict[str, float]] = {}
    for r in launched_gpu_spans(db):
        name = r["name"]
        if not (MODULE_NAME.match(name) or PHASE_NAME.match(name)):
            continue
        for side, dur in (("cpu", r["dur"]), ("gpu", r["gpu_ns"])):
            if dur is None:
                continue
            row = rows.setdefault((name, side), {"count": 0, "total_ns": 0})
            row["count"] += 1
            row["total_ns"] += dur
    out = [{"module": k[0], "side": k[1], "kind": "phase" if PHASE_NAME.match(k[0]) else "module",
            "count": int(v["count"]), "total_ms": v["total_ns"] / 1e6,
            "mean_us": v["total_ns"] / v["count"] / 1e3} for k, v in sorted(rows.items())]
    schema = pa.schema([("module", pa.string()), ("side", pa.string()), ("kind", pa.string()),
                        ("count", pa.int64()), ("total_ms", pa.float64()), ("mean_us", pa.float64())])
    return pa.Table.from_pylist(out, schema=schema).sort_by([("total_ms", "descending"), ("module", "ascending")])


def layer_time(db: TraceDB) -> pa.Table:
    """Time per decoder layer: the union of that layer's module annotations (nesting counted once)."""
    table = _annotations(db)
    names = table.column("name").to_pylist()
    cats = table.column("category").to_pylist()
    ts = table.column("ts").to_numpy()
    stop = table.column("stop").to_numpy()
    layer = np.full(len(names), -1, dtype=np.int64)
    for i, name in enumerate(names):
        match = _LAYER.search(name or "") if MODULE_NAME.match(name or "") else None
        if match:
            layer[i] = int(match.group(1))
    gpu = np.array([c == "gpu_user_annotation" for c in cats], dtype=bool)
    rows = []
    for lay in np.unique(layer[layer >= 0]).tolist():
        for side, mask in (("cpu", ~gpu), ("gpu", gpu)):
            m = (layer == lay) & mask
            if m.any():
                rows.append({"layer": int(lay), "side": side, "annotations": int(m.sum()),
                             "total_ms": union_ns(ts[m], stop[m]) / 1e6})
    schema = pa.schema([("layer", pa.int64()), ("side", pa.string()), ("annotations", pa.int64()),
                        ("total_ms", pa.float64())])
    return pa.Table.from_pylist(rows, schema=schema)


def summary(db: TraceDB) -> pa.Table:
    """One row: trace span, slice/kernel counts, kernel time, GPU devices."""
    return db.query(f"""
        SELECT (MAX(ts + dur) FILTER (WHERE dur >= 0) - MIN(ts)) / 1e6 AS span_ms,
               COUNT(*) AS slices,
               COUNT(*) FILTER (WHERE category = 'kernel') AS kernels,
               COALESCE(SUM(dur) FILTER (WHERE category = 'kernel'), 0) / 1e6 AS kernel_sum_ms,
               COUNT(*) FILTER (WHERE category IN {_GPU_IN}) AS gpu_slices,
               (SELECT COUNT(*) FROM flow) AS flows
        FROM slice""")


#: The reports ``analyze`` runs, by name, in order.
REPORTS: dict[str, Callable[..., pa.Table]] = {
    "summary": summary,
    "top_ops": top_ops,
    "major_events": major_events,
    "small_frequent_ops": small_frequent_ops,
    "memory_ops": memory_ops,
    "attention_kernels": attention_kernels,
    "category_time": category_time,
    "gpu_idle": gpu_idle,
    "kernel_decode": kernel_decode,
    "module_time": module_time,
    "layer_time": layer_time,
}


def analyze(db: TraceDB, threshold_ms: float = 100.0) -> dict[str, pa.Table]:
    """Run every report of :data:`REPORTS`; ``threshold_ms`` is for ``major_events``."""
    check_threshold_ms(threshold_ms)
    out: dict[str, pa.Table] = {}
    for name, report in REPORTS.items():
        out[name] = report(db, threshold_ms) if name == "major_events" else report(db)
    return out


def analyze_trace(path: str | os.PathLike[str], threshold_ms: float = 100.0, *,
                  use_cache: bool = True) -> dict[str, pa.Table]:
    """Load the trace at ``path`` and run every report (see :func:`analyze`)."""
    with TraceDB(path, use_cache=use_cache) as db:
        return analyze(db, threshold_ms)


def check_csv_dir(directory: str | os.PathLike[str],
                  inputs: Sequence[str | os.PathLike[str]] = ()) -> Path:
    """``directory`` if the report CSVs can go there: a directory, or a path where one can be made,
    that is none of ``inputs`` (the traces read). Raises :class:`OutputError` otherwise."""
    out_dir = Path(directory)
    for source in inputs:
        try:
            same = out_dir.exists() and out_dir.samefile(source)
        except OSError:
            same = False
        if same or out_dir.resolve() == Path(source).resolve():
            raise OutputError(f"CSV directory {str(out_dir)!r} is the input trace {str(source)!r}; "
                              "give a directory for the report CSVs")
    if out_dir.exists() and not out_dir.is_dir():
        raise OutputError(f"CSV directory {str(out_dir)!r} exists and is not a directory; give a directory "
                          "for the report CSVs")
    return out_dir


def write_csv_dir(tables: dict[str, pa.Table], directory: str | os.PathLike[str],
                  inputs: Sequence[str | os.PathLike[str]] = ()) -> list[Path]:
    """Write each table as ``<directory>/<name>.csv`` (atomically; the directory is made if needed);
    returns the paths. Refuses (:class:`OutputError`) a directory that is an input or an existing
    file, and any CSV that would overwrite one of ``inputs``."""
    import pyarrow.csv as pacsv

    from layerscope.units import atomic_write

    out_dir = check_csv_dir(directory, inputs)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"cannot make the CSV directory {str(out_dir)!r}: {exc.strerror}") from None
    paths = []
    for name, table in tables.items():
        path = out_dir / f"{name}.csv"
        try:
            with atomic_write(path, "wb", inputs=tuple(inputs)) as handle:
                pacsv.write_csv(table, handle)
        except OSError as exc:
            raise OutputError(f"cannot write {str(path)!r}: {exc.strerror or exc}") from None
        paths.append(path)
    return paths
