"""Predicted vs measured here: ``python bench/bench_accuracy.py [--device cuda] [--quick] [--hardware SPEC]``.

Runs ``layerscope.app.validate.validate`` over a matrix of models and workloads (random
weights, fp32, truncated to 1–2 decoder layers) in rounds: every case is captured once per round
(``--repeats``, default 3) and its captures are combined by median. Without ``--hardware`` each
round starts with a quick calibration of this machine and, at the end, every capture is predicted
again with the rounds' calibrations combined (``hardware.fit.combine_measurements``,
``validate.rejoin``): on a shared machine the rates drift for minutes, so calibration and captures
must sample the same stretch of time. Writes bench/ACCURACY.md: the command, the machine, the date,
a summary row per case and phase (whole-forward error, spread of the captures, per-op median / p90
|error|), and per case the per-kind errors and the worst ops. Only the text between the
``bench:begin`` / ``bench:end`` markers is replaced, so the hand-written analysis of causes below
them survives a re-run.

The full matrix (about 10 min on 2 cores with 3 rounds) covers Llama-3.2-1B with 1 and 2 layers, Qwen3-0.6B
(2 layers) and Qwen3-30B-A3B truncated to 1 layer (a 128-expert MoE); prefill 128 / 512 / 1024
tokens at batch 1, prefill 128 at batch 4 and 8, decode (4 steps) at context 128 / 512 / 2048 and
at batch 8. ``--quick`` runs three small cases (about 1 min).

``--device cuda`` runs the GPU matrix instead (whole models in bf16: Llama-3.2-1B and Qwen3-0.6B, prefill 128 to
2048 tokens, decode at batch 1 and 8; 2 rounds by default) with the calibration on the GPU, and writes its own
region of ACCURACY.md (``bench:cuda:begin`` / ``bench:cuda:end``), headed by the GPU's name, so the CPU table
stays. ``bench/cuda_accuracy.sh`` runs it on a machine lent by the device tool.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import re
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _util import cpu_model

#: Targets of issue #7.
FORWARD_TARGET = 0.10
MEDIAN_TARGET = 0.20
DECODE_STEPS = 4
#: The region of ACCURACY.md each device's run replaces.
MARKERS = {"cpu": ("<!-- bench:begin -->", "<!-- bench:end -->"),
           "cuda": ("<!-- bench:cuda:begin -->", "<!-- bench:cuda:end -->")}


@dataclass(frozen=True)
class Case:
    model: str
    layers: int | None  # None: every layer of the model
    batch: int
    prompt_len: int
    decode_steps: int = 0

    @property
    def label(self) -> str:
        work = (f"decode ctx {self.prompt_len} x{self.decode_steps}" if self.decode_steps
                else f"prefill {self.prompt_len}")
        depth = "all layers" if self.layers is None else f"L{self.layers}"
        return f"{self.model} {depth} · {work} · batch {self.batch}"

    @property
    def slug(self) -> str:
        return re.sub(r"[^a-z0-9]+", "-", self.label.lower()).strip("-")


FULL: tuple[Case, ...] = (
    Case("llama-3.2-1b", 1, 1, 128),
    Case("llama-3.2-1b", 1, 1, 512),
    Case("llama-3.2-1b", 1, 1, 1024),
    Case("llama-3.2-1b", 1, 4, 128),
    Case("llama-3.2-1b", 1, 8, 128),
    Case("llama-3.2-1b", 1, 1, 128, DECODE_STEPS),
    Case("llama-3.2-1b", 1, 1, 512, DECODE_STEPS),
    Case("llama-3.2-1b", 1, 1, 2048, DECODE_STEPS),
    Case("llama-3.2-1b", 1, 8, 512, DECODE_STEPS),
    Case("llama-3.2-1b", 2, 1, 512),
    Case("llama-3.2-1b", 2, 1, 512, DECODE_STEPS),
    Case("qwen3-0.6b", 2, 1, 128),
    Case("qwen3-0.6b", 2, 1, 512),
    Case("qwen3-0.6b", 2, 1, 512, DECODE_STEPS),
    Case("qwen3-30b-a3b", 1, 1, 128),
    Case("qwen3-30b-a3b", 1, 1, 512),
    Case("qwen3-30b-a3b", 1, 1, 512, DECODE_STEPS),
)
QUICK: tuple[Case, ...] = (
    Case("llama-3.2-1b", 1, 1, 128),
    Case("llama-3.2-1b", 1, 1, 128, DECODE_STEPS),
    Case("qwen3-0.6b", 1, 1, 128),
)
#: On a GPU, whole small models in bf16: the kernels are short enough for launch overhead to show
#: at decode and small prefill, and long enough at 2048 tokens to be compute-bound.
CUDA_FULL: tuple[Case, ...] = (
    Case("llama-3.2-1b", None, 1, 128),
    Case("llama-3.2-1b", None, 1, 512),
    Case("llama-3.2-1b", None, 1, 2048),
    Case("llama-3.2-1b", None, 8, 512),
    Case("llama-3.2-1b", None, 1, 512, DECODE_STEPS),
    Case("llama-3.2-1b", None, 1, 2048, DECODE_STEPS),
    Case("llama-3.2-1b", None, 8, 512, DECODE_STEPS),
    Case("qwen3-0.6b", None, 1, 512),
    Case("qwen3-0.6b", None, 1, 512, DECODE_STEPS),
)
CUDA_QUICK: tuple[Case, ...] = (
    Case("llama-3.2-1b", None, 1, 512),
    Case("llama-3.2-1b", None, 1, 512, DECODE_STEPS),
)
MATRICES = {("cpu", False): FULL, ("cpu", True): QUICK, ("cuda", False): CUDA_FULL, ("cuda", True): CUDA_QUICK}


class RoundCalibration:
    """A quick calibration per round of captures, combined at the end (median of the rounds' median
    times per point, ``hardware.fit.combine_measurements``): on a shared machine the rates drift
    for minutes at a time, so one calibration before the run is one sample of that drift while the
    captures are many."""

    def __init__(self, work: Path, device: str = "cpu") -> None:
        self.work = work
        self.device = device
        self.runs: list[Any] = []
        self.levels: list[dict[str, Any]] = []
        self.llc = 0.0
        self.seconds = 0.0

    def measure(self) -> Any:
        """One more calibration run; the spec of that run alone."""
        from layerscope.capture.calibrate import grid_for, measure, spec_from_measurements

        t0 = time.perf_counter()
        meas, self.levels, self.llc = measure(self.device, grid_for(self.device, quick=True), quick=True)
        self.seconds += time.perf_counter() - t0
        self.runs.append(meas)
        return spec_from_measurements(meas, self.levels, self.llc)

    def combined(self) -> Any:
        """The spec of every run so far, combined; written to ``work/hardware.yaml``."""
        from layerscope.capture.calibrate import spec_from_measurements
        from layerscope.hardware.fit import combine_measurements
        from layerscope.hardware.loaders import dump_hardware_yaml

        spec = spec_from_measurements(combine_measurements(self.runs), self.levels, self.llc)
        (self.work / "hardware.yaml").write_text(dump_hardware_yaml(spec))
        return spec


def _pct(x: float | None) -> str:
    return "-" if x is None or x != x else f"{x:+.1%}"


def _abs_pct(x: float | None) -> str:
    return "-" if x is None or x != x else f"{x:.1%}"


def _ms(s: float) -> str:
    return f"{s * 1e3:.3f}"


def _raw_forward_error(p: Any) -> float:
    """The forward error with the instrumentation's and the profiler's time left in the measured time."""
    raw_s = p.forward.measured_s + p.instrumentation_s + p.profiler_s
    return (p.forward.predicted_s - raw_s) / raw_s if raw_s > 0 else float("nan")


def _spread(p: Any) -> str:
    """Each capture's forward (ms) and their spread, (max - min) / median."""
    if p.forward_spread is None:
        return "one capture"
    runs = ", ".join(_ms(s) for s in p.forward_measured_all_s)
    return f"captures {runs} ms, spread {p.forward_spread:.1%}"


