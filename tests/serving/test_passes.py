"""Two-layer graphs standing for whole ones: the same op times and joules, bit for bit, where the layers repeat."""

from __future__ import annotations

import numpy as np
import pytest

from layerscope.cost.features import op_features
from layerscope.cost.models import get_cost_model
from layerscope.graph import build_model_graph
from layerscope.hardware import load_hardware
from layerscope.model import load_model_spec
from layerscope.serving.energy import StepEnergy
from layerscope.serving.passes import layers_repeat, same_pass, two_layer_graph, whole_order
from layerscope.serving.timer import StepTimer
from layerscope.workload import ForwardPass, SequenceGroup, Workload, make_workload

PASSES = [((1, 1, 0),), ((64, 1, 1),), ((7, 1, 1024),), ((1, 8192, 0),), ((1, 300, 5000),), ((2, 100, 7), (30, 1, 600))]


def _fwd(groups: tuple[tuple[int, int, int], ...]) -> ForwardPass:
    return ForwardPass(groups=tuple(SequenceGroup(count=c, new_tokens=n, cached_tokens=k) for c, n, k in groups))


@pytest.mark.parametrize(("model", "hardware", "plan", "cost_model"), [
    ("llama-3.1-8b", "h100-sxm", {}, "roofline"),
    ("llama-3.1-8b", "dgx-h100", {"tensor_parallel": 4, "sequence_parallel": True}, "roofline"),
    ("llama-3.2-1b", "h100-sxm", {}, "tiling"),
    ("qwen3-30b-a3b", "dgx-h100", {"tensor_parallel": 2}, "roofline"),
])
def test_two_layers_give_the_whole_graphs_op_times_bit_for_bit(model, hardware, plan, cost_model):
    spec, hw = load_model_spec(model), load_hardware(hardware)
    template = make_workload(phase="decode", batch=1, context=1, **plan)
    assert layers_repeat(spec, template)
    cost_fn = get_cost_model(cost_model)
    for groups in PASSES:
        fwd = _fwd(groups)
        whole, graph = build_model_graph(spec, fwd, template), two_layer_graph(spec, fwd, template)
        order = whole_order(graph, spec.num_layers)
        assert len(graph.ops) * 5 < len(whole.ops) == len(order)
        times = cost_fn(op_features(graph), hw).time_s
        assert same_pass(whole, cost_fn(op_features(whole), hw).time_s, graph, times, order), groups
        # and a change of one op is seen
        off = np.array(times, dtype=float)
        off[order[len(order) // 2]] *= 1 + 1e-15
        assert not same_pass(whole, cost_fn(op_features(whole), hw).time_s, graph, off, order)


def test_alternating_layers_use_whole_graphs():
    # Gemma-2 alternates sliding-window and global layers: a two-layer graph does not stand for the whole
    spec = load_model_spec("gemma-2-9b-it")
    assert not layers_repeat(spec, Workload(phase="decode"))
    assert not layers_repeat(load_model_spec("llama-3.1-8b"), make_workload(phase="decode", pipeline_parallel=2))


def test_the_timer_and_the_energy_fit_agree_with_whole_graphs(h100, monkeypatch):
    spec = load_model_spec("llama-3.2-1b")
    template = Workload(phase="decode")
    two = StepTimer(spec, h100, template)
    whole = StepTimer(spec, h100, template)
    whole._seq_ops()
    assert two._seq_ops() == whole._seq_ops() and two._two_layers
    whole._two_layers = False
    for groups in PASSES:
        assert two._parts(_fwd(groups)) == whole._parts(_fwd(groups)), groups
    steps = [([(300, 0)], np.arange(1, 40)), ([], np.full(130, 700)), ([(8192, 0)], np.zeros(0, dtype=np.int64))]
    for chunks, ctx in steps:
        assert two.fast_forward_s(chunks, len(ctx), float(ctx.sum())) == whole.fast_forward_s(
            chunks, len(ctx), float(ctx.sum()))
    fit = StepEnergy.fit(spec, h100, template)
    monkeypatch.setattr("layerscope.serving.energy.layers_repeat", lambda *_: False)
    by_whole = StepEnergy.fit(spec, h100, template)
    assert fit.coefficients.tobytes() == by_whole.coefficients.tobytes() and fit.max_error == by_whole.max_error
