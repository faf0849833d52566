"""The page (``report/page.py``) and the verb (``report/build.py``): one self-contained file."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from layerscope.errors import OutputError
from layerscope.report import ReportError, report

pytest.importorskip("plotly", reason="the report's charts need plotly: pip install 'layerscope[report]'")


def test_one_page_with_plotly_and_the_data_inlined(estimate_json: Path, simulate_json: Path, tmp_path: Path) -> None:
    out = tmp_path / "r.html"
    result = report([estimate_json, simulate_json], out, title="two <docs>")
    text = out.read_text(encoding="utf-8")
    assert result.bytes == len(text.encode("utf-8")) and result.out == str(out)
    assert [s.kind for s in result.sections] == ["estimate", "simulate"]
    # plotly.js once, inline; nothing fetched: no script, stylesheet or font from elsewhere.
    assert text.count("plotly.js v") == 1
    head, body = text.split("</head>")
    assert len(re.findall(r"<script\b", head)) == 1 and not re.search(r"<script[^>]+src=|<link\b|@import", head)
    assert not re.search(r"<script[^>]+src=|<link\b|@import|https?://", body)
    assert "<title>two &lt;docs&gt;</title>" in text
    for section in result.sections:
        for chart in section.charts:
            assert f'id="{chart.id}"' in text and chart.traces > 0 and chart.points > 0
    assert '"makespan"' in text  # the data is in the page


def test_the_same_inputs_make_the_same_bytes(estimate_json: Path, tmp_path: Path) -> None:
    report([estimate_json], tmp_path / "a.html")
    report([estimate_json], tmp_path / "b.html")
    assert (tmp_path / "a.html").read_bytes() == (tmp_path / "b.html").read_bytes()


def test_never_over_an_input(estimate_json: Path) -> None:
    before = estimate_json.read_bytes()
    with pytest.raises(OutputError, match="refusing to overwrite the input"):
        report([estimate_json], estimate_json)
    assert estimate_json.read_bytes() == before


def test_no_inputs(tmp_path: Path) -> None:
    with pytest.raises(ReportError, match="at least one"):
        report([], tmp_path / "r.html")
    assert not (tmp_path / "r.html").exists()
