"""Time llm-analysis (PyPI ``llm-analysis``) in its own process; print JSON.

Run by bench/bench_estimate_peers.py as ``bench/.peer-venv/bin/python llm_analysis_driver.py JOB.json``.
One "estimate" is one public call, ``LLMAnalysis.inference(...)``, which always computes the
prefill and one decode step together: its ``prefill_latency`` is the TTFT and its
``decode_latency`` the TPOT at a KV cache of ``seq_len + num_tokens_to_generate`` tokens. The
model config is built here from the HF config's numbers (no hub lookup).
"""

from __future__ import annotations

import logging
from importlib.metadata import version
from typing import Any

from _driver_util import emit, load_job, median_s, time_sweep
from llm_analysis.analysis import LLMAnalysis
from llm_analysis.config import (
    DtypeConfig,
    GPUConfig,
    ModelConfig,
    ParallelismConfig,
    get_gpu_config_by_name,
)

# llm-analysis logs its whole summary at INFO on every call; keep the terminal quiet (its
# f-strings are still built, which is part of its cost).
logging.getLogger().setLevel(logging.ERROR)
for _name in list(logging.root.manager.loggerDict):
    logging.getLogger(_name).setLevel(logging.ERROR)


def model_config(a: dict[str, Any]) -> ModelConfig:
    return ModelConfig(
        name=a["name"], num_layers=a["num_layers"], n_head=a["num_attention_heads"], hidden_dim=a["hidden_size"],
        vocab_size=a["vocab_size"], max_seq_len=a["max_position_embeddings"], num_key_value_heads=a["num_kv_heads"],
        # expansion_ratio given explicitly: llm-analysis asserts ffn % hidden == 0 otherwise (14336/4096 = 3.5).
        ffn_embed_dim=a["intermediate_size"], expansion_ratio=a["intermediate_size"] / a["hidden_size"],
        model_type=a["model_type"], moe_num_experts=a["num_experts"] or 1, moe_top_k=a["top_k"] or 1,
    )


def gpu_config(hw: dict[str, Any]) -> GPUConfig:
    # Capacity raised: llm-analysis asserts weights + KV + activations fit, and Llama-3.1-70B in
    # bf16 (141 GB) does not fit one 80 GB GPU; the capacity does not enter the latency.
    return GPUConfig(name="h100-sxm-bench", mem_per_GPU_in_GB=1e6,
                     hbm_bandwidth_in_GB_per_sec=hw["bandwidth_bytes_per_s"] / 1e9,
                     intra_node_bandwidth_in_GB_per_sec=450, intra_node_min_message_latency=8e-06,
                     peak_fp16_TFLOPS=hw["flops_per_s"] / 1e12)


def main() -> None:
    job = load_job()
    repeat = int(job["repeat"])
    dec, pre = job["decode"], job["prefill"]
    gpu = gpu_config(job["hw"])
    out: dict[str, Any] = {"tool": "llm-analysis", "version": version("llm-analysis"), "models": {}, "notes": []}
    try:
        p = get_gpu_config_by_name("h100-sxm-80gb")
        out["notes"].append(
            f"llm-analysis's own `h100-sxm-80gb` preset: {p.peak_fp16_TFLOPS} TFLOP/s, "
            f"{p.hbm_bandwidth_in_GB_per_sec} GB/s, {p.mem_per_GPU_in_GB} GB (same numbers; efficiencies 1 by default)."
        )
    except Exception as exc:  # pragma: no cover - informational only
        out["notes"].append(f"llm-analysis preset lookup failed: {exc}")
    if dec["context"] != pre["input"] or dec["batch"] != pre["batch"]:
        raise SystemExit("llm-analysis computes prefill and decode in one call: "
                         "decode context must equal prefill length")
    for m in job["models"]:
        a = m["arch"]
        analysis = LLMAnalysis(model_config(a), gpu, DtypeConfig(), ParallelismConfig())

        def run(b: int = dec["batch"], n: int = dec["context"], analysis: LLMAnalysis = analysis) -> dict[str, Any]:
            # num_tokens_to_generate=1: the decode step reads a KV cache of n + 1 tokens, as
            # layerscope's decode pass at context n does.
            return analysis.inference(batch_size_per_gpu=b, seq_len=n, num_tokens_to_generate=1)

        r = run()
        layers = a["num_layers"]
        out["models"][m["key"]] = {
            "decode_s": median_s(run, repeat),
            "prefill_s": None,
            "same_call": True,
            "tpot_s": float(r["decode_latency"]),
            "ttft_s": float(r["prefill_latency"]),
            "ops": 4 * layers + 2,
            "ops_detail": f"per layer: attn block, mlp block, 2 layernorms ({4 * layers}); input embedding; "
                          "output embedding + loss; decode adds one whole-cache KV term",
        }
    sw = next(m for m in job["models"] if m["key"] == job["sweep"]["model"])
    analysis = LLMAnalysis(model_config(sw["arch"]), gpu, DtypeConfig(), ParallelismConfig())
    out["sweep"] = time_sweep(
        lambda b, n: analysis.inference(batch_size_per_gpu=b, seq_len=n, num_tokens_to_generate=1), job)
    emit(out)


if __name__ == "__main__":
    main()
