"""``layerscope serving``: a request stream served by engines under a batching policy (issue #29)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from layerscope.cli import options

if TYPE_CHECKING:
    from layerscope.app.serving import MaxRateResult, ServeResult


def register(app: typer.Typer) -> None:
    app.command("serving")(serving_cmd)
    app.command("serving-grid")(grid_cmd)


def serving_cmd(
    model: str = options.model("llama-3.1-8b"),
    hardware: str = options.hardware(),
    rate: float | None = typer.Option(None, "--rate", help="Arrivals per second (poisson, gamma); inf: all at t=0."),
    arrival: str = typer.Option("poisson", "--arrival", help="poisson | gamma | closed-loop | file"),
    cv: float = typer.Option(1.0, "--cv", help="Coefficient of variation of gamma inter-arrival gaps."),
    users: int | None = typer.Option(None, "--users", help="Concurrent users of a closed loop."),
    think_s: float = typer.Option(0.0, "--think-s", help="Closed loop: seconds between a user's requests."),
    requests_file: Path | None = typer.Option(None, "--requests-file",
                                              help="CSV/JSONL of arrival_s, prompt_len, output_len (--arrival file)."),
    requests: int = typer.Option(1000, "--requests", "-n", help="Requests to simulate."),
    prompt_len: float = typer.Option(512, "--prompt-len", help="Prompt tokens (the mean of --prompt-dist)."),
    output_len: float = typer.Option(128, "--output-len", help="Output tokens (the mean of --output-dist)."),
    prompt_dist: str = typer.Option("fixed", "--prompt-dist", help="fixed | uniform | lognormal"),
    output_dist: str = typer.Option("fixed", "--output-dist", help="fixed | uniform | lognormal"),
    mix: str | None = typer.Option(None, "--mix", help="chat | summarization | long-context (replaces lengths)."),
    seed: int = typer.Option(0, "--seed", help="Seed of every random draw."),
    scheduler: str = typer.Option("vllm", "--scheduler", help="static | vllm | sarathi | disaggregated"),
    max_num_seqs: int = typer.Option(256, "--max-num-seqs", help="Most requests running per engine."),
    max_num_batched_tokens: int = typer.Option(8192, "--max-num-batched-tokens", help="Token budget of a step."),
    no_chunked_prefill: bool = typer.Option(False, "--no-chunked-prefill", help="Whole prompts in one step."),
    priority: str = typer.Option("prefill-first", "--priority", help="prefill-first | decode-first"),
    block_tokens: int = typer.Option(16, "--block-tokens", help="Tokens per KV-cache block."),
    preemption: str = typer.Option("recompute", "--preemption", help="recompute | swap"),
    prefix_hit_rate: float = typer.Option(0.0, "--prefix-hit-rate", help="Share of each prompt in the prefix cache."),
    prefill_replicas: int = typer.Option(1, "--prefill-replicas", help="Prefill engines (disaggregated)."),
    decode_replicas: int = typer.Option(1, "--decode-replicas", help="Decode engines (disaggregated)."),
    static_batch: int = typer.Option(8, "--static-batch", help="Requests per batch (static)."),
    replicas: int = typer.Option(1, "--replicas", help="Engines, each a copy of the plan."),
    tensor_parallel: int = options.tensor_parallel(),
    pipeline_parallel: int = options.pipeline_parallel(),
    expert_parallel: int = options.expert_parallel(),
    data_parallel: int = options.data_parallel(),
    weight_dtype: str = options.weight_dtype(),
    act_dtype: str = options.act_dtype(),
    kv_dtype: str = options.kv_dtype(),
    execution: str | None = options.execution(),
    gpu_memory_utilization: float = typer.Option(0.9, "--gpu-memory-utilization", help="Share of GPU memory used."),
    timer: str = typer.Option("fast", "--timer", help="fast (interpolated step tables) | exact"),
    slo: str | None = typer.Option(None, "--slo", help="Goodput limits, e.g. ttft=200ms,tpot=50ms."),
    find_max_rate: bool = typer.Option(False, "--find-max-rate",
                                       help="Bisect the arrival rate for the largest meeting --slo."),
    slo_attainment: float = typer.Option(0.9, "--slo-attainment",
                                         help="Share of requests that must meet the SLO (--find-max-rate)."),
    out: Path | None = typer.Option(None, "--out", "-o", help="Trace to write (.json or .json.gz)."),
    requests_out: Path | None = typer.Option(None, "--requests-out", help="Per-request table (.csv or .parquet)."),
    as_json: bool = options.as_json("Print one JSON object (docs/schema/serving.json)."),
) -> None:
    """Simulate serving traffic: TTFT, TPOT, ITL and E2E percentiles, throughput and goodput under an SLO."""
    from layerscope.app.requests import ParallelPlan, build_request
    from layerscope.cli.common import progress_bar
    from layerscope.serving import (
        LengthSpec,
        SchedulerSpec,
        ServingError,
        ServingRequest,
        TrafficSpec,
        parse_slo,
    )

    def length(dist: str, mean: float) -> Any:
        low_high: dict[str, Any] = {"low": 1, "high": max(1, int(2 * mean) - 1)} if dist == "uniform" else {}
        return build_request(LengthSpec, ServingError, dist=dist, mean=mean, **low_high)

    traffic = build_request(
        TrafficSpec, ServingError, arrival=arrival, rate_per_s=rate, cv=cv, users=users, think_s=think_s,
        requests=requests, prompt=length(prompt_dist, prompt_len), output=length(output_dist, output_len),
        mix=mix, path=requests_file, seed=seed)
    sched = build_request(
        SchedulerSpec, ServingError, name=scheduler, max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens, chunked_prefill=not no_chunked_prefill, priority=priority,
        block_tokens=block_tokens, preemption=preemption, prefix_hit_rate=prefix_hit_rate,
        prefill_replicas=prefill_replicas, decode_replicas=decode_replicas, static_batch=static_batch)
    plan = build_request(ParallelPlan, ServingError, tensor_parallel=tensor_parallel,
                         pipeline_parallel=pipeline_parallel, expert_parallel=expert_parallel,
                         data_parallel=data_parallel)
    request = build_request(
        ServingRequest, ServingError, model=model, hardware=hardware, plan=plan, replicas=replicas,
        traffic=traffic, scheduler=sched, weight_dtype=weight_dtype, act_dtype=act_dtype, kv_dtype=kv_dtype,
        execution=execution, gpu_memory_utilization=gpu_memory_utilization, timer=timer)
    limits = parse_slo(slo) if slo is not None else None
    inputs = tuple(p for p in (requests_file,) if p is not None)
    with progress_bar(not as_json) as progress:
        if find_max_rate:
            if limits is None:
                raise ServingError("--find-max-rate needs --slo (the limits the rate must meet)")
            if out is not None or requests_out is not None:
                raise ServingError("--find-max-rate runs many simulations: --out and --requests-out are for one run")
            from layerscope.app.serving import find_max_rate as search

            found = search(request, limits, target=slo_attainment, progress=progress)
            _emit(found, as_json, _render_max_rate)
            return
        from layerscope.app.serving import serve

        _, result = serve(request, slo=limits, trace=out, requests_table=requests_out, progress=progress,
                          inputs=inputs)
    _emit(result, as_json, _render)


def _emit(result: Any, as_json: bool, render: Any) -> None:
    if as_json:
        from layerscope.cli.common import print_json

        print_json(result)
    else:
        render(result)


def _render(result: ServeResult) -> None:
    from rich.table import Table

    from layerscope.cli.common import console, esc

    con = console()
    m = result.metrics
    con.print(f"[bold]{esc(result.model)}[/] on [bold]{esc(result.hardware)}[/] · scheduler {esc(result.scheduler)} · "
              f"{result.engines} engine(s) · {result.requests} requests · KV {result.kv_capacity_tokens:,} tokens "
              f"per engine · simulated in {result.wall_s:.2f} s")
    t = Table(title="serving benchmark (vLLM benchmark_serving's names)")
    t.add_column("metric")
    t.add_column("value", justify="right")
    rows = [("Successful requests", f"{m['completed']}"), ("Benchmark duration (s)", f"{m['duration_s']:.2f}"),
            ("Request throughput (req/s)", f"{m['request_throughput']:.2f}"),
            ("Output token throughput (tok/s)", f"{m['output_throughput']:.1f}"),
            ("Total token throughput (tok/s)", f"{m['total_token_throughput']:.1f}")]
    if m.get("request_goodput") is not None:
        rows += [("Request goodput (req/s)", f"{m['request_goodput']:.2f}"),
                 ("Requests meeting the SLO", f"{m['goodput_share']:.1%}")]
    for name, label in (("ttft", "TTFT"), ("tpot", "TPOT"), ("itl", "ITL"), ("e2el", "E2E latency")):
        for stat in ("mean", "median", "p90", "p99"):
            rows.append((f"{stat.capitalize() if stat != 'p90' and stat != 'p99' else stat.upper()} {label} (ms)",
                         f"{m[f'{stat}_{name}_ms']:.2f}"))
    rows += [("Mean queueing (s)", f"{m['mean_queue_s']:.3f}"), ("Preemptions", f"{m['preemptions']}"),
             ("Mean batch (sequences)", f"{m['mean_batch_seqs']:.1f}"),
             ("Mean / max KV usage", f"{m['mean_kv_usage']:.1%} / {m['max_kv_usage']:.1%}")]
    if m.get("total_energy_j") is not None:
        rows += [("Energy (J, every GPU)", f"{m['total_energy_j']:,.0f}"),
                 ("Energy per request (J)", f"{m['energy_per_request_j']:.2f}"),
                 ("Energy per output token (mJ)", f"{m['energy_per_output_token_j'] * 1e3:.1f}"),
                 ("Output tokens per joule", f"{m['output_tokens_per_j']:.2f}"),
                 ("Mean power (W, every GPU)", f"{m['mean_power_w']:.0f}")]
        if m.get("over_board_limit_share"):
            rows.append(("Busy time over the board power limit", f"{m['over_board_limit_share']:.1%}"))
    for label, value in rows:
        t.add_row(label, value)
    con.print(t)
    for what, path in (("trace", result.trace), ("per-request table", result.requests_table)):
        if path:
            con.print(f"{what}: {esc(path)}")


def _render_max_rate(result: MaxRateResult) -> None:
    from rich.table import Table

    from layerscope.cli.common import console

    con = console()
    limits = ", ".join(f"{k.removesuffix('_ms')} ≤ {v:g} ms" for k, v in result.slo.items() if v is not None)
    if result.max_rate_per_s is None:
        con.print(f"[red]no rate tried meets[/] {limits} for {result.target:.0%} of requests")
    else:
        con.print(f"largest rate meeting {limits} for {result.target:.0%} of requests: "
                  f"[bold]{result.max_rate_per_s:.3g} req/s[/] ({result.per_gpu_rate_per_s:.3g} per GPU)")
    t = Table(title="runs")
    for col in ("rate (req/s)", "meets SLO", "attainment", "p99 TTFT (ms)", "p99 TPOT (ms)"):
        t.add_column(col, justify="right")
    for p in result.probes:
        t.add_row(f"{p.rate_per_s:.4g}", "yes" if p.meets else "no", f"{p.attainment:.1%}", f"{p.p99_ttft_ms:.1f}",
                  f"{p.p99_tpot_ms:.1f}")
    con.print(t)


def _ints(text: str, flag: str) -> list[int]:
    from layerscope.serving import ServingError

    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise ServingError(f"{flag}: {text!r} is not a comma-separated list of integers") from None
    if not values or any(v < 1 for v in values):
        raise ServingError(f"{flag}: {text!r}: give positive integers, e.g. 1,2,4")
    return values


def _floats(text: str, flag: str) -> list[float]:
    from layerscope.serving import ServingError

    try:
        values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise ServingError(f"{flag}: {text!r} is not a comma-separated list of numbers") from None
    if not values or any(not v > 0 for v in values):
        raise ServingError(f"{flag}: {text!r}: give positive rates, e.g. 2,4,8")
    return values


def grid_cmd(
    model: str = options.model("llama-3.1-8b"),
    hardware: str = typer.Option("h100-sxm", "--hardware", "-H", help="Comma-separated presets, clusters or files."),
    tp: str = typer.Option("1", "--tp", help="Comma-separated tensor-parallel degrees."),
    pp: str = typer.Option("1", "--pp", help="Comma-separated pipeline depths."),
    scheduler: str = typer.Option("vllm", "--scheduler", help="Comma-separated: static, vllm, sarathi, disaggregated."),
    rates: str = typer.Option("5,10,20", "--rate", help="Comma-separated arrival rates (req/s)."),
    arrival: str = typer.Option("poisson", "--arrival", help="poisson | gamma"),
    cv: float = typer.Option(1.0, "--cv", help="Coefficient of variation of gamma gaps."),
    requests: int = typer.Option(1000, "--requests", "-n", help="Requests per point."),
    prompt_len: float = typer.Option(512, "--prompt-len", help="Prompt tokens per request."),
    output_len: float = typer.Option(128, "--output-len", help="Output tokens per request."),
    mix: str | None = typer.Option(None, "--mix", help="chat | summarization | long-context."),
    seed: int = typer.Option(0, "--seed", help="Seed of every random draw (the same at every point)."),
    max_num_seqs: int = typer.Option(256, "--max-num-seqs", help="Most requests running per engine."),
    max_num_batched_tokens: int = typer.Option(8192, "--max-num-batched-tokens", help="Token budget of a step."),
    replicas: int = typer.Option(1, "--replicas", help="Engines, each a copy of the plan."),
    weight_dtype: str = options.weight_dtype(),
    kv_dtype: str = options.kv_dtype(),
    slo: str | None = typer.Option(None, "--slo", help="Goodput limits, e.g. ttft=200ms,tpot=50ms."),
    workers: int | None = typer.Option(None, "--workers", help="Local worker processes (default: the CPUs)."),
    ray: str | None = typer.Option(None, "--ray", help="Run on a Ray cluster: auto, local or ray://host:port."),
    csv_out: Path | None = typer.Option(None, "--csv", help="Write one row per point as CSV."),
    as_json: bool = options.as_json("Print one JSON object (docs/schema/serving-grid.json)."),
) -> None:
    """Serving over a grid of hardware × plan × scheduler × rate, in local processes or on Ray."""
    from layerscope.app.requests import build_request
    from layerscope.app.serving import grid_cells, run_grid
    from layerscope.cli.common import progress_bar
    from layerscope.serving import LengthSpec, SchedulerSpec, ServingError, ServingRequest, TrafficSpec, parse_slo

    plans = [(t, p) for t in _ints(tp, "--tp") for p in _ints(pp, "--pp")]
    names = [n.strip() for n in scheduler.split(",") if n.strip()]
    hws = [h.strip() for h in hardware.split(",") if h.strip()]
    base = build_request(
        ServingRequest, ServingError, model=model, hardware=hws[0] if hws else "",
        replicas=replicas, weight_dtype=weight_dtype, kv_dtype=kv_dtype,
        traffic=build_request(TrafficSpec, ServingError, arrival=arrival, cv=cv, rate_per_s=1.0, requests=requests,
                              prompt=LengthSpec(mean=prompt_len), output=LengthSpec(mean=output_len), mix=mix,
                              seed=seed),
        scheduler=build_request(SchedulerSpec, ServingError, max_num_seqs=max_num_seqs,
                                max_num_batched_tokens=max_num_batched_tokens))
    from layerscope.serving import SCHEDULERS

    for name in names:
        SCHEDULERS.lookup(name)
    cells = grid_cells(base, hws, plans, names, _floats(rates, "--rate"))
    limits = parse_slo(slo) if slo is not None else None
    if csv_out is not None:
        from layerscope.units import check_output

        check_output(csv_out)
    with progress_bar(not as_json) as progress:
        result = run_grid(cells, limits, workers=workers, ray_address=ray, progress=progress)
    if csv_out is not None:
        _write_grid_csv(result, csv_out)
    if as_json:
        from layerscope.cli.common import print_json

        print_json(result)
        return
    _render_grid(result)


_GRID_METRICS = ("request_throughput", "output_throughput", "median_ttft_ms", "p99_ttft_ms", "median_tpot_ms",
                 "p99_tpot_ms", "goodput_share")


def _write_grid_csv(result: Any, path: Path) -> None:
    import csv
    import io

    from layerscope.units import atomic_write

    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(["hardware", "tensor_parallel", "pipeline_parallel", "scheduler", "rate_per_s", "gpus", *_GRID_METRICS,
                "error"])
    for c in result.cells:
        m = c.metrics or {}
        w.writerow([c.hardware, c.tensor_parallel, c.pipeline_parallel, c.scheduler, c.rate_per_s, c.gpus,
                    *(m.get(k) for k in _GRID_METRICS), c.error or ""])
    with atomic_write(path, "w") as fh:
        fh.write(buf.getvalue())


def _render_grid(result: Any) -> None:
    from rich.table import Table

    from layerscope.cli.common import console, esc

    t = Table(title=f"serving grid ({len(result.cells)} points, {esc(result.executor)})")
    for col in ("hardware", "tp", "pp", "scheduler", "rate", "GPUs", "req/s", "tok/s", "TTFT p50/p99 ms",
                "TPOT p50/p99 ms", "SLO met"):
        t.add_column(col, justify="right")
    for c in result.cells:
        m = c.metrics
        if m is None:
            t.add_row(esc(c.hardware), str(c.tensor_parallel), str(c.pipeline_parallel), esc(c.scheduler),
                      f"{c.rate_per_s:g}", str(c.gpus), "-", "-", "-", "-", esc((c.error or "")[:60]))
            continue
        met = "-" if m.get("goodput_share") is None else f"{m['goodput_share']:.0%}"
        t.add_row(esc(c.hardware), str(c.tensor_parallel), str(c.pipeline_parallel), esc(c.scheduler),
                  f"{c.rate_per_s:g}", str(c.gpus), f"{m['request_throughput']:.2f}", f"{m['output_throughput']:.0f}",
                  f"{m['median_ttft_ms']:.1f} / {m['p99_ttft_ms']:.1f}",
                  f"{m['median_tpot_ms']:.2f} / {m['p99_tpot_ms']:.2f}", met)
    console().print(t)
