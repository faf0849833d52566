"""``query``, ``analyze`` and ``compare``: SQL, reports and diffs over traces.

Each verb takes one request and returns one result model, the JSON contract of the command's ``--json``
(schemas: docs/schema/query.json, analyze.json, compare.json): :func:`query` (:class:`QueryRequest` ->
:class:`QueryResult`), :func:`analyze` (:class:`AnalyzeRequest` -> :class:`AnalyzeResult`), :func:`compare`
(:class:`CompareRequest` -> :class:`CompareResult`). The tables behind them (pyarrow, for the CSV writers and the
rendered tables) come from :func:`query_table`, :func:`report_tables` and :func:`run_compare`; the SQL engine,
the reports and the comparisons themselves are :mod:`layerscope.analysis`.

SQL values become JSON as :func:`json_cell` says: dates and times ISO 8601, intervals and durations as numbers,
decimals as numbers, blobs as text, NaN and infinities ``null``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, RootModel

from layerscope.app.requests import MODEL_CONFIG
from layerscope.errors import AnalysisError
from layerscope.units import json_value

if TYPE_CHECKING:
    import pyarrow as pa

    from layerscope.analysis.compare import SimRealComparison, TraceComparison

__all__ = ["AnalyzeRequest", "AnalyzeResult", "CompareRequest", "CompareResult", "QueryRequest", "QueryResult",
           "analyze", "analyze_result", "compare", "compare_result", "json_cell", "query", "query_result",
           "query_table", "report_tables", "run_compare"]

_RESULT_CONFIG = MODEL_CONFIG
_REQUEST_CONFIG = MODEL_CONFIG

Row = dict[str, Any]


def json_cell(value: Any) -> Any:
    """A value of a SQL result (a pyarrow ``to_pylist`` cell) as the JSON value the commands print
    (:func:`layerscope.units.json_value`); a type with no JSON form is an :class:`AnalysisError`."""
    try:
        return json_value(value)
    except TypeError:
        raise AnalysisError(f"a SQL value of type {type(value).__name__} has no JSON form") from None


def _rows(table: pa.Table) -> list[Row]:
    return [{k: json_cell(v) for k, v in row.items()} for row in table.to_pylist()]


# --- query ------------------------------------------------------------------------------------------------


class QueryRequest(BaseModel):
    """SQL to run on one trace."""

    model_config = _REQUEST_CONFIG

    trace: Path
    """Trace file: Kineto/Chrome JSON (``.json``, ``.json.gz``) or ``.pftrace``; or a directory of per-rank
    traces."""
    sql: str
    """SQL over trace_processor-style tables (``slice``, ``thread``, …)."""
    use_cache: bool = True
    """Read and write the Parquet cache of the trace's tables."""


class QueryResult(RootModel[list[Row]]):
    """The answer of ``layerscope query --json``: a JSON array of one object per row, column name to value (a
    column name the SQL repeats gets ``_1``, ``_2``, … as DuckDB names them). Dates and times are ISO 8601 text,
    durations seconds, decimals numbers, blobs text, NaN and infinities ``null``."""

    model_config = ConfigDict(frozen=True)


def query_table(request: QueryRequest) -> pa.Table:
    """The rows of ``request``'s SQL on its trace, as a pyarrow table (column names as the SQL gave them); a
    directory of per-rank traces is queried as one table set with a ``rank`` column (:mod:`layerscope.app.ranks`)."""
    if request.trace.is_dir():
        from layerscope.app.ranks import rank_query_table

        return rank_query_table(request.trace, request.sql, use_cache=request.use_cache)
    from layerscope.analysis.engine import run_query

    return run_query(request.trace, request.sql, use_cache=request.use_cache)


def unique_names(table: pa.Table) -> pa.Table:
    """``table`` with repeated column names made unique (``a``, ``a_1`` as DuckDB names them), so that every
    column is a key of the JSON rows."""
    seen: set[str] = set()
    names = []
    for name in table.column_names:
        unique, k = name, 0
        while unique in seen:
            k += 1
            unique = f"{name}_{k}"
        seen.add(unique)
        names.append(unique)
    return table.rename_columns(names)


