"""``serving``: a serving simulation (``layerscope.serving``) as one request and one result, the largest rate that
meets an SLO, the per-request table and the trace.

:func:`serve` runs one :class:`~layerscope.serving.ServingRequest` and summarizes it (vLLM benchmark_serving's
metrics, the goodput under an SLO); :func:`find_max_rate` bisects the arrival rate on seeded runs for the largest
one whose SLO attainment reaches a target (DistServe's goodput definition, Zhong et al. 2024 §2.2: the highest
request rate at which a given share of requests meet their TTFT and TPOT limits).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from layerscope.app.requests import MODEL_CONFIG

if TYPE_CHECKING:
    from layerscope.serving import SLO, ServingRequest, ServingRun

__all__ = ["GridCell", "GridResult", "MaxRateResult", "RateProbe", "ServeResult", "engine_gpus", "find_max_rate",
           "grid_cells", "result_of", "run_grid", "serve", "write_requests_table"]


class ServeResult(BaseModel):
    """The answer of ``layerscope serving``: its ``--json`` output."""

    model_config = MODEL_CONFIG

    model: str
    """The model's name."""
    hardware: str
    """The hardware spec's name."""
    scheduler: str
    """The batching policy (``static``, ``vllm``, ``sarathi``, ``disaggregated``)."""
    engines: int
    """Engines serving the traffic (replicas × the plan's data-parallel engines; prefill + decode pools)."""
    roles: list[str]
    """Each engine's role: ``mixed``, ``prefill`` or ``decode``."""
    requests: int
    """Requests simulated."""
    kv_capacity_tokens: int
    """KV-cache tokens per engine (blocks × tokens per block)."""
    kv_bytes_per_token: float
    """KV-cache bytes one token holds on one device."""
    metrics: dict[str, Any]
    """vLLM benchmark_serving's metrics (``layerscope.serving.ServingMetrics``): mean/median/std/p90/p99 of TTFT,
    TPOT, ITL and E2E latency in ms, throughputs, goodput under the SLO."""
    slo: dict[str, float | None] | None
    """The SLO the goodput counts against, in ms; ``null`` without one."""
    wall_s: float
    """Seconds the simulation took on this machine."""
    trace: str | None
    """The trace written, or ``null``."""
    requests_table: str | None
    """The per-request table written (CSV or Parquet), or ``null``."""


class RateProbe(BaseModel):
    """One seeded run of the bisection."""

    model_config = MODEL_CONFIG

    rate_per_s: float
    """Arrival rate of the run."""
    attainment: float
    """Share of its requests meeting the SLO."""
    meets: bool
    """``attainment`` reaches the target."""
    p99_ttft_ms: float
    """The run's p99 time to first token."""
    p99_tpot_ms: float
    """The run's p99 time per output token."""


class MaxRateResult(BaseModel):
    """The answer of ``layerscope serving --find-max-rate``."""

    model_config = MODEL_CONFIG

    max_rate_per_s: float | None
    """The largest arrival rate found whose SLO attainment reaches ``target``; ``null`` when even the lowest rate
    tried misses it."""
    target: float
    """The share of requests that must meet the SLO."""
    slo: dict[str, float | None]
    """The SLO, in ms."""
    probes: list[RateProbe]
    """Every run, in the order run."""
    per_gpu_rate_per_s: float | None
    """``max_rate_per_s`` over the GPUs the engines use."""


def serve(request: ServingRequest, *, slo: SLO | None = None, trace: Path | None = None,
          requests_table: Path | None = None, progress: Callable[[float], None] | None = None,
          inputs: tuple[str | os.PathLike[str], ...] = ()) -> tuple[ServingRun, ServeResult]:
    """Run ``request``; write its trace and per-request table where asked (outputs checked before the run, never
    over an input); summarize it."""
    from layerscope.serving import run_serving
    from layerscope.units import check_output

    for out in (trace, requests_table):
        if out is not None:
            check_output(out, inputs=inputs)
    run = run_serving(request, progress)
    written_trace = written_table = None
    if trace is not None:
        from layerscope.trace.serving_writer import write_serving_trace

        written_trace = str(write_serving_trace(run, trace, inputs=inputs))
    if requests_table is not None:
        written_table = str(write_requests_table(run, requests_table, inputs=inputs))
    return run, result_of(run, slo, trace=written_trace, requests_table=written_table)


