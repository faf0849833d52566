"""Cost models: registered duration models and whole-workload estimates."""

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
