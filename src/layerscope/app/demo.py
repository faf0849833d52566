"""``demo``: the main job on the bundled default: one decoder layer estimated, simulated, captured, compared — and
said in plain words.

:func:`run_demo` takes one :class:`DemoRequest` and returns what it computed (:class:`DemoRun`); :func:`result_of`
makes of it one :class:`DemoResult`, the JSON contract of ``layerscope demo --json`` (its schema:
docs/schema/demo.json); :func:`demo` does both.

The default request takes Llama-3.2-1B's layer 0 (a real config, random weights, no downloads) and:

1. picks torch's intra-op threads: as many as other processes leave a free core
   (:func:`~layerscope.capture.machine.choose_threads`), so that neither the measurement nor the capture shares a
   core with someone else's work;
2. finds this machine's spec: the one given (``hardware``), else the spec ``layerscope calibrate`` saved for this
   CPU at that thread count (:func:`~layerscope.hardware.host.saved_spec_path`), else the quick measurement an
   earlier demo kept (:func:`~layerscope.hardware.host.quick_spec_path`), else a quick measurement in rounds
   (:func:`~layerscope.capture.machine.measure_machine_robust`: best of each figure, its spread, the other
   processes' load; a busy machine is waited for, up to ``max_wait_s``), written as YAML and, when the machine was
   not busy, kept for the next demo;
3. estimates the layer's prefill op by op on that spec and simulates it on 1 engine (ops in sequence, as eager
   PyTorch runs them) and on N engines (how the ops would overlap), writing both Perfetto traces;
4. validates: captures a 1-layer model (the layer with its embedding, final norm and lm_head) on the same prompt
   with torch.profiler, the machine checked before and after, and joins predicted and measured time op by op
   (:func:`layerscope.app.validate.run_validation`);
5. says what the numbers mean (:func:`verdict`): the whole forward's error with its sign, where the time went,
   how busy the machine was and the error bars that follow, which ops are off and the known reason; lists the files
   it wrote (:func:`written_files`) and what to open next (:func:`open_commands`).

Without torch, steps 1–2 and 4 are skipped and the ``server-cpu`` preset is used instead.
"""

from __future__ import annotations

import importlib.util
import logging
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel

from layerscope.analysis.validate import PhaseValidation, ValidationResult
from layerscope.app.estimate import EstimateRequest, KindRow, estimate_raw
from layerscope.app.requests import MODEL_CONFIG, WorkloadRequest
from layerscope.app.simulate import SimulateRequest, SimulateResult, SimulationRun, run_simulation
from layerscope.app.simulate import result_of as simulate_result_of
from layerscope.app.validate import (
    LoadRow,
    MeasurementRow,
    PhaseResult,
    ProbeRow,
    ThreadChoiceRow,
    ValidateRequest,
    load_rows,
    measurement_row,
    phase_result,
    probe_rows,
    resolve_hardware,
    run_validation,
    thread_choice_row,
    validation_steps,
)
from layerscope.errors import OutputError, WorkloadError
from layerscope.hardware import HardwareSpec, load_hardware
from layerscope.hardware.host import CpuLoad, cpu_name, keep_spec, quick_spec_path, saved_spec_path, saved_spec_paths
from layerscope.model import load_model_spec
from layerscope.units import make_output_dir

if TYPE_CHECKING:
    from layerscope.capture.machine import MachineMeasurement, ThreadChoice
    from layerscope.capture.progress import ProgressFn
    from layerscope.cost import Estimate
    from layerscope.model import ModelSpec

log = logging.getLogger(__name__)

DEMO_MODEL = "llama-3.2-1b"
#: What ``layerscope calibrate --quick`` takes on the reference 2-core VM (bench/RESULTS.md), said to the user.
QUICK_CALIBRATION_S = 170
#: A forward error within this is "close"; an op off by more than this is explained.
CLOSE_ERROR = 0.15
OFF_ERROR = 0.25
#: Ops below this share of the measured forward are not listed one by one.
MIN_SHARE = 0.005

