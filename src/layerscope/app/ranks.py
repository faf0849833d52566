"""``analyze DIR`` and ``query DIR``: a directory of per-rank traces (one Kineto/Chrome JSON or Perfetto trace per
rank, as HolisticTraceAnalysis reads them).

:func:`analyze_ranks` (:class:`RanksRequest` -> :class:`AnalyzeRanksResult`, schema docs/schema/analyze-ranks.json)
gives one row per rank: compute, communication, memory and idle time, the communication/computation overlap and
whether the rank straggles; :func:`rank_query_table` runs SQL over every rank's tables at once, each with a
``rank`` column, plus the ``rank_breakdown`` table. The definitions are :mod:`layerscope.analysis.ranks`'.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel

from layerscope.app.requests import MODEL_CONFIG

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["AnalyzeRanksResult", "RankBreakdown", "RanksRequest", "analyze_ranks", "rank_query_table",
           "rank_table", "ranks_result"]


class RanksRequest(BaseModel):
    """A directory of per-rank traces to break down, and where the CSV goes."""

    model_config = MODEL_CONFIG

    directory: Path
    """Directory of per-rank traces (each file's rank: its ``distributedInfo.rank``, else ``rank<N>`` in its
    name)."""
    straggler_pct: float = 10.0
    """A rank straggles when its own GPU work exceeds the median rank's by more than this, percent."""
    include_last_step: bool = False
    """Count the GPU work launched in the last ``ProfilerStep`` too (HTA's ``include_last_profiler_step``)."""
    csv_dir: Path | None = None
    """Also write the table as ``<csv_dir>/rank_breakdown.csv``; ``None``: no CSV."""
    use_cache: bool = True
    """Read and write the Parquet cache of each trace's tables."""
    workers: int | None = None
    """Processes reading the ranks; ``None``: one per two CPUs (at most one per file; none below 4 MiB of
    files)."""


class RankBreakdown(BaseModel):
    """One rank's GPU time (milliseconds): HTA's temporal breakdown and overlap, and our straggler test."""

    model_config = MODEL_CONFIG

    rank: int
    """The rank."""
    file: str
    """Its trace file's name."""
    kernels: int
    """GPU kernels, memory copies and memsets in the window."""
    profiler_steps: int
    """``ProfilerStep`` ranges in the trace."""
    last_step_excluded: bool
    """Whether the work launched in the last ``ProfilerStep`` was left out (two or more steps, the default)."""
    span_ms: float
    """First GPU start to last GPU end."""
    busy_ms: float
    """The union of all GPU work, all streams together."""
    idle_ms: float
    """``span_ms − busy_ms``: no GPU work on any stream."""
    idle_pct: float
    """``100 × idle_ms / span_ms``."""
    compute_ms: float
    """The union of the computation kernels (HTA's type: not NCCL, not memory)."""
    communication_ms: float
    """The union of the communication kernels (``nccl…Kernel``)."""
    memory_ms: float
    """The union of memory copies and memsets."""
    other_ms: float
    """The union of the kernels HTA types ``OTHER`` (names holding ``Sync`` or a non-leading ``Memcpy``)."""
    non_compute_ms: float
    """``span_ms − compute_ms − idle_ms`` (HTA's non-compute time)."""
    overlap_pct: float | None
    """Percent of the communication time during which computation runs too (HTA's comm/comp overlap);
    ``null`` without communication."""
    work_ms: float
    """The union of the rank's non-communication GPU work: what a straggler has more of."""
    work_vs_median: float | None
    """``work_ms`` over the median rank's; ``null`` when that median is 0."""
    straggler: bool
    """``work_vs_median > 1 + straggler_pct / 100``."""


class AnalyzeRanksResult(BaseModel):
    """The answer of ``layerscope analyze DIR``: its ``--json`` output."""

    model_config = MODEL_CONFIG

    ranks: list[RankBreakdown]
    """One row per rank, by rank."""
    median_work_ms: float
    """The median of the ranks' ``work_ms``."""
    straggler_pct: float
    """The straggler threshold, percent over that median."""
    stragglers: list[int]
    """The ranks that straggle."""


def rank_table(request: RanksRequest) -> pa.Table:
    """The per-rank breakdown (:func:`layerscope.analysis.ranks.analyze_ranks`); the CSV written when asked (a bad
    directory refused before the traces are read)."""
    from layerscope.analysis.ranks import analyze_ranks as analyze
    from layerscope.analysis.ranks import trace_files
    from layerscope.analysis.reports import check_csv_dir, write_csv_dir

    inputs = (request.directory, *trace_files(request.directory))
    if request.csv_dir is not None:
        check_csv_dir(request.csv_dir, inputs=inputs)
    table = analyze(request.directory, straggler_pct=request.straggler_pct, use_cache=request.use_cache,
                    include_last_step=request.include_last_step, workers=request.workers)
    if request.csv_dir is not None:
        write_csv_dir({"rank_breakdown": table}, request.csv_dir, inputs=inputs)
    return table


def ranks_result(table: pa.Table, straggler_pct: float) -> AnalyzeRanksResult:
    """The result model of the per-rank table."""
    import statistics

    rows = [RankBreakdown.model_validate(row) for row in table.to_pylist()]
    return AnalyzeRanksResult(ranks=rows, median_work_ms=statistics.median(r.work_ms for r in rows) if rows else 0.0,
                              straggler_pct=straggler_pct, stragglers=[r.rank for r in rows if r.straggler])


def analyze_ranks(request: RanksRequest) -> AnalyzeRanksResult:
    """Break down every rank of ``request.directory`` (see :func:`rank_table`)."""
    return ranks_result(rank_table(request), request.straggler_pct)


def rank_query_table(directory: Path, sql: str, *, use_cache: bool = True) -> pa.Table:
    """The rows of ``sql`` over every rank in ``directory``: the single-trace tables with a ``rank`` column and
    ``rank_breakdown`` (:func:`layerscope.analysis.ranks.open_ranks`)."""
    from layerscope.analysis.ranks import run_rank_query

    return run_rank_query(directory, sql, use_cache=use_cache)
