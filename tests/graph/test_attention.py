"""Attention ops checked against hand-computed numbers (Llama-3.2-1B, gpt-oss, DeepSeek-V3 …)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from layerscope.graph import build_layer_graph
from layerscope.graph.attention import causal_pairs, kv_tokens_read
from layerscope.graph.ops import Op, OpGraph
from layerscope.workload import ForwardPass, SequenceGroup, Workload

BF16 = 2


def op(graph: OpGraph, name: str) -> Op:
    return graph.ops[graph.index[name]]


def decode(spec, context: int, batch: int = 1, layer: int = 0, attention: str = "fused", **wl) -> OpGraph:
    w = Workload(phase="decode", batch=batch, context=context, **wl)
    return build_layer_graph(spec, w.passes()[0], w, layer=layer, attention=attention)  # type: ignore[arg-type]


def prefill(spec, seq: int, batch: int = 1, layer: int = 0, attention: str = "fused", **wl) -> OpGraph:
    w = Workload(phase="prefill", batch=batch, prompt_len=seq, **wl)
    return build_layer_graph(spec, w.passes()[0], w, layer=layer, attention=attention)  # type: ignore[arg-type]


def test_causal_pairs_by_hand() -> None:
    assert causal_pairs(4, 0) == 1 + 2 + 3 + 4
    assert causal_pairs(3, 10) == 11 + 12 + 13
    assert causal_pairs(1, 999) == 1000
    # Window 4 over 10 fresh tokens: 1, 2, 3, 4, then 4 six more times.
    assert causal_pairs(10, 0, window=4) == 1 + 2 + 3 + 4 * 7
    assert causal_pairs(3, 100, window=4) == 12
    assert causal_pairs(1, 1000, window=128) == 128
    assert kv_tokens_read(1, 1000, window=128) == 128
    assert kv_tokens_read(1, 1000) == 1001
    assert kv_tokens_read(10, 0, window=4) == 10  # the union of the windows covers every new token


@given(st.integers(1, 300), st.integers(0, 300), st.one_of(st.none(), st.integers(1, 200)))
def test_causal_pairs_matches_brute_force(new: int, cached: int, window: int | None) -> None:
    cap = window if window is not None else 10**9
    assert causal_pairs(new, cached, window) == sum(min(cached + i + 1, cap) for i in range(new))


def test_llama_1b_decode_projections(spec) -> None:
    g = decode(spec("llama-1b"), context=1000)
    q = op(g, "layers.0.self_attn.q_proj")
    assert q.flops == 2 * 2048 * 2048
    assert q.weight_bytes == 2048 * 2048 * BF16
    assert q.act_read_bytes == 2048 * BF16 and q.act_write_bytes == 2048 * BF16
    assert q.matrix_class == "Va_Mw" and q.definition == "gemm_n2048_k2048"
    assert q.gemm is not None and (q.gemm.m, q.gemm.n, q.gemm.k) == (1, 2048, 2048)
    assert q.inputs[1].role == "weight" and q.inputs[1].shape == (2048, 2048)
    k = op(g, "layers.0.self_attn.k_proj")
    assert k.flops == 2 * 2048 * 512 and k.weight_bytes == 2048 * 512 * BF16
    o = op(g, "layers.0.self_attn.o_proj")
    assert o.flops == 2 * 2048 * 2048


def test_llama_1b_decode_attention_reads_whole_cache(spec) -> None:
    c = 1000
    g = decode(spec("llama-1b"), context=c)
    attn = op(g, "layers.0.self_attn.attn")
    assert attn.kind == "attention"
    assert attn.kv_read_bytes == 2 * 8 * 64 * (c + 1) * BF16
    assert attn.matrix_class == "Va_Mqa"
    assert attn.definition == "gqa_paged_decode_h32_kv8_d64"
    pairs = c + 1
    assert attn.flops == 2 * 32 * 64 * pairs * 2 + 5 * 32 * pairs
    kvw = op(g, "layers.0.self_attn.kv_write")
    assert kvw.kv_write_bytes == 2 * 8 * 64 * BF16 and kvw.matrix_class == "KVCache"
    assert kvw.definition == "kv_append_kv8_d64"
    rope = op(g, "layers.0.self_attn.rope")
    assert rope.definition == "rope_h32_d64" and rope.flops == 3 * (32 + 8) * 64


def test_batch_multiplies_kv_reads(spec) -> None:
    one = op(decode(spec("llama-1b"), context=500), "layers.0.self_attn.attn")
    four = op(decode(spec("llama-1b"), context=500, batch=4), "layers.0.self_attn.attn")
    assert four.kv_read_bytes == 4 * one.kv_read_bytes


def test_prefill_counts_causal_pairs(spec) -> None:
    s, b = 128, 2
    g = prefill(spec("llama-1b"), seq=s, batch=b)
    attn = op(g, "layers.0.self_attn.attn")
    pairs = b * s * (s + 1) // 2
    assert attn.flops == 2 * 32 * 64 * pairs + 2 * 32 * 64 * pairs + 5 * 32 * pairs
    assert attn.matrix_class == "Ma_Ma"
    assert attn.definition == "gqa_ragged_prefill_causal_h32_kv8_d64"
    assert attn.kv_read_bytes == b * s * 2 * 8 * 64 * BF16
    assert op(g, "layers.0.self_attn.q_proj").matrix_class == "Ma_Mw"


def test_gqa_reads_less_cache_than_mha(spec) -> None:
    mha = op(decode(spec("llama2-7b"), context=2047), "layers.0.self_attn.attn")  # 32 kv heads x 128
    gqa = op(decode(spec("llama-8b"), context=2047), "layers.0.self_attn.attn")  # 8 kv heads x 128
    assert mha.kv_read_bytes == 2 * 32 * 128 * 2048 * BF16
    assert mha.kv_read_bytes == 4 * gqa.kv_read_bytes
    assert mha.definition == "gqa_paged_decode_h32_kv32_d128"


def test_sliding_window_caps_context(spec) -> None:
    oss = spec("gpt-oss-20b")  # window 128, layer 0 sliding, layer 1 full
    per_token = 2 * 8 * 64 * BF16
    sliding = op(decode(oss, context=1000, layer=0), "layers.0.self_attn.attn")
    full = op(decode(oss, context=1000, layer=1), "layers.1.self_attn.attn")
    assert sliding.kv_read_bytes == 128 * per_token
    assert full.kv_read_bytes == 1001 * per_token
    mistral = op(decode(spec("mistral-7b"), context=5000), "layers.0.self_attn.attn")
    assert mistral.kv_read_bytes == 4096 * 2 * 8 * 128 * BF16
    gemma = spec("gemma2-9b")
    assert op(decode(gemma, context=5000, layer=0), "layers.0.self_attn.attn").kv_read_bytes == 4096 * 2 * 8 * 256 * 2
    assert op(decode(gemma, context=5000, layer=1), "layers.1.self_attn.attn").kv_read_bytes == 5001 * 2 * 8 * 256 * 2


def test_sliding_prefill_counts_window_pairs(spec) -> None:
    oss = spec("gpt-oss-20b")
    s = 300
    attn = op(prefill(oss, seq=s, layer=0), "layers.0.self_attn.attn")
    pairs = sum(min(i + 1, 128) for i in range(s))
    scores = 64 * pairs + 64 * s  # sinks: one extra logit per head per query row
    assert attn.flops == 2 * 64 * 64 * pairs * 2 + 5 * scores
    assert attn.attr("attended_pairs") == pairs


def test_attention_sinks_noted(spec) -> None:
    attn = op(decode(spec("gpt-oss-20b"), context=10, layer=1), "layers.1.self_attn.attn")
    assert "sink" in str(attn.attr("sinks"))
    assert any(t.name == "layers.1.self_attn.sinks" and t.role == "weight" for t in attn.inputs)


def test_unfused_view_has_three_stage_softmax(spec) -> None:
    g = decode(spec("llama-1b"), context=300, attention="unfused")
    names = [o.name for o in g.ops]
    stages = ["kv_read", "qk_matmul", "softmax_max", "softmax_exp", "softmax_norm", "pv_matmul"]
    idx = [names.index(f"layers.0.self_attn.{s}") for s in stages]
    assert idx == sorted(idx)
    assert "layers.0.self_attn.attn" not in names
    assert op(g, "layers.0.self_attn.softmax_max").matrix_class == "Reduction"
    assert op(g, "layers.0.self_attn.kv_read").matrix_class == "KVCache"
    assert op(g, "layers.0.self_attn.qk_matmul").matrix_class == "Va_Mqa"
    # softmax_exp depends on qk_matmul and softmax_max; pv on softmax_norm and kv_read.
    deps = g.dependencies
    assert set(deps[g.index["layers.0.self_attn.softmax_exp"]]) == {
        g.index["layers.0.self_attn.qk_matmul"], g.index["layers.0.self_attn.softmax_max"]}
    assert set(deps[g.index["layers.0.self_attn.pv_matmul"]]) == {
        g.index["layers.0.self_attn.softmax_norm"], g.index["layers.0.self_attn.kv_read"]}


def _fused_vs_unfused(spec_, graph_fn, **kw) -> None:
    fused = graph_fn(spec_, attention="fused", **kw)
    unfused = graph_fn(spec_, attention="unfused", **kw)
    attn = [o for o in fused.ops if o.kind == "attention"]
    parts = [o for o in unfused.ops if o.kind in ("kv_read", "qk_matmul", "softmax_max", "softmax_exp",
                                                   "softmax_norm", "pv_matmul")]
    assert len(attn) == 1 and len(parts) == 6
    assert attn[0].flops == sum(p.flops for p in parts)
    assert attn[0].kv_read_bytes == sum(p.kv_read_bytes for p in parts)
    assert sum(o.flops for o in fused.ops) == sum(o.flops for o in unfused.ops)


def test_fused_flops_equal_unfused_sum(spec) -> None:
    _fused_vs_unfused(spec("llama-1b"), decode, context=777)
    _fused_vs_unfused(spec("llama-1b"), prefill, seq=100, batch=3)
    _fused_vs_unfused(spec("gpt-oss-20b"), prefill, seq=200)
    _fused_vs_unfused(spec("deepseek-v3"), decode, context=500)
    _fused_vs_unfused(spec("deepseek-v3"), prefill, seq=64)


def test_mla_cache_is_latent_plus_rope(spec) -> None:
    ds = spec("deepseek-v3")
    assert ds.kv_values_per_token_per_layer() == 576
    c = 1000
    g = decode(ds, context=c)
    kvw = op(g, "layers.0.self_attn.kv_write")
    assert kvw.kv_write_bytes == 576 * BF16
    attn = op(g, "layers.0.self_attn.attn")
    assert attn.definition == "mla_paged_decode_h128_ckv512_kpe64"
    assert attn.kv_read_bytes == (c + 1) * 576 * BF16
    pairs = c + 1
    assert attn.flops == 2 * 128 * 576 * pairs + 2 * 128 * 512 * pairs + 5 * 128 * pairs
    # Absorbed: W_UK into the query, W_UV into the output; no expansion of the cache.
    absorb_q = op(g, "layers.0.self_attn.kv_b_proj.absorb_q")
    assert absorb_q.flops == 2 * 128 * 128 * 512 and absorb_q.weight_bytes == 128 * 128 * 512 * BF16
    absorb_o = op(g, "layers.0.self_attn.kv_b_proj.absorb_o")
    assert absorb_o.flops == 2 * 128 * 512 * 128
    assert "layers.0.self_attn.kv_b_proj" not in g.index
    q_a = op(g, "layers.0.self_attn.q_a_proj")
    assert q_a.flops == 2 * 7168 * 1536
    assert op(g, "layers.0.self_attn.kv_a_proj_with_mqa").flops == 2 * 7168 * 576


def test_mla_naive_prefill_expands_latent(spec) -> None:
    ds = spec("deepseek-v3")
    s = 64
    g = prefill(ds, seq=s)
    attn = op(g, "layers.0.self_attn.attn")
    assert attn.definition == "mla_ragged_prefill_causal_h128_qk192_vo128"
    kvb = op(g, "layers.0.self_attn.kv_b_proj")
    assert kvb.flops == 2 * s * 128 * (128 + 128) * 512
    # The latent (512) is read by the expansion, the rope key (64) by the attention.
    assert kvb.kv_read_bytes + attn.kv_read_bytes == s * 576 * BF16
    pairs = s * (s + 1) // 2
    assert attn.flops == 2 * 128 * 192 * pairs + 2 * 128 * 128 * pairs + 5 * 128 * pairs


def test_mla_without_q_lora_uses_q_proj(spec) -> None:
    g = decode(spec("deepseek-v2-lite"), context=10)
    assert "layers.0.self_attn.q_proj" in g.index
    assert "layers.0.self_attn.q_a_proj" not in g.index


def test_mla_form_override(spec) -> None:
    ds = spec("deepseek-v3")
    w = Workload(phase="decode", context=100)
    g = build_layer_graph(ds, w.passes()[0], w, mla_form="naive")
    assert "layers.0.self_attn.kv_b_proj" in g.index


def test_chunked_pass_covers_all_groups(spec) -> None:
    llama = spec("llama-1b")
    w = Workload(phase="chunked", batch=3, chunk=256, prefill_offset=512, context=1000)
    fwd = w.passes()[0]
    attn = op(build_layer_graph(llama, fwd, w), "layers.0.self_attn.attn")
    pairs = causal_pairs(256, 512) + 3 * 1001
    assert attn.flops == 2 * 32 * 64 * pairs * 2 + 5 * 32 * pairs
    assert attn.kv_read_bytes == (768 + 3 * 1001) * 2 * 8 * 64 * BF16
    assert attn.definition.startswith("gqa_ragged_prefill_causal")
    assert attn.matrix_class == "Ma_Mqa"
    assert attn.attr("groups") == ((1, 256, 512), (3, 1, 1000))


def test_qk_norm_per_head(spec) -> None:
    g = decode(spec("qwen3-0.6b"), context=10)
    qn = op(g, "layers.0.self_attn.q_norm")
    assert qn.definition == "rmsnorm_h128" and qn.flops == 4 * 16 * 128
    rope = op(g, "layers.0.self_attn.rope")
    assert {d for d in g.dependencies[g.index[rope.name]]} == {
        g.index["layers.0.self_attn.q_norm"], g.index["layers.0.self_attn.k_norm"]}


def test_fused_qkv_proj(spec) -> None:
    g = decode(spec("phi3"), context=10)
    qkv = op(g, "layers.0.self_attn.qkv_proj")
    assert qkv.flops == 2 * 3072 * (32 + 2 * 32) * 96


def test_tensor_parallel_divides_heads_and_all_reduces(spec) -> None:
    llama = spec("llama-8b")
    g = decode(llama, context=100, batch=2, tensor_parallel=4)
    assert op(g, "layers.0.self_attn.q_proj").flops == 2 * 2 * 4096 * (8 * 128)
    assert op(g, "layers.0.self_attn.k_proj").flops == 2 * 2 * 4096 * (2 * 128)
    ar = op(g, "layers.0.self_attn.o_proj.all_reduce")
    msg = 2 * 4096 * BF16
    assert ar.kind == "communication" and ar.matrix_class == "Collective"
    assert ar.comm_bytes == 2 * 3 * msg // 4
    assert "layers.0.mlp.down_proj.all_reduce" in g.index
    # o_proj -> all_reduce -> residual
    assert g.dependencies[g.index["layers.0.self_attn.o_proj.all_reduce"]] == (g.index["layers.0.self_attn.o_proj"],)
    # 8 kv heads over 16 devices: one (replicated) kv head each.
    g16 = decode(llama, context=100, tensor_parallel=16)
    assert op(g16, "layers.0.self_attn.k_proj").flops == 2 * 4096 * 128
    assert "layers.0.self_attn.o_proj.all_reduce" not in decode(llama, context=100).index


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 4000), st.integers(1, 500), st.integers(1, 8))
def test_attention_grows_with_context(spec, context: int, extra: int, batch: int) -> None:
    for name, layer in (("llama-1b", 0), ("gpt-oss-20b", 1), ("deepseek-v3", 0)):
        model = spec(name)
        a = op(decode(model, context=context, batch=batch, layer=layer), f"layers.{layer}.self_attn.attn")
        b = op(decode(model, context=context + extra, batch=batch, layer=layer), f"layers.{layer}.self_attn.attn")
        assert b.flops > a.flops and b.kv_read_bytes > a.kv_read_bytes


@settings(max_examples=20, deadline=None)
@given(st.integers(1, 600), st.integers(1, 300))
def test_prefill_attention_grows_with_length(spec, seq: int, extra: int) -> None:
    model = spec("llama-1b")
    a = op(prefill(model, seq=seq), "layers.0.self_attn.attn")
    b = op(prefill(model, seq=seq + extra), "layers.0.self_attn.attn")
    assert b.flops > a.flops and b.kv_read_bytes > a.kv_read_bytes


def test_sequence_groups_sum(spec) -> None:
    llama = spec("llama-1b")
    w = Workload()
    two = ForwardPass(groups=(SequenceGroup(count=1, new_tokens=1, cached_tokens=100),
                              SequenceGroup(count=1, new_tokens=1, cached_tokens=300)))
    attn = op(build_layer_graph(llama, two, w), "layers.0.self_attn.attn")
    assert attn.kv_read_bytes == (101 + 301) * 2 * 8 * 64 * BF16
    assert attn.definition == "gqa_paged_decode_h32_kv8_d64"
    assert attn.gemm is None
