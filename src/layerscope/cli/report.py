"""``layerscope report``: one self-contained HTML file of plotly charts from the commands' ``--json`` outputs."""

from __future__ import annotations

from pathlib import Path

import typer

from layerscope.cli import options


def register(app: typer.Typer) -> None:
    app.command("report")(report_cmd)


def report_cmd(
    inputs: list[Path] = typer.Argument(..., metavar="INPUT.json...", show_default=False,
                                        help="--json outputs of estimate, simulate, validate, compare, plan or "
                                        "serving, in any mix."),
    out: Path = typer.Option(..., "--out", "-o", help="The HTML file to write (replaced if it exists; never an "
                             "input)."),
    title: str = typer.Option("layerscope report", "--title", help="The page's title."),
    as_json: bool = options.as_json("Print one JSON object: the file written, its sections and charts."),
) -> None:
    """Plot the commands' --json outputs into one HTML file that opens offline (plotly; docs/report.md)."""
    from layerscope.report import report

    result = report(inputs, out, title=title)
    if as_json:
        from layerscope.cli.common import print_json

        print_json(result)
        return
    for section in result.sections:
        charts = ", ".join(chart.id.split("-", 1)[1] for chart in section.charts) or "no charts"
        typer.echo(f"{section.input} ({section.kind}): {charts}")
        for note in section.notes:
            typer.echo(f"  note: {note}")
    typer.echo(f"wrote {result.out} ({result.bytes / 1e6:.1f} MB): open it in a browser, no network needed")
