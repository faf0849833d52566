"""``app.simulate`` end to end (one request in, one result out) and the ``layerscope simulate`` /
``layerscope open`` commands."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from layerscope.app.requests import WorkloadRequest
from layerscope.app.simulate import SimulateRequest, SimulationRun, result_of, run_simulation, simulate
from layerscope.cli.app import app
from layerscope.errors import LayerscopeError, ScheduleError
from layerscope.model import model_spec_from_dict, tiny_config


def _run(model: Any, hardware: str, *, workload: dict[str, Any] | None = None, **kw: Any) -> SimulationRun:
    return run_simulation(SimulateRequest(model=model, hardware=hardware, workload=WorkloadRequest(**(workload or {})),
                                          **kw))


@pytest.fixture(scope="module")
def tiny():  # type: ignore[no-untyped-def]
    return model_spec_from_dict(tiny_config("llama"), "tiny-llama")


def test_layer_decode_fused_by_default(tiny) -> None:  # type: ignore[no-untyped-def]
    """Every verb's attention view defaults to fused (one op per attention, as SDPA/FlashAttention run it)."""
    kinds = [op.kind for op in _run(tiny, "h100-sxm").timed.graph.ops]
    assert "attention" in kinds and "qk_matmul" not in kinds and "softmax_exp" not in kinds


def test_layer_decode_unfused(tiny, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    r = _run(tiny, "h100-sxm", engines="1..4", out=tmp_path / "t.json", attention="unfused")
    kinds = [op.kind for op in r.timed.graph.ops]
    # The classic layer study: unfused attention with a 3-stage softmax, one layer, decode.
    for k in ("norm", "gemm", "rope", "kv_write", "qk_matmul", "softmax_max", "softmax_exp", "softmax_norm",
              "pv_matmul", "residual_add", "activation"):
        assert k in kinds
    assert {op.layer for op in r.timed.graph.ops} == {0}
    assert [row["engines"] for row in r.sweep.rows] == [1, 2, 3, 4]
    assert r.schedule.engines.count == r.sweep.engines_used
    assert r.sweep.rows[0]["makespan_ns"] == pytest.approx(r.timed.time_s.sum() * 1e9, abs=len(kinds))
    d = result_of(r)
    assert d.engines_used == r.sweep.engines_used and d.trace == str(tmp_path / "t.json")
    assert d.sum_of_op_times_ns == round(float(r.timed.time_s.sum()) * 1e9) and d.schedule.engines == d.engines_used
    ev = json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    assert sum(e["ph"] == "X" for e in ev) == len(kinds)


@pytest.mark.parametrize(("kw", "workload", "layers", "min_ops"), [
    ({"all_layers": True}, {}, {0, 1, None}, 30),
    ({}, {"decode_steps": 3}, {0, None}, 3 * 15),  # layer 0 plus embedding, lm_head, sampling per step
    ({"all_layers": True}, {"decode_steps": 2}, {0, 1, None}, 60),
    ({}, {"phase": "prefill", "prompt_len": 32}, {0}, 15),
    ({}, {"phase": "chunked", "chunk": 16, "context": 32}, {0}, 15),
])
def test_scopes(tiny, kw, workload, layers, min_ops) -> None:  # type: ignore[no-untyped-def]
    r = _run(tiny, "h100-sxm", engines=2, workload=workload, attention="unfused", **kw)
    assert {op.layer for op in r.timed.graph.ops} == layers
    assert r.problem.n >= min_ops


def test_shared_bandwidth_never_beats_bytes_over_bandwidth(tiny) -> None:  # type: ignore[no-untyped-def]
    r = _run(tiny, "h100-sxm", engines="1..8", workload={"decode_steps": 4}, all_layers=True)
    floor_ns = r.problem.total_memory_bytes / r.problem.bandwidth_bytes_per_s * 1e9
    assert all(row["makespan_ns"] >= floor_ns - r.problem.n for row in r.sweep.rows)


def test_errors_are_layerscope_errors(tiny) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ScheduleError, match="unknown policy"):
        _run(tiny, "h100-sxm", policy="nope")
    with pytest.raises(ScheduleError, match="engines"):
        _run(tiny, "h100-sxm", engines="0")
    with pytest.raises(LayerscopeError):
        _run(tiny, "no-such-chip")
    with pytest.raises(ScheduleError, match="generate"):
        _run(tiny, "h100-sxm", workload={"phase": "generate"})
    with pytest.raises(ScheduleError, match="decode_steps"):
        _run(tiny, "h100-sxm", workload={"decode_steps": 0})


