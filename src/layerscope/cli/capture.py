"""``layerscope capture``: run a real HF model under torch.profiler, every module annotated."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from layerscope.cli import options

if TYPE_CHECKING:
    from layerscope.app.capture import CaptureResult


def register(app: typer.Typer) -> None:
    app.command("capture")(capture_cmd)


def capture_cmd(
    model: str = options.model(..., help="Catalog name, HF id (local cache), config.json or checkpoint "
                               "directory."),
    layers: int | None = typer.Option(None, "--layers", help="Keep only the first N decoder layers."),
    dtype: str = typer.Option("bf16", "--dtype", help="fp32 | bf16 | fp16"),
    device: str = typer.Option("cpu", "--device", help="cpu | cuda"),
    batch: int = options.batch(),
    prompt_len: int = options.prompt_len(128, help="Prompt tokens of the prefill."),
    decode_steps: int = options.decode_steps(0, help="Greedy decode steps after the prefill."),
    warmup: int = typer.Option(1, "--warmup", help="Unrecorded warm-up iterations."),
    iterations: int = typer.Option(1, "--iterations", help="Recorded iterations."),
    cache: str = typer.Option("dynamic", "--cache", help="KV cache: dynamic | static"),
    random_weights: bool = typer.Option(False, "--random-weights", help="Random weights even if a checkpoint exists."),
    seed: int = typer.Option(0, "--seed", help="Seed of the random weights and prompt tokens."),
    out: Path | None = typer.Option(
        None, "--out", "-o", help="Trace file (.json.gz, or .json); default capture-<model>-<N>l.json.gz."
    ),
    open_ui: bool = typer.Option(False, "--open", help="Open the trace in ui.perfetto.dev."),
    top: int = typer.Option(30, "--top", min=1, help="Modules shown in the table (slowest first)."),
    as_json: bool = options.as_json("Print the capture result as one JSON object (docs/schema/capture.json)."),
) -> None:
    """Profile a Hugging Face causal LM (prefill + decode steps) and write an annotated trace."""
    from layerscope.app.capture import CaptureRequest, capture
    from layerscope.app.requests import build_request
    from layerscope.cli.common import quiet_third_party, step_progress
    from layerscope.errors import CaptureError

    request = build_request(
        CaptureRequest, CaptureError, model=model, layers=layers, dtype=dtype, device=device, batch=batch,
        prompt_len=prompt_len, decode_steps=decode_steps, warmup=warmup, iterations=iterations, cache=cache,
        random_weights=random_weights, out=out, seed=seed,
    )
    with quiet_third_party(), step_progress(not as_json, "capture") as progress:
        result = capture(request, progress=progress)
    if as_json:
        from layerscope.cli.common import print_json

        print_json(result)
    else:
        _render(result, top)
    if open_ui:
        _open(result.trace_path)


def _open(path: Path) -> None:
    try:
        serve = importlib.import_module("layerscope.trace.serve")
    except ModuleNotFoundError:
        typer.echo(f"open {path} in https://ui.perfetto.dev", err=True)
        return
    opener = getattr(serve, "open_in_perfetto", None) or getattr(serve, "serve", None)
    if opener is None:
        typer.echo(f"open {path} in https://ui.perfetto.dev", err=True)
        return
    opener(path)


def _render(result: CaptureResult, top: int) -> None:
    from rich.table import Table

    from layerscope.cli.common import console, esc, fmt_si, fmt_time_s

    def ms(value: float | None) -> str:
        return "-" if value is None else fmt_time_s(value / 1e3)

    con = console()
    con.print(
        f"[bold]{esc(result.model)}[/] ({esc(result.model_type)}) · {result.layers} of {result.total_layers} layers · "
        f"{result.weights} weights · {result.dtype} on {result.device} · batch {result.batch} · "
        f"prompt {result.prompt_len} · {result.decode_steps} decode steps · "
        f"{result.iterations} iteration(s) after {result.warmup} warm-up · {fmt_si(result.param_count)} params"
    )
    phases = Table(title="phases")
    for col in ("phase", "calls", "total", "mean"):
        phases.add_column(col, justify="left" if col == "phase" else "right")
    for p in result.phases:
        phases.add_row(esc(p.name), str(p.calls), ms(p.total_ms), ms(p.mean_ms))
    con.print(phases)
    records = sorted(result.summary, key=lambda r: -r.total_ms)
    shown = records[:top] if top > 0 else records
    table = Table(title=f"modules by time ({len(shown)} of {len(records)}; parents include children)")
    for col in ("module", "phase", "calls", "total", "mean", "device", "device busy", "input shapes",
                "output shapes"):
        table.add_column(col, justify="left" if col in ("module", "phase") or "shapes" in col else "right")
    for r in shown:
        table.add_row(
            esc(r.name), esc(r.phase), str(r.calls), ms(r.total_ms), ms(r.mean_ms), ms(r.device_ms),
            ms(r.device_busy_ms), _shapes(r.input_shapes), _shapes(r.output_shapes),
        )
    con.print(table)
    con.print(f"trace: {esc(result.trace_path)}")


def _shapes(shapes: list[list[int]]) -> str:
    return " ".join("x".join(map(str, s)) for s in shapes[:3]) + (" …" if len(shapes) > 3 else "")
