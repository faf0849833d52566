"""``layerscope workloads`` and ``layerscope verify``: operator workload records and their coverage.

``verify`` exits 0 when the records cover what is expected, 1 when there is any gap, 2 on bad input.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from layerscope.cli import options

if TYPE_CHECKING:
    from layerscope.app.records import VerifyResult, WorkloadsResult


def register(app: typer.Typer) -> None:
    app.command("workloads")(workloads_cmd)
    app.command("verify")(verify_cmd)


def workloads_cmd(
    model: str = options.model(..., help="Catalog name, HF id (local cache), config.json or checkpoint "
                               "directory."),
    out: Path = typer.Option(..., "--out", "-o", help="Directory for definitions/, workloads/ and calls.json."),
    from_graph: bool = typer.Option(False, "--from-graph", help="Derive the records from the graph (no torch)."),
    layers: int | None = typer.Option(None, "--layers", help="Keep only the first N decoder layers."),
    dtype: str = typer.Option("bf16", "--dtype", help="fp32 | bf16 | fp16 (graph: any layerscope dtype)"),
    device: str = typer.Option("cpu", "--device", help="cpu | cuda (captured runs)"),
    batch: int = options.batch(),
    prompt_len: int = options.prompt_len(128, help="Prompt tokens of the prefill."),
    decode_steps: int = options.decode_steps(0, help="Greedy decode steps after the prefill."),
    random_weights: bool = typer.Option(False, "--random-weights", help="Random weights even if a checkpoint exists."),
    seed: int = typer.Option(0, "--seed", help="Seed of the random weights and prompt tokens."),
    tp: int = options.tensor_parallel(),
    mla_form: str | None = typer.Option(
        None, "--mla-form", help="MLA form of --from-graph records: naive (what HF runs) | absorbed; default: the "
        "graph's (absorbed decode, naive prefill)."),
    as_json: bool = options.as_json("Print a summary as one JSON object (docs/schema/workloads.json)."),
) -> None:
    """Record every operator instance a model runs (definitions, workloads, per-layer calls).

    --tp and --mla-form apply to --from-graph records only (a run records what it runs)."""
    from layerscope.app.records import WorkloadsRequest, result_of, run_workloads
    from layerscope.app.requests import ParallelPlan, build_request
    from layerscope.errors import RecordsError

    request = build_request(
        WorkloadsRequest, RecordsError, model=model, out=out, from_graph=from_graph, layers=layers, dtype=dtype,
        device=device, batch=batch, prompt_len=prompt_len, decode_steps=decode_steps, random_weights=random_weights,
        seed=seed, parallel=build_request(ParallelPlan, RecordsError, tensor_parallel=tp), mla_form=mla_form,
    )
    run = run_workloads(request)
    for warning in run.warnings:
        typer.echo(f"warning: {warning}", err=True)
    result = result_of(run)
    if as_json:
        from layerscope.cli.common import print_json

        print_json(result)
    else:
        _render_workloads(result)


def _render_workloads(result: WorkloadsResult) -> None:
    from rich.table import Table

    from layerscope.cli.common import console, esc

    con = console()
    meta = result.meta
    passes = esc(", ".join(f"{n} {p}" for p, n in result.passes.items()))
    con.print(f"[bold]{esc(meta.get('model', ''))}[/] · {esc(meta.get('source', ''))} · {esc(meta.get('dtype', ''))} · "
              f"{passes} · "
              f"{result.definitions} definitions · {result.workloads} workloads")
    table = Table(title="operator definitions")
    for col in ("definition", "op type", "category", "layers", "calls", "workloads"):
        table.add_column(col, justify="right" if col in ("layers", "calls", "workloads") else "left")
    for r in sorted(result.records, key=lambda r: (r.category, r.definition)):
        table.add_row(esc(r.definition), esc(r.op_type), esc(r.category), str(r.layers), str(r.calls),
                      str(r.workloads))
    con.print(table)
    con.print(f"records: {esc(result.out)}")


def verify_cmd(
    traces: Path = typer.Option(..., "--traces", "-t", help="Records directory (workloads --out, or a tracing dir)."),
    model: str | None = options.model(None, help="Verify against this model's spec."),
    against: Path | None = typer.Option(None, "--against", help="Verify against another records directory."),
    dtype: str | None = typer.Option(None, "--dtype", help="Expected dtype (default: the records' own)."),
    compare_workloads: bool | None = typer.Option(
        None, "--workloads/--no-workloads", help="Also compare workload axes (default: on with --against)."),
    show: int = typer.Option(20, "--show", help="Gaps listed under the table (--json lists all)."),
    as_json: bool = options.as_json("Print the report as one JSON object (docs/schema/verify.json)."),
) -> None:
    """Check recorded operators against what the model must run; exit 1 on any gap."""
    from layerscope.app.records import VerifyRequest, verify
    from layerscope.app.requests import build_request
    from layerscope.errors import RecordsError

    result = verify(build_request(VerifyRequest, RecordsError, traces=traces, model=model, against=against,
                                  dtype=dtype, compare_workloads=compare_workloads))
    if as_json:
        from layerscope.cli.common import print_json

        print_json(result)
    else:
        _render_verify(result, show)
    if not result.ok:
        raise typer.Exit(1)


def _render_verify(result: VerifyResult, show: int) -> None:
    from rich.markup import escape
    from rich.table import Table

    from layerscope.cli.common import console

    con = console()
    con.print(f"[bold]{escape(str(result.model))}[/] against {escape(str(result.against))} · phases: "
              f"{escape(', '.join(result.phases)) or 'none'}")
    table = Table(title="operator coverage (calls per forward pass)")
    for col in ("category", "status", "expected", "found", "layers exp/found", "calls exp", "calls found", "result"):
        table.add_column(col, justify="right" if col.startswith(("calls", "layers")) else "left")
    for c in result.categories:
        table.add_row(escape(c.category), escape(c.status), escape(" ".join(c.expected_definitions)) or "-",
                      escape(" ".join(c.found_definitions)) or "-", f"{c.expected_layers}/{c.found_layers}",
                      f"{c.expected_calls_per_pass:g}", f"{c.found_calls_per_pass:g}",
                      "ok" if c.ok else f"[red]{len(c.gaps)} gap(s)[/]")
    con.print(table)
    for g in result.gaps[:show]:
        con.print(f"  [red]{escape(g.kind)}[/] {escape(g.category)}: {escape(g.message)}", highlight=False)
    if len(result.gaps) > show:
        con.print(f"  … {len(result.gaps) - show} more (--json lists all)")
    con.print("[green]covered[/]" if result.ok else f"[red]{len(result.gaps)} gap(s)[/]")
