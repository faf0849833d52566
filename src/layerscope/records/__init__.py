"""layerscope.records: operator workload records (flashinfer-bench definitions and workloads, per-layer
call counts) derived from the analytical graph or recorded from a run, and their verification
against a model's spec. Never imports torch."""

from layerscope.records.from_graph import records_from_spec
from layerscope.records.optypes import REGISTRY, OpType, op_type
from layerscope.records.schema import CallCount, Definition, OpCall, RecordSet, WorkloadEntry
from layerscope.records.verify import Gap, VerifyReport, expected_from_spec, verify

__all__ = [
    "REGISTRY",
    "CallCount",
    "Definition",
    "Gap",
    "OpCall",
    "OpType",
    "RecordSet",
    "VerifyReport",
    "WorkloadEntry",
    "expected_from_spec",
    "op_type",
    "records_from_spec",
    "verify",
]