def result_of(run: ServingRun, slo: SLO | None = None, *, trace: str | None = None,
              requests_table: str | None = None) -> ServeResult:
    from layerscope.serving import summarize

    req = run.request
    name = req.model if isinstance(req.model, str) else getattr(req.model, "name", str(req.model))
    hw = req.hardware if isinstance(req.hardware, str) else getattr(req.hardware, "name", str(req.hardware))
    return ServeResult(
        model=str(name), hardware=str(hw), scheduler=req.scheduler.name, engines=len(run.roles),
        roles=list(run.roles), requests=len(run.id), kv_capacity_tokens=run.kv_capacity_tokens,
        kv_bytes_per_token=run.kv_bytes_per_token, metrics=summarize(run, slo).model_dump(),
        slo=None if slo is None else slo.model_dump(), wall_s=run.wall_s, trace=trace, requests_table=requests_table)


#: Columns of the per-request table: name → the ServingRun array it comes from.
_COLUMNS = {"id": "id", "replica": "replica", "arrival_s": "arrival_s", "first_token_s": "first_token_s",
            "finish_s": "finish_s", "prompt_len": "prompt_len", "output_len": "output_len",
            "prefix_hit_tokens": "prefix_hit_tokens", "queued_s": "queued_s", "preemptions": "preemptions"}


def _table_columns(run: ServingRun) -> dict[str, Any]:
    import numpy as np

    from layerscope.serving import tpot_s

    cols: dict[str, Any] = {name: getattr(run, attr) for name, attr in _COLUMNS.items()}
    cols["ttft_s"] = run.first_token_s - run.arrival_s
    cols["tpot_s"] = tpot_s(run)
    cols["e2el_s"] = run.finish_s - run.arrival_s
    itl = [run.itl_s(i) for i in range(len(run.id))]
    cols["max_itl_s"] = np.array([float(x.max()) if len(x) else math.nan for x in itl])
    if run.energy is not None:
        cols["energy_j"] = run.energy.request_j
    return cols


def write_requests_table(run: ServingRun, path: Path, *, inputs: tuple[str | os.PathLike[str], ...] = ()) -> Path:
    """One row per request (times in seconds from the first arrival, TTFT, TPOT, E2E, the largest inter-token
    gap, queueing, preemptions, and its joules where the hardware has energy figures), as CSV or, for a
    ``.parquet`` path, Parquet; written atomically."""
    from layerscope.app.tables import write_columns

    return write_columns(_table_columns(run), path, what="per-request table", inputs=inputs)


