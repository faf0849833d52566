"""The vectorized sweep equals point-by-point estimates exactly."""

from __future__ import annotations

import numpy as np
import pytest

from layerscope.app.presets import BASE_DIR
from layerscope.cost import estimate
from layerscope.cost.sweep import basis, fit_linear_graph, shape_dependent, sweep, time_grid
from layerscope.errors import WorkloadError
from layerscope.hardware import load_hardware
from layerscope.model import load_model_spec
from layerscope.workload import Workload, make_workload


@pytest.mark.parametrize("model", ["llama-3.2-1b", "qwen3-30b-a3b", "gpt-oss-20b", "deepseek-v2-lite"])
@pytest.mark.parametrize("phase", ["decode", "prefill"])
def test_sweep_matches_estimate(model, phase):
    spec = load_model_spec(model)
    hws = [load_hardware(PLAIN_H100), load_hardware(BASE_DIR / "mi300x.yaml")]  # the vectorized path
    result = sweep([spec], hws, batches=[1, 5, 64], lengths=[1, 100, 129, 4000], phase=phase)
    assert len(result) == 2 * 3 * 4
    by_name = {hw.name: hw for hw in hws}
    for row in result.records():
        w = make_workload(phase=phase, batch=row["batch"], prompt_len=row["length"], context=row["length"])
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


def _sweep_equals_estimate(spec, hw, phase, cost_model="roofline", batches=(1, 3, 8), lengths=(1, 64, 700)):
    result = sweep([spec], [hw], batches=list(batches), lengths=list(lengths), phase=phase, cost_model=cost_model)
    for row in result.records():
        w = make_workload(phase=phase, batch=row["batch"], prompt_len=row["length"], context=row["length"])
        est = estimate(spec, hw, w, cost_model=cost_model)
        direct = est.ttft_s if phase == "prefill" else est.tpot_s
        assert row["time_s"] == pytest.approx(direct, rel=1e-7), row


@pytest.mark.parametrize("phase", ["decode", "prefill"])
def test_sweep_with_efficiency_by_row_count_equals_estimate(phase):
    # a calibrated CPU's efficiency table by GEMM row count: the fitted graph's GEMM shapes come
    # from one sample point, so such hardware is timed point by point, and time_grid refuses it
    spec = load_model_spec("llama-3.2-1b")
    base = load_hardware("h100-sxm")
    hw = base.model_copy(update={"efficiency": base.efficiency.model_copy(
        update={"matmul_rows": {"bf16": ((2.0, 0.1), (64.0, 0.5), (4096.0, 0.9))}})})
    assert shape_dependent(hw, "roofline", phase) is not None
    _sweep_equals_estimate(spec, hw, phase)
    lin = fit_linear_graph(spec, phase, Workload())
    with pytest.raises(WorkloadError, match="row count"):
        time_grid(lin, hw, np.array([4]), np.array([512]))


#: The h100-sxm datasheet preset with its hand-set efficiencies and no shape terms: sweep's vectorized path.
PLAIN_H100 = BASE_DIR / "h100-sxm.yaml"


def test_sweep_with_attention_efficiency_by_query_length_equals_estimate():
    # a calibrated spec's fused-attention efficiency by query length: prefill is timed point by
    # point (the fitted graph keeps one sample point's query length); decode (M = 1) stays vectorized
    spec = load_model_spec("llama-3.2-1b")
    base = load_hardware(PLAIN_H100)
    hw = base.model_copy(update={"efficiency": base.efficiency.model_copy(
        update={"attention_rows": {"bf16": ((128.0, 0.2), (2048.0, 0.8))}})})
    assert shape_dependent(hw, "roofline", "decode") is None
    _sweep_equals_estimate(spec, hw, "prefill", batches=(1, 3), lengths=(64, 700, 4000))
    lin = fit_linear_graph(spec, "prefill", Workload())
    with pytest.raises(WorkloadError, match="query length"):
        time_grid(lin, hw, np.array([4]), np.array([512]))


@pytest.mark.parametrize("cost_model", ["tiling", "hierarchical"])
def test_sweep_with_tiling_cost_models_equals_estimate(cost_model):
    spec = load_model_spec("qwen3-0.6b")
    _sweep_equals_estimate(spec, load_hardware("h100-sxm"), "prefill", cost_model, batches=(1, 4), lengths=(2, 300))


