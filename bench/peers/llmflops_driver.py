"""Time llm-flops (PyPI ``llm-flops``, module ``llmflops``) in its own process; print JSON.

Run by bench/bench_estimate_peers.py as ``bench/.peer-venv/bin/python llmflops_driver.py JOB.json``.
One "estimate" is one public call, ``llmflops.estimate(...)``, a closed-form whole-model roofline
that returns the prefill latency (TTFT) and the decode latency per token at a cache of
``sequence_length`` tokens (TPOT) together. The config is built from the HF config's numbers.
"""

from __future__ import annotations

from importlib.metadata import version
from typing import Any

import llmflops
from _driver_util import emit, load_job, median_s, time_sweep


def model_config(a: dict[str, Any]) -> llmflops.ModelConfig:
    return llmflops.ModelConfig(
        name=a["name"], hidden_size=a["hidden_size"], num_layers=a["num_layers"],
        num_attention_heads=a["num_attention_heads"], vocab_size=a["vocab_size"],
        intermediate_size=a["intermediate_size"], num_key_value_heads=a["num_kv_heads"], head_dim=a["head_dim"],
        max_position_embeddings=a["max_position_embeddings"], num_experts=a["num_experts"],
        num_experts_per_tok=a["top_k"] or 2, tie_word_embeddings=a["tie_word_embeddings"],
        model_type=a["model_type"],
    )


def main() -> None:
    job = load_job()
    repeat = int(job["repeat"])
    dec, pre = job["decode"], job["prefill"]
    hw = job["hw"]
    gpu = llmflops.get_gpu("H100-SXM")
    out: dict[str, Any] = {"tool": "llm-flops", "version": version("llm-flops"), "models": {}, "notes": []}
    same = (abs(gpu.peak_flops("bf16") - hw["flops_per_s"]) < 1e9
            and abs(gpu.memory_bandwidth_bytes() - hw["bandwidth_bytes_per_s"]) < 1e9)
    out["notes"].append(
        f"llm-flops's own `H100-SXM` preset: {gpu.peak_flops('bf16') / 1e12:g} TFLOP/s bf16, "
        f"{gpu.memory_bandwidth_bytes() / 1e9:g} GB/s, {gpu.memory_gb} GB "
        f"({'same numbers, used as is' if same else 'DIFFERENT from the datasheet numbers used elsewhere'}); "
        "its default efficiencies are 0.5 (compute) and 0.8 (memory).")
    if dec["context"] != pre["input"] or dec["batch"] != pre["batch"]:
        raise SystemExit("llm-flops computes prefill and decode in one call: decode context must equal prefill length")
    for m in job["models"]:
        cfg = model_config(m["arch"])

        def run(b: int = dec["batch"], n: int = dec["context"], cfg: Any = cfg) -> Any:
            return llmflops.estimate(cfg, batch_size=b, sequence_length=n, precision="bf16", gpu=gpu,
                                     include_backward=False, causal=True, num_generated_tokens=1,
                                     allow_hf_fetch=False)

        r = run()
        lat = r["details"]["performance"]
        out["models"][m["key"]] = {
            "decode_s": median_s(run, repeat),
            "prefill_s": None,
            "same_call": True,
            "tpot_s": float(lat["decode_latency_per_token_s"]),
            "ttft_s": float(lat["prefill_latency_s"]),
            "ops": 0,
            "ops_detail": "closed form over the whole model (2 x active params + attention FLOPs; weights + KV bytes)",
        }
    sw = next(m for m in job["models"] if m["key"] == job["sweep"]["model"])
    cfg = model_config(sw["arch"])
    out["sweep"] = time_sweep(
        lambda b, n: llmflops.estimate(cfg, batch_size=b, sequence_length=n, precision="bf16", gpu=gpu,
                                       include_backward=False, causal=True, num_generated_tokens=1,
                                       allow_hf_fetch=False), job)
    emit(out)


if __name__ == "__main__":
    main()
