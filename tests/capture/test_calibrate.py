"""A tiny real calibration run through torch: its spec loads back and times a model."""

from __future__ import annotations

import platform
from dataclasses import replace

import pytest

pytest.importorskip("torch")

from layerscope.capture.calibrate import (
    FULL_GRID,
    QUICK_GRID,
    CalibrationGrid,
    _fitting_shapes,
    _stream_sizes,
    calibrate,
)
from layerscope.cost import estimate
from layerscope.errors import CaptureError
from layerscope.hardware import dump_hardware_yaml, load_hardware
from layerscope.hardware.calibration import CalibrationRun
from layerscope.model import load_model_spec
from layerscope.units import DType
from layerscope.workload import make_workload

MIB = 1024**2
#: A few seconds on two cores: two GEMM widths, three m, a "wide" 4096 x 512 at two m, fp32 only, stream arrays
#: 16 KiB .. 4x LLC in x8 steps.
TINY = CalibrationGrid(gemm_m=(1, 64, 256), gemm_nk=((512, 512), (1024, 1024)), gemm_wide_nk=((4096, 512),),
                       gemm_wide_m=(1, 8), dtypes=("fp32",), stream_step=8, vector_elements=(16 * 1024, 256 * 1024),
                       attention_lens=(32, 128), attention_heads=((4, 2, 16),), sampling_vocab=4096,
                       sampling_rows=(1, 2), activation_elements=(16 * 1024, 64 * 1024),
                       gemv_k=(256, 1024), gemv_n=256, min_time_s=0.01, empty_op_samples=3, cold_op_samples=5,
                       cold_reuse_llc=(0.5, 2.0), cold_pool_llc=2.0, grouped_mm_samples=2,
                       fresh_alloc_mib=(2, 64), fresh_alloc_samples=2)


