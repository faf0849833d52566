"""Multi-rank traces: a directory of per-rank traces, ingested in parallel processes, one GPU time breakdown per
rank, the stragglers among them, and the ranks as one table set for SQL.

    table = analyze_ranks("traces/")            # one row per rank (:data:`BREAKDOWN_SCHEMA`)
    with open_ranks("traces/") as db:           # slice, thread, … with a ``rank`` column; ``rank_breakdown``
        db.query("SELECT rank, COUNT(*) FROM slice WHERE category = 'kernel' GROUP BY rank")

Definitions follow HolisticTraceAnalysis (HTA, ``hta/analyzers/breakdown_analysis.py`` ``get_temporal_breakdown``
and ``communication_analysis.py`` ``get_comm_comp_overlap``), so both give the same numbers on the same files:

* GPU work: slices of the Kineto categories ``kernel``, ``gpu_memcpy``, ``gpu_memset`` (HTA: every event with
  a ``stream``); all streams of the rank together.
* Window: when the rank has two or more ``ProfilerStep`` ranges, only GPU work launched (joined by Kineto's
  ``correlation`` to a CPU-side slice) before the last step starts, the last step being cut short by the
  profiler; with ``include_last_step`` up to its end (HTA's ``include_last_profiler_step``). Otherwise all.
  Work whose launch the reader dropped (improper nesting) but whose ``ac2g`` flow it kept counts when it
  starts in the window.
* Kernel type, by name (HTA's ``get_kernel_type``): communication ``^nccl.*Kernel``, memory
  ``^(Memcpy|Memset|dma)``, other a name containing ``Memcpy`` or ``Sync`` (or starting ``Memset``), computation
  the rest.
* ``span``: first GPU start to last GPU end; ``busy``: the union of all GPU work; ``idle = span − busy`` (gaps on
  the merged timeline, not per stream); ``compute``/``communication``/``memory``/``other``: the union of each
  type's intervals; ``non_compute = span − compute − idle`` (HTA's; concurrent types counted once).
* ``overlap_pct``: 100 × |union(communication) ∩ union(computation)| / |union(communication)|; null with no
  communication.
* Stragglers (ours; HTA's ``get_potential_stragglers`` ranks late-starting collectives instead): in synchronous
  training every rank's span is about the same, because the fast ranks wait for the slow one inside their
  collectives; what differs is the rank's own work, ``work = union of its non-communication GPU work``. A rank
  is a straggler when its ``work`` exceeds the median over the ranks by more than ``straggler_pct`` percent.

Times are in milliseconds as the column names say; the arithmetic is integer nanoseconds in numpy.
"""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from layerscope.analysis.engine import TraceDB, load_tables
from layerscope.analysis.reports import union_ns
from layerscope.errors import AnalysisError
from layerscope.trace.readers import READERS
from layerscope.trace.tables import SCHEMAS, TraceTables
from layerscope.units import note_input

__all__ = ["BREAKDOWN_SCHEMA", "KERNEL_TYPES", "RankTrace", "analyze_ranks", "kernel_type", "open_ranks",
           "rank_of", "trace_files"]

#: HTA's kernel types, in the order its ``get_kernel_type`` tests them (first match wins).
KERNEL_TYPES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("communication", re.compile(r"^nccl.*Kernel")),
    ("memory", re.compile(r"^(?:Memcpy|Memset|dma)")),
    # HTA's NCCL_COMPUTE_KERNEL_RE: ``(^nccl.*Kernel)|(.*(Memcpy)|(Memset))|(.*Sync)`` under re.match
    ("other", re.compile(r"^nccl.*Kernel|.*Memcpy|Memset|.*Sync")),
)

#: A rank in a file name: ``rank3``, ``rank-3``, ``rank_3`` (case ignored).
RANK_IN_NAME = re.compile(r"rank[-_]?(\d+)", re.IGNORECASE)

_GPU_IN = "('kernel', 'gpu_memcpy', 'gpu_memset')"

#: Below this many bytes of trace files the ranks are read in this process by default: forking workers and
#: sending their results back costs more than it saves (bench/RESULTS.md, "Multi-rank traces").
PARALLEL_MIN_BYTES = 4 << 20

