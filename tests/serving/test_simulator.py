"""The serving simulation: conservation (every request once, every token counted), KV capacity, Little's law,
static batching against ``estimate``, determinism, and properties over random traffic."""

from __future__ import annotations

import gc
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from layerscope.cost.api import estimate
from layerscope.serving import (
    LengthSpec,
    Request,
    SchedulerSpec,
    ServingError,
    ServingRequest,
    ServingRun,
    TrafficSpec,
    run_serving,
    simulate_requests,
    simulator,
    summarize,
)
from layerscope.workload import Workload

from .conftest import HARDWARE, SMALL_MODEL


def _request(**fields) -> ServingRequest:
    base = {"model": SMALL_MODEL, "hardware": HARDWARE}
    base.update(fields)
    return ServingRequest(**base)


def _check_invariants(run: ServingRun) -> None:
    n = len(run.id)
    # Every request finishes exactly once, after its first token, which comes after its arrival.
    assert not np.isnan(run.finish_s).any()
    assert np.all(run.first_token_s >= run.arrival_s)
    assert np.all(run.finish_s >= run.first_token_s)
    # Every token is counted: each request made exactly its output tokens, in time order, the last at finish.
    assert np.array_equal(np.diff(run.token_offsets), run.output_len)
    for i in range(n):
        times = run.token_s[run.token_offsets[i]:run.token_offsets[i + 1]]
        assert np.all(np.diff(times) >= 0)
        assert times[0] == run.first_token_s[i] and times[-1] == run.finish_s[i]
    # KV usage never exceeds capacity; steps of one engine never overlap.
    assert run.kv_blocks_used.max() <= run.kv_capacity_blocks
    assert np.all(run.kv_blocks_used >= 0)
    for replica in np.unique(run.iteration_replica):
        mask = run.iteration_replica == replica
        assert np.all(run.start_s[mask][1:] >= run.end_s[mask][:-1] - 1e-12)
    # Token accounting of the steps: decodes plus prompt-finishing chunks make the tokens.
    assert int(run.decode_seqs.sum()) <= len(run.token_s)
    # Each token's iteration ends at its time; a request's last token comes from the engine it finished on.
    assert np.array_equal(run.end_s[run.token_iteration], run.token_s)
    last = run.token_iteration[run.token_offsets[1:] - 1]
    assert np.array_equal(run.iteration_replica[last], run.replica)


def test_static_batching_equals_estimate_generate(small_spec, h100):
    batch, prompt, output = 8, 512, 64
    est = estimate(small_spec, h100, Workload(phase="generate", batch=batch, prompt_len=prompt,
                                              decode_steps=output - 1))
    traffic = TrafficSpec(rate_per_s=math.inf, requests=batch, prompt=LengthSpec(mean=prompt),
                          output=LengthSpec(mean=output))
    for timer in ("fast", "exact"):
        run = run_serving(_request(traffic=traffic, timer=timer,
                                   scheduler=SchedulerSpec(name="static", static_batch=batch)))
        _check_invariants(run)
        assert np.allclose(run.finish_s, run.finish_s[0])
        assert run.finish_s[0] == pytest.approx(est.e2e_s, rel=0.01), timer
        assert run.first_token_s[0] == pytest.approx(est.ttft_s, rel=0.01), timer


def test_identical_bytes_for_identical_seeds():
    request = _request(traffic=TrafficSpec(rate_per_s=30, requests=300, mix="chat", seed=5),
                       scheduler=SchedulerSpec(max_num_seqs=64))
    a, b = run_serving(request), run_serving(request)
    for name in ("arrival_s", "first_token_s", "finish_s", "token_s", "token_iteration", "start_s", "kv_blocks_used",
                 "queued_s"):
        assert getattr(a, name).tobytes() == getattr(b, name).tobytes(), name


def test_littles_law_in_steady_state():
    # L (time-averaged requests in the system, from the engine's own per-step counters) = λ·W (arrival rate
    # times mean time in the system) within 3%: the counters sample at step starts, so a request arriving
    # mid-step is missed until the next step (a bias of λ·(step/2) requests, well under 1% here).
    run = run_serving(_request(traffic=TrafficSpec(rate_per_s=40, requests=1500, prompt=LengthSpec(mean=256),
                                                   output=LengthSpec(dist="uniform", low=32, high=160), seed=1)))
    _check_invariants(run)
    window = run.end_s.max() - run.arrival_s.min()
    in_system = run.queue_len + run.running
    l_counters = float((in_system * (run.end_s - run.start_s)).sum() / window)
    lam_w = float((run.finish_s - run.arrival_s).sum() / window)
    assert l_counters == pytest.approx(lam_w, rel=0.03)
    assert lam_w > 2  # a busy system: several requests in flight on average


