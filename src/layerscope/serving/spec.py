"""What a serving simulation is asked: traffic, scheduler, model, hardware and plan, as pydantic models.

Every model is frozen, refuses unknown fields and exports its attribute docstrings into its JSON schema.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from layerscope.errors import LayerscopeError

__all__ = ["SLO", "LengthSpec", "SchedulerSpec", "ServingError", "ServingPlan", "ServingRequest", "TrafficSpec",
           "parse_slo"]

_CONFIG = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

#: Longest request a traffic spec may produce (tokens); far beyond any model's context.
MAX_REQUEST_TOKENS = 2**22
#: Most requests one simulation takes.
MAX_REQUESTS = 2**24


class ServingError(LayerscopeError):
    """A serving simulation cannot run: bad traffic, scheduler or SLO, a model that leaves no KV cache."""


class LengthSpec(BaseModel):
    """A distribution of token counts (prompt or output), one value per request, at least 1.

    ``fixed``: every request ``mean``; ``uniform``: integers in [``low``, ``high``]; ``lognormal``: exp(N(μ, σ²))
    with σ = ``sigma`` and μ from ``median`` (μ = ln median) or else ``mean`` (μ = ln mean − σ²/2), rounded and
    clipped to [``low``, ``high``]."""

    model_config = _CONFIG

    dist: str = "fixed"
    """Registry name in :data:`layerscope.serving.traffic.LENGTHS`: fixed, uniform or lognormal."""
    mean: float = Field(default=128, gt=0, le=MAX_REQUEST_TOKENS)
    """Tokens (fixed), or the distribution's mean (lognormal without ``median``)."""
    median: float | None = Field(default=None, gt=0, le=MAX_REQUEST_TOKENS)
    """Median tokens (lognormal; takes precedence over ``mean``)."""
    low: int = Field(default=1, ge=1, le=MAX_REQUEST_TOKENS)
    """Smallest value (uniform's lower bound; a clip for lognormal)."""
    high: int | None = Field(default=None, ge=1, le=MAX_REQUEST_TOKENS)
    """Largest value (uniform's upper bound, required there; a clip for lognormal)."""
    sigma: float = Field(default=1.0, gt=0, le=10)
    """σ of the logarithm (lognormal)."""

    @model_validator(mode="after")
    def _check(self) -> LengthSpec:
        if self.high is not None and self.high < self.low:
            raise ValueError(f"high ({self.high}) is below low ({self.low})")
        if self.dist == "uniform" and self.high is None:
            raise ValueError("uniform lengths need high (and low, default 1)")
        return self


class TrafficSpec(BaseModel):
    """The requests: when they arrive and how long their prompts and outputs are."""

    model_config = _CONFIG

    arrival: str = "poisson"
    """Registry name in :data:`layerscope.serving.traffic.ARRIVALS`: poisson, gamma, closed-loop or file."""
    rate_per_s: float | None = Field(default=None, gt=0, allow_inf_nan=True)
    """Mean arrivals per second (poisson, gamma); ``inf``: every request at t = 0."""
    cv: float = Field(default=1.0, gt=0, le=100)
    """Coefficient of variation of the gamma inter-arrival times (1: Poisson; above 1: burstier)."""
    users: int | None = Field(default=None, gt=0, le=2**20)
    """Concurrent users of a closed loop: each sends its next request ``think_s`` after its last one finished."""
    think_s: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    """Think time between a closed-loop user's requests (seconds)."""
    requests: int = Field(default=1000, gt=0, le=MAX_REQUESTS)
    """Requests to simulate (a file: at most this many of its rows)."""
    prompt: LengthSpec = LengthSpec(mean=512)
    """Prompt tokens per request."""
    output: LengthSpec = LengthSpec(mean=128)
    """Output tokens per request (the first from the prefill)."""
    mix: str | None = None
    """Registry name in :data:`layerscope.serving.traffic.MIXES` (chat, summarization, long-context): replaces
    ``prompt`` and ``output`` with a published dataset's lengths."""
    path: Path | None = None
    """CSV or JSONL of ``arrival_s, prompt_len, output_len`` rows (arrival ``file``)."""
    seed: int = Field(default=0, ge=0, le=2**63 - 1)
    """Seed of every random draw: the same seed gives the same requests, byte for byte."""

    @model_validator(mode="after")
    def _check(self) -> TrafficSpec:
        if self.arrival in ("poisson", "gamma") and self.rate_per_s is None:
            raise ValueError(f"{self.arrival} arrivals need rate_per_s")
        if self.arrival == "closed-loop" and self.users is None:
            raise ValueError("closed-loop arrivals need users")
        if self.arrival == "file" and self.path is None:
            raise ValueError("file arrivals need path")
        return self