BREAKDOWN_SCHEMA = pa.schema([
    ("rank", pa.int64()), ("file", pa.string()), ("kernels", pa.int64()), ("profiler_steps", pa.int64()),
    ("last_step_excluded", pa.bool_()), ("span_ms", pa.float64()), ("busy_ms", pa.float64()),
    ("idle_ms", pa.float64()), ("idle_pct", pa.float64()), ("compute_ms", pa.float64()),
    ("communication_ms", pa.float64()), ("memory_ms", pa.float64()), ("other_ms", pa.float64()),
    ("non_compute_ms", pa.float64()), ("overlap_pct", pa.float64()), ("work_ms", pa.float64()),
    ("work_vs_median", pa.float64()), ("straggler", pa.bool_()),
])


def kernel_type(name: str) -> str:
    """HTA's type of a GPU kernel by its name: ``communication``, ``memory``, ``other`` or ``compute``."""
    for kind, pattern in KERNEL_TYPES:
        if pattern.match(name):
            return kind
    return "compute"


def trace_files(directory: str | os.PathLike[str]) -> list[Path]:
    """The trace files in ``directory`` (not its subdirectories), by name: every visible file whose name ends in
    a registered reader's suffix. An :class:`AnalysisError` when there is none or ``directory`` is no directory."""
    root = Path(directory)
    if not root.is_dir():
        raise AnalysisError(f"{str(root)!r} is not a directory of per-rank traces")
    suffixes = tuple(s for info in READERS.values() for s in info.suffixes)
    try:
        files = sorted(p for p in root.iterdir()
                       if not p.name.startswith(".") and p.name.lower().endswith(suffixes) and p.is_file())
    except OSError as exc:
        raise AnalysisError(f"cannot list {str(root)!r}: {exc.strerror}") from None
    if not files:
        raise AnalysisError(f"{str(root)!r} holds no trace files (names ending in {', '.join(suffixes)})")
    return files


def rank_of(path: Path, metadata: dict[str, Any]) -> int:
    """The rank of a trace: its ``distributedInfo.rank``, else a ``rank<N>`` in its file name, else an
    :class:`AnalysisError` naming the file."""
    info = metadata.get("distributedInfo")
    rank = info.get("rank") if isinstance(info, dict) else None
    if isinstance(rank, int) and not isinstance(rank, bool) and rank >= 0:
        return rank
    match = RANK_IN_NAME.search(path.name)
    if match is not None:
        return int(match.group(1))
    raise AnalysisError(f"{str(path)!r}: no rank: the trace has no distributedInfo.rank and its name no rank<N>")


def _window_sql(include_last_step: bool) -> str:
    """GPU work of the analysed window: name, ts, stop (ns)."""
    bound = "<= w.last_end" if include_last_step else "< w.last_start"
    # a launch the reader dropped (improper nesting, as trace_processor drops it) still has its ac2g flow into
    # the work; known only by the work's start, which comes after it, the work counts when it starts in the window
    return f"""
        WITH steps AS (
            SELECT COUNT(DISTINCT name) AS n, MAX(ts) AS last_start, MAX(ts + dur) AS last_end FROM slice
            WHERE strpos(name, 'ProfilerStep') > 0 AND dur >= 0
              AND (category IS NULL OR category NOT IN {_GPU_IN} AND category <> 'gpu_user_annotation')),
        corr AS (
            SELECT s.id, s.category, s.name, s.ts, s.dur,
                   TRY_CAST(json_extract(a.json, '$.args.correlation') AS BIGINT) AS corr
            FROM slice s LEFT JOIN __arg_sets a ON a.arg_set_id = s.arg_set_id WHERE s.dur >= 0),
        launch AS (
            SELECT corr, MIN(ts) AS launch_ts FROM corr
            WHERE (category IS NULL OR category NOT IN {_GPU_IN}) AND corr IS NOT NULL GROUP BY corr),
        flowed AS (SELECT DISTINCT slice_in AS id FROM flow)
        SELECT g.name, g.ts, g.ts + g.dur AS stop
        FROM corr g LEFT JOIN launch l ON l.corr = g.corr LEFT JOIN flowed f ON f.id = g.id, steps w
        WHERE g.category IN {_GPU_IN}
          AND (w.n < 2 OR (g.corr IS NOT NULL
                           AND COALESCE(l.launch_ts, CASE WHEN f.id IS NOT NULL THEN g.ts END) {bound}))"""


def _type_codes(names: pa.ChunkedArray) -> np.ndarray:
    """Index into ``("compute", "communication", "memory", "other")`` per slice; each distinct name classified
    once (a trace has thousands of kernels and tens of names)."""
    order = ["compute"] + [kind for kind, _ in KERNEL_TYPES]
    names = names.cast(pa.string())
    unique = pc.unique(names)
    codes = pa.array([order.index(kernel_type(n or "")) for n in unique.to_pylist()], pa.int8())
    return np.asarray(pc.take(codes, pc.index_in(names, unique)).to_numpy(zero_copy_only=False), dtype=np.int8)


