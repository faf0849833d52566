"""``calibrate``: measure this machine through torch (or refit a kept measurements file) and write a fitted
``HardwareSpec``.

:func:`calibrate` takes one :class:`CalibrateRequest` and returns one :class:`CalibrateResult`, the JSON contract
of ``layerscope calibrate --json`` (its schema: docs/schema/calibrate.json): the fitted figures and their
residuals. The measuring and the fit are :mod:`layerscope.capture.calibrate` and :mod:`layerscope.hardware.fit`;
this verb checks the outputs before minutes of measuring, keeps the measurements beside the spec as they are
taken, writes the spec and keeps it as this machine's for ``demo``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel

from layerscope.app.requests import MODEL_CONFIG
from layerscope.errors import CaptureError, LayerscopeError, OutputError

if TYPE_CHECKING:
    from layerscope.capture.calibrate import NotifyFn, ProgressFn
    from layerscope.hardware import HardwareSpec
    from layerscope.hardware.calibration import CalibrationFlag

__all__ = ["MEASUREMENTS_SUFFIX", "CalibrateRequest", "CalibrateResult", "calibrate", "measurements_path"]

#: The measurements file beside ``--out``: ``hw.yaml`` keeps its run in ``hw.measurements.json``.
MEASUREMENTS_SUFFIX = ".measurements.json"

_RESULT_CONFIG = MODEL_CONFIG


def measurements_path(out: Path) -> Path:
    """Where a calibration writing ``out`` keeps its measurements (``hw.yaml`` -> ``hw.measurements.json``)."""
    return out.with_name(out.stem + MEASUREMENTS_SUFFIX)


class CalibrateRequest(BaseModel):
    """What to calibrate: where the spec goes, and whether to measure this machine (which device, which grid) or
    refit a kept measurements file."""

    model_config = MODEL_CONFIG

    out: Path
    """Spec file to write: ``.yaml``/``.yml`` or ``.json``."""
    device: str | None = None
    """``cpu`` or ``cuda`` (``None``: cpu)."""
    quick: bool = False
    """A smaller grid, shorter timings, no GEMM past 0.25 s a call."""
    name: str | None = None
    """Spec name (``None``: ``calibrated-cpu (<CPU>, N threads)``)."""
    force: bool = False
    """Overwrite ``out`` and its measurements file if they exist."""
    from_measurements: Path | None = None
    """Fit this kept measurements file instead of measuring."""
    save: bool = True
    """Also keep a measured spec as this machine's, for ``layerscope demo``."""


# --- The result -------------------------------------------------------------------------------------------


class FitStatsRow(BaseModel):
    """Relative residuals ``predicted / measured - 1`` of a fit over the points it describes."""

    model_config = _RESULT_CONFIG

    points: int
    """Measurements the statistics are over (those the fit kept)."""
    outliers: int
    """Measurements left out as disturbed (far slower than the fit)."""
    rms_rel_error: float
    """Root mean square of the relative residuals."""
    median_abs_rel_error: float
    """Median ``|relative residual|``."""
    max_abs_rel_error: float
    """Largest ``|relative residual|``."""


class MatmulFitRow(BaseModel):
    """GEMM throughput of one dtype as a Hockney curve: rate(W) = peak · W / (W + half_flops)."""

    model_config = _RESULT_CONFIG

    peak_flops_per_s: float
    """Asymptotic rate (Hockney's r∞) of large GEMMs, FLOP/s."""
    half_flops: float
    """GEMM work at which half of ``peak_flops_per_s`` is reached (Hockney's n½), FLOPs."""
    compute_bound_points: int
    """Measurements the curve was fitted on (those well above the memory-bound time)."""
    residuals: FitStatsRow
    """Over every GEMM of the dtype, timed with the full roofline."""


class BandwidthFitRow(BaseModel):
    """``time = intercept_s + moved_bytes / bandwidth_bytes_per_s`` over one range of footprints."""

    model_config = _RESULT_CONFIG

    bandwidth_bytes_per_s: float
    """Fitted bandwidth, bytes per second."""
    intercept_s: float
    """Fitted fixed time per call, seconds."""
    min_footprint_bytes: float
    """Smallest footprint fitted, bytes."""
    max_footprint_bytes: float
    """Largest footprint fitted, bytes."""
    residuals: FitStatsRow
    """Residuals of the fit."""


