"""Power-limited clocks fitted on the kernel table's power rows (issue #30): the energy per matrix FLOP at which the
board's power limit holds the clock where a published row saw it.

``cost.energy`` drops the clock of a phase whose power exceeds the board limit ``P_lim`` (fixed voltage: dynamic
power ∝ clock). A compute-bound tensor-core load at the spec's peak ``F`` (FLOP/s at the spec clock ``f_spec``)
draws ``e · F`` dynamic watts, so the limit holds it at ``f = f_spec · (P_lim − P_idle) / (e · F)``. A row stating
the sustained clock ``f_row`` of such a load at its board's limit therefore gives the energy per FLOP::

    e = (P_lim − P_idle) / (F · f_row / f_spec)

(Horowitz, "Computing's energy problem", ISSCC 2014: dynamic energy per operation at fixed voltage). Rows read:
``data/gpu-kernels.md`` §6 PX rows whose unit is MHz (a clock under a compute-bound load at the limit). The other
PX rows are not fitted on: serving averages (PX-01…07, whole-run power, never a fit target), idle readings
(PX-10…12, taken as measured figures) and a bandwidth-bound clock (PX-09), whose error :func:`clock_residuals`
reports. The fitted figure holds for every preset of the same die (:data:`SAME_DIE`). A GPU with no such row takes
:func:`limit_rule_pj_per_flop`: its bf16 peak exactly at its limit (an assumption, marked so in its sources).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from layerscope.errors import HardwareSpecError
from layerscope.hardware.kernel_table import KernelRow
from layerscope.hardware.spec import HardwareSpec
from layerscope.units import DType

__all__ = ["SAME_DIE", "ClockResidual", "PowerFit", "clock_residuals", "fit_power", "limit_rule_pj_per_flop",
           "matrix_figures", "predicted_clock_hz"]

#: Presets that share one compute die with the preset a clock row names (hardware-specs.md: H200 "same clocks as
#: H100 SXM"; gh200.yaml: H100-class compute assumed; H100 PCIe: the GH100 die with 114 of its SMs enabled).
SAME_DIE: Mapping[str, tuple[str, ...]] = {"h100-sxm": ("h100-sxm", "h200", "gh200", "h100-pcie")}
#: Significant digits the presets carry the fitted figure with.
FIGURE_DIGITS = 4


@dataclass(frozen=True)
class PowerFit:
    """The matrix energy per FLOP fitted on one clock row, for the presets of its die."""

    row_id: str
    gpu: str
    """The preset the row's board is (its limit, idle power, peak and spec clock are used)."""
    dtype: DType
    clock_hz: float
    """The row's sustained clock at the board's limit."""
    matrix_pj_per_flop: float
    """``e`` of the module docstring, for ``dtype`` (the fp16 entry equals it; fp8/int8 take half)."""
    presets: tuple[str, ...]
    """The presets that carry it (:data:`SAME_DIE`)."""

    @property
    def rounded_pj_per_flop(self) -> float:
        """The figure as the presets write it (:data:`FIGURE_DIGITS` significant digits)."""
        return float(f"{self.matrix_pj_per_flop:.{FIGURE_DIGITS}g}")


def _energy(hw: HardwareSpec) -> tuple[float, float]:
    if hw.energy is None:
        raise HardwareSpecError(f"{hw.name}: a power fit needs the spec's energy figures (idle power, board limit)")
    return hw.energy.board_power_limit_w, hw.energy.idle_power_w


def _clock_rows(rows: Sequence[KernelRow]) -> list[KernelRow]:
    """PX rows stating a sustained clock (unit MHz) of a load with a dtype, on a board a preset models."""
    return [r for r in rows if r.id.startswith("PX-") and r.unit == "MHz" and r.value is not None
            and r.gpu is not None and r.precision in {d.value for d in DType}]


def fit_power(rows: Sequence[KernelRow], specs: Mapping[str, HardwareSpec]) -> tuple[PowerFit, ...]:
    """One :class:`PowerFit` per clock row (module docstring) whose board's preset is in ``specs``."""
    fits = []
    for row in _clock_rows(rows):
        assert row.gpu is not None and row.value is not None
        hw = specs.get(row.gpu)
        if hw is None:
            continue
        limit_w, idle_w = _energy(hw)
        dtype = DType(row.precision)
        clock_hz = row.value * 1e6
        # the spec's peak slowed to the row's clock: what the board sustains at its limit
        flops_at_limit = hw.engines.peak_flops_per_s[dtype] * clock_hz / hw.engines.clock_hz
        fits.append(PowerFit(row.id, row.gpu, dtype, clock_hz, (limit_w - idle_w) / flops_at_limit * 1e12,
                             SAME_DIE.get(row.gpu, (row.gpu,))))
    return tuple(fits)


