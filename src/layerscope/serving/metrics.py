"""Metrics of a serving run, named as vLLM's ``benchmarks/benchmark_serving.py`` prints them, and its time
series."""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict

from layerscope.serving.simulator import ServingRun
from layerscope.serving.spec import SLO

__all__ = ["ServingMetrics", "TimeSeries", "summarize", "time_series"]

#: Percentiles reported per latency, as benchmark_serving's ``--metric-percentiles`` default plus 90.
PERCENTILES = (50, 90, 99)


class ServingMetrics(BaseModel):
    """A serving run summarized: latencies in milliseconds, throughputs per second of simulated time.

    TTFT = first token − arrival; TPOT = (E2E − TTFT) / (output tokens − 1) over requests of more than one output
    token; ITL = every gap between a request's successive tokens; E2EL = last token − arrival (benchmark_serving's
    definitions). Percentiles are numpy's linear ones, as benchmark_serving takes them."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    completed: int
    """Requests finished."""
    total_input_tokens: int
    """Prompt tokens of the finished requests."""
    total_output_tokens: int
    """Output tokens of the finished requests."""
    duration_s: float
    """From the first arrival to the last token."""
    request_throughput: float
    """Finished requests per second."""
    output_throughput: float
    """Output tokens per second."""
    total_token_throughput: float
    """Prompt and output tokens per second."""
    request_goodput: float | None
    """Requests per second meeting every limit of the SLO (None without one)."""
    goodput_share: float | None
    """Share of the requests meeting the SLO (None without one)."""
    mean_ttft_ms: float
    median_ttft_ms: float
    std_ttft_ms: float
    p90_ttft_ms: float
    p99_ttft_ms: float
    mean_tpot_ms: float
    median_tpot_ms: float
    std_tpot_ms: float
    p90_tpot_ms: float
    p99_tpot_ms: float
    mean_itl_ms: float
    median_itl_ms: float
    std_itl_ms: float
    p90_itl_ms: float
    p99_itl_ms: float
    mean_e2el_ms: float
    median_e2el_ms: float
    std_e2el_ms: float
    p90_e2el_ms: float
    p99_e2el_ms: float
    mean_queue_s: float
    """Mean time from arrival to the first step running any of the request's tokens."""
    preemptions: int
    """Preemptions over the run."""
    mean_batch_seqs: float
    """Sequences per step, averaged over time."""
    mean_queue_len: float
    """Requests waiting per engine, averaged over time."""
    mean_kv_usage: float
    """Share of the KV blocks in use, averaged over time."""
    max_kv_usage: float
    """Largest share of the KV blocks in use."""
    iterations: int
    """Engine steps."""
    total_energy_j: float | None = None
    """Joules of every device of every engine from the first arrival to the last token: the steps' (dynamic and
    idle) and idle power between steps (``serving.energy``); None where the hardware has no energy figures."""
    energy_per_request_j: float | None = None
    """Total joules over the requests finished."""
    energy_per_output_token_j: float | None = None
    """Total joules over the output tokens."""
    output_tokens_per_j: float | None = None
    mean_power_w: float | None = None
    """Total joules over the run's duration (every device)."""
    over_board_limit_share: float | None = None
    """Share of the busy time in steps above the board's power limit (whose clock drop the run does not model)."""


def _stats(values_s: np.ndarray, name: str) -> dict[str, float]:
    ms = np.asarray(values_s, dtype=np.float64) * 1e3
    if not len(ms):
        return {f"{k}_{name}_ms": 0.0 for k in ("mean", "median", "std", "p90", "p99")}
    return {f"mean_{name}_ms": float(np.mean(ms)), f"median_{name}_ms": float(np.median(ms)),
            f"std_{name}_ms": float(np.std(ms)), f"p90_{name}_ms": float(np.percentile(ms, 90)),
            f"p99_{name}_ms": float(np.percentile(ms, 99))}