def query_result(table: pa.Table) -> QueryResult:
    """The result model of a query's rows."""
    return QueryResult(_rows(unique_names(table)))


def query(request: QueryRequest) -> QueryResult:
    """Run ``request``'s SQL on its trace."""
    return query_result(query_table(request))


# --- analyze ----------------------------------------------------------------------------------------------


class AnalyzeRequest(BaseModel):
    """Which trace to report on, and where the report CSVs go."""

    model_config = _REQUEST_CONFIG

    trace: Path
    """Trace file: Kineto/Chrome JSON (``.json``, ``.json.gz``) or ``.pftrace``."""
    threshold_ms: float = 100.0
    """Major events: slices longer than this, milliseconds."""
    csv_dir: Path | None = None
    """Also write each report as ``<csv_dir>/<report>.csv``; ``None``: no CSVs."""
    use_cache: bool = True
    """Read and write the Parquet cache of the trace's tables."""


class AnalyzeResult(BaseModel):
    """The answer of ``layerscope analyze``: its ``--json`` output, one list of rows per report (times in the
    units their column names say)."""

    model_config = _RESULT_CONFIG

    summary: list[Row]
    """One row: trace span, slice/kernel counts, kernel time, GPU slices, flows (``span_ms``, ``slices``,
    ``kernels``, ``kernel_sum_ms``, ``gpu_slices``, ``flows``)."""
    top_ops: list[Row]
    """Operations (slices grouped by name) by total time: ``name``, ``category``, ``count``, ``total_ms``,
    ``mean_us``, ``max_us``."""
    major_events: list[Row]
    """Slices longer than ``threshold_ms``, in time order, with their depth and thread."""
    small_frequent_ops: list[Row]
    """Many short slices, where launch overhead hides: ``name``, ``category``, ``count``, ``mean_us``,
    ``total_ms``."""
    memory_ops: list[Row]
    """GPU memory copies by direction (HtoD, DtoH, DtoD, PtoP, …) and memsets: count, time, bytes, GB/s."""
    attention_kernels: list[Row]
    """Kernels the classifier calls attention, with their decoded family."""
    category_time: list[Row]
    """Time by category, GPU side and CPU side separately (``union_ms`` counts overlaps once)."""
    gpu_idle: list[Row]
    """Per GPU device: span from first to last GPU activity, busy (union), idle = span − busy."""
    kernel_decode: list[Row]
    """The kernels by total time, with what their names encode (family, library, op, tile, dtype, arch, …)."""
    module_time: list[Row]
    """Time per annotated module (and phase), CPU ranges and the GPU kernels they launched."""
    layer_time: list[Row]
    """Time per decoder layer: the union of that layer's module annotations (nesting counted once)."""


def report_tables(request: AnalyzeRequest) -> dict[str, pa.Table]:
    """Every report of :data:`layerscope.analysis.reports.REPORTS` on ``request.trace``, by name, in order; the
    CSVs written first to ``request.csv_dir`` when given (a bad directory is refused before the analysis)."""
    from layerscope.analysis.reports import analyze_trace, check_csv_dir, check_threshold_ms, write_csv_dir

    check_threshold_ms(request.threshold_ms, "--threshold-ms")
    if request.csv_dir is not None:
        check_csv_dir(request.csv_dir, inputs=(request.trace,))
    tables = analyze_trace(request.trace, request.threshold_ms, use_cache=request.use_cache)
    if request.csv_dir is not None:
        write_csv_dir(tables, request.csv_dir, inputs=(request.trace,))
    return tables


def analyze_result(tables: dict[str, pa.Table]) -> AnalyzeResult:
    """The result model of the report tables."""
    return AnalyzeResult(**{name: _rows(table) for name, table in tables.items()})


def analyze(request: AnalyzeRequest) -> AnalyzeResult:
    """Run every report on ``request.trace`` (see :func:`report_tables`)."""
    return analyze_result(report_tables(request))


# --- compare ----------------------------------------------------------------------------------------------