def limit_rule_pj_per_flop(hw: HardwareSpec, dtype: DType = DType.BF16) -> float:
    """Picojoules per ``dtype`` FLOP if the spec's peak were reached exactly at the board limit:
    ``(P_lim − P_idle) / F`` (an assumption for GPUs without a clock row)."""
    limit_w, idle_w = _energy(hw)
    return (limit_w - idle_w) / hw.engines.peak_flops_per_s[dtype] * 1e12


def matrix_figures(hw: HardwareSpec, fitted_pj_per_flop: float | None = None,
                   fitted_dtype: DType = DType.BF16) -> dict[DType, float]:
    """``energy.matrix_pj_per_flop`` of ``hw`` for every dtype of its peak table, :data:`FIGURE_DIGITS` significant
    digits: from a fit on ``fitted_dtype`` scaled by the peaks (a dtype at twice the FLOP/s on the same units and
    power takes half the joules per FLOP), else :func:`limit_rule_pj_per_flop` per dtype."""
    peaks = hw.engines.peak_flops_per_s
    out = {}
    for dtype, peak in peaks.items():
        if fitted_pj_per_flop is not None:
            value = fitted_pj_per_flop * peaks[fitted_dtype] / peak
        else:
            value = limit_rule_pj_per_flop(hw, dtype)
        out[dtype] = float(f"{value:.{FIGURE_DIGITS}g}")
    return out


def predicted_clock_hz(hw: HardwareSpec, dynamic_power_w: float) -> float:
    """The clock the model holds a compute-bound load of ``dynamic_power_w`` (at the spec clock) to:
    ``f_spec`` under the limit, ``f_spec · (P_lim − P_idle) / P_dyn`` above it."""
    limit_w, idle_w = _energy(hw)
    return hw.engines.clock_hz * min(1.0, (limit_w - idle_w) / dynamic_power_w) if dynamic_power_w > 0 \
        else hw.engines.clock_hz


@dataclass(frozen=True)
class ClockResidual:
    """A power row's stated clock beside the model's, on the preset of its board."""

    row_id: str
    gpu: str
    load: str
    """What ran: ``compute`` (tensor-core peak) or ``bandwidth`` (main memory streamed at its achievable rate)."""
    stated_clock_hz: float
    predicted_clock_hz: float
    used_in_fit: bool

    @property
    def error(self) -> float:
        return self.predicted_clock_hz / self.stated_clock_hz - 1


#: Clock rows that state their clock in the notes of a watts row (the board at its limit under a bandwidth load):
#: row id → the clock in MHz, as the row's notes write it ("clock as low as 1,395 MHz").
_NOTE_CLOCK_MHZ = {"PX-09": "1,395 MHz"}


def clock_residuals(rows: Sequence[KernelRow], specs: Mapping[str, HardwareSpec]) -> tuple[ClockResidual, ...]:
    """Every clock a PX row states, beside the clock the fitted model predicts for its load on its board's preset
    (``specs`` must carry the fitted figures): the fit's own rows (compute-bound, at the spec's peak) and the
    rows left out (a bandwidth-bound load: main memory streamed at the spec's achievable bandwidth through the
    cache and SRAM)."""
    out = []
    by_id = {r.id: r for r in rows}
    for row in _clock_rows(rows):
        assert row.gpu is not None and row.value is not None
        hw = specs.get(row.gpu)
        if hw is None or hw.energy is None:
            continue
        dtype = DType(row.precision)
        dyn_w = hw.engines.peak_flops_per_s[dtype] * hw.matrix_pj_per_flop(dtype) * 1e-12
        out.append(ClockResidual(row.id, row.gpu, "compute", row.value * 1e6, predicted_clock_hz(hw, dyn_w), True))
    for row_id, clock_text in _NOTE_CLOCK_MHZ.items():
        noted = by_id.get(row_id)
        if noted is None or noted.gpu is None or clock_text not in noted.notes:
            raise HardwareSpecError(f"{row_id}: the kernel table's row no longer states '{clock_text}'")
        hw = specs.get(noted.gpu)
        if hw is None or hw.energy is None:
            continue
        e = hw.energy
        bandwidth = hw.main_memory.bandwidth_bytes_per_s or 0.0
        dyn_w = bandwidth * hw.efficiency.memory * (e.main_memory_pj_per_byte + e.cache_pj_per_byte
                                                    + e.sram_pj_per_byte) * 1e-12
        stated = float(clock_text.split()[0].replace(",", "")) * 1e6
        out.append(ClockResidual(row_id, noted.gpu, "bandwidth", stated, predicted_clock_hz(hw, dyn_w), False))
    return tuple(out)
