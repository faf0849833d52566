"""``layerscope demo``: the main job on the bundled default (no downloads)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from layerscope.cli import options

if TYPE_CHECKING:
    from layerscope.app.demo import DemoRequest, DemoResult


def register(app: typer.Typer) -> None:
    app.command("demo")(demo_cmd)


def demo_cmd(
    out: Path = typer.Option(Path("out/demo"), "--out", "-o", help="Directory for the traces and the measured spec."),
    model: str = options.model(help="Catalog name, HF id or config.json."),
    prompt_len: int = options.prompt_len(256, help="Prefill tokens."),
    engines: int = typer.Option(4, "--engines", "-e", help="Engines of the overlap simulation."),
    iterations: int = typer.Option(3, "--iterations", help="Recorded capture iterations."),
    hardware: str | None = options.hardware(None, help="Time on this spec instead of this machine's calibrated or "
                                                       "measured one."),
    threads: str = typer.Option("auto", "--threads",
                                help="torch intra-op threads; auto: as many as other processes leave a free core."),
    wait_quiet: float = typer.Option(10.0, "--wait-quiet",
                                     help="Seconds the measurement may wait for a busy machine to quieten."),
    remeasure: bool = typer.Option(False, "--remeasure",
                                   help="Measure this machine even when `calibrate` or an earlier demo kept a spec "
                                        "for it."),
    as_json: bool = options.as_json("Print one JSON object (docs/schema/demo.json)."),
) -> None:
    """Estimate, simulate on N engines, capture on this machine and compare one decoder layer, then say what
    the numbers mean.

    The hardware is, in order: --hardware; the spec `layerscope calibrate` saved for this CPU and thread count
    (in $LAYERSCOPE_MACHINES_DIR, default ~/.cache/layerscope/machines); the quick measurement an earlier demo kept
    there; a measurement taken now in rounds (kept there when the machine was not busy)."""
    from layerscope.app.demo import DemoRequest, demo
    from layerscope.app.requests import build_request
    from layerscope.cli.common import parse_threads, quiet_third_party, step_progress

    request = build_request(DemoRequest, out_dir=out, model=model, prompt_len=prompt_len, engines=engines,
                            iterations=iterations, hardware=hardware, threads=parse_threads(threads),
                            max_wait_s=wait_quiet, use_saved=not remeasure)
    with quiet_third_party(), step_progress(not as_json, "demo") as progress:
        result = demo(request, progress=progress)
    if as_json:
        from layerscope.cli.common import print_json

        print_json(result)
        return
    _render(result, request)


def _render(r: DemoResult, request: DemoRequest) -> None:
    from layerscope.cli.common import console, esc, fmt_time_s

    con = console()
    con.print(f"[bold]1. hardware[/] ({r.hardware_source}): {esc(r.hardware)}"
              + (f" → {esc(r.hardware_spec)}" if r.hardware_spec else ""))
    n1, nn = r.simulated_1_engine, r.simulated_n_engines
    con.print(f"[bold]2. estimate[/] {esc(n1.model)} {esc(r.estimate.scope)}, prefill "
              f"{request.prompt_len} tokens: {fmt_time_s(r.estimate.ttft_s or 0.0)} over {r.estimate.ops} ops")
    con.print(f"[bold]3. simulate[/]: 1 engine {fmt_time_s(n1.schedule.makespan_ns / 1e9)} → {esc(n1.trace)}; "
              f"{nn.sweep[-1].engines} engines {fmt_time_s(nn.schedule.makespan_ns / 1e9)} → "
              f"{esc(nn.trace)}")
    if len(nn.sweep) == 1:
        n_row = nn.sweep[-1]
        slower = nn.schedule.makespan_ns > n1.schedule.makespan_ns
        con.print(f"   {n_row.engines} engines split this chip's compute ({1 / n_row.engines:.3g} of it each), the "
                  f"bandwidth shared: {n_row.bound}-bound"
                  + ("; slower than 1 engine because the ops that cannot overlap run on a smaller engine"
                     if slower else "")
                  + " (`layerscope simulate --engine-mode add` adds engines of a fixed size instead)")
    cap = r.captured
    if cap is not None:
        con.print(f"[bold]4. capture[/]: {esc(cap['trace_path'])} ({cap['weights']} weights, "
                  f"{cap['layers']} layer, {cap['iterations']} iterations)")
    if r.comparison is not None:
        from layerscope.cli.validate import render_phase

        render_phase(con, r.comparison, title="5. predicted (1 engine) vs measured, per op")
    for note in r.notes:
        con.print(f"[yellow]note[/]: {esc(note)}")
    con.print("[bold]What this means[/]")
    for line in r.verdict:
        con.print("• " + esc(line))
    _render_files(con, r)


def _render_files(con: Any, r: DemoResult) -> None:
    """The closing lines: every file written, what it holds, and what to open."""
    from rich.table import Table

    from layerscope.cli.common import text

    files = Table.grid(padding=(0, 2))
    for f in r.files:
        files.add_row(text(f"  {f.path}"), text(f.what))
    con.print(f"[bold]Files written[/] ({len(r.files)})")
    con.print(files)
    con.print("[bold]Open[/]")
    for o in r.open:
        con.print(text(f"  {o.what}: {o.command}"), soft_wrap=True)