class CompareRequest(BaseModel):
    """Two traces to compare (``a`` control, ``b`` test), or a simulated trace and a captured one (``sim``,
    ``real``)."""

    model_config = _REQUEST_CONFIG

    a: Path | None = None
    """Trace A (control)."""
    b: Path | None = None
    """Trace B (test)."""
    sim: Path | None = None
    """Simulated trace (``layerscope simulate``)."""
    real: Path | None = None
    """Captured trace with module annotations."""
    iterations: int | None = None
    """Iterations in the real trace (not a layerscope capture, which says itself)."""
    phase: str | None = None
    """``prefill`` or ``decode``: the simulated phase, where its trace does not say (``sim``)."""
    use_cache: bool = True
    """Read and write the Parquet cache of the traces' tables."""


class MetricDelta(BaseModel):
    """One whole-trace figure of A and B."""

    model_config = _RESULT_CONFIG

    metric: str
    """``span_ms``, ``kernel_count``, ``kernel_time_ms``, ``kernel_mean_us`` or ``distinct_kernels``."""
    a: float
    """Its value in A."""
    b: float
    """Its value in B."""
    delta: float
    """``b − a``."""
    delta_pct: float | None
    """``100 × (b − a) / a``; ``null`` when ``a`` is 0."""


class NameDelta(BaseModel):
    """The kernels of one name in A and B."""

    model_config = _RESULT_CONFIG

    name: str
    """Kernel name."""
    count_a: int
    """Launches in A."""
    count_b: int
    """Launches in B."""
    count_delta: int
    """``count_b − count_a``."""
    total_ms_a: float
    """Summed time in A, milliseconds."""
    total_ms_b: float
    """Summed time in B, milliseconds."""
    total_ms_delta: float
    """``total_ms_b − total_ms_a``."""
    mean_us_a: float | None
    """Mean time per launch in A, microseconds; ``null`` when absent from A."""
    mean_us_b: float | None
    """Mean time per launch in B, microseconds; ``null`` when absent from B."""
    total_pct_delta: float | None
    """``100 × (total_ms_b − total_ms_a) / total_ms_a``; ``null`` when absent from A."""


class CategoryDelta(BaseModel):
    """The kernels of one category (gemm, attention, …) in A and B."""

    model_config = _RESULT_CONFIG

    category: str
    """Kernel category, as the kernel-name classifier gives it."""
    count_a: int
    """Launches in A."""
    count_b: int
    """Launches in B."""
    count_delta: int
    """``count_b − count_a``."""
    total_ms_a: float
    """Summed time in A, milliseconds."""
    total_ms_b: float
    """Summed time in B, milliseconds."""
    total_ms_delta: float
    """``total_ms_b − total_ms_a``."""
    mean_us_a: float | None
    """Mean time per launch in A, microseconds; ``null`` when absent from A."""
    mean_us_b: float | None
    """Mean time per launch in B, microseconds; ``null`` when absent from B."""
    total_pct_delta: float | None
    """``100 × (total_ms_b − total_ms_a) / total_ms_a``; ``null`` when absent from A."""


class OnlyInA(BaseModel):
    """A kernel name found in A only."""

    model_config = _RESULT_CONFIG

    name: str
    """Kernel name."""
    count_a: int
    """Launches in A."""
    total_ms_a: float
    """Summed time in A, milliseconds."""
    mean_us_a: float | None
    """Mean time per launch in A, microseconds."""


class OnlyInB(BaseModel):
    """A kernel name found in B only."""

    model_config = _RESULT_CONFIG

    name: str
    """Kernel name."""
    count_b: int
    """Launches in B."""
    total_ms_b: float
    """Summed time in B, milliseconds."""
    mean_us_b: float | None
    """Mean time per launch in B, microseconds."""


class TraceComparisonResult(BaseModel):
    """Trace A (control) against trace B (test): their GPU kernels, largest time increase first."""

    model_config = _RESULT_CONFIG

    summary: list[MetricDelta]
    """Whole-trace figures."""
    by_name: list[NameDelta]
    """Per kernel name."""
    by_category: list[CategoryDelta]
    """Per kernel category."""
    only_in_a: list[OnlyInA]
    """Kernel names found in A only, largest time first."""
    only_in_b: list[OnlyInB]
    """Kernel names found in B only, largest time first."""


