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
from typing import TYPE_CHECKING

import numpy as np

from layerscope.cost.api import Estimate, PhaseOps
from layerscope.cost.features import op_features
from layerscope.cost.models import BOUND_NAMES
from layerscope.errors import CostModelError
from layerscope.hardware.spec import EnergySpec, HardwareSpec

if TYPE_CHECKING:
    from layerscope.cost.timed import TimedGraph
    from layerscope.graph.ops import OpGraph

__all__ = ["EstimateEnergy", "OpDynamicEnergy", "PhaseEnergy", "WireBytes", "estimate_energy",
           "graph_dynamic_energy_j", "op_dynamic_energy_j", "phase_energy", "power_limit_factor", "power_steps",
           "timed_dynamic_energy_j", "wire_bytes"]

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


def graph_dynamic_energy_j(graph: OpGraph, work: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
                           main_memory_bytes: np.ndarray, hw: HardwareSpec, passes: int = 1) -> OpDynamicEnergy:
    """Dynamic joules of every op of ``graph`` from its work (FLOPs, weight, activation and KV bytes per op, summed
    over ``passes`` passes) and the main-memory bytes its cost model charges (module docstring's ``E_dyn``)."""
    energy = _energy_spec(hw)
    feats = op_features(graph)
    flops, weight_b, act_b, kv_b = work
    # flops[op] × pJ/FLOP of the unit that ran it: the matrix units by dtype, else the FP32 vector units
    matrix_pj = np.array([hw.matrix_pj_per_flop(dt) for dt in feats.compute_dtype], dtype=float).reshape(-1)
    unit_pj = np.where(feats.uses_matrix_units, matrix_pj, energy.vector_pj_per_flop)
    compute_j = flops * unit_pj * PJ
    memory_j = main_memory_bytes * (energy.main_memory_pj_per_byte + energy.cache_pj_per_byte) * PJ
    sram_j = (weight_b + act_b + kv_b) * energy.sram_pj_per_byte * PJ
    wire = wire_bytes(graph, hw, passes)
    wire_j = (wire.interconnect_bytes * energy.interconnect_pj_per_byte
              + wire.network_bytes * energy.network_pj_per_byte) * PJ
    return OpDynamicEnergy(compute_j, memory_j, sram_j, wire_j)


@dataclass(frozen=True)
class WireBytes:
    """Bytes one GPU puts on the wire per op (its ``comm_bytes`` × passes), by link."""

    interconnect_bytes: np.ndarray
    """On the intra-node link (NVLink): collectives within the domain and pipeline sends."""
    network_bytes: np.ndarray
    """On the inter-node network: collectives over more GPUs than the link's domain."""


def wire_bytes(graph: OpGraph, hw: HardwareSpec, passes: int = 1) -> WireBytes:
    """Each op's ``comm_bytes`` × ``passes`` on the link that carries it: the network where the op's group
    (``gpus``) is larger than the interconnect's domain, else the intra-node link."""
    link = hw.interconnect
    domain = link.domain_gpus if link is not None and link.domain_gpus is not None else None
    nvlink = np.zeros(len(graph.ops))
    network = np.zeros(len(graph.ops))
    for i, op in enumerate(graph.ops):
        if op.comm_bytes:
            gpus = op.attr("gpus", 0)
            off_node = domain is not None and isinstance(gpus, int) and gpus > domain
            (network if off_node else nvlink)[i] = op.comm_bytes * passes
    return WireBytes(nvlink, network)


def op_dynamic_energy_j(part: PhaseOps, hw: HardwareSpec) -> OpDynamicEnergy:
    """Dynamic joules of every op of ``part`` (summed over its passes, like its work)."""
    weight_b, act_b, kv_b = part.work[1:]
    main_b = part.cost.memory_bytes if part.cost is not None else weight_b + act_b + kv_b
    return graph_dynamic_energy_j(part.graph, part.work, main_b, hw, part.passes)


def timed_dynamic_energy_j(timed: TimedGraph) -> OpDynamicEnergy:
    """Dynamic joules of every op of a timed graph (one pass; main-memory bytes as its cost model charged them)."""
    feats = op_features(timed.graph)
    work = (feats.flops, feats.weight_bytes, feats.act_bytes, feats.kv_bytes)
    return graph_dynamic_energy_j(timed.graph, work, np.asarray(timed.memory_bytes, dtype=float), timed.hardware)


#: Power levels within this many watts of each other are one level (float sums of +x and −x).
_POWER_ATOL_W = 1e-6


def power_steps(start_ns: np.ndarray, end_ns: np.ndarray, dynamic_j: np.ndarray, idle_power_w: float,
                span_ns: tuple[int, int] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """One device's power over time as a step function ``(time_ns, watts)``: idle power, plus while each op runs
    its dynamic joules spread evenly over its duration (``E_dyn / (end − start)``); ops that overlap (several
    engines) add. Spans ``span_ns`` (default: the first op's start to the last op's end), ending at idle power;
    an op of zero duration has no power to show and is left out. Its integral is ``Σ E_dyn + P_idle × span``."""
    start = np.asarray(start_ns, dtype=np.int64)
    end = np.asarray(end_ns, dtype=np.int64)
    if span_ns is None:
        if len(start) == 0:
            return np.zeros(0, np.int64), np.zeros(0)
        span_ns = (int(start.min()), int(end.max()))
    dur = end - start
    running = dur > 0
    watts = np.asarray(dynamic_j, dtype=float)[running] / (dur[running] * 1e-9)
    times = np.concatenate([[span_ns[0]], start[running], end[running], [span_ns[1]]]).astype(np.int64)
    delta = np.concatenate([[0.0], watts, -watts, [0.0]])
    order = np.argsort(times, kind="stable")
    t, level = times[order], np.cumsum(delta[order])
    last = np.ones(len(t), dtype=bool)  # the level after every change at one instant
    last[:-1] = t[1:] != t[:-1]
    t, level = t[last], level[last]
    changed = np.ones(len(t), dtype=bool)
    changed[1:] = np.abs(np.diff(level)) > _POWER_ATOL_W
    changed[-1] = True  # the span's end stays: where the track stops
    t, level = t[changed], level[changed]
    return t, np.where(np.abs(level) < _POWER_ATOL_W, 0.0, level) + idle_power_w


def power_limit_factor(dynamic_j: float, time_s: float, compute_s: float, energy: EnergySpec) -> float:
    """``r`` of the module docstring: how much longer ``compute_s`` of a phase's ``time_s`` takes so that its
    ``dynamic_j`` over the stretched time meets the board limit's headroom (1.0 when under the limit, or when no
    compute-bound time can stretch)."""
    headroom_w = energy.board_power_limit_w - energy.idle_power_w
    if time_s <= 0 or compute_s <= 0 or dynamic_j / time_s <= headroom_w:
        return 1.0
    return max(1.0, (dynamic_j / headroom_w - (time_s - compute_s)) / compute_s)


def phase_energy(part: PhaseOps, hw: HardwareSpec) -> PhaseEnergy:
    """Joules and watts of ``part`` on one device, its compute-bound ops stretched under the board limit."""
    energy = _energy_spec(hw)
    dynamic = op_dynamic_energy_j(part, hw)
    dyn_j = float(dynamic.total_j.sum())
    time_s = np.asarray(part.time_s, dtype=float)
    total_s = float(time_s.sum())
    limited = total_s > 0 and dyn_j / total_s > energy.board_power_limit_w - energy.idle_power_w
    compute = np.asarray(part.bound) == _COMPUTE
    factor = power_limit_factor(dyn_j, total_s, float(time_s[compute].sum()), energy)
    if factor != 1.0:
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