def breakdown(db: TraceDB, *, include_last_step: bool = False) -> dict[str, Any]:
    """One rank's GPU time breakdown (the module docstring's definitions) as a row of :data:`BREAKDOWN_SCHEMA`
    without ``rank``, ``file`` and the straggler columns."""
    table = db.query(_window_sql(include_last_step))
    steps = int(db.scalar("SELECT COUNT(DISTINCT name) FROM slice WHERE strpos(name, 'ProfilerStep') > 0 "
                          f"AND (category IS NULL OR category NOT IN {_GPU_IN} "
                          "AND category <> 'gpu_user_annotation')") or 0)
    ts = table.column("ts").to_numpy().astype(np.int64, copy=False)
    stop = table.column("stop").to_numpy().astype(np.int64, copy=False)
    codes = _type_codes(table.column("name")) if table.num_rows else np.zeros(0, np.int8)
    compute, comm, memory, other = (codes == k for k in range(4))
    span_ns = int(stop.max() - ts.min()) if len(ts) else 0
    busy_ns = union_ns(ts, stop)
    compute_ns, comm_ns = union_ns(ts[compute], stop[compute]), union_ns(ts[comm], stop[comm])
    both = compute | comm
    # |A ∩ B| = |A| + |B| − |A ∪ B| over the merged intervals of each type
    overlap_ns = compute_ns + comm_ns - union_ns(ts[both], stop[both])
    idle_ns = span_ns - busy_ns
    return {
        "kernels": int(table.num_rows), "profiler_steps": steps,
        "last_step_excluded": steps >= 2 and not include_last_step,
        "span_ms": span_ns / 1e6, "busy_ms": busy_ns / 1e6, "idle_ms": idle_ns / 1e6,
        "idle_pct": 100.0 * idle_ns / span_ns if span_ns else 0.0,
        "compute_ms": compute_ns / 1e6, "communication_ms": comm_ns / 1e6,
        "memory_ms": union_ns(ts[memory], stop[memory]) / 1e6, "other_ms": union_ns(ts[other], stop[other]) / 1e6,
        "non_compute_ms": (span_ns - compute_ns - idle_ns) / 1e6,
        "overlap_pct": 100.0 * overlap_ns / comm_ns if comm_ns else None,
        "work_ms": union_ns(ts[~comm], stop[~comm]) / 1e6,
    }


@dataclass(frozen=True)
class RankTrace:
    """One rank's trace as a worker read it: the rank, the file, its breakdown row and, for SQL, its tables."""

    rank: int
    path: Path
    row: dict[str, Any]
    tables: TraceTables | None


def _ingest(path: Path, use_cache: bool, include_last_step: bool, keep_tables: bool) -> RankTrace:
    """Read one rank's trace and break it down (runs in a worker process)."""
    tables = load_tables(path, use_cache=use_cache)
    rank = rank_of(path, tables.metadata)
    with TraceDB(tables) as db:
        row = breakdown(db, include_last_step=include_last_step)
    return RankTrace(rank, path, row, tables if keep_tables else None)


def _pool_context() -> multiprocessing.context.BaseContext:
    # fork, as HTA's pool: no worker imports the caller's main module again (spawn and forkserver do, which
    # breaks unguarded scripts) or pays the imports; Arrow resets its thread pools in a forked child and each
    # worker opens its own DuckDB database
    if "fork" in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("fork")
    return multiprocessing.get_context("spawn")


