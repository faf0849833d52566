"""Cost models against hand-computed cases and properties."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from layerscope.cost import COST_MODELS, get_cost_model, time_graph
from layerscope.cost.features import op_features
from layerscope.cost.models import gemm_tiled_traffic_bytes, kernels_in_sequence_s
from layerscope.errors import CostModelError
from layerscope.graph.ops import GemmShape, Op, OpGraph, TensorSpec
from layerscope.units import DType

BF16 = DType.BF16


def _gemm_op(m: int, n: int, k: int, dtype: DType = BF16, name: str = "q_proj") -> Op:
    a = TensorSpec("x", (m, k), dtype)
    w = TensorSpec(f"{name}.weight", (n, k), dtype, "weight")
    out = TensorSpec(f"{name}:out", (m, n), dtype)
    return Op(name=name, kind="gemm", module=name, layer=0, inputs=(a, w), outputs=(out,),
              flops=2 * m * n * k, weight_bytes=w.nbytes, act_read_bytes=a.nbytes, act_write_bytes=out.nbytes,
              matrix_class="Va_Mw" if m == 1 else "Ma_Mw", definition=f"gemm_n{n}_k{k}", gemm=GemmShape(m, n, k))


def _graph(*ops: Op) -> OpGraph:
    return OpGraph(ops=ops)


def test_roofline_decode_q_proj_is_memory_bound_by_hand(toy_hw):
    # Llama-3.2-1B decode q_proj: 2·2048·2048 FLOPs, 2048·2048·2 B of bf16 weights, 2·2048·2 B of act.
    tg = time_graph(_graph(_gemm_op(1, 2048, 2048)), toy_hw, "roofline")
    assert tg.compute_s[0] == pytest.approx(2 * 2048 * 2048 / 100e12)
    assert tg.memory_s[0] == pytest.approx((2048 * 2048 * 2 + 2 * 2048 * 2) / 1e12)
    assert tg.time_s[0] == pytest.approx(tg.memory_s[0])
    assert tg.bound == ("memory",)


def test_roofline_large_gemm_is_compute_bound_and_uses_dtype_peak(toy_hw):
    op = _gemm_op(8192, 8192, 8192)
    tg = time_graph(_graph(op), toy_hw)
    assert tg.time_s[0] == pytest.approx(2 * 8192**3 / 100e12)
    assert tg.bound == ("compute",)
    fp8 = time_graph(_graph(_gemm_op(8192, 8192, 8192, DType.FP8)), toy_hw)
    assert fp8.time_s[0] == pytest.approx(2 * 8192**3 / 200e12)


def test_weight_only_quantized_gemm_computes_in_activation_type(toy_hw):
    # W4A16: the int4 weights are dequantized; arithmetic at the bf16 rate, weight bytes at 4 bits.
    a = TensorSpec("x", (8192, 8192), BF16)
    w = TensorSpec("w", (8192, 8192), DType.INT4, "weight")
    out = TensorSpec("y", (8192, 8192), BF16)
    op = Op("p", "gemm", "p", 0, (a, w), (out,), flops=2 * 8192**3, weight_bytes=w.nbytes,
            act_read_bytes=a.nbytes, act_write_bytes=out.nbytes, gemm=GemmShape(8192, 8192, 8192))
    tg = time_graph(_graph(op), toy_hw)
    assert w.nbytes == 8192 * 8192 // 2
    assert tg.compute_s[0] == pytest.approx(2 * 8192**3 / 100e12)


def test_vector_ops_use_vector_throughput(toy_hw):
    x = TensorSpec("x", (4096, 2048), BF16)
    y = TensorSpec("y", (4096, 2048), BF16)
    op = Op("norm", "norm", "norm", 0, (x,), (y,), flops=4 * 4096 * 2048, act_read_bytes=x.nbytes,
            act_write_bytes=y.nbytes)
    tg = time_graph(_graph(op), toy_hw)
    assert tg.compute_s[0] == pytest.approx(4 * 4096 * 2048 / 10e12)


def test_launch_overhead_added_and_reported(toy_hw):
    hw = toy_hw.model_copy(update={"launch_overhead_s": 5e-6})
    tg = time_graph(_graph(_gemm_op(1, 64, 64)), hw)
    assert tg.time_s[0] == pytest.approx(5e-6 + max(tg.compute_s[0], tg.memory_s[0]))
    assert tg.bound == ("overhead",)


def test_gemv_tiling_traffic_by_hand():
    # m=1, n=k=4096, bf16, 64 KiB cache: the best tiling keeps a 1x1024 tile of C with tk=16, so the
    # 8 KiB activation row is read ceil(4096/1024) = 4 times, weights once, output once.
    traffic, tm, tn, tk = gemm_tiled_traffic_bytes(1, 4096, 4096, 2.0, 2.0, 2.0, 64 * 1024.0)
    assert (tm, tn, tk) == (1, 1024, 16)
    assert traffic == 4 * 4096 * 2 + 4096 * 4096 * 2 + 4096 * 2


def test_tiling_traffic_is_compulsory_when_everything_fits():
    traffic, *_ = gemm_tiled_traffic_bytes(1024, 1024, 1024, 2.0, 2.0, 2.0, 64 * 1024**2)
    assert traffic == 3 * 1024 * 1024 * 2


@settings(max_examples=60, deadline=None)
@given(m=st.integers(1, 5000), n=st.integers(16, 5000), k=st.integers(16, 5000),
       cap_kib=st.sampled_from([16, 64, 256, 1024, 8192]))
def test_tiling_traffic_bounds(m, n, k, cap_kib):
    small, *_ = gemm_tiled_traffic_bytes(m, n, k, 2.0, 2.0, 2.0, cap_kib * 1024.0)
    large, *_ = gemm_tiled_traffic_bytes(m, n, k, 2.0, 2.0, 2.0, cap_kib * 4 * 1024.0)
    compulsory = 2.0 * (m * k + k * n + m * n)
    assert small >= compulsory - 1e-6
    assert large <= small + 1e-6  # more cache never costs traffic


def test_tiling_and_hierarchical_never_faster_than_roofline(toy_hw):
    graph = _graph(_gemm_op(4096, 8192, 8192, name="a"), _gemm_op(1, 4096, 4096, name="b"),
                   _gemm_op(300, 14336, 4096, name="c"))
    feats = op_features(graph)
    base = COST_MODELS["roofline"](feats, toy_hw).time_s
    for name in ("tiling", "hierarchical"):
        t = COST_MODELS[name](feats, toy_hw).time_s
        assert np.all(t >= base * (1 - 1e-12)), name


def test_hierarchical_weights_shared_across_batch_hit_the_cache(toy_hw):
    # A 4096-token prefill GEMM reads the weights ceil(m/tm) times from HBM, far fewer than m.
    feats = op_features(_graph(_gemm_op(4096, 4096, 4096)))
    cost = COST_MODELS["hierarchical"](feats, toy_hw)
    weights = 4096 * 4096 * 2
    assert cost.memory_bytes[0] < 4096 * weights / 16
    assert cost.memory_bytes[0] >= 3 * weights


def test_cost_models_broadcast_over_leading_dims(toy_hw):
    feats = op_features(_graph(_gemm_op(1, 2048, 2048)))
    stacked = feats.with_work(np.stack([feats.flops, 2 * feats.flops]), np.stack([feats.weight_bytes] * 2),
                              np.stack([feats.act_bytes] * 2), np.stack([feats.kv_bytes] * 2))
    for name, fn in COST_MODELS.items():
        out = fn(stacked, toy_hw)
        assert out.time_s.shape == (2, 1), name


def test_unknown_cost_model_lists_known():
    with pytest.raises(CostModelError, match="hierarchical, roofline, tiling"):
        get_cost_model("magic")


def test_kernels_in_sequence_by_hand():
    # compute 10, memory 8: kernels (0.8, 0.4) and (0.2, 0.6) -> max(8, 3.2) + max(2, 4.8) = 12.8; one kernel: 10;
    # zero padding adds nothing; leading dimensions broadcast.
    split = np.array([[[0.8, 0.4], [0.2, 0.6]], [[1.0, 1.0], [0.0, 0.0]]])
    got = kernels_in_sequence_s(np.array([[10.0, 10.0], [1.0, 1.0]]), np.array([[8.0, 8.0], [8.0, 8.0]]), split)
    np.testing.assert_allclose(got, [[12.8, 10.0], [max(0.8, 3.2) + max(0.2, 4.8), 8.0]])


@settings(max_examples=200, deadline=None)
@given(st.floats(0.0, 1e3), st.floats(0.0, 1e3), st.lists(st.floats(0.01, 1.0), min_size=1, max_size=5),
       st.lists(st.floats(0.01, 1.0), min_size=1, max_size=5))
def test_kernels_in_sequence_bounds(compute_s, memory_s, flop_weights, byte_weights):
    # Kernels in sequence take at least one roofline over their summed work and at most the sum of both terms;
    # equal shares of FLOPs and bytes per kernel give exactly the one roofline.
    k = min(len(flop_weights), len(byte_weights))
    f = np.array(flop_weights[:k]) / sum(flop_weights[:k])
    b = np.array(byte_weights[:k]) / sum(byte_weights[:k])
    t = kernels_in_sequence_s(np.array([compute_s]), np.array([memory_s]), np.stack([f, b], axis=-1)[None])[0]
    one = max(compute_s, memory_s)
    # the absolute 1e-12 on both sides: a subnormal time (5e-324) times a share rounds to 0
    assert one * (1 - 1e-9) - 1e-12 <= t <= (compute_s + memory_s) * (1 + 1e-9) + 1e-12
    same = kernels_in_sequence_s(np.array([compute_s]), np.array([memory_s]), np.stack([f, f], axis=-1)[None])[0]
    assert same == pytest.approx(one)


def _norm_op(tokens: int, width: int) -> Op:
    x = TensorSpec("x", (tokens, width), BF16)
    y = TensorSpec("y", (tokens, width), BF16)
    return Op("norm", "norm", "norm", 0, (x,), (y,), flops=4 * tokens * width, act_read_bytes=x.nbytes,
              act_write_bytes=y.nbytes)


def test_hierarchical_memory_time_is_the_slowest_level_by_hand(toy_hw):
    # A norm has no GEMM shape: its compulsory bytes, 2 x 4096 x 2048 x 2 B = 32 MiB, cross every level.
    # smem -> L2 at 10 TB/s: 3.36 µs; L2 -> HBM at 1 TB/s: 33.6 µs. The levels work at the same time,
    # so the op takes the slowest one, 33.6 µs (their sum would be 36.9 µs).
    moved = 2 * 4096 * 2048 * 2
    cost = COST_MODELS["hierarchical"](op_features(_graph(_norm_op(4096, 2048))), toy_hw)
    assert cost.memory_s[0] == pytest.approx(moved / 1e12, rel=1e-12)
    assert cost.memory_bytes[0] == moved
    # With an L2 at 0.5 TB/s, slower than HBM, L2 is the slowest level: 67.1 µs.
    smem, l2, hbm = toy_hw.memory
    slow_l2 = toy_hw.model_copy(update={"memory": (smem, l2.model_copy(update={"bandwidth_bytes_per_s": 0.5e12}), hbm)})
    cost = COST_MODELS["hierarchical"](op_features(_graph(_norm_op(4096, 2048))), slow_l2)
    assert cost.memory_s[0] == pytest.approx(moved / 0.5e12, rel=1e-12)
    assert cost.time_s[0] == pytest.approx(max(moved / 0.5e12, 4 * 4096 * 2048 / 10e12), rel=1e-12)


def test_a_norm_wider_than_an_sm_moves_its_input_twice_on_the_gpu_presets() -> None:
    """An fp32 norm over 65536-wide rows on the h100-sxm preset (228 KB per SM): 3 passes of the tensor (two reads,
    one write) instead of 2; 16384-wide rows and the same op in a 4-SM cluster stay at 2."""
    from layerscope.cost.models import roofline
    from layerscope.hardware.presets import load_preset
    from layerscope.units import DType

    spec = load_preset("h100-sxm")

    def bytes_of(rows: int, cols: int, cluster: int = 1) -> float:
        x = TensorSpec("x", (rows, cols), DType.FP32, "activation")
        op = Op(name="norm", kind="norm", module="norm", layer=0, inputs=(x,),
                outputs=(TensorSpec("norm:out", (rows, cols), DType.FP32, "activation"),), flops=5 * rows * cols,
                act_read_bytes=x.nbytes, act_write_bytes=x.nbytes, attrs=(("row_cluster", cluster),))
        return float(roofline(op_features(OpGraph(ops=(op,), graph_inputs=frozenset({"x"}))), spec).memory_bytes[0])

    assert bytes_of(1024, 65536) == 3 * 1024 * 65536 * 4
    assert bytes_of(4096, 16384) == 2 * 4096 * 16384 * 4
    assert bytes_of(1024, 65536, cluster=4) == 2 * 1024 * 65536 * 4


def test_row_rereads_in_one_graph_fall_on_the_wide_rows_only_and_hold_on_a_memoized_graph() -> None:
    """A graph of a 16K-wide norm, a 65K-wide one, the 65K one in a 4-SM cluster and an add of 65K-wide rows:
    only the second reads its input twice; timing the graph again (facts kept in its features) gives the same."""
    from layerscope.cost.models import roofline
    from layerscope.hardware.presets import load_preset
    from layerscope.units import DType

    spec = load_preset("h100-sxm")
    ops, prev = [], "x"
    for i, (kind, cols, cluster) in enumerate((("norm", 16384, 1), ("norm", 65536, 1), ("norm", 65536, 4),
                                               ("residual_add", 65536, 1))):
        x = TensorSpec(prev, (1024, cols), DType.FP32, "activation")
        out = TensorSpec(f"op{i}:out", (1024, cols), DType.FP32, "activation")
        ops.append(Op(name=f"op{i}", kind=kind, module=f"op{i}", layer=0, inputs=(x,), outputs=(out,),
                      flops=5 * 1024 * cols, act_read_bytes=x.nbytes, act_write_bytes=x.nbytes,
                      attrs=(("row_cluster", cluster),)))
        prev = out.name if cols == 65536 else "x2"
    features = op_features(OpGraph(ops=tuple(ops), graph_inputs=frozenset({"x", "x2"})))
    twice = [2 * 1024 * 16384 * 4, 3 * 1024 * 65536 * 4, 2 * 1024 * 65536 * 4, 2 * 1024 * 65536 * 4]
    for _ in range(2):
        assert roofline(features, spec).memory_bytes.tolist() == twice
    mask = features.kind_mask("norm")
    assert mask.tolist() == [True, True, True, False] and features.kind_mask("norm") is mask
    assert not mask.flags.writeable


def _with_fitted_curve(hw, kind: str = "gpu"):
    data = hw.model_dump()
    data["kind"] = kind
    data["efficiency"]["matmul_half_flops"] = {"fp8": 0.0}
    return type(hw).from_dict(data)


def test_a_fitted_gpu_preset_charges_its_fp8_gemms_tile_and_wave_quantization_by_hand(toy_hw):
    # fp8 512 x 4096 x 4096 on the toy's 4 SMs: 4 row tiles x 26 column tiles of 160 = 104 tiles in 26 waves (the
    # fewest any BN reaches), useful share 512·4096 / (26·4·128·160); a preset with the fitted GEMM curve pays it
    fp8 = DType.FP8
    flops = 2 * 512 * 4096 * 4096
    graph = _graph(_gemm_op(512, 4096, 4096, fp8))
    q = 512 * 4096 / (26 * 4 * 128 * 160)
    assert time_graph(graph, _with_fitted_curve(toy_hw)).compute_s[0] == pytest.approx(flops / 200e12 / q)
    # a hand-set efficiency is one measured GEMM's fraction, its tile losses included; a CPU has no SM tiles;
    # 16-bit GEMMs run a library whose tiles are not published
    assert time_graph(graph, toy_hw).compute_s[0] == pytest.approx(flops / 200e12)
    assert time_graph(graph, _with_fitted_curve(toy_hw, "cpu")).compute_s[0] == pytest.approx(flops / 200e12)
    bf16 = _graph(_gemm_op(512, 4096, 4096))
    assert time_graph(bf16, _with_fitted_curve(toy_hw)).compute_s[0] == pytest.approx(flops / 100e12)
    # ops without weights (attention's products, eager bmm) run other kernels and pay none
    a, b = TensorSpec("a", (512, 4096), fp8), TensorSpec("b", (4096, 4096), fp8)
    c = TensorSpec("c", (512, 4096), fp8)
    bmm = Op(name="bmm", kind="gemm", module="bmm", layer=0, inputs=(a, b), outputs=(c,), flops=flops,
             act_read_bytes=a.nbytes + b.nbytes, act_write_bytes=c.nbytes, gemm=GemmShape(512, 4096, 4096))
    assert time_graph(_graph(bmm), _with_fitted_curve(toy_hw)).compute_s[0] == pytest.approx(flops / 200e12)