class SchedulerSpec(BaseModel):
    """How each engine batches its requests and manages its KV cache."""

    model_config = _CONFIG

    name: str = "vllm"
    """Registry name in :data:`layerscope.serving.schedulers.SCHEDULERS`: static, vllm, sarathi, disaggregated."""
    max_num_seqs: int = Field(default=256, gt=0, le=2**16)
    """Most requests running at once on an engine (vLLM ``--max-num-seqs``)."""
    max_num_batched_tokens: int = Field(default=8192, gt=0, le=2**24)
    """Token budget of one step (vLLM ``--max-num-batched-tokens``; Sarathi-Serve's token budget)."""
    chunked_prefill: bool = True
    """Split prompts into chunks that fit the token budget beside the decodes (vLLM ``--enable-chunked-prefill``)."""
    priority: Literal["prefill-first", "decode-first"] = "prefill-first"
    """Who gets the token budget first: waiting prompts (vLLM V0's default scheduler) or running requests
    (vLLM's chunked-prefill and V1 scheduler)."""
    block_tokens: int = Field(default=16, gt=0, le=2**12)
    """Tokens per KV-cache block (vLLM ``--block-size``)."""
    preemption: Literal["recompute", "swap"] = "recompute"
    """What a request evicted for lack of KV blocks loses: its KV (recomputed as a prompt when readmitted) or
    nothing (its blocks copied to host memory over PCIe and back)."""
    swap_bytes_per_s: float = Field(default=50e9, gt=0, allow_inf_nan=False)
    """Host ↔ GPU copy rate of swapped blocks (an assumption: PCIe 5.0 x16, 64 GB/s per direction, at ~80%)."""
    prefix_hit_rate: float = Field(default=0.0, ge=0, le=1)
    """Share of each prompt found in the prefix cache (whole blocks, at least one prompt token computed)."""
    prefill_replicas: int = Field(default=1, gt=0, le=2**10)
    """Prefill engines (disaggregated)."""
    decode_replicas: int = Field(default=1, gt=0, le=2**10)
    """Decode engines (disaggregated)."""
    static_batch: int = Field(default=8, gt=0, le=2**16)
    """Requests per batch (static)."""


class ServingPlan(BaseModel):
    """One engine's parallel plan: the fields of :class:`layerscope.app.requests.ParallelPlan`, which it accepts
    as is (``from_attributes``). ``data_parallel`` engines each serve their own requests."""

    model_config = ConfigDict(frozen=True, extra="ignore", from_attributes=True, use_attribute_docstrings=True)

    tensor_parallel: int = Field(default=1, gt=0, le=2**16)
    """Devices each layer is split across."""
    pipeline_parallel: int = Field(default=1, gt=0, le=2**16)
    """Pipeline stages (one micro-batch: a step is the sum of the stages)."""
    expert_parallel: int = Field(default=1, gt=0, le=2**16)
    """Devices the routed experts are spread over."""
    data_parallel: int = Field(default=1, gt=0, le=2**16)
    """Independent engines of this plan (multiplies ``ServingRequest.replicas``)."""
    micro_batches: int = Field(default=1, gt=0, le=1)
    """Micro-batches per step: 1 (a serving step is one batch)."""
    sequence_parallel: bool = False
    """Megatron sequence parallelism over the tensor-parallel devices."""
    two_batch_overlap: bool = False
    """Not simulated (refused)."""

    @model_validator(mode="after")
    def _check(self) -> ServingPlan:
        if self.two_batch_overlap:
            raise ValueError("two_batch_overlap is not simulated in serving: its step time is not a sum of ops")
        return self


