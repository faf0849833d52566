"""``validate``: capture a model on this device, estimate and simulate the same workload, and join predicted and
measured time op by op.

:func:`run_validation` takes one :class:`ValidateRequest` and returns the
:class:`~layerscope.analysis.validate.ValidationResult` it computed (the joins, the capture, the estimate: what
:func:`rejoin`, :func:`~layerscope.analysis.validate.combine_repeats` and the demo go on with); :func:`result_of`
makes of it one :class:`ValidateResult`, the JSON contract of ``layerscope validate --json`` and of the
``validation.json`` it writes (its schema: docs/schema/validate.json). :func:`validate` is the keyword form of
:func:`run_validation` for library callers.

The join rule, the corrections for the instrumentation and the profiler, and how repeats combine are analysis:
:mod:`layerscope.analysis.validate` (its module docstring says them).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

import numpy as np
from pydantic import BaseModel

from layerscope.analysis.validate import (
    PhaseValidation,
    ValidationResult,
    captured_times,
    combine_repeats,
    join_capture_times,
    predicted_ops,
)
from layerscope.app.requests import MODEL_CONFIG, HardwareRef, ModelRef, WorkloadRequest, build_request
from layerscope.errors import AnalysisError, OutputError
from layerscope.hardware.host import CpuLoad, cpu_sample, load_between
from layerscope.units import atomic_write, make_output_dir

if TYPE_CHECKING:
    from layerscope.app.simulate import SimulationRun
    from layerscope.capture import CaptureResult
    from layerscope.capture.machine import MachineMeasurement, ThreadChoice
    from layerscope.capture.progress import ProgressFn
    from layerscope.cost import Estimate
    from layerscope.hardware import HardwareSpec
    from layerscope.model import ModelSpec

log = logging.getLogger(__name__)

__all__ = ["MEASURE", "PhaseResult", "ResolvedHardware", "ValidateRequest", "ValidateResult", "rejoin",
           "resolve_hardware", "result_of", "run_validation", "validate", "validation_steps"]

#: Hardware argument that measures this machine instead of loading a spec.
MEASURE = "measure"

_RESULT_CONFIG = MODEL_CONFIG


class ValidateRequest(BaseModel):
    """What to validate: a model (cut to its first ``layers``) captured on a device, and the hardware spec, cost
    model and workload its predictions are made with. Ranges are checked by :func:`run_validation`, whose
    errors name the option (``repeats (--repeats): 0 is out of range``)."""

    model_config = MODEL_CONFIG

    model: ModelRef
    """Catalog name, Hugging Face id (local cache), ``config.json`` or checkpoint directory."""
    hardware: HardwareRef = MEASURE
    """Preset name or spec file, a loaded HardwareSpec, or ``"measure"``: this machine measured through torch."""
    layers: int | None = None
    """Keep only the first N decoder layers; ``None``: all of them."""
    dtype: str = "fp32"
    """Data type of the capture and of the predictions (fp32, bf16, fp16)."""
    batch: int = 1
    """Sequences per pass."""
    prompt_len: int = 128
    """Prompt tokens prefilled; decode steps run over that prompt's KV cache."""
    decode_steps: int = 0
    """Decode steps validated after the prefill (0: the prefill only)."""
    warmup: int = 2
    """Unrecorded warm-up iterations of the capture."""
    iterations: int = 3
    """Recorded iterations (measured times are per iteration)."""
    cost_model: str = "roofline"
    """Registered cost model that times the predicted ops."""
    device: str = "cpu"
    """Device the capture runs on: ``cpu`` or ``cuda``."""
    random_weights: bool = False
    """Random weights even where a checkpoint exists."""
    seed: int = 0
    """Seed of the random weights and inputs."""
    out_dir: Path = Path("out/validate")
    """Directory of the traces, ``validation.json`` and (``hardware="measure"``) ``hardware.yaml``."""
    correct_instrumentation: bool = True
    """Subtract the annotation hooks' and the profiler's own time from the measured times."""
    repeats: int = 1
    """Captures of the workload; more than one reports the median of their joins."""
    unprofiled: bool = True
    """On the CPU, measure from the iterations run again without the profiler (CUDA: ignored)."""
    probe: bool = True
    """Time the machine check before and after each capture."""
    max_wait_s: float = 0.0
    """Seconds measuring this machine may wait for a busy machine to quieten."""
    threads: int | Literal["auto"] | None = None
    """torch's intra-op threads on the CPU: a count, ``"auto"`` (as many as other processes leave a free core), or
    ``None`` (torch's current count)."""


