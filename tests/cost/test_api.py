"""Whole-workload estimates on real catalog configs and hardware presets."""

from __future__ import annotations

import numpy as np
import pytest

from layerscope.cost import estimate, time_graph
from layerscope.cost.api import decode_breakpoints, sum_decode_steps
from layerscope.graph import build_model_graph
from layerscope.hardware import load_hardware
from layerscope.model import load_model_spec
from layerscope.units import DType
from layerscope.workload import make_workload


@pytest.fixture(scope="module")
def h100():
    return load_hardware("h100-sxm")


@pytest.fixture(scope="module")
def llama8b():
    return load_model_spec("llama-3.1-8b")


def _compute_share(est) -> float:
    t = sum(op.time_s for op in est.ops)
    return sum(op.time_s for op in est.ops if op.bound == "compute") / t


def _achieved(est) -> float:
    return sum(op.flops for op in est.ops) / sum(op.time_s for op in est.ops)


def test_batch1_decode_of_dense_8b_on_h100_is_memory_bound(h100, llama8b):
    est = estimate(llama8b, h100, make_workload(phase="decode", context=1024))
    gemms = [op for op in est.ops if op.kind == "gemm"]
    # None is FLOP-bound. Small projections (k/v_proj: 8 MiB, ~3 µs of weight stream) are held by their serial
    # K-loop (4096 x 1.22 ns: efficiency.gemm_k_loop_s, our own H200's 8.2 µs for such a GEMM), not their FLOPs.
    tau = h100.gemm_k_loop_s("bf16")
    assert tau > 0
    for op in gemms:
        assert op.bound in ("memory", "overhead", "compute")
        assert op.flops / op.time_s < 0.01 * h100.engines.peak_flops_per_s[DType.BF16]
        if op.bound == "compute":
            k = op.inputs[0][-1]
            assert k * tau > op.weight_bytes / h100.memory_bandwidth_bytes_per_s
            assert op.time_s == pytest.approx(h100.launch_overhead_s + k * tau)
    assert sum(op.bound == "memory" for op in gemms) > len(gemms) / 2
    # TPOT >= the time to stream every weight once at the achievable bandwidth.
    floor_s = est.memory.weights / h100.achievable_bandwidth_bytes_per_s()
    assert est.tpot_s >= floor_s
    assert est.tpot_s < 1.5 * floor_s + 2e-3


def test_large_batch_prefill_is_compute_bound_and_chunked_sits_between(h100, llama8b):
    pre = estimate(llama8b, h100, make_workload(phase="prefill", batch=8, prompt_len=2048))
    dec = estimate(llama8b, h100, make_workload(phase="decode", batch=1, context=2048))
    chunk = estimate(llama8b, h100, make_workload(phase="chunked", batch=16, chunk=256,
                                                  context=2048))
    # lm_head computes logits of the last token of each sequence only (M = 8): a GEMV, memory-bound.
    pre_gemm = [op for op in pre.ops if op.kind == "gemm" and op.name != "lm_head"]
    assert all(op.bound == "compute" for op in pre_gemm)
    assert next(op for op in pre.ops if op.name == "lm_head").bound == "memory"
    # Achieved FLOP/s orders the phases: decode (weight streaming) < chunked < prefill.
    assert _achieved(dec) < _achieved(chunk) < _achieved(pre)
    # decode: no op is FLOP-bound; the only compute-bound ones are the k/v projections held by their K-loop
    assert {op.name.rsplit(".", 1)[-1] for op in dec.ops if op.bound == "compute"} == {"k_proj", "v_proj"}
    assert _compute_share(dec) < 0.1 and _compute_share(pre) > 0.8


def test_attention_time_grows_with_context(h100, llama8b):
    times = []
    for ctx in (128, 1024, 8192, 65536):
        est = estimate(llama8b, h100, make_workload(phase="decode", batch=8, context=ctx))
        times.append(sum(op.time_s for op in est.ops if op.kind == "attention"))
    assert times == sorted(times) and times[-1] > 10 * times[0]


def test_generation_sums_every_decode_step(h100):
    spec = load_model_spec("llama-3.2-1b")
    w = make_workload(phase="generate", prompt_len=300, decode_steps=5)
    est = estimate(spec, h100, w)
    direct = [estimate(spec, h100, make_workload(phase="decode", context=c)).tpot_s
              for c in w.decode_contexts()]
    assert est.tpot_s == pytest.approx(np.mean(direct), rel=1e-9)
    assert est.ttft_s == pytest.approx(estimate(spec, h100, make_workload(phase="prefill", prompt_len=300)).ttft_s)
    assert est.e2e_s == pytest.approx(est.ttft_s + sum(direct), rel=1e-9)
    assert est.output_tokens_per_s == pytest.approx(6 / est.e2e_s)


def test_sliding_window_generation_is_exact_across_the_window_breakpoint(h100):
    spec = load_model_spec("gpt-oss-20b")  # window 128 on every other layer
    w = make_workload(phase="generate", prompt_len=100, decode_steps=59)
    assert decode_breakpoints(spec, w.decode_contexts()) == [100, 127, 128, 158]
    summed = sum_decode_steps(spec, w, h100, "roofline")
    for i, ctx in enumerate(w.decode_contexts()):
        g = build_model_graph(spec, w.decode_pass(ctx), w)
        assert summed.step_times_s[i] == pytest.approx(time_graph(g, h100).total_s, rel=1e-9), ctx


