"""Per-rank breakdown of a directory of traces (layerscope/analysis/ranks.py): hand-computed cases, and
HolisticTraceAnalysis's numbers on the same real files."""

from __future__ import annotations

import importlib.util
import logging
import shutil
from pathlib import Path
from typing import Any

import pytest

from layerscope.analysis.engine import TraceDB
from layerscope.analysis.ranks import (
    analyze_ranks,
    kernel_type,
    merge_ranks,
    open_ranks,
    rank_of,
    read_ranks,
    trace_files,
)
from layerscope.errors import AnalysisError, TraceError

from .conftest import DATA, write_trace

RANKS = DATA / "ranks"

NCCL = "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)"
GEMM = "ampere_sgemm_128x64_tn"
MEMCPY = "Memcpy HtoD (Pageable -> Device)"


def _gpu(name: str, ts: float, dur: float, stream: int, cat: str = "kernel", corr: int | None = None) -> dict[str, Any]:
    args: dict[str, Any] = {"stream": stream, "device": 0}
    if corr is not None:
        args["correlation"] = corr
    return {"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": stream, "ts": ts, "dur": dur, "args": args}


def _rank_events(last_compute_us: float) -> list[dict[str, Any]]:
    """Stream 7: GEMMs at [0, 10), [20, 30), [50, 50 + last); stream 8: an all-reduce at [5, 25); a copy at
    [40, 45) (µs)."""
    return [_gpu(GEMM, 0, 10, 7), _gpu(NCCL, 5, 20, 8), _gpu(GEMM, 20, 10, 7),
            _gpu(MEMCPY, 40, 5, 7, cat="gpu_memcpy"), _gpu(GEMM, 50, last_compute_us, 7)]


@pytest.fixture()
def two_ranks(tmp_path: Path) -> Path:
    """Rank 0 by its distributedInfo, rank 1 by its file name (no distributedInfo); rank 1's last GEMM runs 30 µs
    instead of 10."""
    write_trace(tmp_path / "a.json", _rank_events(10), distributedInfo={"rank": 0, "world_size": 2})
    write_trace(tmp_path / "job_rank1.json.gz", _rank_events(30))
    (tmp_path / "README.md").write_text("not a trace: skipped")
    return tmp_path


def test_hand_computed_breakdown(two_ranks: Path) -> None:
    rows = {r["rank"]: r for r in analyze_ranks(two_ranks, use_cache=False, workers=1).to_pylist()}
    r0, r1 = rows[0], rows[1]
    assert r0["file"] == "a.json" and r1["file"] == "job_rank1.json.gz"
    # rank 0: span 0..60; busy [0, 30) ∪ [40, 45) ∪ [50, 60) = 45, idle 15; compute 3 × 10; the all-reduce [5, 25)
    # overlaps the GEMMs in [5, 10) and [20, 25): 10 of 20 µs
    assert r0["kernels"] == 5 and r0["profiler_steps"] == 0 and not r0["last_step_excluded"]
    assert (r0["span_ms"], r0["busy_ms"], r0["idle_ms"]) == (0.060, 0.045, 0.015)
    assert (r0["compute_ms"], r0["communication_ms"], r0["memory_ms"], r0["other_ms"]) == (0.030, 0.020, 0.005, 0)
    assert r0["non_compute_ms"] == pytest.approx(0.060 - 0.030 - 0.015)
    assert r0["overlap_pct"] == 50.0 and r0["idle_pct"] == 25.0
    assert r0["work_ms"] == 0.035  # GEMMs and the copy: 30 + 5
    # rank 1: the last GEMM [50, 80): span 80, compute 50, work 55; median work (35 + 55) / 2 = 45
    assert (r1["span_ms"], r1["compute_ms"], r1["idle_ms"], r1["work_ms"]) == (0.080, 0.050, 0.015, 0.055)
    assert r1["work_vs_median"] == pytest.approx(55 / 45) and r1["straggler"]
    assert r0["work_vs_median"] == pytest.approx(35 / 45) and not r0["straggler"]
    # 55/45 = 1.22: not a straggler at a 25% threshold
    assert not any(analyze_ranks(two_ranks, straggler_pct=25, use_cache=False, workers=1).column("straggler")
                   .to_pylist())


def test_overlap_is_null_without_communication(tmp_path: Path) -> None:
    write_trace(tmp_path / "rank0.json", [_gpu(GEMM, 0, 10, 7), _gpu(GEMM, 5, 10, 8)])
    (row,) = analyze_ranks(tmp_path, use_cache=False).to_pylist()
    assert row["overlap_pct"] is None and row["compute_ms"] == 0.015 and row["idle_ms"] == 0
    assert row["work_vs_median"] == 1.0 and not row["straggler"]


