"""Serving simulation (issue #29): traffic, batching schedulers, a paged KV cache and per-step times from the cost
model, and the metrics vLLM's benchmark_serving reports. See docs/serving.md."""

from layerscope.serving.kv import KvCapacity, kv_bytes_per_token, kv_capacity
from layerscope.serving.metrics import ServingMetrics, TimeSeries, summarize, time_series, tpot_s
from layerscope.serving.schedulers import SCHEDULERS, SchedulerPolicy
from layerscope.serving.simulator import ServingRun, run_serving, simulate_requests
from layerscope.serving.spec import (
    SLO,
    LengthSpec,
    SchedulerSpec,
    ServingError,
    ServingPlan,
    ServingRequest,
    TrafficSpec,
    parse_slo,
)
from layerscope.serving.timer import StepTimer
from layerscope.serving.traffic import ARRIVALS, LENGTHS, MIXES, Mix, Request, generate_requests, read_request_file

__all__ = ["ARRIVALS", "LENGTHS", "MIXES", "SCHEDULERS", "SLO", "KvCapacity", "LengthSpec", "Mix", "Request",
           "SchedulerPolicy", "SchedulerSpec", "ServingError", "ServingMetrics", "ServingPlan", "ServingRequest",
           "ServingRun", "StepTimer", "TimeSeries", "TrafficSpec", "generate_requests", "kv_bytes_per_token",
           "kv_capacity", "parse_slo", "read_request_file", "run_serving", "simulate_requests", "summarize",
           "time_series", "tpot_s"]
