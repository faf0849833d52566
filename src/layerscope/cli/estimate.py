"""``layerscope estimate``: per-op times, TTFT/TPOT and memory for a model on a hardware spec."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from layerscope.cli import options

if TYPE_CHECKING:
    from layerscope.app.estimate import EstimateResult
    from layerscope.cli.tables import Block, Table


def register(app: typer.Typer) -> None:
    app.command("estimate")(estimate_cmd)


def estimate_cmd(
    model: str = options.model(),
    hardware: str = options.hardware(),
    device: str | None = options.device_column(),
    phase: str = typer.Option("decode", "--phase", help="prefill | decode | chunked | generate"),
    batch: int = options.batch(),
    prompt_len: int | None = options.prompt_len(None, help="Prompt tokens per sequence (prefill, generate) "
                                                "[default: 512]."),
    decode_steps: int | None = options.decode_steps(None, help="Decode passes after the prefill (generate: "
                                                    "decode steps + 1 tokens, the first from the prefill) "
                                                    "[default: 127]."),
    context: int = options.context(),
    chunk: int = options.chunk(),
    weight_dtype: str = options.weight_dtype(),
    act_dtype: str = options.act_dtype(),
    kv_dtype: str = options.kv_dtype(),
    tensor_parallel: int = options.tensor_parallel(),
    pipeline_parallel: int = options.pipeline_parallel(),
    expert_parallel: int = options.expert_parallel(),
    data_parallel: int = options.data_parallel(),
    micro_batches: int = options.micro_batches(),
    sequence_parallel: bool = options.sequence_parallel(),
    two_batch_overlap: bool = options.two_batch_overlap(),
    cost_model: str | None = options.cost_model(None),
    attention: str = options.attention(),
    execution: str | None = options.execution(),
    layer: int | None = typer.Option(None, "--layer", help="Estimate one decoder layer only."),
    top: int = typer.Option(25, "--top", min=1, help="Ops shown in the table (all with --all-ops)."),
    all_ops: bool = typer.Option(False, "--all-ops", help="Show every op."),
    explain: bool = typer.Option(False, "--explain", help="Add each op's compute and memory efficiency, overhead "
                                 "and the kernel-table rows behind its time; list the spec figures used "
                                 "(docs/estimate-json.md)."),
    as_json: bool = options.as_json("Print one JSON object (docs/schema/estimate.json)."),
    csv_path: Path | None = typer.Option(None, "--csv", help="Write the per-op table as CSV."),
    activity: Path | None = typer.Option(None, "--activity", help="Write each op's activity for external power "
                                         "tools (MACs per dtype, bytes per memory level, interconnect bytes, time, "
                                         "energy) as .csv or .parquet (needs pyarrow); docs/energy.md."),
    input_alias: int | None = options.alias("--input"),
    output_alias: int | None = options.alias("--output"),
    cost_alias: str | None = options.alias("--cost"),
) -> None:
    """Break a model into ops and time each on a hardware spec (TTFT, TPOT, memory)."""
    from layerscope.app.estimate import EstimateRequest, estimate, write_ops_csv
    from layerscope.app.requests import ParallelPlan, WorkloadRequest, build_request, with_execution

    workload = build_request(
        WorkloadRequest, phase=phase, batch=batch, context=context, chunk=chunk, weight_dtype=weight_dtype,
        act_dtype=act_dtype, kv_dtype=kv_dtype,
        prompt_len=options.resolve(prompt_len, "--prompt-len", input_alias, "--input", None),
        decode_steps=options.resolve(decode_steps, "--decode-steps", output_alias, "--output", None,
                                     convert=_output_to_steps, hint=" (--output N is --decode-steps N-1)"),
    )
    request = build_request(
        EstimateRequest, model=model, hardware=with_execution(hardware, execution, device), device_column=device,
        workload=workload,
        parallel=build_request(ParallelPlan, tensor_parallel=tensor_parallel, pipeline_parallel=pipeline_parallel,
                               expert_parallel=expert_parallel, data_parallel=data_parallel,
                               micro_batches=micro_batches, sequence_parallel=sequence_parallel,
                               two_batch_overlap=two_batch_overlap),
        cost_model=options.resolve(cost_model, "--cost-model", cost_alias, "--cost", "roofline"),
        attention=attention, layer=layer,
    )
    result = estimate(request, activity=activity)
    for warning in result.warnings:
        typer.echo(f"warning: {warning}", err=True)
    if csv_path is not None:
        write_ops_csv(result, csv_path)
    if as_json:
        from layerscope.cli.common import print_json

        print_json(result)
        return
    _render(result, None if all_ops else top, explain=explain)


def _output_to_steps(output_len: int) -> int:
    """``--output N`` (generated tokens) as decode steps: the first token comes from the prefill."""
    from layerscope.errors import WorkloadError

    if output_len < 1:
        raise WorkloadError(f"--output: {output_len} must be >= 1 (generated tokens)")
    return output_len - 1


#: Row ids shown per op in the ``--explain`` table (the rest counted).
_ROWS_SHOWN = 4


def _render(result: EstimateResult, top: int | None, *, explain: bool = False) -> None:
    from layerscope.cli.tables import emit

    emit(_blocks(result, top, explain=explain))


def _blocks(result: EstimateResult, top: int | None, *, explain: bool = False) -> list[Block]:
    """The text output: the header line, the ops table, (``explain``) the spec figures, the breakdowns, the totals."""
    from layerscope.cli.common import fmt_si, fmt_time_s
    from layerscope.cli.tables import Line, Styled, Table

    w = result.workload
    blocks: list[Block] = [Line(
        Styled(result.model, "bold"), " on ", Styled(result.hardware, "bold"),
        f" · {w.phase} · batch {w.batch} · cost model {result.cost_model} · {result.scope}")]
    ops = sorted(result.ops, key=lambda o: -o.time_s)
    shown = ops if top is None else ops[:top]
    t = Table(title=f"ops by time ({len(shown)} of {len(ops)})")
    columns = ["op", "phase", "kind", "class", "shapes", "FLOPs", "bytes", "time", "bound", "share"]
    numeric = {"FLOPs", "bytes", "time", "share", "compute eff", "memory eff", "overhead"}
    if explain:
        columns += ["compute eff", "memory eff", "overhead", "rows"]
    for col in columns:
        t.add_column(col, justify="right" if col in numeric else "left")
    for op in shown:
        shapes = " ".join("x".join(map(str, s)) for s in op.inputs[:2]) + " → " + " ".join(
            "x".join(map(str, s)) for s in op.outputs[:1])
        cells = [op.name, op.phase, op.kind, op.matrix_class, shapes, fmt_si(op.flops), fmt_si(op.bytes, "B"),
                 fmt_time_s(op.time_s), op.bound, f"{op.share:.1%}"]
        if explain:
            cells += [_fraction(op.compute_efficiency), _fraction(op.memory_efficiency), fmt_time_s(op.overhead_s),
                      _rows(result.row_ids(op))]
        t.add_row(*cells)
    blocks.append(t)
    if explain:
        blocks.append(_figures(result))
    groups = (("matrix_class", "by matrix class", result.by_matrix_class), ("kind", "by op kind", result.by_kind))
    for key, title, rows in groups:
        b = Table(title=title)
        for col in (key, "ops", "time", "share", "FLOPs", "bytes"):
            b.add_column(col)
        for row in rows:
            b.add_row(str(getattr(row, key)), str(row.ops), fmt_time_s(row.time_s), f"{row.share:.1%}",
                      fmt_si(row.flops), fmt_si(row.bytes, "B"))
        blocks.append(b)
    m = result.memory_bytes
    s = Table(title="totals")
    s.add_column("metric")
    s.add_column("value", justify="right")
    s.add_row("TTFT", fmt_time_s(result.ttft_s) if result.ttft_s is not None else "-")
    s.add_row("TPOT", fmt_time_s(result.tpot_s) if result.tpot_s is not None else "-")
    s.add_row("end to end", fmt_time_s(result.e2e_s))
    s.add_row("output tokens/s", f"{result.output_tokens_per_s:,.1f}")
    par = result.parallel
    if par.devices > 1 or par.micro_batches > 1:
        s.add_row("plan", f"{par.devices} GPUs: tp {par.tensor_parallel} · pp {par.pipeline_parallel} · ep "
                  f"{par.expert_parallel} · dp {par.data_parallel} · {par.micro_batches} micro-batches")
        s.add_row("output tokens/s per GPU", f"{par.output_tokens_per_s_per_device:,.1f}")
        for phase, ph in par.phases.items():
            s.add_row(f"{phase}: communication", f"{fmt_time_s(ph.communication_s)} ({ph.communication_share:.1%})")
            if ph.bubble_fraction is not None:
                s.add_row(f"{phase}: pipeline bubble", f"{ph.bubble_fraction:.1%}")
    s.add_row("parameters (total / active)",
              f"{fmt_si(result.parameters.total)} / {fmt_si(result.parameters.active)}")
    per = " per GPU" if par.devices > 1 else ""
    s.add_row(f"weights{per}", fmt_si(m.weights, "B"))
    s.add_row("KV cache", fmt_si(m.kv_cache, "B"))
    s.add_row("activations", fmt_si(m.activations, "B"))
    if m.communication:
        s.add_row("communication buffers", fmt_si(m.communication, "B"))
    s.add_row("memory total / capacity", f"{fmt_si(m.total, 'B')} / {fmt_si(result.memory_capacity_bytes, 'B')}")
    s.add_row("fits in memory", "yes" if result.fits_in_memory else Styled("no", "red"))
    energy = result.energy
    if energy is not None:
        on = f" ({energy.devices} GPUs)" if energy.devices > 1 else ""
        s.add_row(f"energy{on}", f"{energy.energy_j:,.4g} J")
        s.add_row("energy per output token", f"{energy.j_per_output_token:,.4g} J")
        s.add_row("output tokens per J", f"{energy.output_tokens_per_j:,.4g}")
        for phase, power in energy.phases.items():
            limited = f", power-limited: compute-bound ops x{power.clock_factor:.3f}" if power.power_limited else ""
            s.add_row(f"{phase}: power avg / peak per GPU",
                      f"{power.average_power_w:,.0f} W / {power.peak_power_w:,.0f} W (limit "
                      f"{energy.board_power_limit_w:,.0f} W{limited})")
        if energy.power_limited:
            s.add_row("end to end under the power limit", fmt_time_s(energy.e2e_s))
    blocks.append(s)
    return blocks


def _fraction(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def _rows(ids: list[str]) -> str:
    """Row ids, the first :data:`_ROWS_SHOWN` of them and how many more."""
    if not ids:
        return "-"
    more = len(ids) - _ROWS_SHOWN
    return ", ".join(ids[:_ROWS_SHOWN]) + (f" +{more}" if more > 0 else "")


def _figures(result: EstimateResult) -> Table:
    """The spec figures the ops used: value, term, rows and source (an uncited source in yellow)."""
    from layerscope.cli.tables import Styled, Table

    t = Table(title="spec figures behind the times (rows: data/gpu-kernels.md)")
    for col in ("figure", "value", "term", "rows", "source"):
        t.add_column(col, overflow="fold")
    for path, fig in result.figures.items():
        value = fig.value
        shown = (f"table of {len(value)}" if isinstance(value, list) else f"{value:.4g}"
                 if isinstance(value, float) else str(value))
        t.add_row(path, shown, fig.term, _rows(fig.row_ids), fig.source if fig.cited else Styled(fig.source, "yellow"))
    return t
