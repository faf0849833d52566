"""``layerscope estimate --json`` explains each number, and ``--explain`` shows it, through the installed entry
point."""

from __future__ import annotations

import json


def test_json_carries_each_ops_efficiencies_figures_and_the_parameter_counts(run_cli):
    out = run_cli("estimate", "--model", "qwen3-30b-a3b", "--hardware", "h100-sxm", "--phase", "generate",
                  "--prompt-len", "64", "--decode-steps", "3", "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    params = doc["parameters"]
    assert params["total"] > 30e9 and 3e9 < params["active"] < 4e9  # Qwen3-30B-A3B: 30.5B total, 3.3B active
    figures = doc["figures"]
    assert all(set(f) == {"value", "source", "row_ids", "term", "cited"} for f in figures.values())
    gemm = next(op for op in doc["ops"] if op["name"] == "layers.0.self_attn.q_proj" and op["phase"] == "prefill")
    assert 0 < gemm["compute_efficiency"] <= 1 and 0 < gemm["memory_efficiency"] <= 1
    assert gemm["overhead_s"] > 0 and gemm["launches"] == 1 and gemm["overhead_host_s"] == 0
    assert "efficiency.matmul_per_dtype.bf16" in gemm["figures"] and all(k in figures for k in gemm["figures"])
    assert figures["efficiency.matmul_per_dtype.bf16"]["row_ids"][0].startswith("G")
    decode = next(op for op in doc["ops"] if op["name"] == "layers.0.self_attn.q_proj" and op["phase"] == "decode")
    assert decode["overhead_s"] == 3 * gemm["overhead_s"]  # one launch per decode step
    kv = next(op for op in doc["ops"] if op["kind"] == "kv_write")
    assert kv["compute_efficiency"] is None  # no FLOPs


def test_explain_adds_the_columns_and_the_figures(run_cli):
    out = run_cli("estimate", "--model", "llama-3.2-1b", "--hardware", "h200", "--explain", "--top", "3",
                  env={"COLUMNS": "240"})
    assert out.returncode == 0, out.stderr
    assert "compute eff" in out.stdout and "memory eff" in out.stdout and "spec figures" in out.stdout
    assert "efficiency.memory" in out.stdout and "MX-" in out.stdout
    assert "parameters (total / active)" in out.stdout


def test_a_bad_option_exits_2(run_cli):
    out = run_cli("estimate", "--explain", "--top", "0")
    assert out.returncode == 2 and "Traceback" not in out.stderr
    out = run_cli("estimate", "--explian")
    assert out.returncode == 2 and "Traceback" not in out.stderr
