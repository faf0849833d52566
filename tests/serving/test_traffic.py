"""Arrival processes, length distributions, mixes and request files."""

from __future__ import annotations

import math

import numpy as np
import pytest

from layerscope.serving import ARRIVALS, LENGTHS, MIXES, LengthSpec, ServingError, TrafficSpec, generate_requests


def _arrays(spec: TrafficSpec) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    reqs = generate_requests(spec)
    return (np.array([r.arrival_s for r in reqs]), np.array([r.prompt_len for r in reqs]),
            np.array([r.output_len for r in reqs]))


def test_identical_bytes_for_identical_seeds():
    spec = TrafficSpec(rate_per_s=5, requests=500, mix="chat", seed=7)
    a, b = _arrays(spec), _arrays(spec)
    assert all(x.tobytes() == y.tobytes() for x, y in zip(a, b, strict=True))
    c = _arrays(spec.model_copy(update={"seed": 8}))
    assert a[0].tobytes() != c[0].tobytes()


def test_streams_are_independent():
    # Changing the arrival process leaves the lengths as they were.
    base = TrafficSpec(rate_per_s=5, requests=200, mix="chat", seed=3)
    other = base.model_copy(update={"arrival": "gamma", "cv": 3.0})
    assert _arrays(base)[1].tobytes() == _arrays(other)[1].tobytes()


def test_poisson_rate_and_gamma_cv():
    n = 20000
    arr, _, _ = _arrays(TrafficSpec(rate_per_s=10, requests=n))
    gaps = np.diff(arr)
    assert arr[0] == 0.0
    assert abs(gaps.mean() - 0.1) < 0.1 * 0.03  # mean 1/rate within 3% (σ/√n ≈ 0.7%)
    assert abs(gaps.std() / gaps.mean() - 1.0) < 0.03
    arr, _, _ = _arrays(TrafficSpec(arrival="gamma", rate_per_s=10, cv=2.0, requests=n))
    gaps = np.diff(arr)
    assert abs(gaps.mean() - 0.1) < 0.1 * 0.06
    assert abs(gaps.std() / gaps.mean() - 2.0) < 0.1


def test_infinite_rate_sends_everything_at_zero():
    arr, _, _ = _arrays(TrafficSpec(rate_per_s=math.inf, requests=10))
    assert not arr.any()


def test_length_distributions():
    rng = np.random.default_rng(0)
    assert set(LENGTHS.lookup("fixed")(LengthSpec(mean=100), rng, 5)) == {100}
    u = LENGTHS.lookup("uniform")(LengthSpec(dist="uniform", low=10, high=20), rng, 5000)
    assert u.min() == 10 and u.max() == 20
    ln = LENGTHS.lookup("lognormal")(LengthSpec(dist="lognormal", mean=500, sigma=0.5), rng, 50000)
    assert abs(ln.mean() - 500) < 10
    med = LENGTHS.lookup("lognormal")(LengthSpec(dist="lognormal", median=300, sigma=1.0, high=1000), rng, 20000)
    assert abs(np.median(med) - 300) < 10 and med.max() == 1000


@pytest.mark.parametrize("name", ["chat", "summarization", "long-context"])
def test_mixes_cite_a_dataset_and_match_their_statistics(name):
    mix = MIXES.lookup(name)
    assert "arXiv" in mix.source or "OSDI" in mix.source
    _, prompts, _ = _arrays(TrafficSpec(rate_per_s=1, requests=20000, mix=name))
    if mix.prompt.median is not None:  # fitted through median and P90
        assert abs(np.median(prompts) / mix.prompt.median - 1) < 0.03
        p90 = mix.prompt.median * math.exp(1.2815515655446004 * mix.prompt.sigma)
        assert abs(np.percentile(prompts, 90) / p90 - 1) < 0.05


def test_unknown_names_list_the_known_ones():
    with pytest.raises(ServingError, match="known: closed-loop, file, gamma, poisson"):
        generate_requests(TrafficSpec(arrival="uniform", requests=3))
    with pytest.raises(ServingError, match="known: chat, long-context, summarization"):
        generate_requests(TrafficSpec(rate_per_s=1, mix="code"))
    assert "poisson" in ARRIVALS


def test_closed_loop_leaves_arrivals_to_the_simulator():
    arr, _, _ = _arrays(TrafficSpec(arrival="closed-loop", users=4, requests=10))
    assert np.isnan(arr).all()


def test_request_files(tmp_path):
    csv_path = tmp_path / "trace.csv"
    csv_path.write_text("arrival_s,prompt_len,output_len\n0.5,100,10\n0.1,200,20\n")
    reqs = generate_requests(TrafficSpec(arrival="file", path=csv_path))
    assert [(r.id, r.arrival_s, r.prompt_len, r.output_len) for r in reqs] == [(0, 0.1, 200, 20), (1, 0.5, 100, 10)]
    jsonl = tmp_path / "trace.jsonl"
    jsonl.write_text('{"arrival_s": 0, "prompt_len": 8, "output_len": 2, "prefix_hit_tokens": 4}\n')
    assert generate_requests(TrafficSpec(arrival="file", path=jsonl))[0].prefix_hit_tokens == 4
    bad = tmp_path / "bad.csv"
    bad.write_text("arrival_s,prompt_len,output_len\n0,100,x\n")
    with pytest.raises(ServingError, match="line 2"):
        generate_requests(TrafficSpec(arrival="file", path=bad))
