"""The serving charts (``report/serving.py``) on real ``serving --json`` runs, with and without the trace and the
per-request table they name."""

from __future__ import annotations

import csv
import gzip
import json
import shutil
from pathlib import Path

import pytest

from layerscope.report import ReportError, load_document
from layerscope.report.serving import COUNTERS, charts

pytest.importorskip("plotly", reason="the report's charts need plotly: pip install 'layerscope[report]'")


def test_cdfs_are_every_requests_latency(serving_json: Path) -> None:
    doc = load_document(serving_json)
    section = charts(doc)
    assert [c.id for c in section.charts] == ["latency-cdfs", "serving-over-time"]
    assert section.notes == []
    ttft, tpot, e2e = section.charts[0].figure.data
    rows = list(csv.DictReader((serving_json.parent / "serving.csv").open()))
    assert len(rows) == 60
    assert list(ttft.x) == pytest.approx(sorted(float(r["ttft_s"]) * 1e3 for r in rows))
    assert list(e2e.x) == pytest.approx(sorted(float(r["e2el_s"]) * 1e3 for r in rows))
    for trace in (ttft, tpot, e2e):
        assert list(trace.y) == pytest.approx([(i + 1) / len(trace.x) for i in range(len(trace.x))])
        assert list(trace.x) == sorted(trace.x)
    # The CDF's p99 lies between the samples around it, as the metric's does.
    m = doc.data["metrics"]
    assert ttft.x[0] <= m["median_ttft_ms"] <= ttft.x[-1]
    assert ttft.x[58] <= m["p99_ttft_ms"] <= ttft.x[59] * (1 + 1e-9)


def test_counters_over_time_are_the_traces_steps(serving_json: Path) -> None:
    doc = load_document(serving_json)
    figure = charts(doc).charts[1].figure
    events = json.loads(gzip.decompress((serving_json.parent / "serving.json.gz").read_bytes()))["traceEvents"]
    steps = [e for e in events if e.get("ph") == "C" and e.get("name") == "engine"]
    assert len(figure.data) == len(COUNTERS)
    kv = next(trace for trace in figure.data if trace.name.startswith("KV blocks held"))
    assert len(kv.x) == len(steps)
    assert list(kv.y) == [e["args"]["kv blocks"] for e in sorted(steps, key=lambda e: e["ts"])]
    assert list(kv.x) == pytest.approx(sorted(e["ts"] * 1e-6 for e in steps), abs=1e-9)


def test_without_the_linked_files_the_percentiles_and_a_note(serving_bare_json: Path) -> None:
    doc = load_document(serving_bare_json)
    section = charts(doc)
    assert [c.id for c in section.charts] == ["latency-cdfs"]
    m = doc.data["metrics"]
    ttft = section.charts[0].figure.data[0]
    assert list(ttft.x) == [m["median_ttft_ms"], m["p90_ttft_ms"], m["p99_ttft_ms"]]
    assert list(ttft.y) == [0.5, 0.9, 0.99]
    assert any("serving --requests-out" in note for note in section.notes)
    assert any("serving --out" in note for note in section.notes)


def test_linked_files_are_found_beside_a_moved_document(serving_json: Path, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("serving.json", "serving.json.gz", "serving.csv"):
        shutil.copy(serving_json.parent / name, tmp_path / name)
    monkeypatch.chdir(tmp_path.parent)
    section = charts(load_document(tmp_path / "serving.json"))
    assert len(section.charts) == 2 and section.notes == []


def test_a_missing_table_is_a_note_and_a_broken_one_an_error(serving_json: Path, tmp_path: Path) -> None:
    shutil.copy(serving_json, tmp_path / "serving.json")
    section = charts(load_document(tmp_path / "serving.json"))
    assert any("'serving.csv' was not found" in note for note in section.notes)
    (tmp_path / "serving.csv").write_text("id,replica\n0,0\n")
    with pytest.raises(ReportError, match="has no column 'ttft_s'"):
        charts(load_document(tmp_path / "serving.json"))
