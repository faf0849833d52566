"""``layerscope workloads`` and ``layerscope verify``: operator workload records and their coverage.

``verify`` exits 0 when the records cover what is expected, 1 when there is any gap, 2 on bad input.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer


def register(app: typer.Typer) -> None:
    app.command("workloads")(workloads_cmd)
    app.command("verify")(verify_cmd)


def workloads_cmd(
    model: str = typer.Option(
        ..., "--model", "-m", help="Catalog name, HF id (local cache), config.json or checkpoint directory."
    ),
    out: Path = typer.Option(..., "--out", "-o", help="Directory for definitions/, workloads/ and calls.json."),
    from_graph: bool = typer.Option(False, "--from-graph", help="Derive the records from the graph (no torch)."),
    layers: int | None = typer.Option(None, "--layers", help="Keep only the first N decoder layers."),
    dtype: str = typer.Option("bf16", "--dtype", help="fp32 | bf16 | fp16 (graph: any layerscope dtype)"),
    device: str = typer.Option("cpu", "--device", help="cpu | cuda (captured runs)"),
    batch: int = typer.Option(1, "--batch", "-b", help="Sequences per pass."),
    prompt_len: int = typer.Option(128, "--prompt-len", help="Prompt tokens of the prefill."),
    decode_steps: int = typer.Option(0, "--decode-steps", help="Greedy decode steps after the prefill."),
    random_weights: bool = typer.Option(False, "--random-weights", help="Random weights even if a checkpoint exists."),
    seed: int = typer.Option(0, "--seed", help="Seed of the random weights and prompt tokens."),
    tp: int = typer.Option(1, "--tp", help="Tensor-parallel degree (--from-graph only)."),
    mla_form: str | None = typer.Option(
        None, "--mla-form", help="MLA form of --from-graph records: naive (what HF runs) | absorbed; default: the "
        "graph's (absorbed decode, naive prefill)."),
    as_json: bool = typer.Option(False, "--json", help="Print a summary as one JSON object."),
) -> None:
    """Record every operator instance a model runs (definitions, workloads, per-layer calls)."""
    if from_graph:
        records = _from_graph(model, out, layers, dtype, batch, prompt_len, decode_steps, tp, mla_form)
    else:
        if tp != 1 or mla_form is not None:
            from layerscope.errors import RecordsError

            raise RecordsError("--tp and --mla-form apply to --from-graph only (a run records what it runs)")
        from layerscope.capture.record_run import record_workloads

        records = record_workloads(model, out=out, layers=layers, dtype=dtype, device=device, batch=batch,
                                   prompt_len=prompt_len, decode_steps=decode_steps, random_weights=random_weights,
                                   seed=seed)
    summary = _summary(records, out)
    if as_json:
        from layerscope.cli.common import print_json

        print_json(summary)
    else:
        _render_workloads(summary)


def _from_graph(model: str, out: Path, layers: int | None, dtype: str, batch: int, prompt_len: int,
                decode_steps: int, tp: int, mla_form: str | None) -> Any:
    from layerscope.errors import RecordsError
    from layerscope.model import load_model_spec
    from layerscope.records import records_from_spec

    if mla_form not in (None, "naive", "absorbed"):
        raise RecordsError(f"--mla-form: unknown form {mla_form!r}; known: naive, absorbed")
    checks = (("--batch", batch, 1), ("--prompt-len", prompt_len, 1), ("--decode-steps", decode_steps, 0),
              ("--tp", tp, 1))
    for name, value, low in checks:
        if value < low:
            raise RecordsError(f"{name}: {value} is out of range; must be >= {low}")
    spec = load_model_spec(model)
    if layers is not None and not 1 <= layers <= spec.num_layers:
        raise RecordsError(f"--layers: {layers} is out of range; the model has {spec.num_layers} decoder layers")
    from layerscope.workload import context_warnings, make_workload

    workload = make_workload(phase="generate" if decode_steps else "prefill", batch_size=batch, input_len=prompt_len,
                             output_len=decode_steps + 1)
    for warning in context_warnings(spec, workload):
        typer.echo(f"warning: {warning}", err=True)
    records = records_from_spec(spec, batch=batch, prompt_len=prompt_len, decode_steps=decode_steps, dtype=dtype,
                                tp=tp, layers=None if layers is None else range(layers),
                                mla_form=mla_form)  # type: ignore[arg-type]
    config = Path(model)
    records.write(out, inputs=(config,) if config.is_file() else ())
    return records


def _summary(records: Any, out: Path) -> dict[str, Any]:
    per_def: dict[str, dict[str, Any]] = {}
    for c in records.sorted_calls():
        row = per_def.setdefault(c.definition, {"definition": c.definition, "op_type": c.op_type,
                                                "category": c.category, "calls": 0, "layers": set()})
        row["calls"] += c.calls
        if c.layer is not None:
            row["layers"].add(c.layer)
    rows = [{**r, "layers": len(r["layers"]), "workloads": len(records.workloads.get(r["definition"], {}))}
            for r in per_def.values()]
    return {"out": str(out), "meta": records.meta, "passes": records.passes, "definitions": len(records.definitions),
            "workloads": records.workload_count(), "records": rows}


def _render_workloads(summary: dict[str, Any]) -> None:
    from rich.table import Table

    from layerscope.cli.common import console, esc

    con = console()
    meta = summary["meta"]
    passes = esc(", ".join(f"{n} {p}" for p, n in summary["passes"].items()))
    con.print(f"[bold]{esc(meta.get('model', ''))}[/] · {esc(meta.get('source', ''))} · {esc(meta.get('dtype', ''))} · "
              f"{passes} · "
              f"{summary['definitions']} definitions · {summary['workloads']} workloads")
    table = Table(title="operator definitions")
    for col in ("definition", "op type", "category", "layers", "calls", "workloads"):
        table.add_column(col, justify="right" if col in ("layers", "calls", "workloads") else "left")
    for r in sorted(summary["records"], key=lambda r: (r["category"], r["definition"])):
        table.add_row(esc(r["definition"]), esc(r["op_type"]), esc(r["category"]), str(r["layers"]),
                      str(r["calls"]), str(r["workloads"]))
    con.print(table)
    con.print(f"records: {esc(summary['out'])}")


def verify_cmd(
    traces: Path = typer.Option(..., "--traces", "-t", help="Records directory (workloads --out, or a tracing dir)."),
    model: str | None = typer.Option(None, "--model", "-m", help="Verify against this model's spec."),
    against: Path | None = typer.Option(None, "--against", help="Verify against another records directory."),
    dtype: str | None = typer.Option(None, "--dtype", help="Expected dtype (default: the records' own)."),
    compare_workloads: bool | None = typer.Option(
        None, "--workloads/--no-workloads", help="Also compare workload axes (default: on with --against)."),
    show: int = typer.Option(20, "--show", help="Gaps listed under the table (--json lists all)."),
    as_json: bool = typer.Option(False, "--json", help="Print the report as one JSON object."),
) -> None:
    """Check recorded operators against what the model must run; exit 1 on any gap."""
    from layerscope.errors import RecordsError
    from layerscope.records import RecordSet, expected_from_spec, verify

    if (model is None) == (against is None):
        raise RecordsError("give exactly one of --model (verify against the spec) and --against (another records dir)")
    observed = RecordSet.read(traces)
    if model is not None:
        from layerscope.model import load_model_spec

        spec = load_model_spec(model)
        expected = expected_from_spec(spec, observed, dtype=dtype)
        report = verify(observed, expected, model=spec.name, against="spec",
                        compare_workloads=bool(compare_workloads))
    else:
        assert against is not None
        expected = RecordSet.read(against)
        report = verify(observed, expected, against=str(against),
                        compare_workloads=True if compare_workloads is None else compare_workloads)
    if as_json:
        from layerscope.cli.common import print_json

        print_json(report.to_dict())
    else:
        _render_verify(report, show)
    if not report.ok:
        raise typer.Exit(1)


def _render_verify(report: Any, show: int) -> None:
    from rich.markup import escape
    from rich.table import Table

    from layerscope.cli.common import console

    con = console()
    con.print(f"[bold]{escape(str(report.model))}[/] against {escape(str(report.against))} · phases: "
              f"{escape(', '.join(report.phases)) or 'none'}")
    table = Table(title="operator coverage (calls per forward pass)")
    for col in ("category", "status", "expected", "found", "layers exp/found", "calls exp", "calls found", "result"):
        table.add_column(col, justify="right" if col.startswith(("calls", "layers")) else "left")
    for c in report.categories:
        table.add_row(escape(c.category), escape(c.status), escape(" ".join(c.expected_definitions)) or "-",
                      escape(" ".join(c.found_definitions)) or "-", f"{c.expected_layers}/{c.found_layers}",
                      f"{c.expected_calls_per_pass:g}", f"{c.found_calls_per_pass:g}",
                      "ok" if c.ok else f"[red]{len(c.gaps)} gap(s)[/]")
    con.print(table)
    for g in report.gaps[:show]:
        con.print(f"  [red]{escape(g.kind)}[/] {escape(g.category)}: {escape(g.message)}", highlight=False)
    if len(report.gaps) > show:
        con.print(f"  … {len(report.gaps) - show} more (--json lists all)")
    con.print("[green]covered[/]" if report.ok else f"[red]{len(report.gaps)} gap(s)[/]")