class VectorFitRow(BaseModel):
    """The non-matrix FLOP rate that makes ``max(F / rate, bytes / bandwidth) + overhead`` fit."""

    model_config = _RESULT_CONFIG

    vector_flops_per_s: float
    """Fitted vector rate, FLOP/s."""
    per_kernel_flops_per_s: dict[str, float]
    """The same fit done for each kernel alone (how much the kernels disagree)."""
    residuals: FitStatsRow
    """Residuals of the pooled fit."""


class FreshPagesRow(BaseModel):
    """Page faults of large allocations: the extra time of a tensor allocated anew over one reused, per byte."""

    model_config = _RESULT_CONFIG

    sizes_bytes: list[float]
    """The tensor sizes measured, ascending."""
    extra_s_per_byte: list[float]
    """Per size: (median new-tensor time − median reused-tensor time) / the bytes of the two tensors."""
    faulting: list[bool]
    """Per size: whether its new tensors fault."""
    min_bytes: float | None
    """The smallest size from which every larger size measured faults; ``null`` when the largest does not."""
    s_per_byte: float
    """Median ``extra_s_per_byte`` over the faulting sizes (0 without faults)."""


class OverheadRow(BaseModel):
    """Per-op fixed cost: the larger of the empty-op time and the time-vs-bytes intercept."""

    model_config = _RESULT_CONFIG

    empty_op_s: float
    """Median of the one-element add timings: dispatch with no work, seconds."""
    intercept_s: float
    """Intercept of time vs bytes of the cache-resident bandwidth kernels, seconds."""
    launch_overhead_s: float
    """The fixed cost the fits of the (hot, repeated) microbenchmarks use, seconds."""
    cold_op_s: float | None
    """Median per-kernel time of small eager ops right after a weight stream (the cost inside a model), seconds;
    ``null`` when not measured."""
    module_call_s: float | None
    """One ``nn.Module`` call's own cost inside a model, seconds; ``null`` when not measured."""
    grouped_mm_group_s: float | None
    """Median per-group cost of a grouped GEMM, seconds; ``null`` when not measured."""
    cold_reuse_bytes: list[float]
    """The reuse distances the cold samples were taken at, ascending."""
    cold_kernel_s: list[float]
    """Median per-kernel cold cost at each of ``cold_reuse_bytes``, seconds."""
    cold_module_call_by_reuse_s: list[float]
    """Median module-call cold cost at each of ``cold_reuse_bytes``, seconds."""


class FlagRow(BaseModel):
    """A fitted figure outside its valid range after the re-measurements, and what the fit did with it."""

    model_config = _RESULT_CONFIG

    figure: str
    """The figure's dotted path in the spec or the record."""
    at: str
    """Which entry of a table (``K=512``); empty for a single figure."""
    value: float | None
    """The fitted value (``null`` when none could be computed)."""
    bound: str
    """The valid range, as an interval."""
    action: Literal["clamped", "dropped"]
    """``clamped``: the spec holds ``replacement``; ``dropped``: the spec goes without it."""
    replacement: float | None
    """The value the spec holds instead (clamped), or ``null`` (dropped)."""
    rows: list[str]
    """The measurements the figure is fitted from, as ``table[row]``."""
    remeasured: int
    """How many times those measurements were taken again before the figure was flagged."""

    def to_flag(self) -> CalibrationFlag:
        """The :class:`~layerscope.hardware.calibration.CalibrationFlag` this row describes (for its message)."""
        from layerscope.hardware.calibration import CalibrationFlag

        data = self.model_dump()
        data["value"] = float("nan") if self.value is None else self.value
        return CalibrationFlag.model_validate(data)


