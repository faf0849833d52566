"""Fused attention timed by the fitted attention figures: decode floor and bandwidth, causal and non-causal
curves, head dim, and no GEMM W½ on top of its own curve."""

from __future__ import annotations

import pytest

from layerscope.analysis.kernel_replay import attention_op
from layerscope.cost.features import op_features
from layerscope.cost.models import roofline
from layerscope.graph.ops import OpGraph
from layerscope.hardware.presets import load_base_preset
from layerscope.hardware.spec import HardwareSpec


def _spec(**efficiency: object) -> HardwareSpec:
    base = load_base_preset("h100-sxm")
    data = base.model_dump(mode="json", exclude={"calibration"})
    data["efficiency"].update(efficiency)
    data["efficiency"]["matmul_half_flops"] = {"bf16": 2e9}
    return HardwareSpec.from_dict(data, origin="test")


def _cost(op, hw):
    return roofline(op_features(OpGraph(ops=(op,), graph_inputs=frozenset(t.name for t in op.inputs))), hw)


def _decode(batch: int = 8, kv: int = 4096):
    return attention_op(batch, 1, kv - 1, 32, 128, 128, causal=True, kv_bytes=batch * kv * 8 * 128 * 4,
                         act_bytes=batch * 32 * 256 * 2, attended_pairs=kv)


def test_decode_attention_pays_its_floor_and_streams_at_its_own_fraction() -> None:
    hw = _spec(attention_decode_memory=0.5, attention_decode_floor_s=10e-6)
    op = _decode()
    cost = _cost(op, hw)
    nbytes = op.kv_read_bytes + op.act_read_bytes + op.act_write_bytes
    assert cost.memory_s[0] == pytest.approx(10e-6 + nbytes / (hw.memory_bandwidth_bytes_per_s * 0.5))
    assert cost.time_s[0] == pytest.approx(cost.memory_s[0] + hw.launch_overhead_s)
    plain = _cost(op, _spec())
    assert plain.memory_s[0] == pytest.approx(nbytes / hw.achievable_bandwidth_bytes_per_s())


def test_prefill_is_not_a_decode_and_keeps_the_streaming_rate() -> None:
    hw = _spec(attention_decode_memory=0.5, attention_decode_floor_s=10e-6)
    op = attention_op(1, 512, 0, 32, 128, 128, causal=True, kv_bytes=1e6, act_bytes=1e6,
                       attended_pairs=512 * 513 // 2)
    assert _cost(op, hw).memory_s[0] == pytest.approx(2e6 / hw.achievable_bandwidth_bytes_per_s())


def test_cached_pairs_run_at_the_non_causal_curve_by_their_share() -> None:
    causal, noncausal = 0.4, 0.8
    hw = _spec(attention_rows={"bf16": [[2, causal], [65536, causal]]},
               attention_rows_noncausal={"bf16": [[2, noncausal], [65536, noncausal]]})
    rate = hw.achievable_flops_per_s("bf16")
    # 64 sequences: enough blocks to fill the chip (attention_occupancy is 1)
    op = attention_op(64, 100, 950, 32, 128, 128, causal=True, kv_bytes=1e3, act_bytes=1e3,
                       attended_pairs=100 * 101 // 2 + 100 * 950)
    share = 100 / (2 * 950 + 100)  # M / (2C + M) of the pairs are in the causal triangle
    fraction = 1 / (share / causal + (1 - share) / noncausal)
    assert _cost(op, hw).compute_s[0] == pytest.approx(op.flops / (rate * fraction))  # no GEMM W½ on top
    fresh = attention_op(64, 100, 0, 32, 128, 128, causal=True, kv_bytes=1e3, act_bytes=1e3,
                          attended_pairs=100 * 101 // 2)
    assert _cost(fresh, hw).compute_s[0] == pytest.approx(fresh.flops / (rate * causal))
    bidirectional = attention_op(64, 100, 0, 32, 128, 128, causal=False, kv_bytes=1e3, act_bytes=1e3,
                                  attended_pairs=100 * 100)
    assert _cost(bidirectional, hw).compute_s[0] == pytest.approx(bidirectional.flops / (rate * noncausal))


def test_narrow_heads_run_slower_by_the_head_dim_factor() -> None:
    hw = _spec(attention_rows={"bf16": [[2, 0.5], [65536, 0.5]]}, attention_half_head_dim=52.0)
    rate = hw.achievable_flops_per_s("bf16")
    op = attention_op(64, 512, 0, 32, 64, 64, causal=True, kv_bytes=1e3, act_bytes=1e3,
                       attended_pairs=512 * 513 // 2)
    assert _cost(op, hw).compute_s[0] == pytest.approx(op.flops / (rate * 0.5 * 64 / 116 * 180 / 128))


def test_without_an_attention_table_attention_keeps_the_gemm_half_performance_work() -> None:
    hw = _spec()
    op = attention_op(1, 512, 0, 32, 128, 128, causal=True, kv_bytes=1e3, act_bytes=1e3,
                       attended_pairs=512 * 513 // 2)
    assert _cost(op, hw).compute_s[0] == pytest.approx((op.flops + 2e9) / hw.achievable_flops_per_s("bf16"))


def test_a_launch_too_small_for_the_chip_runs_at_its_longest_block() -> None:
    from layerscope.cost.models import attention_occupancy

    def occupancy(batch: int, new: int, cached: int, causal: bool = True) -> float:
        op = attention_op(batch, new, cached, 32, 128, 128, causal=causal, kv_bytes=1e3, act_bytes=1e3,
                          attended_pairs=new * new)
        f = op_features(OpGraph(ops=(op,), graph_inputs=frozenset({"q"})))
        return float(attention_occupancy(f, 132)[0])

    # one sequence, 32 heads, 512 causal tokens: 128 blocks of 1..4 tiles (320 in all) on 132 SMs, held by 4
    assert occupancy(1, 512, 0) == pytest.approx((32 * 10 / 132) / 4)
    assert occupancy(1, 512, 0, causal=False) == pytest.approx((32 * 16 / 132) / 4)  # 4 tiles in every block
    assert occupancy(8, 512, 0) == 1.0 and occupancy(1, 4096, 0) == 1.0
    # 128 new tokens over 1920 cached: one query tile per head doing 16 tiles, 32 blocks on 132 SMs
    assert occupancy(1, 128, 1920) == pytest.approx((32 * 16 / 132) / 16)
    hw = _spec(attention_rows={"bf16": [[2, 0.5], [65536, 0.5]]})
    op = attention_op(1, 512, 0, 32, 128, 128, causal=True, kv_bytes=1e3, act_bytes=1e3, attended_pairs=512 * 513 // 2)
    expected = op.flops / (hw.achievable_flops_per_s("bf16") * 0.5 * (32 * 10 / 132) / 4)
    assert _cost(op, hw).compute_s[0] == pytest.approx(expected)
