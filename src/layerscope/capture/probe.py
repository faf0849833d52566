"""Machine check: a few reference GEMMs timed now and predicted by the hardware spec.

A validation compares a prediction made from a calibration with a capture taken later. On a shared
or virtualized machine the two can see different machines: the accuracy bench's reference VM moved
the rate of small-M GEMMs over cold weights by 30 % within seconds while large GEMMs and cached
compute held steady (``bench/ACCURACY.md``). A per-op error alone cannot tell such a change from a
model error. The probe times the regimes a decoder forward spends its time in — a GEMV streaming
its weights (decode), GEMMs of a few rows (batched decode, routed experts) and a GEMM of many rows
(prefill) — right before and after each capture, and divides each by the spec's prediction of the
same call: a ratio near 1 says the machine ran as the spec describes it, and a ratio that differs
from the calibration's, or between before and after, says the capture saw another machine.

Each call is ``F.linear(x[m, k], W[n, k])`` over a set of weights at least twice the last-level
cache (each call takes the next, so every call reads its weights from main memory, as a layer's
projections do); the prediction is the same op (:func:`layerscope.graph.linear_op`) timed by the
cost model on the spec. torch is imported only inside functions.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from layerscope.capture.machine import DEFAULT_LLC_BYTES, cold_weights, time_cold_linear, torch_device
from layerscope.errors import CaptureError
from layerscope.hardware.spec import HardwareSpec
from layerscope.units import DType

__all__ = ["PROBE_SHAPES", "MachineProbe", "ProbeReading", "predict_probe", "probe_machine"]

#: (m, n, k) of the probe calls: one weight shape (a 2048-wide projection to 8192, 64 MiB in fp32)
#: at the row counts of a decode GEMV, a batch-8 decode or small expert group, an expert group of 32
#: tokens, and a prefill.
PROBE_SHAPES: tuple[tuple[int, int, int], ...] = ((1, 8192, 2048), (8, 8192, 2048), (32, 8192, 2048),
                                                   (256, 8192, 2048))



@dataclass(frozen=True)
class ProbeReading:
    """One probe call: measured (median over repetitions) and predicted seconds per call."""

    m: int
    n: int
    k: int
    dtype: str
    measured_s: float
    predicted_s: float

    @property
    def label(self) -> str:
        return f"{self.m}x{self.n}x{self.k}"

    @property
    def ratio(self) -> float:
        """Measured over predicted: > 1 when the machine ran slower than the spec says."""
        return self.measured_s / self.predicted_s if self.predicted_s > 0 else math.nan

    def to_dict(self) -> dict[str, Any]:
        return {"m": self.m, "n": self.n, "k": self.k, "dtype": self.dtype, "measured_s": self.measured_s,
                "predicted_s": self.predicted_s, "ratio": self.ratio}


@dataclass(frozen=True)
class MachineProbe:
    """The probe calls timed at one moment: ``when`` (``before``/``after``) ``capture`` (its number
    from 1 in a validation; 0 when the probe belongs to no capture)."""

    when: str
    readings: tuple[ProbeReading, ...]
    capture: int = 0

    @property
    def label(self) -> str:
        """``before capture 2``, or ``when`` alone outside a validation."""
        return f"{self.when} capture {self.capture}" if self.capture else self.when

    def to_dict(self) -> dict[str, Any]:
        return {"when": self.when, "capture": self.capture, "label": self.label,
                "readings": [r.to_dict() for r in self.readings]}


def _last_level_bytes(hw: HardwareSpec) -> float:
    """Bytes of the spec's largest on-chip level (all engines' share for per-engine levels)."""
    sizes = [lv.capacity_bytes * (hw.engines.count if lv.per_engine else 1) for lv in hw.memory[:-1]]
    return max(sizes, default=float(DEFAULT_LLC_BYTES))


def predict_probe(readings: Sequence[ProbeReading], hw: HardwareSpec, cost_model: str = "roofline"
                  ) -> tuple[ProbeReading, ...]:
    """``readings`` with ``predicted_s`` set to ``cost_model``'s time of each call on ``hw``."""
    from layerscope.cost import time_graph
    from layerscope.graph import OpGraph, linear_op

    out = []
    for r in readings:
        dt = DType(r.dtype)
        op = linear_op("probe", "probe", None, "probe:x", m=r.m, n=r.n, k=r.k, weight_dtype=dt, act_dtype=dt)
        timed = time_graph(OpGraph((op,), name="probe", graph_inputs=frozenset({"probe:x"})), hw, cost_model)
        out.append(replace(r, predicted_s=float(timed.time_s[0])))
    return tuple(out)


def probe_machine(hw: HardwareSpec, *, when: str, capture: int = 0, device: str = "cpu", dtype: str = "fp32",
                  shapes: Sequence[tuple[int, int, int]] = PROBE_SHAPES, min_time_s: float = 0.1,
                  cost_model: str = "roofline") -> MachineProbe:
    """Time each of ``shapes`` (``F.linear`` over cold weights, median seconds per call over about
    ``min_time_s``) in ``dtype`` on ``device`` and predict it on ``hw``. Shapes sharing (n, k)
    share one weight set."""
    try:
        dt = DType(dtype)
    except ValueError:
        raise CaptureError(f"machine probe: unknown dtype {dtype!r}; use fp32, bf16 or fp16") from None
    torch, dev, timer = torch_device(device)
    tdt = {DType.FP32: torch.float32, DType.BF16: torch.bfloat16, DType.FP16: torch.float16}.get(dt)
    if tdt is None:
        raise CaptureError(f"machine probe: dtype {dtype!r} is not one torch GEMMs run here; use fp32, bf16 or fp16")
    llc = _last_level_bytes(hw)
    readings = []
    weights: dict[tuple[int, int], list[Any]] = {}
    for m, n, k in shapes:
        if (n, k) not in weights:
            weights.clear()  # one set alive at a time
            weights[(n, k)] = cold_weights(torch, dev, tdt, n, k, llc)
        x = torch.randn(m, k, device=dev).to(tdt)
        _, median_s = time_cold_linear(torch, timer, x, weights[(n, k)], min_time_s)
        readings.append(ProbeReading(m, n, k, dt.value, median_s, math.nan))
    return MachineProbe(when, predict_probe(readings, hw, cost_model), capture)
