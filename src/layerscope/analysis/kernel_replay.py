"""Published kernel measurements predicted by the presets fitted on the others (``bench/GPU-KERNELS.md``).

Every row of ``data/gpu-kernels.md`` that maps to one op is predicted by its GPU's preset fitted
(:func:`layerscope.hardware.kernel_fit.fit_preset`) on every row *except those of the row's own source*, so no
row is scored by a fit its source took part in. GEMM rows become one ``linear_op`` timed by the roofline cost
model, exactly as an estimate times a projection; memory-bound rows are the preset's streaming bandwidth
(``HardwareSpec.achievable_bandwidth_bytes_per_s``). Error = predicted / published − 1, on the published metric.
F- and L-tagged rows are printed but stay out of the headline figures.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from layerscope.cost.features import op_features
from layerscope.cost.models import roofline
from layerscope.graph._common import linear_op
from layerscope.graph.ops import OpGraph
from layerscope.hardware.kernel_fit import GemmRow, TableFit, fit_preset, source_key
from layerscope.hardware.kernel_table import KernelRow
from layerscope.hardware.spec import HardwareSpec
from layerscope.units import DType


@dataclass(frozen=True)
class Replayed:
    """One published row beside its prediction."""

    id: str
    gpu: str
    kind: str
    description: str
    unit: str
    published: float
    predicted: float
    held_out: str
    """The source left out of the fit that predicted this row (the row's own)."""
    headline: bool
    """Counted in the headline: neither F- nor L-tagged."""

    @property
    def error(self) -> float:
        return self.predicted / self.published - 1.0


@dataclass(frozen=True)
class NotReplayed:
    id: str
    why: str


def gemm_tflops(row: GemmRow, spec: HardwareSpec) -> float:
    """TFLOP/s of ``row``'s GEMM as the roofline cost model times it on ``spec`` (one fused kernel)."""
    g = row.row.gemm
    assert g is not None
    dt = DType(row.dtype)
    graph = OpGraph(ops=(linear_op("gemm", "gemm", None, "x", m=g.m, n=g.n, k=g.k, weight_dtype=dt, act_dtype=dt),),
                    graph_inputs=frozenset({"x"}))
    time_s = float(roofline(op_features(graph), spec).time_s[0])
    return row.flops / time_s / 1e12


def replay(rows: Sequence[KernelRow], presets: dict[str, HardwareSpec]) -> tuple[list[Replayed], list[NotReplayed]]:
    """Every row predicted by its GPU's preset fitted without the row's source; the rows that map to no op,
    with the reason."""
    fits: dict[tuple[str, str], TableFit] = {}
    nearest: dict[tuple[str, tuple[str, ...]], TableFit] = {}
    done: list[Replayed] = []
    skipped: list[NotReplayed] = []
    for row in rows:
        why = _unmapped(row, presets)
        if why:
            skipped.append(NotReplayed(row.id, why))
            continue
        assert row.gpu is not None and row.value is not None
        src = source_key(row)
        key = (row.gpu, src)
        if key not in fits:
            fits[key] = fit_preset(presets[row.gpu], rows, presets, exclude_sources=(src,), cache=nearest)
        spec = fits[key].spec
        gemm = GemmRow.of(row)
        if gemm is not None:
            predicted = gemm_tflops(gemm, spec)
        else:
            predicted = spec.achievable_bandwidth_bytes_per_s() / 1e9
        done.append(Replayed(id=row.id, gpu=row.gpu, kind=row.kind, description=row.description, unit=row.unit,
                             published=row.value, predicted=predicted, held_out=src,
                             headline=not ({"F", "L"} & set(row.tags))))
    return done, skipped


def _unmapped(row: KernelRow, presets: dict[str, HardwareSpec]) -> str:
    """Why ``row`` is not replayed ('' when it is)."""
    if row.value is None:
        return "qualitative value"
    if row.gpu is None or row.gpu not in presets:
        return f"no preset for {row.hardware!r}"
    if row.kind == "gemm":
        if row.gemm is None:
            return "GEMM without a shape"
        if row.gemm.groups > 1:
            return "grouped GEMM (an MoE experts op, not one linear op)"
        if GemmRow.of(row) is None:
            return f"precision {row.precision!r} not fitted yet (int4/fp4: issue #27 point 5)"
        return ""
    if row.kind == "memory" and row.unit == "GBps":
        if row.gpus not in (None, 1):
            return "multi-GPU weight streaming"
        return ""
    return f"{row.kind} rows are not replayed yet"


def headline(replayed: Sequence[Replayed], kind: str | None = None) -> tuple[int, float, float]:
    """(rows, median |error|, p90 |error|) over the headline rows (of ``kind``), p90 by linear interpolation."""
    errors = np.abs([r.error for r in replayed if r.headline and (kind is None or r.kind == kind)])
    if not len(errors):
        return 0, float("nan"), float("nan")
    return len(errors), float(np.median(errors)), float(np.percentile(errors, 90))