# --- The result -------------------------------------------------------------------------------------------


class ForwardRow(BaseModel):
    """A whole forward: a phase's, or one of its steps (``prefill``, ``decode_step_K``)."""

    model_config = _RESULT_CONFIG

    name: str
    """``prefill``, ``decode`` or ``decode_step_K``."""
    predicted_s: float
    """Every predicted op of the forward summed, seconds."""
    measured_s: float
    """The forward's measured time per iteration, seconds (corrected unless ``--raw-times``)."""
    error: float | None
    """``(predicted − measured) / measured``; ``null`` when nothing was measured."""


class KindErrorRow(BaseModel):
    """The joined rows of one op kind, summed."""

    model_config = _RESULT_CONFIG

    kind: str
    """The rows' kind (``gemm``, ``attention+kv_write+rope``, …)."""
    rows: int
    """Joined rows of this kind."""
    predicted_s: float
    """Their predicted time, seconds."""
    measured_s: float
    """Their measured time, seconds."""
    error: float | None
    """``(predicted − measured) / measured``; ``null`` when nothing was measured."""


class JoinedRow(BaseModel):
    """One joined row: a captured module (or the forward) against the predicted ops anchored at it."""

    model_config = _RESULT_CONFIG

    name: str
    """The captured module's path, or ``(forward)``."""
    kind: str
    """The anchored ops' kind; several kinds joined with ``+``."""
    rule: Literal["module", "self"]
    """``module``: the module's inclusive time; ``self``: its time less its kept children's."""
    predicted_s: float
    """The anchored ops' predicted time summed, seconds."""
    measured_s: float
    """The measured time per iteration, seconds (the instrumentation and profiler time subtracted)."""
    error: float | None
    """``(predicted − measured) / measured``; ``null`` when nothing was measured."""
    instrumentation_s: float
    """Hook time of its children's calls subtracted from ``measured_s``, seconds."""
    profiler_s: float
    """The profiler's time subtracted from ``measured_s`` (unprofiled timing: what the profiled trace adds on top
    of it), seconds."""
    raw_error: float | None
    """The error against ``measured_s + instrumentation_s + profiler_s``; ``null`` when that is not positive."""
    predicted_ops: list[str]
    """The predicted ops anchored at the node."""
    folded: list[str]
    """Captured child modules with nothing predicted, whose time is counted in ``measured_s``."""


class UnmatchedRow(BaseModel):
    """A predicted op or captured module with no counterpart of its own, and where its time went."""

    model_config = _RESULT_CONFIG

    name: str
    """The op's or module's name."""
    time_s: float
    """Its time, seconds (predicted or measured)."""
    note: str
    """``compared within X``, ``folded into X``, ``self time with no predicted op``, …"""
    counted_in: str | None
    """The node whose row counts this time; ``null`` when it is counted nowhere else."""


class PhaseResult(BaseModel):
    """Predicted vs measured for one phase, per recorded iteration."""

    model_config = _RESULT_CONFIG

    phase: str
    """``prefill`` or ``decode`` (all decode steps of an iteration, summed per op)."""
    ops_joined: int
    """Joined rows (``ops``)."""
    forward_error: float | None
    """The whole forward's error, ``(predicted − measured) / measured``."""
    median_abs_error: float | None
    """Median ``|error|`` over the joined rows."""
    p90_abs_error: float | None
    """90th percentile of ``|error|`` over the joined rows (linear interpolation)."""
    weighted_abs_error: float | None
    """``Σ|predicted − measured| / Σ measured`` over the joined rows."""
    only_predicted: int
    """Entries of ``only_predicted_ops``."""
    only_measured: int
    """Entries of ``only_measured_ops``."""
    call_overhead_s: float
    """Instrumentation per annotated module call subtracted, seconds (0: raw times)."""
    instrumentation_s: float
    """Instrumentation subtracted from the forward, seconds."""
    event_overhead_s: float
    """The profiler's time per recorded aten event subtracted, seconds (0: raw or unprofiled times)."""
    profiler_s: float
    """The profiler time subtracted from the forward (unprofiled timing: what the profiled trace adds), seconds."""
    raw_median_abs_error: float | None
    """The median ``|error|`` with the instrumentation and profiler time left in."""
    repeats: int
    """Captures whose joins were combined (measured times are their medians when more than 1)."""
    forward_spread: float | None
    """``(max − min) / median`` of the captures' forward times; ``null`` with one capture."""
    timing: Literal["profiled", "unprofiled"]
    """Where the measured times come from: the profiled trace, or the capture's pass without the profiler."""
    forward: ForwardRow
    """The phase's whole forward."""
    forward_measured_all_s: list[float]
    """Each capture's measured forward, seconds, in capture order."""
    steps: list[ForwardRow]
    """Each forward of the phase (one for prefill, one per decode step)."""
    by_kind: list[KindErrorRow]
    """Joined rows summed per kind, largest measured time first."""
    ops: list[JoinedRow]
    """The joined rows."""
    only_predicted_ops: list[UnmatchedRow]
    """Predicted ops compared within another node, and rows whose measured time is not positive."""
    only_measured_ops: list[UnmatchedRow]
    """Captured modules folded into their parent, and self time with no predicted op."""


