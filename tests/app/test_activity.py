"""The per-op activity export (``app.activity``, ``estimate --activity``): hand-computed rows of Llama-3.2-1B at
tp 2, the energy column equal to ``estimate``'s, and the CLI's formats and refusals through the real entry point."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import pytest

from layerscope.app.activity import activity_columns, write_activity
from layerscope.app.estimate import EstimateRequest, estimate_raw, result_of
from layerscope.app.requests import ParallelPlan, WorkloadRequest
from layerscope.units import DType

PJ = 1e-12


@pytest.fixture(scope="module")
def tp2() -> Any:
    """Llama-3.2-1B layer 0, one decode step at context 1024, batch 1, tp 2, on the h100-sxm preset."""
    return estimate_raw(EstimateRequest(model="llama-3.2-1b", hardware="h100-sxm", layer=0,
                                        workload=WorkloadRequest(phase="decode", context=1024),
                                        parallel=ParallelPlan(tensor_parallel=2)))


def test_q_proj_and_all_reduce_by_hand(tp2: Any) -> None:
    cols = activity_columns(tp2)
    assert list(cols)[:4] == ["name", "phase", "kind", "layer"]
    assert [k for k in cols if k.startswith("bytes_")] == ["bytes_smem", "bytes_l2", "bytes_hbm"]
    row = {k: v[cols["name"].index("layers.0.self_attn.q_proj")] for k, v in cols.items()}
    # q_proj on one of 2 ranks: x[1, 2048] @ W[1024, 2048]ᵀ: 2048·1024 MACs; W 2048·1024·2 B + x 2048·2 + q 1024·2
    assert row["macs_bf16"] == 2048 * 1024 and row["vector_flops"] == 0
    assert row["bytes_smem"] == row["bytes_hbm"] == row["bytes_l2"] == 2048 * 1024 * 2 + 2048 * 2 + 1024 * 2
    assert row["interconnect_bytes"] == row["network_bytes"] == 0
    # 0.7297 pJ/FLOP bf16 (PX-08 fit), 31.2 + 5 + 0.5 pJ/B, 69 W idle for its time (not power-limited)
    hw = tp2.hardware_spec.energy
    assert (hw.matrix_pj_per_flop[DType.BF16], hw.idle_power_w) == (0.7297, 69.0)
    assert row["power_limited_time_s"] == row["time_s"]
    assert row["energy_j"] == pytest.approx(2 * 2048 * 1024 * 0.7297 * PJ + row["bytes_hbm"] * 36.7 * PJ
                                            + 69.0 * row["time_s"])
    # the attention output's all-reduce: a 2048·2 B message over 2 GPUs puts 2·(2−1)/2 of it on NVLink
    ar = {k: v[cols["name"].index("layers.0.self_attn.o_proj.all_reduce")] for k, v in cols.items()}
    assert ar["kind"] == "communication" and ar["interconnect_bytes"] == 4096 and ar["network_bytes"] == 0


def test_level_names_follow_the_spec() -> None:
    from layerscope.app.activity import level_names
    from layerscope.hardware import load_hardware

    assert level_names(load_hardware("h100-sxm")) == ("smem", "l2", "hbm")
    assert level_names(load_hardware("mi300x")) == ("l2", "infinity_cache", "hbm")
    assert level_names(load_hardware("l40s")) == ("sram", "l2", "gddr6")  # two levels: the first is the LLC


def test_rows_are_the_estimates(tp2: Any) -> None:
    cols = activity_columns(tp2)
    result = result_of(tp2)
    assert cols["name"] == [op.name for op in result.ops]
    assert cols["energy_j"] == pytest.approx([op.energy_j for op in result.ops])
    assert cols["time_s"] == pytest.approx([op.time_s for op in result.ops])
    # FLOPs: 2 × MACs on the matrix units + the vector units'
    flops = [2 * m + v for m, v in zip(cols["macs_bf16"], cols["vector_flops"], strict=True)]
    assert flops == pytest.approx([op.flops for op in result.ops])


def test_without_energy_figures_the_energy_columns_are_empty(tp2: Any, tmp_path: Path) -> None:
    bare = tp2.hardware_spec.model_copy(update={"energy": None})
    est = estimate_raw(EstimateRequest(model="llama-3.2-1b", hardware=bare, layer=0,
                                       workload=WorkloadRequest(phase="decode", context=1024)))
    path = write_activity(est, tmp_path / "a.csv")
    rows = list(csv.DictReader(path.open()))
    assert rows and all(r["energy_j"] == "" and r["power_limited_time_s"] == "" for r in rows)
    assert all(float(r["time_s"]) > 0 for r in rows)


def test_cli_writes_csv_and_parquet(run_cli: Any, tmp_path: Path) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    out_csv, out_pq = tmp_path / "act.csv", tmp_path / "act.parquet"
    for out in (out_csv, out_pq):
        done = run_cli("estimate", "--model", "llama-3.2-1b", "--phase", "generate", "--prompt-len", "64",
                       "--decode-steps", "3", "--activity", str(out), "--json")
        assert done.returncode == 0, done.stderr
    rows = list(csv.DictReader(out_csv.open()))
    table = pq.read_table(out_pq)
    assert table.num_rows == len(rows) and table.column_names == list(rows[0])
    assert {r["phase"] for r in rows} == {"prefill", "decode"}
    assert sum(float(r["energy_j"]) for r in rows) == pytest.approx(sum(table.column("energy_j").to_pylist()))


def test_cli_refuses_an_unknown_format_and_a_missing_pyarrow(run_cli: Any, tmp_path: Path) -> None:
    done = run_cli("estimate", "--activity", str(tmp_path / "act.txt"))
    assert done.returncode == 2 and "unknown format" in done.stderr and ".parquet" in done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "act.txt").exists()
    # pyarrow shadowed by a package that fails to import
    shadow = tmp_path / "shadow" / "pyarrow"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('pyarrow hidden by the test')\n")
    env = {"PYTHONPATH": str(shadow.parent)}
    done = run_cli("estimate", "--activity", str(tmp_path / "act.parquet"), env=env)
    assert done.returncode == 2 and "pyarrow" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "act.parquet").exists()


def test_cli_never_writes_over_its_hardware_file(run_cli: Any, tmp_path: Path) -> None:
    """As ``--csv`` and the trace outputs: an --activity path that is the hardware sheet read is refused, the
    sheet untouched."""
    from layerscope.hardware import load_hardware
    from layerscope.hardware.loaders import write_hardware_sheet

    sheet = tmp_path / "gpus.csv"
    write_hardware_sheet([load_hardware("h100-sxm")], sheet)
    before = sheet.read_bytes()
    done = run_cli("estimate", "--hardware", str(sheet), "--device", "h100-sxm", "--activity", str(sheet))
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert sheet.read_bytes() == before
