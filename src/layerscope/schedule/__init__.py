"""Scheduling timed op graphs on N compute engines that share memory bandwidth; engine sweeps.

See :mod:`layerscope.schedule.core` for the model and its assumptions.
"""

from layerscope.schedule.core import (
    POLICIES,
    Dispatch,
    EngineChoice,
    EngineSet,
    Schedule,
    ScheduleProblem,
    SchedulingPolicy,
    get_policy,
    register_policy,
    schedule,
    standalone_ns,
    upward_rank,
)
from layerscope.schedule.sweep import Sweep, parse_engine_counts, sweep_engines

__all__ = [
    "POLICIES",
    "Dispatch",
    "EngineChoice",
    "EngineSet",
    "Schedule",
    "ScheduleProblem",
    "SchedulingPolicy",
    "Sweep",
    "get_policy",
    "parse_engine_counts",
    "register_policy",
    "schedule",
    "standalone_ns",
    "sweep_engines",
    "upward_rank",
]