class LoadRow(BaseModel):
    """What the CPUs did over a window, in cores' worth (CPU-seconds per second)."""

    model_config = _RESULT_CONFIG

    wall_s: float
    """The window, seconds."""
    cores: int
    """Online logical CPUs."""
    own_cores: float
    """This process (all its threads)."""
    others_cores: float
    """Every other process, and the kernel's work for them."""
    steal_cores: float
    """Time the hypervisor ran other guests on this machine's virtual CPUs."""
    busy_cores: float
    """Cores' worth taken from this process by others: ``others_cores + steal_cores``."""

    def to_load(self) -> CpuLoad:
        """The :class:`~layerscope.hardware.host.CpuLoad` this row describes."""
        return CpuLoad(self.wall_s, self.cores, self.own_cores, self.others_cores, self.steal_cores)


class ThreadChoiceRow(BaseModel):
    """The intra-op threads torch ran with, and why."""

    model_config = _RESULT_CONFIG

    threads: int
    """Threads used."""
    max_threads: int
    """torch's own count (its default, or what ``OMP_NUM_THREADS`` made it)."""
    requested: int | None
    """The count asked for; ``null``: chosen from the load."""
    load: LoadRow | None
    """Other processes' load read before choosing; ``null``: not read or not known."""

    def describe(self) -> str:
        """One line on the choice (:meth:`~layerscope.capture.machine.ThreadChoice.describe`)."""
        from layerscope.capture.machine import ThreadChoice

        load = None if self.load is None else self.load.to_load()
        return ThreadChoice(self.threads, self.max_threads, load, self.requested).describe()


class RoundRow(BaseModel):
    """The figures of one round of the machine measurement (rates per second of wall time)."""

    model_config = _RESULT_CONFIG

    gemm_flops_per_s: dict[str, float]
    """Best GEMM rate of the round, per dtype, FLOP/s."""
    bandwidth_bytes_per_s: float
    """Memory bandwidth, bytes per second."""
    vector_flops_per_s: float
    """Vector (non-matrix) rate, FLOP/s."""
    launch_overhead_s: float
    """Per-op overhead, seconds."""


class MeasurementRow(BaseModel):
    """How this machine was measured (``--hardware measure``): rounds, their spread, other processes' load."""

    model_config = _RESULT_CONFIG

    threads: int
    """Threads the measurement ran with."""
    rounds: int
    """Rounds of probes kept (each figure of the spec is the best of them)."""
    attempts: int
    """Measurement attempts, the kept one included (a busy machine is measured again)."""
    waited_s: float
    """Seconds waited for a busy machine to quieten."""
    busy: bool
    """Whether other processes took cores our threads needed during the kept attempt."""
    oversubscribed_cores: float
    """Cores' worth our threads waited for because others held them."""
    load: LoadRow | None
    """Other processes' load during the kept attempt; ``null`` where the OS cannot tell."""
    spread: dict[str, float | None]
    """``(worst − best) / best`` of each figure over the rounds (``gemm_<dtype>``, ``bandwidth``, ``vector``,
    ``launch``)."""
    per_round: list[RoundRow]
    """Every round's figures."""