def read_ranks(directory: str | os.PathLike[str], *, use_cache: bool = True, include_last_step: bool = False,
               keep_tables: bool = False, workers: int | None = None) -> list[RankTrace]:
    """Every rank's trace in ``directory`` (:func:`trace_files`), read and broken down in parallel processes (at
    most ``workers``; by default one per two CPUs, or none below :data:`PARALLEL_MIN_BYTES` of files; one file or
    one worker: in this process), sorted by rank. Two files of one rank are an :class:`AnalysisError` naming both."""
    if workers is not None and workers < 1:
        raise AnalysisError(f"workers: {workers!r} is not allowed; give at least 1")
    files = trace_files(directory)
    note_input(directory)
    for path in files:
        note_input(path)
    if workers is None:
        small = sum(p.stat().st_size for p in files) < PARALLEL_MIN_BYTES
        # the JSON reader parses each file on two threads: one worker per two CPUs keeps them busy
        workers = 1 if small else max(1, (os.cpu_count() or 1) // 2)
    count = min(len(files), workers)
    if count == 1:
        parts = [_ingest(p, use_cache, include_last_step, keep_tables) for p in files]
    else:
        with concurrent.futures.ProcessPoolExecutor(count, mp_context=_pool_context()) as pool:
            futures = [pool.submit(_ingest, p, use_cache, include_last_step, keep_tables) for p in files]
            parts = [f.result() for f in futures]
    seen: dict[int, Path] = {}
    for part in parts:
        if part.rank in seen:
            raise AnalysisError(f"duplicate rank {part.rank}: {str(seen[part.rank])!r} and {str(part.path)!r}")
        seen[part.rank] = part.path
    return sorted(parts, key=lambda p: p.rank)


def breakdown_table(parts: list[RankTrace], straggler_pct: float = 10.0) -> pa.Table:
    """The ranks' rows as one table (:data:`BREAKDOWN_SCHEMA`), with ``work_vs_median`` (the rank's ``work_ms``
    over the median of all ranks') and ``straggler`` (``work_vs_median > 1 + straggler_pct / 100``)."""
    if not np.isfinite(straggler_pct) or straggler_pct < 0:
        raise AnalysisError(f"straggler_pct: {straggler_pct!r} is not allowed; give a percentage >= 0")
    work = np.array([p.row["work_ms"] for p in parts], dtype=np.float64)
    median = float(np.median(work)) if len(work) else 0.0
    rows = []
    for part, w in zip(parts, work, strict=True):
        ratio = w / median if median > 0 else None
        rows.append({"rank": part.rank, "file": part.path.name, **part.row, "work_vs_median": ratio,
                     "straggler": ratio is not None and ratio > 1.0 + straggler_pct / 100.0})
    return pa.Table.from_pylist(rows, schema=BREAKDOWN_SCHEMA)


def analyze_ranks(directory: str | os.PathLike[str], *, straggler_pct: float = 10.0, use_cache: bool = True,
                  include_last_step: bool = False, workers: int | None = None) -> pa.Table:
    """The per-rank breakdown of the traces in ``directory`` (:func:`read_ranks`, :func:`breakdown_table`)."""
    if not np.isfinite(straggler_pct) or straggler_pct < 0:
        raise AnalysisError(f"straggler_pct: {straggler_pct!r} is not allowed; give a percentage >= 0")
    parts = read_ranks(directory, use_cache=use_cache, include_last_step=include_last_step, workers=workers)
    return breakdown_table(parts, straggler_pct)


# --- the ranks as one table set ---------------------------------------------------------------------------

#: Id spaces made unique across ranks: (table, column) pairs that hold ids of one space.
_ID_SPACES: dict[str, tuple[tuple[str, str], ...]] = {
    "slice": (("slice", "id"), ("slice", "parent_id"), ("flow", "slice_out"), ("flow", "slice_in")),
    "track": (("track", "id"), ("track", "parent_id"), ("slice", "track_id"), ("counter", "track_id")),
    "utid": (("thread", "utid"), ("track", "utid")),
    "upid": (("process", "upid"), ("thread", "upid"), ("track", "upid")),
    "arg_set": (("arg_sets", "arg_set_id"), ("slice", "arg_set_id"), ("counter", "arg_set_id"),
                ("flow", "arg_set_id")),
    "counter": (("counter", "id"),),
    "flow": (("flow", "id"),),
}

#: The engine's views (:mod:`layerscope.analysis.engine`) with each rank's ``rank`` column added.
RANK_VIEWS = """
CREATE OR REPLACE VIEW slice AS SELECT id, ts, dur, track_id, category, name, depth, parent_id, arg_set_id,
    thread_ts, thread_dur, category AS cat, id AS slice_id, rank FROM __slice;
CREATE OR REPLACE VIEW slices AS SELECT * FROM slice;
CREATE OR REPLACE VIEW thread AS SELECT utid, utid AS id, tid, name, upid, NULL::BIGINT AS start_ts,
    NULL::BIGINT AS end_ts, (tid = (SELECT pid FROM __process p WHERE p.upid = t.upid)) AS is_main_thread,
    sort_index, rank FROM __thread t;
CREATE OR REPLACE VIEW process AS SELECT upid, upid AS id, pid, name, NULL::BIGINT AS start_ts,
    NULL::BIGINT AS end_ts, NULL::BIGINT AS parent_upid, NULL::BIGINT AS uid, NULL::VARCHAR AS cmdline,
    NULL::BIGINT AS arg_set_id, labels, sort_index, rank FROM __process;
CREATE OR REPLACE VIEW track AS SELECT id, name, type, parent_id, type AS classification, utid, upid, unit, rank
    FROM __track;
CREATE OR REPLACE VIEW thread_track AS SELECT id, name, type, parent_id, utid, rank FROM __track
    WHERE type = 'thread';
CREATE OR REPLACE VIEW process_track AS SELECT id, name, type, parent_id, upid, rank FROM __track
    WHERE type IN ('process', 'async');
CREATE OR REPLACE VIEW counter_track AS SELECT id, name, type, parent_id, unit, NULL::VARCHAR AS description,
    upid, rank FROM __track WHERE type = 'counter';
CREATE OR REPLACE VIEW process_counter_track AS SELECT * FROM counter_track WHERE upid IS NOT NULL;
CREATE OR REPLACE VIEW counter AS SELECT id, ts, track_id, value, arg_set_id, rank FROM __counter;
CREATE OR REPLACE VIEW flow AS SELECT id, slice_out, slice_in, trace_id, arg_set_id, rank FROM __flow;
"""


def _id_max(tables: dict[str, pa.Table], space: str) -> int:
    top = -1
    for name, column in _ID_SPACES[space]:
        value = pc.max(tables[name].column(column)).as_py()
        if value is not None:
            top = max(top, int(value))
    return top


def merge_ranks(parts: list[RankTrace]) -> TraceTables:
    """The ranks' tables as one :class:`TraceTables`: each table the ranks' rows one after another with a
    ``rank`` column, every id shifted past the previous ranks' ids of its space (so ``slice.track_id =
    track.id`` joins stay within a rank without naming it)."""
    merged: dict[str, list[pa.Table]] = {name: [] for name in SCHEMAS}
    offsets = dict.fromkeys(_ID_SPACES, 0)
    for part in parts:
        if part.tables is None:
            raise AnalysisError(f"rank {part.rank}: its tables were not kept")
        tables = part.tables.tables()
        shifted = dict(tables)
        for space, columns in _ID_SPACES.items():
            for name, column in columns:
                values = shifted[name].column(column)
                moved = pc.if_else(pc.greater_equal(values, 0), pc.add(values, offsets[space]), values)
                shifted[name] = shifted[name].set_column(shifted[name].schema.get_field_index(column), column, moved)
        for name, table in shifted.items():
            merged[name].append(table.append_column("rank", pa.array(np.full(table.num_rows, part.rank, np.int64))))
        for space in _ID_SPACES:
            offsets[space] += _id_max(tables, space) + 1
    joined = {name: pa.concat_tables(chunks) if chunks else SCHEMAS[name].empty_table()
              for name, chunks in merged.items()}
    metadata = {"ranks": {part.rank: str(part.path) for part in parts}, "format": "ranks"}
    return TraceTables(**joined, metadata=metadata, warnings=[w for p in parts if p.tables for w in p.tables.warnings])


def open_ranks(directory: str | os.PathLike[str], *, straggler_pct: float = 10.0, use_cache: bool = True,
               include_last_step: bool = False, workers: int | None = None) -> TraceDB:
    """One :class:`TraceDB` over every rank in ``directory``: the trace_processor tables and views of
    :mod:`layerscope.analysis.engine`, the ranks' rows together with a ``rank`` column (ids unique across ranks,
    :func:`merge_ranks`; ``args`` joins by ``arg_set_id`` as before), and the table ``rank_breakdown``
    (:func:`analyze_ranks`'s rows). Close it (or use ``with``)."""
    if not np.isfinite(straggler_pct) or straggler_pct < 0:
        raise AnalysisError(f"straggler_pct: {straggler_pct!r} is not allowed; give a percentage >= 0")
    parts = read_ranks(directory, use_cache=use_cache, include_last_step=include_last_step, keep_tables=True,
                       workers=workers)
    db = TraceDB(merge_ranks(parts))
    try:
        db.connection.execute(RANK_VIEWS)
        db.connection.register("rank_breakdown", breakdown_table(parts, straggler_pct))
    except BaseException:
        db.close()
        raise
    return db


def run_rank_query(directory: str | os.PathLike[str], sql: str, *, use_cache: bool = True) -> pa.Table:
    """Run one SQL query over every rank in ``directory`` (:func:`open_ranks`)."""
    with open_ranks(directory, use_cache=use_cache) as db:
        return db.query(sql)
