"""Parallel plans (#28): hand-checked volumes, memory per device, the pipeline's arithmetic, and properties."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from layerscope.cost.api import PipelineTimes, estimate, memory_footprint, op_stages
from layerscope.cost.collectives import stage_send_crosses_node
from layerscope.errors import WorkloadError
from layerscope.graph.builder import build_model_graph
from layerscope.graph.moe import busiest_rank_assignments
from layerscope.hardware import load_hardware
from layerscope.model import load_model_spec
from layerscope.model.params import param_counts
from layerscope.workload import check_parallel, make_workload
from layerscope.workload.workload import pipeline_stages


@pytest.fixture(scope="module")
def llama8b():
    return load_model_spec("llama-3.1-8b")


@pytest.fixture(scope="module")
def qwen_moe():
    return load_model_spec("qwen3-30b-a3b")


@pytest.mark.parametrize(("fields", "words"), [
    ({"tensor_parallel": 3}, "does not divide the 32 attention heads"),
    ({"pipeline_parallel": 64}, "exceeds the 32 layers"),
    ({"expert_parallel": 2, "data_parallel": 2, "batch": 2}, "dense model"),
])
def test_check_parallel_names_the_broken_constraint(llama8b, fields, words) -> None:
    with pytest.raises(WorkloadError, match=words):
        check_parallel(llama8b, make_workload(phase="decode", **fields))


def test_expert_parallel_constraints(qwen_moe) -> None:
    with pytest.raises(WorkloadError, match="does not divide the 128 routed experts"):
        check_parallel(qwen_moe, make_workload(phase="decode", batch=3, data_parallel=3, expert_parallel=3))
    with pytest.raises(WorkloadError, match="must divide the devices of a pipeline stage"):
        check_parallel(qwen_moe, make_workload(phase="decode", batch=2, data_parallel=2, expert_parallel=4))
    with pytest.raises(WorkloadError, match="data_parallel=4 replicas need at least as many sequences"):
        make_workload(phase="decode", batch=2, data_parallel=4)


def test_pipeline_stages_are_consecutive_and_even() -> None:
    assert pipeline_stages(32, 4) == (range(0, 8), range(8, 16), range(16, 24), range(24, 32))
    stages = pipeline_stages(61, 4)  # DeepSeek-V3's 61 layers
    assert [len(s) for s in stages] == [15, 15, 15, 16]
    assert sum(len(s) for s in stages) == 61 and stages[0].start == 0 and stages[-1].stop == 61


def test_busiest_rank_is_raab_steger_first_order() -> None:
    # 32 tokens per rank, top-8, 8 ranks: mean 256 assignments, busiest 256 + sqrt(2·256·ln 8)
    assert busiest_rank_assignments(32, 8, 8, 32) == pytest.approx(256 + math.sqrt(2 * 256 * math.log(8)))
    assert busiest_rank_assignments(32, 8, 1, 256) == 256  # one rank holds everything
    # capped by what one rank can receive: every token of the group, min(k, local experts) times
    assert busiest_rank_assignments(1, 8, 64, 1) <= 64


def test_ep_all_to_all_bytes_per_gpu(qwen_moe) -> None:
    # issue #28: tokens × top-k × hidden × bytes × (ep−1)/ep, the dispatch's and the combine's
    w = make_workload(phase="prefill", batch=4, prompt_len=256, data_parallel=4, expert_parallel=4)
    g = build_model_graph(qwen_moe, w.passes()[0], w)
    tokens, k, hidden, ep = 256, qwen_moe.moe.num_experts_per_tok, qwen_moe.hidden_size, 4
    for name in ("layers.3.mlp.dispatch", "layers.3.mlp.combine"):
        op = next(o for o in g.ops if o.name == name)
        assert op.attr("collective") == "all_to_all" and op.attr("gpus") == ep
        assert op.comm_bytes == tokens * k * hidden * 2 * (ep - 1) // ep
    experts = next(o for o in g.ops if o.name == "layers.3.mlp.experts")
    assert experts.attr("num_experts") == 128 // ep
    assert experts.attr("expert_intermediate") == qwen_moe.moe.expert_intermediate_size  # whole experts


def test_pipeline_sends_between_stages(llama8b) -> None:
    w = make_workload(phase="prefill", batch=2, prompt_len=128, pipeline_parallel=4)
    g = build_model_graph(llama8b, w.passes()[0], w)
    sends = [o for o in g.ops if o.name.endswith("pp_send")]
    assert [o.layer for o in sends] == [7, 15, 23]
    assert all(o.attr("message_bytes") == 2 * 128 * 4096 * 2 for o in sends)
    stages = op_stages(g, llama8b, 4)
    assert stages[0] == 0 and stages[-1] == 3  # embedding on the first stage, sampling on the last
    assert np.all(np.diff(stages) >= 0)


@pytest.mark.parametrize(("stage", "stage_gpus", "domain", "crosses"), [
    (0, 8, 8, True),     # one node per stage: every send leaves the node
    (0, 2, 8, False),    # stages 0 and 1 share a node
    (3, 2, 8, True),     # GPUs 6,7 -> 8,9
    (0, 4, None, False),  # no domain limit
])
def test_stage_send_placement(stage, stage_gpus, domain, crosses) -> None:
    assert stage_send_crosses_node(stage, stage_gpus, domain) is crosses


@pytest.mark.parametrize(("p", "m"), [(2, 1), (4, 4), (4, 8), (8, 3)])
def test_bubble_of_equal_stages(p, m) -> None:
    pipe = PipelineTimes(np.full(p, 1e-3), m, first=True)
    assert pipe.bubble_fraction == pytest.approx((p - 1) / (m + p - 1))
    assert pipe.time_s == pytest.approx((m + p - 1) * 1e-3)
    decode = PipelineTimes(np.full(p, 1e-3), m, first=False)
    assert decode.time_s == pytest.approx(max(p, m) * 1e-3)


def test_tensor_parallel_weights_hand_checked(llama8b) -> None:
    # Megatron split: everything but the norms divided by tp; norms (2 per layer + the final one) whole
    counts = param_counts(llama8b)
    w = make_workload(phase="decode", tensor_parallel=2)
    g = build_model_graph(llama8b, w.passes()[0], w)
    mem = memory_footprint(llama8b, w, [g])
    expected = ((counts.total - counts.norms) / 2 + counts.norms) * 2  # bf16
    assert mem.weights == pytest.approx(expected, rel=1e-9)


@settings(max_examples=25, deadline=None)
@given(model=st.sampled_from(["llama-3.1-8b", "qwen3-30b-a3b", "mixtral-8x7b-v0.1"]), low=st.sampled_from([1, 2, 4]),
       pp=st.sampled_from([1, 2, 4]))
def test_more_tp_never_raises_weight_bytes(model, low, pp) -> None:
    spec = load_model_spec(model)
    high = low * 2
    weights = []
    for tp in (low, high):
        w = make_workload(phase="decode", tensor_parallel=tp, pipeline_parallel=pp)
        g = build_model_graph(spec, w.passes()[0], w)
        weights.append(memory_footprint(spec, w, [g]).weights)
    assert weights[1] <= weights[0]


def test_pipeline_estimate_matches_its_stage_sum(llama8b) -> None:
    hw = load_hardware("h100-sxm")
    one = estimate(llama8b, hw, make_workload(phase="prefill", batch=4, prompt_len=512))
    piped = estimate(llama8b, hw, make_workload(phase="prefill", batch=4, prompt_len=512, pipeline_parallel=2))
    pipe = piped.pipeline["prefill"]
    # one micro-batch: the stages run one after the other, the sends added
    assert pipe.time_s == pytest.approx(float(pipe.stage_times_s.sum()))
    assert piped.ttft_s > one.ttft_s  # the send costs time, nothing overlaps
    assert piped.memory.weights < one.memory.weights


def test_deepseek_v3_tp8_weights_match_its_published_deployment() -> None:
    """DeepSeek-V3 (the FP8 checkpoint) served TP8 on 8 H200s.

    Published: the checkpoint's safetensors hold 641.30 GiB (the Hub's file sizes, as llm-cal reads them:
    https://flytomelight.github.io/llm-cal/models/deepseek-ai-deepseek-v3-h100/), of which the main model is
    671B of the 685B parameters (DeepSeek-V3 README: "671B of the Main Model weights and 14B of the Multi-Token
    Prediction (MTP) Module weights"), so TP8 holds 641.30 × 671/685 / 8 = 78.5 GiB per GPU; and SGLang's log of
    that deployment (sgl-project/sglang#3416, 8x H200, tp 8) found 58.12 GiB free after loading on a GPU of
    143771 MiB (140.4 GiB), so weights and the CUDA context took at most 82.3 GiB."""
    spec = load_model_spec("deepseek-v3")
    w = make_workload(phase="decode", batch=1, context=1024, tensor_parallel=8)
    g = build_model_graph(spec, w.passes()[0], w)
    weights_gib = memory_footprint(spec, w, [g]).weights / 2**30
    assert weights_gib == pytest.approx(641.30 * 671 / 685 / 8, rel=0.02)
    assert weights_gib < 143771 / 1024 - 58.12


def test_communication_buffers_per_communicator(llama8b) -> None:
    from layerscope.cost.api import NCCL_BUFFER_BYTES, NCCL_CHANNELS, communication_buffer_bytes

    one = 2 * NCCL_CHANNELS * NCCL_BUFFER_BYTES
    assert communication_buffer_bytes(make_workload(phase="decode")) == 0
    assert communication_buffer_bytes(make_workload(phase="decode", tensor_parallel=8)) == one
    assert communication_buffer_bytes(make_workload(phase="decode", tensor_parallel=2, pipeline_parallel=4)) == 2 * one
    w = make_workload(phase="decode", tensor_parallel=2)
    mem = memory_footprint(llama8b, w, [build_model_graph(llama8b, w.passes()[0], w)])
    assert mem.total == pytest.approx(mem.weights + mem.kv_cache + mem.activations + one)


def test_sequence_parallel_moves_the_all_reduce_bytes_as_reduce_scatter_plus_all_gather(llama8b) -> None:
    # Korthikanti et al. 2022 §4.2.2: an all-reduce is a reduce-scatter and an all-gather, the same bytes on
    # the wire; norms and residual adds run on T/tp rows
    graphs = {}
    for sp in (False, True):
        w = make_workload(phase="prefill", batch=2, prompt_len=512, tensor_parallel=4, sequence_parallel=sp)
        graphs[sp] = build_model_graph(llama8b, w.passes()[0], w)
    wire = {sp: sum(o.comm_bytes for o in g.ops if o.kind == "communication" and o.layer == 3)
            for sp, g in graphs.items()}
    message = 1024 * 4096 * 2  # T x hidden in bf16
    assert wire[True] == wire[False] == 2 * (2 * 3 * message // 4)  # two all-reduces a layer, 2(p-1)/p each
    kinds = [o.attr("collective") for o in graphs[True].ops if o.kind == "communication" and o.layer == 3]
    assert kinds == ["all_gather", "reduce_scatter", "all_gather", "reduce_scatter"]
    norms = [o for o in graphs[True].ops if o.kind == "norm" and o.layer == 3]
    assert all(o.outputs[0].shape[0] == 1024 // 4 for o in norms)
    adds = [o for o in graphs[True].ops if o.kind == "residual_add" and o.layer == 3]
    assert all(o.outputs[0].shape[0] == 1024 // 4 for o in adds)
    with pytest.raises(WorkloadError, match="needs tensor_parallel > 1"):
        make_workload(phase="prefill", sequence_parallel=True)


def test_two_batch_overlap_hand_computed(qwen_moe) -> None:
    """Layer time 2·max(c, m) over one micro-batch's ops: with every compute op at 1 µs and every communication
    op at 3 µs, a layer of C compute and K communication ops takes 2·max(C, 3K) µs; outside the layers twice."""
    from dataclasses import replace as dc_replace

    from layerscope.cost.api import overlapped_time_s

    hw = load_hardware("dgx-h100")
    w = make_workload(phase="prefill", batch=4, prompt_len=128, data_parallel=2, expert_parallel=2,
                      two_batch_overlap=True)
    est = estimate(qwen_moe, hw, w)
    part = est.phases[0]
    comm = np.array([op.kind == "communication" for op in part.graph.ops])
    fake = dc_replace(part, time_s=np.where(comm, 3e-6, 1e-6))
    expected = 0.0
    for layer in range(qwen_moe.num_layers):
        ops = [op for op in part.graph.ops if op.layer == layer]
        c = sum(op.kind != "communication" for op in ops) * 1e-6
        m = sum(op.kind == "communication" for op in ops) * 3e-6
        expected += 2 * max(c, m)
    expected += 2 * sum(op.layer is None for op in part.graph.ops) * 1e-6
    assert overlapped_time_s(fake, first=True) == pytest.approx(expected)
    # the estimate's prefill is that formula on the real times, and the graph is one micro-batch (a sequence)
    assert est.phase_times_s["prefill"] == pytest.approx(overlapped_time_s(part, first=True))
    assert next(op for op in part.graph.ops if op.kind == "norm").outputs[0].shape[0] == 128
    with pytest.raises(WorkloadError, match="at least 2 sequences per replica"):
        make_workload(phase="prefill", batch=2, data_parallel=2, two_batch_overlap=True)


def test_two_batch_overlap_hides_communication_of_a_prefill() -> None:
    spec = load_model_spec("deepseek-v3")
    hw = load_hardware("hgx-h200")
    times = {}
    for tbo in (False, True):
        w = make_workload(phase="prefill", batch=16, prompt_len=2048, weight_dtype="fp8", data_parallel=8,
                          expert_parallel=8, two_batch_overlap=tbo)
        times[tbo] = estimate(spec, hw, w).ttft_s
    assert times[True] < times[False]


def test_vocab_parallel_embedding_and_logits(llama8b) -> None:
    # Megatron's VocabParallelEmbedding: vocab/tp rows per device, partial embeddings all-reduced;
    # lm_head's vocab/tp logits all-gathered before sampling over the whole vocabulary
    w = make_workload(phase="decode", batch=4, context=128, tensor_parallel=4)
    g = build_model_graph(llama8b, w.passes()[0], w)
    by_name = {o.name: o for o in g.ops}
    emb = by_name["embed_tokens"]
    assert emb.inputs[1].shape == (128256 // 4, 4096)
    reduce = by_name["embed_tokens.all_reduce"]
    assert reduce.attr("collective") == "all_reduce" and reduce.comm_bytes == 2 * 3 * (4 * 4096 * 2) // 4
    gather = by_name["lm_head.all_gather"]
    assert gather.attr("message_bytes") == 4 * 128256 * 2
    assert by_name["sampling"].flops == 4 * 128256
