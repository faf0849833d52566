"""A forward pass's ops from a graph of its first two decoder layers, in the whole model graph's order.

Where every decoder layer has the same ops (one ``graph.builder.layer_signature``) on one pipeline stage, the
whole graph of a pass is the embedding, layer 0, layers 1 … L−1 alike, and the head (final norm, lm_head,
sampling). A cost model charges each op by its own work and by its distance from the previous op of the same
role (``cost.execution.previous_same_role``), never by its layer's index, so layers 1 … L−1 cost, op for op and
to the bit, what layer 1 costs in ``build_model_graph(spec, fwd, workload, layers=(0, 1))``: a graph of
~2/L of the ops. :func:`whole_order` maps the whole graph's ops onto it, so that a per-op array of the
two-layer graph, indexed by it, is the whole graph's array; :func:`same_pass` checks that against a whole graph,
bit for bit (the step timer and the energy fit check once and fall back to whole graphs where it fails).
"""

from __future__ import annotations

import numpy as np

from layerscope.graph import build_model_graph, layer_signature
from layerscope.graph.ops import OpGraph
from layerscope.model.spec import ModelSpec
from layerscope.workload import ForwardPass, Workload

__all__ = ["layers_repeat", "same_pass", "two_layer_graph", "whole_order"]


def layers_repeat(spec: ModelSpec, template: Workload) -> bool:
    """Whether a two-layer graph can stand for the whole one: at least three decoder layers, all of one
    signature (sliding window, MoE), on one pipeline stage (stage sends sit between layers)."""
    return (spec.num_layers >= 3 and template.pipeline_parallel == 1
            and len({layer_signature(spec, i) for i in range(spec.num_layers)}) == 1)


def two_layer_graph(spec: ModelSpec, fwd: ForwardPass, template: Workload) -> OpGraph:
    """Embedding, layers 0 and 1, head: the graph whose ops stand for the whole graph's (:func:`whole_order`)."""
    return build_model_graph(spec, fwd, template, layers=(0, 1))


def whole_order(graph: OpGraph, num_layers: int) -> np.ndarray:
    """Indices into ``graph.ops`` (a :func:`two_layer_graph`) in the whole graph's op order ([whole ops]): its ops
    up to layer 1's, then layer 1's ``num_layers − 1`` times, then the rest."""
    layer1 = [i for i, op in enumerate(graph.ops) if op.layer == 1]
    first, end = layer1[0], layer1[-1] + 1
    assert layer1 == list(range(first, end)), "layer 1's ops are not contiguous"
    return np.concatenate([np.arange(first), np.tile(np.arange(first, end), num_layers - 1),
                           np.arange(end, len(graph.ops))]).astype(np.int64)


def same_pass(whole: OpGraph, whole_values: np.ndarray, graph: OpGraph, values: np.ndarray,
              order: np.ndarray) -> bool:
    """Whether ``values`` of the two-layer ``graph`` in ``order`` equal ``whole_values`` of the whole graph bit
    for bit, op kinds aligned and the ops outside the layers named alike."""
    if len(order) != len(whole.ops):
        return False
    for op, i in zip(whole.ops, order.tolist(), strict=True):
        mine = graph.ops[i]
        if op.kind != mine.kind or (op.layer is None) != (mine.layer is None) or (
                op.layer is None and op.name != mine.name):
            return False
    expanded = np.asarray(values)[..., order]
    return expanded.shape == np.shape(whole_values) and expanded.tobytes() == np.asarray(whole_values).tobytes()
