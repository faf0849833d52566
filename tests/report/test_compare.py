"""The comparison charts (``report/compare.py``, ``report/accuracy.py``) on real ``compare --json`` outputs: the
whole Llama-3.2-1B simulated on the H200 preset against its real H200 capture, and a trace against its straggler."""

from __future__ import annotations

from pathlib import Path

import pytest

from layerscope.report import load_document
from layerscope.report.accuracy import Joined
from layerscope.report.compare import TOP_KERNELS, charts, trace_charts

pytest.importorskip("plotly", reason="the report's charts need plotly: pip install 'layerscope[report]'")


def test_predicted_vs_measured_has_every_joined_op(compare_json: Path) -> None:
    doc = load_document(compare_json)
    section = charts(doc)
    assert [c.id for c in section.charts] == ["predicted-vs-measured", "error-by-op"]
    ops = doc.data["ops"]
    assert doc.data["summary"]["ops_joined"] == len(ops) > 100  # 16 layers' modules
    points = [trace for trace in section.charts[0].figure.data if trace.mode == "markers"]
    timed = [op for op in ops if op["predicted_us"] and op["measured_us"]]
    assert sum(len(trace.x) for trace in points) == len(timed)
    gemm = next(trace for trace in points if trace.name == "gemm")
    q_proj = next(op for op in ops if op["op"] == "layers.0.self_attn.q_proj")
    i = [row[0] for row in gemm.customdata].index("layers.0.self_attn.q_proj")
    assert (gemm.x[i], gemm.y[i]) == pytest.approx((q_proj["measured_us"], q_proj["predicted_us"]))
    assert gemm.customdata[i][1] == pytest.approx(100 * q_proj["error"])
    bars = section.charts[1].figure.data[0]
    assert list(bars.y) == pytest.approx([100 * op["error"] for op in ops if op["error"] is not None])
    facts = dict(section.facts)
    assert facts["forward"].endswith(f"({100 * doc.data['summary']['forward_error']:+.1f}%)")


def test_joined_error_is_signed_relative_to_measured() -> None:
    assert Joined("x", "gemm", 1.5e-6, 1e-6).error == pytest.approx(0.5)
    assert Joined("x", "gemm", 0.5e-6, 1e-6).error == pytest.approx(-0.5)
    assert Joined("x", "gemm", None, 1e-6).error is None and Joined("x", "gemm", 1e-6, 0.0).error is None


def test_trace_comparison_shows_categories_and_the_largest_changes(compare_traces_json: Path) -> None:
    doc = load_document(compare_traces_json)
    section = trace_charts(doc)
    assert [c.id for c in section.charts] == ["kernel-time-by-category", "kernel-time-change"]
    a, b = section.charts[0].figure.data
    rows = doc.data["by_category"]
    assert list(a.y) == pytest.approx([row["total_ms_a"] for row in rows])
    # rank 2 is rank 0 with every time scaled by 5/4 (tests/data/traces/README.md)
    assert sum(b.y) == pytest.approx(1.25 * sum(a.y), rel=1e-3)
    change = section.charts[1].figure.data[0]
    assert len(change.x) == min(TOP_KERNELS, len(doc.data["by_name"]))
    assert list(map(abs, change.x)) == sorted(map(abs, change.x))  # largest change at the top (last bar)
    assert dict(section.facts)["span_ms"].endswith("(+25.0%)")
