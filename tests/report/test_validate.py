"""The validation charts (``report/validate.py``) on a real ``validate --json`` of a tiny Llama on this CPU."""

from __future__ import annotations

from pathlib import Path

import pytest

from layerscope.report import load_document
from layerscope.report.validate import charts

pytest.importorskip("plotly", reason="the report's charts need plotly: pip install 'layerscope[report]'")


@pytest.mark.slow  # its input is a validate run (15-20 s); the other report kinds run in make test
def test_each_phase_has_its_scatter_and_its_errors_by_kind(validate_json: Path) -> None:
    doc = load_document(validate_json)
    section = charts(doc)
    phases = [p["phase"] for p in doc.data["phases"]]
    assert phases == ["prefill", "decode"]
    assert [c.id for c in section.charts] == [f"{name}-{phase}" for phase in phases
                                              for name in ("predicted-vs-measured", "error-by-kind")]
    for phase, scatter, bars in zip(doc.data["phases"], section.charts[::2], section.charts[1::2], strict=True):
        timed = [op for op in phase["ops"] if op["predicted_s"] > 0 and op["measured_s"] > 0]
        points = [trace for trace in scatter.figure.data if trace.mode == "markers"]
        assert sum(len(trace.x) for trace in points) == len(timed) > 0
        kinds = [row for row in phase["by_kind"] if row["error"] is not None]
        assert list(bars.figure.data[0].x) == [row["kind"] for row in kinds]
        assert list(bars.figure.data[0].y) == pytest.approx([100 * row["error"] for row in kinds])
    facts = dict(section.facts)
    forward = doc.data["phases"][0]["forward"]
    assert facts["prefill forward"].endswith(f"({100 * forward['error']:+.1f}%)")