HardwareSource = Literal["given", "calibrated", "kept", "measured", "preset"]
#: How every error of the demo is signed (``error_sign`` of its JSON).
ERROR_SIGN = "error = (predicted - measured) / measured: negative when the prediction is too fast"

_RESULT_CONFIG = MODEL_CONFIG


class DemoRequest(BaseModel):
    """What the demo runs: a model's layer 0, its prefill of ``prompt_len`` tokens, on this machine."""

    model_config = MODEL_CONFIG

    out_dir: Path = Path("out/demo")
    """Directory of the traces, the measured spec and ``validation.json`` (created)."""
    model: str = DEMO_MODEL
    """Catalog name, Hugging Face id or ``config.json``."""
    prompt_len: int = 256
    """Prefill tokens."""
    engines: int = 4
    """Engines of the overlap simulation."""
    iterations: int = 3
    """Recorded capture iterations."""
    hardware: str | None = None
    """Time on this spec (preset name or file) instead of this machine's calibrated, kept or measured one."""
    threads: int | Literal["auto"] = "auto"
    """torch's intra-op threads; ``"auto"``: as many as other processes leave a free core."""
    max_wait_s: float = 10.0
    """Seconds measuring may wait for a busy machine to quieten."""
    use_saved: bool = True
    """Time on the spec ``calibrate`` saved for this machine, else on the quick measurement an earlier demo kept
    (False: measure now)."""


@dataclass(frozen=True)
class DemoRun:
    """What :func:`run_demo` computed."""

    out_dir: Path
    hardware: HardwareSpec
    hardware_path: Path | None
    hardware_source: HardwareSource
    """``given`` (``--hardware``), ``calibrated`` (the spec ``calibrate`` saved for this machine), ``kept`` (the quick
    measurement an earlier demo kept for it), ``measured`` (measured now), ``preset`` (no torch)."""
    estimate: Estimate
    simulated_1: SimulationRun
    simulated_n: SimulationRun
    validation: ValidationResult | None
    notes: tuple[str, ...]
    measurement: MachineMeasurement | None = None
    thread_choice: ThreadChoice | None = None
    predicted_slowest_s: float | None = None
    """The validated forward predicted with each measured figure's slowest round (``measured`` only)."""
    verdict: tuple[str, ...] = field(default=())
    kept_spec: Path | None = None
    """Where the measurement was kept for the next demo (``measured`` on a quiet machine), else None."""

    @property
    def capture(self) -> Any | None:
        """The capture of the validation (``None`` without torch)."""
        return None if self.validation is None else self.validation.capture

    @property
    def comparison(self) -> PhaseValidation | None:
        """The prefill's predicted vs measured time per op (``None`` without torch)."""
        return None if self.validation is None else self.validation.phase("prefill")


class DemoEstimate(BaseModel):
    """The estimate of the layer's prefill."""

    model_config = _RESULT_CONFIG

    scope: str
    """``layer 0``."""
    ttft_s: float | None
    """The prefill's estimated time, seconds."""
    ops: int
    """Ops estimated."""
    by_kind: list[KindRow]
    """Per op kind, largest time first."""


class WrittenFile(BaseModel):
    """A file the demo wrote."""

    model_config = _RESULT_CONFIG

    path: str
    """Where it is."""
    what: str
    """What it holds."""


class OpenCommand(BaseModel):
    """Something to look at next, and the command that shows it."""

    model_config = _RESULT_CONFIG

    command: str
    """The command line."""
    what: str
    """What it shows."""


