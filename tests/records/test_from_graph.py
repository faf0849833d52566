"""Records derived from the graph carry the graph's definition names for real catalog configs."""

from __future__ import annotations

import pytest

from layerscope.model import load_model_spec
from layerscope.records import records_from_spec

#: Definitions each real model must produce (hand-derived from its config.json).
EXPECTED: dict[str, set[str]] = {
    # hidden 8192, 64 heads / 8 KV heads of 128, FFN 28672, vocab 128256.
    "meta-llama/Llama-3.1-70B": {
        "rmsnorm_h8192", "gqa_ragged_prefill_causal_h64_kv8_d128", "gqa_paged_decode_h64_kv8_d128",
        "rope_h64_d128", "gemm_n8192_k8192", "gemm_n1024_k8192", "gemm_n28672_k8192", "gemm_n8192_k28672",
        "silu_h28672", "embedding_v128256_d8192", "gemm_n128256_k8192", "topk_d128256_k1",
    },
    # hidden 2048, 32/4 heads of 128, q/k norms over 128, 128 experts of 768, top-8.
    "Qwen/Qwen3-30B-A3B": {
        "moe_fused_e128_h2048_i768_topk8", "topk_d128_k8", "gemm_n128_k2048", "rmsnorm_h128", "rmsnorm_h2048",
        "gqa_ragged_prefill_causal_h32_kv4_d128", "gqa_paged_decode_h32_kv4_d128",
    },
    # hidden 2880, 64/8 heads of 64, 128 experts of 2880, top-4.
    "openai/gpt-oss-120b": {
        "moe_fused_e128_h2880_i2880_topk4", "topk_d128_k4", "gemm_n128_k2880", "rmsnorm_h2880",
        "gqa_ragged_prefill_causal_h64_kv8_d64", "rope_h64_d64",
    },
    # MLA: 128 heads, q_lora 1536, kv_lora 512, rope 64, nope 128, v 128; 256 experts of 2048, top-8.
    "deepseek-ai/DeepSeek-V3": {
        "mla_ragged_prefill_causal_h128_qk192_vo128", "mla_paged_decode_h128_ckv512_kpe64", "rope_h128_d64",
        "rmsnorm_h1536", "rmsnorm_h512", "moe_fused_e256_h7168_i2048_topk8", "topk_d256_k8", "silu_h18432",
        "silu_h2048", "gemm_n576_k7168", "gemm_n24576_k1536",
    },
}


@pytest.mark.parametrize("model", sorted(EXPECTED))
def test_real_configs_carry_definition_names(model: str) -> None:
    spec = load_model_spec(model)
    rs = records_from_spec(spec, prompt_len=16, decode_steps=1)
    assert EXPECTED[model] <= set(rs.definitions)
    assert rs.passes == {"prefill": 1, "decode": 1}


def test_llama70b_calls_per_layer() -> None:
    spec = load_model_spec("meta-llama/Llama-3.1-70B")
    rs = records_from_spec(spec, prompt_len=16)
    # Per layer: input + post-attention norms; q and o projections share gemm_n8192_k8192.
    assert rs.calls[("rmsnorm_h8192", 79, "prefill")].calls == 2
    assert rs.calls[("gemm_n8192_k8192", 0, "prefill")].calls == 2
    assert rs.calls[("gemm_n1024_k8192", 0, "prefill")].calls == 2  # k_proj, v_proj
    assert rs.calls[("rmsnorm_h8192", None, "prefill")].calls == 1  # final norm
    assert {c.layer for c in rs.calls.values() if c.definition == "silu_h28672"} == set(range(80))
    ws = [w.workload for w in rs.workloads["gqa_ragged_prefill_causal_h64_kv8_d128"].values()]
    assert [w.axes for w in ws] == [{"batch_size": 1, "num_qo_tokens": 16, "num_kv_tokens": 16}]
    assert ws[0].inputs["k"].shape == [16, 8, 128]


def test_moe_layers_follow_the_spec() -> None:
    spec = load_model_spec("deepseek-ai/DeepSeek-V3")
    rs = records_from_spec(spec, prompt_len=4, layers=range(4))
    moe_layers = {c.layer for c in rs.calls.values() if c.category == "moe_experts"}
    assert moe_layers == {3}  # first_k_dense_replace = 3
