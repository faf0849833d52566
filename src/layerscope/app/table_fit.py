"""``calibrate --from-table``: a GPU preset fitted on a table of published kernel measurements.

:func:`fit_table` takes one :class:`TableFitRequest` (the table, by default the bundled ``gpu-kernels.md``; the
preset to fit; the spec to write) and returns one :class:`TableFitResult`, the JSON contract of
``layerscope calibrate --from-table … --json`` (docs/schema/calibrate-table.json). The reading is
:mod:`layerscope.hardware.kernel_table`, the fit :mod:`layerscope.hardware.kernel_fit` (and
:mod:`layerscope.hardware.collective_fit` for the interconnect); this verb checks the output
first, loads the presets the fit borrows from (``kernel_fit.NEAREST``) and writes the fitted spec.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel

from layerscope.app.requests import MODEL_CONFIG
from layerscope.errors import OutputError

if TYPE_CHECKING:
    from layerscope.hardware.kernel_fit import AttentionTaken

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
    """Hockney's half-performance work W½, FLOPs (``efficiency.matmul_half_flops``): paid once per GEMM, or once per
    wave of tiles for a dtype of ``hardware.gemm_tiles.TILED_DTYPES`` (fp8)."""
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


class PrefillCurveRow(BaseModel):
    """One fitted prefill attention curve: fraction of the datasheet peak ``e · M / (M + M½)`` at a 128-wide head."""

    model_config = MODEL_CONFIG

    dtype: str
    """``bf16`` (every 16-bit float) or ``fp8``."""
    causal: bool
    """Causal (a decoder's prefill) or not (the cached part of a chunked prefill)."""
    efficiency: float
    """``e``: the fraction of peak long sequences approach."""
    half_m: float
    """``M½``: the query length at which half of ``e`` is reached, tokens."""
    rows: list[str]
    """Ids of the rows fitted."""
    note: str
    """Where the curve came from when its own rows could not pin it (one length, no causal rows)."""


class AttentionFitResult(BaseModel):
    """The attention curves the spec took (``efficiency.attention_*``)."""

    model_config = MODEL_CONFIG

    prefill: list[PrefillCurveRow]
    """One row per (dtype, causality) fitted; empty without prefill rows here or on a nearest GPU."""
    half_head_dim: float
    """``d½`` of the head-dim factor ``d / (d + d½) · (128 + d½) / 128``; 0 when not fitted."""
    prefill_from: str
    """Empty when fitted on this GPU's rows, else whose rows and why."""
    decode_memory: float | None
    """Fraction of the datasheet bandwidth decode attention streams at on long caches: the spec's streaming
    efficiency (``efficiency.memory``); None without decode rows here or on a nearest GPU."""
    decode_floor_s: float | None
    """Fixed time of a decode attention kernel beyond the fixed cost per kernel, seconds."""
    decode_rows: list[str]
    """Ids of the decode rows fitted."""
    decode_from: str
    """Empty when fitted on this GPU's rows, else whose rows and why."""


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
    attention: AttentionFitResult
    """Prefill and decode attention (``hardware.attention_fit``)."""


def fit_table(request: TableFitRequest) -> TableFitResult:
    """Fit ``request.hardware`` on ``request.table`` and write the spec to ``request.out``. Raises
    :class:`~layerscope.errors.HardwareSpecError` for a bad table row, an unknown preset or a fit beyond physical
    bounds, and :class:`~layerscope.errors.OutputError` for an output that cannot be written."""
    from layerscope.cost.collectives import algorithm_work
    from layerscope.hardware.collective_fit import fit_interconnect
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
    # and the collectives' α-β terms on the table's collective rows, as `make presets` fits them
    spec = fit_interconnect(fit.spec, rows, presets, algorithm_work).spec
    text = dump_hardware_json(spec) if suffix == ".json" else dump_hardware_yaml(spec)
    with atomic_write(out, "w", inputs=(table,)) as fh:
        fh.write(text)
    return TableFitResult(
        hardware=base.name, table=str(table), out=str(out), rows_read=len(rows),
        memory_efficiency=fit.memory_efficiency, memory_rows=list(fit.memory_rows), memory_from=fit.memory_from,
        launch_overhead_s=fit.spec.launch_overhead_s,
        gemm=[GemmFitRow(dtype=dt, efficiency=g.efficiency, half_flops=g.half_flops, weight_stream=g.weight_stream,
                         overhead_s=g.overhead_s, rows=list(g.rows), taken_from=dict(g.taken_from),
                         rms_log_error=g.rms_log_error) for dt, g in fit.gemm.items()],
        attention=_attention_result(fit.attention, fit.spec.efficiency.attention_decode_memory))


def _attention_result(taken: AttentionTaken, decode_memory: float | None) -> AttentionFitResult:
    curves = taken.prefill.prefill if taken.prefill is not None else {}
    dec = taken.decode
    return AttentionFitResult(
        prefill=[PrefillCurveRow(dtype=dt, causal=causal, efficiency=c.efficiency, half_m=c.half_m, rows=list(c.rows),
                                 note=c.note) for (dt, causal), c in sorted(curves.items())],
        half_head_dim=next(iter(curves.values())).half_d if curves else 0.0, prefill_from=taken.prefill_from,
        decode_memory=decode_memory if dec else None, decode_floor_s=dec.floor_s if dec else None,
        decode_rows=list(dec.rows) if dec else [], decode_from=taken.decode_from)
