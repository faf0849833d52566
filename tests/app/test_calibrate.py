"""``app.calibrate``: one request in, one result out; the result keeps every key and value of the spec's
calibration summary (``calibrate --json``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from layerscope.app.calibrate import CalibrateRequest, CalibrateResult, calibrate, measurements_path, result_of
from layerscope.errors import OutputError

KEPT = Path(__file__).resolve().parents[1] / "data" / "calibration" / "tiny.measurements.json"


def _spec():  # type: ignore[no-untyped-def]
    from layerscope.capture.calibrate import spec_from_run
    from layerscope.hardware.calibration import read_calibration_run

    return spec_from_run(read_calibration_run(KEPT), name="kept")


def test_the_result_is_the_calibration_summary_beside_where_the_spec_went(tmp_path: Path) -> None:
    from layerscope.cli.common import to_json_text

    spec = _spec()
    result = result_of(spec, tmp_path / "hw.yaml", None)
    doc = json.loads(to_json_text(result))
    want = {"out": str(tmp_path / "hw.yaml"), "name": "kept", "saved_as_machine_spec": None,
            **spec.calibration.summary()}
    assert list(doc) == list(want) and doc == json.loads(to_json_text(want))
    assert set(CalibrateResult.model_fields) == set(want)
    assert result.vector_peak_flops_per_s == spec.calibration.fit.vector_peak_flops_per_s


def test_refit_writes_the_spec_and_returns_its_figures(tmp_path: Path) -> None:
    from layerscope.hardware import load_hardware

    out = tmp_path / "hw.json"
    warnings: list[str] = []
    result = calibrate(CalibrateRequest(out=out, from_measurements=KEPT, name="me"), warn=warnings.append)
    hw = load_hardware(out)
    assert hw.name == result.name == "me" and result.out == str(out) and result.saved_as_machine_spec is None
    assert result.matmul["fp32"].peak_flops_per_s == hw.calibration.fit.matmul["fp32"].peak_flops_per_s
    assert [f.to_flag() for f in result.flags] == hw.calibration.fit.flags
    assert not warnings  # a complete run
    assert measurements_path(out) == tmp_path / "hw.measurements.json"


@pytest.mark.parametrize(("name", "exists", "needle"), [
    ("hw.txt", False, "use a .yaml or .json file"),
    ("hw.yaml", True, "exists; pass --force"),
])
def test_bad_outputs_fail_before_anything_is_measured(tmp_path: Path, name: str, exists: bool, needle: str) -> None:
    out = tmp_path / name
    if exists:
        out.write_text("keep me")
    with pytest.raises(OutputError, match=needle):
        calibrate(CalibrateRequest(out=out))
    assert not measurements_path(out).exists()