def test_preemption_by_recompute_and_swap_keeps_every_invariant():
    traffic = TrafficSpec(rate_per_s=math.inf, requests=40, prompt=LengthSpec(dist="uniform", low=64, high=400),
                          output=LengthSpec(dist="uniform", low=50, high=300), seed=2)
    for preemption in ("recompute", "swap"):
        run = run_serving(_request(traffic=traffic, kv_capacity_tokens=2048,
                                   scheduler=SchedulerSpec(preemption=preemption, max_num_seqs=32)))
        _check_invariants(run)
        assert run.preemptions.sum() > 0, preemption
        assert run.kv_blocks_used.max() == pytest.approx(run.kv_capacity_blocks, abs=8)


def test_swap_costs_pcie_time():
    traffic = TrafficSpec(rate_per_s=math.inf, requests=40, prompt=LengthSpec(dist="uniform", low=64, high=400),
                          output=LengthSpec(dist="uniform", low=50, high=300), seed=2)
    fast = run_serving(_request(traffic=traffic, kv_capacity_tokens=2048,
                                scheduler=SchedulerSpec(preemption="swap", swap_bytes_per_s=1e15)))
    slow = run_serving(_request(traffic=traffic, kv_capacity_tokens=2048,
                                scheduler=SchedulerSpec(preemption="swap", swap_bytes_per_s=1e8)))
    assert slow.finish_s.max() > fast.finish_s.max()


def test_prefix_cache_hits_shorten_the_prompts():
    traffic = TrafficSpec(rate_per_s=5, requests=50, prompt=LengthSpec(mean=2048), output=LengthSpec(mean=8))
    cold = summarize(run_serving(_request(traffic=traffic)))
    warm_run = run_serving(_request(traffic=traffic, scheduler=SchedulerSpec(prefix_hit_rate=0.75)))
    assert set(warm_run.prefix_hit_tokens.tolist()) == {1520}  # whole blocks of 0.75 · 2047: 95 · 16
    assert summarize(warm_run).mean_ttft_ms < 0.5 * cold.mean_ttft_ms


def test_disaggregated_sends_the_kv_and_decodes_elsewhere():
    traffic = TrafficSpec(rate_per_s=20, requests=60, prompt=LengthSpec(mean=1024), output=LengthSpec(mean=32))
    run = run_serving(_request(traffic=traffic, scheduler=SchedulerSpec(name="disaggregated", prefill_replicas=1,
                                                                        decode_replicas=2)))
    _check_invariants(run)
    assert run.roles == ("prefill", "decode", "decode")
    assert set(run.replica.tolist()) == {1, 2}  # every request finished on a decode engine
    # The first decode token comes at least one KV transfer after the first token.
    first_gap = np.array([run.token_s[run.token_offsets[i] + 1] - run.token_s[run.token_offsets[i]]
                          for i in range(len(run.id))])
    from layerscope.cost.collectives import collective_time_s
    from layerscope.hardware import load_hardware

    hw = load_hardware(HARDWARE)
    transfer = float(collective_time_s("send_recv", 1024 * run.kv_bytes_per_token, 2, hw.interconnect))
    assert transfer > 0 and np.all(first_gap >= transfer)


def test_closed_loop_holds_at_most_its_users():
    run = run_serving(_request(traffic=TrafficSpec(arrival="closed-loop", users=3, think_s=0.01, requests=30,
                                                   prompt=LengthSpec(mean=128), output=LengthSpec(mean=16))))
    _check_invariants(run)
    assert int((run.queue_len + run.running).max()) <= 3
    events = sorted([(t, 1) for t in run.arrival_s] + [(t, -1) for t in run.finish_s])
    assert max(np.cumsum([e for _, e in events])) <= 3


def test_replicas_share_the_load():
    run = run_serving(_request(replicas=2, traffic=TrafficSpec(rate_per_s=50, requests=200)))
    _check_invariants(run)
    counts = np.bincount(run.replica, minlength=2)
    assert abs(int(counts[0]) - int(counts[1])) < 40


def test_a_request_larger_than_the_cache_is_refused():
    with pytest.raises(ServingError, match="needs"):
        run_serving(_request(kv_capacity_tokens=256, traffic=TrafficSpec(rate_per_s=1, requests=2)))


def test_unknown_scheduler_lists_the_known_ones():
    with pytest.raises(ServingError, match="known: disaggregated, sarathi, static, vllm"):
        run_serving(_request(scheduler=SchedulerSpec(name="orca"), traffic=TrafficSpec(rate_per_s=1, requests=2)))


SCHEDULER_NAMES = ["static", "vllm", "sarathi", "disaggregated"]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(SCHEDULER_NAMES),
       lengths=st.lists(st.tuples(st.integers(1, 600), st.integers(1, 40)), min_size=1, max_size=12),
       gaps=st.lists(st.floats(0, 0.05), min_size=12, max_size=12),
       chunked=st.booleans(), decode_first=st.booleans(), capacity=st.sampled_from([None, 1024]),
       preemption=st.sampled_from(["recompute", "swap"]), budget=st.sampled_from([64, 512, 8192]))
