"""``layerscope calibrate --from-table``: a GPU preset fitted on a kernel table, through the real entry point."""

from __future__ import annotations

import json
from pathlib import Path

from layerscope.hardware import load_hardware
from layerscope.hardware.kernel_table import default_table_path

HEADER = ("| id | source | hardware | model | precision | framework | batch | input_len | output_len | parallelism | "
          "metric | value | notes |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")


def _table(tmp_path: Path, *rows: str) -> Path:
    path = tmp_path / "kernels.md"
    path.write_text("# my measurements\n\n" + HEADER + "".join(r + "\n" for r in rows))
    return path


GEMM = "| Q-{i:02d} | S1 mine | H100 SXM | GEMM M={m}, N=K=8192 | bf16 | torch | – | – | – | 1 GPU | TFLOPS | {v} | E |"


def test_bundled_table_fits_h200_and_the_spec_works_with_estimate(run_cli, tmp_path: Path) -> None:
    out = tmp_path / "h200.yaml"
    proc = run_cli("calibrate", "--from-table", str(default_table_path()), "--hardware", "h200", "--out", str(out),
                   "--json")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["hardware"] == "h200" and result["rows_read"] > 150
    assert {g["dtype"] for g in result["gemm"]} == {"bf16", "fp8"}
    attention = result["attention"]
    assert {(c["dtype"], c["causal"]) for c in attention["prefill"]} == {(d, c) for d in ("bf16", "fp8")
                                                                           for c in (True, False)}
    assert "K-08" in next(c for c in attention["prefill"] if c["causal"] and c["dtype"] == "bf16")["rows"]
    assert "h100-sxm's fit" in attention["prefill_from"] and "AX-12" in attention["decode_rows"]
    spec = load_hardware(out)
    assert spec.efficiency.attention_decode_memory == attention["decode_memory"]
    assert spec.efficiency.memory == result["memory_efficiency"]
    assert "gpu-kernels.md rows MX-14" in spec.efficiency.memory_source
    assert spec.engines.peak_flops_per_s == load_hardware("h200").engines.peak_flops_per_s  # datasheet kept
    assert spec == load_hardware("h200")  # the bundled table fits the shipped preset back, from its base file
    est = run_cli("estimate", "-H", str(out), "--phase", "decode", "--json")
    assert est.returncode == 0, est.stderr
    assert json.loads(est.stdout)["hardware"] == spec.name


def test_own_table_rows_are_fitted_and_a_bad_row_is_named_with_exit_2(run_cli, tmp_path: Path) -> None:
    good = _table(tmp_path, *(GEMM.format(i=i, m=m, v=v) for i, (m, v) in
                              enumerate(((1, 2.6), (64, 160.0), (1024, 700.0), (4096, 760.0), (8192, 780.0)))))
    out = tmp_path / "h100.yaml"
    proc = run_cli("calibrate", "--from-table", str(good), "--hardware", "h100-sxm", "--out", str(out), "--json")
    assert proc.returncode == 0, proc.stderr
    (bf16,) = (g for g in json.loads(proc.stdout)["gemm"] if g["dtype"] == "bf16")
    assert bf16["rows"] == ["Q-00", "Q-01", "Q-02", "Q-03", "Q-04"] and bf16["rms_log_error"] < 0.1

    broken = _table(tmp_path, GEMM.format(i=1, m=64, v=160.0), "| Q-02 | S1 | H100 SXM | GEMM M=8, N=K=8192 | bf16 |")
    bad_out = tmp_path / "bad.yaml"
    proc = run_cli("calibrate", "--from-table", str(broken), "--hardware", "h100-sxm", "--out", str(bad_out))
    assert proc.returncode == 2 and "Q-02" in proc.stderr and ":6:" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and not bad_out.exists()

    numberless = _table(tmp_path, GEMM.format(i=1, m=64, v="abc"))
    proc = run_cli("calibrate", "--from-table", str(numberless), "--hardware", "h100-sxm", "--out", str(bad_out))
    assert proc.returncode == 2 and "Q-01" in proc.stderr and "'abc' has no number" in proc.stderr, proc.stderr
    assert not bad_out.exists()

    unitless = _table(tmp_path, GEMM.format(i=1, m=64, v=160.0).replace("TFLOPS", "furlongs"))
    proc = run_cli("calibrate", "--from-table", str(unitless), "--hardware", "h100-sxm", "--out", str(bad_out))
    assert proc.returncode == 2 and "Q-01" in proc.stderr and "unit" in proc.stderr, proc.stderr


def test_a_row_faster_than_the_datasheet_is_refused_by_name(run_cli, tmp_path: Path) -> None:
    table = _table(tmp_path, GEMM.format(i=1, m=8192, v=1500.0), GEMM.format(i=2, m=4096, v=700.0))
    out = tmp_path / "h100.yaml"
    proc = run_cli("calibrate", "--from-table", str(table), "--hardware", "h100-sxm", "--out", str(out))
    assert proc.returncode == 2 and "Q-01 (1500 TFLOPS > the 989 TFLOPS peak)" in proc.stderr, proc.stderr
    assert not out.exists()


def test_usage_errors_exit_2_and_keep_what_was_there(run_cli, tmp_path: Path) -> None:
    existing = tmp_path / "h200.yaml"
    existing.write_text("keep me")
    table = str(default_table_path())
    for args, message in (
        (("--from-table", table, "--out", str(existing), "--force"), "--hardware"),
        (("--hardware", "h200", "--out", str(existing), "--force"), "--from-table"),
        (("--from-table", table, "--hardware", "h200", "--out", str(existing)), "exists; pass --force"),
        (("--from-table", table, "--hardware", "h200", "--out", str(existing), "--quick", "--force"), "measuring"),
        (("--from-table", table, "--hardware", "nope-9000", "--out", str(existing), "--force"), "nope-9000"),
        (("--from-table", str(tmp_path / "missing.md"), "--hardware", "h200", "--out", str(existing), "--force"),
         "missing.md"),
    ):
        proc = run_cli("calibrate", *args)
        assert proc.returncode == 2, (args, proc.stderr)
        assert message in proc.stderr, (args, proc.stderr)
        assert "Traceback" not in proc.stderr
    assert existing.read_text() == "keep me"
