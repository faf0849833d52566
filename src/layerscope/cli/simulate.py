"""``layerscope simulate`` (ops on N engines → sweep table and Perfetto trace) and ``layerscope open``."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

if TYPE_CHECKING:
    from layerscope.model import ModelSpec


def register(app: typer.Typer) -> None:
    app.command("simulate")(simulate_cmd)
    app.command("open")(open_cmd)


def simulate_cmd(
    model: str = typer.Option("llama-3.2-1b", "--model", "-m", help="Catalog name, HF id, config.json or directory."),
    hardware: str = typer.Option("h100-sxm", "--hardware", "-H", help="Preset name or YAML/JSON/CSV/XLSX file."),
    engines: str = typer.Option("4", "--engines", "-e", help="Engine count, 1..8, 1,2,4,8, or 'spec' (its cores)."),
    policy: str = typer.Option("list", "--policy", help="list | in-order"),
    phase: str = typer.Option("decode", "--phase", help="decode | prefill | chunked"),
    batch: int | None = typer.Option(None, "--batch", "-b", help="Sequences per pass."),
    context: int | None = typer.Option(None, "--context", help="Cached tokens per decode sequence (1024)."),
    input_len: int | None = typer.Option(None, "--input", help="Prompt tokens (prefill)."),
    chunk: int | None = typer.Option(None, "--chunk", help="Prompt tokens per chunked-prefill pass."),
    all_layers: bool = typer.Option(False, "--all-layers", help="The whole model, not one layer."),
    layers: int | None = typer.Option(None, "--layers",
                                      help="Keep only the first N decoder layers and simulate that model whole "
                                           "(embedding, N layers, final norm, lm_head), as capture --layers runs it."),
    steps: int | None = typer.Option(None, "--steps", help="Decode steps with a growing KV cache."),
    layer: int = typer.Option(0, "--layer", help="Decoder layer simulated alone (default 0)."),
    attention: str = typer.Option("unfused", "--attention", help="unfused (QKᵀ, softmax, PV ops) | fused"),
    weight_dtype: str = typer.Option("bf16", "--weight-dtype"),
    act_dtype: str = typer.Option("bf16", "--act-dtype"),
    kv_dtype: str = typer.Option("bf16", "--kv-dtype"),
    cost: str = typer.Option("roofline", "--cost", help="Cost model: roofline | tiling | hierarchical"),
    no_shared_bandwidth: bool = typer.Option(False, "--no-shared-bandwidth",
                                             help="Every engine sees the full memory bandwidth."),
    out: Path | None = typer.Option(None, "--out", "-o", help="Trace to write: .json, .json.gz, .pftrace"),
    open_ui: bool = typer.Option(False, "--open", help="Open the trace in ui.perfetto.dev (needs --out)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Schedule a layer / model / decode steps on N compute engines sharing memory bandwidth."""
    from layerscope.errors import OutputError
    from layerscope.trace.simulate import simulate

    if open_ui and out is None:
        raise OutputError("--open needs --out PATH (the trace to serve)")
    if out is not None and (not str(out).strip() or out.is_dir()):
        raise OutputError(f"--out {str(out)!r} is not a file name (empty or a directory); give one ending "
                          ".json, .json.gz or .pftrace")
    if attention not in ("fused", "unfused"):
        from layerscope.errors import GraphError

        raise GraphError(f"--attention: {attention!r}; known: fused, unfused")
    if layers is not None and layer != 0:
        from layerscope.errors import WorkloadError

        raise WorkloadError(f"--layer {layer} and --layers {layers}: --layers simulates the first N layers whole; "
                            "give one of them")
    result = simulate(
        model if layers is None else _first_layers(model, layers), hardware, engines=engines, policy=policy,
        share_bandwidth=not no_shared_bandwidth, cost_model=cost, phase=phase, batch=batch, context=context,
        input_len=input_len, chunk=chunk, all_layers=all_layers or layers is not None, steps=steps, layer=layer,
        attention=attention,  # type: ignore[arg-type]
        weight_dtype=weight_dtype, act_dtype=act_dtype, kv_dtype=kv_dtype, out=out,
    )
    if as_json:
        from layerscope.cli.common import print_json

        print_json(result.to_dict())
    else:
        _render(result)
    if open_ui and result.trace_path is not None:
        _open(result.trace_path)