def _probe_ratios(result: Any) -> str:
    """The machine check of a case: per probe call (m = 1/8/32/256), the median over its probes of
    measured / predicted."""
    if not result.probes:
        return "-"
    ratios = [statistics.median(p.readings[i].ratio for p in result.probes)
              for i in range(len(result.probes[0].readings))]
    return "/".join(f"{x:.2f}" for x in ratios)


def case_section(case: Case, result: Any, wall_s: float, work: Path) -> list[str]:
    captures = result.phases[0].repeats
    lines = [f"### {case.label}", "", f"{wall_s:.0f} s wall · {result.threads} torch threads · "
             f"{captures} capture{'s' if captures > 1 else ''} of {result.capture.iterations} iterations after "
             f"{result.capture.warmup} warm-up · traces in `{work / case.slug}`", ""]
    if result.probes:
        first = result.probes[0].readings
        lines += ["machine check (measured / predicted, F.linear over cold weights; "
                  + ", ".join(f"{r.label} predicted {_ms(r.predicted_s)} ms" for r in first) + "): "
                  + "; ".join(f"{p.label} " + "/".join(f"{r.ratio:.2f}" for r in p.readings) for p in result.probes),
                  ""]
    for p in result.phases:
        lines += [f"**{p.phase}**: forward predicted {_ms(p.forward.predicted_s)} ms, measured "
                  f"{_ms(p.forward.measured_s)} ms ({_pct(p.forward.error)}; {_spread(p)}); per-op median |error| "
                  f"{_abs_pct(p.median_abs_error)}, p90 {_abs_pct(p.p90_abs_error)}, time-weighted "
                  f"{_abs_pct(p.weighted_abs_error)} over {len(p.rows)} ops; instrumentation "
                  f"subtracted: {p.call_overhead_s * 1e6:.1f} µs per call, {_ms(p.instrumentation_s)} ms in all; "
                  + (f"measured in a pass without the profiler, which the profiled trace exceeds by "
                     f"{_ms(p.profiler_s)} ms" if p.timing == "unprofiled" else
                     f"profiler bookkeeping subtracted: {p.event_overhead_s * 1e6:.2f} µs per aten event, "
                     f"{_ms(p.profiler_s)} ms in all")
                  + f" (raw, the trace's own times: per-op median |error| {_abs_pct(p.raw_median_abs_error)}, "
                  f"forward error {_pct(_raw_forward_error(p))})", ""]
        if len(p.steps) > 1:
            lines += ["steps: " + ", ".join(f"{s.name} {_pct(s.error)}" for s in p.steps), ""]
        lines += ["| kind | rows | predicted ms | measured ms | error |", "|---|---|---|---|---|"]
        lines += [f"| {k.kind} | {k.rows} | {_ms(k.predicted_s)} | {_ms(k.measured_s)} | {_pct(k.error)} |"
                  for k in p.by_kind()]
        lines += ["", "worst ops (largest |predicted − measured|):", "",
                  "| op | kind | rule | predicted ms | measured ms | error |", "|---|---|---|---|---|---|"]
        lines += [f"| `{r.name}` | {r.kind} | {r.rule} | {_ms(r.predicted_s)} | {_ms(r.measured_s)} | "
                  f"{_pct(r.error)} |" for r in p.worst(5)]
        unmodelled = [u for u in p.only_measured if u.counted_in is None]
        if unmodelled or p.only_predicted:
            lines += ["", "unmatched: " + "; ".join(
                [f"`{u.name}` measured {_ms(u.time_s)} ms ({u.note})" for u in unmodelled]
                + [f"`{u.name}` predicted {_ms(u.time_s)} ms ({u.note})" for u in p.only_predicted])]
        lines.append("")
    return lines


