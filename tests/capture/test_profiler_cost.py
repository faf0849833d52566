"""The profiler's per-event cost: a real cold A/B through torch, and its arithmetic."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from layerscope.capture.profiler_cost import ProfilerEventCost, measure_profiler_event_cost


def test_profiler_event_cost_is_measured_hot_and_cold_with_and_without_the_profiler() -> None:
    cost = measure_profiler_event_cost(8 * 1024 * 1024, samples=5)
    # LlamaRMSNorm's eager sequence records its casts, pow, mean (and what it calls), add, rsqrt, two muls.
    assert cost.events >= 8 and cost.samples == 5
    assert min(cost.hot_off_s, cost.hot_on_s, cost.cold_off_s, cost.cold_on_s) > 0
    assert cost.per_event_s == pytest.approx(max(0.0, cost.hot_on_s - cost.hot_off_s) / cost.events)
    assert cost.cold_per_event_s == pytest.approx(max(0.0, cost.cold_on_s - cost.cold_off_s) / cost.events)
    # Any CPU records an event in well under 100 µs; a call after a weight stream is slower than in a loop.
    assert 0 <= cost.per_event_s < 1e-4 and 0 <= cost.cold_per_event_s < 1e-4
    assert cost.cold_off_s > cost.hot_off_s


def test_a_negative_cost_is_refused() -> None:
    with pytest.raises(ValueError, match="per_event_s"):
        ProfilerEventCost(per_event_s=-1e-6, cold_per_event_s=0.0, hot_off_s=1e-5, hot_on_s=1e-5, cold_off_s=1e-5,
                          cold_on_s=1e-5, events=10, samples=5)
