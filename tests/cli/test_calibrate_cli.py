"""``layerscope calibrate``: output handling, errors and exit codes (a tiny grid stands in for --quick)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from layerscope.cli.app import app

TINY = dict(gemm_m=(1, 64, 256), gemm_nk=((512, 512), (1024, 1024)), dtypes=("fp32",), stream_step=8,
            vector_elements=(16 * 1024,), min_time_s=0.01, empty_op_samples=3, fresh_alloc_mib=(2, 64),
            fresh_alloc_samples=2)


@pytest.fixture
def tiny_quick(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    from layerscope.capture import calibrate as module

    monkeypatch.setattr(module, "QUICK_GRID", module.CalibrationGrid(**TINY))


def test_json_summary_and_file(tiny_quick: None, tmp_path: Path) -> None:
    out = tmp_path / "hw.yaml"
    result = CliRunner().invoke(app, ["calibrate", "--quick", "--out", str(out), "--json", "--name", "me"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["out"] == str(out) and data["name"] == "me"
    assert data["matmul"]["fp32"]["peak_flops_per_s"] > 0 and data["measured"]["quick"] is True
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