class DemoResult(BaseModel):
    """The answer of ``layerscope demo``: its ``--json`` output. Errors are ``(predicted − measured) / measured``,
    negative when the prediction is too fast."""

    model_config = _RESULT_CONFIG

    out_dir: str
    """Directory of the traces, the measured spec and ``validation.json``."""
    hardware: str
    """The hardware spec's name."""
    hardware_spec: str | None
    """The spec file timed on (calibrated, kept or measured now), else ``null``."""
    hardware_source: HardwareSource
    """``given`` (``--hardware``), ``calibrated`` (the spec ``calibrate`` saved for this machine), ``kept`` (the
    quick measurement an earlier demo kept), ``measured`` (measured now), ``preset`` (no torch)."""
    threads: ThreadChoiceRow | None
    """How torch's intra-op threads were chosen; ``null`` without torch."""
    machine_measurement: MeasurementRow | None
    """How this machine was measured (``measured`` only), else ``null``."""
    estimate: DemoEstimate
    """The estimate of the layer's prefill."""
    simulated_1_engine: SimulateResult
    """The layer simulated on 1 engine (ops in sequence, as eager PyTorch runs them)."""
    simulated_n_engines: SimulateResult
    """The layer simulated on ``--engines`` engines (how its ops would overlap)."""
    captured: dict[str, Any] | None
    """What the capture ran and measured: the fields of ``layerscope.capture.CaptureResult`` but its per-module
    summary (``model``, ``trace_path``, ``weights``, ``layers``, ``iterations``, ``unprofiled``, …); ``null``
    without torch."""
    comparison: PhaseResult | None
    """The prefill's predicted (1 engine) vs measured time per op; ``null`` without torch."""
    capture_loads: list[LoadRow | None]
    """Other processes' CPU load during the capture."""
    machine_probes: list[ProbeRow]
    """The machine check before and after the capture."""
    predicted_slowest_s: float | None
    """The validated forward predicted with each measured figure's slowest round (``measured`` only)."""
    machine_adjusted_error: float | None
    """The forward's error with the predicted GEMM time scaled by the machine check's ratio."""
    error_sign: str
    """How the errors are signed."""
    notes: list[str]
    """What to know about the run."""
    verdict: list[str]
    """The result in plain words, one sentence per question."""
    files: list[WrittenFile]
    """Every file the demo wrote (the spec kept for the next demo too), and what each holds."""
    open: list[OpenCommand]
    """What to open next: the simulated overlap, the capture, the op-by-op comparison."""


def result_of(r: DemoRun) -> DemoResult:
    """The result model of a demo run."""
    v = r.validation
    return DemoResult(
        out_dir=str(r.out_dir), hardware=r.hardware.name,
        hardware_spec=str(r.hardware_path) if r.hardware_path else None, hardware_source=r.hardware_source,
        threads=thread_choice_row(r.thread_choice),
        machine_measurement=measurement_row(r.measurement),
        estimate=DemoEstimate(scope=r.estimate.scope, ttft_s=r.estimate.ttft_s, ops=len(r.estimate.ops),
                              by_kind=[KindRow.model_validate(k) for k in r.estimate.breakdown("kind")]),
        simulated_1_engine=simulate_result_of(r.simulated_1), simulated_n_engines=simulate_result_of(r.simulated_n),
        captured=r.capture.model_dump(mode="json", exclude={"summary"}) if r.capture else None,
        comparison=None if r.comparison is None else phase_result(r.comparison),
        capture_loads=[] if v is None else load_rows(v.capture_loads),
        machine_probes=[] if v is None else probe_rows(v.probes),
        predicted_slowest_s=r.predicted_slowest_s,
        machine_adjusted_error=None if v is None else machine_adjusted_error(v),
        error_sign=ERROR_SIGN, notes=list(r.notes), verdict=list(r.verdict), files=written_files(r),
        open=open_commands(r),
    )


def demo(request: DemoRequest, *, progress: ProgressFn | None = None) -> DemoResult:
    """Run the demo of ``request`` (:func:`run_demo`) and describe what it computed."""
    return result_of(run_demo(request, progress=progress))


def _torch_available() -> bool:
    return importlib.util.find_spec("torch") is not None and importlib.util.find_spec("transformers") is not None


