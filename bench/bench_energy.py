"""Published GPU power rows beside the energy model's predictions: ``python bench/bench_energy.py``.

Prints the table of ``bench/ENERGY.md``: each PX row of ``../shared/data/gpu-kernels.md`` that maps to an
``estimate`` workload, the published average power per GPU, the predicted average power per GPU of the matching
workloads (steady decode at the row's batch, and a whole request: 512 prompt tokens then 128 output tokens), and
the error; then the PX rows that state a clock beside the clock the power-limit model predicts
(:func:`layerscope.hardware.power_fit.clock_residuals`): PX-08, the row the matrix energy per FLOP is fitted on, and
PX-09, left out. A report, not a fit: no energy figure is tuned on the serving rows. Deterministic.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from layerscope.app.estimate import EstimateRequest, estimate_raw, result_of  # noqa: E402
from layerscope.hardware.kernel_table import read_kernel_table  # noqa: E402
from layerscope.hardware.power_fit import clock_residuals  # noqa: E402
from layerscope.hardware.presets import load_preset  # noqa: E402

#: (row id, model, batch (max_num_seqs), tensor parallel, weight dtype, published W per GPU)
POWER_ROWS = (
    ("PX-01", "llama-3.1-8b", 16, 1, "bf16", 513.0),
    ("PX-02", "llama-3.1-8b", 64, 1, "bf16", 610.0),
    ("PX-03", "llama-3.1-8b", 128, 1, "bf16", 669.0),
    ("PX-04", "llama-3.1-8b", 256, 1, "bf16", 688.0),
    ("PX-05", "llama-3.1-70b", 16, 4, "bf16", 451.0),
    ("PX-06", "llama-3.1-70b", 128, 4, "bf16", 546.0),
    ("PX-07", "llama-3.1-405b", 16, 8, "fp8", 423.0),
)


def average_power_w(model: str, batch: int, tp: int, dtype: str, workload: dict[str, object]) -> float:
    """Average power per GPU: the run's joules / devices / its end to end under the power limit."""
    request = EstimateRequest.model_validate({
        "model": model, "hardware": "h100-sxm", "parallel": {"tensor_parallel": tp},
        "workload": {**workload, "batch": batch, "weight_dtype": dtype}})
    energy = result_of(estimate_raw(request)).energy
    assert energy is not None
    return energy.energy_j / energy.devices / energy.e2e_s


def main() -> int:
    print("| row | workload | published W/GPU | decode (context 1024) W | error | request (512 + 128) W | error |")
    print("|---|---|---|---|---|---|---|")
    errors = []
    for row, model, batch, tp, dtype, published in POWER_ROWS:
        decode = average_power_w(model, batch, tp, dtype, {"phase": "decode", "context": 1024})
        request = average_power_w(model, batch, tp, dtype, {"phase": "generate", "prompt_len": 512,
                                                             "decode_steps": 127})
        errors += [decode / published - 1, request / published - 1]
        print(f"| {row} | {model} {dtype}, batch {batch}, tp {tp} | {published:.0f} | {decode:.0f} | "
              f"{decode / published - 1:+.0%} | {request:.0f} | {request / published - 1:+.0%} |")
    mean_abs = sum(abs(e) for e in errors) / len(errors)
    print(f"\nmean |error| over {len(errors)} predictions: {mean_abs:.0%}")
    print("\n| row | preset | load | stated MHz | predicted MHz | error | in the fit |")
    print("|---|---|---|---|---|---|---|")
    rows = read_kernel_table()
    specs = {name: load_preset(name) for name in ("h100-sxm", "h100-pcie")}
    for r in clock_residuals(rows, specs):
        print(f"| {r.row_id} | {r.gpu} | {r.load} | {r.stated_clock_hz / 1e6:,.0f} | {r.predicted_clock_hz / 1e6:,.0f} "
              f"| {r.error:+.1%} | {'yes' if r.used_in_fit else 'no'} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
