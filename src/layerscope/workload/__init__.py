"""Workloads: phases, batch, lengths, dtypes and parallelism."""

from layerscope.workload.workload import (
    PHASES,
    ForwardPass,
    Phase,
    SequenceGroup,
    Workload,
    check_parallel,
    check_tensor_parallel,
    context_warnings,
    make_workload,
)

__all__ = ["PHASES", "ForwardPass", "Phase", "SequenceGroup", "Workload", "check_parallel", "check_tensor_parallel",
           "context_warnings", "make_workload"]