def run_demo(request: DemoRequest, *, progress: ProgressFn | None = None) -> DemoRun:
    """Run the main job; traces, the spec and ``validation.json`` go to ``out_dir`` (created).

    ``threads``: torch's intra-op threads, ``"auto"`` as many as other processes leave a free core. ``max_wait_s``:
    how long measuring may wait for a busy machine. ``use_saved``: time on the spec ``calibrate`` saved for this
    machine when there is one, else on the quick measurement an earlier demo kept (else measure, and keep the
    measurement when the machine was not busy). ``progress`` is told each step as it starts
    (:mod:`layerscope.capture.progress`)."""
    out_dir, model, prompt_len, engines = request.out_dir, request.model, request.prompt_len, request.engines
    iterations, hardware, threads = request.iterations, request.hardware, request.threads
    max_wait_s, use_saved = request.max_wait_s, request.use_saved
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise OutputError(f"--out {str(out)!r} exists and is not a directory")
    for name, value in (("prompt_len", prompt_len), ("engines", engines), ("iterations", iterations)):
        if value < 1:
            raise WorkloadError(f"{name} (--{name.replace('_', '-')}): {value} is out of range; must be >= 1")
    if max_wait_s < 0:
        raise WorkloadError(f"--wait-quiet {max_wait_s}: must be >= 0 seconds")
    spec = load_model_spec(model)
    # Inputs first: a bad model or hardware name fails before anything is created.
    user_hw = load_hardware(hardware) if hardware is not None else None
    if not _torch_available():
        make_output_dir(out)
        hw = user_hw or load_hardware("server-cpu")
        bare = () if user_hw else ("torch is not installed: no measurement or capture; timed on the server-cpu "
                                   "preset (pip install 'layerscope[capture]' torch==2.13.0)",)
        est, sim1, simn = _predict(spec, hw, out, prompt_len, engines)
        result = DemoRun(out, hw, None, "given" if user_hw else "preset", est, sim1, simn, None, bare)
        return _with_verdict(result)

    from layerscope.capture.machine import choose_threads, torch_threads
    from layerscope.capture.progress import Steps

    choice = choose_threads(None if threads == "auto" else threads)
    make_output_dir(out)
    notes: list[str] = []
    with torch_threads(choice.threads):
        measurement = None
        hw_path: Path | None = None
        source: HardwareSource
        saved = saved_spec_path("cpu", cpu_name(), choice.threads)
        quick = quick_spec_path("cpu", cpu_name(), choice.threads)
        kept: Path | None = None
        measure_now = user_hw is None and not (use_saved and (saved.is_file() or quick.is_file()))
        # The spec comes later; any spec but "measure" makes the validation's steps.
        validate_request = ValidateRequest(model=model, hardware="server-cpu", layers=1, dtype="fp32",
                                           prompt_len=prompt_len, warmup=2, iterations=iterations, device="cpu",
                                           out_dir=out)
        steps = Steps(progress, measure_now + 1 + validation_steps(validate_request))
        if measure_now:
            steps.next("measuring this machine")
        if user_hw is not None:
            hw, source = user_hw, "given"
        elif use_saved and saved.is_file():
            hw, hw_path, source = load_hardware(saved), saved, "calibrated"
        elif use_saved and quick.is_file():
            hw, hw_path, source = load_hardware(quick), quick, "kept"
        else:
            hw, hw_path, measurement = resolve_hardware("measure", device="cpu", out=out / "this-machine.yaml",
                                                        max_wait_s=max_wait_s)
            source = "measured"
            if measurement is not None and not measurement.busy:
                # Kept for the next demo: this VM's GEMM rate moves 15-20% between minutes (bench/RESULTS.md, "demo
                # stability"), so two fresh measurements disagree by that much while one kept spec predicts the same.
                keep_spec(quick, (out / "this-machine.yaml").read_text())
                kept = quick
            others = saved_spec_paths("cpu", cpu_name()) if use_saved else []
            if others:
                names = ", ".join(o.stem for o in others)
                notes.append(f"a calibrated spec of this CPU exists for other thread counts ({names}); this run "
                             f"uses {choice.threads} threads, so it measured instead")
        steps.next(f"estimating and simulating on 1 and {engines} engines")
        est, sim1, simn = _predict(spec, hw, out, prompt_len, engines)
        validation = run_validation(validate_request.model_copy(update={"hardware": hw}),
                                    progress=steps.nested(validation_steps(validate_request)))
        slowest_s = None
        if measurement is not None and validation.spec is not None:
            slowest_s = _slowest_forward_s(validation, measurement)
    result = DemoRun(out, hw, hw_path, source, est, sim1, simn, validation, tuple(notes), measurement, choice,
                     slowest_s, kept_spec=kept)
    steps.finish()
    return _with_verdict(result)


