"""Columnar trace tables shaped like Perfetto trace_processor's.

:class:`TraceTables` is what every reader returns and what the DuckDB engine
(:mod:`layerscope.analysis.engine`) loads. Each table is a :class:`pyarrow.Table` whose name and
columns follow trace_processor (``slice``, ``thread``, ``process``, ``track``, ``counter``,
``flow``, ``args``), so SQL written for Perfetto runs unchanged. All times are integer
nanoseconds (``ts``, ``dur``); ids are int64.

Two columns differ in storage from trace_processor: the ``args`` of a slice are kept as one JSON
document per arg set in ``arg_sets`` (``arg_set_id``, ``json``) and expanded into trace_processor's
``args`` shape (``arg_set_id, flat_key, key, int_value, string_value, real_value, value_type,
display_value``) by a view, which keeps ingest fast; and a slice whose end was never seen has
``dur = -1``, as in trace_processor.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

PROCESS_SCHEMA = pa.schema([
    ("upid", pa.int64()), ("pid", pa.int64()), ("name", pa.string()),
    ("sort_index", pa.int64()), ("labels", pa.string()),
])
THREAD_SCHEMA = pa.schema([
    ("utid", pa.int64()), ("tid", pa.int64()), ("name", pa.string()),
    ("upid", pa.int64()), ("sort_index", pa.int64()),
])
#: ``type`` is one of ``thread``, ``process``, ``async``, ``counter``, ``global``.
TRACK_SCHEMA = pa.schema([
    ("id", pa.int64()), ("name", pa.string()), ("type", pa.string()),
    ("utid", pa.int64()), ("upid", pa.int64()), ("parent_id", pa.int64()),
    ("unit", pa.string()),
])
#: Names and categories repeat: dictionary-encoded, they take a small fraction of the memory.
NAME_TYPE = pa.dictionary(pa.int32(), pa.string())
SLICE_SCHEMA = pa.schema([
    ("id", pa.int64()), ("ts", pa.int64()), ("dur", pa.int64()), ("track_id", pa.int64()),
    ("category", NAME_TYPE), ("name", NAME_TYPE), ("depth", pa.int64()),
    ("parent_id", pa.int64()), ("arg_set_id", pa.int64()), ("thread_ts", pa.int64()),
    ("thread_dur", pa.int64()),
])
COUNTER_SCHEMA = pa.schema([
    ("id", pa.int64()), ("ts", pa.int64()), ("track_id", pa.int64()), ("value", pa.float64()),
    ("arg_set_id", pa.int64()),
])
FLOW_SCHEMA = pa.schema([
    ("id", pa.int64()), ("slice_out", pa.int64()), ("slice_in", pa.int64()),
    ("trace_id", pa.int64()), ("arg_set_id", pa.int64()),
])
ARG_SET_SCHEMA = pa.schema([("arg_set_id", pa.int64()), ("json", pa.string())])

SCHEMAS: dict[str, pa.Schema] = {
    "process": PROCESS_SCHEMA,
    "thread": THREAD_SCHEMA,
    "track": TRACK_SCHEMA,
    "slice": SLICE_SCHEMA,
    "counter": COUNTER_SCHEMA,
    "flow": FLOW_SCHEMA,
    "arg_sets": ARG_SET_SCHEMA,
}


def read_parquet(path: Any) -> pa.Table:
    """The table in one Parquet file. ``pyarrow.parquet.read_table`` reads a path through the dataset API, whose
    import brings in pandas: 0.4 s of every ``analyze``/``query``/``compare`` run on a cached trace, for a read
    that takes milliseconds; ``ParquetFile.read`` gives the same table (schema metadata included) without it."""
    import pyarrow.parquet as pq

    with pq.ParquetFile(path) as handle:
        return handle.read()


def empty_table(name: str) -> pa.Table:
    """An empty table with the schema of ``name``."""
    return SCHEMAS[name].empty_table()


@dataclass
class TraceTables:
    """Every table of one trace, columnar, plus its metadata and the reader's warnings.

    ``metadata`` holds the trace's top-level fields (``baseTimeNanoseconds``,
    ``deviceProperties``, ``distributedInfo`` …) and ``source`` (the path) and ``format``.
    ``warnings`` lists what the reader skipped or repaired (truncated input, bad events).
    """

    process: pa.Table
    thread: pa.Table
    track: pa.Table
    slice: pa.Table
    counter: pa.Table
    flow: pa.Table
    arg_sets: pa.Table
    metadata: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    def tables(self) -> dict[str, pa.Table]:
        """The tables by name (the keys of :data:`SCHEMAS`)."""
        return {name: getattr(self, name) for name in SCHEMAS}

    @property
    def num_slices(self) -> int:
        return int(self.slice.num_rows)

    @classmethod
    def from_tables(cls, tables: dict[str, pa.Table], metadata: dict[str, Any] | None = None,
                    warnings: list[str] | None = None) -> TraceTables:
        """Build from a name → table mapping, casting each to its schema (missing → empty)."""
        cast = {name: (tables[name].select(schema.names).cast(schema) if name in tables
                       else schema.empty_table())
                for name, schema in SCHEMAS.items()}
        return cls(**cast, metadata=dict(metadata or {}), warnings=list(warnings or []))
