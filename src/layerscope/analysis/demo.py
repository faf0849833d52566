"""The main job on the bundled default: one decoder layer estimated, simulated, captured, compared.

``run_demo`` takes Llama-3.2-1B's layer 0 (a real config, random weights, no downloads) and:

1. measures this machine through torch (GEMM rate, memory bandwidth, per-op overhead) into a
   ``HardwareSpec`` written as YAML, so the model times ops on the hardware they really run on;
2. estimates the layer's prefill op by op on that spec;
3. simulates it on 1 engine (ops in sequence, as eager PyTorch runs them) and on N engines
   (how the ops would overlap), writing both Perfetto traces;
4. validates: captures a 1-layer model (the layer with its embedding, final norm and lm_head)
   on the same prompt with torch.profiler, simulates it on 1 engine, and joins predicted and
   measured time op by op (:func:`layerscope.analysis.validate.validate`).

Without torch, steps 1 and 4–5 are skipped and the ``server-cpu`` preset is used instead.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from layerscope.analysis.validate import PhaseValidation, ValidationResult, resolve_hardware, validate
from layerscope.cost import Estimate, estimate
from layerscope.errors import OutputError, WorkloadError
from layerscope.hardware import HardwareSpec, load_hardware
from layerscope.model import load_model_spec
from layerscope.trace.simulate import SimulationResult, simulate
from layerscope.units import make_output_dir
from layerscope.workload import make_workload

log = logging.getLogger(__name__)

DEMO_MODEL = "llama-3.2-1b"


@dataclass(frozen=True)
class DemoResult:
    out_dir: Path
    hardware: HardwareSpec
    hardware_path: Path | None
    estimate: Estimate
    simulated_1: SimulationResult
    simulated_n: SimulationResult
    validation: ValidationResult | None
    notes: tuple[str, ...]

    @property
    def capture(self) -> Any | None:
        """The capture of the validation (``None`` without torch)."""
        return None if self.validation is None else self.validation.capture

    @property
    def comparison(self) -> PhaseValidation | None:
        """The prefill's predicted vs measured time per op (``None`` without torch)."""
        return None if self.validation is None else self.validation.phase("prefill")

    def to_dict(self) -> dict[str, Any]:
        return {
            "out_dir": str(self.out_dir),
            "hardware": self.hardware.name,
            "hardware_spec": str(self.hardware_path) if self.hardware_path else None,
            "estimate": {"scope": self.estimate.scope, "ttft_s": self.estimate.ttft_s,
                         "ops": len(self.estimate.ops), "by_kind": self.estimate.breakdown("kind")},
            "simulated_1_engine": self.simulated_1.to_dict(),
            "simulated_n_engines": self.simulated_n.to_dict(),
            "captured": self.capture.model_dump(mode="json", exclude={"summary"}) if self.capture else None,
            "comparison": None if self.comparison is None else self.comparison.to_dict(),
            "notes": list(self.notes),
        }


def _torch_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("torch") is not None and importlib.util.find_spec("transformers") is not None


def run_demo(out_dir: str | os.PathLike[str] = "out/demo", *, model: str = DEMO_MODEL, prompt_len: int = 256,
             engines: int = 4, iterations: int = 3, hardware: str | None = None) -> DemoResult:
    """Run the main job; traces and the measured hardware spec go to ``out_dir`` (created)."""
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise OutputError(f"--out {str(out)!r} exists and is not a directory")
    for name, value in (("prompt_len", prompt_len), ("engines", engines), ("iterations", iterations)):
        if value < 1:
            raise WorkloadError(f"{name} (--{name.replace('_', '-')}): {value} is out of range; must be >= 1")
    notes: list[str] = []
    spec = load_model_spec(model)
    have_torch = _torch_available()
    hw_path: Path | None = None
    # Inputs first: a bad model or hardware name fails before anything is created.
    user_hw = load_hardware(hardware) if hardware is not None else None
    make_output_dir(out)
    if user_hw is not None:
        hw = user_hw
    elif have_torch:
        hw, hw_path = resolve_hardware("measure", device="cpu", out=out / "this-machine.yaml")
    else:
        hw = load_hardware("server-cpu")
        notes.append("torch is not installed: no measurement or capture; timed on the server-cpu preset")
    # CPU eager PyTorch computes in fp32 well; bf16 GEMMs on CPUs without bf16 units are emulated.
    dtype = "fp32"
    workload = make_workload(phase="prefill", input_len=prompt_len, weight_dtype=dtype, act_dtype=dtype,
                             kv_dtype=dtype)
    est = estimate(spec, hw, workload, layer=0, attention="fused")
    common: dict[str, Any] = {"phase": "prefill", "input_len": prompt_len, "layer": 0, "attention": "fused",
                              "weight_dtype": dtype, "act_dtype": dtype, "kv_dtype": dtype}
    sim1 = simulate(spec, hw, engines=1, out=out / "simulated-1engine.json.gz", **common)
    simn = simulate(spec, hw, engines=engines, out=out / f"simulated-{engines}engines.json.gz", **common)
    validation = None
    if have_torch:
        validation = validate(model, hw, layers=1, dtype=dtype, prompt_len=prompt_len, warmup=2,
                              iterations=iterations, device="cpu", out_dir=out)
    return DemoResult(out, hw, hw_path, est, sim1, simn, validation, tuple(notes))