def test_last_profiler_step_left_out(tmp_path: Path) -> None:
    """HTA's window: with two or more ProfilerSteps, GPU work launched in the last one is left out."""
    def launch(corr: int, ts: float) -> dict[str, Any]:
        return {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": ts,
                "dur": 1, "args": {"correlation": corr}}

    def step(n: int, ts: float) -> dict[str, Any]:
        return {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{n}", "pid": 1, "tid": 1, "ts": ts,
                "dur": 100}

    events = [step(1, 0), launch(1, 10), _gpu(GEMM, 20, 30, 7, corr=1),
              step(2, 100), launch(2, 110), _gpu(GEMM, 120, 40, 7, corr=2),
              _gpu(GEMM, 60, 5, 7)]  # no launch: never in a window
    write_trace(tmp_path / "rank0.json", events)
    (row,) = analyze_ranks(tmp_path, use_cache=False).to_pylist()
    assert row["profiler_steps"] == 2 and row["last_step_excluded"]
    assert (row["kernels"], row["span_ms"], row["compute_ms"]) == (1, 0.030, 0.030)
    (row,) = analyze_ranks(tmp_path, use_cache=False, include_last_step=True).to_pylist()
    assert not row["last_step_excluded"]
    assert (row["kernels"], row["span_ms"], row["compute_ms"], row["idle_ms"]) == (2, 0.140, 0.070, 0.070)


def test_kernel_types_follow_hta() -> None:
    assert kernel_type(NCCL) == "communication"
    assert kernel_type("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)") == "communication"
    assert kernel_type(MEMCPY) == kernel_type("Memset (Device)") == kernel_type("dma_copy") == "memory"
    assert kernel_type("cudaStreamSync_wait") == kernel_type("xMemcpyKernel") == "other"
    assert kernel_type(GEMM) == kernel_type("nccl_helper") == "compute"


#: HTA 0.5.0 on tests/data/traces/ranks (``get_temporal_breakdown``, ``get_comm_comp_overlap``), µs:
#: rank → (idle, compute, non-compute, kernel time = span, overlap %).
HTA_RANKS = {0: (321378, 106252, 172428, 600058, 11.81), 1: (321519, 106252, 172259, 600030, 11.81),
             2: (401721, 132819, 215532, 750072, 11.81)}


def _as_hta(rows: list[dict[str, Any]]) -> dict[int, tuple[float, ...]]:
    return {r["rank"]: (round(r["idle_ms"] * 1e3, 3), round(r["compute_ms"] * 1e3, 3),
                        round(r["non_compute_ms"] * 1e3, 3), round(r["span_ms"] * 1e3, 3),
                        round(r["overlap_pct"], 2)) for r in rows}


@pytest.fixture(scope="module")
def real_rows() -> list[dict[str, Any]]:
    return analyze_ranks(RANKS).to_pylist()


def test_real_ranks_match_hta_written_down(real_rows: list[dict[str, Any]]) -> None:
    assert _as_hta(real_rows) == HTA_RANKS
    assert [r["straggler"] for r in real_rows] == [False, False, True]  # rank 2 runs 5/4 slower
    assert real_rows[1]["memory_ms"] == 0 and real_rows[0]["memory_ms"] > 0  # rank 1 has no copies


@pytest.mark.skipif(importlib.util.find_spec("hta") is None,
                    reason="HolisticTraceAnalysis (module hta) is not installed: `pip install --no-deps "
                           "HolisticTraceAnalysis pandas plotly pydot psutil` to compare with it live")
def test_real_ranks_match_hta_live(real_rows: list[dict[str, Any]]) -> None:
    from hta.trace_analysis import TraceAnalysis

    logging.getLogger("hta").setLevel(logging.ERROR)
    analysis = TraceAnalysis(trace_dir=str(RANKS))
    temporal = analysis.get_temporal_breakdown(visualize=False).set_index("rank")
    overlap = analysis.get_comm_comp_overlap(visualize=False).set_index("rank")
    theirs = {int(rank): (float(row["idle_time(us)"]), float(row["compute_time(us)"]),
                          float(row["non_compute_time(us)"]), float(row["kernel_time(us)"]),
                          float(overlap.loc[rank, "comp_comm_overlap_pctg"])) for rank, row in temporal.iterrows()}
    assert _as_hta(real_rows) == theirs == HTA_RANKS