def _first_layers(model: str, layers: int) -> ModelSpec:
    """The spec of ``model`` cut to its first ``layers`` decoder layers, as ``capture --layers`` builds it
    (its quantization kept, as simulate reads a whole model)."""
    from layerscope.capture.build import prepare_config
    from layerscope.capture.source import resolve_model
    from layerscope.model import model_spec_from_dict

    source = resolve_model(model)
    return model_spec_from_dict(prepare_config(source.config, layers=layers, keep_quantization=True), source.name)


def open_cmd(
    trace: Path = typer.Argument(..., help="Trace file to open in ui.perfetto.dev."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object: what is served, where (path, "
                                 "bytes, url, port, ui_url), as soon as it is served."),
    no_browser: bool = typer.Option(False, "--no-browser", help="Do not start a browser; open ui_url yourself."),
    timeout_s: float | None = typer.Option(None, "--timeout", help="Stop serving after this many seconds "
                                           "(exit 1 if the trace was not fetched). Default: until fetched."),
) -> None:
    """Serve TRACE once from 127.0.0.1 and open it in ui.perfetto.dev.

    Exit 0 once the UI fetched the trace; 1 if --timeout passed first; 130 on Ctrl-C."""
    from layerscope.errors import TraceError

    if timeout_s is not None and not (math.isfinite(timeout_s) and timeout_s > 0):
        raise TraceError(f"--timeout: {timeout_s!r} is not allowed; give seconds, a finite number > 0")
    if not _open(trace, as_json=as_json, browser=not no_browser, timeout_s=timeout_s):
        raise typer.Exit(1)


def _open(path: Path, *, as_json: bool = False, browser: bool = True, timeout_s: float | None = None) -> bool:
    """Serve ``path`` to the Perfetto UI until it was fetched (True) or ``timeout_s`` passed (False)."""
    from layerscope.trace.serve import TraceServer, open_in_perfetto

    def ready(server: TraceServer) -> None:
        if as_json:
            from layerscope.cli.common import print_json

            print_json(server.describe())  # flushed: a script reads the URL while the file is served
        typer.echo(f"Serving {path} once for ui.perfetto.dev (Ctrl-C to stop):\n  {server.ui_url}", err=True)

    url, fetched = open_in_perfetto(path, on_ready=ready, timeout_s=timeout_s,
                                    open_browser=None if browser else (lambda _url: False))
    typer.echo("trace sent to the Perfetto UI" if fetched else f"not fetched; open {url}", err=True)
    return fetched


def _render(result: Any) -> None:
    from rich.table import Table

    from layerscope.cli.common import console, esc, fmt_time_s

    con = console()
    s = result.schedule
    con.print(
        f"[bold]{esc(result.model)}[/] on [bold]{esc(result.hardware)}[/] · {esc(result.problem.name)} · "
        f"{result.problem.n} ops · cost {esc(result.timed.cost_model)} · policy {esc(s.policy)} · "
        f"bandwidth {'shared' if s.share_bandwidth else 'per engine'}"
    )
    t = Table(title="engine sweep" if len(result.sweep.rows) > 1 else "schedule")
    for col in ("engines", "makespan", "speedup", "engine util", "bandwidth util"):
        t.add_column(col, justify="right")
    for row in result.sweep.rows:
        mark = " ◀" if row["engines"] == result.sweep.engines_used else ""
        t.add_row(f"{row['engines']}{mark}", fmt_time_s(row["makespan_ns"] / 1e9), f"{row['speedup']:.2f}x",
                  f"{row['engine_utilization']:.1%}", f"{row['bandwidth_utilization']:.1%}")
    con.print(t)
    con.print(f"engines used: {result.sweep.engines_used} (smallest count within 2% of the best makespan)")
    if result.trace_path is not None:
        con.print(f"trace: {esc(result.trace_path)} ({s.engines.count} engines)")