def find_max_rate(request: ServingRequest, slo: SLO, *, target: float = 0.9, low: float | None = None,
                  high: float | None = None, tolerance: float = 0.05, max_runs: int = 12,
                  progress: Callable[[float], None] | None = None) -> MaxRateResult:
    """The largest Poisson/gamma arrival rate whose share of requests meeting ``slo`` reaches ``target``.

    Bisection on the rate (every run seeded alike, so attainment is a deterministic function of the rate): the
    bracket starts at ``low`` (default: the rate one engine finishes one request's prefill and decode alone,
    over 64) and doubles ``high`` until a run misses; then halves the bracket until it is within ``tolerance``
    (relative) or ``max_runs`` runs were made. Attainment falls with the rate in practice but need not be
    monotone for every seed; the answer is the largest rate seen that meets the target below the smallest that
    misses."""
    from layerscope.serving import ServingError, run_serving, summarize

    if request.traffic.arrival not in ("poisson", "gamma"):
        raise ServingError(f"--find-max-rate varies the arrival rate: arrivals must be poisson or gamma, not "
                           f"{request.traffic.arrival!r}")
    if not 0 < target <= 1:
        raise ServingError(f"--slo-attainment {target}: a share in (0, 1]")
    probes: list[RateProbe] = []

    def probe(rate: float) -> bool:
        run = run_serving(request.model_copy(update={"traffic": request.traffic.model_copy(
            update={"rate_per_s": rate})}))
        m = summarize(run, slo)
        share = float(m.goodput_share or 0.0)
        probes.append(RateProbe(rate_per_s=rate, attainment=share, meets=share >= target,
                                p99_ttft_ms=m.p99_ttft_ms, p99_tpot_ms=m.p99_tpot_ms))
        if progress is not None:
            progress(min(1.0, len(probes) / max_runs))
        return share >= target

    lo = low if low is not None else float(request.traffic.rate_per_s or 1.0) / 8
    hi = high if high is not None else lo * 2
    good: float | None = None
    if not probe(lo):
        return _max_rate(None, target, slo, probes, request)
    good = lo
    while len(probes) < max_runs and probe(hi):
        good, hi = hi, hi * 2
    bad = hi
    while len(probes) < max_runs and (bad - good) > tolerance * good:
        mid = math.sqrt(good * bad)
        if probe(mid):
            good = mid
        else:
            bad = mid
    return _max_rate(good, target, slo, probes, request)


def engine_gpus(request: ServingRequest) -> int:
    """GPUs the engines of ``request`` use: each engine ``tp × pp``; ``replicas × dp`` engines, or the
    disaggregated scheduler's prefill and decode pools."""
    plan, sched = request.plan, request.scheduler
    engines = (sched.prefill_replicas + sched.decode_replicas if sched.name == "disaggregated"
               else request.replicas * plan.data_parallel)
    return engines * plan.tensor_parallel * plan.pipeline_parallel


def _max_rate(rate: float | None, target: float, slo: SLO, probes: list[RateProbe],
              request: ServingRequest) -> MaxRateResult:
    return MaxRateResult(max_rate_per_s=rate, target=target, slo=slo.model_dump(), probes=probes,
                         per_gpu_rate_per_s=None if rate is None else rate / engine_gpus(request))



class GridCell(BaseModel):
    """One point of a serving grid: its coordinates and the run's metrics."""

    model_config = MODEL_CONFIG

    hardware: str
    """The hardware spec or cluster name."""
    tensor_parallel: int
    """Tensor-parallel devices of each engine."""
    pipeline_parallel: int
    """Pipeline stages of each engine."""
    scheduler: str
    """The batching policy."""
    rate_per_s: float
    """Arrival rate."""
    gpus: int
    """GPUs the engines use."""
    metrics: dict[str, Any] | None
    """The run's metrics (as ``serving --json``); ``null`` where the point cannot run (``error`` says why)."""
    error: str | None
    """Why the point did not run (a plan the model cannot split, a model that leaves no KV cache), or ``null``."""


class GridResult(BaseModel):
    """The answer of ``layerscope serving-grid``: every point of hardware × plan × scheduler × rate, in the
    grid's order, whatever ran it (local processes or Ray) and in whatever order they finished."""

    model_config = MODEL_CONFIG

    cells: list[GridCell]
    """One per point, hardware slowest, rate fastest."""
    slo: dict[str, float | None] | None
    """The SLO the goodput counts against, in ms."""
    executor: str
    """``local`` (N worker processes) or ``ray`` (the address)."""


def grid_cells(base: ServingRequest, hardware: list[str], plans: list[tuple[int, int]], schedulers: list[str],
               rates: list[float]) -> list[ServingRequest]:
    """The requests of the grid, hardware slowest and rate fastest (each a copy of ``base``)."""
    out = []
    for hw in hardware:
        for tp, pp in plans:
            for name in schedulers:
                for rate in rates:
                    out.append(base.model_copy(update={
                        "hardware": hw,
                        "plan": base.plan.model_copy(update={"tensor_parallel": tp, "pipeline_parallel": pp}),
                        "scheduler": base.scheduler.model_copy(update={"name": name}),
                        "traffic": base.traffic.model_copy(update={"rate_per_s": rate})}))
    return out


