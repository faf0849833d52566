"""``layerscope validate``: capture a model here, estimate and simulate the same workload, join op by op."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from layerscope.cli import options

if TYPE_CHECKING:
    from layerscope.app.validate import PhaseResult, ProbeRow, ValidateResult


def register(app: typer.Typer) -> None:
    app.command("validate")(validate_cmd)


def validate_cmd(
    model: str = options.model(..., help="Catalog name, HF id (local cache), config.json or checkpoint."),  # required
    hardware: str = options.hardware("measure", help="Preset name or spec file; 'measure' measures this machine "
                                                     "(a few seconds)."),
    layers: int | None = typer.Option(None, "--layers", help="Keep only the first N decoder layers."),
    dtype: str = typer.Option("fp32", "--dtype", help="fp32 | bf16 | fp16"),
    batch: int = options.batch(),
    prompt_len: int | None = options.prompt_len(None, help="Prefill tokens [default: 128]."),
    context: int | None = typer.Option(None, "--context",
                                       help="Decode context: the prompt prefilled before the decode steps "
                                            "(same as --prompt-len)."),
    decode_steps: int = options.decode_steps(0, help="Decode steps validated after the prefill."),
    warmup: int = typer.Option(2, "--warmup", help="Unrecorded warm-up iterations."),
    iterations: int = typer.Option(3, "--iterations", help="Recorded iterations (times are their mean)."),
    cost_model: str = options.cost_model(),
    device: str = typer.Option("cpu", "--device", help="cpu | cuda"),
    random_weights: bool = typer.Option(False, "--random-weights", help="Random weights even if a checkpoint exists."),
    out: Path = typer.Option(Path("out/validate"), "--out", "-o", help="Directory for the traces and validation.json."),
    top: int = typer.Option(40, "--top", min=1, help="Op rows shown per phase (largest measured first)."),
    raw_times: bool = typer.Option(False, "--raw-times",
                                   help="Keep the annotation hooks' and the profiler's own time in the measured "
                                        "times (not subtracted)."),
    profiled_times: bool = typer.Option(False, "--profiled-times",
                                        help="Measure from the profiled trace, less an estimated profiler cost per "
                                             "aten event, instead of timing the iterations again without the "
                                             "profiler (CPU; saves that pass's time)."),
    repeats: int = typer.Option(1, "--repeats",
                                help="Captures of the workload; > 1 reports the median of their joins "
                                     "(captures on a shared machine differ by 10%+)."),
    probe: bool = typer.Option(True, "--probe/--no-probe",
                               help="Time a few reference GEMMs before and after each capture and divide them by "
                                    "the spec's prediction: whether the machine ran as the spec describes it."),
    threads: str = typer.Option("auto", "--threads",
                                help="torch intra-op threads on the CPU; auto: as many as other processes leave a "
                                     "free core."),
    wait_quiet: float = typer.Option(10.0, "--wait-quiet",
                                     help="Seconds measuring this machine (--hardware measure) may wait for a busy "
                                          "machine to quieten."),
    as_json: bool = options.as_json("Print one JSON object (docs/schema/validate.json)."),
) -> None:
    """Predicted vs measured time per op, per kind and per forward, on this device."""
    from layerscope.app.requests import build_request
    from layerscope.app.validate import ValidateRequest, result_of, run_validation
    from layerscope.cli.common import parse_threads, quiet_third_party, step_progress
    from layerscope.errors import AnalysisError, WorkloadError

    if prompt_len is not None and context is not None and prompt_len != context:
        raise WorkloadError(f"--prompt-len {prompt_len} and --context {context} disagree: decode runs over the "
                            "prefilled prompt; give one of them")
    tokens = prompt_len if prompt_len is not None else context if context is not None else 128
    request = build_request(
        ValidateRequest, error=AnalysisError, model=model, hardware=hardware, layers=layers, dtype=dtype, batch=batch,
        prompt_len=tokens, decode_steps=decode_steps, warmup=warmup, iterations=iterations, cost_model=cost_model,
        device=device, random_weights=random_weights, out_dir=out, correct_instrumentation=not raw_times,
        repeats=repeats, unprofiled=not profiled_times, probe=probe, max_wait_s=wait_quiet,
        threads=parse_threads(threads))
    with quiet_third_party(), step_progress(not as_json, "validate") as progress:
        result = result_of(run_validation(request, progress=progress))
    if as_json:
        from layerscope.cli.common import print_json

        print_json(result)
        return
    _render(result, top=top, repeats=repeats)


def _render(result: ValidateResult, *, top: int, repeats: int) -> None:
    from layerscope.cli.common import console, esc

    con = console()
    con.print(f"[bold]{esc(result.model)}[/] · {result.layers} layer(s) · {result.dtype} on {result.device} "
              f"({result.threads} threads) · batch {result.batch} · prompt {result.prompt_len} · "
              f"{result.decode_steps} decode steps · {result.iterations} iteration(s) · "
              f"hardware {esc(result.hardware)} · cost model {esc(result.cost_model)}")
    if repeats > 1:
        con.print(f"Measured times are medians of {repeats} captures.")
    for phase in result.phases:
        render_phase(con, phase, top=top)
    if result.machine_probes:
        render_probes(con, result.machine_probes)
    render_machine_state(con, result)
    con.print("Traces: " + esc(", ".join(f"{k} {v}" for k, v in result.traces.items())))


def _pct(x: float | None) -> str:
    return "-" if x is None or x != x else f"{x:+.0%}"


def render_phase(con: Any, phase: PhaseResult, *, top: int = 40, title: str | None = None) -> None:
    """Rich tables of one phase of a validation (:class:`~layerscope.app.validate.PhaseResult`): per op, per kind,
    the whole forward and the unmatched ops."""
    from rich.table import Table

    from layerscope.cli.common import ERROR_SIGN, esc, fmt_time_s

    t = Table(title=title or f"{phase.phase}: predicted vs measured, per op (per iteration)", caption=ERROR_SIGN)
    for col in ("op", "kind", "rule", "predicted", "measured", "error"):
        t.add_column(col, justify="left" if col in ("op", "kind", "rule") else "right")
    rows = sorted(phase.ops, key=lambda r: -r.measured_s)
    for r in rows[:top]:
        t.add_row(esc(r.name), esc(r.kind), esc(r.rule), fmt_time_s(r.predicted_s), fmt_time_s(r.measured_s),
                  _pct(r.error))
    if len(rows) > top:
        t.caption = f"{ERROR_SIGN}; {len(rows) - top} more rows in --json"
    con.print(t)
    k = Table(title=f"{phase.phase}: per kind", caption=ERROR_SIGN)
    for col in ("kind", "rows", "predicted", "measured", "error"):
        k.add_column(col, justify="left" if col == "kind" else "right")
    for g in phase.by_kind:
        k.add_row(esc(g.kind), str(g.rows), fmt_time_s(g.predicted_s), fmt_time_s(g.measured_s), _pct(g.error))
    con.print(k)
    f = phase.forward
    med = "-" if phase.median_abs_error is None else f"{phase.median_abs_error:.0%}"
    p90 = "-" if phase.p90_abs_error is None else f"{phase.p90_abs_error:.0%}"
    con.print(f"[bold]{phase.phase} forward[/]: predicted {fmt_time_s(f.predicted_s)}, measured "
              f"{fmt_time_s(f.measured_s)}, error {_pct(f.error)}; per-op median |error| {med}, p90 {p90} "
              f"over {phase.ops_joined} ops")
    if phase.repeats > 1 and phase.forward_measured_all_s:
        times, spread = phase.forward_measured_all_s, phase.forward_spread
        con.print(f"  forward measured over {phase.repeats} captures: {fmt_time_s(min(times))} – "
                  f"{fmt_time_s(max(times))}" + ("" if spread is None else f" (spread {spread:.1%} of the median)"))
    if phase.call_overhead_s > 0:
        con.print(f"  instrumentation subtracted: {fmt_time_s(phase.call_overhead_s)} per module call "
                  f"(smallest median gap between sibling ranges), {fmt_time_s(phase.instrumentation_s)} in all")
    if phase.timing == "unprofiled":
        con.print(f"  measured without the profiler (the iterations run again, each module call timed whole); "
                  f"the profiled trace adds {fmt_time_s(phase.profiler_s)} to the forward")
    if phase.event_overhead_s > 0:
        con.print(f"  profiler bookkeeping subtracted: {fmt_time_s(phase.event_overhead_s)} per aten event "
                  f"(hot A/B before the run: a lower bound), "
                  f"{fmt_time_s(phase.profiler_s)} in all")
    if len(phase.steps) > 1:
        con.print("  steps: " + esc(", ".join(f"{s.name} {_pct(s.error)}" for s in phase.steps)))
    for u in phase.only_predicted_ops:
        con.print(f"  only predicted: {esc(u.name)} ({fmt_time_s(u.time_s)}): {esc(u.note)}")
    for u in phase.only_measured_ops:
        con.print(f"  only measured: {esc(u.name)} ({fmt_time_s(u.time_s)}): {esc(u.note)}")


def render_machine_state(con: Any, result: ValidateResult) -> None:
    """How the threads were chosen, how the machine was measured and how busy it was during the captures."""
    from layerscope.cli.common import esc

    if result.thread_choice is not None:
        con.print(f"threads: {esc(result.thread_choice.describe())}")
    m = result.machine_measurement
    if m is not None:
        busy = "unknown" if m.load is None else f"{m.load.busy_cores:.1f} of {m.load.cores} cores"
        gemm_spread = m.spread.get("gemm_fp32")
        con.print(f"machine measured in {m.rounds} rounds (best of each figure; GEMM spread "
                  f"{float('nan') if gemm_spread is None else gemm_spread:.0%}); other processes' load {busy}"
                  + (f"; waited {m.waited_s:.0f} s for quiet" if m.waited_s else "")
                  + ("; [yellow]busy: our threads were short of cores[/]" if m.busy else ""))
    for i, row in enumerate(result.capture_loads, start=1):
        if row is None:
            continue
        load = row.to_load()
        over = load.oversubscribed_cores(result.threads)
        con.print(f"capture {i}: other processes' load {load.busy_cores:.1f} of {load.cores} cores"
                  + (f"; [yellow]busy: our {result.threads} threads were {over:.1f} cores short, measured times "
                     "are inflated[/]" if load.is_busy_for(result.threads) else ""))


def render_probes(con: Any, probes: list[ProbeRow]) -> None:
    """The machine check: one row per probe call, one column per moment, measured / predicted."""
    from rich.table import Table

    from layerscope.cli.common import fmt_time_s

    table = Table(title="machine check: measured / predicted by the spec (F.linear over cold weights, m x n x k)")
    table.add_column("call")
    table.add_column("predicted", justify="right")
    for p in probes:
        table.add_column(p.label, justify="right")
    for i, reading in enumerate(probes[0].readings):
        table.add_row(f"{reading.label} {reading.dtype}", fmt_time_s(reading.predicted_s),
                      *(_ratio(p.readings[i].ratio) for p in probes))
    con.print(table)


def _ratio(x: float | None) -> str:
    return f"{float('nan') if x is None else x:.2f}"