def test_control_trace_matches_hta(tmp_path: Path) -> None:
    """The real training step (NCCL, copies, 6 ProfilerSteps, 3 launches the reader drops for improper nesting but
    whose ac2g flows it keeps): HTA 0.5.0's numbers, rank 3, µs."""
    (tmp_path / "control.json.gz").symlink_to(DATA / "gpu-training-control.json.gz")
    (row,) = analyze_ranks(tmp_path).to_pylist()
    assert row["profiler_steps"] == 6 and row["kernels"] == 7875  # HTA's GPU events after its window
    assert _as_hta([row]) == {3: (62119, 234760, 86525, 383404, 47.03)}


def test_parallel_equals_sequential() -> None:
    assert analyze_ranks(RANKS, workers=1).equals(analyze_ranks(RANKS, workers=3))


def test_rank_of() -> None:
    assert rank_of(Path("x.json"), {"distributedInfo": {"rank": 3}}) == 3
    assert rank_of(Path("trainer_RANK-12.pt.trace.json"), {}) == 12
    with pytest.raises(AnalysisError, match=r"'x.json': no rank"):
        rank_of(Path("x.json"), {"distributedInfo": {"rank": "0"}})


def test_errors_name_the_problem(tmp_path: Path) -> None:
    with pytest.raises(AnalysisError, match="holds no trace files"):
        trace_files(tmp_path)
    with pytest.raises(AnalysisError, match="not a directory"):
        trace_files(tmp_path / "none")
    shutil.copy(RANKS / "rank0.json.gz", tmp_path / "a.json.gz")
    shutil.copy(RANKS / "rank0.json.gz", tmp_path / "b.json.gz")
    with pytest.raises(AnalysisError, match=r"duplicate rank 0: .*a\.json\.gz.* and .*b\.json\.gz"):
        read_ranks(tmp_path, use_cache=False, workers=2)
    (tmp_path / "b.json.gz").unlink()
    write_trace(tmp_path / "c.json", [_gpu(GEMM, 0, 1, 7)])
    with pytest.raises(AnalysisError, match=r"c\.json'?: no rank"):
        read_ranks(tmp_path, use_cache=False, workers=1)
    (tmp_path / "c.json").write_text("not a trace")
    with pytest.raises(TraceError, match=r"c\.json"):
        read_ranks(tmp_path, use_cache=False, workers=1)
    with pytest.raises(AnalysisError, match="straggler_pct: -1"):
        analyze_ranks(RANKS, straggler_pct=-1)


def test_one_table_set_with_rank(two_ranks: Path) -> None:
    with open_ranks(two_ranks, use_cache=False) as db:
        per_rank = db.records("""
            SELECT s.rank, COUNT(*) AS kernels, COUNT(DISTINCT t.rank) AS thread_ranks, MIN(t.rank) AS thread_rank
            FROM slice s JOIN thread_track tt ON s.track_id = tt.id JOIN thread t USING (utid)
            WHERE s.category = 'kernel' GROUP BY s.rank ORDER BY s.rank""")
        assert per_rank == [{"rank": 0, "kernels": 4, "thread_ranks": 1, "thread_rank": 0},
                            {"rank": 1, "kernels": 4, "thread_ranks": 1, "thread_rank": 1}]
        assert db.scalar("SELECT COUNT(DISTINCT id) = COUNT(*) FROM slice")
        # args join by arg_set_id, unique across ranks: each rank's slices find their own streams
        assert db.records("SELECT s.rank, SUM(a.int_value) AS streams FROM slice s JOIN args a USING (arg_set_id) "
                          "WHERE a.key = 'args.stream' GROUP BY s.rank ORDER BY s.rank") == [
            {"rank": 0, "streams": 7 * 4 + 8}, {"rank": 1, "streams": 7 * 4 + 8}]
        assert db.records("SELECT rank, straggler FROM rank_breakdown ORDER BY rank") == [
            {"rank": 0, "straggler": False}, {"rank": 1, "straggler": True}]


def test_rank_views_keep_every_column(two_ranks: Path) -> None:
    """Each view of the ranks has the single-trace view's columns, and ``rank``."""
    views = ("slice", "slices", "thread", "process", "track", "thread_track", "process_track", "counter_track",
             "process_counter_track", "counter", "flow", "args")
    parts = read_ranks(two_ranks, use_cache=False, keep_tables=True, workers=1)
    with TraceDB(parts[0].tables) as single, open_ranks(two_ranks, use_cache=False) as ranks:  # type: ignore[arg-type]
        for view in views:
            one = single.query(f"SELECT * FROM {view} LIMIT 0").column_names
            many = ranks.query(f"SELECT * FROM {view} LIMIT 0").column_names
            assert many == (one if view == "args" else [*one, "rank"]), view
    merged = merge_ranks(parts)
    assert merged.slice.num_rows == sum(p.tables.slice.num_rows for p in parts)  # type: ignore[union-attr]
