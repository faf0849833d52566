"""``layerscope analyze DIR`` / ``query DIR`` on a directory of per-rank traces, through the real entry point
(layerscope/cli/analyze.py, layerscope/app/ranks.py)."""

from __future__ import annotations

import csv
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from layerscope.cli.app import app

RANKS = Path(__file__).resolve().parents[1] / "data" / "traces" / "ranks"


@pytest.fixture(autouse=True)
def _cache(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    # one cache for the module: the traces are parsed once, the runs after read the Parquet
    monkeypatch.setenv("LAYERSCOPE_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "ranks-cli-cache"))


def test_analyze_dir_json(run_cli: Callable[..., Any]) -> None:
    out = run_cli("analyze", str(RANKS), "--json")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert [r["rank"] for r in result["ranks"]] == [0, 1, 2] and result["stragglers"] == [2]
    # HTA 0.5.0's idle and compute time of rank 0 (tests/analysis/test_ranks.py HTA_RANKS), µs
    assert round(result["ranks"][0]["idle_ms"] * 1e3) == 321378
    assert round(result["ranks"][0]["compute_ms"] * 1e3) == 106252


def test_analyze_dir_table_and_csv(tmp_path: Path) -> None:
    """The table and the CSV (in process: the entry point's own paths are the tests above)."""
    table = CliRunner().invoke(app, ["analyze", str(RANKS), "--straggler-pct", "30", "--csv", str(tmp_path / "csv")],
                               env={"COLUMNS": "300"})
    assert table.exit_code == 0 and "rank_breakdown (3 of 3 ranks)" in table.stdout
    assert "stragglers (GPU work > median 106.900 ms + 30%): none" in table.stdout
    with open(tmp_path / "csv" / "rank_breakdown.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert [r["rank"] for r in rows] == ["0", "1", "2"] and rows[2]["straggler"] == "false"


def test_query_dir_has_rank(run_cli: Callable[..., Any]) -> None:
    sql = ("SELECT s.rank, COUNT(*) AS kernels, ANY_VALUE(b.straggler) AS straggler FROM slice s "
           "JOIN rank_breakdown b USING (rank) WHERE s.category = 'kernel' GROUP BY s.rank ORDER BY s.rank")
    out = run_cli("query", str(RANKS), sql, "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == [{"rank": 0, "kernels": 1154, "straggler": False},
                                      {"rank": 1, "kernels": 1154, "straggler": False},
                                      {"rank": 2, "kernels": 1154, "straggler": True}]


def test_dir_errors_exit_2(run_cli: Callable[..., Any], tmp_path: Path) -> None:
    """One line on stderr naming the problem, exit 2 (an empty directory, unreadable files, bad options: the same
    typed errors, tests/analysis/test_ranks.py)."""
    dup = tmp_path / "dup"
    dup.mkdir()
    shutil.copy(RANKS / "rank0.json.gz", dup / "a.json.gz")
    shutil.copy(RANKS / "rank0.json.gz", dup / "b.json.gz")
    out = run_cli("analyze", str(dup), "--json")
    assert out.returncode == 2 and "duplicate rank 0" in out.stderr and out.stdout == ""
    assert len(out.stderr.strip().splitlines()) == 1 and "Traceback" not in out.stderr
