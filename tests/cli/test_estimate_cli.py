from __future__ import annotations

import csv
import json

import pytest


def test_estimate_json_contract(run_cli):
    out = run_cli("estimate", "--model", "llama-3.2-1b", "--hardware", "h100-sxm", "--phase", "generate",
                  "--prompt-len", "128", "--decode-steps", "7", "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["ttft_s"] > 0 and doc["tpot_s"] > 0 and doc["fits_in_memory"] is True
    q = next(op for op in doc["ops"] if op["name"] == "layers.0.self_attn.q_proj" and op["phase"] == "decode")
    assert q["definition"] == "gemm_n2048_k2048" and q["matrix_class"] == "Va_Mw"
    # Summed over the 7 decode steps: 7 x 2*2048*2048 FLOPs.
    assert q["flops"] == 7 * 2 * 2048 * 2048


def test_estimate_table_and_csv(run_cli, tmp_path):
    path = tmp_path / "ops.csv"
    out = run_cli("estimate", "--model", "qwen3-0.6b", "--hardware", "a100-sxm", "--phase", "prefill",
                  "--prompt-len", "256", "--csv", str(path), "--top", "5")
    assert out.returncode == 0, out.stderr
    assert "TTFT" in out.stdout and "by matrix class" in out.stdout
    rows = list(csv.DictReader(path.open()))
    assert rows[0]["name"] == "embed_tokens" and len(rows) > 28 * 10


def test_estimate_on_a_spreadsheet_device(run_cli):
    out = run_cli("estimate", "--model", "llama-3.2-1b", "--hardware", "nvl-ax", "--layer", "0",
                  "--cost-model", "tiling", "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["scope"] == "layer 0"
    assert doc["energy"] is None and all(op["energy_j"] is None for op in doc["ops"])  # no energy figures


def test_estimate_energy_json_and_table(run_cli):
    args = ("estimate", "--model", "llama-3.2-1b", "--hardware", "h100-sxm", "--phase", "decode", "--batch", "8")
    doc = json.loads(run_cli(*args, "--json").stdout)
    energy = doc["energy"]
    assert energy["board_power_limit_w"] == 700.0 and energy["devices"] == 1
    assert energy["phases"]["decode"]["energy_j"] == pytest.approx(sum(op["energy_j"] for op in doc["ops"]))
    assert energy["j_per_output_token"] == pytest.approx(energy["energy_j"] / 8)
    table = run_cli(*args).stdout
    assert "energy per output token" in table and "decode: power avg / peak per GPU" in table


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("--model", "no-such-model"), "no-such-model"),
        (("--hardware", "h900"), "h900"),
        (("--phase", "train"), "phase"),
        (("--batch", "0"), "batch"),
        (("--cost-model", "magic"), "magic"),
        (("--weight-dtype", "fp7"), "weight_dtype"),
        (("--layer", "99"), "layer"),
    ],
)
def test_bad_input_exits_2_with_a_message(run_cli, args, needle):
    out = run_cli("estimate", *args)
    assert out.returncode == 2
    assert needle in out.stderr and "Traceback" not in out.stderr


def test_catalog_listings(run_cli):
    models = json.loads(run_cli("models", "--json").stdout)
    assert len(models) == 31 and any(m["alias"] == "llama-3.1-8b" for m in models)
    hw = json.loads(run_cli("hardware", "--json").stdout)
    names = {h["name"].lower() for h in hw}
    assert {"h100-sxm", "a100-sxm", "mi300x", "nvl-ax", "jgs"} <= names
