"""``calibrate --from-table``: a GPU preset fitted on a table of published kernel measurements.

:func:`fit_table` takes one :class:`TableFitRequest` (the table, by default the bundled ``gpu-kernels.md``; the
preset to fit; the spec to write) and returns one :class:`TableFitResult`, the JSON contract of
``layerscope calibrate --from-table … --json`` (docs/schema/calibrate-table.json). The reading is
:mod:`layerscope.hardware.kernel_table`, the fit :mod:`layerscope.hardware.kernel_fit`; this verb checks the output
first, loads the presets the fit borrows from (``kernel_fit.NEAREST``) and writes the fitted spec.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel

from layerscope.app.requests import MODEL_CONFIG
from layerscope.errors import OutputError

__all__ = ["TableFitRequest", "TableFitResult", "fit_table"]


class TableFitRequest(BaseModel):
    """What ``calibrate --from-table`` is asked."""

    model_config = MODEL_CONFIG

    hardware: str
    """The preset to fit (its datasheet peaks and bandwidth are kept): ``h100-sxm``, ``h200``, …"""
    out: Path
    """Spec file to write (``.yaml`` or ``.json``)."""
    table: Path | None = None
    """The measurement table (markdown, gpu-kernels.md's columns); None: the bundled copy."""
    force: bool = False
    """Overwrite ``out`` if it exists."""


class GemmFitRow(BaseModel):
    """The fitted GEMM terms of one dtype class."""

    model_config = MODEL_CONFIG

    dtype: str
    """``bf16`` (every 16-bit float) or ``fp8``."""
    efficiency: float
    """Asymptotic fraction of the datasheet peak (``efficiency.matmul_per_dtype``)."""
    half_flops: float
    """Hockney's half-performance work W½, FLOPs (``efficiency.matmul_half_flops``)."""
    weight_stream: float
    """Fraction of the datasheet bandwidth at which a skinny GEMM streams its weights."""
    overhead_s: float
    """Fixed cost per kernel, seconds."""
    rows: list[str]
    """Ids of the table rows fitted (another GPU's where ``taken_from`` says so)."""
    taken_from: dict[str, str]
    """Parameter → where it came from when this GPU's rows could not pin it down."""
    rms_log_error: float
    """RMS of log(predicted / measured time) over the rows fitted."""


class TableFitResult(BaseModel):
    """The answer of ``layerscope calibrate --from-table``."""

    model_config = MODEL_CONFIG

    hardware: str
    """The preset fitted."""
    table: str
    """The table read."""
    out: str
    """The spec written."""
    rows_read: int
    """Rows in the table."""
    memory_efficiency: float
    """Fraction of the datasheet bandwidth streaming kernels reach (``efficiency.memory``)."""
    memory_rows: list[str]
    """Ids of the memory-bound rows behind it."""
    memory_from: str
    """Empty when fitted on this GPU's rows, else where the figure came from."""
    launch_overhead_s: float
    """The spec's fixed cost per kernel, seconds."""
    gemm: list[GemmFitRow]
    """One row per dtype class fitted."""


def fit_table(request: TableFitRequest) -> TableFitResult:
    """Fit ``request.hardware`` on ``request.table`` and write the spec to ``request.out``. Raises
    :class:`~layerscope.errors.HardwareSpecError` for a bad table row, an unknown preset or a fit beyond physical
    bounds, and :class:`~layerscope.errors.OutputError` for an output that cannot be written."""
    from layerscope.hardware.kernel_fit import NEAREST, fit_preset
    from layerscope.hardware.kernel_table import default_table_path, read_kernel_table
    from layerscope.hardware.loaders import dump_hardware_json, dump_hardware_yaml
    from layerscope.hardware.presets import load_base_preset
    from layerscope.units import atomic_write, check_writable

    out = request.out
    suffix = out.suffix.lower()
    if suffix not in (".yaml", ".yml", ".json"):
        raise OutputError(f"--out {str(out)!r}: use a .yaml or .json file")
    if out.exists() and not request.force:
        raise OutputError(f"--out {str(out)!r} exists; pass --force to overwrite it")
    table = request.table if request.table is not None else default_table_path()
    check_writable(out, (table,))
    rows = read_kernel_table(table)
    # every fit starts from the hand-written base presets, as `make presets` does: the bundled table gives the
    # shipped preset back
    base = load_base_preset(request.hardware)
    names = {name for pair in NEAREST.items() for name in (pair[0], pair[1][0])}
    presets = {name: load_base_preset(name) for name in sorted(names)} | {base.name: base}
    fit = fit_preset(base, rows, presets)
    text = dump_hardware_json(fit.spec) if suffix == ".json" else dump_hardware_yaml(fit.spec)
    with atomic_write(out, "w", inputs=(table,)) as fh:
        fh.write(text)
    return TableFitResult(
        hardware=base.name, table=str(table), out=str(out), rows_read=len(rows),
        memory_efficiency=fit.memory_efficiency, memory_rows=list(fit.memory_rows), memory_from=fit.memory_from,
        launch_overhead_s=fit.spec.launch_overhead_s,
        gemm=[GemmFitRow(dtype=dt, efficiency=g.efficiency, half_flops=g.half_flops, weight_stream=g.weight_stream,
                         overhead_s=g.overhead_s, rows=list(g.rows), taken_from=dict(g.taken_from),
                         rms_log_error=g.rms_log_error) for dt, g in fit.gemm.items()])