class MeasuredRow(BaseModel):
    """What was measured: the machine and how many points of each table."""

    model_config = _RESULT_CONFIG

    device: str
    """``cpu`` or ``cuda``."""
    device_name: str
    """The CPU or GPU model."""
    threads: int
    """torch's intra-op threads."""
    torch_version: str
    """torch's version."""
    quick: bool
    """Whether the quick grid was measured."""
    gemm_points: int
    """GEMMs timed."""
    gemm_wide_points: int
    """Vocabulary-wide GEMMs timed."""
    stream_points: int
    """Copy/scale streams timed."""
    vector_points: int
    """Vector kernels timed."""
    empty_op_points: int
    """Empty-op timings."""
    cold_op_points: int
    """Cold small-op timings."""
    cold_module_call_points: int
    """Cold module-call timings."""
    grouped_mm_group_points: int
    """Grouped-GEMM per-group timings."""
    attention_points: int
    """Causal SDPA calls timed."""
    gemv_points: int
    """Cold one-row GEMMs (weight streams) timed."""
    remeasured: dict[str, int]
    """Measurements taken again, per table."""


class CalibrateResult(BaseModel):
    """The answer of ``layerscope calibrate``: its ``--json`` output, the fitted figures and their residuals (the
    spec's ``calibration.fit``) beside where the spec went."""

    model_config = _RESULT_CONFIG

    out: str
    """The spec file written."""
    name: str
    """The spec's name."""
    saved_as_machine_spec: str | None
    """Where the spec was also kept as this machine's (for ``demo``), else ``null``."""
    method: str
    """One line on how the figures were fitted."""
    matmul: dict[str, MatmulFitRow]
    """GEMM throughput per dtype."""
    memory: BandwidthFitRow
    """Main memory (copy/scale): footprints far beyond the last-level cache."""
    cache: BandwidthFitRow | None
    """Cache-resident footprints; ``null`` when the data shows no faster level."""
    vector: VectorFitRow
    """The vector (non-matrix) rate."""
    overhead: OverheadRow
    """Per-op fixed costs."""
    fresh_pages: FreshPagesRow | None
    """Page faults of new tensors; ``null`` when not measured."""
    weight_stream: BandwidthFitRow | None
    """Main-memory bandwidth of GEMV weight streaming (the spec's); ``null`` when not measured."""
    matmul_rows: dict[str, list[tuple[float, float]]]
    """Per dtype, (M, achieved rate / peak) for M > 1."""
    matmul_reference: dict[str, float]
    """Per dtype with an efficiency table, the rate its fractions are of (the spec's peak), FLOP/s."""
    matmul_shapes: dict[str, list[tuple[float, float, float]]]
    """Per dtype, (M, N, achieved rate / peak) for M > 1."""
    vector_per_kind: dict[str, float]
    """Per op kind with a kernel of its own, its achieved rate over the vector peak."""
    vector_reference_flops_per_s: float | None
    """The fastest per-kind rate where it exceeds the fitted vector rate (the spec's vector peak), else ``null``."""
    activation_stream: BandwidthFitRow | None
    """Copy/scale beyond the LLC on median times; ``null`` without GEMV rows."""
    attention_rows: dict[str, list[tuple[float, float]]]
    """Per dtype, (query length, achieved rate / the spec's peak) of causal SDPA."""
    weight_stream_k: dict[str, list[tuple[float, float]]]
    """Per dtype, (reduction width K, weight bytes per second of a cold one-row GEMM / the main-memory bandwidth)."""
    flags: list[FlagRow]
    """Figures fitted outside their valid range, clamped or dropped; empty when every figure fitted."""
    measured: MeasuredRow
    """What was measured."""

    @property
    def vector_peak_flops_per_s(self) -> float:
        """The vector rate the spec takes as its peak."""
        return self.vector_reference_flops_per_s or self.vector.vector_flops_per_s


def result_of(spec: HardwareSpec, out: Path, saved: Path | None) -> CalibrateResult:
    """The result model of a calibrated spec written to ``out`` (and kept as ``saved``)."""
    assert spec.calibration is not None
    return CalibrateResult.model_validate({"out": str(out), "name": spec.name,
                                           "saved_as_machine_spec": None if saved is None else str(saved),
                                           **spec.calibration.summary()})


# --- The orchestration ------------------------------------------------------------------------------------


def _warn_log(message: str) -> None:
    import logging

    logging.getLogger(__name__).warning("calibrate: %s", message)


