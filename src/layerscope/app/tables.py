"""Per-row tables a verb writes for the user: CSV or Parquet by the path's suffix, through pyarrow, atomically."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from layerscope.errors import OutputError

#: The suffixes a table is written for.
TABLE_SUFFIXES = (".csv", ".parquet")


def write_columns(columns: Mapping[str, Any], path: Path, *, what: str,
                  inputs: tuple[str | os.PathLike[str], ...] = ()) -> Path:
    """``columns`` (name -> a sequence or array per column) as CSV or, for a ``.parquet`` path, Parquet; the suffix
    and the output (:func:`~layerscope.units.check_output`) checked first, ``what`` naming the table in errors."""
    from layerscope.units import atomic_write, check_output

    suffix = path.suffix.lower()
    if suffix not in TABLE_SUFFIXES:
        raise OutputError(f"{what} {str(path)!r}: write .csv or .parquet")
    check_output(path, inputs=inputs)
    try:
        import pyarrow as pa
    except ImportError:
        raise OutputError(f"writing a {what} needs pyarrow (pip install pyarrow)") from None
    table = pa.table(dict(columns))
    with atomic_write(path, "wb") as fh:
        if suffix == ".parquet":
            import pyarrow.parquet as pq

            pq.write_table(table, fh)
        else:
            import pyarrow.csv as pcsv

            pcsv.write_csv(table, fh)
    return path
