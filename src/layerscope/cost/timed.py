"""``TimedGraph``: an op graph with a duration per op, the output of every cost model.

Durations are split so the scheduler can re-time ops on engines that own a fraction of the
chip's compute and share its memory bandwidth: an op's time on the whole chip is
``max(compute_s, memory_s) + overhead_s`` for the roofline model (other models combine the
parts their own way and report the result in ``time_s``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from layerscope.graph.ops import OpGraph
from layerscope.hardware.spec import HardwareSpec


@dataclass(frozen=True)
class TimedGraph:
    """Per-op times (arrays aligned with ``graph.ops``), all in float seconds."""

    graph: OpGraph
    hardware: HardwareSpec
    cost_model: str
    compute_s: np.ndarray
    """Time of the op's arithmetic on the whole chip at achievable throughput."""
    memory_s: np.ndarray
    """Time of the op's main-memory traffic at the chip's achievable bandwidth."""
    overhead_s: np.ndarray
    """Fixed per-op cost (kernel launch)."""
    time_s: np.ndarray
    """The model's duration of the op on the whole chip."""
    memory_bytes: np.ndarray
    """Bytes the model says move to/from main memory (after cache reuse, for tiling models)."""
    bound: tuple[str, ...]
    """Per op ``compute``, ``memory`` or ``overhead``: which term sets the time."""

    def __len__(self) -> int:
        return len(self.graph.ops)

    @property
    def total_s(self) -> float:
        return float(self.time_s.sum())