def _prefill(prompt_len: int) -> WorkloadRequest:
    # CPU eager PyTorch computes in fp32 well; bf16 GEMMs on CPUs without bf16 units are emulated.
    dtype = "fp32"
    return WorkloadRequest(phase="prefill", prompt_len=prompt_len, weight_dtype=dtype, act_dtype=dtype, kv_dtype=dtype)


def _predict(spec: ModelSpec, hw: HardwareSpec, out: Path, prompt_len: int, engines: int
             ) -> tuple[Estimate, SimulationRun, SimulationRun]:
    workload = _prefill(prompt_len)
    est = estimate_raw(EstimateRequest(model=spec, hardware=hw, workload=workload, layer=0, attention="fused"))

    def run(n: int, trace: Path) -> SimulationRun:
        return run_simulation(SimulateRequest(model=spec, hardware=hw, workload=workload, engines=n, layer=0,
                                              attention="fused", out=trace))

    return est, run(1, out / "simulated-1engine.json.gz"), run(engines, out / f"simulated-{engines}engines.json.gz")


def _slowest_forward_s(validation: ValidationResult, measurement: MachineMeasurement) -> float:
    """The validated prefill forward predicted on the spec of each figure's slowest round: the prediction scaled
    by the whole-model estimate's ratio between the two specs (same graph, same cost model; the validation's own
    estimate is the one on the best-round spec)."""
    assert validation.spec is not None
    dtype = validation.dtype
    workload = WorkloadRequest(phase="prefill", prompt_len=validation.prompt_len, weight_dtype=dtype, act_dtype=dtype,
                               kv_dtype=dtype)
    best = validation.estimate.ttft_s or 0.0
    slow = estimate_raw(EstimateRequest(model=validation.spec, hardware=measurement.slowest, workload=workload,
                                        cost_model=validation.cost_model, attention="fused")).ttft_s or 0.0
    forward = validation.phase("prefill").forward.predicted_s
    return forward * slow / best if best > 0 else forward


# --- The verdict ---------------------------------------------------------------------------------------------

def _pct(x: float) -> str:
    return f"{x:+.0%}"


def _ms(s: float) -> str:
    return f"{s * 1e3:.1f} ms" if s >= 1e-3 else f"{s * 1e6:.0f} µs"


def _fast_or_slow(error: float) -> str:
    return "too fast" if error < 0 else "too slow"


