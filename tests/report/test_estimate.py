"""The estimate's charts (``report/estimate.py``) on real ``estimate --json`` outputs of Llama-3.2-1B on the H100."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from layerscope.report import load_document
from layerscope.report.estimate import charts, roofs

pytest.importorskip("plotly", reason="the report's charts need plotly: pip install 'layerscope[report]'")


def _chart(section, chart_id):
    return next(c for c in section.charts if c.id == chart_id)


def test_time_by_kind_is_the_estimates_by_kind(estimate_json: Path) -> None:
    doc = load_document(estimate_json)
    bars = _chart(charts(doc), "time-by-kind").figure.data[0]
    expected = {row["kind"]: row["time_s"] * 1e6 for row in doc.data["by_kind"]}
    assert dict(zip(bars.y, bars.x, strict=True)) == pytest.approx(expected)
    assert list(bars.y)[-1] == "gemm"  # largest on top: decode at batch 1 streams the weights through GEMMs


def test_time_by_layer_adds_up_to_the_whole_forward(estimate_json: Path) -> None:
    doc = load_document(estimate_json)
    figure = _chart(charts(doc), "time-by-layer-decode").figure
    labels = list(figure.data[0].x)
    assert labels == [f"L{i}" for i in range(16)] + ["outside layers"]  # Llama-3.2-1B: 16 decoder layers
    total_us = sum(sum(trace.y) for trace in figure.data)
    assert total_us == pytest.approx(doc.data["totals"]["time_s"] * 1e6)
    per_layer = [sum(trace.y[i] for trace in figure.data) for i in range(16)]
    assert max(per_layer) == pytest.approx(min(per_layer))  # identical layers, identical time


def test_a_generate_estimate_has_one_layer_chart_per_phase(generate_json: Path) -> None:
    section = charts(load_document(generate_json))
    ids = [c.id for c in section.charts]
    assert ids == ["time-by-kind", "time-by-layer-prefill", "time-by-layer-decode", "roofline"]
    roofline = _chart(section, "roofline").figure
    names = {trace.name for trace in roofline.data if trace.mode == "markers"}
    assert {"prefill · gemm", "decode · gemm"} <= names


def test_roofline_places_every_op_with_flops_and_bytes(estimate_json: Path) -> None:
    doc = load_document(estimate_json)
    section = charts(doc)
    figure = _chart(section, "roofline").figure
    points = [trace for trace in figure.data if trace.mode == "markers"]
    ops = doc.data["ops"]
    placed = [op for op in ops if op["flops"] > 0 and op["bytes"] > 0]
    assert sum(len(trace.x) for trace in points) == len(placed)
    assert f"roofline: {len(ops) - len(placed)} ops without FLOPs or bytes" in section.notes[0]
    # q_proj at decode, batch 1: 2·2048·2048 FLOPs over 2048·2048·2 weight bytes + 2·2048·2 activation bytes.
    gemm = next(trace for trace in points if trace.name == "gemm")
    i = [row[0] for row in gemm.customdata].index("layers.0.self_attn.q_proj")
    q_proj = next(op for op in ops if op["name"] == "layers.0.self_attn.q_proj")
    assert gemm.x[i] == pytest.approx(2 * 2048 * 2048 / (2048 * 2048 * 2 + 2 * 2048 * 2))
    assert gemm.y[i] == pytest.approx(2 * 2048 * 2048 / q_proj["time_s"])


def test_roofs_are_the_h100_datasheet_figures(estimate_json: Path) -> None:
    doc = load_document(estimate_json)
    peaks, bandwidths = roofs(doc.data["figures"])
    assert peaks == {"bf16": 989e12, "vector": 67e12}  # H100 SXM: 989 TFLOP/s BF16 dense, 67 TFLOP/s FP32
    assert bandwidths == {"hbm": 3.35e12}  # 3,350 GB/s
    figure = _chart(charts(doc), "roofline").figure
    lines = {trace.name: trace for trace in figure.data if trace.mode == "lines"}
    assert set(lines) == {"hbm 3.35 TB/s", "bf16 peak 989 TFLOP/s", "vector peak 67 TFLOP/s"}
    slope = lines["hbm 3.35 TB/s"]
    assert slope.y[1] / slope.x[1] == pytest.approx(3.35e12)
    assert slope.y[1] == pytest.approx(989e12)  # the memory roof ends where it meets the top compute roof


def test_no_op_is_above_its_roof(estimate_json: Path) -> None:
    """Every op's achieved rate is at most min(peak, bandwidth × intensity) of its own unit."""
    doc = load_document(estimate_json)
    peaks, bandwidths = roofs(doc.data["figures"])
    for op in doc.data["ops"]:
        if op["flops"] <= 0 or op["bytes"] <= 0:
            continue
        unit = "vector" if "engines.vector_flops_per_s" in op["figures"] else "bf16"
        attainable = min(peaks[unit], bandwidths["hbm"] * op["flops"] / op["bytes"])
        assert op["flops"] / op["time_s"] <= attainable * (1 + 1e-9), op["name"]
        assert math.isfinite(op["flops"] / op["time_s"])
