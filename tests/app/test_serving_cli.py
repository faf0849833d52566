"""``layerscope serving`` through the entry point, its trace in the real trace processor, the per-request table,
and ``--find-max-rate``."""

from __future__ import annotations

import csv
import gzip
import itertools
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from layerscope.app.serving import find_max_rate, serve
from layerscope.serving import LengthSpec, ServingRequest, TrafficSpec, parse_slo, summarize
from layerscope.trace.serving_writer import request_lanes, serving_events

SMALL = ["--model", "llama-3.2-1b", "--hardware", "h100-sxm"]


def _request(rate: float = 20.0, n: int = 60, **kw: Any) -> ServingRequest:
    return ServingRequest(model="llama-3.2-1b", hardware="h100-sxm",
                          traffic=TrafficSpec(rate_per_s=rate, requests=n, prompt=LengthSpec(mean=256),
                                              output=LengthSpec(mean=32), seed=3), **kw)


def test_json_reports_vllm_metrics_and_writes_its_files(run_cli, tmp_path: Path) -> None:
    trace, table = tmp_path / "s.json.gz", tmp_path / "r.csv"
    res = run_cli("serving", *SMALL, "--rate", "20", "-n", "80", "--prompt-len", "256", "--output-len", "32",
                  "--slo", "ttft=200ms,tpot=50ms", "-o", str(trace), "--requests-out", str(table), "--json")
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    m = out["metrics"]
    assert m["completed"] == 80 and m["total_output_tokens"] == 80 * 32
    for name in ("ttft", "tpot", "itl", "e2el"):
        assert 0 < m[f"median_{name}_ms"] <= m[f"p99_{name}_ms"]
    assert out["slo"] == {"ttft_ms": 200.0, "tpot_ms": 50.0, "e2el_ms": None}
    rows = list(csv.DictReader(table.open()))
    assert len(rows) == 80 and {"id", "ttft_s", "tpot_s", "e2el_s", "queued_s", "max_itl_s"} <= set(rows[0])
    ttft = np.array([float(r["ttft_s"]) for r in rows])
    assert np.median(ttft) * 1e3 == pytest.approx(m["median_ttft_ms"], rel=1e-6)
    doc = json.loads(gzip.decompress(trace.read_bytes()))
    names = {e.get("name") for e in doc["traceEvents"]}
    assert {"step", "prefill", "decode", "engine", "engine power"} <= names
    # energy: per request in the table, summing to the run's total; per output token and per joule in the JSON
    energy = np.array([float(r["energy_j"]) for r in rows])
    assert np.all(energy > 0)
    assert energy.sum() == pytest.approx(m["total_energy_j"], rel=1e-9)
    assert m["energy_per_output_token_j"] == pytest.approx(m["total_energy_j"] / (80 * 32), rel=1e-12)
    assert m["output_tokens_per_j"] == pytest.approx(1 / m["energy_per_output_token_j"], rel=1e-12)
    human = run_cli("serving", *SMALL, "--rate", "20", "-n", "20", "--prompt-len", "64", "--output-len", "8")
    assert human.returncode == 0 and "Energy per output token (mJ)" in human.stdout


@pytest.mark.parametrize(("args", "words"), [
    (["--rate", "-1"], "rate_per_s"),
    (["--arrival", "poisson"], "need rate_per_s"),
    (["--scheduler", "fifo", "--rate", "1"], "fifo"),
    (["--rate", "1", "--slo", "ttft=fast"], "ttft=fast"),
    (["--rate", "1", "--find-max-rate"], "needs --slo"),
    (["--rate", "1", "-o", "x.pftrace"], ".json"),
])
def test_bad_input_exits_2(run_cli, tmp_path: Path, args: list[str], words: str) -> None:
    res = run_cli("serving", *SMALL, "-n", "5", *args, cwd=tmp_path)
    assert res.returncode == 2, (res.stdout, res.stderr)
    assert words in res.stderr and "Traceback" not in res.stderr


def test_trace_layout_and_lanes() -> None:
    run, result = serve(_request())
    events = serving_events(run)
    steps = [e for e in events if e.get("name") == "step"]
    assert len(steps) == len(run.start_s)
    phases = [e for e in events if e.get("cat") == "request"]
    # a lane never holds two requests at once
    by_lane: dict[tuple[int, int], list[tuple[float, float]]] = {}
    for e in phases:
        by_lane.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + e["dur"]))
    for spans in by_lane.values():
        spans.sort()
        assert all(a[1] <= b[0] + 1e-3 for a, b in itertools.pairwise(spans))
    flows = [e for e in events if e.get("ph") == "s"]
    assert 0 < len(flows) <= result.requests
    lanes = request_lanes(np.array([0.0, 1.0, 0.5, 2.0]), np.array([1.5, 2.0, 0.9, 3.0]))
    assert lanes.tolist() == [0, 1, 1, 0]  # greedy: as many lanes as intervals alive at once (2)


