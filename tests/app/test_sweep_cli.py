"""``layerscope sweep`` through the entry point: the grid against ``cost.sweep``/``estimate``, the Pareto front,
its files, and bad input."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from layerscope.app.sweep import SweepRequest, pareto_mask, parse_ints, run_sweep
from layerscope.errors import WorkloadError


def test_pareto_front_by_hand() -> None:
    # (latency, throughput): (1, 10) and (2, 30) and (4, 40) are on the front; (3, 20) is beaten by (2, 30)
    assert pareto_mask([1, 2, 3, 4], [10, 30, 20, 40]) == [True, True, False, True]
    assert pareto_mask([1, 1], [5, 7]) == [False, True]  # same latency: only the larger throughput


def test_parse_ints() -> None:
    assert parse_ints("1..64", "--batch") == [1, 2, 4, 8, 16, 32, 64]
    assert parse_ints("3,5, 9", "--batch") == [3, 5, 9]
    for bad in ("0", "8..2", "a", ""):
        with pytest.raises(WorkloadError, match="--batch"):
            parse_ints(bad, "--batch")


def test_rows_equal_estimate_and_fronts_hold() -> None:
    from layerscope.cost.api import estimate
    from layerscope.hardware import load_hardware
    from layerscope.model import load_model_spec
    from layerscope.workload import Workload

    result = run_sweep(SweepRequest(models=["llama-3.2-1b"], hardware=["h100-sxm", "a100-sxm"], batches=[1, 8, 64],
                                    lengths=[512, 4096], dtypes=["bf16", "fp8"]))
    assert result.points == 1 * 2 * 3 * 2 * 2
    spec = load_model_spec("llama-3.2-1b")
    row = next(r for r in result.rows if r.hardware == "a100-sxm" and r.batch == 8 and r.length == 4096
               and r.dtype == "bf16")
    est = estimate(spec, load_hardware("a100-sxm"), Workload(phase="decode", batch=8, context=4096))
    assert row.time_s == pytest.approx(est.tpot_s, rel=1e-6)
    assert row.tokens_per_s == pytest.approx(8 / est.tpot_s, rel=1e-6)
    for dtype in ("bf16", "fp8"):
        pts = [r for r in result.rows if r.dtype == dtype and r.fits_in_memory]
        front = [r for r in pts if r.pareto]
        assert front
        for f in front:  # nothing dominates a front point
            assert not any(p.time_s < f.time_s and p.tokens_per_s > f.tokens_per_s for p in pts)
        for p in pts:  # every other point is dominated (or tied) by a front point
            if not p.pareto:
                assert any(f.time_s <= p.time_s and f.tokens_per_s >= p.tokens_per_s for f in front)


def test_cli_writes_its_table_json_and_plot(run_cli, tmp_path: Path) -> None:
    table, page = tmp_path / "s.csv", tmp_path / "s.html"
    res = run_cli("sweep", "--model", "llama-3.2-1b", "--hardware", "h100-sxm,h200", "--batch", "1..16",
                  "--length", "1024", "--phase", "prefill", "-o", str(table), "--html", str(page), "--json")
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["points"] == 2 * 5 and out["table"] == str(table) and out["html"] == str(page)
    rows = list(csv.DictReader(table.open()))
    assert len(rows) == 10 and {"model", "hardware", "batch", "time_s", "tokens_per_s", "pareto"} <= set(rows[0])
    # prefill: tokens per second are the prompts' tokens
    first = out["rows"][0]
    assert first["tokens_per_s"] == pytest.approx(first["batch"] * first["length"] / first["time_s"], rel=1e-9)
    text = page.read_text()
    assert text.count("Plotly.newPlot") == 2 and "Pareto front" in text and "<script src=" not in text
    human = run_cli("sweep", "--model", "llama-3.2-1b", "--hardware", "h100-sxm", "--batch", "1,4", "--top", "3")
    assert human.returncode == 0 and "on the Pareto front" in human.stdout and "TPOT (ms)" in human.stdout


@pytest.mark.parametrize(("args", "words"), [
    (["--batch", "0"], "--batch"),
    (["--length", "x"], "--length"),
    (["--dtypes", "fp9"], "fp9"),
    (["--phase", "both"], "phase"),
    (["--model", ""], "--model"),
    (["-o", "t.txt"], ".csv or .parquet"),
    (["--html", "p.png"], ".html"),
    (["-o", "missing/t.csv"], "does not exist"),
])
def test_bad_input_exits_2(run_cli, tmp_path: Path, args: list[str], words: str) -> None:
    res = run_cli("sweep", "--model", "llama-3.2-1b", "--hardware", "h100-sxm", "--batch", "1", *args, cwd=tmp_path)
    assert res.returncode == 2, (res.stdout, res.stderr)
    assert words in res.stderr and "Traceback" not in res.stderr