#: Why an op kind's prediction is off, by the spec's source: the reasons this project has found and measured
#: (bench/ACCURACY.md, cost/execution.py); a kind with none here is reported as unexplained.
KNOWN_REASONS: dict[tuple[str, str], str] = {
    ("measured", "gemm"): "the quick measurement times two MLP projections (256 rows over cache-cold weights) and "
                          "charges every GEMM their rate: the lm_head's 128256-wide GEMM and the small attention "
                          "projections run at other rates, and this VM's GEMM rate moves between modes (see the "
                          "machine check). `layerscope calibrate` fits the rate by shape (Hockney's half-size) and "
                          "the weight stream",
    ("calibrated", "gemm"): "the GEMM rate of this VM moves by 10-30% within seconds between modes (see the "
                            "machine check); the calibration saw one of them",
    ("measured", "norm"): "an eager RMSNorm runs six kernels (pow, mean, add, rsqrt, mul, mul); the quick "
                          "measurement times one add per kernel in cache, while in a model each kernel's code and "
                          "data come back cold. `layerscope calibrate` measures small ops in a model",
    ("measured", "activation"): "SiLU and the gate multiply are small eager kernels timed from the quick "
                                "measurement's cached add; `layerscope calibrate` fits the rate per kind",
    ("measured", "residual_add"): "a residual add is one small kernel; its time is mostly dispatch and "
                                  "allocation, which the quick measurement takes from an add on one-element tensors",
    ("measured", "embedding"): "the embedding gathers rows scattered over a large table (a page and a TLB miss "
                               "each); the roofline charges only their bytes",
    ("calibrated", "embedding"): "the embedding gathers rows scattered over a large table (a page and a TLB miss "
                                 "each); the roofline charges only their bytes",
    ("*", "sampling"): "greedy sampling (argmax over the logits) is one small kernel whose time is dispatch and "
                       "Python around generate's step, more than the roofline's bytes",
    ("*", "attention+kv_write+rope"): "this row is the attention module's own time beyond its projections: RoPE, "
                                      "the KV write, SDPA and the eager reshapes between them; on this CPU SDPA's "
                                      "fp32 flash kernel runs below the GEMM rate the attention FLOPs are "
                                      "charged at (bench/ACCURACY.md: about -40% after calibration too)",
}


def known_reason(source: str, kind: str) -> str | None:
    """The reason :data:`KNOWN_REASONS` gives for ``kind`` on a spec from ``source``, if any (a kept quick
    measurement has a measured spec's reasons)."""
    source = "measured" if source == "kept" else source
    return KNOWN_REASONS.get((source, kind)) or KNOWN_REASONS.get(("*", kind))


def _taken(path: Path | None) -> str:
    import datetime

    try:
        return datetime.datetime.fromtimestamp(path.stat().st_mtime).strftime("%Y-%m-%d %H:%M") if path else "?"
    except OSError:
        return "?"


def _load_words(load: CpuLoad | None, threads: int) -> str:
    if load is None:
        return "how busy the machine was is unknown (no /proc)"
    over = load.oversubscribed_cores(threads)
    base = f"other processes used {load.busy_cores:.1f} of {load.cores} cores"
    if not load.is_busy_for(threads):
        return f"{base}, leaving each of our {threads} threads a core: quiet enough"
    return (f"{base}: our {threads} threads were {over:.1f} cores short, so they waited for other work and the "
            f"measured times are inflated")


def verdict(r: DemoRun) -> tuple[str, ...]:
    """The demo's result in plain words: a handful of sentences, each about one question a user asks."""
    lines: list[str] = []
    phase = r.comparison
    if phase is None or r.validation is None:
        lines.append(f"Predicted: the layer's {r.estimate.workload.prompt_len}-token prefill takes "
                     f"{_ms(r.estimate.ttft_s or 0.0)} on {r.hardware.name}; nothing was measured (no torch), so "
                     "there is no error to report.")
        return tuple(lines)
    v = r.validation
    f = phase.forward
    err = f.error
    closeness = "close" if abs(err) <= CLOSE_ERROR else "off"
    lines.append(
        f"Whole forward ({v.prompt_len}-token prefill of {v.layers} decoder layer with its embedding, final norm "
        f"and lm_head, {v.threads} threads): predicted {_ms(f.predicted_s)}, measured {_ms(f.measured_s)}, "
        f"error {_pct(err)}, {closeness}: the prediction is {abs(err):.0%} {_fast_or_slow(err)}. "
        "(Every error here is (predicted − measured) / measured: negative means predicted too fast.)")
    kinds = phase.by_kind()
    total = sum(k.measured_s for k in kinds) or 1.0
    shares = ", ".join(f"{k.kind} {k.measured_s / total:.0%}" for k in kinds[:4])
    lines.append(f"Where the time went (measured): {shares}" +
                 (f", the rest {sum(k.measured_s for k in kinds[4:]) / total:.0%}." if len(kinds) > 4 else "."))
    lines.extend(_machine_lines(r, v, err))
    off = [k for k in kinds if abs(k.error) > OFF_ERROR and k.measured_s / total >= MIN_SHARE]
    if not off:
        lines.append(f"No kind of op is off by more than {OFF_ERROR:.0%}.")
    for k in off:
        reason = known_reason(r.hardware_source, k.kind)
        lines.append(f"{k.kind} ({k.rows} op{'s' if k.rows > 1 else ''}, {k.measured_s / total:.0%} of the time) is "
                     f"predicted {abs(k.error):.0%} {_fast_or_slow(k.error)} ({_pct(k.error)}): " +
                     (reason + "." if reason else "no known reason; its rows are in validation.json."))
    if r.hardware_source in ("measured", "kept"):
        lines.append(f"For a tighter comparison, calibrate this machine once (`layerscope calibrate --quick --out "
                     f"hw.yaml`, about {round(QUICK_CALIBRATION_S / 60)} minutes here; the full grid takes longer): it "
                     f"keeps the spec in {saved_spec_path('cpu', cpu_name(), v.threads).parent} and the demo uses "
                     "it from then on.")
    return tuple(lines)