def test_random_traffic_keeps_every_invariant(name, lengths, gaps, chunked, decode_first, capacity, preemption,
                                              budget):
    arrivals = np.cumsum(gaps[:len(lengths)])
    requests = [Request(i, float(a), p, o) for i, (a, (p, o)) in enumerate(zip(arrivals, lengths, strict=False))]
    sched = SchedulerSpec(name=name, chunked_prefill=chunked, max_num_seqs=min(8, budget),
                          max_num_batched_tokens=budget, priority="decode-first" if decode_first else "prefill-first",
                          preemption=preemption, static_batch=4)
    request = _request(scheduler=sched, kv_capacity_tokens=capacity, traffic=TrafficSpec(rate_per_s=1))
    run = simulate_requests(request, requests)
    _check_invariants(run)
    assert summarize(run).completed == len(requests)


def test_progress_reports_the_finished_share():
    seen: list[float] = []
    run_serving(_request(traffic=TrafficSpec(rate_per_s=50, requests=300)), progress=seen.append)
    assert seen == sorted(seen) and seen[-1] == 1.0 and len(seen) > 10


def test_chunked_prefill_respects_the_token_budget():
    run = run_serving(_request(traffic=TrafficSpec(rate_per_s=math.inf, requests=20, prompt=LengthSpec(mean=3000),
                                                   output=LengthSpec(mean=4)),
                               scheduler=SchedulerSpec(max_num_batched_tokens=1024, max_num_seqs=16)))
    _check_invariants(run)
    assert int((run.prefill_tokens + run.decode_seqs).max()) <= 1024
    assert int(run.prefill_tokens.sum()) == 20 * 3000


def test_blocks_used_in_leaps_equal_the_step_by_step_count():
    # The closed form (each decode's block crossings) against every step's blocks summed, as a step would count
    # them: max(blocks_i, ceil((ctx_i + j + 1) / B)) over the decodes, at steps j = 0 … k − 1.
    from layerscope.serving.simulator import _blocks_used, _GrowingBlocks

    rng = np.random.default_rng(3)
    block = 16
    used, lens, expected = [], [], []
    for _ in range(200):
        d, k = int(rng.integers(1, 40)), int(rng.integers(2, 300))
        ctx = rng.integers(1, 3000, d)
        blocks = -(-ctx // block) + rng.integers(0, 3, d) * (rng.random(d) < 0.2)  # some hold spare blocks
        before = int(rng.integers(0, 10_000))
        j = np.arange(k)
        grown = np.maximum(blocks[:, None], -(-(ctx[:, None] + j[None, :] + 1) // block)).sum(axis=0) - blocks.sum()
        if rng.random() < 0.3:  # a leap whose blocks were counted as it ran
            used.append(before + grown)
        else:
            used.append(_GrowingBlocks(before, ctx, blocks))
        lens.append(k)
        expected.append(before + grown)
    got = _blocks_used(used, np.array(lens), block)
    assert np.array_equal(got, np.concatenate(expected))


def test_the_collector_is_paused_only_while_the_loop_runs(monkeypatch):
    request = _request(traffic=TrafficSpec(rate_per_s=10, requests=20))
    seen: list[bool] = []
    monkeypatch.setattr(simulator._Simulation, "_dispatch",
                        lambda self, req, original=simulator._Simulation._dispatch: seen.append(gc.isenabled())
                        or original(self, req))
    assert gc.isenabled()
    run_serving(request)
    assert gc.isenabled() and seen and not any(seen)

    def fail(self, req):
        raise ServingError("boom")

    monkeypatch.setattr(simulator._Simulation, "_dispatch", fail)
    with pytest.raises(ServingError, match="boom"):
        run_serving(request)
    assert gc.isenabled()


@pytest.mark.parametrize("preemption", ["recompute", "swap"])
@pytest.mark.parametrize("outputs", [(1, 1, 1), (40, 40, 40)])
def test_a_request_preempted_in_the_step_that_admitted_it_gives_its_blocks_back(preemption, outputs):
    """Prefill-first, chunked, a 512-token budget on 1,024 KV tokens (64 blocks of 16): the three prompts are
    admitted with blocks promised to their chunks, and the running prompt then needs more than is left, so the
    last one admitted is preempted in the same step. Its promised blocks (and its chunk's tokens) go back to the
    step: before, they stayed promised and, under recompute, every request was preempted in turn and the engine
    stopped with "no step fits" (found by test_random_traffic_keeps_every_invariant)."""
    requests = [Request(i, 0.001 * i, p, o) for i, (p, o) in enumerate(zip((593, 129, 273), outputs, strict=True))]
    sched = SchedulerSpec(name="vllm", chunked_prefill=True, max_num_seqs=8, max_num_batched_tokens=512,
                          priority="prefill-first", preemption=preemption)
    run = simulate_requests(_request(scheduler=sched, kv_capacity_tokens=1024, traffic=TrafficSpec(rate_per_s=1)),
                            requests)
    _check_invariants(run)
    assert summarize(run).completed == 3
