"""The step timer: its fast path against its exact one, and the exact one against the cost model's own pass."""

from __future__ import annotations

import numpy as np
import pytest

from layerscope.cost.api import estimate
from layerscope.model import load_model_spec
from layerscope.serving.timer import EXACT_UP_TO, FAST_PATH_TOLERANCE, StepTimer, grid_points
from layerscope.workload import Workload


def test_grid_points():
    assert grid_points(7) == (7, 7)
    assert grid_points(EXACT_UP_TO + 0.5) == (EXACT_UP_TO, 19)
    lo, hi = grid_points(1000)
    assert lo < 1000 < hi and hi / lo < 2 ** 0.25 + 0.01


def _random_steps(rng: np.random.Generator, count: int) -> list[tuple[list[tuple[int, int]], np.ndarray]]:
    steps = []
    for _ in range(count):
        d = int(rng.integers(0, 200))
        chunks = [(int(rng.integers(1, 2048)), int(rng.integers(0, 3000)))
                  for _ in range(int(rng.integers(0 if d else 1, 3)))]
        steps.append((chunks, rng.integers(1, 4000, d)))
    return steps


@pytest.mark.parametrize("model", ["llama-3.2-1b"])
def test_fast_path_within_its_tolerance_of_the_exact_one(model, h100):
    # Full-attention models only: docs/serving.md states the looser agreement on sliding-window models.
    spec = load_model_spec(model)
    timer = StepTimer(spec, h100, Workload(phase="decode"))
    errors = [timer.fast_forward_s(chunks, len(ctx), float(ctx.sum())) / timer.exact_forward_s(chunks, ctx) - 1
              for chunks, ctx in _random_steps(np.random.default_rng(1), 12)]
    assert max(abs(e) for e in errors) < FAST_PATH_TOLERANCE, errors


def test_exact_path_is_the_cost_models_pass(small_spec, h100):
    # A pure decode step and a pure prefill are single kinds of kernels: the estimate's own pass times.
    timer = StepTimer(small_spec, h100, Workload(phase="decode"), mode="exact")
    dec = estimate(small_spec, h100, Workload(phase="decode", batch=32, context=700))
    assert timer.exact_forward_s([], np.full(32, 700)) == pytest.approx(dec.tpot_s, rel=1e-9)
    pre = estimate(small_spec, h100, Workload(phase="prefill", batch=1, prompt_len=900))
    assert timer.exact_forward_s([(900, 0)], np.empty(0, dtype=np.int64)) == pytest.approx(pre.ttft_s, rel=1e-9)


def test_decode_line_is_the_fast_path(small_spec, h100):
    timer = StepTimer(small_spec, h100, Workload(phase="decode"))
    a, b = timer.decode_line(40)
    assert a + b * 40 * 1500 == pytest.approx(timer.fast_forward_s((), 40, 40 * 1500.0), rel=1e-9)


def test_steps_of_an_mha_model_respect_the_hardware_floor():
    # Llama-2-7B (no GQA: 32 KV heads of 128) on one H100 SXM, by hand. A decode step streams the weights
    # (6.74e9 parameters, bf16) and every decode's KV (2 · 32 heads · 128 · 2 bytes · 32 layers = 524,288 bytes a
    # token): 191 decodes at 576 cached tokens read 13.5 GB + 57.7 GB, at least 21.2 ms at 3.35 TB/s. A step of
    # 16 prompts of 512 tokens does 2 · 6.48e9 · 8192 FLOPs in its linear layers, at least 107 ms at 989 TFLOP/s.
    from layerscope.hardware import load_hardware
    from layerscope.serving import ServingRequest, TrafficSpec
    from layerscope.serving.simulator import _template

    spec, hw = load_model_spec("llama-2-7b-hf"), load_hardware("h100-sxm")
    timer = StepTimer(spec, hw, _template(spec, ServingRequest(model=spec, hardware=hw,
                                                                traffic=TrafficSpec(rate_per_s=1))))
    kv_bytes = 2 * 32 * 128 * 2 * 32
    assert spec.kv_values_per_token_per_layer() * spec.num_layers * 2 == kv_bytes
    decode_floor_s = (6.74e9 * 2 + 191 * 576 * kv_bytes) / 3.35e12
    decode_s = timer.forward_s([], np.full(191, 576))
    assert decode_floor_s == pytest.approx(0.0212, rel=0.01)
    assert decode_floor_s < decode_s < 2 * decode_floor_s
    prefill_floor_s = 2 * 6.48e9 * 8192 / 989e12
    prefill_s = timer.forward_s([(512, 0)] * 16, np.zeros(0, dtype=np.int64))
    assert prefill_floor_s == pytest.approx(0.107, rel=0.01)
    assert prefill_floor_s < prefill_s < 2 * prefill_floor_s
