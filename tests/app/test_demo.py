"""``app.demo``: the README's main job, end to end on the bundled default (a shorter prompt to keep CI quick), its
verdict and its result model (``demo --json``)."""

from __future__ import annotations

import gzip
import json
from dataclasses import replace

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from layerscope.app.demo import (
    KNOWN_REASONS,
    DemoRequest,
    DemoResult,
    known_reason,
    machine_adjusted_error,
    result_of,
    run_demo,
    verdict,
)
from layerscope.capture.machine import DEFAULT_ROUNDS
from layerscope.hardware.host import CpuLoad, cpu_name, saved_spec_path
from layerscope.hardware.loaders import dump_hardware_yaml


@pytest.fixture(scope="module")
def demo_machines(tmp_path_factory):
    """The demo fixture's own folder of kept specs: it measures, and keeps its measurement there."""
    return tmp_path_factory.mktemp("machines")


@pytest.fixture(scope="module")
def demo(tmp_path_factory, demo_machines):
    out = tmp_path_factory.mktemp("demo") / "demo"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LAYERSCOPE_MACHINES_DIR", str(demo_machines))
        return run_demo(DemoRequest(out_dir=out, prompt_len=32, engines=4, iterations=1, max_wait_s=0))


def test_demo_estimates_simulates_captures_and_compares(demo):
    out = demo.out_dir
    for name in ("this-machine.yaml", "simulated-1engine.json.gz", "simulated-4engines.json.gz", "captured.json.gz",
                 "validation.json"):
        assert (out / name).is_file(), name
    sim = json.loads(gzip.decompress((out / "simulated-4engines.json.gz").read_bytes()))
    threads = {e["args"]["name"] for e in sim["traceEvents"] if e.get("ph") == "M" and e["name"] == "thread_name"}
    assert threads == {f"engine {i}" for i in range(4)}
    assert demo.estimate.scope == "layer 0"
    # The projections and norms of the layer join by name between the simulation and the capture.
    joined = set(demo.comparison.ops.column("op").to_pylist())
    assert {"layers.0.self_attn.q_proj", "layers.0.mlp.down_proj", "layers.0.input_layernorm"} <= joined
    assert demo.comparison.median_abs_error is not None
    doc = _doc(demo)
    assert doc["comparison"]["ops_joined"] == len(joined)


def test_demo_measures_in_rounds_and_records_the_machine_state(demo):
    assert demo.hardware_source == "measured"
    m = demo.measurement
    assert m is not None and len(m.rounds) == DEFAULT_ROUNDS
    # Best of the rounds: the kept GEMM rate is the largest round's, the slowest spec's the smallest.
    rates = [r.gemm_flops_per_s["fp32"] for r in m.rounds]
    assert m.spec.engines.peak_flops_per_s["fp32"] == pytest.approx(max(rates))
    assert m.slowest.engines.peak_flops_per_s["fp32"] == pytest.approx(min(rates))
    assert demo.predicted_slowest_s >= demo.comparison.forward.predicted_s
    assert demo.thread_choice is not None and demo.validation.threads == demo.thread_choice.threads
    doc = _doc(demo)
    assert doc["machine_measurement"]["rounds"] == DEFAULT_ROUNDS
    assert "gemm_fp32" in doc["machine_measurement"]["spread"]
    assert len(doc["capture_loads"]) == 1 and doc["error_sign"].startswith("error = (predicted - measured)")
    assert doc["machine_adjusted_error"] == pytest.approx(machine_adjusted_error(demo.validation))


# The keys `demo --json` printed before the result model (DemoResult.to_dict), in order.
DEMO_KEYS = ["out_dir", "hardware", "hardware_spec", "hardware_source", "threads", "machine_measurement", "estimate",
             "simulated_1_engine", "simulated_n_engines", "captured", "comparison", "capture_loads", "machine_probes",
             "predicted_slowest_s", "machine_adjusted_error", "error_sign", "notes", "verdict", "files", "open"]


def _doc(run):
    from layerscope.cli.common import to_json_text

    return json.loads(to_json_text(result_of(run)))


def test_the_result_keeps_the_keys_and_values_of_the_run(demo):
    from layerscope.cli.common import to_json_text

    doc = _doc(demo)
    assert list(doc) == DEMO_KEYS
    assert list(doc["estimate"]) == ["scope", "ttft_s", "ops", "by_kind"]
    assert doc["estimate"]["by_kind"] == json.loads(json.dumps(demo.estimate.breakdown("kind")))
    assert doc["captured"]["trace_path"] == str(demo.capture.trace_path) and "summary" not in doc["captured"]
    assert doc["comparison"] == json.loads(to_json_text(demo.comparison.to_dict()))
    assert doc["simulated_n_engines"]["trace"] == str(demo.simulated_n.trace_path)
    assert doc["simulated_1_engine"]["sweep"][0]["engines"] == 1
    assert DemoResult.model_validate(doc).verdict == list(demo.verdict)


def test_verdict_says_the_error_its_sign_and_where_time_went(demo):
    text = "\n".join(demo.verdict)
    f = demo.comparison.forward
    assert f"error {f.error:+.0%}" in text
    assert "(predicted − measured) / measured" in text
    assert ("too fast" if f.error < 0 else "too slow") in text
    assert "Where the time went (measured): gemm" in text
    assert "Error bars:" in text and "During the capture" in text and "Machine check" in text
    assert "layerscope calibrate --quick" in text  # measured now: says how to make it tighter


