"""``app.analyze``: query, analyze and compare, one request in, one result model out; ``--json`` is its dump."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from layerscope.analysis.reports import REPORTS
from layerscope.app.analyze import (
    AnalyzeRequest,
    AnalyzeResult,
    CompareRequest,
    CompareResult,
    QueryRequest,
    QueryResult,
    SimRealResult,
    TraceComparisonResult,
    analyze,
    compare,
    json_cell,
    query,
    query_table,
)
from layerscope.app.requests import build_request
from layerscope.cli.app import app
from layerscope.cli.common import to_json_text
from layerscope.errors import AnalysisError

DATA = Path(__file__).resolve().parents[1] / "data"
CPU = DATA / "traces" / "cpu-only.json.gz"
TRITON = DATA / "traces" / "gpu-triton-example.json.gz"
GOLDEN = DATA / "golden" / "tiny_layer_trace.json"


@pytest.fixture(autouse=True)
def _cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAYERSCOPE_CACHE_DIR", str(tmp_path / "cache"))


def _cli(*args: str) -> Any:
    out = CliRunner().invoke(app, list(args))
    assert out.exit_code == 0, out.output
    return json.loads(out.stdout)


def test_query_rows_with_repeated_names_and_sql_types():
    sql = ("select 1 as a, 2 as a, date '2024-01-02' as d, interval 90 second as i, 1.25::decimal(5,2) as x, "
           "3::decimal(5,0) as y, '\\x01'::blob as b, 'nan'::double as n, [1, 2] as l")
    request = QueryRequest(trace=CPU, sql=sql, use_cache=False)
    result = query(request)
    assert list(result.root[0]) == ["a", "a_1", "d", "i", "x", "y", "b", "n", "l"]
    assert result.root[0]["x"] == 1.25 and result.root[0]["y"] == 3 and result.root[0]["n"] is None
    # the values print as print_json printed the raw rows before the verb existed
    raw = query_table(request).rename_columns(list(result.root[0])).to_pylist()
    assert json.loads(to_json_text(raw)) == json.loads(result.model_dump_json())
    assert QueryResult.model_validate_json(result.model_dump_json()) == result
    assert _cli("query", str(CPU), sql, "--json", "--no-cache") == json.loads(result.model_dump_json())


def test_json_cell_is_print_jsons_conversion():
    import datetime
    import decimal
    import uuid

    values = [datetime.datetime(2024, 1, 2, 3, 4, 5, 500000), datetime.time(1, 2), datetime.timedelta(seconds=1.5),
              decimal.Decimal("2.50"), decimal.Decimal("7"), decimal.Decimal("NaN"), uuid.UUID(int=5), b"\xff\x01",
              float("inf"), {"k": [float("nan"), (1, 2)]}, frozenset({3})]
    assert [json.loads(json.dumps(json_cell(v))) for v in values] == [json.loads(to_json_text(v)) for v in values]


def test_analyze_reports_every_registered_report():
    result = analyze(AnalyzeRequest(trace=TRITON, use_cache=False))
    assert list(AnalyzeResult.model_fields) == list(REPORTS)
    assert result.summary[0]["kernels"] > 0 and result.kernel_decode
    assert AnalyzeResult.model_validate_json(result.model_dump_json()) == result
    assert _cli("analyze", str(TRITON), "--json", "--no-cache") == json.loads(result.model_dump_json())


def test_analyze_writes_the_csvs(tmp_path: Path):
    analyze(AnalyzeRequest(trace=CPU, csv_dir=tmp_path / "csv", use_cache=False))
    assert sorted(p.stem for p in (tmp_path / "csv").iterdir()) == sorted(REPORTS)


def test_compare_two_traces():
    result = compare(CompareRequest(a=CPU, b=TRITON, use_cache=False))
    assert isinstance(result.root, TraceComparisonResult)
    summary = {r.metric: r for r in result.root.summary}
    assert summary["kernel_count"].a == 0 and summary["kernel_count"].b > 0
    assert summary["kernel_count"].delta_pct is None  # A has none: no percentage
    assert CompareResult.model_validate_json(result.model_dump_json()) == result
    assert _cli("compare", str(CPU), str(TRITON), "--json", "--no-cache") == json.loads(result.model_dump_json())


def _write(path: Path, events: list[dict[str, Any]]) -> Path:
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def test_compare_simulated_with_measured_by_name(tmp_path: Path):
    sim = _write(tmp_path / "sim.json", [
        {"ph": "X", "cat": "gemm", "name": name, "pid": 1, "tid": 1, "ts": 100 * i, "dur": 50}
        for i, name in enumerate(("layers.0.mlp.up_proj", "layers.0.mlp.down_proj", "lm_head"))])
    real = _write(tmp_path / "real.json", [
        {"ph": "X", "cat": "user_annotation", "name": f"model.{name}", "pid": 1, "tid": 1, "ts": 100 * i, "dur": dur}
        for i, (name, dur) in enumerate((("layers.0.mlp.up_proj", 40), ("layers.0.mlp.down_proj", 100)))])
    result = compare(CompareRequest(sim=sim, real=real, use_cache=False))
    assert isinstance(result.root, SimRealResult)
    assert result.root.summary.join == "names" and result.root.summary.ops_joined == 2
    assert {op.op: op.error for op in result.root.ops} == pytest.approx({"layers.0.mlp.up_proj": 0.25,
                                                                           "layers.0.mlp.down_proj": -0.5})
    assert result.root.only_sim == ["lm_head"]
    assert CompareResult.model_validate_json(result.model_dump_json()) == result
    cli = _cli("compare", "--sim", str(sim), "--real", str(real), "--json", "--no-cache")
    assert cli == json.loads(result.model_dump_json())


def test_bad_request_fields_are_named(tmp_path: Path):
    with pytest.raises(AnalysisError, match="sql"):
        build_request(QueryRequest, AnalysisError, trace=CPU, sql=None)
    with pytest.raises(AnalysisError, match="threshold_ms"):
        build_request(AnalyzeRequest, AnalysisError, trace=CPU, threshold_ms="long")
    with pytest.raises(AnalysisError, match="--threshold-ms"):
        analyze(AnalyzeRequest(trace=CPU, threshold_ms=-1))
    with pytest.raises(AnalysisError, match="iterations"):
        build_request(CompareRequest, AnalysisError, sim=GOLDEN, real=CPU, iterations="all")
    with pytest.raises(AnalysisError, match="both --sim and --real"):
        compare(CompareRequest(a=CPU, sim=GOLDEN))
    with pytest.raises(AnalysisError, match="two traces"):
        compare(CompareRequest(a=CPU))
