"""Reports (layerscope/analysis/reports.py) on the real control trace and on small built traces.

Memcpy/memset counts and times are trace_processor's (perfetto-oracle, 2026-11-21:
``SELECT name, COUNT(*), SUM(dur) FROM slice WHERE category IN ('gpu_memcpy','gpu_memset') GROUP BY name``).
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from layerscope.analysis import reports
from layerscope.analysis.engine import TraceDB
from layerscope.analysis.kernel_names import CATEGORIES
from layerscope.errors import AnalysisError, OutputError

from .conftest import annotated_events, write_trace


def test_memory_ops_by_direction(control_db: TraceDB) -> None:
    rows = {r["direction"]: r for r in reports.memory_ops(control_db).to_pylist()}
    # oracle: Memcpy DtoD 18 / 2.735 ms, DtoH 60 / 0.107 ms, HtoD (Pinned) 150 / 50.656 ms, Memset 654 / 1.256 ms
    assert {d: (r["count"], r["total_ms"]) for d, r in rows.items()} == {
        "DtoD": (18, 2.735), "DtoH": (60, 0.107), "HtoD": (150, 50.656), "memset": (654, 1.256)}
    assert rows["HtoD"]["bytes"] == 423923260
    assert rows["HtoD"]["gb_per_s"] == pytest.approx(423923260 / 50656000)


def test_top_ops_and_small_frequent(control_db: TraceDB) -> None:
    top = reports.top_ops(control_db, limit=3).to_pylist()
    assert [r["name"] for r in top] == ["PyTorch Profiler (0)", "## backward ##",
                                        "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclWorkElem)"]
    assert top[2]["count"] == 42 and top[2]["total_ms"] == 130.655  # oracle
    small = {r["name"]: r for r in reports.small_frequent_ops(control_db).to_pylist()}
    assert small["cudaLaunchKernel"]["count"] == 8562
    assert all(r["mean_us"] <= 10 and r["count"] >= 100 for r in small.values())


def test_major_events_threshold(control_db: TraceDB) -> None:
    events = reports.major_events(control_db, threshold_ms=70).to_pylist()
    # ProfilerStep#1009..1014 are 75–81 ms (oracle) plus the 479 ms profiler span
    assert sorted(e["name"] for e in events) == sorted(["PyTorch Profiler (0)"] + [
        f"ProfilerStep#{i}" for i in range(1009, 1015)])
    assert all(e["dur_ms"] > 70 for e in events)


def test_category_time_unions_never_exceed_sums_or_busy(control_db: TraceDB) -> None:
    table = reports.category_time(control_db).to_pylist()
    assert {r["side"] for r in table} == {"gpu", "cpu"}
    for row in table:
        assert row["category"] in CATEGORIES
        assert row["union_ms"] <= row["sum_ms"] + 1e-9
        assert 0 <= row["share"] <= 1
    gpu = {r["category"]: r for r in table if r["side"] == "gpu"}
    assert gpu["communication"]["count"] == 60
    # copies on 4 streams overlap: their union is less than their sum
    assert gpu["memory"]["union_ms"] < gpu["memory"]["sum_ms"]


def test_category_union_hand_checked(tmp_path: Path) -> None:
    # two GEMMs overlapping on two streams (0–10 and 5–15 µs) and a nested CPU op
    events = [
        {"ph": "X", "cat": "kernel", "name": "ampere_sgemm_128x64_nn", "pid": 0, "tid": 7, "ts": 0, "dur": 10},
        {"ph": "X", "cat": "kernel", "name": "ampere_sgemm_64x64_nn", "pid": 0, "tid": 8, "ts": 5, "dur": 10},
        {"ph": "X", "cat": "kernel", "name": "flash_fwd_kernel", "pid": 0, "tid": 7, "ts": 20, "dur": 4},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 0, "dur": 8},
        {"ph": "X", "cat": "cpu_op", "name": "aten::addmm", "pid": 1, "tid": 1, "ts": 1, "dur": 4},
    ]
    with TraceDB(write_trace(tmp_path / "u.json", events), use_cache=False) as db:
        rows = {(r["side"], r["category"]): r for r in reports.category_time(db).to_pylist()}
        idle = reports.gpu_idle(db).to_pylist()
        attention = reports.attention_kernels(db).to_pylist()
    assert rows[("gpu", "gemm")]["sum_ms"] == pytest.approx(0.020)
    assert rows[("gpu", "gemm")]["union_ms"] == pytest.approx(0.015)
    assert rows[("gpu", "attention")]["union_ms"] == pytest.approx(0.004)
    assert rows[("gpu", "gemm")]["share"] == pytest.approx(15 / 19)
    assert rows[("cpu", "gemm")]["union_ms"] == pytest.approx(0.008)
    # span 0–24 µs, busy 15 + 4 µs
    assert idle == [{"device": 0, "streams": 2, "kernels": 3, "span_ms": 0.024, "busy_ms": 0.019,
                     "kernel_busy_ms": 0.019, "idle_ms": 0.005, "idle_pct": pytest.approx(100 * 5 / 24)}]
    assert [(a["name"], a["family"]) for a in attention] == [("flash_fwd_kernel", "flash_attention")]


@given(st.lists(st.tuples(st.integers(0, 1000), st.integers(0, 100)), max_size=40))
def test_union_ns_matches_brute_force(intervals: list[tuple[int, int]]) -> None:
    ts = np.array([a for a, _ in intervals], dtype=np.int64)
    end = ts + np.array([d for _, d in intervals], dtype=np.int64)
    covered = np.zeros(1101, dtype=bool)
    for a, b in zip(ts, end, strict=True):
        covered[a:b] = True
    assert reports.union_ns(ts, end) == int(covered.sum())


def test_gpu_idle_on_control(control_db: TraceDB) -> None:
    (row,) = reports.gpu_idle(control_db).to_pylist()
    assert row["device"] == 3 and row["kernels"] == 8568 and row["streams"] == 4
    assert row["busy_ms"] + row["idle_ms"] == pytest.approx(row["span_ms"])
    assert row["kernel_busy_ms"] <= row["busy_ms"] <= 446.813 + 53.498 + 1.256  # ≤ sum of GPU slices


def test_module_and_layer_time(tmp_path: Path) -> None:
    with TraceDB(write_trace(tmp_path / "cap.json", annotated_events()), use_cache=False) as db:
        modules = {r["module"]: r for r in reports.module_time(db).to_pylist()}
        layers = reports.layer_time(db).to_pylist()
    assert modules["model.layers.0.self_attn.attn"]["count"] == 2
    assert modules["model.layers.0.self_attn.attn"]["total_ms"] == pytest.approx(0.060)
    assert "ProfilerStep#0" not in modules
    assert [(r["layer"], r["side"]) for r in layers] == [(0, "cpu"), (1, "cpu")]
    assert layers[0]["total_ms"] == pytest.approx(2 * 0.067)  # the layer span, nesting counted once


def test_kernel_decode_report(control_db: TraceDB) -> None:
    rows = {r["name"]: r for r in reports.kernel_decode(control_db).to_pylist()}
    nccl = rows["ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclWorkElem)"]
    assert (nccl["family"], nccl["op"], nccl["dtype"], nccl["category"]) == ("nccl", "SendRecv", "int8",
                                                                            "communication")


def test_analyze_runs_every_report_quickly(control_db: TraceDB) -> None:
    for name, report in reports.REPORTS.items():
        start = time.perf_counter()
        report(control_db)
        assert time.perf_counter() - start < 1.0, name
    out = reports.analyze(control_db, threshold_ms=50)
    assert set(out) == set(reports.REPORTS)
    assert out["summary"].to_pylist()[0]["kernels"] == 8568


def test_write_csv_dir(control_db: TraceDB, tmp_path: Path) -> None:
    paths = reports.write_csv_dir({"memory_ops": reports.memory_ops(control_db)}, tmp_path / "out")
    assert [p.name for p in paths] == ["memory_ops.csv"]
    assert paths[0].read_text().splitlines()[0].startswith('"direction","count"')


@pytest.mark.parametrize("threshold", [float("nan"), float("inf"), -1.0])
def test_major_events_threshold_must_be_a_duration(control_db: TraceDB, threshold: float) -> None:
    with pytest.raises(AnalysisError, match=r"threshold_ms: .* finite number >= 0"):
        reports.major_events(control_db, threshold_ms=threshold)
    with pytest.raises(AnalysisError, match="threshold_ms"):
        reports.analyze(control_db, threshold_ms=threshold)


def test_write_csv_dir_never_replaces_an_input(control_db: TraceDB, tmp_path: Path) -> None:
    tables = {"memory_ops": reports.memory_ops(control_db)}
    trace = tmp_path / "in.json.gz"
    trace.write_bytes(b"trace bytes")
    for directory in (trace, tmp_path / "sub" / ".." / "in.json.gz"):
        with pytest.raises(OutputError, match="is the input trace"):
            reports.write_csv_dir(tables, directory, inputs=[trace])
    with pytest.raises(OutputError, match="exists and is not a directory"):
        reports.write_csv_dir(tables, trace)  # not named as an input: still not a directory
    assert trace.read_bytes() == b"trace bytes"
    # a trace inside the CSV directory, named as a report's CSV, is an input too
    inside = tmp_path / "reports" / "memory_ops.csv"
    inside.parent.mkdir()
    inside.write_bytes(b"trace bytes")
    with pytest.raises(OutputError):
        reports.write_csv_dir(tables, tmp_path / "reports", inputs=[inside])
    assert inside.read_bytes() == b"trace bytes"
    with pytest.raises(OutputError, match="cannot make the CSV directory '/proc/layerscope"):
        reports.write_csv_dir(tables, "/proc/layerscope/csv")


def test_module_time_on_a_gpu_is_the_span_of_what_each_call_launched(tmp_path: Path) -> None:
    from .conftest import CUDA_SPANS_US, cuda_capture_events

    with TraceDB(write_trace(tmp_path / "cuda.json", cuda_capture_events()), use_cache=False) as db:
        rows = {(r["module"], r["side"]): r for r in reports.module_time(db).to_pylist()}
    gpu = {name: r["total_ms"] * 1e3 for (name, side), r in rows.items() if side == "gpu"}
    # Kineto's gpu_user_annotation would give layers.0 2 µs and layers.0.mlp 3 µs (their own kernels only).
    assert gpu["layers.0"] == pytest.approx(CUDA_SPANS_US[("prefill", "layers.0")])
    assert gpu["layers.0.mlp"] == pytest.approx(CUDA_SPANS_US[("prefill", "layers.0.mlp")])
    assert gpu["lm_head"] == pytest.approx(CUDA_SPANS_US[("prefill", "lm_head")]
                                           + CUDA_SPANS_US[("decode_step_0", "lm_head")])
    assert rows[("lm_head", "gpu")]["count"] == 2 and ("rotary_emb", "gpu") not in rows
    assert gpu["prefill"] == pytest.approx(95 - 5)  # the phase range's launches: the arange to lm_head
    assert rows[("layers.0", "cpu")]["total_ms"] == pytest.approx(0.070)
