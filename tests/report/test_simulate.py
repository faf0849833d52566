"""The engine sweep's charts (``report/simulate.py``) on a real ``simulate --engines 1..8 --json``."""

from __future__ import annotations

from pathlib import Path

import pytest

from layerscope.report import load_document
from layerscope.report.simulate import LOWER_BOUNDS, charts

pytest.importorskip("plotly", reason="the report's charts need plotly: pip install 'layerscope[report]'")


def test_sweep_curve_is_the_sweep(simulate_json: Path) -> None:
    doc = load_document(simulate_json)
    section = charts(doc)
    assert [c.id for c in section.charts] == ["engine-sweep", "engine-utilization"]
    traces = {trace.name: trace for trace in section.charts[0].figure.data}
    makespan, speedup, serial = traces["makespan"], traces["speedup"], traces["sum of op times"]
    rows = doc.data["sweep"]
    assert list(makespan.x) == list(range(1, 9))
    assert list(makespan.y) == pytest.approx([row["makespan_ns"] / 1e3 for row in rows])
    assert list(speedup.y) == pytest.approx([row["speedup"] for row in rows])
    assert speedup.y[0] == 1.0 and speedup.yaxis == "y2"
    assert list(serial.y) == [doc.data["sum_of_op_times_ns"] / 1e3] * 2
    # One engine runs the ops one after another: no makespan below the critical path, none above the sum.
    assert all(y <= serial.y[0] * (1 + 1e-9) for y in makespan.y)


def test_utilization_in_percent(simulate_json: Path) -> None:
    doc = load_document(simulate_json)
    engines, bandwidth = charts(doc).charts[1].figure.data
    rows = doc.data["sweep"]
    assert list(engines.y) == pytest.approx([100 * row["engine_utilization"] for row in rows])
    assert list(bandwidth.y) == pytest.approx([100 * row["bandwidth_utilization"] for row in rows])
    assert engines.y[0] == pytest.approx(100.0)  # one engine is never idle within its makespan


def test_facts_name_the_engines_used(simulate_json: Path) -> None:
    doc = load_document(simulate_json)
    facts = dict(charts(doc).facts)
    assert facts["engines used"].startswith(f"{doc.data['engines_used']} ")


def test_lower_bounds_lie_under_the_makespan(simulate_json: Path) -> None:
    """Where the sweep rows carry their lower bounds (bandwidth, dependencies, compute), each is drawn and none is
    above the makespan it bounds."""
    doc = load_document(simulate_json)
    rows = doc.data["sweep"]
    if "bound" not in rows[0]:
        pytest.skip("this simulate --json has no lower bounds per sweep row")
    traces = {trace.name: trace for trace in charts(doc).charts[0].figure.data}
    makespan = traces["makespan"].y
    for key, name in LOWER_BOUNDS:
        assert list(traces[name].y) == pytest.approx([row[key] / 1e3 for row in rows])
        assert all(bound <= span * (1 + 1e-6) for bound, span in zip(traces[name].y, makespan, strict=True))
    assert all(row["bound"] in traces["makespan"].customdata[i] for i, row in enumerate(rows))
