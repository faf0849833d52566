"""Precision in the cost model: weight-only int4/int8 GEMMs, fp8 KV caches and fp8 attention (#27 point 5)."""

from __future__ import annotations

import pytest

from layerscope.analysis.kernel_replay import attention_op
from layerscope.cost.features import op_features
from layerscope.cost.models import roofline
from layerscope.graph._common import linear_op
from layerscope.graph.ops import OpGraph
from layerscope.hardware.kernel_fit import GemmRow, dtype_class, weight_only_stream
from layerscope.hardware.kernel_table import read_kernel_table
from layerscope.hardware.presets import load_base_preset, load_preset
from layerscope.hardware.spec import HardwareSpec
from layerscope.units import DType


def _spec(**efficiency: object) -> HardwareSpec:
    data = load_base_preset("h100-sxm").model_dump(mode="json", exclude={"calibration"})
    data["efficiency"].update(efficiency)
    return HardwareSpec.from_dict(data, origin="test")


def _cost(op, hw):
    return roofline(op_features(OpGraph(ops=(op,), graph_inputs=frozenset(t.name for t in op.inputs))), hw)


def test_weight_only_gemms_stream_at_their_weight_dtype_rate_and_compute_in_16_bits() -> None:
    hw = _spec(memory=0.8, weight_stream_k={"bf16": [[1, 1.0]], "int4": [[1, 0.5]]}, matmul_half_flops={})
    bw = hw.memory_bandwidth_bytes_per_s * 0.8
    gemv = linear_op("q", "q", 0, "x", m=1, n=8192, k=8192, weight_dtype=DType.INT4, act_dtype=DType.BF16)
    weights = 8192 * 8192 // 2
    acts = 8192 * 2 * 2
    assert gemv.weight_bytes == weights
    assert _cost(gemv, hw).memory_s[0] == pytest.approx(weights / (bw * 0.5) + acts / bw)
    dense = linear_op("q", "q", 0, "x", m=1, n=8192, k=8192, weight_dtype=DType.BF16, act_dtype=DType.BF16)
    assert _cost(dense, hw).memory_s[0] == pytest.approx(2 * weights * 2 / bw + acts / bw)
    prefill = linear_op("q", "q", 0, "x", m=4096, n=8192, k=8192, weight_dtype=DType.INT4, act_dtype=DType.BF16)
    assert _cost(prefill, hw).compute_s[0] == pytest.approx(prefill.flops / hw.achievable_flops_per_s("bf16"))


def test_the_int4_rate_is_fitted_on_the_marlin_row_by_hand() -> None:
    rows = {r.id: r for r in read_kernel_table()}
    assert dtype_class(rows["GX-32"]) == "w4a16" and dtype_class(rows["GX-21"]) is None
    g = GemmRow.of(rows["GX-32"])
    assert g is not None
    spec = load_base_preset("h100-sxm")
    t = 2 * 8192 * 8192 / 4.98e12
    w, a = 8192 * 8192 * 0.5, 8192 * 2 + 8192 * 2
    bw = spec.memory_bandwidth_bytes_per_s
    assert g.time_s == pytest.approx(t) and g.weight_bytes == w and g.act_bytes == a
    expected = w / (bw * (t - 2e-6 - a / (bw * 0.75)))
    assert weight_only_stream([g], spec, 0.75, 2e-6) == pytest.approx(expected)
    h100 = load_preset("h100-sxm").efficiency
    assert "GX-32" in h100.weight_stream_k_source and DType.INT4 in h100.weight_stream_k
    assert "int8 (weight-only w8a16): no rows" in h100.weight_stream_k_source


def test_an_fp8_kv_cache_halves_decode_attention_traffic() -> None:
    hw = _spec(attention_decode_memory=0.7, attention_decode_floor_s=5e-6)

    def decode(kv_bytes_per_elem: float):
        op = attention_op(16, 1, 4095, 32, 128, 128, causal=True, kv_bytes=16 * 4096 * 8 * 128 * 2 * kv_bytes_per_elem,
                          act_bytes=0, attended_pairs=4096)
        return _cost(op, hw).memory_s[0] - 5e-6

    assert decode(1) == pytest.approx(decode(2) / 2)


def test_fp8_attention_runs_on_the_fp8_curve() -> None:
    hw = _spec(attention_rows={"bf16": [[2, 0.5], [65536, 0.5]], "fp8": [[2, 0.4], [65536, 0.4]]},
               matmul_half_flops={})
    for dtype, fraction in ((DType.BF16, 0.5), (DType.FP8, 0.4)):
        op = attention_op(1, 4096, 0, 32, 128, 128, causal=True, kv_bytes=1e3, act_bytes=1e3,
                          attended_pairs=4096 * 4097 // 2, dtype=dtype)
        assert _cost(op, hw).compute_s[0] == pytest.approx(op.flops / (hw.achievable_flops_per_s(dtype) * fraction))


def test_without_published_int4_rows_a_gpu_takes_our_own_measured_rate() -> None:
    """Shipped presets take GX-32 (Marlin, H100) along NEAREST (a100-pcie -> a100-sxm -> h100-sxm, l40s likewise);
    with T8 held out no published int4 row is left anywhere, and the fit takes our own H200 rows
    (data/own-kernels.md) as weight bytes per second, never faster than the GPU's own streaming rate."""
    import json
    from pathlib import Path

    from layerscope.hardware.kernel_fit import fit_preset, own_kernel_rows

    own = own_kernel_rows()
    assert [r.id for r in own] == [f"OWN-W4-0{i}" for i in range(1, 6)]
    assert all(r.gpu == "h200" and dtype_class(r) == "w4a16" and r.gemm and r.gemm.m == 1 for r in own)
    # the packaged rows are the kept run's M = 1 records
    run = Path(__file__).resolve().parents[2] / "bench" / "gpu" / "h200-2026-11-27b" / "kernels-int4-cuda-graph.json"
    records = [r for r in json.loads(run.read_text())["records"] if r["kind"] == "gemm_w4a16" and r["m"] == 1]
    assert [(r.gemm.n, r.gemm.k) for r in own if r.gemm] == [(r["n"], r["k"]) for r in records]
    for row, rec in zip(own, records, strict=True):
        assert row.value == pytest.approx(rec["flops"] / rec["seconds_s"] / 1e12, rel=1e-3)
    for gpu in ("a100-pcie", "l40s", "h200"):
        source = load_preset(gpu).efficiency.weight_stream_k_source
        assert "w4a16, dequantized in the kernel): fitted on gpu-kernels.md rows GX-32" in source
        assert "own-kernels.md" not in source
    table = read_kernel_table()
    presets = {g: load_base_preset(g) for g in ("h100-sxm", "a100-sxm", "l40s")}
    held = fit_preset(presets["h100-sxm"], table, presets, exclude_sources=["T8"]).spec.efficiency
    assert "own-kernels.md rows OWN-W4-01" in held.weight_stream_k_source
    # on the H100: the H200's ~1.7 TB/s of int4 weights, a factor under 1 on its streaming rate
    h100_factor = held.weight_stream_k[DType.INT4][0][1]
    assert h100_factor < 1 and h100_factor * held.memory * 3.35e12 == pytest.approx(1.74e12, rel=0.15)
    # an l40s (864 GB/s) cannot stream them faster than its own plain rate
    l40s = fit_preset(presets["l40s"], table, presets, exclude_sources=["T8"]).spec.efficiency
    assert l40s.weight_stream_k[DType.INT4] == ((1.0, 1.0),)
