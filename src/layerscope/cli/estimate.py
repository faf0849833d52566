"""``layerscope estimate``: per-op times, TTFT/TPOT and memory for a model on a hardware spec."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer


def register(app: typer.Typer) -> None:
    app.command("estimate")(estimate_cmd)


def estimate_cmd(
    model: str = typer.Option("llama-3.2-1b", "--model", "-m", help="Catalog name, HF id, config.json or directory."),
    hardware: str = typer.Option("h100-sxm", "--hardware", "-H", help="Preset name or YAML/JSON/CSV/XLSX file."),
    device: str | None = typer.Option(None, "--device-column", help="Column of a multi-device spreadsheet."),
    phase: str = typer.Option("decode", "--phase", help="prefill | decode | chunked | generate"),
    batch: int = typer.Option(1, "--batch", "-b", help="Sequences per pass."),
    input_len: int = typer.Option(512, "--input", help="Prompt tokens (prefill, generate)."),
    output_len: int = typer.Option(128, "--output", help="Generated tokens (generate)."),
    context: int = typer.Option(1024, "--context", help="Cached tokens per decode sequence."),
    chunk: int = typer.Option(512, "--chunk", help="Prompt tokens per chunked-prefill pass."),
    weight_dtype: str = typer.Option("bf16", "--weight-dtype"),
    act_dtype: str = typer.Option("bf16", "--act-dtype"),
    kv_dtype: str = typer.Option("bf16", "--kv-dtype"),
    tensor_parallel: int = typer.Option(1, "--tp", help="Tensor-parallel devices."),
    cost: str = typer.Option("roofline", "--cost", help="roofline | tiling | hierarchical"),
    attention: str = typer.Option("fused", "--attention", help="fused | unfused"),
    layer: int | None = typer.Option(None, "--layer", help="Estimate one decoder layer only."),
    top: int = typer.Option(25, "--top", min=1, help="Ops shown in the table (all with --all-ops)."),
    all_ops: bool = typer.Option(False, "--all-ops", help="Show every op."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object (docs/estimate-json.md)."),
    csv_path: Path | None = typer.Option(None, "--csv", help="Write the per-op table as CSV."),
) -> None:
    """Break a model into ops and time each on a hardware spec (TTFT, TPOT, memory)."""
    from layerscope.cost.run import run_estimate

    result = run_estimate(
        model=model, hardware=hardware, device=device, phase=phase, batch_size=batch, input_len=input_len,
        output_len=output_len, context_len=context, chunk_size=chunk, weight_dtype=weight_dtype,
        act_dtype=act_dtype, kv_dtype=kv_dtype, tensor_parallel=tensor_parallel, cost_model=cost,
        attention=attention, layer=layer,
    )
    for warning in result.warnings:
        typer.echo(f"warning: {warning}", err=True)
    if csv_path is not None:
        from layerscope.cost.run import write_ops_csv

        write_ops_csv(result, csv_path)
    if as_json:
        from layerscope.cli.common import print_json

        print_json(result.to_json())
        return
    _render(result, None if all_ops else top)


def _render(result: Any, top: int | None) -> None:
    from rich.table import Table

    from layerscope.cli.common import console, esc, fmt_si, fmt_time_s

    con = console()
    w = result.workload
    con.print(
        f"[bold]{esc(result.model)}[/] on [bold]{esc(result.hardware)}[/] · {w.phase} · batch {w.batch_size} · "
        f"cost model {esc(result.cost_model)} · {esc(result.scope)}"
    )
    total = result.total_time_s or 1.0
    ops = sorted(result.ops, key=lambda o: -o.time_s)
    shown = ops if top is None else ops[:top]
    t = Table(title=f"ops by time ({len(shown)} of {len(ops)})", show_lines=False)
    for col in ("op", "phase", "kind", "class", "shapes", "FLOPs", "bytes", "time", "bound", "share"):
        t.add_column(col, justify="right" if col in ("FLOPs", "bytes", "time", "share") else "left")
    for op in shown:
        shapes = " ".join("x".join(map(str, s)) for s in op.inputs[:2]) + " → " + " ".join(
            "x".join(map(str, s)) for s in op.outputs[:1])
        t.add_row(esc(op.name), op.phase, op.kind, op.matrix_class, shapes, fmt_si(op.flops), fmt_si(op.bytes, "B"),
                  fmt_time_s(op.time_s), op.bound, f"{op.time_s / total:.1%}")
    con.print(t)
    for key, title in (("matrix_class", "by matrix class"), ("kind", "by op kind")):
        b = Table(title=title)
        for col in (key, "ops", "time", "share", "FLOPs", "bytes"):
            b.add_column(col)
        for row in result.breakdown(key):
            b.add_row(esc(row[key]), str(row["ops"]), fmt_time_s(row["time_s"]), f"{row['share']:.1%}",
                      fmt_si(row["flops"]), fmt_si(row["bytes"], "B"))
        con.print(b)
    m = result.memory
    s = Table(title="totals")
    s.add_column("metric")
    s.add_column("value", justify="right")
    s.add_row("TTFT", fmt_time_s(result.ttft_s) if result.ttft_s is not None else "-")
    s.add_row("TPOT", fmt_time_s(result.tpot_s) if result.tpot_s is not None else "-")
    s.add_row("end to end", fmt_time_s(result.e2e_s))
    s.add_row("output tokens/s", f"{result.output_tokens_per_s:,.1f}")
    s.add_row("weights", fmt_si(m.weights, "B"))
    s.add_row("KV cache", fmt_si(m.kv_cache, "B"))
    s.add_row("activations", fmt_si(m.activations, "B"))
    s.add_row("memory total / capacity", f"{fmt_si(m.total, 'B')} / {fmt_si(result.memory_capacity_bytes, 'B')}")
    s.add_row("fits in memory", "yes" if result.fits_in_memory else "[red]no[/]")
    con.print(s)