class ProbeReadingRow(BaseModel):
    """One call of the machine check: an ``m × n × k`` GEMM over cold weights."""

    model_config = _RESULT_CONFIG

    m: int
    """Rows of the activation."""
    n: int
    """Output features."""
    k: int
    """Reduction width."""
    dtype: str
    """Data type."""
    measured_s: float
    """Median measured time per call, seconds."""
    predicted_s: float
    """The spec's time per call under the cost model, seconds."""
    ratio: float | None
    """``measured_s / predicted_s``: above 1 when the machine ran slower than the spec says."""

    @property
    def label(self) -> str:
        """``m x n x k``."""
        return f"{self.m}x{self.n}x{self.k}"


class ProbeRow(BaseModel):
    """The machine check at one moment."""

    model_config = _RESULT_CONFIG

    when: str
    """``before`` or ``after`` the capture."""
    capture: int
    """The capture's number, from 1 (0: no capture)."""
    label: str
    """``before capture 2``, …"""
    readings: list[ProbeReadingRow]
    """One per probe call."""


class EstimateTimes(BaseModel):
    """The cost model's estimate of the validated workload."""

    model_config = _RESULT_CONFIG

    ttft_s: float | None
    """Time to first token (the prefill), seconds."""
    tpot_s: float | None
    """Time per output token (mean decode step), seconds; ``null`` without decode steps."""
    phase_times_s: dict[str, float]
    """Seconds per phase."""


class ValidateResult(BaseModel):
    """The answer of ``layerscope validate``: its ``--json`` output and ``validation.json``. Times are per recorded
    iteration; errors are ``(predicted − measured) / measured``, negative when the prediction is too fast."""

    model_config = _RESULT_CONFIG

    model: str
    """The model as given."""
    hardware: str
    """The hardware spec's name."""
    hardware_spec: str | None
    """The measured spec written as YAML (``--hardware measure``), else ``null``."""
    cost_model: str
    """The cost model that timed the predicted ops."""
    device: str
    """The capture's device."""
    dtype: str
    """The data type captured and predicted."""
    layers: int
    """Decoder layers built."""
    batch: int
    """Sequences per pass."""
    prompt_len: int
    """Prompt tokens prefilled."""
    decode_steps: int
    """Decode steps validated after the prefill."""
    threads: int
    """Intra-op threads torch ran the capture with."""
    iterations: int
    """Recorded iterations."""
    warmup: int
    """Unrecorded warm-up iterations."""
    weights: Literal["random", "loaded"]
    """Whether the capture ran a checkpoint's weights or random ones."""
    estimate: EstimateTimes
    """The estimate of the same workload."""
    phases: list[PhaseResult]
    """Predicted vs measured per phase (prefill; decode with decode steps)."""
    traces: dict[str, str]
    """The traces written: ``simulated_prefill``, ``simulated_decode``, ``captured``, ``captured_<i>`` (repeats)."""
    machine_probes: list[ProbeRow]
    """The machine check before and after each capture (empty with ``--no-probe``)."""
    machine_measurement: MeasurementRow | None
    """How this machine was measured (``--hardware measure``), else ``null``."""
    capture_loads: list[LoadRow | None]
    """Other processes' CPU load during each capture (``null`` where the OS cannot tell)."""
    thread_choice: ThreadChoiceRow | None
    """How the threads were chosen; ``null``: torch's count as it was."""


def phase_result(phase: PhaseValidation) -> PhaseResult:
    """The result model of one phase's join."""
    return PhaseResult.model_validate(phase.to_dict())


def probe_rows(probes: Sequence[Any]) -> list[ProbeRow]:
    """The result rows of :class:`~layerscope.capture.probe.MachineProbe` readings."""
    return [ProbeRow.model_validate(p.to_dict()) for p in probes]


def load_rows(loads: Sequence[CpuLoad | None]) -> list[LoadRow | None]:
    """The result rows of CPU loads (``None`` kept)."""
    return [None if c is None else LoadRow.model_validate(c.to_dict()) for c in loads]


def measurement_row(measurement: MachineMeasurement | None) -> MeasurementRow | None:
    return None if measurement is None else MeasurementRow.model_validate(measurement.to_dict())


def thread_choice_row(choice: ThreadChoice | None) -> ThreadChoiceRow | None:
    return None if choice is None else ThreadChoiceRow.model_validate(choice.to_dict())


