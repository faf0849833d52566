"""Operator graphs: ops, tensors and the builders of layer, model and multi-step graphs."""

from typing import TYPE_CHECKING

from layerscope.lazy import lazy_exports

if TYPE_CHECKING:
    from layerscope.graph._common import linear_op
    from layerscope.graph.builder import (
        build_layer_graph,
        build_model_graph,
        build_steps_graph,
        layer_signature,
        pass_context,
    )
    from layerscope.graph.moe import expected_experts_touched
    from layerscope.graph.ops import MATRIX_CLASSES, OP_KINDS, GemmShape, Op, OpGraph, TensorSpec

__all__ = [
    "MATRIX_CLASSES",
    "OP_KINDS",
    "GemmShape",
    "Op",
    "OpGraph",
    "TensorSpec",
    "build_layer_graph",
    "build_model_graph",
    "build_steps_graph",
    "expected_experts_touched",
    "layer_signature",
    "linear_op",
    "pass_context",
]

__getattr__, __dir__ = lazy_exports(__name__, {
    "layerscope.graph._common": ("linear_op",),
    "layerscope.graph.builder": (
        "build_layer_graph", "build_model_graph", "build_steps_graph", "layer_signature", "pass_context",
    ),
    "layerscope.graph.moe": ("expected_experts_touched",),
    "layerscope.graph.ops": ("MATRIX_CLASSES", "OP_KINDS", "GemmShape", "Op", "OpGraph", "TensorSpec"),
})
