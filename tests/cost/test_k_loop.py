"""The serial K-loop floor (``efficiency.gemm_k_loop_s``) and the tile share q applied to the work, not to W½."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from layerscope.cost import COST_MODELS, time_graph
from layerscope.cost.features import op_features
from layerscope.cost.models import compute_time_s, gemm_k_loop_time_s, gemm_tile_plan
from layerscope.errors import HardwareSpecError
from layerscope.graph.ops import GemmShape, Op, OpGraph, TensorSpec
from layerscope.hardware import load_hardware
from layerscope.hardware.kernel_fit import k_loop_per_k_s
from layerscope.hardware.presets import load_base_preset
from layerscope.hardware.spec import HardwareSpec
from layerscope.units import DType

BF16, FP8 = DType.BF16, DType.FP8
KLOOP_RUN = Path(__file__).resolve().parents[2] / "bench" / "gpu" / "h200-2026-11-27b" / "kernels-kloop-cuda-graph.json"


def _gemm_op(m: int, n: int, k: int, dtype: DType = BF16, name: str = "k_proj", kind: str = "gemm") -> Op:
    a = TensorSpec(f"{name}.x", (m, k), dtype)
    w = TensorSpec(f"{name}.weight", (n, k), dtype, "weight")
    out = TensorSpec(f"{name}:out", (m, n), dtype)
    return Op(name=name, kind=kind, module=name, layer=0, inputs=(a, w), outputs=(out,),
              flops=2 * m * n * k, weight_bytes=w.nbytes, act_read_bytes=a.nbytes, act_write_bytes=out.nbytes,
              gemm=GemmShape(m, n, k))


def _with(hw: HardwareSpec, **efficiency: object) -> HardwareSpec:
    data = hw.model_dump()
    data["efficiency"].update(efficiency)
    return HardwareSpec.from_dict(data)


def test_the_floor_by_hand(toy_hw):
    # 1 ns per unit of K: a 128-wide GEMV of K = 8192 takes 8.192 µs of arithmetic whatever its 2.1 MFLOP
    # (0.02 µs at 100 TFLOP/s), and so in all: its 2.1 MB stream takes 2.1 µs at 1 TB/s. A 4096-cubed GEMM
    # (1.37 ms of FLOPs) is not held by its 4.1 µs loop.
    hw = _with(toy_hw, gemm_k_loop_s={"bf16": 1e-9})
    tg = time_graph(OpGraph(ops=(_gemm_op(1, 128, 8192), _gemm_op(4096, 4096, 4096, name="o_proj"))), hw)
    assert tg.compute_s[0] == pytest.approx(8.192e-6)
    assert tg.memory_s[0] == pytest.approx((128 * 8192 + 8192 + 128) * 2 / 1e12)
    assert tg.time_s[0] == pytest.approx(8.192e-6)
    assert tg.compute_s[1] == pytest.approx(2 * 4096**3 / 100e12)


def test_only_gemms_with_weights_in_a_dtype_with_a_figure_pay(toy_hw):
    hw = _with(toy_hw, gemm_k_loop_s={"bf16": 1e-9})
    graph = OpGraph(ops=(_gemm_op(16, 128, 4096), _gemm_op(16, 128, 4096, FP8, name="fp8_proj"),
                         _gemm_op(16, 128, 4096, name="attn", kind="attention")))
    loop = gemm_k_loop_time_s(op_features(graph), hw)
    assert loop.tolist() == pytest.approx([4.096e-6, 0.0, 0.0])
    # without the figure every model gives what it gave
    for model in COST_MODELS.values():
        assert np.array_equal(model(op_features(graph), toy_hw).time_s,
                              model(op_features(graph), _with(toy_hw, gemm_k_loop_s={})).time_s)


@settings(max_examples=60, deadline=None)
@given(m=st.integers(1, 4096), n=st.integers(1, 8192), k=st.integers(1, 16384),
       per_k=st.floats(0.0, 5e-9, allow_nan=False))
def test_the_floor_never_speeds_an_op_up_and_is_a_floor(m: int, n: int, k: int, per_k: float) -> None:
    hw = load_base_preset("h100-sxm")
    feats = op_features(OpGraph(ops=(_gemm_op(m, n, k),)))
    without = compute_time_s(feats, _with(hw, gemm_k_loop_s={}))[0]
    with_floor = compute_time_s(feats, _with(hw, gemm_k_loop_s={"bf16": per_k}))[0]
    assert with_floor == pytest.approx(max(without, k * per_k))


def test_a_negative_figure_is_refused_naming_it(toy_hw):
    with pytest.raises(HardwareSpecError, match=r"efficiency\.gemm_k_loop_s\.fp8: must be a finite number >= 0"):
        _with(toy_hw, gemm_k_loop_s={"fp8": -1e-9})


def test_tile_share_divides_the_work_not_the_fixed_cost() -> None:
    """One 64 x 16 tile of an M = 64, N = 128 fp8 GEMM on 132 SMs: q = 64·128 / (132·64·16) = 0.0606. The
    fitted h200 preset's W½ / rate is a per-kernel fixed cost; divided by q it was 16.5 of them (58 µs, where our
    own H200 runs the GEMM in 2.7 µs). One wave: one W½ / rate."""
    hw = load_hardware("h200")
    feats = op_features(OpGraph(ops=(_gemm_op(64, 128, 256, FP8),)))
    q = gemm_tile_plan(feats, hw)[0][0]
    assert q == pytest.approx(64 * 128 / (132 * 64 * 16))
    rate = hw.engines.peak_flops_per_s[FP8] * hw.efficiency.matmul_for(FP8)
    by_hand = max(2 * 64 * 128 * 256 / (rate * q) + hw.matmul_half_flops(FP8) / rate, 256 * hw.gemm_k_loop_s(FP8))
    assert compute_time_s(feats, hw)[0] == pytest.approx(by_hand)
    assert compute_time_s(feats, hw)[0] < 5e-6


def test_w_half_is_paid_once_per_wave_of_fp8_tiles() -> None:
    """DeepGEMM's M = 4096, N = 7168, K = 2048 (GX-08) on 132 SMs: 32 x 45 tiles of 128 x 160 in 11 waves,
    q = 4096·7168 / (11·132·128·160); its fixed cost is 11 · W½ / rate. The same GEMM in bf16 (tiles unknown)
    pays W½ / rate once."""
    hw = load_hardware("h100-sxm")
    for dt, waves, q in ((FP8, 11, 4096 * 7168 / (11 * 132 * 128 * 160)), (BF16, 1, 1.0)):
        feats = op_features(OpGraph(ops=(_gemm_op(4096, 7168, 2048, dt),)))
        share, waves_of = gemm_tile_plan(feats, hw)
        assert (share[0], waves_of[0]) == (pytest.approx(q), waves)
        rate = hw.engines.peak_flops_per_s[dt] * hw.efficiency.matmul_for(dt)
        by_hand = 2 * 4096 * 7168 * 2048 / (rate * q) + waves * hw.matmul_half_flops(dt) / rate
        assert hw.matmul_half_flops(dt) > 0
        assert compute_time_s(feats, hw)[0] == pytest.approx(by_hand)


def test_fp8_weights_on_a_gpu_without_fp8_mmas_pay_no_tile_rule() -> None:
    """An A100 has no fp8 peak: an fp8-weight GEMM upcasts in another kernel than DeepGEMM's, so it pays neither
    the tile share nor W½ per wave; an H100 does."""
    feats = op_features(OpGraph(ops=(_gemm_op(4096, 7168, 2048, FP8),)))
    a100, h100 = load_hardware("a100-sxm"), load_hardware("h100-sxm")
    assert FP8 not in a100.engines.peak_flops_per_s and a100.efficiency.matmul_half_flops
    assert [w[0] for w in gemm_tile_plan(feats, a100)] == [1.0, 1.0]
    assert gemm_tile_plan(feats, h100)[1][0] == 11


def test_the_hopper_presets_carry_the_slope_of_our_own_h200_run() -> None:
    """``efficiency.gemm_k_loop_s`` is ``kernel_fit.k_loop_per_k_s`` on the kept run, to the three digits the
    presets write; H100 SXM and GH200 reuse it (same SM and clocks), H100 PCIe scales it by the boost clocks."""
    fitted = k_loop_per_k_s(json.loads(KLOOP_RUN.read_text())["records"])
    assert {dt: n for dt, (_, n) in fitted.items()} == {"bf16": 12, "fp8": 12}
    assert 0.6 < fitted["fp8"][0] / fitted["bf16"][0] < 0.75  # neither per element (1) nor per byte (0.5)
    for gpu in ("h200", "h100-sxm", "gh200"):
        hw = load_hardware(gpu)
        for dt in ("bf16", "fp8"):
            assert hw.gemm_k_loop_s(dt) == pytest.approx(fitted[dt][0], rel=5e-3)
        assert hw.gemm_k_loop_s("fp16") == hw.gemm_k_loop_s("bf16")
        assert "kernels-kloop-cuda-graph.json" in hw.efficiency.gemm_k_loop_source
    # the second call, on a fresh machine, reproduces both slopes within 3 %
    rerun = k_loop_per_k_s(json.loads(KLOOP_RUN.with_name("kernels-kblock-cuda-graph.json").read_text())["records"])
    for dt in ("bf16", "fp8"):
        assert rerun[dt][0] == pytest.approx(fitted[dt][0], rel=0.03)
    pcie = load_hardware("h100-pcie")
    assert pcie.gemm_k_loop_s("fp8") == pytest.approx(fitted["fp8"][0] * 1.83 / 1.755, rel=5e-3)
    for gpu in ("a100-sxm", "b200", "mi300x", "l40s"):  # other SMs: no measurement, no figure
        assert load_hardware(gpu).efficiency.gemm_k_loop_s == {}


def test_the_slope_by_hand() -> None:
    """Three shapes at t = 2 µs + 1 ns·K, one at 3 ns·K, and records the fit must skip (too wide, too deep, too
    few K values, another kind)."""
    recs = []
    for n, per_k in ((128, 1e-9), (256, 1e-9), (512, 1e-9), (1024, 3e-9)):
        recs += [{"kind": "gemm_kloop", "dtype": "bf16", "m": 64, "n": n, "k": k, "seconds_s": 2e-6 + per_k * k}
                 for k in (256, 1024, 4096)]
    recs += [{"kind": "gemm_kloop", "dtype": "bf16", "m": 64, "n": 7168, "k": k, "seconds_s": 1.0}
             for k in (256, 1024, 4096)]
    recs += [{"kind": "gemm_kloop", "dtype": "fp8", "m": 64, "n": 128, "k": k, "seconds_s": 1.0} for k in (256, 512)]
    recs += [{"kind": "gemm_ksweep", "dtype": "bf16", "m": 64, "n": 128, "k": 256, "seconds_s": 1.0}]
    fitted = k_loop_per_k_s(recs)
    assert fitted.keys() == {"bf16"}
    assert fitted["bf16"][1] == 4
    assert fitted["bf16"][0] == pytest.approx(1e-9)  # the median of 1, 1, 1, 3 ns is 1 ns