def test_memory_footprint_by_hand(h100):
    # Llama-3.2-1B, bf16: 1,235,814,400 params x 2 B (tied embeddings counted once); KV cache of
    # 4 sequences x 2049 tokens x 16 layers x (2 x 8 kv heads x 64) values x 2 B.
    spec = load_model_spec("llama-3.2-1b")
    est = estimate(spec, h100, make_workload(phase="decode", batch=4, context=2048))
    assert est.memory.weights == 1_235_814_400 * 2
    assert est.memory.kv_cache == 4 * 2049 * 16 * 2 * 8 * 64 * 2
    assert est.fits_in_memory


def test_model_too_big_does_not_fit():
    est = estimate(load_model_spec("llama-3.1-405b"), load_hardware("h100-sxm"), make_workload(phase="decode"))
    assert not est.fits_in_memory
    assert est.memory.weights > 800e9


def test_single_layer_scope_and_out_of_range_layer(h100):
    spec = load_model_spec("llama-3.2-1b")
    w = make_workload(phase="decode")
    est = estimate(spec, h100, w, layer=3)
    assert est.scope == "layer 3" and {op.layer for op in est.ops} == {3}
    from layerscope.errors import WorkloadError

    with pytest.raises(WorkloadError, match="layer"):
        estimate(spec, h100, w, layer=16)


@pytest.mark.parametrize("cost_model", ["roofline", "tiling", "hierarchical"])
def test_every_cost_model_times_a_full_model(cost_model, h100):
    est = estimate(load_model_spec("mixtral-8x7b-v0.1"), h100, make_workload(phase="prefill", prompt_len=512),
                   cost_model=cost_model)
    assert est.ttft_s > 0 and all(op.time_s > 0 for op in est.ops)


@pytest.mark.parametrize("cost_model", ["tiling", "hierarchical"])
def test_generation_with_tiling_models_is_close_to_every_step(h100, cost_model):
    # these models read GEMM shapes, which the summed steps take from the longest context: bounded
    spec = load_model_spec("llama-3.2-1b")
    w = make_workload(phase="generate", batch=4, prompt_len=100, decode_steps=59)
    est = estimate(spec, h100, w, cost_model=cost_model)
    direct = [estimate(spec, h100, make_workload(phase="decode", batch=4, context=c),
                       cost_model=cost_model).tpot_s for c in w.decode_contexts()]
    assert est.tpot_s == pytest.approx(np.mean(direct), rel=5e-3)


def _kv_cache_bytes(name: str, **workload: object) -> float:
    # The footprint covers every layer whatever the scope; one layer's graph keeps the test fast.
    spec = load_model_spec(name)
    return estimate(spec, load_hardware("h100-sxm"), make_workload(**workload), layer=0).memory.kv_cache


def test_kv_cache_of_sliding_window_layers_is_capped_at_the_window():
    # Mistral-7B-v0.1: 32 layers, all sliding (window 4096), 8 KV heads of 128, bf16. A decode at
    # context 8191 holds 8192 tokens per sequence; each layer keeps only the last 4096:
    # 2 seqs x 32 layers x 4096 tokens x (2 x 8 x 128) values x 2 B = 1 GiB (2 GiB uncapped).
    assert _kv_cache_bytes("mistral-7b-v0.1", phase="decode", batch=2, context=8191) == \
        2 * 32 * 4096 * (2 * 8 * 128) * 2 == 2**30
    # Below the window nothing is capped: 2 x 32 x 1000 x 2048 x 2 B.
    assert _kv_cache_bytes("mistral-7b-v0.1", phase="decode", batch=2, context=999) == \
        2 * 32 * 1000 * (2 * 8 * 128) * 2
    # Gemma-2-9B alternates 21 sliding (window 4096) and 21 global layers, 8 KV heads of 256: at 8192
    # tokens, 1 seq x (21 x 4096 + 21 x 8192) tokens x (2 x 8 x 256) values x 2 B.
    assert _kv_cache_bytes("gemma-2-9b-it", phase="decode", context=8191) == \
        (21 * 4096 + 21 * 8192) * (2 * 8 * 256) * 2


def test_tensor_parallel_splits_kv_heads_and_replicates_below_one_per_device():
    # Llama-3.2-1B: 16 layers, 8 KV heads of 64, 32 query heads. Decode, 4 seqs at 2049 tokens:
    # one device holds 4 x 2049 x 16 x (2 x 8 x 64) x 2 B = 268,566,528 B.
    full = 4 * 2049 * 16 * (2 * 8 * 64) * 2
    assert _kv_cache_bytes("llama-3.2-1b", phase="decode", batch=4, context=2048) == full
    # tp = 2 and 8: 8 / tp KV heads per device.
    for tp in (2, 8):
        assert _kv_cache_bytes("llama-3.2-1b", phase="decode", batch=4, context=2048,
                               tensor_parallel=tp) == full / tp
    # tp = 16 > 8 KV heads: each device keeps one whole (replicated) KV head, 1/8 of the cache, not 1/16.
    assert _kv_cache_bytes("llama-3.2-1b", phase="decode", batch=4, context=2048,
                           tensor_parallel=16) == full / 8


def test_chunked_pass_caches_the_chunked_sequence_too():
    # Llama-3.2-1B chunked prefill: 3 decode sequences at context 2047 (2048 tokens after this pass) and
    # one prompt chunk of 512 after 1536 processed tokens (also 2048): 4 sequences x 2048 tokens x
    # 16 layers x (2 x 8 x 64) values x 2 B = 256 MiB.
    assert _kv_cache_bytes("llama-3.2-1b", phase="chunked", batch=3, context=2047, chunk=512,
                           prefill_offset=1536) == 4 * 2048 * 16 * (2 * 8 * 64) * 2 == 256 * 2**20
