"""Per-op activity of an estimate for external power tools (issue #30; the design notes' "power activities"):
``layerscope estimate … --activity FILE.csv|FILE.parquet``.

One row per op and phase (the rows of ``estimate``, in its order) with the work an energy model multiplies by
energy per operation (Horowitz, "Computing's energy problem", ISSCC 2014), as :mod:`layerscope.cost.energy`
charges it on one device:

- ``macs_<dtype>``: multiply-accumulates on the matrix units by compute dtype (FLOPs / 2); ``vector_flops``: FLOPs
  on the vector units (norms, activations, softmax, elementwise);
- ``bytes_<level>`` under the spec's memory-level names (:func:`level_names`): on-chip SRAM (``smem``) the op's
  weight, activation and KV bytes once each; the last-level cache (``l2``) and main memory (``hbm``) the
  main-memory bytes the cost model charges (every main-memory byte passes the LLC once);
- ``interconnect_bytes`` / ``network_bytes``: the op's ``comm_bytes`` on the intra-node link or, past its domain,
  the network;
- ``time_s`` (the cost model's), ``power_limited_time_s`` and ``energy_j`` (``cost.energy``; empty without the
  spec's ``energy`` figures).

Every count is summed over the phase's passes (a generation's decode steps), like ``estimate``'s rows.
"""

from __future__ import annotations

import csv
import io
import os
from collections.abc import Callable
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import numpy as np

from layerscope.errors import OutputError
from layerscope.registry import Registry
from layerscope.units import atomic_write

if TYPE_CHECKING:
    from layerscope.cost.api import Estimate
    from layerscope.hardware.spec import HardwareSpec

__all__ = ["ACTIVITY_WRITERS", "activity_columns", "activity_format", "level_names", "write_activity"]

Column = list[Any]


def level_names(hw: HardwareSpec) -> tuple[str, str, str]:
    """The names of the three levels ``cost.energy`` charges: on-chip SRAM (the spec's first level where it has
    three or more, else ``sram``), the last-level cache (the level before main memory, else ``cache``) and main
    memory (the last)."""
    levels = hw.memory
    sram = levels[0].name if len(levels) >= 3 else "sram"
    cache = levels[-2].name if len(levels) >= 2 else "cache"
    return sram, cache, levels[-1].name


def activity_columns(est: Estimate) -> dict[str, Column]:
    """The activity table of ``est`` as named columns, one entry per op row (module docstring)."""
    from layerscope.cost.energy import estimate_energy, wire_bytes
    from layerscope.cost.features import DTYPE_ORDER, op_features

    hw = est.hardware_spec
    if hw is None:
        raise OutputError(f"{est.model}: the estimate carries no hardware spec to charge bytes by memory level")
    energy = estimate_energy(est)
    phases = est.phases
    feats = [op_features(part.graph) for part in phases]
    # matrix dtypes any op uses, in the project's dtype order
    used = {feats[p].compute_dtype[i] for p in range(len(phases)) for i in np.flatnonzero(feats[p].uses_matrix_units)}
    dtypes = [dt for dt in DTYPE_ORDER if dt in used]
    sram, cache, main = level_names(hw)
    cols: dict[str, Column] = {key: [] for key in ("name", "phase", "kind", "layer")}
    cols.update({f"macs_{dt.value}": [] for dt in dtypes})
    cols["vector_flops"] = []
    for level in (sram, cache, main):
        cols[f"bytes_{level}"] = []
    cols.update({key: [] for key in ("interconnect_bytes", "network_bytes", "time_s", "power_limited_time_s",
                                     "energy_j")})
    for p, part in enumerate(phases):
        f = feats[p]
        flops, weight_b, act_b, kv_b = (np.asarray(a, dtype=float) for a in part.work)
        main_b = np.asarray(part.cost.memory_bytes if part.cost is not None else weight_b + act_b + kv_b, dtype=float)
        wire = wire_bytes(part.graph, hw, part.passes)
        limited = energy.phases[p] if energy is not None else None
        for i, op in enumerate(part.graph.ops):
            cols["name"].append(op.name)
            cols["phase"].append(part.phase)
            cols["kind"].append(op.kind)
            cols["layer"].append(op.layer)
            matrix = bool(f.uses_matrix_units[i])
            for dt in dtypes:
                cols[f"macs_{dt.value}"].append(float(flops[i]) / 2 if matrix and f.compute_dtype[i] == dt else 0.0)
            cols["vector_flops"].append(0.0 if matrix else float(flops[i]))
            cols[f"bytes_{sram}"].append(float(weight_b[i] + act_b[i] + kv_b[i]))
            cols[f"bytes_{cache}"].append(float(main_b[i]))
            cols[f"bytes_{main}"].append(float(main_b[i]))
            cols["interconnect_bytes"].append(float(wire.interconnect_bytes[i]))
            cols["network_bytes"].append(float(wire.network_bytes[i]))
            cols["time_s"].append(float(part.time_s[i]))
            cols["power_limited_time_s"].append(None if limited is None else float(limited.op_time_s[i]))
            cols["energy_j"].append(None if limited is None else float(limited.op_energy_j[i]))
    return cols


def _write_csv(columns: dict[str, Column], handle: IO[bytes]) -> None:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(columns)
    writer.writerows(zip(*(["" if v is None else v for v in col] for col in columns.values()), strict=True))
    handle.write(buf.getvalue().encode("utf-8"))


def _parquet() -> tuple[Any, Any]:
    """``pyarrow`` and ``pyarrow.parquet``, or an OutputError naming the missing package."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise OutputError("a .parquet activity file needs the pyarrow package (pip install pyarrow); "
                          "or write .csv") from None
    return pa, pq


def _write_parquet(columns: dict[str, Column], handle: IO[bytes]) -> None:
    pa, pq = _parquet()
    types = {"name": pa.string(), "phase": pa.string(), "kind": pa.string(), "layer": pa.int64()}
    table = pa.table({key: pa.array(col, type=types.get(key, pa.float64())) for key, col in columns.items()})
    pq.write_table(table, handle)


WriterFn = Callable[[dict[str, Column], IO[bytes]], None]

#: Activity file writers by suffix.
ACTIVITY_WRITERS: Registry[WriterFn] = Registry("activity output suffix", OutputError, {
    ".csv": _write_csv,
    ".parquet": _write_parquet,
})


def activity_format(path: str | os.PathLike[str]) -> str:
    """The registered suffix ``path`` ends with (its writer's dependency present), or an OutputError listing the
    known ones or naming the missing package."""
    name = Path(path).name.lower()
    for suffix in ACTIVITY_WRITERS:
        if name.endswith(suffix):
            if suffix == ".parquet":
                _parquet()
            return suffix
    raise OutputError(f"--activity {str(path)!r}: unknown format; known suffixes: {', '.join(ACTIVITY_WRITERS)}")


def write_activity(est: Estimate, path: str | os.PathLike[str],
                   inputs: tuple[str | os.PathLike[str], ...] = ()) -> Path:
    """Write the activity table of ``est`` to ``path`` (format from the suffix), atomically and never over one of
    ``inputs``; the path written."""
    writer = ACTIVITY_WRITERS.lookup(activity_format(path))
    columns = activity_columns(est)
    with atomic_write(path, "wb", inputs=inputs) as handle:
        writer(columns, handle)
    return Path(path)
