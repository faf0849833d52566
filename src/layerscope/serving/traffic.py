"""Requests of a serving simulation: arrival processes, length distributions and named workload mixes, each
registered by name, and :func:`generate_requests`, deterministic for a seed."""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from layerscope.registry import Registry
from layerscope.serving.spec import MAX_REQUEST_TOKENS, LengthSpec, ServingError, TrafficSpec

__all__ = ["ARRIVALS", "LENGTHS", "MIXES", "Mix", "Request", "generate_requests", "read_request_file"]


@dataclass(frozen=True)
class Request:
    """One request: when it arrives (seconds; NaN in a closed loop until the simulator sends it), its prompt and
    output tokens, and how many leading prompt tokens the prefix cache already holds."""

    id: int
    arrival_s: float
    prompt_len: int
    output_len: int
    prefix_hit_tokens: int = 0


#: ``(spec, rng, n) -> arrival times [n]`` (seconds from the first, non-decreasing; NaN: decided by the simulator).
ArrivalFn = Callable[[TrafficSpec, np.random.Generator, int], np.ndarray]
#: ``(spec, rng, n) -> token counts [n]`` (int64, at least 1).
LengthFn = Callable[[LengthSpec, np.random.Generator, int], np.ndarray]

ARRIVALS: Registry[ArrivalFn] = Registry("arrival process", ServingError)
LENGTHS: Registry[LengthFn] = Registry("length distribution", ServingError)


def _from_gaps(gaps: np.ndarray) -> np.ndarray:
    # The first request goes at t = 0 and each next one a gap later, as vLLM's benchmark_serving sends them.
    return np.concatenate([[0.0], np.cumsum(gaps[:-1])]) if len(gaps) else gaps


@ARRIVALS.register("poisson")
def poisson_arrivals(spec: TrafficSpec, rng: np.random.Generator, n: int) -> np.ndarray:
    """Exponential gaps of mean 1/rate (a Poisson process); an infinite rate sends every request at t = 0."""
    rate = float(spec.rate_per_s or 0.0)
    if math.isinf(rate):
        return np.zeros(n)
    return _from_gaps(rng.exponential(1.0 / rate, n))


@ARRIVALS.register("gamma")
def gamma_arrivals(spec: TrafficSpec, rng: np.random.Generator, n: int) -> np.ndarray:
    """Gamma gaps of mean 1/rate and coefficient of variation ``cv``: shape k = 1/cv², scale 1/(rate·k) (vLLM
    benchmark_serving's ``--burstiness`` is k)."""
    rate = float(spec.rate_per_s or 0.0)
    if math.isinf(rate):
        return np.zeros(n)
    shape = 1.0 / spec.cv**2
    return _from_gaps(rng.gamma(shape, 1.0 / (rate * shape), n))


@ARRIVALS.register("closed-loop")
def closed_loop_arrivals(spec: TrafficSpec, rng: np.random.Generator, n: int) -> np.ndarray:
    """NaN: a closed loop's arrivals follow completions, so the simulator decides them."""
    return np.full(n, np.nan)


@ARRIVALS.register("file")
def file_arrivals(spec: TrafficSpec, rng: np.random.Generator, n: int) -> np.ndarray:
    """The file's own arrival column (:func:`read_request_file`)."""
    assert spec.path is not None
    return np.array([r.arrival_s for r in read_request_file(spec.path, n)])


def _clip(values: np.ndarray, spec: LengthSpec) -> np.ndarray:
    high = spec.high if spec.high is not None else MAX_REQUEST_TOKENS
    return np.clip(np.rint(values), spec.low, high).astype(np.int64)


@LENGTHS.register("fixed")
def fixed_lengths(spec: LengthSpec, rng: np.random.Generator, n: int) -> np.ndarray:
    """Every request ``round(mean)`` tokens."""
    return _clip(np.full(n, spec.mean), spec)


@LENGTHS.register("uniform")
def uniform_lengths(spec: LengthSpec, rng: np.random.Generator, n: int) -> np.ndarray:
    """Integers drawn uniformly from [low, high]."""
    assert spec.high is not None
    return rng.integers(spec.low, spec.high, n, endpoint=True).astype(np.int64)


@LENGTHS.register("lognormal")
def lognormal_lengths(spec: LengthSpec, rng: np.random.Generator, n: int) -> np.ndarray:
    """exp(N(μ, σ²)), μ = ln median, or ln mean − σ²/2 (the lognormal's mean is exp(μ + σ²/2)); rounded, clipped."""
    mu = math.log(spec.median) if spec.median is not None else math.log(spec.mean) - spec.sigma**2 / 2
    return _clip(rng.lognormal(mu, spec.sigma, n), spec)


@dataclass(frozen=True)
class Mix:
    """A named workload: prompt and output lengths fitted to a public dataset's published statistics."""

    prompt: LengthSpec
    output: LengthSpec
    source: str


#: z of the 90th percentile of a standard normal: σ = ln(P90 / median) / z for a lognormal through both.
_Z90 = 1.2815515655446004


