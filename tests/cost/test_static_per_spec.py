"""Per-spec facts worked out once: ``cost.models.dtype_figures`` and ``cost.models.static_per_spec``."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from layerscope.cost import time_graph
from layerscope.cost.features import DTYPE_ORDER, op_features
from layerscope.cost.models import (
    _SPECS_KEPT,
    dtype_figures,
    gemm_k_loop_time_s,
    gemm_tile_plan,
    roofline,
    row_reread_bytes,
    weight_stream_factor,
)
from layerscope.graph import build_model_graph
from layerscope.graph.ops import GemmShape, Op, OpGraph, TensorSpec
from layerscope.hardware import load_hardware
from layerscope.hardware.spec import HardwareSpec
from layerscope.model import load_model_spec
from layerscope.units import DType
from layerscope.workload import make_workload


def _gemm(m: int, n: int, k: int, dtype: DType = DType.FP8) -> Op:
    a = TensorSpec("x", (m, k), dtype)
    w = TensorSpec("w", (n, k), dtype, "weight")
    out = TensorSpec("y", (m, n), dtype)
    return Op(name="g", kind="gemm", module="g", layer=0, inputs=(a, w), outputs=(out,), flops=2 * m * n * k,
              weight_bytes=w.nbytes, act_read_bytes=a.nbytes, act_write_bytes=out.nbytes, gemm=GemmShape(m, n, k))


def _copy(hw: HardwareSpec, **efficiency: object) -> HardwareSpec:
    data = hw.model_dump()
    data["efficiency"].update(efficiency)
    return HardwareSpec.from_dict(data)


def test_dtype_figures_are_the_specs_own_per_dtype_and_read_only() -> None:
    hw = load_hardware("h100-sxm")
    assert dtype_figures(hw, "rate").tolist() == [hw.achievable_flops_per_s(dt) for dt in DTYPE_ORDER]
    assert dtype_figures(hw, "half_flops").tolist() == [hw.matmul_half_flops(dt) for dt in DTYPE_ORDER]
    assert dtype_figures(hw, "k_loop_s").tolist() == [hw.gemm_k_loop_s(dt) for dt in DTYPE_ORDER]
    tiled = dict(zip(DTYPE_ORDER, dtype_figures(hw, "tiled").tolist(), strict=True))
    assert tiled[DType.FP8] == 1.0 and tiled[DType.BF16] == 0.0
    assert dtype_figures(load_hardware("a100-sxm"), "tiled").sum() == 0  # no fp8 MMAs: no tile rule
    assert dtype_figures(hw, "rate") is dtype_figures(hw, "rate")
    with pytest.raises(ValueError, match="read-only"):
        dtype_figures(hw, "rate")[0] = 1.0
    # an equal spec that is another object is worked out on its own; a changed one gets its own figures
    other = _copy(hw, matmul_per_dtype={dt: e / 2 for dt, e in hw.efficiency.matmul_per_dtype.items()})
    bf16 = DTYPE_ORDER.index(DType.BF16)
    assert dtype_figures(other, "rate")[bf16] == dtype_figures(hw, "rate")[bf16] / 2


def test_static_facts_are_kept_per_spec_and_equal_a_fresh_computation() -> None:
    """Each cached fact is the same object on a second call with the same spec, equal to what the function
    computes on fresh features, read-only; another spec (even one equal to it) gets its own."""
    spec = load_model_spec("llama-3.1-8b")
    w = make_workload(phase="decode", batch=8, context=1024, weight_dtype="fp8", act_dtype="fp8")
    graph = build_model_graph(spec, w.passes()[0], w)
    hw = load_hardware("h100-sxm")
    feats = op_features(graph)
    fresh = replace(feats, plans={})  # same arrays, nothing cached
    for fn in (gemm_k_loop_time_s, weight_stream_factor, gemm_tile_plan, row_reread_bytes):
        first = fn(feats, hw)
        assert fn(feats, hw) is first
        for got, want in zip(*((x if isinstance(x, tuple) else (x,)) for x in (first, fn(fresh, hw))), strict=True):
            if got is None:
                assert want is None
                continue
            np.testing.assert_array_equal(got, want)
            assert not got.flags.writeable
        twin = HardwareSpec.from_dict(hw.model_dump())
        assert first is None or fn(feats, twin) is not first
    # the stacked work of a generation shares the facts (the same ops), and times as the unshared features do
    stacked = feats.with_work(feats.flops[None].repeat(3, 0), feats.weight_bytes[None].repeat(3, 0),
                              feats.act_bytes[None].repeat(3, 0), feats.kv_bytes[None].repeat(3, 0))
    np.testing.assert_array_equal(roofline(stacked, hw).time_s[1], roofline(fresh, hw).time_s)


def test_reshaped_gemms_under_the_same_plans_are_not_served_the_old_facts() -> None:
    """An execution profile that turns GEMM rows into GEMVs (``_prepare``) replaces ``gemm_mnkb`` and shares
    ``plans``: the tile plan of the reshaped features is their own."""
    hw = load_hardware("h100-sxm")
    feats = op_features(OpGraph(ops=(_gemm(4096, 7168, 2048),)))
    assert gemm_tile_plan(feats, hw)[1][0] == 11
    mnkb = feats.gemm_mnkb.copy()
    mnkb[0, 0] = 1
    gemv = replace(feats, gemm_mnkb=mnkb)
    assert gemv.plans is feats.plans
    assert gemm_tile_plan(gemv, hw)[1][0] == 1
    assert gemm_tile_plan(feats, hw)[1][0] == 11


def test_only_the_last_specs_are_kept() -> None:
    hw = load_hardware("h100-sxm")
    feats = op_features(OpGraph(ops=(_gemm(64, 4096, 4096),)))
    specs = [_copy(hw, memory=0.5 + i / 100) for i in range(_SPECS_KEPT + 4)]
    for s in specs:
        gemm_k_loop_time_s(feats, s)
    kept = feats.plans["(gemm_k_loop_time_s per spec)"]
    assert len(kept) == _SPECS_KEPT
    assert {id(v[0]) for v in kept.values()} == {id(s) for s in specs[4:]}
    # and a graph timed on many specs still gives each its own time
    times = [float(time_graph(OpGraph(ops=(_gemm(64, 4096, 4096),)), s).time_s.sum()) for s in specs]
    assert times == sorted(times, reverse=True) and len(set(times)) == len(times)