def test_cli_table_json_and_trace(tmp_path: Path) -> None:
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(tiny_config("llama")))
    out = tmp_path / "trace.pftrace"
    res = CliRunner().invoke(app, ["simulate", "--model", str(cfg), "--hardware", "h100-sxm", "--engines", "1..3",
                                   "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert "engine sweep" in res.output and "engines used:" in res.output and out.exists()
    res = CliRunner().invoke(app, ["simulate", "--model", str(cfg), "--engines", "1,2", "--policy", "in-order",
                                   "--no-shared-bandwidth", "--json"])
    assert res.exit_code == 0, res.output
    d = json.loads(res.output)
    assert d["policy"] == "in-order" and d["share_bandwidth"] is False
    assert [r["engines"] for r in d["sweep"]] == [1, 2]


def test_cli_refuses_to_overwrite_the_config(tmp_path: Path) -> None:
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(tiny_config("llama")))
    res = CliRunner().invoke(app, ["simulate", "--model", str(cfg), "--out", str(cfg)])
    assert isinstance(res.exception, LayerscopeError)
    assert json.loads(cfg.read_text()) == tiny_config("llama")


def test_cli_open_serves_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import threading
    import urllib.request

    trace = tmp_path / "t.json"
    trace.write_text('{"traceEvents":[]}')

    def browser(url: str) -> bool:
        target = url.split("url=", 1)[1]
        threading.Thread(target=lambda: urllib.request.urlopen(target, timeout=5).read(), daemon=True).start()
        return True

    monkeypatch.setattr("webbrowser.open", browser)
    res = CliRunner().invoke(app, ["open", str(trace)])
    assert res.exit_code == 0, res.output
    assert "https://ui.perfetto.dev/#!/?url=http://127.0.0.1:" in res.output
    assert "trace sent" in res.output


def test_engines_from_the_hardware_spec():
    # NVL-AX: 32 cores; "spec" gives one engine per core.
    result = simulate(SimulateRequest(model="llama-3.2-1b", hardware="nvl-ax", engines="spec"))
    assert result.schedule.engines == 32 == result.engines_used
    assert [r.engines for r in result.sweep] == [32]


def test_simulated_traces_load_in_the_real_trace_processor(perfetto_oracle: Any, run_cli: Any,
                                                           tmp_path: Path) -> None:
    """What `layerscope simulate --out` writes, in both formats, is what the trace processor reads:
    no import errors, the summary's ops, edges, makespan and per-engine busy time, and the same
    answers as our SQL engine."""
    from layerscope.analysis.engine import TraceDB

    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(tiny_config("llama")))
    for suffix in (".pftrace", ".json"):
        out = tmp_path / f"sim{suffix}"
        res = run_cli("simulate", "--model", str(cfg), "--engines", "1..3", "--decode-steps", "2", "--all-layers",
                      "--out", str(out), "--json")
        assert res.returncode == 0, res.stderr
        summary = json.loads(res.stdout)
        trace = perfetto_oracle.load(out)
        assert trace.errors() == [], suffix
        totals = trace.query("SELECT COUNT(*) AS ops, MAX(ts + dur) AS makespan_ns, "
                             "(SELECT COUNT(*) FROM flow) AS dependencies FROM slice")[0]
        assert totals == {"ops": summary["ops"], "makespan_ns": summary["schedule"]["makespan_ns"],
                          "dependencies": summary["dependencies"]}
        busy = trace.query("SELECT t.name, SUM(s.dur) AS busy_ns FROM slice s JOIN thread_track tt "
                           "ON s.track_id = tt.id JOIN thread t USING (utid) GROUP BY t.name ORDER BY t.name")
        assert busy == [{"name": f"engine {e}", "busy_ns": ns}
                        for e, ns in enumerate(summary["schedule"]["engine_busy_ns"])]
        with TraceDB(out, use_cache=False) as db:
            assert trace.disagreements(db.records) == [], suffix
