"""Time GenZ (PyPI ``genz-llm``, module ``GenZ``) in its own process; print JSON.

Run by bench/bench_estimate_peers.py as ``bench/.peer-venv/bin/python genz_driver.py JOB.json``.
One "estimate" is one public call: ``decode_moddeling`` (TPOT) or ``prefill_moddeling`` (TTFT).
GenZ builds the model's layer table, writes it as CSV under /tmp/genz/data/ and reads it back on
every call; that I/O is part of what is timed, as it is part of what a user waits for.
"""

from __future__ import annotations

import warnings
from importlib.metadata import version
from typing import Any

from _driver_util import emit, load_job, median_s, time_sweep

warnings.filterwarnings("ignore")

from GenZ import decode_moddeling, prefill_moddeling  # noqa: E402
from GenZ.Models import get_configs  # noqa: E402
from Systems.system_configs import system_configs  # noqa: E402


def system(hw: dict[str, Any]) -> dict[str, Any]:
    # GenZ units: TFLOP/s, GB, GB/s. Memory_size is raised so that GenZ's capacity check
    # (which raises for Llama-3.1-70B in bf16 on one 80 GB GPU) does not stop the estimate;
    # it only feeds that check and offloading, not the timing.
    return {"Flops": hw["flops_per_s"] / 1e12, "Memory_BW": hw["bandwidth_bytes_per_s"] / 1e9,
            "Memory_size": 1e6, "ICN": 450, "real_values": True}


def count_ops(df: Any) -> tuple[int, int, dict[str, int]]:
    """Ops GenZ reports for one forward, with Repeat blocks expanded: (rows, non-empty rows, by name)."""
    rows = nonempty = 0
    by_name: dict[str, int] = {}
    mult = 1
    for _, r in df.iterrows():
        name = str(r["Layer Name"])
        if r["Op Type"] == "Repeat":
            mult = int(r["Dimension"])
            continue
        if r["Op Type"] == "EndRepeat":
            mult = 1
            continue
        rows += mult
        if float(r["Latency (msec)"]) > 0:
            nonempty += mult
            by_name[name] = by_name.get(name, 0) + mult
    return rows, nonempty, by_name


def main() -> None:
    job = load_job()
    sysd = system(job["hw"])
    repeat = int(job["repeat"])
    dec, pre = job["decode"], job["prefill"]
    out: dict[str, Any] = {"tool": "GenZ", "version": version("genz-llm"), "models": {}, "notes": []}
    preset = system_configs.get("H100_GPU", {})
    out["notes"].append(
        f"GenZ's own `H100_GPU` preset: {preset.get('Flops')} TFLOP/s, {preset.get('Memory_BW')} GB/s, "
        f"{preset.get('Memory_size')} GB; this run passes {sysd['Flops']:g} TFLOP/s and "
        f"{sysd['Memory_BW']:g} GB/s instead (efficiency 1, its default).")
    for m in job["models"]:
        name = m["genz"]
        cfg = get_configs(name)
        a = m["arch"]
        mine = {"hidden_size": cfg.hidden_size, "num_layers": cfg.num_decoder_layers,
                "num_attention_heads": cfg.num_attention_heads, "num_kv_heads": cfg.num_key_value_heads,
                "intermediate_size": cfg.intermediate_size, "vocab_size": cfg.vocab_size,
                "num_experts": cfg.num_experts if cfg.num_experts > 1 else None,
                "top_k": cfg.expert_top_k if cfg.num_experts > 1 else None}
        diff = {k: (v, a.get(k)) for k, v in mine.items() if a.get(k) != v}
        if diff:
            out["notes"].append(f"GenZ zoo config `{name}` differs from the HF config: {diff}")

        def run_decode(b: int = dec["batch"], ctx: int = dec["context"], name: str = name) -> Any:
            return decode_moddeling(model=name, batch_size=b, input_tokens=ctx, output_tokens=0, Bb=1,
                                    system_name=sysd, bits="bf16")

        def run_prefill(name: str = name) -> Any:
            return prefill_moddeling(model=name, batch_size=pre["batch"], input_tokens=pre["input"],
                                     system_name=sysd, bits="bf16")

        d, p = run_decode(), run_prefill()
        rows, nonempty, by_name = count_ops(d["model_df"])
        out["models"][m["key"]] = {
            "decode_s": median_s(run_decode, repeat),
            "prefill_s": median_s(run_prefill, repeat),
            "same_call": False,
            "tpot_s": float(d["Latency"]) / 1e3,  # GenZ reports ms
            "ttft_s": float(p["Latency"]) / 1e3,
            "ops": nonempty,
            "ops_detail": f"{rows} rows ({rows - nonempty} zero-time prefix-cache placeholders left out); "
                          + ", ".join(f"{k} {v}" for k, v in by_name.items()),
        }
    sw = next(m for m in job["models"] if m["key"] == job["sweep"]["model"])
    out["sweep"] = time_sweep(
        lambda b, n: decode_moddeling(model=sw["genz"], batch_size=b, input_tokens=n, output_tokens=0, Bb=1,
                                      system_name=sysd, bits="bf16"), job)
    emit(out)


if __name__ == "__main__":
    main()