def replace_region(old: str | None, text: str, device: str) -> str:
    """ACCURACY.md with ``device``'s region replaced by ``text`` (which carries its markers); a file without
    that region gets it appended under its own heading, and everything outside it is kept."""
    begin, end = MARKERS[device]
    if old is None:
        return ("# Accuracy: predicted vs measured\n\nRegenerate the measured parts with the commands in them; the "
                "analysis after them is written by hand.\n\n" + text.rstrip("\n") + "\n\n## Analysis\n")
    if begin in old and end in old and old.index(begin) < old.index(end):
        return old[:old.index(begin)] + text.rstrip("\n") + old[old.index(end) + len(end):]
    heading = "\n\n## On a GPU\n\n" if device == "cuda" else "\n\n"
    return old.rstrip("\n") + heading + text


def machine_line(device: str, torch: Any) -> str:
    """Where the run was: the processor (and the GPU, its CUDA and driver where the run is on one)."""
    host = f"{os.cpu_count()} cores, {cpu_model()}"
    if device != "cuda":
        return f"{host} · torch {torch.__version__}, {torch.get_num_threads()} threads"
    props = torch.cuda.get_device_properties(0)
    return (f"**{props.name}** ({props.multi_processor_count} SMs, {props.total_memory / 2**30:.0f} GiB) · "
            f"host {host} · torch {torch.__version__}, CUDA {torch.version.cuda}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                    help="Where to calibrate and capture; each device has its own matrix and region of --out.")
    ap.add_argument("--quick", action="store_true", help="A few small cases (about a minute).")
    ap.add_argument("--hardware", default=None, help="Use this spec (preset or file) instead of calibrating.")
    ap.add_argument("--cost-model", default="roofline")
    ap.add_argument("--dtype", default=None, help="Capture and estimate dtype (default fp32 on cpu, bf16 on cuda).")
    ap.add_argument("--warmup", type=int, default=None, help="Default 2 (quick: 1).")
    ap.add_argument("--iterations", type=int, default=None, help="Default 3 (quick: 2).")
    ap.add_argument("--repeats", type=int, default=None,
                    help="Captures per case, taken in rounds over all cases and combined by median (default 3 on "
                         "cpu, 2 on cuda; quick: 1): two captures of one workload on a shared machine differ by "
                         "10%% and more.")
    ap.add_argument("--threads", type=int, default=None,
                    help="torch intra-op threads for calibration and capture (default: torch's choice).")
    ap.add_argument("--work", type=Path, default=Path("out/bench-accuracy"), help="Traces of every case.")
    ap.add_argument("--out", type=Path, default=Path(__file__).with_name("ACCURACY.md"))
    ap.add_argument("--no-record", action="store_true", help="Print, do not write --out.")
    a = ap.parse_args()

    import torch

    from layerscope.analysis.validate import combine_repeats
    from layerscope.app.validate import rejoin, validate
    from layerscope.hardware import load_hardware

    if a.device == "cuda" and not torch.cuda.is_available():
        ap.error("--device cuda: torch sees no CUDA GPU on this machine")
    if a.threads is not None:
        torch.set_num_threads(a.threads)
    cases = MATRICES[(a.device, a.quick)]
    dtype = a.dtype or ("bf16" if a.device == "cuda" else "fp32")
    warmup = a.warmup if a.warmup is not None else (1 if a.quick else 2)
    iterations = a.iterations if a.iterations is not None else (2 if a.quick else 3)
    repeats = a.repeats if a.repeats is not None else (1 if a.quick else 2 if a.device == "cuda" else 3)
    if repeats < 1:
        ap.error(f"--repeats must be >= 1, got {repeats}")
    a.work.mkdir(parents=True, exist_ok=True)
    calibration = None if a.hardware else RoundCalibration(a.work, a.device)
    fixed = load_hardware(a.hardware) if a.hardware else None

    # Rounds over all cases, so one case's captures sample the machine minutes apart rather than
    # back to back (its GEMM rate changes mode for seconds to minutes at a time); without --hardware
    # each round starts with a quick calibration, and every capture is predicted at the end with
    # the rounds' calibrations combined (rejoin), so both sides sample the same drift.
    runs: dict[Case, list[Any]] = {case: [] for case in cases}
    walls = dict.fromkeys(cases, 0.0)
    for round_ in range(1, repeats + 1):
        hw = fixed if calibration is None else calibration.measure()
        for case in cases:
            t0 = time.perf_counter()
            r = validate(case.model, hw, layers=case.layers, batch=case.batch, prompt_len=case.prompt_len,
                         decode_steps=case.decode_steps, warmup=warmup, iterations=iterations, dtype=dtype,
                         cost_model=a.cost_model, random_weights=True, device=a.device,
                         out_dir=a.work / case.slug / (f"capture-{round_}" if repeats > 1 else ""))
            walls[case] += time.perf_counter() - t0
            runs[case].append(r)
            for p in r.phases:
                sys.stderr.write(f"[{round_}/{repeats}] {case.label} {p.phase}: forward {_pct(p.forward.error)}, "
                                 f"median {_abs_pct(p.median_abs_error)} (this round's calibration)\n")
    if calibration is None:
        hw, how, t_cal = fixed, f"`{a.hardware}`", 0.0
    else:
        hw = calibration.combined()
        how = (f"{repeats} quick calibrations (`layerscope.capture.calibrate.measure`, one before each round of "
               f"captures) combined by `hardware.fit.combine_measurements` → `{a.work / 'hardware.yaml'}`")
        t_cal = calibration.seconds
        runs = {case: [rejoin(r, hw) for r in rs] for case, rs in runs.items()}
    results = [(case, combine_repeats(runs[case]), walls[case]) for case in cases]

    command = " ".join(["python bench/bench_accuracy.py", *sys.argv[1:]])
    begin, end = MARKERS[a.device]
    if a.device == "cuda":
        timing = ("Measured times are the spans of the GPU work launched inside each module's CPU range in the "
                  "profiled pass (its first kernel's start to its last kernel's end, launches joined to kernels by "
                  "correlation id: `capture.summary.launched_spans`), less no instrumentation: the GPU does not see "
                  "the hooks, only the gaps they leave between kernels when the host is behind, so where the host "
                  "is the bottleneck these spans are the profiled host's time.")
    else:
        timing = ("Measured times come from each capture's pass without the profiler (its recorded iterations run "
                  "again, every module call timed whole and every phase range by `perf_counter`; `validate`'s "
                  "\"Instrumentation\"), less the instrumentation's own time (the smallest median gap between "
                  "sibling module ranges, per child call); the raw per-op median is against the profiled trace's "
                  "own times.")
    lines = [
        begin,
        "",
        f"`{command}` · {machine_line(a.device, torch)} · Python {platform.python_version()} · "
        f"{datetime.date.today().isoformat()}",
        "",
        f"Hardware spec: **{hw.name}** from {how} ({t_cal:.0f} s). Cost model `{a.cost_model}`, 1 engine "
        f"(ops in sequence, as eager PyTorch runs them), fused attention (SDPA). Capture: {dtype}, random "
        f"weights, {warmup} warm-up + {iterations} recorded iterations, times per iteration; "
        + (f"{repeats} captures per case, taken in rounds over all cases, every measured time the median over "
           "them (the spread column: (max − min) / median of the captures' forwards). " if repeats > 1 else "")
        + "Decode cases "
        f"prefill the context, then compare {DECODE_STEPS} decode steps (summed). Join rule and error "
        "definitions: `layerscope.analysis.validate` (module rows inclusive, parent rows exclusive; p90 by "
        "linear interpolation). Targets: whole forward |error| ≤ "
        f"{FORWARD_TARGET:.0%}, per-op median |error| ≤ {MEDIAN_TARGET:.0%}.",
        "",
        timing,
        "",
        "The machine column is `validate`'s machine check (`layerscope.capture.probe`): `F.linear` over cold "
        "weights at m × 8192 × 2048 for m = 1/8/32/256, timed before and after every capture and divided by "
        "the spec's prediction; the median of each over the case's probes. Near 1: the machine ran as "
        "the calibration saw it; above 1: slower in that regime while the case was captured.",
        "",
        "| case | phase | predicted ms | measured ms | spread | machine | forward error | median \\|err\\| | "
        "p90 \\|err\\| | raw median \\|err\\| | ops | targets |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for case, r, _ in results:
        for p in r.phases:
            ok = (abs(p.forward.error) <= FORWARD_TARGET
                  and p.median_abs_error is not None and p.median_abs_error <= MEDIAN_TARGET)
            spread = "-" if p.forward_spread is None else f"{p.forward_spread:.1%}"
            lines.append(f"| {case.label} | {p.phase} | {_ms(p.forward.predicted_s)} | {_ms(p.forward.measured_s)} | "
                         f"{spread} | {_probe_ratios(r)} | "
                         f"{_pct(p.forward.error)} | {_abs_pct(p.median_abs_error)} | {_abs_pct(p.p90_abs_error)} | "
                         f"{_abs_pct(p.raw_median_abs_error)} | {len(p.rows)} | {'met' if ok else '**missed**'} |")
    lines.append("")
    for case, r, wall in results:
        lines += case_section(case, r, wall, a.work)
    lines.append(end)
    text = "\n".join(lines) + "\n"
    sys.stdout.write(text)
    if not a.no_record:
        a.out.write_text(replace_region(a.out.read_text() if a.out.exists() else None, text, a.device))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
