"""``app.validate`` end to end: real validations of a tiny llama (the estimate, the 1-engine simulations through
``app.simulate``, the capture and their join), repeats, rejoin, and the result model (``validation.json`` and
``validate --json``)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from layerscope.analysis.validate import (
    ForwardError,
    OpRow,
    PhaseValidation,
    Unmatched,
    ValidationResult,
    captured_times,
    combine_repeats,
)
from layerscope.app.validate import (
    MEASURE,
    ValidateRequest,
    ValidateResult,
    rejoin,
    result_of,
    run_validation,
    validate,
)
from layerscope.cli.common import to_json_text
from layerscope.errors import AnalysisError


# The profiled-trace path runs on every landing; the unprofiled pass (a second run of the same
# iterations) only under `make test-slow`: the CLI test runs validate's default (unprofiled) end to end.
@pytest.mark.parametrize("unprofiled", [pytest.param(True, marks=pytest.mark.slow), False])
def test_validate_tiny_llama_end_to_end(tmp_path: Path, unprofiled: bool) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from layerscope.model import tiny_config

    config = tmp_path / "config.json"
    config.write_text(json.dumps(tiny_config("llama")))
    out = tmp_path / "val"
    r = validate(config, "server-cpu", layers=1, prompt_len=8, decode_steps=2, warmup=1, iterations=1,
                 out_dir=out, unprofiled=unprofiled)
    for name in ("simulated-prefill.json.gz", "simulated-decode.json.gz", "captured.json.gz", "validation.json"):
        assert (out / name).is_file(), name
    assert [p.phase for p in r.phases] == ["prefill", "decode"] and r.layers == 1
    prefill, decode = r.phase("prefill"), r.phase("decode")
    # The predictions are the estimate's: TTFT and the decode steps' sum.
    assert prefill.forward.predicted_s == pytest.approx(r.estimate.ttft_s, rel=1e-6)
    assert decode.forward.predicted_s == pytest.approx(r.estimate.phase_times_s["decode"], rel=1e-6)
    assert [s.name for s in decode.steps] == ["decode_step_0", "decode_step_1"]
    assert decode.forward.measured_s == pytest.approx(sum(s.measured_s for s in decode.steps))
    # The machine check runs before and after the capture, predicted on the same spec.
    assert [p.label for p in r.probes] == ["before capture 1", "after capture 1"]
    assert all(x.measured_s > 0 and x.predicted_s > 0 for p in r.probes for x in p.readings)
    assert json.loads((out / "validation.json").read_text())["machine_probes"][1]["label"] == "after capture 1"
    trace_times = captured_times(r.capture.trace_path)
    for p in r.phases:
        # The profiled path subtracts the hooks' and the profiler's per-event time from the trace's: on a loaded
        # machine a leaf op of this hidden-64 model (about 10 µs) can be left with no positive time, and the join
        # then lists it, with that reason, instead of joining it (seen in CI: v_proj at -2.4 µs; up_proj and
        # lm_head, a 64 x 128 product here, at -9 µs). The unprofiled pass has nothing to subtract; for it this
        # never happens. Only such small leaf ops may be left out: none predicted above 50 µs.
        unusable = [u for u in p.only_predicted if "is not positive" in u.note]
        if unusable:
            assert not unprofiled and all(u.time_s < 50e-6 for u in unusable), unusable
            continue
        rows = {row.name: row for row in p.rows}
        assert rows["layers.0.self_attn.q_proj"].rule == "module"
        assert rows["layers.0.self_attn"].predicted_ops == (
            "layers.0.self_attn.rope", "layers.0.self_attn.kv_write", "layers.0.self_attn.attn")
        assert rows["layers.0"].kind == "residual_add" and rows["layers.0.mlp"].folded == ("layers.0.mlp.act_fn",)
        assert not p.only_predicted
        assert {u.name for u in p.only_measured} >= {"rotary_emb", "layers.0.mlp.act_fn"}
        unmodelled = sum(u.time_s for u in p.only_measured if u.counted_in is None)
        assert sum(row.measured_s for row in p.rows) + unmodelled == pytest.approx(p.forward.measured_s)
        assert p.call_overhead_s > 0 and p.instrumentation_s > 0
        assert p.median_abs_error is not None and p.p90_abs_error >= p.median_abs_error
        ranges = ["prefill"] if p.phase == "prefill" else [s.name for s in decode.steps]
        if unprofiled:
            # Measured by the pass without the profiler; the raw times are the trace's own.
            assert p.timing == "unprofiled" and p.event_overhead_s == 0
            assert r.capture.unprofiled is not None
            assert p.call_overhead_s == r.capture.unprofiled.call_overhead_s
            q = rows["layers.0.self_attn.q_proj"]
            traced = sum(trace_times.modules[k]["layers.0.self_attn.q_proj"] for k in ranges)
            assert q.measured_s + q.instrumentation_s + q.profiler_s == pytest.approx(traced)
            assert q.measured_s == pytest.approx(sum(r.capture.unprofiled.modules[k]["layers.0.self_attn.q_proj"]
                                                     for k in ranges))
        else:
            # The profiler's per-event cost, measured by the capture, is charged on the events the trace recorded.
            assert p.timing == "profiled" and r.capture.unprofiled is None
            assert r.capture.profiler_event is not None and p.event_overhead_s == r.capture.profiler_event.per_event_s
            assert p.profiler_s > 0
            assert p.call_overhead_s == trace_times.call_overhead_s
    doc = json.loads((out / "validation.json").read_text())
    assert doc["phases"][1]["phase"] == "decode" and doc["phases"][0]["ops_joined"] == len(prefill.rows)
    assert doc["phases"][0]["timing"] == ("unprofiled" if unprofiled else "profiled")
    with pytest.raises(AnalysisError, match="known: prefill, decode"):
        r.phase("chunked")


def test_validate_rejects_zero_repeats(tmp_path: Path) -> None:

    with pytest.raises(AnalysisError, match=r"repeats \(--repeats\): 0 is out of range; must be >= 1"):
        validate("no-such-model", "server-cpu", repeats=0, out_dir=tmp_path / "val")
    assert not (tmp_path / "val").exists()


def test_validate_repeats_end_to_end(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from layerscope.model import tiny_config

    config = tmp_path / "config.json"
    config.write_text(json.dumps(tiny_config("llama")))
    out = tmp_path / "val"
    # Raw times: each capture's forward is then its prefill range, readable from its trace alone.
    r = validate(config, "server-cpu", layers=1, prompt_len=8, warmup=0, iterations=1, out_dir=out, repeats=2,
                 correct_instrumentation=False, probe=False)
    assert (out / "captured.json.gz").is_file() and (out / "captured-2.json.gz").is_file()
    assert not (out / "captured-3.json.gz").exists()
    assert (r.traces["captured"], r.traces["captured_2"]) == (out / "captured.json.gz", out / "captured-2.json.gz")
    assert "captured_1" not in r.traces
    p = r.phase("prefill")
    ranges = [captured_times(r.traces[key]).ranges["prefill"] for key in ("captured", "captured_2")]
    assert r.probes == ()
    assert p.repeats == 2 and p.forward_measured_all_s == pytest.approx(tuple(ranges), rel=1e-9)
    assert p.forward.measured_s == pytest.approx(sum(ranges) / 2, rel=1e-9)
    assert p.forward.predicted_s == pytest.approx(r.estimate.ttft_s, rel=1e-6)
    doc = json.loads((out / "validation.json").read_text())
    assert doc["phases"][0]["repeats"] == 2 and len(doc["phases"][0]["forward_measured_all_s"]) == 2


@pytest.mark.slow
def test_rejoin_predicts_a_capture_again_on_other_hardware(tmp_path: Path) -> None:
    # The capture stays (same measured times); the predictions are those of the new hardware, and
    # rejoining on the first hardware gives the first validation back. Combined validations are refused.
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from layerscope.hardware import load_hardware
    from layerscope.model import tiny_config

    config = tmp_path / "config.json"
    config.write_text(json.dumps(tiny_config("llama")))
    first = load_hardware("server-cpu")
    r = validate(config, first, layers=1, prompt_len=8, decode_steps=1, warmup=0, iterations=1,
                 out_dir=tmp_path / "val")
    slower = first.model_copy(update={"name": "slower", "launch_overhead_s": 10 * first.launch_overhead_s})
    again = rejoin(r, slower)
    assert again.hardware.name == "slower" and again.capture is r.capture
    for p, q in zip(r.phases, again.phases, strict=True):
        assert [row.measured_s for row in q.rows] == [row.measured_s for row in p.rows]
        assert q.forward.measured_s == p.forward.measured_s and q.forward.predicted_s > p.forward.predicted_s
    assert again.estimate.ttft_s > r.estimate.ttft_s
    assert json.loads((tmp_path / "val" / "validation.json").read_text())["hardware"] == "slower"
    # The machine check keeps its measurements and is predicted again: 10x the launch overhead, longer.
    for p, q in zip(r.probes, again.probes, strict=True):
        assert [x.measured_s for x in q.readings] == [x.measured_s for x in p.readings]
        assert all(y.predicted_s > x.predicted_s for x, y in zip(p.readings, q.readings, strict=True))
    back = rejoin(again, first)
    assert [p.to_dict() for p in back.phases] == [p.to_dict() for p in r.phases]
    assert [p.to_dict() for p in back.probes] == [p.to_dict() for p in r.probes]
    with pytest.raises(AnalysisError, match="combine several captures"):
        rejoin(combine_repeats([r, r]), first)




# The keys `validate --json` printed and validation.json held before the result model (ValidationResult.to_dict
# and PhaseValidation.to_dict): the model keeps every one, in this order.
RESULT_KEYS = ["model", "hardware", "hardware_spec", "cost_model", "device", "dtype", "layers", "batch", "prompt_len",
               "decode_steps", "threads", "iterations", "warmup", "weights", "estimate", "phases", "traces",
               "machine_probes", "machine_measurement", "capture_loads", "thread_choice"]
PHASE_KEYS = ["phase", "ops_joined", "forward_error", "median_abs_error", "p90_abs_error", "weighted_abs_error",
              "only_predicted", "only_measured", "call_overhead_s", "instrumentation_s", "event_overhead_s",
              "profiler_s", "raw_median_abs_error", "repeats", "forward_spread", "timing", "forward",
              "forward_measured_all_s", "steps", "by_kind", "ops", "only_predicted_ops", "only_measured_ops"]


def _hand_made_validation() -> ValidationResult:
    from layerscope.capture.machine import ThreadChoice
    from layerscope.capture.probe import MachineProbe, ProbeReading
    from layerscope.hardware.host import CpuLoad

    rows = (OpRow("layers.0.self_attn.q_proj", "gemm", "module", 1.0, 2.0, ("layers.0.self_attn.q_proj",),
                  instrumentation_s=0.5, profiler_s=0.25),
            OpRow("(forward)", "embedding", "self", 1.0, 0.0, ("embed_tokens",)))
    phase = PhaseValidation("prefill", rows, (Unmatched("lm_head", 0.4, "compared within (forward)", "(forward)"),),
                            (), ForwardError("prefill", 2.0, 4.0), (ForwardError("prefill", 2.0, 4.0),))
    load = CpuLoad(wall_s=1.0, cores=2, own_cores=1.0, others_cores=0.5, steal_cores=0.0)
    probe = MachineProbe("before", (ProbeReading(1, 8192, 2048, "fp32", 2e-3, 1e-3),), 1)
    return ValidationResult(
        model="tiny", hardware=SimpleNamespace(name="server-cpu"), hardware_path=None, cost_model="roofline",
        device="cpu", dtype="fp32", layers=1, batch=1, prompt_len=8, decode_steps=0, threads=2,
        estimate=SimpleNamespace(ttft_s=2.0, tpot_s=None, phase_times_s={"prefill": 2.0}),
        capture=SimpleNamespace(iterations=3, warmup=2, weights="random", trace_path=Path("captured.json.gz")),
        phases=(phase,), traces={"captured": Path("captured.json.gz")}, probes=(probe,), capture_loads=(load, None),
        thread_choice=ThreadChoice(2, 2, load, None))


def test_the_result_keeps_every_key_and_value_of_the_validation() -> None:
    v = _hand_made_validation()
    doc = json.loads(to_json_text(result_of(v)))
    assert list(doc) == RESULT_KEYS and list(doc["phases"][0]) == PHASE_KEYS
    phase = v.phases[0]
    assert doc["phases"][0] == json.loads(to_json_text(phase.to_dict()))
    assert doc["estimate"] == {"ttft_s": 2.0, "tpot_s": None, "phase_times_s": {"prefill": 2.0}}
    assert doc["traces"] == {"captured": "captured.json.gz"} and doc["hardware_spec"] is None
    assert doc["machine_probes"] == [v.probes[0].to_dict()] and doc["machine_probes"][0]["label"] == "before capture 1"
    assert doc["capture_loads"] == [v.capture_loads[0].to_dict(), None]
    assert doc["thread_choice"] == v.thread_choice.to_dict() and doc["machine_measurement"] is None
    # The row whose measured time is 0 has no error: null, as before.
    assert doc["phases"][0]["ops"][1]["error"] is None
    assert ValidateResult.model_validate(doc) == result_of(v)


def test_the_result_rows_rebuild_what_the_text_needs() -> None:
    v = _hand_made_validation()
    result = result_of(v)
    assert result.thread_choice is not None and result.thread_choice.describe() == v.thread_choice.describe()
    load = result.capture_loads[0]
    assert load is not None and load.to_load() == v.capture_loads[0]
    assert result.machine_probes[0].readings[0].label == v.probes[0].readings[0].label


def test_a_bad_request_field_is_named() -> None:
    with pytest.raises(AnalysisError, match="batch"):
        validate("no-such-model", "server-cpu", batch="many")  # type: ignore[arg-type]
    with pytest.raises(AnalysisError, match=r"warmup \(--warmup\): -1 is out of range"):
        run_validation(ValidateRequest(model="no-such-model", hardware="server-cpu", warmup=-1))
    assert ValidateRequest(model="m").hardware == MEASURE