def result_of(v: ValidationResult) -> ValidateResult:
    """The result model of a validation."""
    return ValidateResult(
        model=v.model, hardware=v.hardware.name, hardware_spec=str(v.hardware_path) if v.hardware_path else None,
        cost_model=v.cost_model, device=v.device, dtype=v.dtype, layers=v.layers, batch=v.batch,
        prompt_len=v.prompt_len, decode_steps=v.decode_steps, threads=v.threads, iterations=v.capture.iterations,
        warmup=v.capture.warmup, weights=v.capture.weights,
        estimate=EstimateTimes(ttft_s=v.estimate.ttft_s, tpot_s=v.estimate.tpot_s,
                               phase_times_s=dict(v.estimate.phase_times_s)),
        phases=[phase_result(p) for p in v.phases], traces={k: str(p) for k, p in v.traces.items()},
        machine_probes=probe_rows(v.probes), machine_measurement=measurement_row(v.measurement),
        capture_loads=load_rows(v.capture_loads), thread_choice=thread_choice_row(v.thread_choice),
    )


def write_validation_json(v: ValidationResult, path: Path) -> None:
    """``validation.json``: :func:`result_of` as strict JSON (non-finite floats as ``null``), atomically."""
    with atomic_write(path, "w") as fh:
        json.dump(_strict(result_of(v).model_dump(mode="json")), fh, indent=2)


def _strict(value: Any) -> Any:
    """``value`` with non-finite floats as ``None`` (strict JSON)."""
    if isinstance(value, float):
        return value if np.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _strict(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_strict(v) for v in value]
    return value


# --- The orchestration ------------------------------------------------------------------------------------


class ResolvedHardware(NamedTuple):
    """The spec a validation times on, where it was written, and (when this machine was measured) how."""

    spec: HardwareSpec
    path: Path | None
    measurement: MachineMeasurement | None = None


def resolve_hardware(hardware: str | os.PathLike[str] | HardwareSpec, *, device: str = "cpu",
                     out: Path | None = None, max_wait_s: float = 0.0) -> ResolvedHardware:
    """A spec object, a preset name or file, or ``"measure"``: this machine measured through torch in rounds
    (:func:`~layerscope.capture.machine.measure_machine_robust`, waiting up to ``max_wait_s`` for a busy machine
    to quieten; written as YAML to ``out`` when given)."""
    from layerscope.hardware import HardwareSpec, load_hardware

    if isinstance(hardware, HardwareSpec):
        return ResolvedHardware(hardware, None)
    if os.fspath(hardware) != MEASURE:
        return ResolvedHardware(load_hardware(os.fspath(hardware)), None)
    from layerscope.capture.machine import measure_machine_robust
    from layerscope.hardware.loaders import dump_hardware_yaml

    measurement = measure_machine_robust(device, max_wait_s=max_wait_s)
    if out is not None:
        with atomic_write(out, "w") as fh:
            fh.write(dump_hardware_yaml(measurement.spec))
    return ResolvedHardware(measurement.spec, out, measurement)


def _check_args(layers: int | None, batch: int, prompt_len: int, decode_steps: int, warmup: int,
                iterations: int, repeats: int = 1) -> None:
    for name, value, low in (("layers", layers, 1), ("batch", batch, 1), ("prompt_len", prompt_len, 1),
                             ("decode_steps", decode_steps, 0), ("warmup", warmup, 0),
                             ("iterations", iterations, 1), ("repeats", repeats, 1)):
        if value is not None and value < low:
            flag = "--" + name.replace("_", "-")
            raise AnalysisError(f"{name} ({flag}): {value} is out of range; must be >= {low}")


def _captured_spec(model: str | os.PathLike[str], layers: int | None, random_weights: bool) -> ModelSpec:
    """The spec of exactly what the capture builds: its config, truncated to ``layers``."""
    from layerscope.capture.build import prepare_config
    from layerscope.capture.source import resolve_model
    from layerscope.model import model_spec_from_dict

    source = resolve_model(model)
    load = source.weights_dir is not None and not random_weights
    return model_spec_from_dict(prepare_config(source.config, layers=layers, keep_quantization=load), source.name)


