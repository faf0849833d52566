"""``layerscope query``, ``analyze`` and ``compare``: SQL, reports and diffs over traces."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from layerscope.cli import options

if TYPE_CHECKING:
    from layerscope.analysis.compare import SimRealComparison


def register(app: typer.Typer) -> None:
    app.command("query")(query_cmd)
    app.command("analyze")(analyze_cmd)
    app.command("compare")(compare_cmd)


#: The most SQL read from a file or standard input (a recipe is a few KiB; this bounds a wrong file).
MAX_SQL_BYTES = 16 * 1024 * 1024


def query_cmd(
    trace: Path = typer.Argument(..., help="Trace file: Kineto/Chrome JSON (.json, .json.gz) or .pftrace; or a "
                                 "directory of per-rank traces (tables with a rank column, and rank_breakdown)."),
    sql: str | None = typer.Argument(
        None, help="SQL over trace_processor-style tables (slice, thread …); without it, read from standard input."),
    file: Path | None = typer.Option(None, "--file", "-f", help="Read the SQL from this file ('-': standard input)."),
    fmt: str = typer.Option("table", "--format", help="table | csv | json"),
    as_json: bool = options.as_json("Print the rows as one JSON array (as --format json; docs/schema/query.json)."),
    no_cache: bool = typer.Option(False, "--no-cache", help="Do not read or write the Parquet cache."),
) -> None:
    """Run SQL on a trace (tables named and shaped like Perfetto trace_processor's).

    The SQL sees the trace's tables only: it cannot read or write files, attach databases or load
    extensions."""
    from layerscope.errors import AnalysisError

    if fmt not in ("table", "csv", "json"):
        raise AnalysisError(f"--format: {fmt!r} is not allowed; use table, csv or json")
    if as_json:
        if fmt not in ("table", "json"):
            raise AnalysisError(f"--json prints JSON; it cannot be combined with --format {fmt}")
        fmt = "json"
    text = _read_sql(sql, file)
    from layerscope.app.analyze import QueryRequest, query_result, query_table
    from layerscope.app.requests import build_request

    table = query_table(build_request(QueryRequest, AnalysisError, trace=trace, sql=text, use_cache=not no_cache))
    if fmt == "json":
        from layerscope.cli.common import print_json

        print_json(query_result(table))
    elif fmt == "csv":
        import pyarrow.csv as pacsv

        sink = sys.stdout.buffer
        pacsv.write_csv(_csv_ready(table), sink)
        sink.flush()
    else:
        _print_table(table, title=None)


def _read_sql(sql: str | None, file: Path | None) -> str:
    """The SQL text: the argument, the ``--file`` (``-`` is standard input), or piped standard input."""
    from layerscope.errors import AnalysisError

    if sql is not None and file is not None:
        raise AnalysisError("give the SQL either as an argument or with --file, not both")
    if sql is not None:
        where, text = "the SQL argument", sql
    elif file is not None and str(file) != "-":
        where = f"--file {str(file)!r}"
        try:
            with file.open("rb") as handle:
                data = handle.read(MAX_SQL_BYTES + 1)
        except OSError as exc:
            raise AnalysisError(f"{where}: cannot read it: {exc.strerror}") from None
        text = _decode_sql(data, where)
    else:
        stdin = sys.stdin
        if file is None and (stdin is None or stdin.isatty()):
            raise AnalysisError("no SQL: give it as an argument, with --file PATH, or on standard input "
                                "(echo 'SELECT …' | layerscope query TRACE)")
        where = "the SQL on standard input"
        if stdin is None:
            raise AnalysisError(f"{where}: there is no standard input")
        data = stdin.buffer.read(MAX_SQL_BYTES + 1)
        text = _decode_sql(data, where)
    if not _statements(text):
        raise AnalysisError(f"{where} is empty (no statement); give a query such as "
                            "'SELECT name, dur FROM slice LIMIT 10'")
    return text


def _statements(sql: str) -> str:
    """``sql`` without comments, semicolons and whitespace: empty when it holds no statement."""
    import re

    no_comments = re.sub(r"--[^\n]*|/\*.*?\*/", " ", sql, flags=re.S)
    return no_comments.replace(";", " ").strip()


def _decode_sql(data: bytes, where: str) -> str:
    from layerscope.errors import AnalysisError

    if len(data) > MAX_SQL_BYTES:
        raise AnalysisError(f"{where} is larger than {MAX_SQL_BYTES // (1024 * 1024)} MiB; that is not a query")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise AnalysisError(f"{where} is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start})") from None


def _csv_ready(table: Any) -> Any:
    """``table`` with the columns a CSV cannot hold (lists, structs, maps, blobs, intervals) as JSON text."""
    import pyarrow as pa

    from layerscope.cli.common import to_json_text

    plain = (pa.types.is_integer, pa.types.is_floating, pa.types.is_boolean, pa.types.is_string,
             pa.types.is_large_string, pa.types.is_decimal, pa.types.is_date, pa.types.is_timestamp,
             pa.types.is_time, pa.types.is_null)
    for i, column in enumerate(table.schema):
        if not any(test(column.type) for test in plain):
            values = [None if v is None else to_json_text(v) for v in table.column(i).to_pylist()]
            table = table.set_column(i, column.name, pa.array(values, pa.string()))
    return table


def _check_rows(rows: int) -> None:
    from layerscope.errors import AnalysisError

    if rows < 1:
        raise AnalysisError(f"--rows: {rows} is not allowed; give the number of rows to show per table (at least 1)")


def analyze_cmd(
    trace: Path = typer.Argument(..., help="Trace file: Kineto/Chrome JSON (.json, .json.gz) or .pftrace; or a "
                                 "directory of per-rank traces (one row per rank)."),
    as_json: bool = options.as_json(
        "Print one JSON object: report name → rows (docs/schema/analyze.json; a directory: analyze-ranks.json)."),
    csv_dir: Path | None = typer.Option(None, "--csv", help="Also write each report as DIR/<report>.csv."),
    threshold_ms: float = typer.Option(100.0, "--threshold-ms", help="Major events: slices longer than this."),
    rows: int = typer.Option(15, "--rows", help="Rows shown per table."),
    no_cache: bool = typer.Option(False, "--no-cache", help="Do not read or write the Parquet cache."),
    straggler_pct: float = typer.Option(
        10.0, "--straggler-pct", help="Directory: a rank straggles when its GPU work exceeds the median by this %."),
    include_last_step: bool = typer.Option(
        False, "--include-last-step", help="Directory: count the work of the last ProfilerStep too."),
) -> None:
    """Reports: top ops, major events, launch overhead, memcpy, attention, categories, GPU idle; per rank for a
    directory of per-rank traces (compute, communication, memory, idle, overlap, stragglers)."""
    from layerscope.app.analyze import AnalyzeRequest, analyze_result, report_tables
    from layerscope.app.requests import build_request
    from layerscope.errors import AnalysisError

    _check_rows(rows)
    if trace.is_dir():
        _analyze_ranks(trace, as_json, csv_dir, rows, not no_cache, straggler_pct, include_last_step)
        return
    from layerscope.cli.common import quiet_third_party

    with quiet_third_party():
        tables = report_tables(build_request(AnalyzeRequest, AnalysisError, trace=trace, threshold_ms=threshold_ms,
                                             csv_dir=csv_dir, use_cache=not no_cache))
    if as_json:
        from layerscope.cli.common import print_json

        print_json(analyze_result(tables))
        return
    for name, table in tables.items():
        if table.num_rows:
            _print_table(table.slice(0, rows), title=f"{name} ({min(rows, table.num_rows)} of {table.num_rows})",
                         readable=True)


def _analyze_ranks(directory: Path, as_json: bool, csv_dir: Path | None, rows: int, use_cache: bool,
                   straggler_pct: float, include_last_step: bool) -> None:
    from layerscope.app.ranks import RanksRequest, rank_table, ranks_result
    from layerscope.app.requests import build_request
    from layerscope.errors import AnalysisError

    request = build_request(RanksRequest, AnalysisError, directory=directory, straggler_pct=straggler_pct,
                            include_last_step=include_last_step, csv_dir=csv_dir, use_cache=use_cache)
    table = rank_table(request)
    result = ranks_result(table, request.straggler_pct)
    if as_json:
        from layerscope.cli.common import print_json

        print_json(result)
        return
    from layerscope.cli.common import console, fmt_time_s

    _print_table(table.drop_columns(["file"]).slice(0, rows),
                 title=f"rank_breakdown ({min(rows, table.num_rows)} of {table.num_rows} ranks)", readable=True)
    who = ", ".join(str(r) for r in result.stragglers) or "none"
    console().print(f"stragglers (GPU work > median {fmt_time_s(result.median_work_ms / 1e3)} + "
                    f"{request.straggler_pct:g}%): {who}")


def compare_cmd(
    a: Path | None = typer.Argument(None, help="Trace A (control)."),
    b: Path | None = typer.Argument(None, help="Trace B (test)."),
    sim: Path | None = typer.Option(None, "--sim", help="Simulated trace (layerscope simulate)."),
    real: Path | None = typer.Option(None, "--real", help="Captured trace with module annotations."),
    iterations: int | None = typer.Option(
        None, "--iterations", help="Iterations in the real trace (not a layerscope capture, which says itself)."),
    phase: str | None = typer.Option(
        None, "--phase", help="prefill | decode: the simulated phase, where its trace does not say (--sim)."),
    as_json: bool = options.as_json("Print one JSON object (docs/schema/compare.json)."),
    rows: int = typer.Option(20, "--rows", help="Rows shown per table."),
    no_cache: bool = typer.Option(False, "--no-cache", help="Do not read or write the Parquet cache."),
) -> None:
    """Compare two traces (A B), or predicted vs measured op times (--sim S --real R)."""
    from layerscope.analysis.compare import SimRealComparison
    from layerscope.app.analyze import CompareRequest, compare_result, run_compare
    from layerscope.app.requests import build_request
    from layerscope.errors import AnalysisError

    _check_rows(rows)
    from layerscope.cli.common import quiet_third_party

    with quiet_third_party():
        comparison = run_compare(build_request(CompareRequest, AnalysisError, a=a, b=b, sim=sim, real=real,
                                               iterations=iterations, phase=phase, use_cache=not no_cache))
    if as_json:
        from layerscope.cli.common import print_json

        print_json(compare_result(comparison))
    elif isinstance(comparison, SimRealComparison):
        _render_sim_real(comparison, rows)
    else:
        for name, table in comparison.tables().items():
            if table.num_rows:
                _print_table(table.slice(0, rows), title=f"{name} ({min(rows, table.num_rows)} of {table.num_rows})",
                             readable=True)


def _render_sim_real(result: SimRealComparison, rows: int) -> None:
    from layerscope.cli.common import ERROR_SIGN, console, esc, fmt_time_s

    how = f"{result.phase}, joined by module" if result.join == "modules" else "joined by name"
    _print_table(result.ops.sort_by([("abs_error", "descending")]).slice(0, rows),
                 title=f"predicted vs measured ({result.ops.num_rows} ops, {how})", caption=ERROR_SIGN, readable=True)
    s = result.summary()
    forward = ("" if s["forward_error"] is None else
               f"forward {fmt_time_s(s['forward_predicted_us'] / 1e6)} predicted, "
               f"{fmt_time_s(s['forward_measured_us'] / 1e6)} measured ({100 * s['forward_error']:+.1f}%) · ")
    console().print(f"{forward}median |error| {_pct(s['median_abs_error'])} · p90 |error| "
                    f"{_pct(s['p90_abs_error'])} · iterations {s['iterations']} · only in sim {s['only_sim']}"
                    f" · only in real {s['only_real']}")
    for note in result.notes:
        console().print(f"note: {esc(note)}")


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.6g}"
    text = str(value)
    return text if len(text) <= 80 else text[:77] + "…"


def _print_table(table: Any, title: str | None, caption: str | None = None, readable: bool = False) -> None:
    """``table`` (a pyarrow Table) as a rich table; names and values print literally (no markup).

    ``readable`` (the reports, not a user's SQL): columns whose name carries a unit print in words a person reads
    (:func:`_readable_column`): times in the unit that suits each value, shares and errors as percentages."""
    from rich.table import Table

    from layerscope.cli.common import console, text

    out = Table(title=None if title is None else text(title), caption=None if caption is None else text(caption))
    names = table.column_names
    columns = [table.column(i).to_pylist() for i in range(table.num_columns)]
    if readable:
        units = _row_units(names, columns)
        styled = [_readable_column(name, units if name in _METRIC_VALUES else None) for name in names]
        headers = [header for header, _ in styled]
        cells = [[fmt(v, row) for row, v in enumerate(column)]
                 for (_, fmt), column in zip(styled, columns, strict=True)]
        # A column the formatter changed holds quantities: right-aligned, so their magnitudes line up.
        right = [header != name or name in _METRIC_VALUES or name in ("share", "bytes") or name.endswith("error")
                 for header, name in zip(headers, names, strict=True)]
    else:
        headers = list(names)
        cells = [[_cell(v) for v in column] for column in columns]
        right = [False] * len(names)
    for header, align_right in zip(headers, right, strict=True):
        out.add_column(text(header), overflow="fold", justify="right" if align_right else "left")
    for row in zip(*cells, strict=True):  # by position: SQL may give two columns one name
        out.add_row(*(text(v) for v in row))
    console().print(out)


#: Seconds per unit of a column name's unit token (``total_ms``, ``mean_us_a``, ``total_ns``).
_TIME_UNITS = {"ms": 1e-3, "us": 1e-6, "ns": 1e-9}
#: A comparison summary's value columns: their unit is the row's metric's (``span_ms``, ``kernel_count``).
_METRIC_VALUES = ("a", "b", "delta")


def _row_units(names: list[str], columns: list[list[Any]]) -> list[str] | None:
    """Each row's metric name, for a table with a ``metric`` column (the comparison summary), else None."""
    if "metric" not in names:
        return None
    return [str(m) for m in columns[names.index("metric")]]


def _readable_column(name: str, row_metrics: list[str] | None = None) -> tuple[str, Any]:
    """The header and the cell formatter ``fmt(value, row)`` of a report column, chosen by its name: a time unit
    token (``ms``, ``us``, ``ns``) -> the time in the unit that suits it, the token dropped from the header;
    ``pct`` (already x100) and ``share``, ``error``, ``abs_error`` (fractions) -> percentages; ``bytes`` -> SI
    bytes; ``gb_per_s`` -> a bandwidth. ``row_metrics``: each row's metric, whose name gives the unit instead."""
    from layerscope.cli.common import fmt_si, fmt_time_s

    def missing(value: Any) -> bool:
        return value is None or (isinstance(value, float) and value != value)

    if row_metrics is not None:
        def by_metric(value: Any, row: int) -> str:
            metric = row_metrics[row] if row < len(row_metrics) else ""
            return _readable_column(metric)[1](value, row)

        return name, by_metric
    tokens = name.split("_")
    unit = next((t for t in tokens if t in _TIME_UNITS), None)
    if unit is not None:
        scale = _TIME_UNITS[unit]
        header = "_".join(t for t in tokens if t != unit) or name
        return header, lambda v, _row: "" if missing(v) else "0" if v == 0 else fmt_time_s(float(v) * scale)
    if "pct" in tokens:
        signed = "delta" in tokens
        header = "_".join(t for t in tokens if t != "pct") + " %"
        return header, lambda v, _row: "" if missing(v) else (f"{v:+.1f}%" if signed else f"{v:.1f}%")
    if name == "share":
        return name, lambda v, _row: "" if missing(v) else f"{v:.1%}"
    if name == "error" or name.endswith("_error"):
        signed = not name.startswith("abs") and "abs" not in tokens
        return name, lambda v, _row: "" if missing(v) else (f"{v:+.1%}" if signed else f"{v:.1%}")
    if name == "bytes" or name.endswith("_bytes"):
        return name, lambda v, _row: "" if missing(v) else fmt_si(float(v), "B")
    if name == "gb_per_s":
        return "bandwidth", lambda v, _row: "" if missing(v) else fmt_si(float(v) * 1e9, "B/s")
    return name, lambda v, _row: _cell(v)
