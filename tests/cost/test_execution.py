"""Execution profiles: kernels per op and their bytes (hand-computed), residency, and exactness."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from layerscope.cost.api import sum_decode_steps, time_graph
from layerscope.cost.execution import (
    EXECUTION_PROFILES,
    HF_EAGER_KINDS,
    HF_EAGER_MODULE_CALLS,
    HfEagerKind,
    code_role,
    kernel_plan,
    previous_same_role,
    reuse_bytes,
)
from layerscope.errors import CostModelError, HardwareSpecError
from layerscope.graph import build_layer_graph, build_model_graph
from layerscope.graph.builder import build_steps_graph
from layerscope.graph.ops import OP_KINDS
from layerscope.hardware.spec import HardwareSpec
from layerscope.model import load_model_spec
from layerscope.workload import make_workload

CPU = {
    "name": "cpu-toy", "kind": "cpu",
    "engines": {"count": 2, "clock_hz": 1e9, "peak_flops_per_s": {"fp32": 100e9, "bf16": 100e9},
                "vector_flops_per_s": 1e12},
    "memory": [{"name": "l3", "capacity_bytes": 32 * 1024**2, "bandwidth_bytes_per_s": 100e9},
               {"name": "dram", "capacity_bytes": 24e9, "bandwidth_bytes_per_s": 10e9}],
    "launch_overhead_s": 5e-6,
}


def _hw(**execution: object) -> HardwareSpec:
    return HardwareSpec.from_dict({**CPU, "execution": execution} if execution else CPU)


def _layer(dtype: str = "fp32", phase: str = "prefill", **kw: int):
    spec = load_model_spec("llama-3.2-1b")
    w = make_workload(phase=phase, weight_dtype=dtype, act_dtype=dtype, kv_dtype=dtype, **kw)
    return build_layer_graph(spec, w.passes()[0], w, 0)


def _op(graph, suffix: str):
    return next(op for op in graph.ops if op.name.endswith(suffix))


@pytest.mark.parametrize(("dtype", "launches", "factor"), [("fp32", 6, 28 / 8), ("bf16", 8, 36 / 4)])
def test_eager_rmsnorm_kernels_and_bytes_by_hand(dtype, launches, factor):
    # fp32: pow 8N + mean 4N + mul 8N + weight-mul 8N = 28N against the fused 8N (6 kernels);
    # bf16 adds two casts: (28 + 4*2)N = 36N against 4N (8 kernels).
    g = _layer(dtype, prompt_len=64)
    i = g.index["layers.0.input_layernorm"]
    plan = kernel_plan("hf-eager", g.ops)
    assert plan.launches[i] == launches
    assert plan.act_factor[i] == pytest.approx(factor)


def test_eager_rope_attention_kv_write_and_gated_activation():
    g = _layer("fp32", prompt_len=64)
    plan = kernel_plan("hf-eager", g.ops)
    rope = g.index["layers.0.self_attn.rope"]
    attn = g.index["layers.0.self_attn.attn"]
    kvw = g.index["layers.0.self_attn.kv_write"]
    act = g.index["layers.0.mlp.act_mul"]
    qk = 64 * (32 * 64 + 8 * 64)
    rope_op = g.ops[rope]
    assert plan.launches[rope] == 10
    assert plan.act_factor[rope] == pytest.approx(10 * qk * 4 / (rope_op.act_read_bytes + rope_op.act_write_bytes))
    assert (plan.launches[attn], plan.kv_factor[attn]) == (2, 3)
    assert (plan.launches[kvw], plan.act_factor[kvw], plan.kv_factor[kvw]) == (2, 0, 0)
    assert (plan.launches[act], plan.act_factor[act]) == (2, pytest.approx(5 / 3))
    q = g.index["layers.0.self_attn.q_proj"]
    assert (plan.launches[q], plan.act_factor[q], plan.kv_factor[q]) == (1, 1, 1)


def test_eager_gated_activation_runs_its_two_kernels_in_sequence_by_hand():
    # Llama's act_mul at 64 tokens, N = 64 x 8192, 5N FLOPs (SiLU 4N, product N), eager bytes 20N in fp32 (the
    # SiLU reads g and writes s: 8N; the product reads s and u and writes: 12N). At 2 GFLOP/s and 10 GB/s the SiLU
    # is compute-bound (4N / 2e9 against 8N / 10e9), the product memory-bound (N / 2e9 against 12N / 10e9): the
    # sum of the two rooflines, 3.2 ns per element, where one roofline over the summed work gives 2.5.
    g = _layer("fp32", prompt_len=64)
    i = g.index["layers.0.mlp.act_mul"]
    n = 64 * 8192
    plan = kernel_plan("hf-eager", g.ops)
    assert plan.split is not None
    np.testing.assert_allclose(plan.split[i], [[4 / 5, 2 / 5], [1 / 5, 3 / 5]])
    np.testing.assert_array_equal(plan.split[g.index["layers.0.input_layernorm"]], [[1, 1], [0, 0]])
    assert kernel_plan("fused", g.ops).split is None
    slow = HardwareSpec.from_dict({**CPU, "engines": {**CPU["engines"], "vector_flops_per_s": 2e9},
                                   "execution": {"kernels": "hf-eager"}})
    cost = time_graph(g, slow)
    assert cost.compute_s[i] == pytest.approx(5 * n / 2e9) and cost.memory_s[i] == pytest.approx(20 * n / 10e9)
    assert cost.time_s[i] == pytest.approx(4 * n / 2e9 + 12 * n / 10e9 + 2 * 5e-6)
    # both kernels memory-bound (the default 1 TFLOP/s): the same as one roofline
    assert time_graph(g, _hw(kernels="hf-eager")).time_s[i] == pytest.approx(20 * n / 10e9 + 2 * 5e-6)
    # an ungated activation (GPT-2's gelu_new, 8 kernels) stays one roofline
    spec = load_model_spec("gpt2")
    w = make_workload(phase="prefill", prompt_len=16)
    gpt = build_layer_graph(spec, w.passes()[0], w, 0)
    act = next(j for j, op in enumerate(gpt.ops) if op.kind == "activation")
    gpt_plan = kernel_plan("hf-eager", gpt.ops)
    assert gpt_plan.split is None or np.all(gpt_plan.split[act, 1:] == 0)


def test_fused_profile_is_the_identity():
    g = _layer(prompt_len=64)
    plan = kernel_plan("fused", g.ops)
    assert np.all(plan.launches == 1) and np.all(plan.act_factor == 1) and np.all(plan.kv_factor == 1)
    base = time_graph(g, _hw())
    explicit = time_graph(g, _hw(kernels="fused"))
    np.testing.assert_array_equal(base.time_s, explicit.time_s)


def test_unknown_profile_is_a_clear_error():
    with pytest.raises(CostModelError, match="unknown execution profile 'tvm'; known: fused, hf-eager"):
        kernel_plan("tvm", ())
    assert set(EXECUTION_PROFILES) == {"fused", "hf-eager", "serving-graph"}


def test_hf_eager_has_one_record_per_op_kind():
    # every kind states its rules (a new kind must too); one without rules of its own runs as one kernel
    assert list(HF_EAGER_KINDS) == list(OP_KINDS)
    assert HF_EAGER_KINDS["sampling"] == HfEagerKind()
    assert HF_EAGER_MODULE_CALLS == {"embedding": 1, "norm": 1, "gemm": 1, "attention": 1, "residual_add": 0.5,
                                     "activation": 2, "router": 1, "moe_experts": 2}
    odd = replace(_layer(prompt_len=8).ops[0], kind="conv")
    with pytest.raises(CostModelError, match="unknown op kind 'conv'; known: activation, attention"):
        kernel_plan("hf-eager", (odd,))


def test_eager_norm_time_by_hand():
    # Roofline: 28N bytes at 10 GB/s (main memory) + 6 launches x 5 us; N = 64 x 2048.
    g = _layer("fp32", prompt_len=64)
    i = g.index["layers.0.input_layernorm"]
    n = 64 * 2048
    t = time_graph(g, _hw(kernels="hf-eager")).time_s[i]
    weight = g.ops[i].weight_bytes
    assert t == pytest.approx((28 * n + weight) / 10e9 + 6 * 5e-6)


def test_resident_activations_move_at_cache_bandwidth():
    # Same norm with activations in the 32 MiB L3: 28N at 100 GB/s, the weight from DRAM.
    g = _layer("fp32", prompt_len=64)
    i = g.index["layers.0.input_layernorm"]
    n = 64 * 2048
    t = time_graph(g, _hw(kernels="hf-eager", activations_in_cache=True)).time_s[i]
    assert t == pytest.approx(28 * n / 100e9 + g.ops[i].weight_bytes / 10e9 + 6 * 5e-6)
    # A GEMM's weights still stream from main memory.
    q = g.index["layers.0.self_attn.q_proj"]
    tq = time_graph(g, _hw(kernels="hf-eager", activations_in_cache=True))
    assert tq.memory_s[q] >= g.ops[q].weight_bytes / 10e9


def test_cold_outputs_cross_main_memory_twice_by_hand():
    # Norm as above with cold outputs: of the 28N eager bytes, the output's 4N are not cache-resident
    # (24N at 100 GB/s), and the output crosses main memory twice (write-allocate): 8N at 10 GB/s.
    g = _layer("fp32", prompt_len=64)
    i = g.index["layers.0.input_layernorm"]
    n = 64 * 2048
    hw = _hw(kernels="hf-eager", activations_in_cache=True, cold_outputs=True)
    t = time_graph(g, hw).time_s[i]
    assert t == pytest.approx(24 * n / 100e9 + (8 * n + g.ops[i].weight_bytes) / 10e9 + 6 * 5e-6)
    # Without the cache, everything from main memory plus the read for ownership: 32N.
    t_dram = time_graph(g, _hw(kernels="hf-eager", cold_outputs=True)).time_s[i]
    assert t_dram == pytest.approx((32 * n + g.ops[i].weight_bytes) / 10e9 + 6 * 5e-6)


def test_output_share_is_written_over_read_plus_written():
    g = _layer("fp32", prompt_len=64)
    plan = kernel_plan("hf-eager", g.ops)
    for i, op in enumerate(g.ops):
        total = op.act_read_bytes + op.act_write_bytes
        assert plan.out_share[i] == pytest.approx(op.act_write_bytes / total if total else 0.0)
    # A residual add reads two tensors and writes one.
    assert plan.out_share[g.index["layers.0.residual_attn"]] == pytest.approx(1 / 3)


@pytest.mark.parametrize("model", ["roofline", "tiling", "hierarchical"])
def test_cold_outputs_never_make_an_op_faster(model):
    g = _layer("fp32", prompt_len=128)
    warm = time_graph(g, _hw(kernels="hf-eager", activations_in_cache=True), model).time_s
    cold = time_graph(g, _hw(kernels="hf-eager", activations_in_cache=True, cold_outputs=True), model).time_s
    assert np.all(cold >= warm * (1 - 1e-12))
    assert cold.sum() > warm.sum()


def test_activations_larger_than_the_cache_stay_in_main_memory():
    g = _layer("fp32", prompt_len=8192)  # a 64 MiB hidden state does not fit the 32 MiB L3
    i = g.index["layers.0.input_layernorm"]
    resident = time_graph(g, _hw(kernels="hf-eager", activations_in_cache=True)).time_s[i]
    dram = time_graph(g, _hw(kernels="hf-eager")).time_s[i]
    assert resident == pytest.approx(dram)


@pytest.mark.parametrize("model", ["roofline", "tiling", "hierarchical"])
def test_eager_never_faster_than_fused(model):
    g = _layer("bf16", prompt_len=128)
    fused = time_graph(g, _hw(), model)
    eager = time_graph(g, _hw(kernels="hf-eager"), model)
    # kv_write's bytes are booked on the attention op (the cat traffic scales with the cache),
    # so compare every other op, and the attention module's ops together.
    kinds = np.array([op.kind for op in g.ops])
    others = kinds != "kv_write"
    assert np.all(eager.time_s[others] >= fused.time_s[others] - 1e-15)
    attn_ops = np.array([op.module == "layers.0.self_attn" for op in g.ops])
    assert eager.time_s[attn_ops].sum() > fused.time_s[attn_ops].sum()
    assert eager.total_s > fused.total_s


COLD_POINTS = [{"reuse_bytes": 1024.0**2, "kernel_s": 1e-6, "module_call_s": 10e-6},
               {"reuse_bytes": 1024.0**3, "kernel_s": 4e-6, "module_call_s": 40e-6}]


@pytest.mark.parametrize("cold", [{}, {"cold_by_reuse": COLD_POINTS},
                                  {"fresh_pages": {"min_bytes": 16 * 1024, "s_per_byte": 1e-10}}])
def test_eager_generation_sum_is_exact_per_step(cold):
    # The profile multiplies each op's own bytes, so interpolating work between graph builds
    # stays exact: every decode step equals a direct build of that step's graph. Cold costs by reuse
    # distance come from each step's own bytes, so they keep it exact too; allocation sizes do not
    # depend on the context (the cache's cat is left out), so page faults keep it exact.
    spec = load_model_spec("llama-3.2-1b")
    hw = _hw(kernels="hf-eager", activations_in_cache=True, **cold)
    w = make_workload(phase="generate", prompt_len=100, decode_steps=19, weight_dtype="fp32", act_dtype="fp32",
                      kv_dtype="fp32")
    summed = sum_decode_steps(spec, w, hw, "roofline")
    for i, ctx in enumerate(w.decode_contexts()):
        g = build_model_graph(spec, w.decode_pass(ctx), w)
        assert summed.step_times_s[i] == pytest.approx(time_graph(g, hw).total_s, rel=1e-9), ctx


def test_execution_round_trips_through_yaml(tmp_path):
    from layerscope.hardware.loaders import dump_hardware_yaml, load_hardware

    hw = _hw(kernels="hf-eager", activations_in_cache=True, source="test")
    path = tmp_path / "hw.yaml"
    path.write_text(dump_hardware_yaml(hw))
    assert load_hardware(path).execution == hw.execution
    assert "execution" not in dump_hardware_yaml(_hw())


def test_unknown_kernels_in_a_spec_is_a_clear_error():
    from layerscope.errors import HardwareSpecError

    with pytest.raises(HardwareSpecError, match="execution"):
        _hw(kernels="xla")


def test_matmul_rows_table_sets_the_gemm_rate_by_row_count():
    # fp32 peak 100 GFLOP/s; measured 40% of peak at M = 16 and 80% at M = 256. A 64-row GEMM
    # (halfway in log M) runs at 60%; a GEMV (M = 1) and the attention's products are unaffected.
    hw = HardwareSpec.from_dict({**CPU, "efficiency": {"matmul_rows": {"fp32": [[16, 0.4], [256, 0.8]]}}})
    g = _layer("fp32", prompt_len=64)
    q = g.index["layers.0.self_attn.q_proj"]
    t = time_graph(g, hw)
    assert t.compute_s[q] == pytest.approx(g.ops[q].flops / (100e9 * 0.6))
    attn = g.index["layers.0.self_attn.attn"]
    assert t.compute_s[attn] == pytest.approx(time_graph(g, _hw()).compute_s[attn])
    big = _layer("fp32", prompt_len=4096)
    assert time_graph(big, hw).compute_s[q] == pytest.approx(big.ops[q].flops / (100e9 * 0.8))
    d = _layer("fp32", phase="decode", context=64)
    qd = d.index["layers.0.self_attn.q_proj"]
    assert time_graph(d, hw).compute_s[qd] == pytest.approx(d.ops[qd].flops / 100e9)


def test_attention_rows_table_sets_the_fused_attention_rate_by_query_length():
    # fp32 peak 100 GFLOP/s; causal attention measured at 25% of peak with 128-token sequences and
    # 75% with 2048. A 512-token prefill (halfway in log M) runs its attention at 50%; the GEMMs,
    # and decode's attention (one query row), are unaffected.
    hw = HardwareSpec.from_dict({**CPU, "efficiency": {"attention_rows": {"fp32": [[128, 0.25], [2048, 0.75]]}}})
    assert hw.attention_rows("fp32") == ((128.0, 0.25), (2048.0, 0.75))
    g = _layer("fp32", prompt_len=512)
    attn, q = g.index["layers.0.self_attn.attn"], g.index["layers.0.self_attn.q_proj"]
    assert g.ops[attn].gemm.m == 512
    t, plain = time_graph(g, hw), time_graph(g, _hw())
    assert t.compute_s[attn] == pytest.approx(g.ops[attn].flops / (100e9 * 0.5))
    assert t.compute_s[q] == pytest.approx(plain.compute_s[q])
    short = _layer("fp32", prompt_len=16)  # held at the shortest length measured
    assert time_graph(short, hw).compute_s[short.index["layers.0.self_attn.attn"]] == pytest.approx(
        short.ops[short.index["layers.0.self_attn.attn"]].flops / (100e9 * 0.25))
    d = _layer("fp32", phase="decode", context=512)
    ad = d.index["layers.0.self_attn.attn"]
    assert time_graph(d, hw).compute_s[ad] == pytest.approx(time_graph(d, _hw()).compute_s[ad])
    from layerscope.errors import HardwareSpecError

    with pytest.raises(HardwareSpecError, match="attention_rows"):
        HardwareSpec.from_dict({**CPU, "efficiency": {"attention_rows": {"fp32": [[1, 0.5]]}}})


def test_vector_per_kind_sets_the_rate_of_one_op_kind():
    # Greedy sampling (argmax) at a tenth of the vector rate: the sampling op's compute time is 10x,
    # every other vector op's unchanged; an unknown kind is refused when an op is timed.
    from layerscope.errors import HardwareSpecError

    hw = HardwareSpec.from_dict({**CPU, "efficiency": {"vector_per_kind": {"sampling": 0.1}}})
    spec = load_model_spec("llama-3.2-1b")
    w = make_workload(phase="prefill", prompt_len=64, weight_dtype="fp32", act_dtype="fp32", kv_dtype="fp32")
    g = build_model_graph(spec, w.prefill_pass(), w)
    t, plain = time_graph(g, hw), time_graph(g, _hw())
    sample, norm = g.index["sampling"], g.index["norm"]
    assert t.compute_s[sample] == pytest.approx(10 * plain.compute_s[sample])
    assert t.compute_s[sample] == pytest.approx(g.ops[sample].flops / (hw.engines.vector_flops_per_s * 0.1))
    assert t.compute_s[norm] == pytest.approx(plain.compute_s[norm])
    typo = HardwareSpec.from_dict({**CPU, "efficiency": {"vector_per_kind": {"samplng": 0.1}}})
    with pytest.raises(CostModelError, match="samplng"):
        time_graph(g, typo)
    with pytest.raises(HardwareSpecError, match="vector_per_kind"):
        HardwareSpec.from_dict({**CPU, "efficiency": {"vector_per_kind": {"sampling": 0}}})


def test_a_bad_rows_table_is_refused():
    from layerscope.errors import HardwareSpecError

    with pytest.raises(HardwareSpecError, match="matmul_rows"):
        HardwareSpec.from_dict({**CPU, "efficiency": {"matmul_rows": {"fp32": [[256, 0.8], [16, 0.4]]}}})
    with pytest.raises(HardwareSpecError, match="matmul_rows"):
        HardwareSpec.from_dict({**CPU, "efficiency": {"matmul_rows": {"fp32": [[16, 1.4]]}}})


def test_matmul_shapes_table_sets_the_gemm_rate_by_rows_and_width():
    # fp32 peak 100 GFLOP/s. Measured at N = 2048: 20% of peak at M = 4, 40% at M = 16; at N = 32768:
    # 10% and 20%. An 8-row prefill: q_proj (N = 2048) is halfway in log M, 30%; gate_proj (N = 8192)
    # is halfway in log N between 30% and 15%: 22.5%; k_proj (N = 512) is held at the narrowest
    # width, 30%. The shapes table wins over a per-M table; decode GEMVs (M = 1) are unaffected.
    shapes = [[16, 32768, 0.2], [4, 2048, 0.2], [16, 2048, 0.4], [4, 32768, 0.1]]
    hw = HardwareSpec.from_dict({**CPU, "efficiency": {"matmul_shapes": {"fp32": shapes},
                                                       "matmul_rows": {"fp32": [[4, 0.9], [16, 0.9]]}}})
    assert [(m, n) for m, n, _ in hw.matmul_shapes("fp32")] == [(4, 2048), (16, 2048), (4, 32768), (16, 32768)]
    g = _layer("fp32", prompt_len=8)
    t = time_graph(g, hw)
    for name, fraction in (("self_attn.q_proj", 0.3), ("mlp.gate_proj", 0.225), ("self_attn.k_proj", 0.3)):
        i = g.index[f"layers.0.{name}"]
        assert g.ops[i].gemm.m == 8
        assert t.compute_s[i] == pytest.approx(g.ops[i].flops / (100e9 * fraction)), name
    d = _layer("fp32", phase="decode", context=64)
    qd = d.index["layers.0.self_attn.q_proj"]
    assert time_graph(d, hw).compute_s[qd] == pytest.approx(d.ops[qd].flops / 100e9)


@pytest.mark.parametrize(("shapes", "match"), [
    ([[1, 2048, 0.5]], "M > 1"),
    ([[4, 2048, 1.5]], r"\(0, 1\]"),
    ([[4, 2048, 0.5], [4, 2048, 0.6]], "repeats"),
    ([], "none"),
])
def test_a_bad_shapes_table_is_refused(shapes, match):
    from layerscope.errors import HardwareSpecError

    with pytest.raises(HardwareSpecError, match=match):
        HardwareSpec.from_dict({**CPU, "efficiency": {"matmul_shapes": {"fp32": shapes}}})


@pytest.mark.parametrize(("batch", "engines", "passes"), [(4, 2, 2), (3, 2, 2), (8, 2, 4), (4, 1, 4)])
def test_hf_eager_prefill_lm_head_runs_one_gemv_per_sequence(batch, engines, passes):
    # Prefill of 16 tokens per sequence: HF's hidden[:, -1:, :] is strided, so lm_head is `batch` GEMVs over
    # the shared 128256 x 2048 fp32 weight (bmm), the engines side by side: ceil(batch / engines) passes at
    # 10 GB/s, timed as GEMVs (at the full 100 GFLOP/s, no GEMM efficiency table).
    spec = load_model_spec("llama-3.2-1b")
    shapes = {"fp32": [[4, 2048, 0.1], [16, 2048, 0.2]]}
    hw = HardwareSpec.from_dict({**CPU, "engines": {**CPU["engines"], "count": engines},
                                 "efficiency": {"matmul_shapes": shapes}, "execution": {"kernels": "hf-eager"}})
    w = make_workload(phase="prefill", batch=batch, prompt_len=16, weight_dtype="fp32", act_dtype="fp32",
                      kv_dtype="fp32")
    g = build_model_graph(spec, w.prefill_pass(), w)
    i = g.index["lm_head"]
    head = g.ops[i]
    assert head.gemm.m == batch and head.inputs[0].shape[0] == 16 * batch
    assert kernel_plan("hf-eager", g.ops).gemv_rows[i] == batch
    assert kernel_plan("fused", g.ops).gemv_rows[i] == 0
    t = time_graph(g, hw)
    weight_s = passes * 128256 * 2048 * 4 / 10e9
    act_s = (head.act_read_bytes + head.act_write_bytes) / 10e9
    assert t.compute_s[i] == pytest.approx(head.flops / 100e9)
    assert t.time_s[i] == pytest.approx(weight_s + act_s + 5e-6)
    # Decode's [B, 1, H] is contiguous: one GEMM, at the table's rate for M = batch.
    d = build_model_graph(spec, w.decode_pass(16), w)
    j = d.index["lm_head"]
    assert kernel_plan("hf-eager", d.ops).gemv_rows[j] == 0
    assert time_graph(d, hw).compute_s[j] > d.ops[j].flops / 100e9 / 0.21


def test_weight_stream_k_sets_the_rate_of_gemm_weights_by_reduction_width():
    # Main memory 10 GB/s; weights with K = 1024 stream at 0.8x, K = 8192 at 1.6x. Decode's q_proj
    # (K = 2048, a third of the way in log K: 0.8 + 0.8 / 3) streams its weight at that factor and
    # its activations at the bandwidth; down_proj (K = 8192) at 1.6x; a norm (no weights) unchanged.
    table = {"fp32": [[1024, 0.8], [8192, 1.6]]}
    hw = HardwareSpec.from_dict({**CPU, "efficiency": {"weight_stream_k": table}})
    assert hw.weight_stream_k("fp32") == ((1024.0, 0.8), (8192.0, 1.6)) and hw.weight_stream_k("bf16") == ()
    d = _layer("fp32", phase="decode", context=64)
    t, plain = time_graph(d, hw), time_graph(d, _hw())
    q, down, norm = (d.index[f"layers.0.{name}"] for name in ("self_attn.q_proj", "mlp.down_proj", "input_layernorm"))
    f_q = 0.8 + 0.8 * np.log(2) / np.log(8)
    w = d.ops[q].weight_bytes
    assert w == 2048 * 2048 * 4
    rest = d.ops[q].act_read_bytes + d.ops[q].act_write_bytes
    assert t.memory_s[q] == pytest.approx(w / (10e9 * f_q) + rest / 10e9)
    assert t.memory_s[down] == pytest.approx(d.ops[down].weight_bytes / 16e9 + (
        d.ops[down].act_read_bytes + d.ops[down].act_write_bytes) / 10e9)
    assert t.memory_s[norm] == pytest.approx(plain.memory_s[norm])
    # bf16 weights have no table here: unchanged
    b = _layer("bf16", phase="decode", context=64)
    assert time_graph(b, hw).memory_s[b.index["layers.0.self_attn.q_proj"]] == pytest.approx(
        time_graph(b, _hw()).memory_s[b.index["layers.0.self_attn.q_proj"]])
    # every cost model applies it to the weights' main-memory traffic
    for model in ("tiling", "hierarchical"):
        assert time_graph(d, hw, model).memory_s[q] < time_graph(d, _hw(), model).memory_s[q]
        assert time_graph(d, hw, model).memory_s[down] < time_graph(d, hw, model).memory_s[q] * 4 / 1.5


def test_activation_stream_speeds_up_only_ops_beyond_the_cache_by_hand():
    # Main memory 10 GB/s, elementwise streams at 2x. A 64 MiB hidden state (8192 tokens) does not fit the
    # 32 MiB L3: the eager norm's 28N bytes stream at 20 GB/s, its weight at 10, and no read for ownership
    # (the streaming rate includes it). At 64 tokens the same norm fits: unchanged (24N in cache, the output's
    # 4N and its read for ownership at 10 GB/s).
    eager = {"kernels": "hf-eager", "activations_in_cache": True, "cold_outputs": True}
    hw = HardwareSpec.from_dict({**CPU, "execution": eager, "efficiency": {"activation_stream": 2.0}})
    big, small = _layer("fp32", prompt_len=8192), _layer("fp32", prompt_len=64)
    i = big.index["layers.0.input_layernorm"]
    n = 8192 * 2048
    assert time_graph(big, hw).memory_s[i] == pytest.approx(28 * n / 20e9 + big.ops[i].weight_bytes / 10e9)
    assert time_graph(small, hw).time_s[i] == pytest.approx(time_graph(small, _hw(**eager)).time_s[i])
    # A GEMM's weights keep their rate; its activations beyond the cache stream at 2x.
    q = big.index["layers.0.self_attn.q_proj"]
    op = big.ops[q]
    assert time_graph(big, hw).memory_s[q] == pytest.approx(
        op.weight_bytes / 10e9 + (op.act_read_bytes + op.act_write_bytes) / 20e9)
    # The fused default profile: every op whose activations exceed the L3 streams at 2x.
    fused = HardwareSpec.from_dict({**CPU, "efficiency": {"activation_stream": 2.0}})
    add = big.index["layers.0.residual_attn"]
    assert time_graph(big, fused).memory_s[add] == pytest.approx(time_graph(big, _hw()).memory_s[add] / 2)
    assert time_graph(small, fused).memory_s[add] == pytest.approx(time_graph(small, _hw()).memory_s[add])
    # Every cost model applies it; none is slower for it.
    for model in ("roofline", "tiling", "hierarchical"):
        fast, slow = time_graph(big, hw, model).time_s, time_graph(big, _hw(**eager), model).time_s
        assert np.all(fast <= slow * (1 + 1e-12)) and fast[i] < slow[i]
    with pytest.raises(HardwareSpecError, match="activation_stream"):
        HardwareSpec.from_dict({**CPU, "efficiency": {"activation_stream": 0.0}})


@pytest.mark.parametrize("table", [{"fp32": [[8192, 1.2], [1024, 0.8]]}, {"fp32": [[1024, 0.0]]},
                                   {"fp32": [[1024, 5.0]]}, {"fp32": []}])
def test_a_bad_weight_stream_table_is_refused(table):
    from layerscope.errors import HardwareSpecError

    with pytest.raises(HardwareSpecError, match="weight_stream_k"):
        HardwareSpec.from_dict({**CPU, "efficiency": {"weight_stream_k": table}})


def test_module_calls_cost_each_eager_op_its_python_calls():
    # hf-eager with 20 us per module call: a projection and a norm pay one call, the gated activation
    # two (the MLP's and its act_fn's), each residual add half of the decoder layer's; RoPE and the
    # KV write none. Fused kernels run no Python per op: no module time even when set.
    eager = _hw(kernels="hf-eager", module_call_s=20e-6)
    g = _layer("fp32", phase="decode", context=64)
    t, base = time_graph(g, eager), time_graph(g, _hw(kernels="hf-eager"))
    extra = {name: t.overhead_s[g.index[f"layers.0.{name}"]] - base.overhead_s[g.index[f"layers.0.{name}"]]
             for name in ("self_attn.q_proj", "input_layernorm", "mlp.act_mul", "residual_attn", "self_attn.rope",
                          "self_attn.kv_write", "self_attn.attn")}
    assert extra == pytest.approx({"self_attn.q_proj": 20e-6, "input_layernorm": 20e-6, "mlp.act_mul": 40e-6,
                                   "residual_attn": 10e-6, "self_attn.rope": 0.0, "self_attn.kv_write": 0.0,
                                   "self_attn.attn": 20e-6})
    assert np.allclose(t.time_s - base.time_s, t.overhead_s - base.overhead_s)
    fused = time_graph(g, _hw(kernels="fused", module_call_s=20e-6))
    assert np.allclose(fused.overhead_s, time_graph(g, _hw()).overhead_s)
    assert kernel_plan("fused", g.ops).module_calls.sum() == 0


def test_routed_experts_stream_each_projection_at_its_own_reduction_width():
    # Qwen3-30B-A3B decode: gate-up (2/3 of the experts' bytes) reduces over the hidden size 2048,
    # down (1/3) over the expert width 768. Table: K = 512 at 0.5x, K = 2048 at 1.0x (log-linear):
    # K = 768 is log(1.5)/log(4) of the way, 0.5 + 0.5 * 0.2925 = 0.646x.
    table = {"fp32": [[512, 0.5], [2048, 1.0]]}
    hw = HardwareSpec.from_dict({**CPU, "efficiency": {"weight_stream_k": table}})
    spec = load_model_spec("qwen3-30b-a3b")
    w = make_workload(phase="decode", weight_dtype="fp32", act_dtype="fp32", kv_dtype="fp32", context=64)
    g = build_layer_graph(spec, w.passes()[0], w, 0)
    ex = g.index["layers.0.mlp.experts"]
    assert g.ops[ex].attr("expert_intermediate") == 768 and g.ops[ex].gemm.k == 2048
    f_down = 0.5 + 0.5 * np.log(768 / 512) / np.log(4)
    f = 1 / ((2 / 3) / 1.0 + (1 / 3) / f_down)
    wb = g.ops[ex].weight_bytes
    rest = g.ops[ex].act_read_bytes + g.ops[ex].act_write_bytes
    assert time_graph(g, hw).memory_s[ex] == pytest.approx(wb / (10e9 * f) + rest / 10e9)
    # The router (K = 2048) streams at its own K's factor, unblended.
    r = g.index["layers.0.mlp.gate"]
    assert time_graph(g, hw).memory_s[r] == pytest.approx(time_graph(g, _hw()).memory_s[r])


def test_hf_eager_experts_run_transformers_grouped_mm_kernels_whatever_they_hit():
    spec = load_model_spec("qwen3-30b-a3b")
    for phase, kw in (("decode", {"context": 64}), ("prefill", {"prompt_len": 512})):
        w = make_workload(phase=phase, weight_dtype="fp32", act_dtype="fp32", kv_dtype="fp32", **kw)
        g = build_layer_graph(spec, w.passes()[0], w, 0)
        plan = kernel_plan("hf-eager", g.ops)
        assert plan.launches[g.index["layers.0.mlp.experts"]] == 17
        assert plan.launches[g.index["layers.0.mlp.topk"]] == 5
        # Two _grouped_mm calls, each looping over all 128 experts; nothing else loops over groups.
        assert plan.grouped_mm_groups[g.index["layers.0.mlp.experts"]] == 256
        assert plan.grouped_mm_groups.sum() == 256


def test_grouped_mm_groups_cost_the_experts_op_their_host_loop():
    # 1.2 us per group on an hf-eager CPU: Qwen3-30B-A3B's experts op pays 2 x 128 x 1.2 us in its
    # overhead, in decode and prefill alike; other ops and fused kernels pay nothing.
    spec = load_model_spec("qwen3-30b-a3b")
    w = make_workload(phase="decode", weight_dtype="fp32", act_dtype="fp32", kv_dtype="fp32", context=64)
    g = build_layer_graph(spec, w.passes()[0], w, 0)
    t = time_graph(g, _hw(kernels="hf-eager", grouped_mm_group_s=1.2e-6))
    base = time_graph(g, _hw(kernels="hf-eager"))
    ex = g.index["layers.0.mlp.experts"]
    extra = t.overhead_s - base.overhead_s
    assert extra[ex] == pytest.approx(256 * 1.2e-6)
    assert np.count_nonzero(extra) == 1 and np.allclose(t.time_s - base.time_s, extra)
    fused = time_graph(g, _hw(kernels="fused", grouped_mm_group_s=1.2e-6))
    assert np.allclose(fused.overhead_s, time_graph(g, _hw()).overhead_s)


def _two_layer_decode(context_len: int = 64):
    spec = load_model_spec("llama-3.2-1b").model_copy(update={"num_layers": 2})
    w = make_workload(phase="decode", weight_dtype="fp32", act_dtype="fp32", kv_dtype="fp32", context=context_len)
    return spec, w, build_model_graph(spec, w.passes()[0], w)


def test_code_roles_and_reuse_distances_by_hand():
    # An op's code last ran at the same op of the layer before (layer 0's: the last layer's, one forward
    # earlier); an op the forward runs once last ran one forward earlier: the whole forward's bytes.
    _, _, g = _two_layer_decode()
    assert code_role(g.ops[g.index["layers.1.input_layernorm"]]) == "layers.#.input_layernorm"
    prev = previous_same_role(g.ops)
    l0, l1 = g.index["layers.0.input_layernorm"], g.index["layers.1.input_layernorm"]
    head = g.index["lm_head"]
    assert prev[l1] == l0 and prev[l0] == l1 and prev[head] == head
    moved = np.array([op.weight_bytes + op.act_read_bytes + op.act_write_bytes + op.kv_read_bytes
                      + op.kv_write_bytes for op in g.ops], dtype=np.float64)
    reuse = reuse_bytes(prev, moved)
    assert reuse[l1] == pytest.approx(moved[l0:l1].sum())  # layer 0 from its norm on
    assert reuse[l0] == pytest.approx(moved[l1:].sum() + moved[:l0].sum())  # wraps past lm_head
    assert reuse[head] == pytest.approx(moved.sum())
    # Stacked work (a sweep's or decode steps' features): each row on its own bytes.
    assert np.allclose(reuse_bytes(prev, np.stack([moved, 2 * moved])), [reuse, 2 * reuse])
    # Across decode steps, one step's op follows the previous step's.
    spec, w, _ = _two_layer_decode()
    steps = build_steps_graph(spec, w, 2)
    p2 = previous_same_role(steps.ops)
    assert p2[steps.index["decode_step_1.lm_head"]] == steps.index["decode_step_0.lm_head"]


def test_cold_costs_by_reuse_distance_by_hand():
    # Points at 1 MiB (1 us a kernel, 10 us a module call) and 1 GiB (4 us, 40 us): an op pays, per kernel
    # and per module call, the values at its reuse distance interpolated in log bytes, held at the ends.
    mib = 1024.0**2
    _, _, g = _two_layer_decode()
    hw = _hw(kernels="hf-eager", module_call_s=99e-6, cold_by_reuse=COLD_POINTS)
    t, bare = time_graph(g, hw), time_graph(g, _hw(kernels="hf-eager"))
    plan = kernel_plan("hf-eager", g.ops)
    moved = np.array([op.weight_bytes + op.act_read_bytes + op.act_write_bytes + op.kv_read_bytes
                      + op.kv_write_bytes for op in g.ops], dtype=np.float64)
    reuse = reuse_bytes(previous_same_role(g.ops), moved)
    x = np.clip(np.log(reuse / mib) / np.log(1024), 0.0, 1.0)
    expected = plan.launches * (1e-6 + 3e-6 * x) + plan.module_calls * (10e-6 + 30e-6 * x)
    assert np.allclose(t.overhead_s, expected, rtol=1e-9)
    i = g.index["layers.1.input_layernorm"]
    assert 0 < x[i] < 1 and t.overhead_s[i] == pytest.approx(6 * (1e-6 + 3e-6 * x[i]) + 10e-6 + 30e-6 * x[i])
    assert x[g.index["lm_head"]] == 1.0  # the whole forward: beyond the last point, held
    assert np.allclose(t.time_s - t.overhead_s, bare.time_s - bare.overhead_s)


def test_cold_costs_must_ascend():
    points = [{"reuse_bytes": 2.0, "kernel_s": 1e-6, "module_call_s": 0.0},
              {"reuse_bytes": 1.0, "kernel_s": 1e-6, "module_call_s": 0.0}]
    with pytest.raises(HardwareSpecError, match="cold_by_reuse: reuse_bytes must be strictly ascending"):
        _hw(kernels="hf-eager", cold_by_reuse=points)


MIB = 1024**2


def test_eager_allocations_by_hand():
    # Llama-3.2-1B fp32 prefill of 1024 tokens: H = 2048, I = 8192, 32 query and 8 KV heads of 64.
    t = 1024
    g = _layer("fp32", prompt_len=t)
    plan = kernel_plan("hf-eager", g.ops)
    allocs = {op.name: sorted(x for x in plan.alloc_bytes[i] if x > 0) for i, op in enumerate(g.ops)}
    n = 4 * t * 2048  # one fp32 hidden-sized tensor
    assert allocs["layers.0.input_layernorm"] == sorted([n, n, n] + [4 * t] * 3)  # pow, mul, weight mul; 3 rows
    q, k = 4 * t * 32 * 64, 4 * t * 8 * 64
    assert allocs["layers.0.self_attn.rope"] == sorted([q, q / 2, q, q, q, k, k / 2, k, k, k])
    assert allocs["layers.0.self_attn.attn"] == [q, q]  # SDPA's output and its contiguous copy
    assert allocs["layers.0.self_attn.kv_write"] == []  # the cache's cat: left out (grows with the context)
    assert allocs["layers.0.mlp.act_mul"] == [4 * t * 8192] * 2  # act(gate), * up: 32 MiB each
    assert allocs["layers.0.mlp.gate_proj"] == [4 * t * 8192]
    fused = kernel_plan("fused", g.ops)
    assert [sorted(x for x in row if x > 0) for row in fused.alloc_bytes] == \
        [sorted(float(o.nbytes) for o in op.outputs) for op in g.ops]


def test_eager_experts_allocations_by_hand():
    # Qwen3-30B-A3B bf16, 512 tokens, top-8 of 128 experts of width 768, H = 2048: S = 4096 rows.
    spec = load_model_spec("qwen3-30b-a3b")
    w = make_workload(phase="prefill", weight_dtype="bf16", act_dtype="bf16", kv_dtype="bf16", prompt_len=512)
    g = build_layer_graph(spec, w.passes()[0], w, 0)
    plan = kernel_plan("hf-eager", g.ops)
    i = g.index["layers.0.mlp.experts"]
    s, h, width = 512 * 8, 2048, 768
    expected = [2 * s * h, 2 * s * 2 * width, 2 * s * width, 2 * s * width, 2 * s * h, 2 * s * h, 2 * s * h,
                2 * 512 * h] + [8 * s] * 5 + [2 * s]
    assert sorted(x for x in plan.alloc_bytes[i] if x > 0) == sorted(expected)


def test_fresh_pages_charge_large_allocations_by_hand():
    # 1024 tokens: the activation's two 32 MiB outputs fault (2 x 32 MiB x 150 us/MiB = 9.6 ms of host time)
    # and its output skips the read for ownership (32 MiB at 10 GB/s); the 16 MiB pow/mul of the norms and
    # the 8 MiB q do not fault at a 32 MiB threshold.
    per_byte = 150e-6 / MIB
    g = _layer("fp32", prompt_len=1024)
    base = time_graph(g, _hw(kernels="hf-eager", cold_outputs=True))
    hw = _hw(kernels="hf-eager", cold_outputs=True, fresh_pages={"min_bytes": 32 * MIB, "s_per_byte": per_byte})
    t = time_graph(g, hw)
    act, gate = g.index["layers.0.mlp.act_mul"], g.index["layers.0.mlp.gate_proj"]
    extra = t.overhead_s - base.overhead_s
    assert extra[act] == pytest.approx(2 * 32 * MIB * per_byte)
    assert extra[gate] == pytest.approx(32 * MIB * per_byte)
    assert base.memory_s[act] - t.memory_s[act] == pytest.approx(32 * MIB / 10e9)
    faulting = {g.ops[i].name for i in np.flatnonzero(extra)}
    assert faulting == {"layers.0.mlp.act_mul", "layers.0.mlp.gate_proj", "layers.0.mlp.up_proj"}
    # below the threshold nothing changes
    small = _layer("fp32", prompt_len=512)
    plain = _hw(kernels="hf-eager", cold_outputs=True)
    assert np.allclose(time_graph(small, hw).time_s, time_graph(small, plain).time_s)


def test_fresh_page_time_counts_only_allocations_at_the_threshold_or_above():
    from layerscope.cost.models import fresh_page_s
    from layerscope.hardware.spec import FreshPages

    allocs = np.array([[32 * MIB, 31 * MIB, 0.0], [64 * MIB, 32 * MIB, 1.0], [0.0, 0.0, 0.0]])
    got = fresh_page_s(allocs, FreshPages(min_bytes=32 * MIB, s_per_byte=2e-10))
    assert got == pytest.approx([32 * MIB * 2e-10, 96 * MIB * 2e-10, 0.0])


def test_fresh_pages_refuse_the_vectorized_grid():
    # a step in the shapes: the linear basis of cost.sweep cannot carry it
    from layerscope.cost.sweep import shape_dependent

    hw = _hw(kernels="hf-eager", cold_outputs=True, fresh_pages={"min_bytes": 1.0, "s_per_byte": 1e-10})
    assert "fresh_pages" in (shape_dependent(hw, "roofline", "decode") or "")
    assert shape_dependent(_hw(kernels="fused"), "roofline", "decode") is None