def test_trace_loads_in_the_real_trace_processor(perfetto_oracle: Any, tmp_path: Path) -> None:
    run, _ = serve(_request(n=30), trace=tmp_path / "s.json")
    trace = perfetto_oracle.load(tmp_path / "s.json")
    assert trace.errors() == []
    assert trace.query("SELECT COUNT(*) AS n FROM slice WHERE name = 'step'") == [{"n": len(run.start_s)}]
    assert trace.query("SELECT COUNT(DISTINCT name) AS n FROM counter_track WHERE name IN ('engine kv blocks', "
                       "'engine queue length', 'engine batch sequences', 'engine running')") == [{"n": 4}]
    assert trace.query("SELECT COUNT(*) AS n FROM flow")[0]["n"] > 0
    # the power counter: one track per engine, between the idle power and the steps' peak
    assert run.energy is not None
    power = trace.query("SELECT MIN(c.value) AS lo, MAX(c.value) AS hi, COUNT(DISTINCT t.id) AS tracks FROM counter c "
                        "JOIN counter_track t ON c.track_id = t.id WHERE t.name = 'engine power W'")[0]
    assert power["tracks"] == len(run.roles)
    assert power["lo"] == pytest.approx(run.energy.idle_power_w, rel=1e-3)
    assert power["hi"] == pytest.approx(float(run.energy.step_power_w.max()), rel=1e-3)


def test_find_max_rate_brackets_the_slo() -> None:
    slo = parse_slo("ttft=100ms,tpot=20ms")
    found = find_max_rate(_request(rate=8.0, n=60), slo, target=0.9, tolerance=0.1, max_runs=8)
    assert found.max_rate_per_s is not None
    meets = [p.rate_per_s for p in found.probes if p.meets]
    misses = [p.rate_per_s for p in found.probes if not p.meets]
    assert found.max_rate_per_s == max(meets)
    assert not misses or min(misses) > found.max_rate_per_s
    # the answer's own run meets the target
    run, _ = serve(_request(rate=found.max_rate_per_s, n=60))
    assert summarize(run, slo).goodput_share >= 0.9


def _grid_base() -> ServingRequest:
    return _request(rate=5.0, n=30)


def test_grid_local_processes_equal_in_process_byte_for_byte() -> None:
    from layerscope.app.serving import grid_cells, run_grid

    cells = grid_cells(_grid_base(), ["h100-sxm", "a100-sxm"], [(1, 1), (2, 1)], ["vllm", "sarathi"], [5.0, 15.0])
    assert len(cells) == 16
    slo = parse_slo("ttft=100ms,tpot=30ms")
    pooled = run_grid(cells, slo, workers=2)
    alone = run_grid(cells, slo, workers=1)
    assert pooled.model_dump_json(exclude={"executor"}) == alone.model_dump_json(exclude={"executor"})
    first = pooled.cells[0]
    assert (first.hardware, first.tensor_parallel, first.scheduler, first.rate_per_s) == ("h100-sxm", 1, "vllm", 5.0)
    assert all(c.metrics is not None and c.metrics["completed"] == 30 for c in pooled.cells)
    # an H100 beats an A100 on the same point
    by_key = {(c.hardware, c.tensor_parallel, c.scheduler, c.rate_per_s): c.metrics for c in pooled.cells}
    assert by_key[("h100-sxm", 1, "vllm", 15.0)]["median_tpot_ms"] < by_key[("a100-sxm", 1, "vllm", 15.0)][
        "median_tpot_ms"]


def test_grid_on_a_local_ray_instance_gives_the_same_bytes() -> None:
    pytest.importorskip("ray", reason="Ray is an optional extra (pip install ray); the grid runs locally without it")
    from layerscope.app.serving import grid_cells, run_grid

    cells = grid_cells(_grid_base(), ["h100-sxm"], [(1, 1)], ["vllm"], [5.0, 10.0])
    on_ray = run_grid(cells, None, ray_address="local")
    local = run_grid(cells, None, workers=1)
    assert on_ray.model_dump_json(exclude={"executor"}) == local.model_dump_json(exclude={"executor"})


def test_grid_cli(run_cli, tmp_path: Path) -> None:
    out = tmp_path / "grid.csv"
    res = run_cli("serving-grid", "--model", "llama-3.2-1b", "--hardware", "h100-sxm", "--tp", "1,3", "--rate", "5",
                  "-n", "20", "--workers", "1", "--csv", str(out), "--json")
    assert res.returncode == 0, res.stderr
    cells = json.loads(res.stdout)["cells"]
    assert [c["tensor_parallel"] for c in cells] == [1, 3]
    assert cells[0]["error"] is None and "does not divide" in cells[1]["error"]  # tp 3 cannot split 32 heads
    assert len(list(csv.DictReader(out.open()))) == 2
    bad = run_cli("serving-grid", "--model", "llama-3.2-1b", "--tp", "x", "-n", "5")
    assert bad.returncode == 2 and "--tp" in bad.stderr and "Traceback" not in bad.stderr
