"""``layerscope query``, ``analyze`` and ``compare``: SQL, reports and diffs over traces."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import typer


def register(app: typer.Typer) -> None:
    app.command("query")(query_cmd)
    app.command("analyze")(analyze_cmd)
    app.command("compare")(compare_cmd)


def query_cmd(
    trace: Path = typer.Argument(..., help="Trace file: Kineto/Chrome JSON (.json, .json.gz) or .pftrace."),
    sql: str | None = typer.Argument(None, help="SQL over trace_processor-style tables (slice, thread …)."),
    file: Path | None = typer.Option(None, "--file", "-f", help="Read the SQL from this file."),
    fmt: str = typer.Option("table", "--format", help="table | csv | json"),
    no_cache: bool = typer.Option(False, "--no-cache", help="Do not read or write the Parquet cache."),
) -> None:
    """Run SQL on a trace (tables named and shaped like Perfetto trace_processor's)."""
    from layerscope.errors import AnalysisError

    if fmt not in ("table", "csv", "json"):
        raise AnalysisError(f"--format: {fmt!r} is not allowed; use table, csv or json")
    if (sql is None) == (file is None):
        raise AnalysisError("give the SQL either as an argument or with --file, not both or neither")
    if file is not None:
        try:
            sql = file.read_text()
        except OSError as exc:
            raise AnalysisError(f"--file {str(file)!r}: {exc.strerror}") from None
    from layerscope.analysis.engine import run_query

    table = run_query(trace, sql or "", use_cache=not no_cache)
    if fmt == "json":
        from layerscope.cli.common import print_json

        print_json(table.to_pylist())
    elif fmt == "csv":
        import pyarrow.csv as pacsv

        sink = sys.stdout.buffer
        pacsv.write_csv(table, sink)
        sink.flush()
    else:
        _print_table(table, title=None)


def analyze_cmd(
    trace: Path = typer.Argument(..., help="Trace file: Kineto/Chrome JSON (.json, .json.gz) or .pftrace."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object: report name → rows."),
    csv_dir: Path | None = typer.Option(None, "--csv", help="Also write each report as DIR/<report>.csv."),
    threshold_ms: float = typer.Option(100.0, "--threshold-ms", help="Major events: slices longer than this."),
    rows: int = typer.Option(15, "--rows", help="Rows shown per table."),
    no_cache: bool = typer.Option(False, "--no-cache", help="Do not read or write the Parquet cache."),
) -> None:
    """Reports: top ops, major events, launch overhead, memcpy, attention, categories, GPU idle."""
    from layerscope.analysis.reports import analyze_trace, write_csv_dir

    tables = analyze_trace(trace, threshold_ms, use_cache=not no_cache)
    if csv_dir is not None:
        write_csv_dir(tables, csv_dir)
    if as_json:
        from layerscope.cli.common import print_json

        print_json({name: table.to_pylist() for name, table in tables.items()})
        return
    for name, table in tables.items():
        if table.num_rows:
            _print_table(table.slice(0, rows), title=f"{name} ({min(rows, table.num_rows)} of {table.num_rows})")


def compare_cmd(
    a: Path | None = typer.Argument(None, help="Trace A (control)."),
    b: Path | None = typer.Argument(None, help="Trace B (test)."),
    sim: Path | None = typer.Option(None, "--sim", help="Simulated trace (layerscope simulate)."),
    real: Path | None = typer.Option(None, "--real", help="Captured trace with module annotations."),
    iterations: int | None = typer.Option(
        None, "--iterations", help="Iterations in the real trace (not a layerscope capture, which says itself)."),
    phase: str | None = typer.Option(
        None, "--phase", help="prefill | decode: the simulated phase, where its trace does not say (--sim)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
    rows: int = typer.Option(20, "--rows", help="Rows shown per table."),
    no_cache: bool = typer.Option(False, "--no-cache", help="Do not read or write the Parquet cache."),
) -> None:
    """Compare two traces (A B), or predicted vs measured op times (--sim S --real R)."""
    from layerscope.errors import AnalysisError

    if sim is not None or real is not None:
        if sim is None or real is None or a is not None or b is not None:
            raise AnalysisError("give both --sim and --real (and no positional traces)")
        from layerscope.analysis.compare import compare_sim_real

        result = compare_sim_real(sim, real, iterations=iterations, phase=phase, use_cache=not no_cache)
        if as_json:
            from layerscope.cli.common import print_json

            print_json({"summary": result.summary(), "ops": result.ops.to_pylist(),
                        "only_sim": result.only_sim, "only_real": result.only_real})
            return
        how = f"{result.phase}, joined by module" if result.join == "modules" else "joined by name"
        _print_table(result.ops.sort_by([("abs_error", "descending")]).slice(0, rows),
                     title=f"predicted vs measured ({result.ops.num_rows} ops, {how})")
        from layerscope.cli.common import console

        s = result.summary()
        forward = ("" if s["forward_error"] is None else
                   f"forward {s['forward_predicted_us'] / 1e3:.3f} ms predicted, {s['forward_measured_us'] / 1e3:.3f} "
                   f"ms measured ({100 * s['forward_error']:+.1f}%) · ")
        console().print(f"{forward}median |error| {_pct(s['median_abs_error'])} · p90 |error| "
                        f"{_pct(s['p90_abs_error'])} · iterations {s['iterations']} · only in sim {s['only_sim']}"
                        f" · only in real {s['only_real']}")
        for note in result.notes:
            console().print(f"note: {note}")
        return
    if a is None or b is None:
        raise AnalysisError("give two traces A B, or --sim S --real R")
    from layerscope.analysis.compare import compare_traces

    comparison = compare_traces(a, b, use_cache=not no_cache)
    if as_json:
        from layerscope.cli.common import print_json

        print_json({name: table.to_pylist() for name, table in comparison.tables().items()})
        return
    for name, table in comparison.tables().items():
        if table.num_rows:
            _print_table(table.slice(0, rows), title=f"{name} ({min(rows, table.num_rows)} of {table.num_rows})")


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.6g}"
    text = str(value)
    return text if len(text) <= 80 else text[:77] + "…"


def _print_table(table: Any, title: str | None) -> None:
    from rich.table import Table

    from layerscope.cli.common import console

    out = Table(title=title)
    for name in table.column_names:
        out.add_column(name, overflow="fold")
    for row in table.to_pylist():
        out.add_row(*(_cell(v) for v in row.values()))
    console().print(out)