def tpot_s(run: ServingRun) -> np.ndarray:
    """Per request with more than one output token: (E2E − TTFT) / (output − 1) (NaN for the others)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(run.output_len > 1, (run.finish_s - run.first_token_s) / (run.output_len - 1), np.nan)


def _time_weighted(values: np.ndarray, start: np.ndarray, end: np.ndarray) -> float:
    width = end - start
    total = float(width.sum())
    return float((values * width).sum() / total) if total > 0 else float(values.mean()) if len(values) else 0.0


def summarize(run: ServingRun, slo: SLO | None = None) -> ServingMetrics:
    """The run's metrics; with ``slo``, the goodput: requests per second meeting every limit it sets."""
    done = ~np.isnan(run.finish_s)
    ttft = (run.first_token_s - run.arrival_s)[done]
    e2el = (run.finish_s - run.arrival_s)[done]
    tpot_all = tpot_s(run)[done]
    tpot = tpot_all[~np.isnan(tpot_all)]
    duration = float(np.nanmax(run.finish_s) - np.nanmin(run.arrival_s)) if done.any() else 0.0
    completed = int(done.sum())
    inputs = int(run.prompt_len[done].sum())
    outputs = int(run.output_len[done].sum())
    per_s = 1.0 / duration if duration > 0 else 0.0
    goodput = share = None
    if slo is not None:
        good = np.ones(completed, dtype=bool)
        if slo.ttft_ms is not None:
            good &= ttft * 1e3 <= slo.ttft_ms
        if slo.tpot_ms is not None:
            good &= np.nan_to_num(tpot_all, nan=0.0) * 1e3 <= slo.tpot_ms
        if slo.e2el_ms is not None:
            good &= e2el * 1e3 <= slo.e2el_ms
        goodput = int(good.sum()) * per_s
        share = float(good.mean()) if completed else 0.0
    usage = run.kv_usage
    return ServingMetrics(
        completed=completed, total_input_tokens=inputs, total_output_tokens=outputs, duration_s=duration,
        request_throughput=completed * per_s, output_throughput=outputs * per_s,
        total_token_throughput=(inputs + outputs) * per_s, request_goodput=goodput, goodput_share=share,
        **_stats(ttft, "ttft"), **_stats(tpot, "tpot"), **_stats(run.itl_s(), "itl"), **_stats(e2el, "e2el"),
        mean_queue_s=float(np.nanmean(run.queued_s)) if completed else 0.0,
        preemptions=int(run.preemptions.sum()),
        mean_batch_seqs=_time_weighted(run.batch_seqs.astype(float), run.start_s, run.end_s),
        mean_queue_len=_time_weighted(run.queue_len.astype(float), run.start_s, run.end_s),
        mean_kv_usage=_time_weighted(usage, run.start_s, run.end_s),
        max_kv_usage=float(usage.max()) if len(usage) else 0.0,
        iterations=len(run.start_s), **_energy(run, completed, outputs, duration))


def _energy(run: ServingRun, completed: int, outputs: int, duration_s: float) -> dict[str, float | None]:
    if run.energy is None:
        return {}
    total = run.energy.total_j
    return {"total_energy_j": total, "energy_per_request_j": total / completed if completed else None,
            "energy_per_output_token_j": total / outputs if outputs else None,
            "output_tokens_per_j": outputs / total if total > 0 else None,
            "mean_power_w": total / duration_s if duration_s > 0 else None,
            "over_board_limit_share": run.energy.over_limit_share}


class TimeSeries(BaseModel):
    """One engine's state over time, one point per step (at its start): for plots and counters."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    replica: int
    time_s: list[float]
    kv_usage: list[float]
    """Share of the engine's KV blocks in use."""
    batch_seqs: list[int]
    queue_len: list[int]
    running: list[int]


def time_series(run: ServingRun) -> list[TimeSeries]:
    """Per engine, its KV usage, batch size, queue length and running requests at each of its steps."""
    out = []
    for replica in range(len(run.roles)):
        mask = run.iteration_replica == replica
        out.append(TimeSeries(replica=replica, time_s=run.start_s[mask].tolist(),
                              kv_usage=run.kv_usage[mask].tolist(), batch_seqs=run.batch_seqs[mask].tolist(),
                              queue_len=run.queue_len[mask].tolist(), running=run.running[mask].tolist()))
    return out
