"""``layerscope query`` / ``analyze`` / ``compare`` as a user runs them (layerscope/cli/analyze.py)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parents[1] / "data" / "traces"
SAMPLED = str(DATA / "gpu-sampled-rank0.json.gz")


@pytest.fixture(autouse=True)
def _cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("LAYERSCOPE_CACHE_DIR", str(tmp_path / "cache"))


def test_query_formats(run_cli: Callable[..., object], tmp_path: Path) -> None:
    sql = "SELECT category, COUNT(*) AS n FROM slice WHERE category = 'kernel' GROUP BY category"
    out = run_cli("query", SAMPLED, sql, "--format", "json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == [{"category": "kernel", "n": 1154}]  # perfetto-oracle
    csv = run_cli("query", SAMPLED, sql, "--format", "csv")
    assert csv.stdout.splitlines() == ['"category","n"', '"kernel",1154']
    q = tmp_path / "q.sql"
    q.write_text("SELECT COUNT(*) AS slices FROM slices")
    table = run_cli("query", SAMPLED, "--file", str(q), "--no-cache")
    assert table.returncode == 0 and "4811" in table.stdout


def test_query_errors_exit_2(run_cli: Callable[..., object], tmp_path: Path) -> None:
    bad = run_cli("query", SAMPLED, "SELECT * FROM nope")
    assert bad.returncode == 2 and "query failed" in bad.stderr and "Traceback" not in bad.stderr
    missing = run_cli("query", str(tmp_path / "none.json"), "SELECT 1")
    assert missing.returncode == 2 and "does not exist" in missing.stderr
    junk = tmp_path / "junk.json"
    junk.write_text("not a trace")
    assert run_cli("query", str(junk), "SELECT 1").returncode == 2
    assert run_cli("query", SAMPLED, "SELECT 1", "--format", "xml").returncode == 2


def test_analyze_json_and_csv(run_cli: Callable[..., object], tmp_path: Path) -> None:
    out = run_cli("analyze", SAMPLED, "--json", "--csv", str(tmp_path / "csv"), "--threshold-ms", "500")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["summary"][0]["kernels"] == 1154
    assert {r["direction"]: r["count"] for r in doc["memory_ops"]} == {"DtoD": 8, "DtoH": 8, "HtoD": 24, "memset": 10}
    assert [e["name"] for e in doc["major_events"]] == ["PyTorch Profiler (0)", "ProfilerStep#551",
                                                         "ProfilerStep#552"]
    assert (tmp_path / "csv" / "category_time.csv").is_file()
    text = run_cli("analyze", SAMPLED, "--rows", "3")
    assert text.returncode == 0 and "memory_ops" in text.stdout


def test_compare_commands(run_cli: Callable[..., object], tmp_path: Path) -> None:
    a, b = str(DATA / "gpu-training-control.json.gz"), str(DATA / "gpu-training-test.json.gz")
    out = run_cli("compare", a, b, "--json")
    assert out.returncode == 0, out.stderr
    summary = {r["metric"]: r for r in json.loads(out.stdout)["summary"]}
    assert (summary["kernel_count"]["a"], summary["kernel_count"]["b"]) == (8568, 9852)
    sim = run_cli("compare", "--sim", SAMPLED, "--real", SAMPLED, "--iterations", "1", "--json")
    assert sim.returncode == 0, sim.stderr
    assert json.loads(sim.stdout)["summary"]["median_abs_error"] == 0.0
    assert run_cli("compare", a).returncode == 2
    assert run_cli("compare", a, "--sim", a).returncode == 2
