"""The metrics against hand-computed values (vLLM benchmark_serving's definitions)."""

from __future__ import annotations

import numpy as np
import pytest

from layerscope.serving import ServingRequest, ServingRun, TrafficSpec, parse_slo, summarize, time_series


def _run() -> ServingRun:
    # Request 0 arrives at 0 and makes tokens at 0.1, 0.2, 0.4; request 1 arrives at 1.0: tokens at 1.3, 1.4.
    f = np.array
    return ServingRun(
        request=ServingRequest(traffic=TrafficSpec(rate_per_s=1.0, requests=2)), id=f([0, 1]),
        arrival_s=f([0.0, 1.0]), first_token_s=f([0.1, 1.3]), finish_s=f([0.4, 1.4]), prompt_len=f([10, 20]),
        output_len=f([3, 2]), prefix_hit_tokens=f([0, 0]), queued_s=f([0.0, 0.2]), preemptions=f([0, 1]),
        replica=f([0, 0]), token_s=f([0.1, 0.2, 0.4, 1.3, 1.4]), token_offsets=f([0, 3, 5]),
        start_s=f([0.0, 0.1, 0.2, 1.2, 1.3]), end_s=f([0.1, 0.2, 0.4, 1.3, 1.4]), iteration_replica=f([0] * 5),
        prefill_tokens=f([10, 0, 0, 20, 0]), decode_seqs=f([0, 1, 1, 0, 1]), batch_seqs=f([1, 1, 1, 1, 1]),
        kv_blocks_used=f([1, 1, 1, 2, 2]), queue_len=f([0, 0, 0, 0, 0]), running=f([1, 1, 1, 1, 1]),
        kv_capacity_blocks=4, block_tokens=16, roles=("mixed",), kv_bytes_per_token=1.0)


def test_latencies_and_throughputs_by_hand():
    m = summarize(_run())
    assert m.completed == 2 and m.duration_s == pytest.approx(1.4)
    assert m.mean_ttft_ms == pytest.approx(200.0) and m.median_ttft_ms == pytest.approx(200.0)
    assert m.p99_ttft_ms == pytest.approx(100 + 0.99 * 200)  # numpy's linear percentile between 100 and 300
    # TPOT: (0.4 − 0.1) / 2 = 150 ms and (1.4 − 1.3) / 1 = 100 ms.
    assert m.mean_tpot_ms == pytest.approx(125.0)
    # ITL: 100, 200 (request 0) and 100 ms (request 1); the gap between requests is no ITL.
    assert m.mean_itl_ms == pytest.approx(400.0 / 3) and m.median_itl_ms == pytest.approx(100.0)
    assert m.mean_e2el_ms == pytest.approx(400.0)
    assert m.request_throughput == pytest.approx(2 / 1.4)
    assert m.output_throughput == pytest.approx(5 / 1.4)
    assert m.total_token_throughput == pytest.approx(35 / 1.4)
    assert m.preemptions == 1 and m.mean_queue_s == pytest.approx(0.1)
    assert m.max_kv_usage == pytest.approx(0.5)
    assert m.request_goodput is None


def test_goodput_counts_requests_meeting_every_limit():
    m = summarize(_run(), parse_slo("ttft=200ms"))
    assert m.request_goodput == pytest.approx(1 / 1.4) and m.goodput_share == pytest.approx(0.5)
    m = summarize(_run(), parse_slo("ttft=1s,tpot=120ms"))
    assert m.goodput_share == pytest.approx(0.5)  # request 0's TPOT is 150 ms


def test_itl_of_one_request():
    assert np.allclose(_run().itl_s(0), [0.1, 0.2])


def test_time_series_per_engine():
    (series,) = time_series(_run())
    assert series.kv_usage == [0.25, 0.25, 0.25, 0.5, 0.5]
    assert series.time_s[0] == 0.0