def _join_capture(cap: CaptureResult, sims: Sequence[SimulationRun], *, device: str, decode_steps: int,
                  correct_instrumentation: bool) -> tuple[PhaseValidation, ...]:
    """One capture joined with the simulations' predicted ops (prefill; decode when it has decode steps)."""
    return join_capture_times(
        captured_times(cap.trace_path, device=device), predicted_ops(sims[0].timed),
        predicted_ops(sims[1].timed) if decode_steps else None, decode_steps=decode_steps, unprofiled=cap.unprofiled,
        per_event_s=cap.profiler_event.per_event_s if cap.profiler_event else None,
        correct_instrumentation=correct_instrumentation)


def _predict(spec: ModelSpec, hw: HardwareSpec, *, dtype: str, batch: int, prompt_len: int, decode_steps: int,
             cost_model: str, out: Path) -> tuple[Estimate, list[SimulationRun], dict[str, Path]]:
    """The estimate and the 1-engine simulations of the whole model (prefill; decode with decode steps, over the
    prompt's KV cache) of the validated workload, fused attention, their traces written to ``out``."""
    from layerscope.app.simulate import SimulateRequest, run_simulation
    from layerscope.cost import estimate
    from layerscope.workload import make_workload

    dtypes = {"weight_dtype": dtype, "act_dtype": dtype, "kv_dtype": dtype}
    workload = make_workload(phase="generate" if decode_steps else "prefill", batch=batch,
                             prompt_len=prompt_len, decode_steps=decode_steps, **dtypes)
    est = estimate(spec, hw, workload, cost_model=cost_model, attention="fused")

    def run(phase: WorkloadRequest, trace: Path) -> SimulationRun:
        return run_simulation(SimulateRequest(model=spec, hardware=hw, workload=phase, engines=1,
                                              cost_model=cost_model, attention="fused", all_layers=True, out=trace))

    traces = {"simulated_prefill": out / "simulated-prefill.json.gz"}
    sims = [run(WorkloadRequest(phase="prefill", batch=batch, prompt_len=prompt_len, **dtypes),
                traces["simulated_prefill"])]
    if decode_steps:
        traces["simulated_decode"] = out / "simulated-decode.json.gz"
        sims.append(run(WorkloadRequest(phase="decode", batch=batch, context=prompt_len, decode_steps=decode_steps,
                                        **dtypes), traces["simulated_decode"]))
    return est, sims, traces


def rejoin(result: ValidationResult, hardware: HardwareSpec) -> ValidationResult:
    """``result``'s capture predicted again on ``hardware`` and joined anew (same rules, same
    corrections); the simulated traces and ``validation.json`` beside the capture are rewritten.

    For calibrations taken while the captures run (``bench/bench_accuracy.py`` calibrates once per
    round and predicts every round's captures with the runs combined): the capture is kept, only the
    prediction changes. ``result`` must be one capture's validation (combine after rejoining).
    """
    from layerscope.capture.probe import predict_probe

    if result.spec is None:
        raise AnalysisError("rejoin: the validation carries no model spec (not made by validate)")
    several = [p.phase for p in result.phases if p.repeats != 1]
    if several:
        raise AnalysisError(f"rejoin: phases {', '.join(several)} combine several captures; rejoin each capture, "
                            "then combine")
    out = result.capture.trace_path.parent
    est, sims, traces = _predict(result.spec, hardware, dtype=result.dtype, batch=result.batch,
                                 prompt_len=result.prompt_len, decode_steps=result.decode_steps,
                                 cost_model=result.cost_model, out=out)
    phases = _join_capture(result.capture, sims, device=result.device, decode_steps=result.decode_steps,
                           correct_instrumentation=result.corrected)
    probes = tuple(dataclasses.replace(p, readings=predict_probe(p.readings, hardware, result.cost_model))
                   for p in result.probes)
    again = dataclasses.replace(result, hardware=hardware, hardware_path=None, estimate=est, phases=phases,
                                traces={**result.traces, **traces}, probes=probes)
    write_validation_json(again, out / "validation.json")
    return again


def _captured_name(repeat: int) -> str:
    """The trace file of the ``repeat``-th capture (from 1): ``captured.json.gz``, ``captured-2.json.gz``, …"""
    return "captured.json.gz" if repeat == 1 else f"captured-{repeat}.json.gz"


def _unprofiled(r: ValidateRequest) -> bool:
    return r.unprofiled and r.correct_instrumentation and r.device == "cpu"