def test_the_demo_lists_every_file_it_wrote_and_what_to_open(demo, capsys):
    from layerscope.cli.common import console
    from layerscope.cli.demo import _render_files

    doc = result_of(demo)
    out = demo.out_dir
    listed = {f.path for f in doc.files}
    # Every file in the output directory, and the measurement kept for the next demo when it was kept.
    assert {str(p) for p in out.iterdir()} <= listed
    assert (str(demo.kept_spec) in listed) == (demo.kept_spec is not None)
    assert all(f.what for f in doc.files)
    cap, sim = demo.validation.traces["captured"], demo.validation.traces["simulated_prefill"]
    assert [o.command for o in doc.open] == [f"layerscope open {demo.simulated_n.trace_path}",
                                             f"layerscope open {cap}", f"layerscope compare --sim {sim} --real {cap}"]
    _render_files(console(), doc)
    shown = capsys.readouterr().out
    assert f"Files written ({len(doc.files)})" in shown and "Open" in shown
    for f in doc.files:
        assert f.path in shown and f.what in shown
    assert f"the capture, in ui.perfetto.dev: layerscope open {cap}" in shown


def test_verdict_names_a_busy_machine_and_a_drifting_machine_check(demo):
    v = demo.validation
    busy = CpuLoad(wall_s=5.0, cores=2, own_cores=1.0, others_cores=1.5, steal_cores=0.0)
    probes = [replace(p, readings=tuple(replace(r, measured_s=r.predicted_s * (1.0 if p.when == "before" else 1.5))
                                        for r in p.readings)) for p in v.probes]
    worse = replace(demo, validation=replace(v, capture_loads=(busy,), probes=tuple(probes)))
    text = "\n".join(verdict(worse))
    assert f"other processes used 1.5 of 2 cores: our {v.threads} threads were" in text
    assert "measured times are inflated" in text
    assert "1.00 before, 1.50 after" in text and "50% slower after the capture" in text


def test_every_known_reason_is_reachable_and_unknown_kinds_say_so():
    for (source, kind) in KNOWN_REASONS:
        assert known_reason("measured" if source == "*" else source, kind)
    assert known_reason("measured", "no-such-kind") is None


@pytest.mark.slow  # a second demo run (15 s); make test keeps the demo's own run and its checks
def test_demo_prefers_the_spec_calibrate_kept_for_this_machine(demo, tmp_path, monkeypatch):
    monkeypatch.setenv("LAYERSCOPE_MACHINES_DIR", str(tmp_path / "machines"))
    threads = demo.validation.threads
    saved = saved_spec_path("cpu", cpu_name(), threads)
    saved.parent.mkdir(parents=True)
    saved.write_text(dump_hardware_yaml(demo.hardware))
    again = run_demo(DemoRequest(out_dir=tmp_path / "again", prompt_len=32, engines=2, iterations=1, threads=threads,
                                 max_wait_s=0))
    assert again.hardware_source == "calibrated" and again.hardware_path == saved
    assert again.measurement is None and not (tmp_path / "again" / "this-machine.yaml").exists()
    assert any("the spec `layerscope calibrate` saved for this machine" in line for line in again.verdict)
    assert not any("layerscope calibrate --quick" in line for line in again.verdict)



@pytest.mark.slow  # a second demo run (14 s); make test keeps the demo's own run and its checks
def test_a_quiet_measurement_is_kept_and_the_next_demo_predicts_on_it(demo, demo_machines, tmp_path, monkeypatch):
    from layerscope.hardware.host import quick_spec_path

    monkeypatch.setenv("LAYERSCOPE_MACHINES_DIR", str(demo_machines))
    threads = demo.validation.threads
    kept = quick_spec_path("cpu", cpu_name(), threads)
    assert demo.hardware_source == "measured"
    assert kept.is_file() == (not demo.measurement.busy)
    if not kept.is_file():
        pytest.skip("this machine was busy while the demo measured it: a busy measurement is not kept")
    second = run_demo(DemoRequest(out_dir=tmp_path / "two", prompt_len=32, engines=4, iterations=1, threads=threads,
                                  max_wait_s=0))
    assert second.hardware_source == "kept" and second.hardware_path == kept
    # The same spec, so the same prediction, to the last digit.
    assert second.estimate.ttft_s == demo.estimate.ttft_s
    assert any("the quick measurement an earlier demo kept" in line for line in second.verdict)
    assert known_reason("kept", "gemm") == known_reason("measured", "gemm")


def test_the_demo_says_what_bounds_its_n_engines_and_why_they_may_be_slower(demo, capsys):
    from layerscope.cli.demo import _render

    doc = result_of(demo)
    n1, nn = doc.simulated_1_engine, doc.simulated_n_engines
    _render(doc, DemoRequest(out_dir=demo.out_dir, prompt_len=32, engines=4))
    shown = capsys.readouterr().out
    assert f"4 engines split this chip's compute (0.25 of it each), the bandwidth shared: {nn.sweep[-1].bound}-bound" \
        in shown
    slower = nn.schedule.makespan_ns > n1.schedule.makespan_ns
    assert ("slower than 1 engine because" in shown) == slower
    assert "--engine-mode add" in shown
