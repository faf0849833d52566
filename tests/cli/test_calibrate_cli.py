"""``layerscope calibrate``: output handling, errors and exit codes (a kept run, replayed, stands in for measuring)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from layerscope.cli.app import app


@pytest.fixture
def replayed(replay_calibration) -> None:  # type: ignore[no-untyped-def]
    """``calibrate`` replays the kept run (tests/conftest.py) instead of measuring: milliseconds, any machine."""
    replay_calibration()


def test_json_summary_and_file(replayed: None, tmp_path: Path) -> None:
    out = tmp_path / "hw.yaml"
    result = CliRunner().invoke(app, ["calibrate", "--quick", "--out", str(out), "--json", "--name", "me"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["out"] == str(out) and data["name"] == "me"
    assert data["matmul"]["fp32"]["peak_flops_per_s"] > 0 and data["measured"]["quick"] is True
    from layerscope.app.calibrate import CalibrateResult

    assert list(data) == list(CalibrateResult.model_validate(data).model_dump())  # the result model's dump
    from layerscope.hardware import load_hardware

    hw = load_hardware(out)
    assert hw.name == "me" and hw.calibration is not None
    # An existing file is kept unless --force.
    again = CliRunner().invoke(app, ["calibrate", "--quick", "--out", str(out)])
    assert isinstance(again.exception, Exception) and "--force" in str(again.exception)
    forced = CliRunner().invoke(app, ["calibrate", "--quick", "--out", str(out), "--force"])
    assert forced.exit_code == 0, forced.output
    assert "GEMM fp32 peak" in forced.stdout
    assert "page faults of new tensors" in forced.stdout and "67.1 MB" in forced.stdout
    assert "vector rate of activation ops" in forced.stdout and "vector rate of sampling ops" in forced.stdout
    assert "activation streams" in forced.stdout


def test_errors_exit_2(run_cli, tmp_path: Path) -> None:
    existing = tmp_path / "hw.yaml"
    existing.write_text("keep me")
    cases = [
        (["--out", str(tmp_path / "hw.txt")], "use a .yaml or .json"),
        (["--out", str(existing)], "--force"),
        (["--out", str(tmp_path / "missing" / "hw.yaml")], "does not exist"),
        (["--out", str(tmp_path / "a.yaml"), "--device", "tpu"], "cpu or cuda"),
    ]
    for args, message in cases:
        proc = run_cli("calibrate", *args)
        assert proc.returncode == 2, (args, proc.stderr)
        assert message in proc.stderr, (args, proc.stderr)
    assert existing.read_text() == "keep me"


def test_cuda_without_a_gpu_exits_2(run_cli, tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    proc = run_cli("calibrate", "--out", str(tmp_path / "hw.yaml"), "--device", "cuda")
    assert proc.returncode == 2 and "no CUDA GPU" in proc.stderr
    assert not (tmp_path / "hw.yaml").exists()


# --- never lose a run: the measurements file, --from-measurements, flagged figures -----------------------------

#: A real run's measurements file (a tiny fp32 + bf16 grid on the 2-core reference VM, under load).
KEPT = Path(__file__).parent.parent / "data" / "calibration" / "tiny.measurements.json"


def kept_with(tmp_path: Path, name: str, edit) -> Path:  # type: ignore[no-untyped-def]
    """A copy of KEPT with ``edit(data)`` applied to its parsed JSON."""
    data = json.loads(KEPT.read_text())
    edit(data)
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


def test_from_measurements_refits_a_kept_run_without_measuring(run_cli, tmp_path: Path) -> None:
    out = tmp_path / "hw.yaml"
    proc = run_cli("calibrate", "--from-measurements", str(KEPT), "--out", str(out), "--json", "--name", "kept")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    data = json.loads(proc.stdout)
    assert data["name"] == "kept" and data["flags"] == [] and data["measured"]["gemv_points"] == 4
    from layerscope.hardware import load_hardware

    hw = load_hardware(out)
    assert hw.calibration is not None and hw.calibration.measurements.device_name == "AMD EPYC"
    assert not (tmp_path / "hw.measurements.json").exists()  # nothing was measured


def test_a_factor_of_4_3_in_a_kept_file_is_clamped_flagged_and_written(run_cli, tmp_path: Path) -> None:
    from layerscope.hardware import load_hardware
    from layerscope.hardware.calibration import read_calibration_run
    from layerscope.hardware.fit import fit_measurements

    run = read_calibration_run(KEPT)
    fit = fit_measurements(run.measurements, llc_bytes=run.llc_bytes)
    o, main_bw = fit.overhead.launch_overhead_s, fit.main_memory.bandwidth_bytes_per_s
    gemv = run.measurements.gemv
    row = next(i for i, (d, k) in enumerate(zip(gemv.dtype, gemv.k, strict=True)) if d.value == "bf16" and k == 1024)
    # the bf16 GEMV at K = 1024 streaming 4.3x the GEMV reference: the value that aborted a full run
    median_s = o + gemv.n[row] * 1024 * 2 / (4.3 * main_bw)

    def edit(data: dict) -> None:  # type: ignore[type-arg]
        data["measurements"]["gemv"]["median_s"][row] = median_s

    source = kept_with(tmp_path, "busy.measurements.json", edit)
    before = source.read_bytes()
    out = tmp_path / "hw.yaml"
    proc = run_cli("calibrate", "--from-measurements", str(source), "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines() == [
        "warning: calibrate: efficiency.weight_stream_k.bf16 at K=1024: fitted 4.3, outside (0, 4]; not re-measured; "
        "clamped to 4"]
    hw = load_hardware(out)
    assert dict(hw.weight_stream_k("bf16"))[1024.0] == 4.0
    assert hw.calibration is not None
    [flag] = hw.calibration.fit.flags
    assert flag.rows[0] == f"gemv[{row}]" and flag.value == pytest.approx(4.3)
    assert source.read_bytes() == before


def test_nothing_usable_exits_2_and_inputs_are_never_overwritten(run_cli, tmp_path: Path) -> None:
    llc = json.loads(KEPT.read_text())["llc_bytes"]

    def slow_memory(data: dict) -> None:  # type: ignore[type-arg]
        stream = data["measurements"]["stream"]
        stream["time_s"] = [t * 1e4 if foot >= 4 * llc and kernel != "gemv" else t for t, foot, kernel in zip(
            stream["time_s"], stream["footprint_bytes"], stream["kernel"], strict=True)]

    def incomplete(data: dict) -> None:  # type: ignore[type-arg]
        data["complete"], data["total"] = False, data["measured"] + 10

    unusable = kept_with(tmp_path, "slow.measurements.json", slow_memory)
    garbage = tmp_path / "garbage.json"
    garbage.write_bytes(b"\xff\xfe not json")
    other = tmp_path / "other.json"
    other.write_text('{"traceEvents": []}')
    out = tmp_path / "hw.yaml"
    cases = [
        (["--from-measurements", str(unusable)], "main-memory bandwidth (copy/scale beyond 4x LLC): fitted"),
        (["--from-measurements", str(garbage)], "not a JSON measurements file"),
        (["--from-measurements", str(other)], "not a layerscope measurements file"),
        (["--from-measurements", str(tmp_path / "missing.json")], "no such file"),
        (["--from-measurements", str(KEPT), "--quick"], "--from-measurements measures nothing"),
    ]
    for args, message in cases:
        proc = run_cli("calibrate", *args, "--out", str(out))
        assert proc.returncode == 2, (args, proc.stderr)
        [line] = proc.stderr.splitlines()
        assert line.startswith("error: ") and message in line, (args, line)
        assert not out.exists()
    # the output may not be the file it reads, even with --force
    copy = kept_with(tmp_path, "same.json", lambda data: None)
    before = copy.read_bytes()
    proc = run_cli("calibrate", "--from-measurements", str(copy), "--out", str(copy), "--force")
    assert proc.returncode == 2 and "refusing to overwrite the input" in proc.stderr
    assert copy.read_bytes() == before
    # a run that stopped early still fits what it has, and says so
    partial = kept_with(tmp_path, "partial.measurements.json", incomplete)
    proc = run_cli("calibrate", "--from-measurements", str(partial), "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "holds 56 of 66 measurements (the run stopped early)" in proc.stderr


def test_a_run_keeps_its_measurements_and_flags_what_re_measuring_did_not_fix(
        replay_calibration, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from layerscope.hardware.calibration import read_calibration_run

    replay_calibration(slow_calls=10**6)  # the GEMV reference rows of the replayed run, always 50x slow
    out = tmp_path / "hw.yaml"
    result = CliRunner().invoke(app, ["calibrate", "--quick", "--out", str(out), "--json"])
    assert result.exit_code == 0, result.output
    notes = [line for line in result.stderr.splitlines() if line.startswith("note: calibrate: re-measuring")]
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning: calibrate: ")]
    assert len(notes) == 2 and "round 2 of 2" in notes[1]
    assert warnings and all("re-measured 2x, still out of range" in w for w in warnings)
    data = json.loads(result.stdout)
    assert [f["remeasured"] for f in data["flags"]] == [2] * len(warnings)
    kept = tmp_path / "hw.measurements.json"
    run = read_calibration_run(kept)
    assert run.complete
    # the reference rows, behind every flag, were taken twice; the rows only some rounds named, once
    references = {f"stream[{i}]" for i, k in enumerate(run.measurements.stream.kernel) if k == "gemv"}
    assert {run.measurements.remeasured[ref] for ref in references} == {2}
    assert set(run.measurements.remeasured.values()) <= {1, 2}
    # the kept run refits to the same spec, flags and all
    again = tmp_path / "again.yaml"
    refit = CliRunner().invoke(app, ["calibrate", "--from-measurements", str(kept), "--out", str(again),
                                     "--name", data["name"]])
    assert refit.exit_code == 0, refit.output
    assert again.read_text() == out.read_text()
    # a second run does not measure over the kept file unless told to
    out.unlink()
    refused = CliRunner().invoke(app, ["calibrate", "--quick", "--out", str(out)])
    assert "--from-measurements" in str(refused.exception) and not out.exists()


def test_a_failed_fit_keeps_the_measurements_and_says_where(replayed: None, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from layerscope.capture import calibrate as module
    from layerscope.errors import HardwareSpecError
    from layerscope.hardware.calibration import read_calibration_run

    def fails(*args: object, **kwargs: object) -> None:
        raise HardwareSpecError("gemm fp32: need compute-bound GEMMs of two or more distinct sizes")

    monkeypatch.setattr(module, "spec_from_measurements", fails)
    out = tmp_path / "hw.yaml"
    result = CliRunner().invoke(app, ["calibrate", "--quick", "--out", str(out)])
    kept = tmp_path / "hw.measurements.json"
    assert isinstance(result.exception, HardwareSpecError)
    assert f"the measurements are kept in {str(kept)!r}" in str(result.exception)
    assert not out.exists() and read_calibration_run(kept).complete


def test_a_measured_spec_is_kept_as_this_machines_for_the_demo(replayed: None, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from layerscope.hardware import load_hardware
    from layerscope.hardware.host import saved_spec_path

    monkeypatch.setenv("LAYERSCOPE_MACHINES_DIR", str(tmp_path / "machines"))
    out = tmp_path / "hw.json"
    result = CliRunner().invoke(app, ["calibrate", "--quick", "--out", str(out), "--json"])
    assert result.exit_code == 0, result.output
    kept = load_hardware(out)
    assert kept.calibration is not None
    m = kept.calibration.measurements
    saved = saved_spec_path(m.device, m.device_name, m.threads)
    assert json.loads(result.stdout)["saved_as_machine_spec"] == str(saved)
    # Kept as YAML whatever --out's format, with the same figures.
    assert saved.suffix == ".yaml" and load_hardware(saved).engines.peak_flops_per_s == kept.engines.peak_flops_per_s
    assert saved.name == f"cpu-{m.device_name.lower().replace(' ', '-')}-{m.threads}t.yaml"
    # --no-save keeps nothing; a refit of kept measurements (maybe another machine's) is never kept.
    saved.unlink()
    again = CliRunner().invoke(app, ["calibrate", "--quick", "--out", str(tmp_path / "b.yaml"), "--no-save"])
    assert again.exit_code == 0, again.output and not saved.exists()
    refit = CliRunner().invoke(app, ["calibrate", "--from-measurements", str(tmp_path / "hw.measurements.json"),
                                     "--out", str(tmp_path / "c.yaml")])
    assert refit.exit_code == 0, refit.output
    assert not saved.exists()


def test_measuring_reports_its_progress_to_a_bar_and_none_for_json(replay_calibration, tmp_path: Path,
                                                                    monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The bar (layerscope.cli.common.step_progress: on a terminal only, tests/cli/test_common.py) gets every
    task as it starts and the end; with --json the bar is off."""
    from contextlib import contextmanager

    import layerscope.cli.common as common

    replay_calibration()
    asked: list[tuple[bool, str]] = []
    reports: list[tuple[int, int, str]] = []

    @contextmanager
    def recording(enabled: bool, name: str):  # type: ignore[no-untyped-def]
        asked.append((enabled, name))
        yield lambda done, total, label: reports.append((done, total, label))

    monkeypatch.setattr(common, "step_progress", recording)
    result = CliRunner().invoke(app, ["calibrate", "--quick", "--out", str(tmp_path / "hw.yaml")])
    assert result.exit_code == 0, result.output
    assert asked == [(True, "calibrate")]
    total = reports[0][1]
    assert reports[0][0] == 0 and (total, total, "done") in reports and len(reports) > 2
    result = CliRunner().invoke(app, ["calibrate", "--quick", "--out", str(tmp_path / "j.yaml"), "--json"])
    assert result.exit_code == 0, result.output
    assert asked[-1] == (False, "calibrate")