def _measuring(r: ValidateRequest) -> bool:
    from layerscope.hardware import HardwareSpec

    return not isinstance(r.hardware, HardwareSpec) and os.fspath(r.hardware) == MEASURE


def validation_steps(request: ValidateRequest) -> int:
    """The steps :func:`run_validation` reports to its ``progress``: loading torch, measuring this machine
    (``measure``), the predictions, and per capture its machine checks, its own steps and the join; the write."""
    from layerscope.capture.api import capture_steps

    r = request
    per_capture = capture_steps(device=r.device, warmup=r.warmup, iterations=r.iterations, unprofiled=_unprofiled(r))
    return 1 + _measuring(r) + 1 + r.repeats * (per_capture + 2 * r.probe + 1) + 1


def run_validation(request: ValidateRequest, *, progress: ProgressFn | None = None) -> ValidationResult:
    """Estimate, simulate (1 engine) and capture the same workload, and join them op by op.

    Writes to ``out_dir`` (created): ``simulated-prefill.json.gz``, ``simulated-decode.json.gz``
    (with decode steps), ``captured.json.gz``, ``validation.json`` and, for ``hardware="measure"``,
    ``hardware.yaml``. ``correct_instrumentation`` subtracts the measured per-call cost of the
    module annotations and the profiler's measured per-event cost (:mod:`layerscope.analysis.validate`,
    "Instrumentation"). ``repeats`` > 1 captures the workload that many times (``captured-2.json.gz``, …) and
    reports the median of their joins (:func:`~layerscope.analysis.validate.combine_repeats`; "Repeats").
    ``unprofiled`` (on the CPU; ignored on CUDA) runs each capture's iterations again without the profiler and
    measures from that pass. ``probe`` times the machine check (:mod:`layerscope.capture.probe`, about a second)
    before and after each capture; other processes' CPU load is read during each (``capture_loads``).
    ``max_wait_s``: how long measuring this machine may wait for a busy one to quieten (:func:`resolve_hardware`).
    ``threads`` (CPU): torch's intra-op threads for the measurement and the captures, ``"auto"`` as many as other
    processes leave a free core (:func:`~layerscope.capture.machine.choose_threads`), ``None`` torch's current
    count. ``progress`` is told each step as it starts (:mod:`layerscope.capture.progress`). Raises
    :class:`~layerscope.errors.LayerscopeError` subclasses on bad input.
    """
    from layerscope.capture import capture
    from layerscope.capture.api import capture_steps
    from layerscope.capture.build import capture_dtype, require_torch
    from layerscope.capture.machine import choose_threads, torch_threads
    from layerscope.capture.probe import probe_machine
    from layerscope.capture.progress import Steps
    from layerscope.cost.models import get_cost_model
    from layerscope.hardware import HardwareSpec, load_hardware

    r = request
    model, hardware, device, cost_model = r.model, r.hardware, r.device, r.cost_model
    _check_args(r.layers, r.batch, r.prompt_len, r.decode_steps, r.warmup, r.iterations, r.repeats)
    if r.max_wait_s < 0:
        raise AnalysisError(f"--wait-quiet {r.max_wait_s}: must be >= 0 seconds")
    get_cost_model(cost_model)  # an unknown name fails before anything is created
    dt = capture_dtype(r.dtype).value
    out = Path(r.out_dir)
    if out.exists() and not out.is_dir():
        raise OutputError(f"out_dir {str(out)!r} exists and is not a directory")
    spec = _captured_spec(model, r.layers, r.random_weights)
    if not isinstance(hardware, HardwareSpec) and os.fspath(hardware) != MEASURE:
        hardware = load_hardware(os.fspath(hardware))  # a bad name fails before torch is imported
    unprofiled = _unprofiled(r)
    per_capture = capture_steps(device=device, warmup=r.warmup, iterations=r.iterations, unprofiled=unprofiled)
    measuring = _measuring(r)
    steps = Steps(progress, validation_steps(r))
    steps.next("loading torch")
    torch, _ = require_torch()
    choice = None
    if r.threads is not None and device == "cpu":
        choice = choose_threads(None if r.threads == "auto" else int(r.threads))
    with torch_threads(choice.threads) if choice is not None else contextlib.nullcontext():
        make_output_dir(out)
        if measuring:
            steps.next("measuring this machine")
        hw, hw_path, measurement = resolve_hardware(hardware, device=device, out=out / "hardware.yaml",
                                                    max_wait_s=r.max_wait_s)
        steps.next("estimating and simulating the captured model")
        est, sims, traces = _predict(spec, hw, dtype=dt, batch=r.batch, prompt_len=r.prompt_len,
                                     decode_steps=r.decode_steps, cost_model=cost_model, out=out)
        results = []
        for repeat in range(1, r.repeats + 1):
            which = f"capture {repeat}/{r.repeats}: " if r.repeats > 1 else "capture: "
            if r.probe:
                steps.next(which + "machine check before")
            before = (probe_machine(hw, when="before", capture=repeat, device=device, dtype=dt, cost_model=cost_model),
                      ) if r.probe else ()
            start = cpu_sample()
            cap = capture(model, layers=r.layers, dtype=dt, device=device, batch=r.batch, prompt_len=r.prompt_len,
                          decode_steps=r.decode_steps, warmup=r.warmup, iterations=r.iterations,
                          random_weights=r.random_weights, seed=r.seed, out=out / _captured_name(repeat),
                          unprofiled=unprofiled, progress=steps.nested(per_capture, which))
            load = load_between(start, cpu_sample()) if device == "cpu" else None
            if r.probe:
                steps.next(which + "machine check after")
            after = (probe_machine(hw, when="after", capture=repeat, device=device, dtype=dt, cost_model=cost_model),
                     ) if r.probe else ()
            steps.next(which + "joining predicted and measured op by op")
            phases = _join_capture(cap, sims, device=device, decode_steps=r.decode_steps,
                                   correct_instrumentation=r.correct_instrumentation)
            results.append(ValidationResult(
                model=str(model), hardware=hw, hardware_path=hw_path, cost_model=cost_model, device=device, dtype=dt,
                layers=spec.num_layers, batch=r.batch, prompt_len=r.prompt_len, decode_steps=r.decode_steps,
                threads=int(torch.get_num_threads()), estimate=est, capture=cap, phases=phases,
                traces={**traces, "captured": cap.trace_path}, spec=spec, corrected=r.correct_instrumentation,
                probes=before + after, measurement=measurement, capture_loads=(load,), thread_choice=choice,
            ))
            if r.repeats > 1:
                log.info("capture %d/%d: forward measured %s", repeat, r.repeats,
                         ", ".join(f"{p.phase} {p.forward.measured_s:.4g} s" for p in phases))
        steps.next("writing validation.json")
        result = combine_repeats(results)
        write_validation_json(result, out / "validation.json")
        for p in result.phases:
            median = "-" if p.median_abs_error is None else f"{p.median_abs_error:.1%}"
            log.info("%s: forward error %+.1f%%, median |error| %s over %d ops", p.phase, 100 * p.forward.error,
                     median, len(p.rows))
    steps.finish()
    return result