def calibrate(request: CalibrateRequest, *, progress: ProgressFn | None = None, notify: NotifyFn | None = None,
              warn: Callable[[str], None] = _warn_log) -> CalibrateResult:
    """Calibrate as ``request`` asks and write the spec.

    The raw measurements are kept beside the spec as they are taken (``OUT.measurements.json``), so a crash or a
    failed fit loses nothing: ``from_measurements`` refits that file. ``progress`` and ``notify`` follow the
    measurement (:func:`layerscope.capture.calibrate.calibrate`); ``warn`` gets what the caller should know before
    the result (a kept file that stopped early). Raises :class:`~layerscope.errors.LayerscopeError` subclasses;
    a failure after measuring names the kept file."""
    from layerscope.hardware.loaders import dump_hardware_json, dump_hardware_yaml
    from layerscope.units import atomic_write, check_writable

    out, from_measurements = request.out, request.from_measurements
    suffix = out.suffix.lower()
    if suffix not in (".yaml", ".yml", ".json"):
        raise OutputError(f"--out {str(out)!r}: use a .yaml or .json file")
    if out.exists() and not request.force:
        raise OutputError(f"--out {str(out)!r} exists; pass --force to overwrite it")
    # Minutes of measuring come before the write: an output that cannot be written fails now.
    check_writable(out, (from_measurements,) if from_measurements is not None else ())
    device = request.device or "cpu"
    if device not in ("cpu", "cuda"):
        raise CaptureError(f"--device {device!r}: use cpu or cuda")

    if from_measurements is not None:
        spec = _refit(from_measurements, out, request.name, warn)
        inputs: tuple[Path, ...] = (from_measurements,)
    else:
        kept = measurements_path(out)
        if kept.exists() and not request.force:
            raise OutputError(f"{str(kept)!r} (the measurements of an earlier run) exists; refit it with "
                              f"--from-measurements {str(kept)!r}, or pass --force to measure again over it")
        try:
            spec = _measure(kept, device=device, quick=request.quick, name=request.name, progress=progress,
                            notify=notify)
        except LayerscopeError as exc:
            if not kept.exists():
                raise
            raise type(exc)(f"{exc} (the measurements are kept in {str(kept)!r}: refit them with "
                            f"layerscope calibrate --from-measurements {str(kept)!r} --out FILE)") from exc
        inputs = ()
    text = dump_hardware_json(spec) if suffix == ".json" else dump_hardware_yaml(spec)
    with atomic_write(out, "w", inputs=inputs) as fh:
        fh.write(text)
    saved = _save_for_machine(spec, text if suffix != ".json" else dump_hardware_yaml(spec)) \
        if request.save and from_measurements is None else None
    return result_of(spec, out, saved)


def _save_for_machine(spec: HardwareSpec, yaml_text: str) -> Path:
    """Write the calibrated spec where ``demo`` looks for this machine's (:func:`saved_spec_path`)."""
    from layerscope.hardware.host import keep_spec, saved_spec_path

    assert spec.calibration is not None
    m = spec.calibration.measurements
    return keep_spec(saved_spec_path(m.device, m.device_name or m.device, m.threads), yaml_text)


def _refit(path: Path, out: Path, name: str | None, warn: Callable[[str], None]) -> HardwareSpec:
    from layerscope.capture.calibrate import spec_from_run
    from layerscope.hardware.calibration import read_calibration_run
    from layerscope.units import check_output

    check_output(out, (path,))  # before the fit: never over the file it reads
    run = read_calibration_run(path)
    if not run.complete:
        warn(f"{str(path)!r} holds {run.measured} of {run.total} measurements (the run stopped early); fitting "
             "those")
    return spec_from_run(run, name=name)


def _measure(kept: Path, *, device: str, quick: bool, name: str | None, progress: ProgressFn | None,
             notify: NotifyFn | None) -> HardwareSpec:
    from layerscope.capture.calibrate import calibrate as measure_and_fit
    from layerscope.hardware.calibration import CalibrationRun
    from layerscope.units import atomic_write

    def checkpoint(run: CalibrationRun) -> None:
        with atomic_write(kept, "w") as fh:
            fh.write(run.model_dump_json(indent=1))

    return measure_and_fit(device, quick=quick, name=name, progress=progress, checkpoint=checkpoint, notify=notify)
