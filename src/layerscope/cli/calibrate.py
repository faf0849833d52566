"""``layerscope calibrate``: measure this machine through torch and write a fitted ``HardwareSpec``."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from layerscope.cli import options

if TYPE_CHECKING:
    from layerscope.app.calibrate import CalibrateResult


def register(app: typer.Typer) -> None:
    app.command("calibrate")(calibrate_cmd)


def calibrate_cmd(
    out: Path = typer.Option(..., "--out", "-o", help="Spec file to write (.yaml, or .json)."),
    device: str | None = typer.Option(None, "--device", help="cpu | cuda (default cpu)."),
    quick: bool = typer.Option(False, "--quick", help="A smaller grid, shorter timings, no GEMM past 0.25 s a "
                                                      "call: about 3 minutes on a busy 2-core CPU."),
    name: str | None = typer.Option(None, "--name", help="Spec name (default: calibrated-cpu (<CPU>, N threads))."),
    force: bool = typer.Option(False, "--force", help="Overwrite --out and its measurements file if they exist."),
    from_measurements: Path | None = typer.Option(
        None, "--from-measurements", help="Fit a kept measurements file (OUT.measurements.json of an earlier run) "
                                          "instead of measuring."),
    from_table: Path | None = typer.Option(
        None, "--from-table", help="Fit a GPU preset (--hardware) on a table of published kernel measurements "
                                   "(markdown, the columns of the bundled gpu-kernels.md) instead of measuring."),
    table_hardware: str | None = typer.Option(None, "--hardware", "-H",
                                              help="With --from-table: the preset to fit (h100-sxm, h200, …)."),
    save: bool = typer.Option(True, "--save/--no-save",
                              help="Also keep the spec as this machine's, for `layerscope demo` (in "
                                   "$LAYERSCOPE_MACHINES_DIR, default ~/.cache/layerscope/machines)."),
    as_json: bool = options.as_json("Print the fitted figures and residuals as one JSON object "
                                    "(docs/schema/calibrate.json)."),
) -> None:
    """Time GEMMs (a grid of shapes and dtypes), copy/scale bandwidth, elementwise/norm/softmax
    kernels and per-op dispatch through torch, fit them (peak FLOP/s per dtype with Hockney's
    half-performance GEMM size, bandwidths, vector rate, per-op overhead) and write the spec, with
    the measurements and fit residuals under 'calibration'. Use it with --hardware FILE.

    The raw measurements are kept beside the spec as they are taken (OUT.measurements.json, e.g.
    hw.measurements.json for hw.yaml), so a crash or a failed fit loses nothing: --from-measurements
    refits that file. A figure that fits outside its valid range (a disturbed timing) is measured
    again, up to twice; if still out of range it is clamped or dropped, flagged on stderr and listed
    under calibration.fit.flags. Exit 2 only when no spec can be fitted (the measurements are kept).

    Uses torch's current thread count (set OMP_NUM_THREADS to change it). Timings on a busy
    machine are slower than the hardware.

    A spec measured here (not --from-measurements) is also kept as this machine's, keyed by device, CPU/GPU model
    and thread count, where `layerscope demo` looks for it first (--no-save: not kept).
    """
    from layerscope.app.calibrate import CalibrateRequest, calibrate
    from layerscope.app.requests import build_request
    from layerscope.cli.common import quiet_third_party, step_progress
    from layerscope.errors import OutputError

    if from_table is not None or table_hardware is not None:
        _from_table(from_table, table_hardware, out, force, as_json,
                    others=quick or device is not None or from_measurements is not None or name is not None)
        return
    if from_measurements is not None and (quick or device is not None):
        raise typer.BadParameter("--quick and --device choose what to measure; --from-measurements measures "
                                 "nothing", param_hint="--from-measurements")
    request = build_request(CalibrateRequest, error=OutputError, out=out, device=device, quick=quick, name=name,
                            force=force, from_measurements=from_measurements, save=save)
    if from_measurements is not None:
        result = calibrate(request, warn=_warn)
    else:
        with quiet_third_party(), step_progress(not as_json, "calibrate") as progress:
            result = calibrate(request, progress=progress, notify=_notify, warn=_warn)
    for flag in result.flags:
        _warn(flag.to_flag().message())
    if as_json:
        from layerscope.cli.common import print_json

        print_json(result)
        return
    _render(result)
    if result.saved_as_machine_spec is not None:
        typer.echo(f"kept as this machine's spec for layerscope demo: {result.saved_as_machine_spec}")


def _warn(message: str) -> None:
    typer.echo(f"warning: calibrate: {message}", err=True)


def _notify(line: str) -> None:
    typer.echo(f"note: calibrate: {line}", err=True)


def _render(fit: CalibrateResult) -> None:
    from rich.table import Table

    from layerscope.cli.common import console, esc, fmt_si, fmt_time_s
    from layerscope.hardware.fit import KIND_KERNELS

    con = console()
    t = Table(title=f"{esc(fit.name)} → {esc(fit.out)}")
    for col in ("figure", "value", "fitted on", "rms |error|", "outliers"):
        t.add_column(col, justify="left" if col in ("figure", "fitted on") else "right")
    for dt, mm in fit.matmul.items():
        r = mm.residuals
        t.add_row(f"GEMM {dt} peak (r∞)", fmt_si(mm.peak_flops_per_s, "FLOP/s"),
                  f"{mm.compute_bound_points} compute-bound GEMMs", f"{r.rms_rel_error:.0%}", str(r.outliers))
        t.add_row(f"GEMM {dt} half size (W½)", fmt_si(mm.half_flops, "FLOP"), "", "", "")
    for label, bw in (("main-memory bandwidth (copy/scale)", fit.memory),
                      ("main-memory bandwidth (GEMV weights; the spec's)", fit.weight_stream),
                      ("activation streams (copy/scale, median times)", fit.activation_stream),
                      ("cache bandwidth", fit.cache)):
        if bw is not None:
            t.add_row(label, fmt_si(bw.bandwidth_bytes_per_s, "B/s"),
                      f"footprints {fmt_si(bw.min_footprint_bytes, 'B')}..{fmt_si(bw.max_footprint_bytes, 'B')}",
                      f"{bw.residuals.rms_rel_error:.0%}", str(bw.residuals.outliers))
    v = fit.vector
    t.add_row("vector rate", fmt_si(v.vector_flops_per_s, "FLOP/s"), ", ".join(v.per_kernel_flops_per_s) or "-",
              f"{v.residuals.rms_rel_error:.0%}", str(v.residuals.outliers))
    for kind, fraction in fit.vector_per_kind.items():
        t.add_row(f"vector rate of {kind} ops", fmt_si(fraction * fit.vector_peak_flops_per_s, "FLOP/s"),
                  ", ".join(kernel for kernel, k in KIND_KERNELS.items() if k == kind) + " (in cache, median)", "", "")
    o = fit.overhead
    t.add_row("per-op overhead (hot)", fmt_time_s(o.launch_overhead_s),
              f"empty op {fmt_time_s(o.empty_op_s)}, intercept {fmt_time_s(o.intercept_s)}", "", "")
    if o.cold_reuse_bytes:
        for reuse, kernel_s, call_s in zip(o.cold_reuse_bytes, o.cold_kernel_s, o.cold_module_call_by_reuse_s,
                                           strict=True):
            t.add_row(f"small op in a model, {fmt_si(reuse, 'B')} since its code ran", fmt_time_s(kernel_s),
                      f"per kernel; module call {fmt_time_s(call_s)} (mock layers, eager RMSNorm)", "", "")
    elif o.cold_op_s is not None:
        t.add_row("per-kernel overhead in a model (the spec's)", fmt_time_s(o.cold_op_s),
                  "eager RMSNorm right after a weight stream", "", "")
    pages = fit.fresh_pages
    if pages is not None:
        t.add_row("page faults of new tensors", "none" if pages.min_bytes is None else
                  f"{fmt_time_s(pages.s_per_byte * 2**20)}/MiB from {fmt_si(pages.min_bytes, 'B')}",
                  ", ".join(f"{fmt_si(b, 'B')} {'faults' if f else 'reused'}"
                            for b, f in zip(pages.sizes_bytes, pages.faulting, strict=True)), "", "")
    con.print(t)


def _from_table(table: Path | None, hardware: str | None, out: Path, force: bool, as_json: bool, *,
                others: bool) -> None:
    """``calibrate --from-table TABLE --hardware PRESET``: the table fit (:mod:`layerscope.app.table_fit`)."""
    from layerscope.app.requests import build_request
    from layerscope.app.table_fit import TableFitRequest, fit_table
    from layerscope.errors import OutputError

    if others:
        raise typer.BadParameter("--from-table fits a table: --device, --quick, --name and --from-measurements "
                                 "are for measuring this machine", param_hint="--from-table")
    if table is None or hardware is None:
        raise typer.BadParameter("--from-table and --hardware go together (the table, and the preset to fit)",
                                 param_hint="--from-table" if table is None else "--hardware")
    result = fit_table(build_request(TableFitRequest, error=OutputError, hardware=hardware, out=out, table=table,
                                     force=force))
    if as_json:
        from layerscope.cli.common import print_json

        print_json(result)
        return
    from layerscope.cli.common import fmt_time_s
    from layerscope.hardware.gemm_tiles import TILED_DTYPES

    typer.echo(f"{result.hardware} fitted on {result.table} ({result.rows_read} rows) -> {result.out}")
    typer.echo(f"  memory efficiency {result.memory_efficiency:.3f} (rows {', '.join(result.memory_rows) or '-'}"
               + (f"; {result.memory_from}" if result.memory_from else "") + ")")
    typer.echo(f"  fixed cost per kernel {fmt_time_s(result.launch_overhead_s)}")
    for g in result.gemm:
        borrowed = "; ".join(f"{k}: {v}" for k, v in g.taken_from.items())
        per = "per wave of tiles" if g.dtype in TILED_DTYPES else "per GEMM"
        typer.echo(f"  {g.dtype} GEMM: efficiency {g.efficiency:.3f}, W½ {g.half_flops:.3g} FLOPs {per}, weights "
                   f"stream at "
                   f"{g.weight_stream:.3f} of the bandwidth, RMS error {_log_pct(g.rms_log_error)} over rows "
                   f"{', '.join(g.rows)}" + (f" ({borrowed})" if borrowed else ""))
    attn = result.attention
    for c in attn.prefill:
        kind = "causal" if c.causal else "non-causal"
        typer.echo(f"  {c.dtype} {kind} prefill attention: {c.efficiency:.3f} of peak "
                   f"x M / (M + {c.half_m:g}) on rows {', '.join(c.rows)}" + (f" ({c.note})" if c.note else "")
                   + (f"; {attn.prefill_from}" if attn.prefill_from else ""))
    if attn.decode_memory is not None and attn.decode_floor_s is not None:
        typer.echo(f"  decode attention: {fmt_time_s(attn.decode_floor_s)} (fitted on rows "
                   f"{', '.join(attn.decode_rows)}) + bytes at {attn.decode_memory:.3f} of the bandwidth "
                   "(the memory efficiency)"
                   + (f"; {attn.decode_from}" if attn.decode_from else ""))


def _log_pct(rms_log_error: float) -> str:
    """An RMS error of log(predicted / measured) as the percentage it means: 0.095 -> '±10%' (e^0.095 - 1)."""
    import math

    return f"±{math.expm1(rms_log_error):.0%}"
