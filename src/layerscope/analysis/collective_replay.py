"""Replay of the published collective rows: each predicted by a preset whose collective terms were fitted without it.

Like :mod:`layerscope.analysis.kernel_replay`, leave-one-source-out: every collective row the fit reads
(:func:`layerscope.hardware.collective_fit.collective_rows`, the values its notes give included) is predicted by
its GPU's shipped preset with the interconnect refitted on the table less the row's own source
(``exclude_sources``), through the cost model's own timing (:func:`layerscope.cost.collectives.collective_cost`:
what a communication op costs). Where nothing is left to pin the row's terms
without its source (neither the GPU nor any GPU along ``collective_fit.NEAREST`` has another source's rows of
the algorithm), the row is predicted by the full fit and listed as *self-fitted*: most rows come from one
source (T3), so the held-out numbers say how well the terms travel between GPUs, the self-fitted ones only
how well the α-β form fits. The error is on the time (an asymptotic bandwidth row: the time per byte).
The headline is over E/D rows (``bench/GPU-KERNELS.md``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from layerscope.cost.collectives import algorithm_work, collective_cost
from layerscope.hardware import load_hardware
from layerscope.hardware.collective_fit import (
    NEAREST,
    CollectiveRow,
    InterconnectFit,
    collective_rows,
    fit_interconnect,
    row_target_s,
)
from layerscope.hardware.kernel_table import KernelRow, read_kernel_table
from layerscope.hardware.spec import HardwareSpec

__all__ = ["CollectiveReplay", "ReplayedCollective", "predict_row_s", "replay_collectives"]


@dataclass(frozen=True)
class ReplayedCollective:
    """One collective row against its prediction."""

    id: str
    gpu: str
    collective: str
    gpus: int
    message_bytes: float | None
    algorithm: str
    """The algorithm the prediction ran (the row's own, or the fastest where NCCL's tuner chose)."""
    measured_s: float
    predicted_s: float
    self_fitted: bool
    """Predicted by a fit that includes the row's own source (no other source pins its terms)."""
    headline: bool

    @property
    def error(self) -> float:
        """predicted / measured - 1."""
        return self.predicted_s / self.measured_s - 1.0


@dataclass(frozen=True)
class CollectiveReplay:
    rows: tuple[ReplayedCollective, ...]

    def errors(self, *, headline: bool = True, held_out: bool | None = None) -> np.ndarray:
        """|error| of the rows (E/D only where ``headline``; held-out or self-fitted only where asked)."""
        return np.array([abs(r.error) for r in self.rows if (r.headline or not headline)
                         and (held_out is None or held_out != r.self_fitted)])

    def summary(self, *, held_out: bool | None = None) -> tuple[int, float, float]:
        """(rows, median |error|, p90 |error|) over the E/D rows."""
        e = self.errors(held_out=held_out)
        if not len(e):
            return 0, float("nan"), float("nan")
        return len(e), float(np.median(e)), float(np.percentile(e, 90))

    @property
    def self_fitted(self) -> tuple[str, ...]:
        return tuple(r.id for r in self.rows if r.self_fitted)


def predict_row_s(row: CollectiveRow, spec: HardwareSpec) -> tuple[float, str]:
    """(seconds, algorithm) of ``row`` on ``spec`` as the cost model charges a communication op: the collective's
    α-β time, the row's algorithm within a node (the one its notes name),
    the fastest across nodes; for an asymptotic row, the seconds per message byte at a very large message."""
    ic = spec.interconnect
    assert ic is not None
    network = ic.domain_gpus is not None and row.gpus > ic.domain_gpus
    algorithm = None if network else row.algorithm
    if row.message_bytes is None:
        big = 1e15  # the asymptote: α is nothing against it
        cost = collective_cost(row.collective, big, row.gpus, ic, algorithm=algorithm)
        return float(cost.time_s[()]) / big, cost.algorithm_names[0]
    cost = collective_cost(row.collective, row.message_bytes, row.gpus, ic, algorithm=algorithm)
    return float(cost.time_s[()]), cost.algorithm_names[0]


def _group(row: CollectiveRow, spec: HardwareSpec) -> tuple[str, str]:
    ic = spec.interconnect
    assert ic is not None
    if ic.domain_gpus is not None and row.gpus > ic.domain_gpus:
        return "network", "ring"
    return "link", row.algorithm or "ring"


def _pinned(fit: InterconnectFit, row: CollectiveRow, spec: HardwareSpec) -> bool:
    """Whether the held-out fit pins what the row needs (β; α too for a timed row) from some rows."""
    terms = fit.terms.get(_group(row, spec))
    if terms is None:
        return False
    assumed = ("an assumption" in terms.beta_from) or (row.message_bytes is not None
                                                      and "an assumption" in terms.alpha_from)
    return not assumed


def replay_collectives(rows: Sequence[KernelRow] | None = None,
                       presets: dict[str, HardwareSpec] | None = None) -> CollectiveReplay:
    """Every collective row the fit reads, predicted leave-one-source-out (module docstring). ``presets``: the
    GPUs' specs (default: the shipped presets of every GPU ``collective_fit.NEAREST`` knows)."""
    table = list(rows) if rows is not None else read_kernel_table()
    crows = collective_rows(table)
    specs = presets if presets is not None else {name: load_hardware(name) for name in NEAREST}
    full = {g: fit_interconnect(specs[g], table, specs, algorithm_work, collective=crows)
            for g in sorted({r.gpu for r in crows}) if g in specs}
    held: dict[tuple[str, str], InterconnectFit] = {}
    out = []
    for r in crows:
        if r.gpu not in specs:
            continue
        key = (r.gpu, r.source)
        if key not in held:
            held[key] = fit_interconnect(specs[r.gpu], table, specs, algorithm_work, collective=crows,
                                         exclude_sources=[r.source])
        fit = held[key]
        self_fitted = not _pinned(fit, r, specs[r.gpu])
        spec = full[r.gpu].spec if self_fitted else fit.spec
        predicted, algorithm = predict_row_s(r, spec)
        out.append(ReplayedCollective(id=r.id, gpu=r.gpu, collective=r.collective, gpus=r.gpus,
                                      message_bytes=r.message_bytes, algorithm=algorithm,
                                      measured_s=row_target_s(r), predicted_s=predicted, self_fitted=self_fitted,
                                      headline=r.headline))
    return CollectiveReplay(tuple(out))
