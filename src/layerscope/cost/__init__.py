"""Cost models: registered duration models and whole-workload estimates."""

from typing import TYPE_CHECKING

from layerscope.lazy import lazy_exports

if TYPE_CHECKING:
    from layerscope.cost.api import Estimate, MemoryFootprint, OpEstimate, estimate, time_graph
    from layerscope.cost.models import COST_MODELS, CostArrays, get_cost_model
    from layerscope.cost.timed import TimedGraph

__all__ = [
    "COST_MODELS",
    "CostArrays",
    "Estimate",
    "MemoryFootprint",
    "OpEstimate",
    "TimedGraph",
    "estimate",
    "get_cost_model",
    "time_graph",
]

__getattr__, __dir__ = lazy_exports(__name__, {
    "layerscope.cost.api": ("Estimate", "MemoryFootprint", "OpEstimate", "estimate", "time_graph"),
    "layerscope.cost.models": ("COST_MODELS", "CostArrays", "get_cost_model"),
    "layerscope.cost.timed": ("TimedGraph",),
})