class ServingRequest(BaseModel):
    """A serving simulation: which model on which hardware under which plan, fed which traffic, batched how."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True,
                              arbitrary_types_allowed=True)

    model: Any = "llama-3.1-8b"
    """A catalog name, HF id, config.json or directory, or a loaded ModelSpec."""
    hardware: Any = "h100-sxm"
    """A preset or cluster name, a spec file, or a loaded HardwareSpec."""
    plan: ServingPlan = ServingPlan()
    """Each engine's parallel plan (an ``app.requests.ParallelPlan`` is accepted)."""
    replicas: int = Field(default=1, gt=0, le=2**10)
    """Engines, each a whole copy of the plan, serving their own requests; a request goes to the engine with the
    fewest unfinished requests (least loaded; ties to the lowest index). Disaggregated: ignored (the
    scheduler's prefill_replicas and decode_replicas)."""
    traffic: TrafficSpec = TrafficSpec(rate_per_s=4.0)
    """The requests."""
    scheduler: SchedulerSpec = SchedulerSpec()
    """The batching policy and KV-cache management."""
    weight_dtype: str = "bf16"
    """Weight data type."""
    act_dtype: str = "bf16"
    """Activation data type."""
    kv_dtype: str = "bf16"
    """KV-cache data type."""
    cost_model: str = "roofline"
    """Cost model timing each step's forward pass."""
    execution: str | None = None
    """Execution profile (``cost.execution``); None: the hardware spec's own."""
    kv_capacity_tokens: int | None = Field(default=None, gt=0, le=2**40)
    """KV-cache tokens per engine; None: what the memory leaves (``serving.kv.kv_capacity_tokens``)."""
    gpu_memory_utilization: float = Field(default=0.9, gt=0, le=1)
    """Share of each GPU's memory the engine may use (vLLM ``--gpu-memory-utilization``, default 0.9)."""
    timer: Literal["fast", "exact"] = "fast"
    """Step times from interpolated tables (fast; ``serving.timer``) or one graph per distinct step (exact)."""


class SLO(BaseModel):
    """Service-level objectives a request must meet to count in the goodput (vLLM benchmark_serving ``--goodput``)."""

    model_config = _CONFIG

    ttft_ms: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    """Largest time to first token (ms)."""
    tpot_ms: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    """Largest time per output token after the first (ms)."""
    e2el_ms: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    """Largest end-to-end latency (ms)."""


_SLO_PART = re.compile(r"^\s*(ttft|tpot|e2el)\s*=\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(ms|s)?\s*$")


def parse_slo(text: str) -> SLO:
    """``"ttft=200ms,tpot=50ms"`` → :class:`SLO` (``ms`` or ``s``; a bare number is ms). A bad part raises
    :class:`ServingError` naming it."""
    values: dict[str, float] = {}
    for part in text.split(","):
        if not part.strip():
            continue
        match = _SLO_PART.match(part)
        if match is None:
            raise ServingError(f"SLO part {part.strip()!r}: expected NAME=VALUE[ms|s] with NAME one of ttft, tpot, "
                               f"e2el (e.g. ttft=200ms,tpot=50ms)")
        name, number, unit = match.groups()
        if f"{name}_ms" in values:
            raise ServingError(f"SLO part {part.strip()!r}: {name} given twice")
        value = float(number) * (1000.0 if unit == "s" else 1.0)
        if not math.isfinite(value) or value <= 0:
            raise ServingError(f"SLO part {part.strip()!r}: the limit must be a positive number")
        values[f"{name}_ms"] = value
    if not values:
        raise ServingError(f"SLO {text!r}: no limits given (e.g. ttft=200ms,tpot=50ms)")
    return SLO(**values)