class SimRealSummary(BaseModel):
    """How predicted and measured op times agree."""

    model_config = _RESULT_CONFIG

    join: Literal["modules", "names"]
    """``modules``: the real trace is a layerscope capture, joined by module as ``validate`` joins; ``names``:
    joined by slice name."""
    phase: str | None
    """The captured phase compared (``prefill``/``decode``; module join only)."""
    ops_joined: int
    """Ops found in both traces."""
    median_abs_error: float | None
    """Median ``|error|`` over the joined ops; ``null`` when none has a measured time."""
    p90_abs_error: float | None
    """90th percentile of ``|error|``."""
    forward_predicted_us: float | None
    """The phase's whole forward, predicted, microseconds; ``null`` when the simulation does not cover every
    captured decoder layer."""
    forward_measured_us: float | None
    """The phase's whole forward, measured, microseconds."""
    forward_error: float | None
    """``(predicted − measured) / measured`` of the whole forward."""
    iterations: int
    """Iterations the real trace's times are divided by."""
    only_sim: int
    """Ops of the simulation with no measured counterpart."""
    only_real: int
    """Measured ops with no simulated counterpart."""
    notes: list[str]
    """What to know about the join."""


class SimRealOp(BaseModel):
    """One op joined between the simulated and the real trace."""

    model_config = _RESULT_CONFIG

    op: str
    """Op (module path or slice name)."""
    kind: str
    """Op kind of the simulation."""
    rule: str
    """How it was joined (``module``, ``name``, …)."""
    predicted_us: float | None
    """Predicted time, microseconds (``null`` only were it not a number)."""
    measured_us: float | None
    """Measured time per iteration, microseconds (``null`` only were it not a number)."""
    error: float | None
    """``(predicted − measured) / measured``: negative when the prediction is too fast; ``null`` when nothing was
    measured."""
    abs_error: float | None
    """``|error|``."""


class SimRealResult(BaseModel):
    """Predicted (a simulated trace) against measured (a captured trace) op times."""

    model_config = _RESULT_CONFIG

    summary: SimRealSummary
    """How they agree."""
    ops: list[SimRealOp]
    """One row per joined op."""
    only_sim: list[str]
    """Ops of the simulation with no measured counterpart."""
    only_real: list[str]
    """Measured ops with no simulated counterpart."""


class CompareResult(RootModel[TraceComparisonResult | SimRealResult]):
    """The answer of ``layerscope compare``: its ``--json`` output, the trace comparison (``compare A B``) or
    the predicted-against-measured one (``compare --sim S --real R``)."""

    model_config = ConfigDict(frozen=True)


def run_compare(request: CompareRequest) -> TraceComparison | SimRealComparison:
    """The analysis layer's comparison of ``request``: two traces, or a simulation and a capture."""
    if request.sim is not None or request.real is not None:
        if request.sim is None or request.real is None or request.a is not None or request.b is not None:
            raise AnalysisError("give both --sim and --real (and no positional traces)")
        from layerscope.analysis.compare import compare_sim_real

        return compare_sim_real(request.sim, request.real, iterations=request.iterations, phase=request.phase,
                                use_cache=request.use_cache)
    if request.a is None or request.b is None:
        raise AnalysisError("give two traces A B, or --sim S --real R")
    from layerscope.analysis.compare import compare_traces

    return compare_traces(request.a, request.b, use_cache=request.use_cache)


def compare_result(run: TraceComparison | SimRealComparison) -> CompareResult:
    """The result model of a comparison."""
    from layerscope.analysis.compare import SimRealComparison

    if isinstance(run, SimRealComparison):
        return CompareResult(SimRealResult.model_validate(
            {"summary": json_cell(run.summary()), "ops": _rows(run.ops), "only_sim": run.only_sim,
             "only_real": run.only_real}))
    return CompareResult(TraceComparisonResult.model_validate(
        {name: _rows(table) for name, table in run.tables().items()}))


def compare(request: CompareRequest) -> CompareResult:
    """Compare the traces of ``request`` (see :func:`run_compare`)."""
    return compare_result(run_compare(request))
