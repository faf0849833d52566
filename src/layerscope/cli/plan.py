"""``layerscope plan``: the valid ways to split a model over a range of GPU counts, ranked."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

from layerscope.cli import options

if TYPE_CHECKING:
    from layerscope.app.plan import PlanResult


def register(app: typer.Typer) -> None:
    app.command("plan")(plan_cmd)


def plan_cmd(
    model: str = options.model("llama-3.1-8b"),
    hardware: str = options.hardware("dgx-h100", help="A cluster (`layerscope hardware` lists them; its GPU count "
                                     "bounds the plans) or a GPU spec (any count)."),
    gpus: str = typer.Option("1..8", "--gpus", help="GPU counts of a plan: N or LO..HI."),
    nodes: int | None = typer.Option(None, "--nodes", help="Override the cluster's node count."),
    phase: str = typer.Option("decode", "--phase", help="prefill | decode | chunked | generate"),
    batch: int = options.batch(),
    prompt_len: int | None = options.prompt_len(None, help="Prompt tokens per sequence [default: 512]."),
    decode_steps: int | None = options.decode_steps(None, help="Decode passes after the prefill (generate) "
                                                    "[default: 127]."),
    context: int = options.context(),
    weight_dtype: str = options.weight_dtype(),
    act_dtype: str = options.act_dtype(),
    kv_dtype: str = options.kv_dtype(),
    objective: str = typer.Option("latency", "--objective", help="Rank by latency | throughput (per GPU) | "
                                  "tokens-per-joule (needs the spec's energy figures; docs/energy.md)."),
    max_micro_batches: int = typer.Option(8, "--max-micro-batches", help="Pipelines try 1, p, 2p ... up to this."),
    top: int = typer.Option(10, "--top", min=1, help="Plans shown."),
    cost_model: str = options.cost_model(),
    as_json: bool = options.as_json("Print one JSON object (docs/schema/plan.json)."),
) -> None:
    """Enumerate TP x PP x EP x DP plans, rank them by latency, throughput per GPU or tokens per joule under memory
    limits."""
    from layerscope.app.plan import PlanRequest, plan
    from layerscope.app.requests import WorkloadRequest, build_request

    workload = build_request(WorkloadRequest, phase=phase, batch=batch, context=context, prompt_len=prompt_len,
                             decode_steps=decode_steps, weight_dtype=weight_dtype, act_dtype=act_dtype,
                             kv_dtype=kv_dtype)
    request = build_request(PlanRequest, model=model, hardware=hardware, nodes=nodes, gpus=_gpu_range(gpus),
                            workload=workload, objective=objective, max_micro_batches=max_micro_batches,
                            cost_model=cost_model)
    from layerscope.cli.common import progress_bar

    with progress_bar(not as_json) as progress:
        result = plan(request, progress)
    if as_json:
        from layerscope.cli.common import print_json

        print_json(result)
        return
    _render(result, top)


def _gpu_range(text: str) -> tuple[int, int]:
    """``N`` or ``LO..HI`` as (lo, hi); anything else a ``WorkloadError`` naming it."""
    from layerscope.errors import WorkloadError

    lo_s, sep, hi_s = text.strip().partition("..")
    try:
        lo = int(lo_s)
        hi = int(hi_s) if sep else lo
    except ValueError:
        raise WorkloadError(f"--gpus: {text!r} is not a GPU count or a range LO..HI (8..64)") from None
    if lo < 1 or hi < lo:
        raise WorkloadError(f"--gpus: {text!r} is not a range of GPU counts (1 <= LO <= HI)")
    return lo, hi


def _render(result: PlanResult, top: int) -> None:
    from collections import Counter

    from rich.table import Table

    from layerscope.cli.common import console, esc, fmt_si, fmt_time_s

    con = console()
    avail = f"{result.gpus_available} GPUs" if result.gpus_available is not None else "any GPU count"
    con.print(f"[bold]{esc(result.model)}[/] on [bold]{esc(result.hardware)}[/] ({avail}) · {result.phase} · "
              f"{len(result.plans)} valid plans of {len(result.plans) + len(result.failures)}, ranked by "
              f"{result.objective} · {result.graphs_timed} device graphs timed")
    t = Table(title=f"best {min(top, len(result.plans))} plans")
    energy = any(r.output_tokens_per_j is not None for r in result.plans)
    for col in ("GPUs", "tp", "pp", "ep", "dp", "µbatches", "latency", "tokens/s/GPU",
                *(("tokens/J",) if energy else ()), "memory/GPU", "weights/GPU", "KV/GPU", "comm", "bubble"):
        t.add_column(col, justify="right")
    for r in result.plans[:top]:
        per_j = (f"{r.output_tokens_per_j:,.3g}" if r.output_tokens_per_j is not None else "-",) if energy else ()
        t.add_row(str(r.gpus), str(r.tensor_parallel), str(r.pipeline_parallel), str(r.expert_parallel),
                  str(r.data_parallel), str(r.micro_batches), fmt_time_s(r.latency_s),
                  f"{r.output_tokens_per_s_per_gpu:,.1f}", *per_j, fmt_si(r.memory_per_gpu_bytes, "B"),
                  fmt_si(r.weights_per_gpu_bytes, "B"), fmt_si(r.kv_cache_per_gpu_bytes, "B"),
                  f"{r.communication_share:.1%}", "-" if r.bubble_fraction is None else f"{r.bubble_fraction:.1%}")
    con.print(t)
    if result.failures:
        reasons = Counter(_reason_kind(f.reason) for f in result.failures)
        f = Table(title=f"{len(result.failures)} plans left out")
        f.add_column("why")
        f.add_column("plans", justify="right")
        f.add_column("e.g.")
        for kind, n in reasons.most_common():
            ex = next(x for x in result.failures if _reason_kind(x.reason) == kind)
            f.add_row(esc(kind), str(n), esc(f"tp {ex.tensor_parallel} pp {ex.pipeline_parallel} ep "
                                            f"{ex.expert_parallel} dp {ex.data_parallel}: {ex.reason}"))
        con.print(f)


def _reason_kind(reason: str) -> str:
    """The constraint a failure names, for grouping (its words before the numbers)."""
    for key, label in (("GB per GPU", "memory per GPU"), ("GPUs;", "GPUs available"), ("heads", "attention heads"),
                       ("KV heads", "KV heads"), ("experts", "experts"), ("layers", "layers per stage"),
                       ("network", "network"), ("domain", "network")):
        if key in reason:
            return label
    return reason.split(":")[0]
