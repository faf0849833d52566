"""The exception hierarchy of layerscope.

Every error a user can cause derives from :class:`LayerscopeError`; the CLI turns any of them
into a one-line message and exit code 2. Messages name the field, the value and what is allowed.
"""

from __future__ import annotations


class LayerscopeError(Exception):
    """Base class of every error layerscope raises on bad input."""


class ConfigError(LayerscopeError):
    """A model configuration (HF ``config.json``) is missing, unreadable or inconsistent."""


class HardwareSpecError(LayerscopeError):
    """A hardware specification (preset, YAML/JSON/CSV/XLSX sheet) is invalid."""


class WorkloadError(LayerscopeError):
    """A workload (phase, batch, lengths, dtypes, parallelism) is invalid."""


class GraphError(LayerscopeError):
    """An operator graph is malformed (cycle, tensor produced twice, missing producer)."""


class CostModelError(LayerscopeError):
    """A cost model cannot time an op (unknown model name, missing hardware figure)."""


class ScheduleError(LayerscopeError):
    """A schedule cannot be built (unknown policy, bad engine count)."""


class TraceError(LayerscopeError):
    """A trace file cannot be read or written."""


class CaptureError(LayerscopeError):
    """A real-model capture cannot run (no torch, no GPU, model too big, missing checkpoint)."""


class AnalysisError(LayerscopeError):
    """A query or report over a trace failed."""


class RecordsError(LayerscopeError):
    """Operator workload records cannot be built, read or verified (bad record files, unknown op type)."""


class OutputError(LayerscopeError):
    """An output path is unusable (would overwrite an input, directory missing)."""
