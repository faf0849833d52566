"""Calibration fits: known parameters come back from synthetic measurements; bad input is refused."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from layerscope.cost import time_graph
from layerscope.errors import HardwareSpecError
from layerscope.graph import build_model_graph
from layerscope.hardware import dump_hardware_yaml, load_hardware
from layerscope.hardware.calibration import AttentionTable, CalibrationMeasurements, GemmTable, StreamTable, VectorTable
from layerscope.hardware.fit import (
    UnusableFitError,
    attention_rows_efficiency,
    calibrated_spec,
    combine_measurements,
    fit_bandwidth,
    fit_fresh_pages,
    fit_line_relative,
    fit_matmul,
    fit_measurements,
    hockney_time_s,
    matmul_rows_efficiency,
    matmul_shapes_efficiency,
    vector_kind_rates,
    weight_stream_factors,
)
from layerscope.hardware.spec import HardwareSpec
from layerscope.model import load_model_spec
from layerscope.units import DType
from layerscope.workload import make_workload

MIB = 1024**2
LLC = 32 * MIB
#: The "machine" the synthetic measurements come from.
TRUE = {
    "peak": {DType.FP32: 200e9, DType.BF16: 400e9},
    "half": {DType.FP32: 2e8, DType.BF16: 1e9},
    "dram_bw": 20e9,
    "cache_bw": 150e9,
    "overhead": 5e-6,
    "vector": 30e9,
}


def synthetic(noise: float = 0.0, outliers: int = 0, seed: int = 0) -> CalibrationMeasurements:
    """Measurements generated from TRUE with the models fit.py assumes, times x lognormal(noise);
    ``outliers`` random kernels of each table 10x slower (a disturbed run)."""
    rng = np.random.default_rng(seed)
    o, bw, cbw = TRUE["overhead"], TRUE["dram_bw"], TRUE["cache_bw"]

    def jitter(t: np.ndarray) -> list[float]:
        t = t * np.exp(rng.normal(0.0, noise, t.shape)) if noise else t
        t = t.copy()
        if outliers:
            t[rng.choice(t.size, outliers, replace=False)] *= 10.0
        return t.tolist()

    sizes = 16 * 1024 * 2.0 ** np.arange(14)  # 16 KiB .. 128 MiB arrays
    moved = np.repeat(2 * sizes, 2)
    rate = np.where(moved <= LLC / 2, cbw, bw)
    stream = StreamTable(kernel=["copy", "scale"] * sizes.size, moved_bytes=moved.tolist(),
                         footprint_bytes=moved.tolist(), time_s=jitter(o + moved / rate),
                         median_s=(o + moved / rate).tolist())
    rows = [(dt, m, n, k) for dt in (DType.FP32, DType.BF16) for n, k in ((2048, 2048), (8192, 2048))
            for m in (1, 4, 16, 64, 256, 1024, 2048)]
    dts = [r[0] for r in rows]
    m, n, k = (np.array([r[i] for r in rows], dtype=float) for i in (1, 2, 3))
    flops = 2 * m * n * k
    nbytes = (m * k + k * n + m * n) * np.array([dt.bytes for dt in dts])
    peak = np.array([TRUE["peak"][dt] for dt in dts])
    half = np.array([TRUE["half"][dt] for dt in dts])
    gemm_t = np.maximum((flops + half) / peak, nbytes / bw) + o
    gemm = GemmTable(dtype=dts, m=m.astype(int).tolist(), n=n.astype(int).tolist(), k=k.astype(int).tolist(),
                     time_s=jitter(gemm_t), median_s=gemm_t.tolist())
    elements = np.array([2**14, 2**16, 2**18, 2**20, 2**22] * 3)
    kernels = ["add"] * 5 + ["rmsnorm"] * 5 + ["softmax"] * 5
    per_el = np.array([1.0] * 5 + [40.0] * 5 + [50.0] * 5)  # norms/softmax made compute-bound
    vflops = per_el * elements
    vbytes = np.array([12.0] * 5 + [8.0] * 10) * elements
    vec_t = np.maximum(vflops / TRUE["vector"], vbytes / bw) + o
    vector = VectorTable(kernel=kernels, elements=elements.tolist(), flops=vflops.tolist(), moved_bytes=vbytes.tolist(),
                         footprint_bytes=vbytes.tolist(), time_s=jitter(vec_t), median_s=vec_t.tolist())
    return CalibrationMeasurements(device="cpu", device_name="synthetic", threads=2, torch_version="none",
                                   gemm=gemm, stream=stream, vector=vector, empty_op_s=[4e-6, 4.1e-6, 3.9e-6])


def check_recovered(fit, rel: float, half_rel: float) -> None:
    for dt in (DType.FP32, DType.BF16):
        assert fit.matmul[dt].peak_flops_per_s == pytest.approx(TRUE["peak"][dt], rel=rel)
        assert fit.matmul[dt].half_flops == pytest.approx(TRUE["half"][dt], rel=half_rel)
    assert fit.memory.bandwidth_bytes_per_s == pytest.approx(TRUE["dram_bw"], rel=rel)
    assert fit.cache is not None
    assert fit.cache.bandwidth_bytes_per_s == pytest.approx(TRUE["cache_bw"], rel=rel)
    assert fit.overhead.launch_overhead_s == pytest.approx(TRUE["overhead"], rel=max(half_rel, rel))
    assert fit.vector.vector_flops_per_s == pytest.approx(TRUE["vector"], rel=rel)


def test_exact_measurements_give_the_parameters_back() -> None:
    fit = fit_measurements(synthetic(), llc_bytes=LLC)
    check_recovered(fit, rel=1e-9, half_rel=1e-7)
    assert fit.matmul[DType.FP32].residuals.max_abs_rel_error < 1e-9
    assert fit.overhead.empty_op_s == pytest.approx(4e-6)
    assert fit.overhead.intercept_s == pytest.approx(5e-6)  # larger than the empty op: it wins


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_noisy_measurements_give_the_parameters_back_within_tolerance(seed: int) -> None:
    fit = fit_measurements(synthetic(noise=0.03, seed=seed), llc_bytes=LLC)
    # W_half is an intercept: a few % of the smallest compute-bound GEMM's time, so noisier.
    check_recovered(fit, rel=0.08, half_rel=0.35)
    assert fit.memory.residuals.rms_rel_error < 0.1


def test_disturbed_runs_are_dropped_as_outliers() -> None:
    fit = fit_measurements(synthetic(noise=0.02, outliers=2, seed=3), llc_bytes=LLC)
    # W_half is an intercept: a few % of the smallest compute-bound GEMM's time, so noisier.
    check_recovered(fit, rel=0.08, half_rel=0.35)
    stats = [fit.memory.residuals, fit.vector.residuals, *(f.residuals for f in fit.matmul.values())]
    assert sum(s.outliers for s in stats) >= 1


def test_line_fit_by_hand() -> None:
    # y = 1 + 2x through three exact points.
    assert fit_line_relative([1, 2, 3], [3, 5, 7], "t") == pytest.approx((1.0, 2.0))


def test_bandwidth_fit_by_hand() -> None:
    # 1 MB and 2 MB moved at 10 GB/s after a 10 us fixed cost: 110 us and 210 us.
    fit = fit_bandwidth([1e6, 2e6], [1e6, 2e6], [110e-6, 210e-6])
    assert fit.bandwidth_bytes_per_s == pytest.approx(10e9)
    assert fit.intercept_s == pytest.approx(10e-6)
    fixed = fit_bandwidth([1e6, 2e6], [1e6, 2e6], [110e-6, 210e-6], intercept_s=10e-6)
    assert fixed.bandwidth_bytes_per_s == pytest.approx(10e9)


def test_hockney_fit_by_hand() -> None:
    # r_inf = 100 GFLOP/s, W_half = 1 GFLOP: a 1 GFLOP GEMM takes 20 ms (half rate), 3 GFLOP 40 ms.
    assert hockney_time_s(np.array([1e9]), 100e9, 1e9)[0] == pytest.approx(0.02)
    fit = fit_matmul(np.array([1e9, 3e9]), np.array([1.0, 1.0]), np.array([0.02, 0.04]),
                     bandwidth_bytes_per_s=1e12, overhead_s=0.0)
    assert fit.peak_flops_per_s == pytest.approx(100e9)
    assert fit.half_flops == pytest.approx(1e9)


def test_negative_intercept_means_no_shape_dependence() -> None:
    # Times slightly below proportional: the line's intercept is negative, W_half is clamped to 0.
    fit = fit_matmul(np.array([1e9, 2e9, 4e9]), np.ones(3), np.array([0.0099, 0.02, 0.0401]),
                     bandwidth_bytes_per_s=1e12, overhead_s=0.0)
    assert fit.half_flops == 0.0
    assert fit.peak_flops_per_s == pytest.approx(100e9, rel=0.01)


@settings(max_examples=40, deadline=None)
@given(a=st.floats(1e-7, 1e-3), b=st.floats(1e-12, 1e-8), x0=st.floats(1e3, 1e6), ratio=st.floats(1.5, 100))
def test_line_fit_recovers_any_exact_line(a: float, b: float, x0: float, ratio: float) -> None:
    x = x0 * ratio ** np.arange(4)
    fa, fb = fit_line_relative(x, a + b * x, "t")
    assert fb == pytest.approx(b, rel=1e-6)
    assert fa == pytest.approx(a, rel=1e-5, abs=1e-9 * (a + b * x[-1]))


@pytest.mark.parametrize("x, y, message", [
    ([1e6], [1e-3], "two or more distinct sizes"),
    ([1e6, 1e6, 1e6], [1e-3, 1.1e-3, 0.9e-3], "two or more distinct sizes"),
    ([1e6, 2e6], [1e-3, 1e-3], "does not grow"),
    ([1e6, 2e6], [1e-3, 0.0], "finite and > 0"),
])
def test_degenerate_bandwidth_inputs_are_refused(x: list[float], y: list[float], message: str) -> None:
    with pytest.raises(HardwareSpecError, match=message):
        fit_bandwidth(x, x, y)


def test_degenerate_gemm_inputs_are_refused() -> None:
    with pytest.raises(HardwareSpecError, match="two or more distinct sizes"):
        fit_matmul(np.array([1e9]), np.array([1.0]), np.array([0.01]), bandwidth_bytes_per_s=1e12, overhead_s=0.0)
    with pytest.raises(HardwareSpecError, match="two or more distinct sizes"):  # all memory-bound
        fit_matmul(np.array([1e6, 2e6]), np.array([1e9, 2e9]), np.array([0.1, 0.2]),
                   bandwidth_bytes_per_s=1e10, overhead_s=0.0)


def test_missing_tables_are_refused() -> None:
    meas = synthetic()
    with pytest.raises(HardwareSpecError, match="empty-op"):
        fit_measurements(meas.model_copy(update={"empty_op_s": []}), llc_bytes=LLC)
    with pytest.raises(HardwareSpecError, match="no GEMM"):
        fit_measurements(meas.model_copy(update={"gemm": GemmTable()}), llc_bytes=LLC)
    with pytest.raises(HardwareSpecError, match="llc_bytes"):
        fit_measurements(meas, llc_bytes=0)


def test_unequal_columns_are_refused() -> None:
    with pytest.raises(ValueError, match="differ in length"):
        StreamTable(kernel=["copy"], moved_bytes=[1.0, 2.0], footprint_bytes=[1.0], time_s=[1.0], median_s=[1.0])


def test_calibrated_spec_reproduces_the_machine_and_round_trips(tmp_path) -> None:
    levels = [{"name": "l2", "capacity_bytes": 2 * MIB, "per_engine": True},
              {"name": "l3", "capacity_bytes": LLC}, {"name": "dram", "capacity_bytes": 16e9}]
    hw = calibrated_spec(synthetic(), name="synthetic", description="test", kind="cpu", engine_count=2,
                         memory_levels=levels, llc_bytes=LLC)
    assert hw.achievable_flops_per_s(DType.BF16) == pytest.approx(400e9)
    # The measured per-(M, N) table replaces W½ and the per-M table in the spec; both stay in the record.
    assert hw.matmul_half_flops(DType.BF16) == 0.0
    assert hw.calibration is not None
    assert hw.calibration.fit.matmul[DType.BF16].half_flops == pytest.approx(1e9)
    assert hw.matmul_rows(DType.BF16) == () and hw.calibration.fit.matmul_rows[DType.BF16]
    shapes = hw.matmul_shapes(DType.BF16)
    assert shapes == hw.matmul_shapes(DType.FP16)  # fp16 falls back to the bf16 unit
    ms = sorted({m for m in hw.calibration.measurements.gemm.m if m > 1})
    assert [(m, n) for m, n, _ in shapes] == [(m, 8192.0) for m in ms]  # the pooled projection widths
    assert all(0 < f <= 1 for _, _, f in shapes)
    assert hw.achievable_bandwidth_bytes_per_s() == pytest.approx(20e9)
    assert hw.level("l3").bandwidth_bytes_per_s == pytest.approx(150e9)
    assert hw.launch_overhead_s == pytest.approx(5e-6)
    assert hw.execution.cold_outputs and hw.execution.activations_in_cache
    assert "row count M and output width N" in hw.efficiency.matmul_shapes_source
    assert hw.source("engines.peak_flops_per_s.fp32").startswith("calibrated")
    path = tmp_path / "hw.yaml"
    path.write_text(dump_hardware_yaml(hw))
    again = load_hardware(path)
    assert again == hw
    assert again.calibration is not None and len(again.calibration.measurements.gemm) == 28


def test_cold_op_times_set_the_spec_overhead_and_leave_the_fits_alone() -> None:
    # The microbenchmark fits keep the hot overhead; the spec charges the median cold per-kernel time.
    levels = [{"name": "l3", "capacity_bytes": LLC}, {"name": "dram", "capacity_bytes": 16e9}]
    meas = synthetic().model_copy(update={"cold_op_s": [9e-6, 8e-6, 30e-6]})
    hw = calibrated_spec(meas, name="s", description="t", kind="cpu", engine_count=2, memory_levels=levels,
                         llc_bytes=LLC)
    assert hw.launch_overhead_s == pytest.approx(9e-6)
    assert hw.calibration is not None
    overhead = hw.calibration.fit.overhead
    assert overhead.launch_overhead_s == pytest.approx(5e-6) and overhead.cold_op_s == pytest.approx(9e-6)
    assert "after weights streamed" in hw.source("launch_overhead_s")
    warm = fit_measurements(synthetic(), llc_bytes=LLC)
    cold = fit_measurements(meas, llc_bytes=LLC)
    assert cold.matmul == warm.matmul and cold.vector == warm.vector and cold.memory == warm.memory


def test_matmul_rows_efficiency_by_hand() -> None:
    # Two shapes at M = 4 and one at M = 64 on a 100 GFLOP/s peak, 1 us overhead: the median
    # of the achieved/peak ratios per M; M = 1 (GEMV) is left out; ratios above 1 are capped.
    gemm = GemmTable(dtype=[DType.FP32] * 4, m=[1, 4, 4, 64], n=[1024, 1024, 2048, 1024], k=[1024] * 4,
                     time_s=[1e-3, 2 * 4 * 1024 * 1024 / 50e9 + 1e-6, 2 * 4 * 2048 * 1024 / 25e9 + 1e-6,
                             2 * 64 * 1024 * 1024 / 200e9 + 1e-6],
                     median_s=[1e-3, 2 * 4 * 1024 * 1024 / 50e9 + 1e-6, 2 * 4 * 2048 * 1024 / 25e9 + 1e-6,
                               2 * 64 * 1024 * 1024 / 200e9 + 1e-6])
    rows = matmul_rows_efficiency(gemm, DType.FP32, 100e9, 1e-6)
    assert [m for m, _ in rows] == [4.0, 64.0]
    assert rows[0][1] == pytest.approx((0.5 + 0.25) / 2)
    assert rows[1][1] == 1.0


def test_attention_rows_efficiency_by_hand() -> None:
    # Two head shapes at 128 tokens (20% and 30% of a 100 GFLOP/s peak after a 1 us overhead) and one
    # at 1024 (120%, capped at 1): the median per query length; bf16 rows and one-token rows left out.
    flops = [1e8, 2e8, 3e9, 1e8, 1e6]
    fractions = [0.2, 0.3, 1.2, 0.5, 0.5]
    t = [f / (r * 100e9) + 1e-6 for f, r in zip(flops, fractions, strict=True)]
    table = AttentionTable(dtype=[DType.FP32] * 3 + [DType.BF16, DType.FP32], batch=[1] * 5, heads=[32, 16, 32, 32, 32],
                           kv_heads=[8] * 5, head_dim=[64, 128, 64, 64, 64], query_len=[128, 128, 1024, 128, 1],
                           flops=flops, time_s=t, median_s=t)
    rows = attention_rows_efficiency(table, DType.FP32, 100e9, 1e-6)
    assert rows == [(128.0, pytest.approx(0.25)), (1024.0, 1.0)]
    assert attention_rows_efficiency(table, DType.FP16, 100e9, 1e-6) == []


def test_vector_kind_rates_by_hand_and_out_of_the_pooled_fit() -> None:
    # argmax rows at 2 and 4 GFLOP/s (after the 5 us overhead) against the synthetic 30 GFLOP/s vector rate:
    # the sampling kind runs at the median, 3 GFLOP/s, 3/30 = 10% of it; the pooled vector fit is unchanged.
    flops = [128256.0, 8 * 128256.0]
    t = [flops[0] / 2e9 + TRUE["overhead"], flops[1] / 4e9 + TRUE["overhead"]]
    rows = VectorTable(kernel=["argmax"] * 2, elements=[128256, 8 * 128256], flops=flops,
                       moved_bytes=[4 * f for f in flops], footprint_bytes=[4 * f for f in flops], time_s=t, median_s=t)
    assert vector_kind_rates(rows, TRUE["overhead"], LLC) == {"sampling": pytest.approx(3e9)}
    # a row beyond the LLC is the memory term's: left out
    assert vector_kind_rates(rows, TRUE["overhead"], 1e6) == {"sampling": pytest.approx(2e9)}
    base = synthetic()
    joined = VectorTable(**{col: list(getattr(base.vector, col)) + list(getattr(rows, col))
                            for col in VectorTable.model_fields})
    with_argmax = fit_measurements(base.model_copy(update={"vector": joined}), llc_bytes=LLC)
    plain = fit_measurements(base, llc_bytes=LLC)
    assert with_argmax.vector == plain.vector and plain.vector_per_kind == {}
    assert with_argmax.vector_per_kind["sampling"] == pytest.approx(3e9 / plain.vector.vector_flops_per_s)
    levels = [{"name": "dram", "capacity_bytes": 64e9}]
    hw = calibrated_spec(base.model_copy(update={"vector": joined}), name="s", description="t", kind="cpu",
                         engine_count=2, memory_levels=levels, llc_bytes=LLC)
    assert hw.achievable_vector_flops_per_s("sampling") == pytest.approx(3e9)
    assert hw.achievable_vector_flops_per_s("norm") == hw.achievable_vector_flops_per_s()
    assert hw.engines.vector_flops_per_s == pytest.approx(30e9) and hw.efficiency.vector == 1.0


def test_a_kind_faster_than_the_pooled_rate_becomes_the_vector_peak(tmp_path) -> None:
    # The SiLU in cache at 60 GFLOP/s (twice the pooled 30): the spec's vector peak is 60 GFLOP/s, the
    # pooled kinds run at efficiency.vector = 0.5 of it, the activation kind at 1.0, sampling at 3/60. The
    # out-of-cache SiLU row (footprint 128 MiB, 10 GFLOP/s) is left to the memory term. A row of the retired
    # silu_mul kernel (an older calibration's; 1 GFLOP/s) enters no fit: the pooled rate stays 30 GFLOP/s.
    o = TRUE["overhead"]
    elements = [2**18, 2**20, 2**24]
    flops = [4.0 * n for n in elements]
    rates = [60e9, 60e9, 10e9]
    t = [f / r + o for f, r in zip(flops, rates, strict=True)]
    t += [128256.0 / 3e9 + o, 5.0 * 2**18 / 1e9 + o]
    rows = VectorTable(kernel=["silu"] * 3 + ["argmax", "silu_mul"], elements=[*elements, 128256, 2**18],
                       flops=[*flops, 128256.0, 5.0 * 2**18],
                       moved_bytes=[8.0 * n for n in elements] + [4 * 128256.0, 20.0 * 2**18],
                       footprint_bytes=[8.0 * n for n in elements] + [4 * 128256.0, 16.0 * 2**18], time_s=t, median_s=t)
    base = synthetic()
    joined = base.model_copy(update={"vector": VectorTable(**{
        col: list(getattr(base.vector, col)) + list(getattr(rows, col)) for col in VectorTable.model_fields})})
    fit = fit_measurements(joined, llc_bytes=LLC)
    assert fit.vector.vector_flops_per_s == pytest.approx(30e9)
    assert fit.vector_reference_flops_per_s == pytest.approx(60e9)
    assert fit.vector_peak_flops_per_s == fit.vector_reference_flops_per_s
    assert fit.vector_per_kind == {"activation": pytest.approx(1.0), "sampling": pytest.approx(0.05)}
    levels = [{"name": "l3", "capacity_bytes": LLC}, {"name": "dram", "capacity_bytes": 16e9}]
    hw = calibrated_spec(joined, name="s", description="t", kind="cpu", engine_count=2, memory_levels=levels,
                         llc_bytes=LLC)
    assert hw.engines.vector_flops_per_s == pytest.approx(60e9) and hw.efficiency.vector == pytest.approx(0.5)
    assert hw.achievable_vector_flops_per_s("activation") == pytest.approx(60e9)
    assert hw.achievable_vector_flops_per_s("norm") == pytest.approx(30e9)
    assert hw.achievable_vector_flops_per_s("sampling") == pytest.approx(3e9)
    assert "activation (silu)" in hw.efficiency.vector_per_kind_source and "fastest" in hw.efficiency.vector_source
    path = tmp_path / "hw.yaml"
    path.write_text(dump_hardware_yaml(hw))
    assert load_hardware(path) == hw


def _gemms(shapes: list[tuple[int, int, int, float]]) -> GemmTable:
    """fp32 GEMMs (m, n, k, fraction of a 100 GFLOP/s peak) after a 1 us overhead."""
    t = [2 * m * n * k / (f * 100e9) + 1e-6 for m, n, k, f in shapes]
    return GemmTable(dtype=[DType.FP32] * len(shapes), m=[x[0] for x in shapes], n=[x[1] for x in shapes],
                     k=[x[2] for x in shapes], time_s=t, median_s=t)


def test_matmul_shapes_efficiency_by_hand() -> None:
    # Projection widths pooled per M: at M = 8, 50% (2048 x 2048), 30% (8192 x 2048), 40% (2048 x 8192)
    # -> median 40%, placed at the largest projection width, 8192; 120% at M = 64 capped at 1; M = 1
    # (GEMV) left out. The vocabulary-wide lm_head at M = 8: 20% at K = 2048 and 30% at K = 4096 ->
    # 25% at N = 128256, kept apart instead of pulling the pooled median down.
    gemm = _gemms([(1, 2048, 2048, 0.1), (8, 2048, 2048, 0.5), (8, 8192, 2048, 0.3), (8, 2048, 8192, 0.4),
                   (64, 2048, 2048, 1.2)])
    wide = _gemms([(1, 128256, 2048, 0.05), (8, 128256, 2048, 0.2), (8, 128256, 4096, 0.3)])
    table = matmul_shapes_efficiency(gemm, wide, DType.FP32, 100e9, 1e-6)
    assert [(m, n) for m, n, _ in table] == [(8.0, 8192.0), (64.0, 8192.0), (8.0, 128256.0)]
    assert [f for _, _, f in table] == pytest.approx([0.4, 1.0, 0.25])
    assert matmul_shapes_efficiency(gemm, GemmTable(), DType.BF16, 100e9, 1e-6) == []


def test_wide_gemms_get_their_own_efficiency_and_stay_out_of_the_hockney_fit() -> None:
    # The synthetic machine, plus vocabulary-wide N = 128256 GEMMs at M = 16 .. 64 running at 35-60% of
    # the peak (MKL's small-M sgemm at vocabulary width on the reference CPU). Their work is
    # large because N is: inside the Hockney fit they would pull r_inf down; they only set their own
    # entries of the per-(M, N) table.
    base = synthetic()
    g = base.gemm
    wide_m = [16, 32, 64]
    n, k = 128256, 2048
    peak = TRUE["peak"][DType.FP32]
    fractions = [0.35, 0.5, 0.6]  # about what the reference CPU's fp32 lm_head reached
    wide_t = [TRUE["overhead"] + 2 * m * n * k / (f * peak) for m, f in zip(wide_m, fractions, strict=True)]
    wide = GemmTable(dtype=[DType.FP32] * 3, m=wide_m, n=[n] * 3, k=[k] * 3, time_s=wide_t, median_s=wide_t)
    meas = base.model_copy(update={"gemm_wide": wide})
    levels = [{"name": "l3", "capacity_bytes": LLC}, {"name": "dram", "capacity_bytes": 16e9}]
    hw = calibrated_spec(meas, name="s", description="t", kind="cpu", engine_count=2, memory_levels=levels,
                         llc_bytes=LLC)
    assert hw.calibration is not None
    assert hw.calibration.fit.matmul == fit_measurements(base, llc_bytes=LLC).matmul
    assert hw.peak_flops(DType.FP32) == pytest.approx(TRUE["peak"][DType.FP32])
    table = {(m, nn): f for m, nn, f in hw.matmul_shapes(DType.FP32)}
    assert [table[(float(m), float(n))] for m in wide_m] == pytest.approx(fractions, rel=1e-9)
    # The projection widths' pooled curve at N = 8192: the per-M medians of the record.
    assert [(m, f) for (m, nn), f in table.items() if nn == 8192] == hw.calibration.fit.matmul_rows[DType.FP32]
    # In the Hockney fit they would have: r_inf drops (their W is that of M = 1000+ projections).
    both = GemmTable(**{c: getattr(g, c) + getattr(wide, c) for c in GemmTable.model_fields})
    mixed = fit_measurements(base.model_copy(update={"gemm": both}), llc_bytes=LLC)
    assert mixed.matmul[DType.FP32].peak_flops_per_s < 0.97 * TRUE["peak"][DType.FP32]
    assert hw.calibration.summary()["measured"]["gemm_wide_points"] == 3


def test_spec_peak_is_at_least_every_rate_measured() -> None:
    # The synthetic machine with its M = 2048 GEMMs running 15% above the Hockney curve (what the
    # reference CPU showed: r_inf fitted over all M at 164 GFLOP/s, M = 1024 measured at 189).
    # Capped at 1, the per-M fractions would make those GEMMs 15% slow; the spec's peak becomes the
    # best measured rate, the fractions are of it, and the measured time comes back.
    base = synthetic()
    g = base.gemm
    fast = [1.0 / 1.15 if m == 2048 else 1.0 for m in g.m]
    gemm = g.model_copy(update={"time_s": [t * f for t, f in zip(g.time_s, fast, strict=True)],
                                "median_s": [t * f for t, f in zip(g.median_s, fast, strict=True)]})
    meas = base.model_copy(update={"gemm": gemm})
    levels = [{"name": "l3", "capacity_bytes": LLC}, {"name": "dram", "capacity_bytes": 16e9}]
    hw = calibrated_spec(meas, name="s", description="t", kind="cpu", engine_count=2, memory_levels=levels,
                         llc_bytes=LLC)
    fit = hw.calibration.fit  # type: ignore[union-attr]
    o = fit.overhead.launch_overhead_s
    best = max(2 * m * n * k / (t - o) for d, m, n, k, t in zip(gemm.dtype, gemm.m, gemm.n, gemm.k, gemm.median_s,
                                                                  strict=True) if d == DType.FP32 and m > 1)
    assert fit.matmul[DType.FP32].peak_flops_per_s < best  # the curve stays below the best point
    assert hw.peak_flops(DType.FP32) == pytest.approx(best)
    assert fit.matmul_reference[DType.FP32] == pytest.approx(best)
    # the M = 2048 fraction: the median of its two shapes' rates over the best of them (not capped)
    fractions = {m: f for m, _, f in hw.matmul_shapes(DType.FP32)}
    assert 0.99 < fractions[2048.0] < 1.0 and all(0 < f <= 1 for f in fractions.values())


def test_calibrated_spec_recovers_the_attention_rates_and_times_a_prefill_with_them(tmp_path) -> None:
    # SDPA measured at 30% / 60% / 90% of the spec's fp32 peak with 128 / 512 / 2048 tokens: the
    # spec carries those fractions, and a 1024-token prefill's attention op runs at 75% (halfway in log M).
    levels = [{"name": "l3", "capacity_bytes": LLC}, {"name": "dram", "capacity_bytes": 64e9}]

    def spec(meas: CalibrationMeasurements) -> HardwareSpec:
        return calibrated_spec(meas, name="s", description="t", kind="cpu", engine_count=2, memory_levels=levels,
                               llc_bytes=LLC)

    peak = spec(synthetic()).peak_flops(DType.FP32)
    lens, fractions = [128, 512, 2048], [0.3, 0.6, 0.9]
    flops = [32 * (s * (s + 1) // 2) * (4 * 64 + 5) for s in lens]
    t = [f / (r * peak) + TRUE["overhead"] for f, r in zip(flops, fractions, strict=True)]
    table = AttentionTable(dtype=[DType.FP32] * 3, batch=[1] * 3, heads=[32] * 3, kv_heads=[8] * 3,
                           head_dim=[64] * 3, query_len=lens, flops=[float(f) for f in flops], time_s=t, median_s=t)
    hw = spec(synthetic().model_copy(update={"attention": table}))
    assert hw.peak_flops(DType.FP32) == peak
    assert [m for m, _ in hw.attention_rows(DType.FP32)] == [128.0, 512.0, 2048.0]
    assert [f for _, f in hw.attention_rows(DType.FP32)] == pytest.approx(fractions, rel=1e-6)
    assert hw.attention_rows(DType.BF16) == () and "scaled_dot_product_attention" in hw.efficiency.attention_rows_source
    (tmp_path / "hw.yaml").write_text(dump_hardware_yaml(hw))
    assert load_hardware(tmp_path / "hw.yaml") == hw
    spec_1b = load_model_spec("llama-3.2-1b")
    w = make_workload(phase="prefill", prompt_len=1024, weight_dtype="fp32", act_dtype="fp32", kv_dtype="fp32")
    g = build_model_graph(spec_1b, w.prefill_pass(), w)
    attn = g.index["layers.0.self_attn.attn"]
    assert time_graph(g, hw).compute_s[attn] == pytest.approx(g.ops[attn].flops / (peak * 0.75), rel=1e-6)


def test_combine_measurements_takes_the_best_and_the_median_of_medians() -> None:
    # Three runs of one grid whose GEMM medians drift by x1, x1.3 and x0.9: the combined median is the
    # x1 run's, the best the fastest run's; the empty-op samples are pooled; another grid is refused.
    base = synthetic()
    runs = []
    for scale in (1.0, 1.3, 0.9):
        gemm = base.gemm.model_copy(update={"time_s": [t * scale for t in base.gemm.time_s],
                                            "median_s": [t * scale for t in base.gemm.median_s]})
        runs.append(base.model_copy(update={"gemm": gemm}))
    combined = combine_measurements(runs)
    assert combined.gemm.median_s == pytest.approx(base.gemm.median_s)
    assert combined.gemm.time_s == pytest.approx([t * 0.9 for t in base.gemm.time_s])
    assert combined.stream == base.stream and len(combined.empty_op_s) == 3 * len(base.empty_op_s)
    assert combine_measurements(runs[:1]).gemm == base.gemm
    other = base.model_copy(update={"gemm": base.gemm.model_copy(update={"m": [m + 1 for m in base.gemm.m]})})
    with pytest.raises(HardwareSpecError, match="no gemm point in common"):
        combine_measurements([base, other])
    # A quick run that skipped its largest GEMMs (CalibrationGrid.max_gemm_s): only the common points are kept,
    # each still the best / median over every run.
    fewer = runs[2].model_copy(update={"gemm": GemmTable(**{col: getattr(runs[2].gemm, col)[:-3]
                                                            for col in GemmTable.model_fields})})
    both = combine_measurements([runs[1], fewer])
    assert list(both.gemm.m) == list(base.gemm.m[:-3])
    assert both.gemm.time_s == pytest.approx([t * 0.9 for t in base.gemm.time_s[:-3]])
    assert both.gemm.median_s == pytest.approx([t * 1.1 for t in base.gemm.median_s[:-3]])
    with pytest.raises(HardwareSpecError, match="threads"):
        combine_measurements([base, base.model_copy(update={"threads": 4})])
    with pytest.raises(HardwareSpecError, match="no calibration runs"):
        combine_measurements([])


def test_weight_stream_factors_by_hand() -> None:
    # One-row fp32 GEMMs after a 1 us overhead: K = 1024 at 16 GB/s for N = 2048 and 24 GB/s for N = 512
    # (median 20), K = 8192 at 30 GB/s, against a 20 GB/s main memory: factors 1.0 and 1.5, not capped;
    # rows with M > 1 and other dtypes are left out.
    shapes = [(1, 2048, 1024, 16e9), (1, 512, 1024, 24e9), (1, 2048, 8192, 30e9), (4, 2048, 1024, 1e9)]
    t = [n * k * 4 / rate + 1e-6 for _, n, k, rate in shapes]
    gemv = GemmTable(dtype=[DType.FP32] * 4, m=[s[0] for s in shapes], n=[s[1] for s in shapes],
                     k=[s[2] for s in shapes], time_s=t, median_s=t)
    assert weight_stream_factors(gemv, DType.FP32, 20e9, 1e-6) == [(1024.0, pytest.approx(1.0)),
                                                                    (8192.0, pytest.approx(1.5))]
    assert weight_stream_factors(gemv, DType.BF16, 20e9, 1e-6) == []


def test_gemv_and_module_call_measurements_reach_the_spec(tmp_path) -> None:
    # The GEMV table becomes efficiency.weight_stream_k relative to the spec's main-memory bandwidth (the
    # synthetic machine's 20 GB/s copy rate: no GEMV stream rows); the cold module-call samples' median
    # becomes execution.module_call_s; combining runs keeps both.
    levels = [{"name": "l3", "capacity_bytes": LLC}, {"name": "dram", "capacity_bytes": 16e9}]
    t = [2048 * k * 4 / rate for k, rate in ((2048, 20e9), (8192, 25e9))]
    gemv = GemmTable(dtype=[DType.FP32] * 2, m=[1, 1], n=[2048, 2048], k=[2048, 8192], time_s=t, median_s=t)
    meas = synthetic().model_copy(update={"gemv": gemv, "cold_op_s": [8e-6] * 3,
                                          "cold_module_call_s": [10e-6, 30e-6, 12e-6],
                                          "grouped_mm_group_s": [1.1e-6, 1.3e-6, 0.9e-6, -0.2e-6]})
    hw = calibrated_spec(meas, name="s", description="t", kind="cpu", engine_count=2, memory_levels=levels,
                         llc_bytes=LLC)
    o = TRUE["overhead"]
    assert hw.achievable_bandwidth_bytes_per_s() == pytest.approx(20e9, rel=1e-3)
    bw = hw.achievable_bandwidth_bytes_per_s()
    expected = [(float(k), 2048 * k * 4 / (tt - o) / bw) for k, tt in zip((2048, 8192), t, strict=True)]
    got = hw.weight_stream_k(DType.FP32)
    assert [k for k, _ in got] == [2048.0, 8192.0]
    assert [f for _, f in got] == pytest.approx([f for _, f in expected])
    assert "reduction width K" in hw.efficiency.weight_stream_k_source
    assert hw.execution.module_call_s == pytest.approx(12e-6)
    assert hw.calibration is not None and hw.calibration.fit.overhead.module_call_s == pytest.approx(12e-6)
    assert "module calls" in hw.execution.source
    # The grouped GEMM's per-group samples: their median (one noisy negative sample among them).
    assert hw.execution.grouped_mm_group_s == pytest.approx(1.0e-6)
    assert hw.calibration.fit.overhead.grouped_mm_group_s == pytest.approx(1.0e-6)
    assert "grouped GEMM groups" in hw.execution.source
    path = tmp_path / "hw.yaml"
    path.write_text(dump_hardware_yaml(hw))
    assert load_hardware(path) == hw
    both = combine_measurements([meas, meas])
    assert both.gemv == meas.gemv and len(both.cold_module_call_s) == 6 and len(both.grouped_mm_group_s) == 8
    # Not measured (older files, GPUs): no table, no module time.
    plain = calibrated_spec(synthetic(), name="s", description="t", kind="cpu", engine_count=2,
                            memory_levels=levels, llc_bytes=LLC)
    assert plain.efficiency.weight_stream_k == {} and plain.execution.module_call_s == 0.0
    assert plain.efficiency.activation_stream is None  # main memory is copy/scale's rate already
    assert plain.execution.grouped_mm_group_s == 0.0


def test_activation_stream_is_copy_scale_on_median_times_over_the_gemv_rate(tmp_path) -> None:
    # GEMV weight streaming at 10 GB/s (the spec's main memory) beside copy/scale at 20 GB/s on median times
    # (40 GB/s best-of): efficiency.activation_stream = 20 / 10 = 2.
    o = TRUE["overhead"]
    base = synthetic()
    st = base.stream
    best = [o + (t - o) / 2 for t in st.time_s]
    foot = [4 * LLC, 8 * LLC]
    stream = StreamTable(kernel=[*st.kernel, "gemv", "gemv"], moved_bytes=[*st.moved_bytes, 16 * MIB, 16 * MIB],
                         footprint_bytes=[*st.footprint_bytes, *foot],
                         time_s=[*best, o + 16 * MIB / 10e9, o + 16 * MIB / 10e9],
                         median_s=[*st.median_s, o + 16 * MIB / 10e9, o + 16 * MIB / 10e9])
    meas = base.model_copy(update={"stream": stream})
    levels = [{"name": "l3", "capacity_bytes": LLC}, {"name": "dram", "capacity_bytes": 16e9}]
    hw = calibrated_spec(meas, name="s", description="t", kind="cpu", engine_count=2, memory_levels=levels,
                         llc_bytes=LLC)
    assert hw.calibration is not None
    fit = hw.calibration.fit
    assert fit.memory.bandwidth_bytes_per_s == pytest.approx(40e9, rel=1e-6)  # best-of, kept in the record
    assert fit.activation_stream is not None and fit.activation_stream.bandwidth_bytes_per_s == pytest.approx(20e9)
    assert hw.achievable_bandwidth_bytes_per_s() == pytest.approx(10e9)
    assert hw.efficiency.activation_stream == pytest.approx(2.0)
    assert "median times" in hw.efficiency.activation_stream_source
    path = tmp_path / "hw.yaml"
    path.write_text(dump_hardware_yaml(hw))
    assert load_hardware(path) == hw
    # without GEMV rows main memory is copy/scale's (best-of) rate: no separate streaming factor
    assert calibrated_spec(base, name="s", description="t", kind="cpu", engine_count=2, memory_levels=levels,
                           llc_bytes=LLC).efficiency.activation_stream is None


def test_cold_samples_by_reuse_distance_fit_per_distance(tmp_path) -> None:
    # Three samples at each of two reuse distances: the fit keeps each distance's medians (a module call's
    # at least 0), the spec's execution carries them as its cold_by_reuse points, and the scalar fallbacks
    # (launch_overhead_s, module_call_s) are the largest distance's.
    levels = [{"name": "l3", "capacity_bytes": LLC}, {"name": "dram", "capacity_bytes": 16e9}]
    meas = synthetic().model_copy(update={
        "cold_op_s": [2e-6, 3e-6, 2.5e-6, 9e-6, 7e-6, 8e-6],
        "cold_module_call_s": [-1e-6, -2e-6, 0.5e-6, 30e-6, -0.5e-6, 25e-6],
        "cold_reuse_bytes": [256 * MIB, 16 * MIB, 16 * MIB, 256 * MIB, 16 * MIB, 256 * MIB]})
    hw = calibrated_spec(meas, name="s", description="t", kind="cpu", engine_count=2, memory_levels=levels,
                         llc_bytes=LLC)
    assert hw.calibration is not None
    o = hw.calibration.fit.overhead
    assert o.cold_reuse_bytes == [16 * MIB, 256 * MIB]
    assert o.cold_kernel_s == pytest.approx([3e-6, 8e-6])  # medians of (3, 2.5, 7) and (2, 9, 8) us
    assert o.cold_module_call_by_reuse_s == pytest.approx([0.0, 25e-6])  # median -0.5 us held at 0
    points = [(p.reuse_bytes, p.kernel_s, p.module_call_s) for p in hw.execution.cold_by_reuse]
    assert points == [(16 * MIB, pytest.approx(3e-6), 0.0), (256 * MIB, pytest.approx(8e-6), pytest.approx(25e-6))]
    assert hw.launch_overhead_s == pytest.approx(8e-6) and hw.execution.module_call_s == pytest.approx(25e-6)
    assert "reuse distance" in hw.execution.source
    path = tmp_path / "hw.yaml"
    path.write_text(dump_hardware_yaml(hw))
    assert load_hardware(path) == hw
    assert len(combine_measurements([meas, meas]).cold_reuse_bytes) == 12
    # A file from before the distances were recorded cannot be pooled with one after.
    older = meas.model_copy(update={"cold_reuse_bytes": []})
    with pytest.raises(HardwareSpecError, match="reuse distance"):
        combine_measurements([meas, older])
    with pytest.raises(ValueError, match="cold samples' lists differ in length"):
        CalibrationMeasurements.model_validate({**meas.model_dump(), "cold_reuse_bytes": [16 * MIB]})


def _fresh_samples(per_byte: dict[float, float], samples: int = 3) -> dict[str, list[float]]:
    """Synthetic fresh-allocation samples: the reused run at 20 GB/s over 5 x the tensor bytes (g, u read;
    two outputs written, one read), the fresh one that plus 2 x bytes x per_byte[size]."""
    out: dict[str, list[float]] = {"fresh_alloc_bytes": [], "fresh_alloc_s": [], "reused_alloc_s": []}
    for size, extra in per_byte.items():
        for i in range(samples):
            reused = 5 * size / 20e9 * (1 + 0.01 * i)
            out["fresh_alloc_bytes"].append(size)
            out["reused_alloc_s"].append(reused)
            out["fresh_alloc_s"].append(reused + 2 * size * extra)
    return out


def test_fresh_pages_fit_recovers_threshold_and_cost_per_byte(tmp_path) -> None:
    # Faults from 32 MiB on (150 ns/KiB ~ 146 us/MiB at 64 and 128 MiB, half that at 32 MiB where malloc can
    # still serve one tensor from its heap); the 16 MiB size faulted once in a cold start and 31 MiB never.
    # The threshold is the smallest size from which every larger one faults (32 MiB, not 16); the cost
    # per byte the median over the faulting sizes of at least twice the threshold.
    c = 1.4e-10
    samples = _fresh_samples({16 * MIB: c, 31 * MIB: 0.0, 32 * MIB: c / 2, 64 * MIB: c, 128 * MIB: 1.2 * c})
    meas = synthetic().model_copy(update=samples)
    fit = fit_fresh_pages(meas)
    assert fit is not None
    assert fit.sizes_bytes == [16 * MIB, 31 * MIB, 32 * MIB, 64 * MIB, 128 * MIB]
    assert fit.faulting == [True, False, True, True, True]
    assert fit.min_bytes == 32 * MIB
    assert fit.s_per_byte == pytest.approx(1.1 * c, rel=1e-6)  # median of c and 1.2c
    assert fit.extra_s_per_byte == pytest.approx([c, 0.0, c / 2, c, 1.2 * c], rel=1e-6, abs=1e-15)
    levels = [{"name": "l3", "capacity_bytes": LLC}, {"name": "dram", "capacity_bytes": 16e9}]
    hw = calibrated_spec(meas, name="s", description="t", kind="cpu", engine_count=2, memory_levels=levels,
                         llc_bytes=LLC)
    assert hw.execution.fresh_pages is not None
    assert hw.execution.fresh_pages.min_bytes == 32 * MIB
    assert hw.execution.fresh_pages.s_per_byte == pytest.approx(1.1 * c, rel=1e-6)
    assert "page faults" in hw.execution.source
    path = tmp_path / "hw.yaml"
    path.write_text(dump_hardware_yaml(hw))
    assert load_hardware(path) == hw
    assert len(combine_measurements([meas, meas]).fresh_alloc_s) == 2 * len(meas.fresh_alloc_s)


def test_fresh_pages_fit_without_faults_or_samples() -> None:
    # An allocator that reuses every size (jemalloc, a GPU's caching allocator): no threshold, no spec field;
    # the largest size not faulting means none does, whatever smaller ones did; no samples: no fit.
    levels = [{"name": "l3", "capacity_bytes": LLC}, {"name": "dram", "capacity_bytes": 16e9}]
    for per_byte in ({16 * MIB: 0.0, 64 * MIB: 0.0}, {16 * MIB: 1e-10, 64 * MIB: 0.0}):
        meas = synthetic().model_copy(update=_fresh_samples(per_byte))
        fit = fit_fresh_pages(meas)
        assert fit is not None and fit.min_bytes is None and fit.s_per_byte == 0.0
        hw = calibrated_spec(meas, name="s", description="t", kind="cpu", engine_count=2, memory_levels=levels,
                             llc_bytes=LLC)
        assert hw.execution.fresh_pages is None and "page faults" not in hw.execution.source
    assert fit_fresh_pages(synthetic()) is None
    with pytest.raises(ValueError, match="fresh-allocation samples' lists differ in length"):
        CalibrationMeasurements.model_validate({**synthetic().model_dump(), "fresh_alloc_s": [1e-3]})


def test_fresh_pages_fit_counts_a_size_that_faults_in_some_samples() -> None:
    # At malloc's threshold the heap sometimes holds the tensor: 32 MiB faulted in 1 of 3 samples (in full),
    # which is a quarter or more, so the threshold is 32 MiB; 16 MiB never did; 64 MiB always.
    c = 1.2e-10
    meas = synthetic().model_copy(update=_fresh_samples({16 * MIB: 0.0, 32 * MIB: 0.0, 64 * MIB: c}))
    fresh = list(meas.fresh_alloc_s)
    fresh[3] += 2 * 32 * MIB * c  # the first 32 MiB sample
    fit = fit_fresh_pages(meas.model_copy(update={"fresh_alloc_s": fresh}))
    assert fit is not None and fit.faulting == [False, True, True] and fit.min_bytes == 32 * MIB
    assert abs(fit.extra_s_per_byte[1]) < 0.05 * c  # the median sample did not fault
    assert fit.s_per_byte == pytest.approx(c)


# --- figures fitted out of range: clamped or dropped, and flagged ---------------------------------------------

LEVELS = [{"name": "l3", "capacity_bytes": LLC}, {"name": "dram", "capacity_bytes": 16e9}]


def with_gemv(factors: dict[int, float], *, ref_bw: float = 10e9, dtype: DType = DType.BF16,
              median_s: dict[int, float] | None = None) -> CalibrationMeasurements:
    """synthetic() plus a GEMV weight stream at ``ref_bw`` (two rows beyond 4x LLC: the spec's main memory) and one
    ``dtype`` one-row GEMM per K streaming its [2048, K] weights at ``factors[K]`` x ``ref_bw``."""
    o = TRUE["overhead"]
    base = synthetic()
    st = base.stream
    ref_t = o + 16 * MIB / ref_bw
    stream = StreamTable(kernel=[*st.kernel, "gemv", "gemv"], moved_bytes=[*st.moved_bytes, 16 * MIB, 16 * MIB],
                         footprint_bytes=[*st.footprint_bytes, 4 * LLC, 8 * LLC], time_s=[*st.time_s, ref_t, ref_t],
                         median_s=[*st.median_s, ref_t, ref_t])
    ks = sorted(factors)
    t = [(median_s or {}).get(k, o + 2048 * k * dtype.bytes / (factors[k] * ref_bw)) for k in ks]
    gemv = GemmTable(dtype=[dtype] * len(ks), m=[1] * len(ks), n=[2048] * len(ks), k=ks, time_s=t, median_s=t)
    return base.model_copy(update={"stream": stream, "gemv": gemv})


def spec_of(meas: CalibrationMeasurements) -> HardwareSpec:
    return calibrated_spec(meas, name="s", description="t", kind="cpu", engine_count=2, memory_levels=LEVELS,
                           llc_bytes=LLC)


def test_a_weight_stream_factor_of_4_3_is_clamped_and_flagged_not_fatal(tmp_path) -> None:
    # The busy-machine abort: a bf16 GEMV fitted at 4.3x the reference bandwidth, beyond the spec's bound of 4.
    with pytest.raises(ValueError, match=r"factors must be in \(0, 4\], got \[4.3"):
        HardwareSpec.model_validate({**spec_of(synthetic()).model_dump(), "efficiency": {
            "weight_stream_k": {"bf16": [(2048, 4.3)]}}})
    meas = with_gemv({512: 1.2, 2048: 4.3, 8192: 2.0})
    fit = fit_measurements(meas, llc_bytes=LLC)
    gemv_rows = [f"stream[{len(synthetic().stream)}]", f"stream[{len(synthetic().stream) + 1}]"]
    [flag] = fit.flags
    assert (flag.figure, flag.at, flag.bound, flag.action, flag.replacement) == (
        "efficiency.weight_stream_k.bf16", "K=2048", "(0, 4]", "clamped", 4.0)
    assert flag.value == pytest.approx(4.3, rel=1e-3)
    assert flag.rows == ["gemv[1]", *gemv_rows] and flag.remeasured == 0  # the GEMV row and the reference rows
    assert flag.message() == ("efficiency.weight_stream_k.bf16 at K=2048: fitted 4.3, outside (0, 4]; "
                              "not re-measured; clamped to 4")
    hw = spec_of(meas)
    got = hw.weight_stream_k(DType.BF16)
    assert [k for k, _ in got] == [512.0, 2048.0, 8192.0]
    assert [f for _, f in got] == pytest.approx([1.2, 4.0, 2.0], rel=1e-3)
    assert hw.calibration is not None and hw.calibration.fit.flags == [flag]
    path = tmp_path / "hw.yaml"
    path.write_text(dump_hardware_yaml(hw))
    again = load_hardware(path)
    assert again == hw and again.calibration is not None and again.calibration.fit.flags == [flag]
    # Rows taken again before the fit gave up carry their count into the flag.
    retaken = fit_measurements(meas.model_copy(update={"remeasured": {"gemv[1]": 2, gemv_rows[0]: 2}}),
                               llc_bytes=LLC).flags[0]
    assert retaken.remeasured == 2 and "re-measured 2x, still out of range; clamped to 4" in retaken.message()
    # In range, nothing is flagged and the factors are the measured ones.
    assert fit_measurements(with_gemv({512: 1.2, 2048: 3.9}), llc_bytes=LLC).flags == []


def test_a_factor_that_is_not_positive_is_dropped_and_flagged() -> None:
    # An infinite median (a corrupted file) gives a factor of 0: that K leaves the table; a dtype left without
    # rows leaves it too.
    meas = with_gemv({512: 1.2, 2048: 1.5}, median_s={512: float("inf")})
    fit = fit_measurements(meas, llc_bytes=LLC)
    [flag] = fit.flags
    assert (flag.figure, flag.at, flag.value, flag.action, flag.replacement) == (
        "efficiency.weight_stream_k.bf16", "K=512", 0.0, "dropped", None)
    assert [k for k, _ in fit.weight_stream_k[DType.BF16]] == [2048.0]
    assert "dropped from the spec" in flag.message()
    alone = fit_measurements(with_gemv({512: 1.2}, median_s={512: float("inf")}), llc_bytes=LLC)
    assert alone.weight_stream_k == {} and len(alone.flags) == 1
    assert spec_of(with_gemv({512: 1.2}, median_s={512: float("inf")})).efficiency.weight_stream_k == {}


def test_an_impossible_gemv_bandwidth_is_dropped_and_main_memory_falls_back_to_copy_scale() -> None:
    # 1 PB/s of GEMV weight streaming on a CPU: not the machine. Main memory is then copy/scale's 20 GB/s.
    # The bf16 GEMV streams at 1.5x copy/scale's rate: its factor, now over that, stays in range.
    meas = with_gemv({2048: 1.0}, ref_bw=1e15, median_s={2048: TRUE["overhead"] + 2048 * 2048 * 2 / (1.5 * 20e9)})
    hw = spec_of(meas)
    assert hw.calibration is not None
    [flag] = hw.calibration.fit.flags
    assert (flag.figure, flag.action) == ("calibration.fit.weight_stream", "dropped")
    assert flag.value == pytest.approx(1e15, rel=1e-3) and flag.bound == "[1e+08, 1e+13] B/s (a cpu)"
    assert hw.calibration.fit.weight_stream is None
    assert hw.achievable_bandwidth_bytes_per_s() == pytest.approx(TRUE["dram_bw"], rel=1e-6)
    assert hw.weight_stream_k(DType.BF16) == (pytest.approx((2048.0, 1.5)),)


def test_an_activation_stream_factor_above_the_bound_is_clamped_and_flagged() -> None:
    # copy/scale at 20 GB/s on median times over a 4 GB/s GEMV reference: 5x, beyond the bound of 4.
    hw = spec_of(with_gemv({2048: 1.0}, ref_bw=4e9))
    assert hw.efficiency.activation_stream == 4.0
    assert hw.calibration is not None
    [flag] = hw.calibration.fit.flags
    assert (flag.figure, flag.action, flag.replacement) == ("efficiency.activation_stream", "clamped", 4.0)
    assert flag.value == pytest.approx(5.0, rel=1e-3)


def test_a_main_memory_bandwidth_out_of_range_is_unusable_and_names_its_measurements() -> None:
    # copy/scale beyond 4x LLC at 20 MB/s: no spec can do without main memory, so the fit fails with the rows
    # a calibration run takes again.
    base = synthetic()
    st = base.stream
    dram = [foot >= 4 * LLC for foot in st.footprint_bytes]
    slow = [t * 1000 if far else t for t, far in zip(st.time_s, dram, strict=True)]
    meas = base.model_copy(update={"stream": st.model_copy(update={"time_s": slow})})
    with pytest.raises(UnusableFitError, match=r"main-memory bandwidth .*outside \[1e\+08, 1e\+13\] B/s") as info:
        spec_of(meas)
    assert info.value.rows == [f"stream[{i}]" for i, far in enumerate(dram) if far] and info.value.rows
    assert isinstance(info.value, HardwareSpecError)
