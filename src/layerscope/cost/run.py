"""``run_estimate``: from user-level arguments (names, paths, numbers) to an :class:`Estimate`."""

from __future__ import annotations

import csv
import io
import os

from layerscope.cost.api import Estimate, estimate
from layerscope.errors import WorkloadError
from layerscope.hardware import load_hardware
from layerscope.model import load_model_spec
from layerscope.units import atomic_write
from layerscope.workload import make_workload

_ATTENTION_VIEWS = ("fused", "unfused")


def run_estimate(*, model: str, hardware: str, device: str | None = None, phase: str = "decode",
                 batch_size: int = 1, input_len: int = 512, output_len: int = 128, context_len: int = 1024,
                 chunk_size: int = 512, weight_dtype: str = "bf16", act_dtype: str = "bf16",
                 kv_dtype: str = "bf16", tensor_parallel: int = 1, cost_model: str = "roofline",
                 attention: str = "fused", layer: int | None = None) -> Estimate:
    """Load the model and hardware, build the workload and estimate it."""
    if attention not in _ATTENTION_VIEWS:
        raise WorkloadError(f"attention: unknown view {attention!r}; known: {', '.join(_ATTENTION_VIEWS)}")
    spec = load_model_spec(model)
    hw = load_hardware(hardware, device=device)
    workload = make_workload(
        phase=phase, batch_size=batch_size, input_len=input_len, output_len=output_len,
        context_len=context_len, chunk_size=chunk_size, weight_dtype=weight_dtype, act_dtype=act_dtype,
        kv_dtype=kv_dtype, tensor_parallel=tensor_parallel,
    )
    return estimate(spec, hw, workload, cost_model=cost_model, attention=attention,  # type: ignore[arg-type]
                    layer=layer)


OPS_CSV_COLUMNS = ("name", "phase", "kind", "layer", "definition", "matrix_class", "flops", "bytes",
                   "weight_bytes", "act_bytes", "kv_bytes", "time_s", "bound")


def write_ops_csv(result: Estimate, path: str | os.PathLike[str]) -> None:
    """Write the per-op table as CSV, atomically."""
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(OPS_CSV_COLUMNS)
    for op in result.ops:
        writer.writerow([getattr(op, c) for c in OPS_CSV_COLUMNS])
    with atomic_write(path, "w") as fh:
        fh.write(buf.getvalue())