def test_sweep_with_hf_eager_prefill_equals_estimate():
    # HF eager's prefill lm_head reads the weight ceil(B / engines) times: not linear in the batch
    spec = load_model_spec("llama-3.2-1b")
    base = load_hardware(PLAIN_H100)
    hw = base.model_copy(update={"execution": base.execution.model_copy(update={"kernels": "hf-eager"})})
    _sweep_equals_estimate(spec, hw, "prefill", batches=(1, 2, 7), lengths=(5, 100))
    assert shape_dependent(hw, "roofline", "decode") is None  # decode stays vectorized
    assert shape_dependent(base, "roofline", "prefill") is None


def test_the_fitted_gpu_presets_half_performance_work_is_timed_by_their_shapes():
    """The shipped h100-sxm charges each GEMM its tile and wave quantization and, above one row, Hockney's W½
    (shape terms the fitted linear graph does not carry): sweep times it from the shapes (decode: one graph per
    batch, below), equal to estimate; time_grid refuses it."""
    h100 = load_hardware("h100-sxm")
    spec = load_model_spec("llama-3.2-1b")
    bf16 = fit_linear_graph(spec, "decode", Workload())
    fp8 = fit_linear_graph(spec, "decode", make_workload(weight_dtype="fp8", act_dtype="fp8"))
    # the reason named is the one the ops have: fp8 weights pay tile and wave quantization, bf16 ones W½
    assert "tile and wave quantization" in (shape_dependent(h100, "roofline", "decode", fp8.static) or "")
    assert "matmul_half_flops" in (shape_dependent(h100, "roofline", "decode", bf16.static) or "")
    assert "tile and wave quantization" in (shape_dependent(h100, "roofline", "decode") or "")  # ops unknown
    with pytest.raises(WorkloadError, match="matmul_half_flops"):
        time_grid(bf16, h100, np.array([1, 2]), np.array([16, 16]))
    _sweep_equals_estimate(load_model_spec("llama-3.2-1b"), h100, "decode", batches=(1, 3), lengths=(16, 300))


@pytest.mark.parametrize(("model", "hardware", "weights"), [
    ("llama-3.2-1b", "h100-sxm", "bf16"), ("llama-3.2-1b", "b200", "fp8"), ("qwen3-30b-a3b", "h200", "bf16"),
    ("deepseek-v2-lite", "a100-sxm", "bf16"), ("gemma-2-9b-it", "mi300x", "bf16")])
def test_decode_sweeps_on_the_fitted_gpu_presets_go_one_graph_per_batch(monkeypatch, model, hardware, weights):
    """A decode step's GEMMs run M = batch rows at every context, so the shape terms of the fitted presets (W½,
    fp8 tiles) are timed from one graph per batch with every length's work at once, equal to estimate (dense, MoE,
    MLA, sliding window; fp8 weights). No point goes through estimate one by one."""
    import layerscope.cost.sweep as sweep_module

    spec, hw = load_model_spec(model), load_hardware(hardware)
    template = make_workload(weight_dtype=weights, act_dtype=weights)
    assert shape_dependent(hw, "roofline", "decode") is not None
    assert sweep_module.shapes_by_batch(hw, "roofline", "decode")
    assert not sweep_module.shapes_by_batch(hw, "roofline", "prefill") and not sweep_module.shapes_by_batch(
        hw, "tiling", "decode")
    expected = {}
    for b in (1, 3, 64):
        for length in (1, 700, 9000):
            w = template.model_copy(update={"phase": "decode", "batch": b, "prompt_len": length, "context": length})
            expected[(b, length)] = estimate(spec, hw, w).tpot_s

    def no_point(*args: object, **kwargs: object) -> float:
        raise AssertionError("a point timed one by one")

    monkeypatch.setattr(sweep_module, "_point_time_s", no_point)
    result = sweep([spec], [hw], [1, 3, 64], [1, 700, 9000], phase="decode", template=template)
    for row in result.records():
        assert row["time_s"] == pytest.approx(expected[(row["batch"], row["length"])], rel=1e-7), row