def written_files(r: DemoRun) -> list[WrittenFile]:
    """Every file the demo wrote, in the order it wrote them, and what each holds."""
    files: list[WrittenFile] = []
    if r.hardware_source == "measured" and r.hardware_path is not None:
        files.append(WrittenFile(path=str(r.hardware_path), what="this machine's spec, measured now (--hardware FILE "
                                                                  "times on it)"))
    if r.kept_spec is not None:
        files.append(WrittenFile(path=str(r.kept_spec), what="the same spec, kept for the next demo"))
    engines = r.simulated_n.sweep.rows[-1]["engines"]
    files.append(WrittenFile(path=str(r.simulated_1.trace_path), what="layer 0 simulated on 1 engine (Perfetto "
                                                                      "trace)"))
    files.append(WrittenFile(path=str(r.simulated_n.trace_path), what=f"layer 0 simulated on {engines} engines "
                                                                      "(Perfetto trace)"))
    v = r.validation
    if v is not None:
        what = {"simulated_prefill": "the captured model (1 layer, embedding, final norm, lm_head) simulated, prefill",
                "simulated_decode": "the captured model simulated, decode",
                "captured": "the capture on this machine (torch.profiler trace, every module annotated)"}
        for key, path in v.traces.items():
            files.append(WrittenFile(path=str(path), what=what.get(key, key.replace("_", " "))))
        files.append(WrittenFile(path=str(r.out_dir / "validation.json"),
                                 what="predicted vs measured, every op (the JSON of layerscope validate)"))
    return files


def open_commands(r: DemoRun) -> list[OpenCommand]:
    """What to open next, and the command that opens it."""
    engines = r.simulated_n.sweep.rows[-1]["engines"]
    commands = [OpenCommand(command=f"layerscope open {r.simulated_n.trace_path}",
                            what=f"the simulated overlap on {engines} engines, in ui.perfetto.dev")]
    v = r.validation
    cap = None if v is None else v.traces.get("captured")
    sim = None if v is None else v.traces.get("simulated_prefill")
    if cap is not None:
        commands.append(OpenCommand(command=f"layerscope open {cap}", what="the capture, in ui.perfetto.dev"))
        if sim is not None:
            commands.append(OpenCommand(command=f"layerscope compare --sim {sim} --real {cap}",
                                        what="predicted vs measured, op by op"))
    return commands


