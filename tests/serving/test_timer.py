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
