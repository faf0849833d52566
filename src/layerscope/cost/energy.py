"""Energy and power of an estimate (issue #30): joules per op, average and peak watts per phase, the board's
power limit.

Per op (one device; picojoule figures from :class:`~layerscope.hardware.spec.EnergySpec`)::

    E_dyn = F · e_flop(unit, dtype)                       # matrix units by dtype, else the vector units
          + B_main · (e_main + e_cache)                   # the cost model's main-memory bytes, through the LLC
          + (W + A + KV) · e_sram                         # the op's bytes once through on-chip SRAM
          + B_wire · e_link                               # comm_bytes on NVLink, or on the NIC past the domain
    E_op  = E_dyn + P_idle · t_op

the first-order energy model of Horowitz, "Computing's energy problem", ISSCC 2014 (energy = Σ operations ×
energy per operation + static power × time). A phase's average power is ``Σ E_op / Σ t_op``.

Power limit: when a phase's average power exceeds the board limit ``P_lim``, the clock drops until it meets it.
Dynamic energy per operation is held (first order: fixed voltage, so dynamic power ∝ clock), so only the
compute-bound ops' time ``T_c`` stretches, by the factor ``r`` that brings the phase to the limit::

    E_dyn / (r · T_c + T_rest) = P_lim − P_idle   ⇒   r = (E_dyn / (P_lim − P_idle) − T_rest) / T_c

(with every op compute-bound, ``r = P_dyn / (P_lim − P_idle)``: the clock falls in proportion to dynamic power
over the limit's headroom). A phase whose memory-bound ops alone exceed the limit is reported as limited with
``r`` = 1: its bandwidth does not follow the SM clock.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from layerscope.cost.api import Estimate, PhaseOps
from layerscope.cost.features import op_features
from layerscope.cost.models import BOUND_NAMES
from layerscope.errors import CostModelError
from layerscope.hardware.spec import EnergySpec, HardwareSpec

__all__ = ["EstimateEnergy", "PhaseEnergy", "estimate_energy", "op_dynamic_energy_j", "phase_energy"]

PJ = 1e-12
_COMPUTE = BOUND_NAMES.index("compute")


@dataclass(frozen=True)
class OpDynamicEnergy:
    """Dynamic joules per op of one phase, by part (arrays aligned with the phase's ops)."""

    compute_j: np.ndarray
    memory_j: np.ndarray
    """Main memory and the last-level cache."""
    sram_j: np.ndarray
    wire_j: np.ndarray

    @property
    def total_j(self) -> np.ndarray:
        return self.compute_j + self.memory_j + self.sram_j + self.wire_j


@dataclass(frozen=True)
class PhaseEnergy:
    """One phase on one device: per-op joules at the power-limited times, and the phase's power."""

    phase: str
    op_energy_j: np.ndarray
    """Per op: dynamic joules + idle power × its time under the power limit."""
    op_time_s: np.ndarray
    """Per op: its time under the power limit (the cost model's time where the phase is not limited)."""
    dynamic: OpDynamicEnergy
    uncapped_time_s: float
    """Σ the cost model's op times."""
    clock_factor: float
    """``r``: how much longer the compute-bound ops take under the power limit (1.0: not stretched)."""
    power_limited: bool
    """The phase's average power at the cost model's times exceeds the board limit."""

    @property
    def energy_j(self) -> float:
        return float(self.op_energy_j.sum())

    @property
    def time_s(self) -> float:
        return float(self.op_time_s.sum())

    @property
    def average_power_w(self) -> float:
        return self.energy_j / self.time_s if self.time_s > 0 else 0.0

    @property
    def peak_power_w(self) -> float:
        """The largest per-op average power (an op shorter than the board's power-control window may exceed the
        limit)."""
        running = self.op_time_s > 0
        if not running.any():
            return 0.0
        return float(np.max(self.op_energy_j[running] / self.op_time_s[running]))


def _energy_spec(hw: HardwareSpec) -> EnergySpec:
    if hw.energy is None:
        raise CostModelError(f"{hw.name}: the hardware spec has no energy figures (energy:)")
    return hw.energy


def op_dynamic_energy_j(part: PhaseOps, hw: HardwareSpec) -> OpDynamicEnergy:
    """Dynamic joules of every op of ``part`` (summed over its passes, like its work)."""
    energy = _energy_spec(hw)
    feats = op_features(part.graph)
    flops, weight_b, act_b, kv_b = part.work
    # flops[op] × pJ/FLOP of the unit that ran it: the matrix units by dtype, else the FP32 vector units
    matrix_pj = np.array([hw.matrix_pj_per_flop(dt) for dt in feats.compute_dtype], dtype=float).reshape(-1)
    unit_pj = np.where(feats.uses_matrix_units, matrix_pj, energy.vector_pj_per_flop)
    compute_j = flops * unit_pj * PJ
    main_b = part.cost.memory_bytes if part.cost is not None else weight_b + act_b + kv_b
    memory_j = main_b * (energy.main_memory_pj_per_byte + energy.cache_pj_per_byte) * PJ
    sram_j = (weight_b + act_b + kv_b) * energy.sram_pj_per_byte * PJ
    link = hw.interconnect
    domain = link.domain_gpus if link is not None and link.domain_gpus is not None else None
    wire_j = np.zeros(len(part.graph.ops))
    for i, op in enumerate(part.graph.ops):
        if op.comm_bytes:
            gpus = op.attr("gpus", 0)
            off_node = domain is not None and isinstance(gpus, int) and gpus > domain
            pj = energy.network_pj_per_byte if off_node else energy.interconnect_pj_per_byte
            wire_j[i] = op.comm_bytes * part.passes * pj * PJ
    return OpDynamicEnergy(compute_j, memory_j, sram_j, wire_j)


def phase_energy(part: PhaseOps, hw: HardwareSpec) -> PhaseEnergy:
    """Joules and watts of ``part`` on one device, its compute-bound ops stretched under the board limit."""
    energy = _energy_spec(hw)
    dynamic = op_dynamic_energy_j(part, hw)
    dyn_j = float(dynamic.total_j.sum())
    time_s = np.asarray(part.time_s, dtype=float)
    total_s = float(time_s.sum())
    headroom_w = energy.board_power_limit_w - energy.idle_power_w
    limited = total_s > 0 and dyn_j / total_s > headroom_w
    factor = 1.0
    if limited:
        compute = np.asarray(part.bound) == _COMPUTE
        compute_s = float(time_s[compute].sum())
        if compute_s > 0:
            factor = max(1.0, (dyn_j / headroom_w - (total_s - compute_s)) / compute_s)
            time_s = np.where(compute, time_s * factor, time_s)
    return PhaseEnergy(
        phase=part.phase, op_energy_j=dynamic.total_j + energy.idle_power_w * time_s, op_time_s=time_s,
        dynamic=dynamic, uncapped_time_s=total_s, clock_factor=factor, power_limited=bool(limited))


@dataclass(frozen=True)
class EstimateEnergy:
    """Energy of a whole estimate over every device of its plan."""

    phases: tuple[PhaseEnergy, ...]
    idle_j: float
    """Idle power × one device's time outside its ops (the engine's host time between steps)."""
    e2e_s: float
    """End-to-end seconds under the power limit: the estimate's, plus what the limit adds to its phases."""
    devices: int
    energy_j: float
    """Joules of the run on every device: (tensor × data parallel) × Σ dynamic op joules + idle power × devices ×
    ``e2e_s`` (each op row is one tensor-parallel rank's work; the pipeline's stages hold different ops)."""
    output_tokens: float

    @property
    def j_per_output_token(self) -> float:
        return self.energy_j / self.output_tokens if self.output_tokens > 0 else float("nan")

    @property
    def output_tokens_per_j(self) -> float:
        return self.output_tokens / self.energy_j if self.energy_j > 0 else float("nan")


def estimate_energy(est: Estimate) -> EstimateEnergy | None:
    """Energy of ``est``; None when its hardware spec has no energy figures."""
    hw = est.hardware_spec
    if hw is None or hw.energy is None:
        return None
    phases = tuple(phase_energy(part, hw) for part in est.phases)
    stretch_s = sum(p.time_s - p.uncapped_time_s for p in phases)
    e2e_s = est.e2e_s + stretch_s
    # between ops the device idles: the host time of the engine's steps (phase_times_s["host"])
    idle_s = max(est.phase_times_s.get("host", 0.0), 0.0)
    w = est.workload
    devices = w.devices
    dyn_j = sum(float(p.dynamic.total_j.sum()) for p in phases)
    ranks = w.tensor_parallel * w.data_parallel
    energy_j = ranks * dyn_j + hw.energy.idle_power_w * devices * e2e_s
    return EstimateEnergy(phases=phases, idle_j=hw.energy.idle_power_w * idle_s, e2e_s=e2e_s, devices=devices,
                          energy_j=energy_j, output_tokens=est.output_tokens_per_s * est.e2e_s)
