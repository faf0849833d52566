"""``layerscope simulate`` (ops on N engines → sweep table and Perfetto trace) and ``layerscope open``."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from layerscope.cli import options

if TYPE_CHECKING:
    from layerscope.app.simulate import SimulateResult
    from layerscope.model import ModelSpec


def register(app: typer.Typer) -> None:
    app.command("simulate")(simulate_cmd)
    app.command("open")(open_cmd)


def simulate_cmd(
    model: str = options.model(),
    hardware: str = options.hardware(),
    engines: str = typer.Option("4", "--engines", "-e", help="Engine count, 1..8, 1,2,4,8, or 'spec' (its cores)."),
    engine_mode: str = typer.Option("split", "--engine-mode", help="split: one chip divided into N engines; "
                                    "add: N engines of --engine-size each (how many does the work need?)."),
    engine_size: float | None = typer.Option(None, "--engine-size", help="add mode: each engine's share of the "
                                             "chip's compute (0.25 = a quarter)."),
    policy: str = typer.Option("list", "--policy", help="list | in-order"),
    phase: str = typer.Option("decode", "--phase", help="decode | prefill | chunked"),
    batch: int | None = options.batch(None),
    context: int | None = options.context(None),
    prompt_len: int | None = options.prompt_len(None, help="Prompt tokens per sequence (prefill) [default: 512]."),
    chunk: int | None = options.chunk(None),
    all_layers: bool = typer.Option(False, "--all-layers", help="The whole model, not one layer."),
    layers: int | None = typer.Option(None, "--layers",
                                      help="Keep only the first N decoder layers and simulate that model whole "
                                           "(embedding, N layers, final norm, lm_head), as capture --layers runs it."),
    decode_steps: int | None = options.decode_steps(None, help="Decode steps with a growing KV cache, as one graph."),
    layer: int = typer.Option(0, "--layer", help="Decoder layer simulated alone (default 0)."),
    attention: str = options.attention(),
    execution: str | None = options.execution(),
    weight_dtype: str = options.weight_dtype(),
    act_dtype: str = options.act_dtype(),
    kv_dtype: str = options.kv_dtype(),
    cost_model: str | None = options.cost_model(None),
    tensor_parallel: int = options.tensor_parallel(),
    pipeline_parallel: int = options.pipeline_parallel(),
    expert_parallel: int = options.expert_parallel(),
    data_parallel: int = options.data_parallel(),
    micro_batches: int = options.micro_batches(),
    sequence_parallel: bool = options.sequence_parallel(),
    two_batch_overlap: bool = options.two_batch_overlap(),
    no_shared_bandwidth: bool = typer.Option(False, "--no-shared-bandwidth",
                                             help="Every engine sees the full memory bandwidth."),
    out: Path | None = typer.Option(None, "--out", "-o", help="Trace to write: .json, .json.gz, .pftrace (with "
                                    "--tp/--pp/--dp over 1 GPU: one process per GPU, at most 64)"),
    open_ui: bool = typer.Option(False, "--open", help="Open the trace in ui.perfetto.dev (needs --out)."),
    as_json: bool = options.as_json("Print one JSON object (docs/schema/simulate.json)."),
    input_alias: int | None = options.alias("--input"),
    steps_alias: int | None = options.alias("--steps"),
    cost_alias: str | None = options.alias("--cost"),
) -> None:
    """Schedule a layer / model / decode steps on N compute engines sharing memory bandwidth."""
    from layerscope.app.requests import ParallelPlan, WorkloadRequest, build_request, with_execution
    from layerscope.app.simulate import SIMULATED_PHASES, SimulateRequest, result_of, run_simulation
    from layerscope.errors import OutputError

    if open_ui and out is None:
        raise OutputError("--open needs --out PATH (the trace to serve)")
    if out is not None and (not str(out).strip() or out.is_dir()):
        raise OutputError(f"--out {str(out)!r} is not a file name (empty or a directory); give one ending "
                          ".json, .json.gz or .pftrace")
    if layers is not None and layer != 0:
        from layerscope.errors import WorkloadError

        raise WorkloadError(f"--layer {layer} and --layers {layers}: --layers simulates the first N layers whole; "
                            "give one of them")
    if phase not in SIMULATED_PHASES:
        from layerscope.errors import ScheduleError

        raise ScheduleError(f"phase: {phase!r} cannot be simulated as one graph; known: {', '.join(SIMULATED_PHASES)} "
                            "(decode steps of a generation: --phase decode --decode-steps N)")
    workload = build_request(
        WorkloadRequest, phase=phase, batch=batch, context=context, chunk=chunk, weight_dtype=weight_dtype,
        act_dtype=act_dtype, kv_dtype=kv_dtype,
        prompt_len=options.resolve(prompt_len, "--prompt-len", input_alias, "--input", None),
        decode_steps=options.resolve(decode_steps, "--decode-steps", steps_alias, "--steps", None),
    )
    request = build_request(
        SimulateRequest, model=model if layers is None else _first_layers(model, layers),
        hardware=with_execution(hardware, execution),
        workload=workload, engines=engines, engine_mode=engine_mode, engine_size=engine_size, policy=policy,
        share_bandwidth=not no_shared_bandwidth,
        cost_model=options.resolve(cost_model, "--cost-model", cost_alias, "--cost", "roofline"),
        attention=attention, all_layers=all_layers or layers is not None, layer=layer, out=out,
        parallel=build_request(ParallelPlan, tensor_parallel=tensor_parallel, pipeline_parallel=pipeline_parallel,
                               expert_parallel=expert_parallel, data_parallel=data_parallel,
                               micro_batches=micro_batches, sequence_parallel=sequence_parallel,
                               two_batch_overlap=two_batch_overlap),
    )
    result = result_of(run_simulation(request))
    if as_json:
        from layerscope.cli.common import print_json

        print_json(result)
    else:
        _render(result, request.parallel.devices)
    if open_ui and result.trace is not None:
        _open(Path(result.trace))


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


def _render(result: SimulateResult, gpus: int = 1) -> None:
    from rich.table import Table

    from layerscope.cli.common import console, esc, fmt_time_s

    con = console()
    s = result.schedule
    con.print(
        f"[bold]{esc(result.model)}[/] on [bold]{esc(result.hardware)}[/] · {esc(result.graph)} · "
        f"{result.ops} ops · cost {esc(result.cost_model)} · policy {esc(result.policy)} · "
        f"bandwidth {'shared' if result.share_bandwidth else 'per engine'}"
    )
    t = Table(title="engine sweep" if len(result.sweep) > 1 else "schedule")
    for col in ("engines", "makespan", "speedup", "engine util", "bandwidth util", "bound"):
        t.add_column(col, justify="right")
    for row in result.sweep:
        mark = " ◀" if row.engines == result.engines_used else ""
        t.add_row(f"{row.engines}{mark}", fmt_time_s(row.makespan_ns / 1e9), f"{row.speedup:.2f}x",
                  f"{row.engine_utilization:.1%}", f"{row.bandwidth_utilization:.1%}", row.bound)
    con.print(t)
    con.print(f"engines used: {result.engines_used} (smallest count within 2% of the best makespan)")
    if result.curve:
        con.print(esc(result.curve))
    if result.cluster is not None:
        c = result.cluster
        batches = f"{c.micro_batches} micro-batch{'es' if c.micro_batches > 1 else ''}"
        con.print(f"pipeline: {c.gpus} GPUs, {batches}, makespan {fmt_time_s(c.makespan_ns / 1e9)}, bubble by stage "
                  + ", ".join(f"{b:.1%}" for b in c.bubble))
    if result.trace is not None:
        con.print(f"trace: {esc(result.trace)} ({s.engines} engines)" if gpus == 1 else
                  f"trace: {esc(result.trace)} ({gpus} GPUs, one process each, {s.engines} engines each)")
