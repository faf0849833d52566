"""Shape-dependent GEMM efficiency (Hockney W½ in ``efficiency.matmul_half_flops``) in the cost models."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from layerscope.cost import COST_MODELS, time_graph
from layerscope.cost.features import op_features
from layerscope.cost.models import compute_time_s, roofline
from layerscope.graph.ops import GemmShape, Op, OpGraph, TensorSpec
from layerscope.hardware.spec import HardwareSpec
from layerscope.units import DType

BF16 = DType.BF16


def _gemm_op(m: int, n: int, k: int, dtype: DType = BF16, name: str = "q_proj") -> Op:
    a = TensorSpec(f"{name}.x", (m, k), dtype)
    w = TensorSpec(f"{name}.weight", (n, k), dtype, "weight")
    out = TensorSpec(f"{name}:out", (m, n), dtype)
    return Op(name=name, kind="gemm", module=name, layer=0, inputs=(a, w), outputs=(out,),
              flops=2 * m * n * k, weight_bytes=w.nbytes, act_read_bytes=a.nbytes, act_write_bytes=out.nbytes,
              gemm=GemmShape(m, n, k))


def _norm_op() -> Op:
    x = TensorSpec("q_proj:out", (512, 4096), BF16)
    y = TensorSpec("norm:out", (512, 4096), BF16)
    return Op("norm", "norm", "norm", 0, (x,), (y,), flops=4 * 512 * 4096, act_read_bytes=x.nbytes,
              act_write_bytes=y.nbytes)


def _with_half(hw: HardwareSpec, halves: dict[str, float]) -> HardwareSpec:
    data = hw.model_dump()
    data["efficiency"]["matmul_half_flops"] = halves
    return HardwareSpec.from_dict(data)


def test_half_rate_at_the_half_performance_size_by_hand(toy_hw):
    # W = W½ = 2·1024·1024·1024 FLOPs: the GEMM runs at half of 100 TFLOP/s, i.e. takes 2·W / peak.
    w = 2 * 1024**3
    hw = _with_half(toy_hw, {"bf16": float(w)})
    tg = time_graph(OpGraph(ops=(_gemm_op(1024, 1024, 1024),)), hw)
    assert tg.compute_s[0] == pytest.approx(2 * w / 100e12)
    # With an efficiency of 0.5 as well, the asymptotic rate halves too: (W + W½) / (0.5 · peak).
    data = hw.model_dump()
    data["efficiency"]["matmul"] = 0.5
    assert time_graph(OpGraph(ops=(_gemm_op(1024, 1024, 1024),)), HardwareSpec.from_dict(data)).compute_s[0] \
        == pytest.approx(2 * w / 50e12)


def test_absent_or_other_dtype_leaves_every_number_unchanged(toy_hw):
    graph = OpGraph(ops=(_gemm_op(1, 2048, 2048), _gemm_op(512, 4096, 4096, name="o_proj"), _norm_op()))
    feats = op_features(graph)
    fp8_only = _with_half(toy_hw, {"fp8": 1e12})
    for name, model in COST_MODELS.items():
        base = model(feats, toy_hw)
        other = model(feats, fp8_only)
        for field in ("compute_s", "memory_s", "time_s", "bound"):
            assert np.array_equal(getattr(base, field), getattr(other, field)), (name, field)


def test_only_matrix_ops_pay_the_fixed_work(toy_hw):
    graph = OpGraph(ops=(_gemm_op(512, 4096, 4096), _norm_op()))
    feats = op_features(graph)
    hw = _with_half(toy_hw, {"bf16": 1e10})
    base, half = compute_time_s(feats, toy_hw), compute_time_s(feats, hw)
    assert half[0] == pytest.approx(base[0] + 1e10 / 100e12)
    assert half[1] == base[1]


def test_leading_work_dimensions_broadcast(toy_hw):
    feats = op_features(OpGraph(ops=(_gemm_op(64, 4096, 4096), _norm_op())))
    stacked = feats.with_work(np.stack([feats.flops, 2 * feats.flops]), np.stack([feats.weight_bytes] * 2),
                              np.stack([feats.act_bytes] * 2), np.stack([feats.kv_bytes] * 2))
    hw = _with_half(toy_hw, {"bf16": 1e9})
    out = roofline(stacked, hw)
    assert out.time_s.shape == (2, 2)
    assert out.compute_s[1, 0] == pytest.approx((2 * feats.flops[0] + 1e9) / 100e12)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(m=st.integers(1, 4096), half=st.floats(0, 1e12))
def test_shape_dependence_never_speeds_an_op_up(toy_hw, m: int, half: float):
    feats = op_features(OpGraph(ops=(_gemm_op(m, 2048, 2048),)))
    hw = _with_half(toy_hw, {"bf16": half})
    for model in COST_MODELS.values():
        assert model(feats, hw).time_s[0] >= model(feats, toy_hw).time_s[0]
