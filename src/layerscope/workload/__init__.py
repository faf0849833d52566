"""Workloads: phases, batch, lengths, dtypes and parallelism."""

from layerscope.workload.workload import (
    PHASES,
    ForwardPass,
    Phase,
    SequenceGroup,
    Workload,
    make_workload,
)

__all__ = ["PHASES", "ForwardPass", "Phase", "SequenceGroup", "Workload", "make_workload"]
