"""``layerscope calibrate``: measure this machine through torch and write a fitted ``HardwareSpec``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer


def register(app: typer.Typer) -> None:
    app.command("calibrate")(calibrate_cmd)


def calibrate_cmd(
    out: Path = typer.Option(..., "--out", "-o", help="Spec file to write (.yaml, or .json)."),
    device: str = typer.Option("cpu", "--device", help="cpu | cuda"),
    quick: bool = typer.Option(False, "--quick", help="A smaller grid and shorter timings: about a minute."),
    name: str | None = typer.Option(None, "--name", help="Spec name (default: calibrated-cpu (<CPU>, N threads))."),
    force: bool = typer.Option(False, "--force", help="Overwrite --out if it exists."),
    as_json: bool = typer.Option(False, "--json", help="Print the fitted figures and residuals as one JSON object."),
) -> None:
    """Time GEMMs (a grid of shapes and dtypes), copy/scale bandwidth, elementwise/norm/softmax
    kernels and per-op dispatch through torch, fit them (peak FLOP/s per dtype with Hockney's
    half-performance GEMM size, bandwidths, vector rate, per-op overhead) and write the spec, with
    the measurements and fit residuals under 'calibration'. Use it with --hardware FILE.

    Uses torch's current thread count (set OMP_NUM_THREADS to change it). The full run takes a
    few minutes; --quick about one. Timings on a busy machine are slower than the hardware.
    """
    from layerscope.errors import OutputError

    suffix = out.suffix.lower()
    if suffix not in (".yaml", ".yml", ".json"):
        raise OutputError(f"--out {str(out)!r}: use a .yaml or .json file")
    if out.exists() and not force:
        raise OutputError(f"--out {str(out)!r} exists; pass --force to overwrite it")
    if not (out.parent if str(out.parent) else Path(".")).is_dir():
        raise OutputError(f"--out {str(out)!r}: directory {str(out.parent)!r} does not exist")
    if device not in ("cpu", "cuda"):
        from layerscope.errors import CaptureError

        raise CaptureError(f"--device {device!r}: use cpu or cuda")

    from layerscope.capture.calibrate import calibrate
    from layerscope.hardware.loaders import dump_hardware_json, dump_hardware_yaml
    from layerscope.units import atomic_write

    spec = _run_with_progress(calibrate, device=device, quick=quick, name=name)
    text = dump_hardware_json(spec) if suffix == ".json" else dump_hardware_yaml(spec)
    with atomic_write(out, "w") as fh:
        fh.write(text)
    assert spec.calibration is not None
    if as_json:
        from layerscope.cli.common import print_json

        print_json({"out": str(out), "name": spec.name, **spec.calibration.summary()})
        return
    _render(spec, out)


def _run_with_progress(calibrate: Any, **kwargs: Any) -> Any:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    # Redrawn between tasks only: no refresh thread takes the interpreter during the timings.
    with Progress(TextColumn("calibrate"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  TextColumn("{task.description}"), console=Console(stderr=True), transient=True,
                  auto_refresh=False) as bar:
        task = bar.add_task("", total=None)

        def progress(done: int, total: int, label: str) -> None:
            bar.update(task, completed=done, total=total, description=label, refresh=True)

        return calibrate(progress=progress, **kwargs)


def _render(spec: Any, out: Path) -> None:
    from rich.table import Table

    from layerscope.cli.common import console, fmt_si, fmt_time_s
    from layerscope.hardware.fit import KIND_KERNELS

    fit = spec.calibration.fit
    con = console()
    t = Table(title=f"{spec.name} → {out}")
    for col in ("figure", "value", "fitted on", "rms |error|", "outliers"):
        t.add_column(col, justify="left" if col in ("figure", "fitted on") else "right")
    for dt, mm in fit.matmul.items():
        r = mm.residuals
        t.add_row(f"GEMM {dt.value} peak (r∞)", fmt_si(mm.peak_flops_per_s, "FLOP/s"),
                  f"{mm.compute_bound_points} compute-bound GEMMs", f"{r.rms_rel_error:.0%}", str(r.outliers))
        t.add_row(f"GEMM {dt.value} half size (W½)", fmt_si(mm.half_flops, "FLOP"), "", "", "")
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