@pytest.mark.parametrize("kernels", ["fused", "serving-graph", "hf-eager cold by reuse"])
def test_a_decode_grid_is_timed_over_the_op_classes_as_over_the_ops(kernels):
    """``time_by_batch`` times one template op per class (same work group, same template op, same kernel plan)
    and weights it by its ops: equal to timing every op, to float rounding; a Llama decode step's ~500 ops are
    a few dozen classes. Under serving-graph the plan (which reads an op's neighbours) splits classes."""
    import layerscope.cost.sweep as sweep_module
    from layerscope.cost.features import op_features
    from layerscope.cost.models import roofline
    from layerscope.graph import build_model_graph

    hw = load_hardware("h100-sxm")
    execution = {"kernels": kernels}
    if kernels.endswith("cold by reuse"):
        # an op's fixed cost by the bytes moved since its code last ran: a fact of all its neighbours, so no
        # two ops merge
        execution = {"kernels": "hf-eager", "cold_by_reuse": [
            {"reuse_bytes": 1e6, "kernel_s": 5e-6, "module_call_s": 2e-6},
            {"reuse_bytes": 1e9, "kernel_s": 20e-6, "module_call_s": 8e-6}]}
    data = hw.model_dump()
    data["execution"] = {**data["execution"], **execution}
    hw = type(hw).from_dict(data)
    spec = load_model_spec("llama-3.1-8b")
    template = make_workload(weight_dtype="fp8", act_dtype="fp8")
    lin = sweep_module.fit_linear_graph(spec, "decode", template)
    batch, lengths = np.array([8, 8, 8]), np.array([16, 1000, 30000])
    w = template.model_copy(update={"phase": "decode", "batch": 8, "prompt_len": 1, "context": 1})
    feats = op_features(build_model_graph(spec, w.decode_pass(1), w))
    alike, group, count = sweep_module._ops_timed_alike(feats, lin.op_group, hw)
    assert count.sum() == len(feats.kinds) == lin.num_ops
    assert len(count) < len(feats.kinds) / 8 if not hw.execution.cold_by_reuse else len(count) == len(feats.kinds)
    work = (sweep_module.basis(spec, "decode", batch, lengths) @ lin.coef)[:, :, lin.op_group]
    per_op = roofline(feats.with_work(*work), hw).time_s.sum(axis=-1)
    work = (sweep_module.basis(spec, "decode", batch, lengths) @ lin.coef)[:, :, group]
    by_class = roofline(alike.with_work(*work), hw).time_s @ count
    np.testing.assert_allclose(by_class, per_op, rtol=1e-12)
    # the classes' work is kept for the next GPU of a sweep at the same lengths, and made again at others
    for grid in (lengths, lengths, np.array([7, 70, 7000])):
        got = sweep_module.time_by_batch(lin, template, hw, batch, grid)
        assert got is not None
        for b, length, t in zip(batch, grid, got, strict=True):
            ww = template.model_copy(update={"phase": "decode", "batch": int(b), "prompt_len": int(length),
                                             "context": int(length)})
            assert t == pytest.approx(estimate(spec, hw, ww).tpot_s, rel=1e-7)


def test_a_spec_costing_kernels_by_reuse_distance_sweeps_as_estimate_does():
    """``execution.cold_by_reuse`` prices each op's kernels by the bytes all ops move between two runs of its code:
    the linear model's merged layers do not keep that order (``time_grid`` was 14-16 % high on Llama-3.2-1B), so
    such a spec is shape-dependent, its decode grid timed one whole graph per batch, equal to estimate."""
    from layerscope.hardware.presets import load_base_preset

    hw = load_base_preset("h100-sxm")
    data = hw.model_dump()
    data["execution"] = {**data["execution"], "cold_by_reuse": [
        {"reuse_bytes": 1e6, "kernel_s": 5e-6, "module_call_s": 2e-6},
        {"reuse_bytes": 1e9, "kernel_s": 20e-6, "module_call_s": 8e-6}]}
    hw = type(hw).from_dict(data)
    assert "cold_by_reuse" in (shape_dependent(hw, "roofline", "decode") or "")
    _sweep_equals_estimate(load_model_spec("llama-3.2-1b"), hw, "decode", batches=(1, 8), lengths=(100, 3000))
