"""Comparison (layerscope/analysis/compare.py): control vs test traces, simulated vs measured.

Kernel counts and times of both runs are trace_processor's (perfetto-oracle, 2026-11-21:
``SELECT COUNT(*), SUM(dur) FROM slice WHERE category = 'kernel'``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from layerscope.analysis.compare import compare_sim_real, compare_traces
from layerscope.analysis.engine import TraceDB
from layerscope.errors import AnalysisError

from .conftest import annotated_events, write_trace


def test_control_vs_test(control_db: TraceDB, test_db: TraceDB) -> None:
    c = compare_traces(control_db, test_db)
    summary = {r["metric"]: r for r in c.summary.to_pylist()}
    assert (summary["kernel_count"]["a"], summary["kernel_count"]["b"]) == (8568, 9852)
    assert summary["kernel_time_ms"]["a"] == pytest.approx(446.813)
    assert summary["kernel_time_ms"]["b"] == pytest.approx(800.376)
    assert summary["kernel_time_ms"]["delta"] == pytest.approx(800.376 - 446.813)
    by_name = {r["name"]: r for r in c.by_name.to_pylist()}
    nccl = by_name["ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclWorkElem)"]
    # oracle: control 42 / 130.655 ms, test 43 / 159.259 ms
    assert (nccl["count_a"], nccl["count_b"]) == (42, 43)
    assert nccl["total_ms_delta"] == pytest.approx(159.259 - 130.655)
    assert c.only_in_a.num_rows > 0 and c.only_in_b.num_rows > 0
    assert set(c.only_in_a.column("name").to_pylist()).isdisjoint(c.only_in_b.column("name").to_pylist())
    cats = {r["category"]: r for r in c.by_category.to_pylist()}
    assert sum(r["count_a"] for r in cats.values()) == 8568
    assert sum(r["count_b"] for r in cats.values()) == 9852
    assert c.by_name.column("total_ms_delta").to_pylist()[0] == max(r["total_ms_delta"] for r in by_name.values())


def _sim_events(scale: float) -> list[dict[str, object]]:
    events: list[dict[str, object]] = []
    t = 0.0
    for layer in range(2):
        for module, dur in (("self_attn.q_proj", 10.0), ("self_attn.attn", 30.0), ("mlp.up_proj", 20.0)):
            events.append({"ph": "X", "cat": "gemm", "name": f"layers.{layer}.{module}", "pid": 1, "tid": 1,
                           "ts": t, "dur": dur * scale})
            t += dur * scale
    events.append({"ph": "X", "cat": "gemm", "name": "lm_head", "pid": 1, "tid": 1, "ts": t, "dur": 5})
    return events


def test_sim_vs_real(tmp_path: Path) -> None:
    sim = write_trace(tmp_path / "sim.json", _sim_events(1.25))
    real = write_trace(tmp_path / "real.json", annotated_events())
    result = compare_sim_real(sim, real, use_cache=False)
    assert result.iterations == 2  # two ProfilerStep# annotations
    ops = {r["op"]: r for r in result.ops.to_pylist()}
    assert ops["layers.0.self_attn.attn"]["measured_us"] == pytest.approx(30.0)  # 60 µs over 2 steps
    assert ops["layers.0.self_attn.attn"]["predicted_us"] == pytest.approx(37.5)
    assert ops["layers.1.mlp.up_proj"]["error"] == pytest.approx(0.25)
    assert result.median_abs_error == pytest.approx(0.25)
    assert result.p90_abs_error == pytest.approx(0.25)
    assert result.only_sim == ["lm_head"]
    assert result.only_real == ["layers.0", "layers.1"]
    assert result.summary()["ops_joined"] == 6
    assert compare_sim_real(sim, real, iterations=1, use_cache=False).ops.to_pylist()[0]["error"] == pytest.approx(
        -0.375)


def test_sim_vs_real_bad_iterations(tmp_path: Path) -> None:
    sim = write_trace(tmp_path / "sim.json", _sim_events(1.0))
    with pytest.raises(AnalysisError, match="iterations"):
        compare_sim_real(sim, sim, iterations=0, use_cache=False)


def test_sim_vs_real_with_nothing_joined_is_an_error(tmp_path: Path) -> None:
    sim = write_trace(tmp_path / "sim.json", _sim_events(1.0))
    other = write_trace(tmp_path / "other.json", [{"ph": "X", "cat": "user_annotation", "name": "unrelated",
                                                  "pid": 1, "tid": 1, "ts": 0, "dur": 5}])
    with pytest.raises(AnalysisError, match=r"no op of the simulated trace .* \(7 simulated, 0 measured, 0 in both\)"):
        compare_sim_real(sim, other, use_cache=False)


def test_swapped_sim_and_real_are_refused(tmp_path: Path) -> None:
    from layerscope.app.simulate import SimulateRequest, run_simulation

    simulated = run_simulation(SimulateRequest(model="llama-3.2-1b", hardware="h100-sxm", engines=1,
                                               out=tmp_path / "sim.pftrace")).trace_path
    assert simulated is not None
    capture = write_trace(tmp_path / "captured.json", [
        {"ph": "X", "cat": "user_annotation", "name": "prefill", "pid": 1, "tid": 1, "ts": 0, "dur": 100}],
        layerscope={"model": "tiny"})
    kineto = write_trace(tmp_path / "real.json", annotated_events())
    for sim in (capture, kineto):
        with pytest.raises(AnalysisError, match="look swapped"):
            compare_sim_real(sim, simulated, use_cache=False)
    with pytest.raises(AnalysisError, match="is a layerscope capture"):
        compare_sim_real(capture, kineto, use_cache=False)
    # a simulation against a simulation is joined by name (and here nothing matches: no annotations)
    with pytest.raises(AnalysisError, match="is itself a layerscope simulation"):
        compare_sim_real(simulated, simulated, use_cache=False)


@pytest.mark.slow  # about 50 s (a capture and a simulation); make test keeps the README tour's compare --sim --real
def test_sim_vs_capture_joins_as_validate_does(tmp_path: Path) -> None:
    """`compare --sim S --real R` on validate's own files gives validate's rows, phase by phase: the
    simulated traces carry each op's module, the capture its iterations, unprofiled pass and profiler cost."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    import json

    from layerscope.app.validate import validate
    from layerscope.model import tiny_config

    config = tmp_path / "config.json"
    config.write_text(json.dumps(tiny_config("llama")))
    out = tmp_path / "val"
    r = validate(config, "server-cpu", layers=2, prompt_len=8, decode_steps=2, warmup=1, iterations=2, out_dir=out)
    for trace, phase in (("simulated-prefill.json.gz", "prefill"), ("simulated-decode.json.gz", "decode")):
        got = compare_sim_real(out / trace, out / "captured.json.gz", use_cache=False)
        want = r.phase(phase)
        assert (got.join, got.phase, got.iterations) == ("modules", phase, 2)
        rows = {row["op"]: row for row in got.ops.to_pylist()}
        assert list(rows) == [row.name for row in want.rows]
        for row in want.rows:
            # The trace rounds each op's time to the nanosecond.
            ns = 1e-3 * len(row.predicted_ops)
            assert rows[row.name]["predicted_us"] == pytest.approx(row.predicted_s * 1e6, abs=ns)
            assert rows[row.name]["measured_us"] == pytest.approx(row.measured_s * 1e6, rel=1e-9)
            assert (rows[row.name]["kind"], rows[row.name]["rule"]) == (row.kind, row.rule)
        assert got.median_abs_error == pytest.approx(want.median_abs_error, rel=1e-3)
        assert got.forward is not None and got.forward.measured_s == pytest.approx(want.forward.measured_s, rel=1e-9)
        assert got.only_real == [u.name for u in want.only_measured]
        assert got.only_sim == [u.name for u in want.only_predicted]
    # A one-layer simulation of the two-layer capture: layer 0's rows, no whole-forward comparison.
    from layerscope.app.requests import WorkloadRequest
    from layerscope.app.simulate import SimulateRequest, run_simulation

    run_simulation(SimulateRequest(
        model=config, hardware="server-cpu", engines=1, attention="fused", out=tmp_path / "layer0.json.gz",
        workload=WorkloadRequest(phase="prefill", prompt_len=8, batch=1, weight_dtype="fp32", act_dtype="fp32",
                                 kv_dtype="fp32")))
    one = compare_sim_real(tmp_path / "layer0.json.gz", out / "captured.json.gz", use_cache=False)
    assert one.phase == "prefill" and one.forward is None and "1 of the capture's 2 decoder layers" in one.notes[0]
    assert {row["op"] for row in one.ops.to_pylist()} >= {"layers.0.self_attn.q_proj", "layers.0.self_attn"}
    assert not any(row["op"].startswith("layers.1") for row in one.ops.to_pylist())
    with pytest.raises(AnalysisError, match="--iterations is for other traces"):
        compare_sim_real(tmp_path / "layer0.json.gz", out / "captured.json.gz", iterations=1, use_cache=False)
    with pytest.raises(AnalysisError, match="decode steps"):
        compare_sim_real(out / "simulated-decode.json.gz", out / "captured.json.gz", phase="prefill", use_cache=False)
