"""The vectorized sweep equals point-by-point estimates exactly."""

from __future__ import annotations

import pytest

from layerscope.cost import estimate
from layerscope.cost.sweep import basis, fit_linear_graph, sweep
from layerscope.errors import WorkloadError
from layerscope.hardware import load_hardware
from layerscope.model import load_model_spec
from layerscope.workload import Workload, make_workload


@pytest.mark.parametrize("model", ["llama-3.2-1b", "qwen3-30b-a3b", "gpt-oss-20b", "deepseek-v2-lite"])
@pytest.mark.parametrize("phase", ["decode", "prefill"])
def test_sweep_matches_estimate(model, phase):
    spec = load_model_spec(model)
    hws = [load_hardware("h100-sxm"), load_hardware("mi300x")]
    result = sweep([spec], hws, batches=[1, 5, 64], lengths=[1, 100, 129, 4000], phase=phase)
    assert len(result) == 2 * 3 * 4
    by_name = {hw.name: hw for hw in hws}
    for row in result.records():
        w = make_workload(phase=phase, batch_size=row["batch"], input_len=row["length"], context_len=row["length"])
        est = estimate(spec, by_name[row["hardware"]], w)
        direct = est.ttft_s if phase == "prefill" else est.tpot_s
        assert row["time_s"] == pytest.approx(direct, rel=1e-7), row


def test_repeated_layers_are_merged():
    spec = load_model_spec("llama-3.1-8b")
    lin = fit_linear_graph(spec, "decode", Workload())
    assert lin.num_ops > 400
    assert len(lin.count) < 40 and lin.count.sum() == lin.num_ops


def test_basis_counts_causal_pairs_with_a_window():
    spec = load_model_spec("mistral-7b-v0.1")  # sliding window 4096 on every layer
    phi = basis(spec, "prefill", [1], [5000])
    # sum_{i<=5000} min(i, 4096) = 4096*4097/2 + 904*4096
    assert phi[0, 5] == 4096 * 4097 / 2 + 904 * 4096
    assert phi[0, 3] == 5000 * 5001 / 2


def test_sweep_rejects_bad_grids():
    spec = load_model_spec("llama-3.2-1b")
    with pytest.raises(WorkloadError, match="phase"):
        sweep([spec], [load_hardware("h100-sxm")], [1], [1], phase="generate")
    with pytest.raises(WorkloadError, match="positive"):
        sweep([spec], [load_hardware("h100-sxm")], [0], [1])