def _machine_lines(r: DemoRun, v: ValidationResult, err: float) -> list[str]:
    lines: list[str] = []
    if r.thread_choice is not None and r.thread_choice.reduced:
        lines.append(f"Threads: {r.thread_choice.describe()} (pass --threads to choose).")
    if r.hardware_source == "calibrated":
        lines.append(f"Hardware: the spec `layerscope calibrate` saved for this machine ({r.hardware_path}).")
    elif r.hardware_source == "kept":
        lines.append(f"Hardware: the quick measurement an earlier demo kept for this machine ({r.hardware_path}, "
                     f"taken {_taken(r.hardware_path)}), so that runs predict alike; `--remeasure` measures again.")
    elif r.hardware_source == "given":
        lines.append(f"Hardware: the spec you gave ({r.hardware.name}).")
    m = r.measurement
    if m is not None:
        spread = m.spread("gemm")
        waited = f" after waiting {m.waited_s:.0f} s for the machine to quieten" if m.waited_s > 0 else ""
        lines.append(f"Hardware: this machine measured now in {len(m.rounds)} rounds{waited} (each figure the best "
                     f"round; the GEMM rate varied {spread:.0%} between rounds); while measuring, "
                     f"{_load_words(m.load, m.threads)}.")
        if r.predicted_slowest_s is not None and v.phase("prefill").forward.measured_s > 0:
            measured = v.phase("prefill").forward.measured_s
            low_err = err
            high_err = (r.predicted_slowest_s - measured) / measured
            lines.append(f"Error bars: with each figure's slowest round instead of its best the forward is predicted "
                         f"{_ms(r.predicted_slowest_s)}, so the error lies between {_pct(low_err)} and "
                         f"{_pct(high_err)} for this measurement.")
    load = v.busiest_capture_load
    if load is not None:
        lines.append(f"During the capture {_load_words(load, v.threads)}.")
    probe = _probe_drift(v)
    if probe is not None:
        label, before, after = probe
        change = after / before - 1
        state = ("the machine ran the same before and after" if abs(change) < 0.1 else
                 f"the machine's GEMMs ran {abs(change):.0%} {'slower' if change > 0 else 'faster'} after the capture "
                 "than before: it changed during the capture")
        lines.append(f"Machine check ({label} GEMM over cold weights, measured / predicted): {before:.2f} before, "
                     f"{after:.2f} after; {state}.")
        adjusted = machine_adjusted_error(v)
        if adjusted is not None and abs(math.sqrt(before * after) - 1) > 0.1:
            lines.append(f"With every GEMM timed at the machine check's rate instead of the spec's (its predicted time "
                         f"x {math.sqrt(before * after):.2f}, the check's mean), the forward error would be "
                         f"{_pct(adjusted)}: {'most' if abs(adjusted) < abs(err) / 2 else 'part'} of the error is the "
                         "GEMM rate the capture saw, not the rest of the model.")
    return lines


def machine_adjusted_error(v: ValidationResult) -> float | None:
    """The prefill forward's error with the predicted GEMM time scaled by the machine check's prefill-sized ratio
    (geometric mean of before and after): what the error would be had the spec's GEMM rate been the one the
    machine ran at around the capture. ``None`` without a machine check or GEMM rows."""
    probe = _probe_drift(v)
    phase = v.phase("prefill")
    gemm = next((k for k in phase.by_kind() if k.kind == "gemm"), None)
    if probe is None or gemm is None or phase.forward.measured_s <= 0:
        return None
    ratio = math.sqrt(probe[1] * probe[2])
    predicted = phase.forward.predicted_s + gemm.predicted_s * (ratio - 1)
    return (predicted - phase.forward.measured_s) / phase.forward.measured_s


def _probe_drift(v: ValidationResult) -> tuple[str, float, float] | None:
    """The machine check's prefill-sized call: its label and its measured/predicted ratio before and after."""
    before = [p for p in v.probes if p.when == "before"]
    after = [p for p in v.probes if p.when == "after"]
    if not before or not after:
        return None
    first, last = before[0].readings[-1], after[-1].readings[-1]
    return first.label, first.ratio, last.ratio


def _with_verdict(r: DemoRun) -> DemoRun:
    from dataclasses import replace

    return replace(r, verdict=verdict(r))
