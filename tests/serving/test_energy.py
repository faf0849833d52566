"""Energy of a serving run (``serving.energy``): the step basis against ``cost.energy``, conservation of joules
over requests, static batching against ``estimate``'s energy, and hardware without energy figures."""

from __future__ import annotations

import math

import numpy as np
import pytest

from layerscope.cost.api import estimate
from layerscope.cost.energy import estimate_energy
from layerscope.hardware import load_hardware
from layerscope.serving import LengthSpec, SchedulerSpec, ServingRequest, TrafficSpec, run_serving, summarize
from layerscope.serving.energy import BASIS_TOLERANCE, StepEnergy, pass_counts
from layerscope.workload import Workload, make_workload

from .conftest import HARDWARE, SMALL_MODEL


def test_pass_counts_by_hand() -> None:
    # 4 decodes over 100 cached tokens each, and one 8-token chunk over 16 cached: 8·16 + 8·9/2 = 164 pairs
    assert pass_counts(((4, 1, 100), (1, 8, 16))).tolist() == [1.0, 12.0, 5.0, 400.0, 164.0, 0.0]
    # 2 tokens to 2 of 8 experts: 8·(1 − (3/4)²) = 3.5 experts expected
    assert pass_counts(((2, 1, 5),), moe=(8, 2))[-1] == pytest.approx(3.5)


@pytest.mark.parametrize("model", [SMALL_MODEL, "llama-3.1-8b", "qwen3-30b-a3b"])
def test_the_step_basis_fits_cost_energy_on_its_passes(model: str) -> None:
    from layerscope.model import load_model_spec

    step = StepEnergy.fit(load_model_spec(model), load_hardware(HARDWARE), make_workload(phase="decode"))
    assert step.max_error <= BASIS_TOLERANCE
    assert np.all(step.coefficients[1:] >= 0)  # more tokens, sequences, context or pairs never cost less


def test_joules_are_conserved_over_requests_and_bounded_by_power() -> None:
    run = run_serving(ServingRequest(model=SMALL_MODEL, hardware=HARDWARE, traffic=TrafficSpec(
        rate_per_s=15, requests=120, prompt=LengthSpec(dist="uniform", low=32, high=600),
        output=LengthSpec(dist="uniform", low=2, high=90), seed=4)))
    e = run.energy
    assert e is not None
    assert e.request_j.sum() == pytest.approx(e.total_j, rel=1e-9)
    assert np.all(e.request_j > 0)
    hw = load_hardware(HARDWARE)
    assert hw.energy is not None
    duration = float(run.finish_s.max() - run.arrival_s.min())
    # never below idle power over the whole run, nor above the steps' power
    assert e.total_j >= hw.energy.idle_power_w * duration * (1 - 1e-9)
    assert np.all(e.step_power_w >= hw.energy.idle_power_w * (1 - 1e-9))
    m = summarize(run)
    assert m.total_energy_j == pytest.approx(e.total_j)
    assert m.mean_power_w == pytest.approx(e.total_j / m.duration_s)
    assert m.energy_per_output_token_j is not None and m.energy_per_output_token_j > 0
    # prompts split over steps (stall-free chunks of at most 256 tokens): the shares still add up
    chunked = run_serving(ServingRequest(model=SMALL_MODEL, hardware=HARDWARE, scheduler=SchedulerSpec(
        name="sarathi", max_num_batched_tokens=256), traffic=TrafficSpec(rate_per_s=15, requests=60,
                                                                    prompt=LengthSpec(mean=900),
                                                                    output=LengthSpec(mean=20), seed=4)))
    assert chunked.energy is not None and int(chunked.prefill_tokens.max()) <= 256
    assert chunked.energy.request_j.sum() == pytest.approx(chunked.energy.total_j, rel=1e-9)


def test_static_batching_matches_estimate_energy(small_spec, h100) -> None:
    batch, prompt, output = 8, 512, 64
    est = estimate(small_spec, h100, Workload(phase="generate", batch=batch, prompt_len=prompt,
                                              decode_steps=output - 1))
    expected = estimate_energy(est)
    assert expected is not None
    run = run_serving(ServingRequest(model=SMALL_MODEL, hardware=HARDWARE, scheduler=SchedulerSpec(
        name="static", static_batch=batch), traffic=TrafficSpec(rate_per_s=math.inf, requests=batch,
                                                               prompt=LengthSpec(mean=prompt),
                                                               output=LengthSpec(mean=output))))
    assert run.energy is not None
    assert run.energy.total_j == pytest.approx(expected.energy_j, rel=0.03)


def test_hardware_without_energy_figures_reports_none() -> None:
    from layerscope.hardware.presets import load_preset

    bare = load_preset("h100-sxm").model_copy(update={"energy": None, "name": "h100-no-energy"})
    run = run_serving(ServingRequest(model=SMALL_MODEL, hardware=bare, traffic=TrafficSpec(
        rate_per_s=10, requests=10, prompt=LengthSpec(mean=64), output=LengthSpec(mean=8))))
    assert run.energy is None
    m = summarize(run)
    assert m.total_energy_j is None and m.energy_per_output_token_j is None