def run_grid_cell(payload: str) -> str:
    """One grid point from its JSON (the request and the SLO), its :class:`GridCell` as JSON: a pure function of
    its input, so any executor gives the same bytes."""
    import json

    from layerscope.errors import LayerscopeError
    from layerscope.serving import SLO, ServingRequest, run_serving, summarize

    data = json.loads(payload)
    request = ServingRequest.model_validate(data["request"])
    slo = SLO.model_validate(data["slo"]) if data["slo"] is not None else None
    plan = request.plan
    cell: dict[str, Any] = {"hardware": str(request.hardware), "tensor_parallel": plan.tensor_parallel,
                            "pipeline_parallel": plan.pipeline_parallel, "scheduler": request.scheduler.name,
                            "rate_per_s": float(request.traffic.rate_per_s or 0.0), "gpus": engine_gpus(request)}
    try:
        run = run_serving(request)
        metrics = summarize(run, slo).model_dump()
        metrics.pop("wall_s", None)
        cell.update(metrics=metrics, error=None)
    except LayerscopeError as exc:
        cell.update(metrics=None, error=str(exc))
    return GridCell.model_validate(cell).model_dump_json()


def run_grid(requests: list[ServingRequest], slo: SLO | None = None, *, workers: int | None = None,
             ray_address: str | None = None, progress: Callable[[float], None] | None = None) -> GridResult:
    """Run every request of a grid (:func:`grid_cells`) in local worker processes (``workers``, default the CPU
    count; 1: in this process) or on a Ray cluster (``ray_address``: ``auto``, ``local`` or ``ray://host:port``;
    Ray is an optional extra). Each point is :func:`run_grid_cell` of its JSON, so the result is the same, byte
    for byte, whoever ran it."""
    import json

    from layerscope.serving import ServingError

    if not requests:
        raise ServingError("the grid is empty: give at least one hardware, plan, scheduler and rate")
    for r in requests:
        if not isinstance(r.hardware, str) or not isinstance(r.model, str):
            raise ServingError("a grid runs in other processes: give the model and hardware by name or file")
    payloads = [json.dumps({"request": r.model_dump(mode="json"), "slo": None if slo is None else slo.model_dump()},
                           sort_keys=True) for r in requests]
    results: list[str | None] = [None] * len(payloads)
    if ray_address is not None:
        try:
            import ray
        except ImportError:
            raise ServingError("--ray needs Ray: pip install 'layerscope[ray]' (or ray)") from None
        started = not ray.is_initialized()
        if started:
            ray.init(address=None if ray_address == "local" else ray_address, include_dashboard=False,
                     log_to_driver=False)
        try:
            remote = ray.remote(run_grid_cell)
            refs = [remote.remote(p) for p in payloads]
            for i, ref in enumerate(refs):
                results[i] = ray.get(ref)
                if progress is not None:
                    progress((i + 1) / len(refs))
        finally:
            if started:
                ray.shutdown()
        executor = f"ray ({ray_address})"
    else:
        count = workers or (os.cpu_count() or 1)
        if count <= 1 or len(payloads) == 1:
            for i, p in enumerate(payloads):
                results[i] = run_grid_cell(p)
                if progress is not None:
                    progress((i + 1) / len(payloads))
        else:
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor, as_completed

            context = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods()
                                                  else "spawn")
            with ProcessPoolExecutor(max_workers=min(count, len(payloads)), mp_context=context) as pool:
                futures = {pool.submit(run_grid_cell, p): i for i, p in enumerate(payloads)}
                for done, future in enumerate(as_completed(futures), start=1):
                    results[futures[future]] = future.result()
                    if progress is not None:
                        progress(done / len(payloads))
        executor = f"local ({count} processes)" if count > 1 else "local (in process)"
    cells = [GridCell.model_validate_json(r) for r in results if r is not None]
    return GridResult(cells=cells, slo=None if slo is None else slo.model_dump(), executor=executor)