def _lognormal(median: float, p90: float, high: int) -> LengthSpec:
    return LengthSpec(dist="lognormal", median=median, sigma=math.log(p90 / median) / _Z90, high=high)


MIXES: Registry[Mix] = Registry("workload mix", ServingError, {
    "chat": Mix(
        prompt=_lognormal(1730, 5696, 32768), output=_lognormal(415, 834, 8192),
        source="openchat_sharegpt4 as Sarathi-Serve describes it (Agrawal et al., OSDI 2024, Table 2): prompt "
               "median 1730 / P90 5696 tokens, output median 415 / P90 834; a lognormal through median and P90"),
    "summarization": Mix(
        prompt=_lognormal(7059, 12985, 32768), output=_lognormal(208, 371, 4096),
        source="arxiv_summarization as Sarathi-Serve describes it (Agrawal et al., OSDI 2024, Table 2): prompt "
               "median 7059 / P90 12985 tokens, output median 208 / P90 371; a lognormal through median and P90"),
    "long-context": Mix(
        prompt=LengthSpec(dist="lognormal", mean=7590, sigma=1.0, high=131072),
        output=LengthSpec(dist="lognormal", mean=182, sigma=1.0, high=4096),
        source="Mooncake's production trace (Qin et al., arXiv 2407.00079, §4): mean input 7590 tokens, mean "
               "output 182; σ = 1 of the logarithm is an assumption (the paper gives means only)"),
})


def read_request_file(path: Path, limit: int | None = None) -> list[Request]:
    """Rows of a CSV (header ``arrival_s,prompt_len,output_len[,prefix_hit_tokens]``) or JSONL file (one object
    with those keys per line), sorted by arrival; at most ``limit``. A bad row raises :class:`ServingError`
    naming its line."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ServingError(f"request file {path}: cannot read it ({exc})") from None
    rows: list[tuple[int, dict[str, object]]] = []
    if path.suffix.lower() in (".jsonl", ".json", ".ndjson"):
        for line_no, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ServingError(f"request file {path}, line {line_no}: not JSON ({exc.msg})") from None
            if not isinstance(obj, dict):
                raise ServingError(f"request file {path}, line {line_no}: expected an object")
            rows.append((line_no, obj))
    else:
        reader = csv.DictReader(text.splitlines())
        rows = [(i + 2, dict(row)) for i, row in enumerate(reader)]
    out: list[tuple[float, int, int, int]] = []
    for line_no, row in rows:
        try:
            arrival = float(row["arrival_s"])  # type: ignore[arg-type]
            prompt = int(row["prompt_len"])  # type: ignore[call-overload]
            output = int(row["output_len"])  # type: ignore[call-overload]
            hit = int(row.get("prefix_hit_tokens") or 0)  # type: ignore[call-overload]
        except (KeyError, TypeError, ValueError) as exc:
            raise ServingError(f"request file {path}, line {line_no}: needs numeric arrival_s, prompt_len and "
                               f"output_len ({exc!r})") from None
        if not (math.isfinite(arrival) and arrival >= 0 and 1 <= prompt <= MAX_REQUEST_TOKENS
                and 1 <= output <= MAX_REQUEST_TOKENS and 0 <= hit < prompt):
            raise ServingError(f"request file {path}, line {line_no}: arrival_s must be >= 0, prompt_len and "
                               f"output_len in 1..{MAX_REQUEST_TOKENS}, prefix_hit_tokens below prompt_len")
        out.append((arrival, prompt, output, hit))
    if not out:
        raise ServingError(f"request file {path}: no requests")
    out.sort(key=lambda r: r[0])
    out = out[:limit] if limit is not None else out
    return [Request(i, a, p, o, h) for i, (a, p, o, h) in enumerate(out)]


def generate_requests(spec: TrafficSpec) -> list[Request]:
    """``spec.requests`` requests, ids 0… in arrival order; the same spec gives the same list. Arrivals, prompt
    and output lengths draw from their own streams of the seed, so changing one leaves the others as they were.
    Closed loop: ``arrival_s`` is NaN (the simulator sends each request when a user is free)."""
    if spec.arrival == "file":
        assert spec.path is not None
        return read_request_file(spec.path, spec.requests)
    arrival_fn = ARRIVALS.lookup(spec.arrival)
    prompt_spec, output_spec = spec.prompt, spec.output
    if spec.mix is not None:
        mix = MIXES.lookup(spec.mix)
        prompt_spec, output_spec = mix.prompt, mix.output
    n = spec.requests
    arrivals = arrival_fn(spec, np.random.default_rng([spec.seed, 0]), n)
    prompts = LENGTHS.lookup(prompt_spec.dist)(prompt_spec, np.random.default_rng([spec.seed, 1]), n)
    outputs = LENGTHS.lookup(output_spec.dist)(output_spec, np.random.default_rng([spec.seed, 2]), n)
    return [Request(i, float(a), int(p), int(o)) for i, (a, p, o) in enumerate(zip(arrivals, prompts, outputs,
                                                                                 strict=True))]