@pytest.mark.slow
def test_tiny_calibration_round_trips_and_times_a_model(tmp_path) -> None:
    # The one real measurement of the suite (every task of _plan timed on this machine), so slow: the
    # re-measuring and CLI tests replay a kept run instead.
    steps: list[tuple[int, int, str]] = []
    hw = calibrate("cpu", grid=TINY, name="tiny",
                   progress=lambda done, total, label: steps.append((done, total, label)))
    assert hw.calibration is not None
    meas = hw.calibration.measurements
    assert meas.threads >= 1 and meas.torch_version and meas.device == "cpu"
    assert len(meas.gemm) == 6 and set(meas.gemm.dtype) == {DType.FP32}
    # The wide shape goes to its own table (per-(M, N) efficiency only, not the Hockney fit).
    assert list(zip(meas.gemm_wide.m, meas.gemm_wide.n, strict=True)) == [(1, 4096), (8, 4096)]
    assert set(meas.stream.kernel) == {"copy", "scale", "gemv"} and len(meas.empty_op_s) == 3
    assert {"add", "mul", "rmsnorm", "softmax", "argmax", "silu"} == set(meas.vector.kernel)
    # greedy sampling's argmax and the SiLU get their own fractions of the vector peak, out of the pooled
    # fit; the peak is at least the pooled rate and every kind's
    assert [n for k, n in zip(meas.vector.kernel, meas.vector.elements, strict=True) if k == "argmax"] == [4096, 8192]
    assert [n for k, n in zip(meas.vector.kernel, meas.vector.elements, strict=True) if k == "silu"] == [
        16 * 1024, 64 * 1024]
    silu = next(f for k, f in zip(meas.vector.kernel, meas.vector.flops, strict=True) if k == "silu")
    assert silu == 4 * 16 * 1024  # the graph's count for the SiLU (the product is the activation's second kernel)
    assert set(hw.efficiency.vector_per_kind) == {"sampling", "activation"}
    assert "argmax" in hw.efficiency.vector_per_kind_source and "silu" in hw.efficiency.vector_per_kind_source
    assert {"argmax", "silu"}.isdisjoint(hw.calibration.fit.vector.per_kernel_flops_per_s)
    assert hw.engines.vector_flops_per_s >= hw.calibration.fit.vector.vector_flops_per_s
    assert max(hw.efficiency.vector, *hw.efficiency.vector_per_kind.values()) == pytest.approx(1.0)
    # copy/scale's median rate beyond the LLC over the GEMV rate
    assert hw.efficiency.activation_stream is not None and hw.calibration.fit.activation_stream is not None
    assert steps[-1] == (steps[-1][1], steps[-1][1], "done") and steps[0][0] == 0
    # Any CPU does 0.1 GFLOP/s .. 100 TFLOP/s of fp32 GEMM, moves 0.1 .. 2000 GB/s, dispatches in < 1 ms.
    assert 1e8 < hw.peak_flops(DType.FP32) < 1e14
    assert 1e8 < hw.memory_bandwidth_bytes_per_s < 2e12
    assert 0 < hw.launch_overhead_s < 1e-3
    # The per-(M, N) table (projection widths pooled at the largest, the wide shape apart), and main memory
    # at the GEMV weight-streaming rate.
    assert [(m, n) for m, n, _ in hw.matmul_shapes(DType.FP32)] == [(64.0, 1024.0), (256.0, 1024.0), (8.0, 4096.0)]
    assert [m for m, _ in hw.calibration.fit.matmul_rows[DType.FP32]] == [64.0, 256.0]
    assert hw.calibration.fit.weight_stream is not None
    assert hw.memory_bandwidth_bytes_per_s == pytest.approx(hw.calibration.fit.weight_stream.bandwidth_bytes_per_s)
    assert hw.execution.kernels == "hf-eager" and hw.execution.activations_in_cache and hw.execution.cold_outputs
    # Causal SDPA at each prefill length, with the graph's FLOP count of a fused attention op; its
    # efficiency by query length is what the spec carries.
    att = meas.attention
    assert list(att.query_len) == [32, 128] and set(att.heads) == {4} and set(att.kv_heads) == {2}
    assert att.flops[0] == 4 * (32 * 33 // 2) * (4 * 16 + 5)
    assert [m for m, _ in hw.attention_rows(DType.FP32)] == [32.0, 128.0]
    assert all(0 < f <= 1 for _, f in hw.attention_rows(DType.FP32))
    # The spec charges the cold per-kernel time measured after a weight stream, never less than the hot one.
    # Five samples at each reuse distance (mock layers of half and twice the LLC), fitted per distance into
    # the spec's cold costs by reuse; the scalar fallbacks are the largest distance's.
    assert len(meas.cold_op_s) == len(meas.cold_module_call_s) == len(meas.cold_reuse_bytes) == 10
    llc = hw.calibration.fit.overhead
    assert sorted(set(meas.cold_reuse_bytes)) == llc.cold_reuse_bytes
    assert llc.cold_reuse_bytes[1] == pytest.approx(4 * llc.cold_reuse_bytes[0])
    cold = hw.execution.cold_by_reuse
    assert [p.reuse_bytes for p in cold] == llc.cold_reuse_bytes
    assert [p.kernel_s for p in cold] == llc.cold_kernel_s and all(p.kernel_s > 0 for p in cold)
    assert hw.execution.module_call_s == pytest.approx(llc.module_call_s) == cold[-1].module_call_s
    # torch._grouped_mm's loop over expert groups: a per-group host time well under a millisecond.
    assert len(meas.grouped_mm_group_s) == 2
    assert hw.execution.grouped_mm_group_s == pytest.approx(hw.calibration.fit.overhead.grouped_mm_group_s)
    assert 0 < hw.execution.grouped_mm_group_s < 1e-3
    # One-row GEMMs at each K beyond the LLC: the spec's weight-stream factors by reduction width.
    assert list(zip(meas.gemv.m, meas.gemv.n, meas.gemv.k, strict=True)) == [(1, 256, 256), (1, 256, 1024)]
    assert [k for k, _ in hw.weight_stream_k(DType.FP32)] == [256.0, 1024.0]
    assert all(0.05 < f < 4 for _, f in hw.weight_stream_k(DType.FP32))
    assert hw.launch_overhead_s == pytest.approx(hw.calibration.fit.overhead.cold_op_s) == cold[-1].kernel_s
    assert hw.launch_overhead_s >= 0.5 * hw.calibration.fit.overhead.empty_op_s
    # New tensors against reused ones, two samples per size; under glibc's malloc a 64 MiB tensor is mmapped
    # anew every time (its mmap threshold stops at 32 MiB), so its first write faults every page in.
    assert meas.fresh_alloc_bytes == [2 * MIB] * 2 + [64 * MIB] * 2
    assert all(t > 0 for t in meas.fresh_alloc_s + meas.reused_alloc_s)
    pages = hw.calibration.fit.fresh_pages
    assert pages is not None and pages.sizes_bytes == [2 * MIB, 64 * MIB]
    if platform.system() == "Linux" and platform.libc_ver()[0] == "glibc":
        assert pages.faulting[-1] and pages.min_bytes is not None and hw.execution.fresh_pages is not None
        assert 1e-12 < hw.execution.fresh_pages.s_per_byte < 1e-8  # 1 us .. 10 ms per MiB
    path = tmp_path / "hw.yaml"
    path.write_text(dump_hardware_yaml(hw))
    again = load_hardware(path)
    assert again == hw
    spec = load_model_spec("llama-3.2-1b")
    est = estimate(spec, again, make_workload(phase="prefill", prompt_len=64, weight_dtype="fp32", act_dtype="fp32",
                                              kv_dtype="fp32"), layer=0)
    assert est.ttft_s > 0 and len(est.ops) > 5


def test_stream_sizes_reach_past_the_last_level_cache() -> None:
    sizes = _stream_sizes(QUICK_GRID, 32 * MIB, 16e9)
    assert sizes[0] == 16 * 1024
    # Two array sizes whose two-array footprint is >= 4x LLC: what the main-memory fit needs.
    assert sum(2 * s >= 4 * 32 * MIB for s in sizes) >= 2
    assert max(sizes) <= 16e9 / 8
    assert len(FULL_GRID.gemm_m) > len(QUICK_GRID.gemm_m) and 1 in FULL_GRID.gemm_m and 2048 in FULL_GRID.gemm_m


def test_both_grids_measure_a_vocabulary_wide_lm_head_at_decode_batch_sizes() -> None:
    # lm_head computes one row per sequence: N = vocabulary (Llama 3: 128256) at M = batch size. Small-M
    # fp32 GEMMs run slower per FLOP at that width than at projection widths (38 against 50-60 GFLOP/s at
    # M = 8 on the reference CPU), so the grid must measure it, at M = 2 and 8 as well as the ends.
    for grid in (FULL_GRID, QUICK_GRID):
        assert (128256, 2048) in grid.gemm_wide_nk
        assert {1, 2, 8, 16} <= set(grid.gemm_wide_m) and max(grid.gemm_wide_m) <= 256
        assert {2, 8} <= set(grid.gemm_m)


def test_wide_shapes_beyond_an_eighth_of_memory_are_skipped(caplog) -> None:
    shapes = ((128256, 2048), (4096, 512))
    assert _fitting_shapes(shapes, 16e9) == list(shapes)
    with caplog.at_level("WARNING"):
        assert _fitting_shapes(shapes, 4e9) == [(4096, 512)]
    assert "128256x2048" in caplog.text


def test_bad_device_and_dtype_are_capture_errors() -> None:
    with pytest.raises(CaptureError, match="cpu or cuda"):
        calibrate("tpu", grid=TINY)
    with pytest.raises(CaptureError, match="unsupported GEMM dtypes"):
        calibrate("cpu", grid=CalibrationGrid(gemm_m=(1,), gemm_nk=((8, 8),), dtypes=("fp64",)))


#: The figures a slow GEMV reference puts out of range.
REFERENCE_FIGURES = ("efficiency.weight_stream_k.fp32", "calibration.fit.weight_stream")


def test_a_disturbed_reference_is_re_measured_and_the_run_fits_clean(replay_calibration) -> None:
    # The kept run replayed (no real timing): the first take of each of its two GEMV reference rows is 50x slow.
    calls = replay_calibration(slow_calls=2)
    notes: list[str] = []
    runs: list[CalibrationRun] = []
    hw = calibrate("cpu", grid=TINY, name="tiny", notify=notes.append, checkpoint=runs.append)
    assert hw.calibration is not None
    meas = hw.calibration.measurements
    # One round took the reference rows again (and the GEMV rows, when the factors were what tripped), once.
    assert len(notes) == 1 and "round 1 of 2" in notes[0] and ": fitted " in notes[0] and "outside" in notes[0]
    assert any(figure in notes[0] for figure in REFERENCE_FIGURES), notes
    assert calls[0] == 4
    gemv_refs = {f"stream[{i}]" for i, k in enumerate(meas.stream.kernel) if k == "gemv"}
    assert len(gemv_refs) == 2
    assert gemv_refs <= set(meas.remeasured) <= gemv_refs | {f"gemv[{i}]" for i in range(len(meas.gemv))}
    assert set(meas.remeasured.values()) == {1}
    # the best of the two takes is the undisturbed one: everything fits in range
    assert hw.calibration.fit.flags == [] and hw.calibration.fit.weight_stream is not None
    assert all(0.05 < f < 4 for _, f in hw.weight_stream_k(DType.FP32))
    # the run went to the checkpoint complete, and again after the re-measurement
    assert runs[-1].complete and runs[-1].measurements == meas and len(runs) >= 2


def test_a_reference_still_out_of_range_is_clamped_or_dropped_and_flagged(replay_calibration) -> None:
    calls = replay_calibration(slow_calls=10**6)
    notes: list[str] = []
    hw = calibrate("cpu", grid=TINY, name="tiny", notify=notes.append)
    assert len(notes) == 2 and calls[0] == 6  # MAX_REMEASURE_ROUNDS, each taking the two reference rows again
    assert hw.calibration is not None
    flags = hw.calibration.fit.flags
    assert flags and {f.figure for f in flags} <= set(REFERENCE_FIGURES)
    assert all(f.remeasured == 2 for f in flags)
    for flag in flags:
        if flag.figure == "calibration.fit.weight_stream":  # dropped: main memory is copy/scale's
            assert flag.action == "dropped" and flag.value < 1e8 and hw.calibration.fit.weight_stream is None
        else:
            assert flag.action == "clamped" and flag.value > 4 and flag.replacement == 4.0
    assert all(0 < f <= 4 for _, f in hw.weight_stream_k(DType.FP32))


def test_a_crash_keeps_the_measurements_taken(monkeypatch: pytest.MonkeyPatch) -> None:
    runs: list[CalibrationRun] = []

    def progress(done: int, total: int, label: str) -> None:
        if label.startswith("gemm"):
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        calibrate("cpu", grid=TINY, progress=progress, checkpoint=runs.append)
    run = runs[-1]  # written when the run stopped (and every few seconds before)
    assert not any(r.complete for r in runs) and [r.measured for r in runs] == sorted(r.measured for r in runs)
    assert 0 < run.measured < run.total
    assert len(run.measurements.stream) > 0 and len(run.measurements.gemm) == 0
    assert run.llc_bytes > 0 and run.memory_levels[-1]["name"] == "dram"


def test_a_quick_grid_skips_gemms_that_would_run_past_its_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    # Per (dtype, N, K), once two M > 1 are measured, an M whose time extrapolated from the last one exceeds
    # max_gemm_s is skipped (so is every larger M); the fit still has its two compute-bound sizes. The GEMMs
    # are planned for real and timed by a stand-in (1 us per row): only the GEMM tasks run.
    from layerscope.capture import calibrate as module

    def timed(torch, timer, x, weights, min_time_s):  # type: ignore[no-untyped-def]
        return 1e-6 * x.shape[0], 1e-6 * x.shape[0]

    monkeypatch.setattr(module, "time_cold_linear", timed)

    def gemms(grid: CalibrationGrid) -> list[tuple[int, int]]:
        session = module._plan("cpu", grid, False)
        for label, task in session.tasks:
            if label.startswith("gemm "):
                task()
        return sorted(zip(session.tables.gemm["n"], session.tables.gemm["m"], strict=True))

    assert QUICK_GRID.max_gemm_s is not None and FULL_GRID.max_gemm_s is None
    grid = replace(TINY, gemm_m=(1, 2, 4, 8, 16), gemm_wide_nk=(), max_gemm_s=1e-9)
    assert gemms(grid) == [(n, m) for n in (512, 1024) for m in (1, 2, 4)]
    assert gemms(replace(grid, max_gemm_s=None)) == [(n, m) for n in (512, 1024) for m in (1, 2, 4, 8, 16)]
    # a limit the extrapolated times stay within skips nothing (16 rows: 16 us, under 20)
    assert gemms(replace(grid, max_gemm_s=20e-6)) == [(n, m) for n in (512, 1024) for m in (1, 2, 4, 8, 16)]