def validate(
    model: ModelRef,
    hardware: HardwareRef = MEASURE,
    *,
    layers: int | None = None,
    dtype: str = "fp32",
    batch: int = 1,
    prompt_len: int = 128,
    decode_steps: int = 0,
    warmup: int = 2,
    iterations: int = 3,
    cost_model: str = "roofline",
    device: str = "cpu",
    random_weights: bool = False,
    seed: int = 0,
    out_dir: str | os.PathLike[str] = "out/validate",
    correct_instrumentation: bool = True,
    repeats: int = 1,
    unprofiled: bool = True,
    probe: bool = True,
    max_wait_s: float = 0.0,
    threads: int | Literal["auto"] | None = None,
) -> ValidationResult:
    """:func:`run_validation` of the :class:`ValidateRequest` these fields make (a bad field raises
    :class:`~layerscope.errors.AnalysisError` naming it)."""
    return run_validation(build_request(
        ValidateRequest, error=AnalysisError, model=model, hardware=hardware, layers=layers, dtype=dtype,
        batch=batch, prompt_len=prompt_len, decode_steps=decode_steps, warmup=warmup, iterations=iterations,
        cost_model=cost_model, device=device, random_weights=random_weights, seed=seed, out_dir=out_dir,
        correct_instrumentation=correct_instrumentation, repeats=repeats, unprofiled=unprofiled, probe=probe,
        max_wait_s=max_wait_s, threads=threads))
