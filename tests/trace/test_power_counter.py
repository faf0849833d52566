"""The power counter of ``simulate`` traces (issue #30): a hand-computed step function, its integral equal to the
ops' dynamic joules plus idle power over the span (single chip and every GPU of a cluster trace), both formats
alike, and the real Perfetto trace processor loading them with no import errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from layerscope.analysis.engine import TraceDB
from layerscope.app.golden import GOLDEN_NAMES, write_golden
from layerscope.app.requests import ParallelPlan, WorkloadRequest
from layerscope.app.simulate import SimulateRequest, build_graph, run_simulation, with_power
from layerscope.cost import time_graph
from layerscope.cost.energy import power_steps, timed_dynamic_energy_j
from layerscope.hardware import load_hardware
from layerscope.model import load_model_spec
from layerscope.schedule.cluster import RECV
from layerscope.trace.cluster_writer import power_counters
from layerscope.trace.writers import TraceMetadata

_POWER_SQL = ("SELECT c.ts, c.value, t.name FROM counter c JOIN counter_track t ON c.track_id = t.id "
              "WHERE t.name = 'power W' ORDER BY c.ts")


def _integral_j(time_ns: np.ndarray, watts: np.ndarray) -> float:
    """∫ P dt of a step function that holds each value until the next sample."""
    return float(np.sum(watts[:-1] * np.diff(time_ns)) * 1e-9)


def test_power_steps_by_hand() -> None:
    # A: 0..1000 ns, 1 µJ -> 1000 W; B: 500..1500 ns, 0.5 µJ -> 500 W; C: empty at 700 ns (no power); idle 100 W.
    t, w = power_steps(np.array([0, 500, 700]), np.array([1000, 1500, 700]), np.array([1e-6, 0.5e-6, 1.0]) * 1e3,
                       100.0)
    assert t.tolist() == [0, 500, 1000, 1500]
    assert w == pytest.approx([1100.0, 1600.0, 600.0, 100.0])
    # integral: 1.5 mJ dynamic + 100 W x 1500 ns
    assert _integral_j(t, w) == pytest.approx(1.5e-3 + 100.0 * 1500e-9)
    # a span wider than the ops: idle before and after, the span's end kept
    t, w = power_steps(np.array([200]), np.array([300]), np.array([1e-4]), 50.0, span_ns=(0, 1000))
    assert t.tolist() == [0, 200, 300, 1000] and w == pytest.approx([50.0, 1050.0, 50.0, 50.0])
    assert _integral_j(t, w) == pytest.approx(1e-4 + 50.0 * 1000e-9)


def test_golden_trace_power_integrates_to_the_ops_joules(tmp_path: Path) -> None:
    """The golden case (tiny Llama layer, decode, h100-sxm base preset, 2 engines): ∫ power = Σ dynamic J of the
    ops + 69 W idle × makespan, read back from both formats."""
    from layerscope.app.golden import golden_hardware

    paths = write_golden(tmp_path)
    run = run_simulation(SimulateRequest(
        model=_golden_spec(), hardware=golden_hardware(), engines=2, layer=0, attention="unfused",
        workload=WorkloadRequest(phase="decode", context=64)))
    dyn_j = float(timed_dynamic_energy_j(run.timed).total_j.sum())
    makespan_ns = run.schedule.makespan_ns
    assert len(paths) == len(GOLDEN_NAMES)
    for path in paths:
        with TraceDB(path, use_cache=False) as db:
            rows = db.records(_POWER_SQL)
        t = np.array([r["ts"] for r in rows])
        w = np.array([r["value"] for r in rows])
        assert t[0] == 0 and t[-1] == makespan_ns and w[-1] == 69.0 and w.min() >= 69.0
        # the trace holds milliwatts
        assert _integral_j(t, w) == pytest.approx(dyn_j + 69.0 * makespan_ns * 1e-9, rel=1e-5)


def _golden_spec() -> Any:
    from layerscope.app.golden import GOLDEN_CONFIG
    from layerscope.model import model_spec_from_dict

    return model_spec_from_dict(dict(GOLDEN_CONFIG), "tiny-llama")


def test_cluster_power_per_gpu_integrates_to_its_slices() -> None:
    """tp 2 x pp 2, 2 micro-batches: every GPU's power counter spans 0..makespan and integrates to its op slices'
    dynamic joules (receives none) + idle × makespan."""
    spec = load_model_spec("llama-3.2-1b")
    plan = ParallelPlan(tensor_parallel=2, pipeline_parallel=2, micro_batches=2)
    graph = build_graph(spec, WorkloadRequest(phase="prefill", batch=2, prompt_len=64), all_layers=True, plan=plan)
    hw = load_hardware("h100-sxm")
    assert hw.energy is not None
    timed = time_graph(graph, hw)
    from layerscope.schedule.cluster import ClusterOps, cluster_timeline
    from layerscope.schedule.core import ScheduleProblem

    tl = cluster_timeline(ScheduleProblem.from_timed(timed), ClusterOps.from_timed(timed, spec, 2),
                          tensor_parallel=2, pipeline_parallel=2, data_parallel=1, micro_batches=2, engines=2)
    meta = with_power(TraceMetadata.from_timed(timed), timed)
    assert meta.op_dynamic_j is not None
    counters = power_counters(tl, meta)
    assert [c.gpu for c in counters] == [g.rank for g in tl.gpus]
    for c in counters:
        mine = (tl.gpu == c.gpu) & (tl.cls != RECV) & (tl.end_ns > tl.start_ns)
        expect = float(meta.op_dynamic_j[tl.op[mine]].sum()) + hw.energy.idle_power_w * tl.makespan_ns * 1e-9
        assert c.time_ns[0] == 0 and c.time_ns[-1] == tl.makespan_ns
        # the counter holds milliwatts (writers.power_counter rounds), so each level is off by at most 0.5 mW
        assert _integral_j(c.time_ns, c.value) == pytest.approx(expect, abs=0.5e-3 * tl.makespan_ns * 1e-9)
    # without energy figures: no power track
    bare = hw.model_copy(update={"energy": None})
    assert with_power(TraceMetadata.from_timed(timed), time_graph(graph, bare)).op_dynamic_j is None


@pytest.mark.parametrize("suffix", [".json", ".pftrace"])
def test_simulate_traces_carry_power_in_the_real_trace_processor(perfetto_oracle: Any, run_cli: Any,
                                                                  tmp_path: Path, suffix: str) -> None:
    """`layerscope simulate --out` (one chip, and a tp 2 x pp 2 cluster): one power track per GPU, no import
    errors, the counter holding idle power at the end."""
    single = tmp_path / f"one{suffix}"
    done = run_cli("simulate", "--model", "llama-3.2-1b", "--engines", "2", "-o", str(single), "--json")
    assert done.returncode == 0, done.stderr
    trace = perfetto_oracle.load(single)
    assert trace.errors() == []
    rows = trace.query("SELECT t.name, COUNT(*) AS n, MIN(c.value) AS lo FROM counter c JOIN counter_track t "
                       "ON c.track_id = t.id WHERE t.name = 'power W' GROUP BY t.name")
    assert len(rows) == 1 and rows[0]["n"] > 2 and rows[0]["lo"] == 69.0
    cluster = tmp_path / f"cluster{suffix}"
    done = run_cli("simulate", "--model", "llama-3.2-1b", "--layers", "4", "--tp", "2", "--pp", "2", "-o",
                   str(cluster), "--json")
    assert done.returncode == 0, done.stderr
    gpus = json.loads(done.stdout)["cluster"]["gpus"]
    trace = perfetto_oracle.load(cluster)
    assert trace.errors() == []
    rows = trace.query("SELECT COUNT(DISTINCT t.id) AS tracks FROM process_counter_track t JOIN process p "
                       "USING (upid) WHERE t.name = 'power W' AND p.name LIKE 'GPU %'")
    assert rows == [{"tracks": gpus}]
