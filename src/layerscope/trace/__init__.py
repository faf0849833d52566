"""Traces: writers (Chrome JSON, Perfetto protobuf), readers, the simulate orchestration and a
one-file server for ui.perfetto.dev."""

from layerscope.trace.serve import PERFETTO_UI_ORIGIN, TraceServer, open_in_perfetto
from layerscope.trace.writers import (
    TRACE_WRITERS,
    TraceMetadata,
    trace_format,
    write_schedule_trace,
)

__all__ = [
    "PERFETTO_UI_ORIGIN",
    "TRACE_WRITERS",
    "TraceMetadata",
    "TraceServer",
    "open_in_perfetto",
    "trace_format",
    "write_schedule_trace",
]
