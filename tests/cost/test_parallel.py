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
