"""``layerscope demo``: the main job on the bundled default (no downloads)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer


def register(app: typer.Typer) -> None:
    app.command("demo")(demo_cmd)


def demo_cmd(
    out: Path = typer.Option(Path("out/demo"), "--out", "-o", help="Directory for the traces and the measured spec."),
    model: str = typer.Option("llama-3.2-1b", "--model", "-m", help="Catalog name, HF id or config.json."),
    prompt_len: int = typer.Option(256, "--prompt-len", help="Prefill tokens."),
    engines: int = typer.Option(4, "--engines", "-e", help="Engines of the overlap simulation."),
    iterations: int = typer.Option(3, "--iterations", help="Recorded capture iterations."),
    hardware: str | None = typer.Option(None, "--hardware", "-H",
                                        help="Time on this spec instead of this machine's calibrated or measured one."),
    threads: str = typer.Option("auto", "--threads",
                                help="torch intra-op threads; auto: as many as other processes leave a free core."),
    wait_quiet: float = typer.Option(10.0, "--wait-quiet",
                                     help="Seconds the measurement may wait for a busy machine to quieten."),
    remeasure: bool = typer.Option(False, "--remeasure",
                                   help="Measure this machine even when `calibrate` or an earlier demo kept a spec "
                                        "for it."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Estimate, simulate on N engines, capture on this machine and compare one decoder layer, then say what
    the numbers mean.

    The hardware is, in order: --hardware; the spec `layerscope calibrate` saved for this CPU and thread count
    (in $LAYERSCOPE_MACHINES_DIR, default ~/.cache/layerscope/machines); the quick measurement an earlier demo kept
    there; a measurement taken now in rounds (kept there when the machine was not busy)."""
    from layerscope.analysis.demo import run_demo
    from layerscope.cli.common import parse_threads

    result = run_demo(out, model=model, prompt_len=prompt_len, engines=engines, iterations=iterations,
                      hardware=hardware, threads=parse_threads(threads), max_wait_s=wait_quiet,
                      use_saved=not remeasure)
    if as_json:
        from layerscope.cli.common import print_json

        print_json(result.to_dict())
        return
    _render(result)


def _render(r: Any) -> None:
    from layerscope.cli.common import console, esc, fmt_time_s

    con = console()
    hw = r.hardware
    con.print(f"[bold]1. hardware[/] ({r.hardware_source}): {esc(hw.name)}"
              + (f" → {esc(r.hardware_path)}" if r.hardware_path else ""))
    con.print(f"[bold]2. estimate[/] {esc(r.estimate.model)} {esc(r.estimate.scope)}, prefill "
              f"{r.estimate.workload.input_len} tokens: {fmt_time_s(r.estimate.ttft_s)} over {len(r.estimate.ops)} ops")
    n1, nn = r.simulated_1, r.simulated_n
    con.print(f"[bold]3. simulate[/]: 1 engine {fmt_time_s(n1.schedule.makespan_ns / 1e9)} → {esc(n1.trace_path)}; "
              f"{nn.sweep.rows[-1]['engines']} engines {fmt_time_s(nn.schedule.makespan_ns / 1e9)} → "
              f"{esc(nn.trace_path)}")
    if r.capture is not None:
        con.print(f"[bold]4. capture[/]: {esc(r.capture.trace_path)} ({r.capture.weights} weights, "
                  f"{r.capture.layers} layer, {r.capture.iterations} iterations)")
    if r.comparison is not None:
        from layerscope.cli.validate import render_phase

        render_phase(con, r.comparison, title="5. predicted (1 engine) vs measured, per op")
    for note in r.notes:
        con.print(f"[yellow]note[/]: {esc(note)}")
    con.print("[bold]What this means[/]")
    for line in r.verdict:
        con.print("• " + esc(line))
