"""``models`` and ``hardware``: the bundled catalogs, listed.

:func:`models` takes one :class:`ModelsRequest` and returns one :class:`ModelsResult`; :func:`hardware` takes one
:class:`HardwareRequest` and returns one :class:`HardwareResult`: the JSON contracts of ``layerscope models --json``
and ``layerscope hardware --json`` (their schemas: docs/schema/models.json, docs/schema/hardware.json), a JSON array
of one object per model or spec.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, RootModel

from layerscope.app.requests import MODEL_CONFIG

if TYPE_CHECKING:
    from layerscope.hardware import HardwareSpec
    from layerscope.hardware.cluster import ClusterSpec

__all__ = ["ClusterRow", "HardwareRequest", "HardwareResult", "HardwareRow", "ModelRow", "ModelsRequest",
           "ModelsResult", "hardware", "hardware_row", "models"]

_RESULT_CONFIG = MODEL_CONFIG


class ModelsRequest(BaseModel):
    """What to list: every bundled model config (there is nothing to choose yet)."""

    model_config = MODEL_CONFIG


class ModelRow(BaseModel):
    """One bundled model config (a real Hugging Face ``config.json``)."""

    model_config = _RESULT_CONFIG

    id: str
    """Hugging Face id (``meta-llama/Llama-3.2-1B``)."""
    alias: str
    """Short catalog name (``llama-3.2-1b``)."""
    model_type: str
    """The config's ``model_type``."""
    layers: int
    """Decoder layers."""
    hidden: int
    """Hidden size."""
    attention: str
    """Attention kind (``mha``, ``gqa``, ``mqa``, ``mla``)."""
    moe: bool
    """Whether the model has mixture-of-experts layers."""
    params_total: int
    """Parameters, counted from the config."""
    params_active: int
    """Parameters active per token (differs from ``params_total`` for MoE models)."""
    published_total: str
    """The parameter count its publisher states, as they state it."""
    published_active: str | None
    """The active parameter count its publisher states; ``null`` where none is stated."""


class ModelsResult(RootModel[list[ModelRow]]):
    """The answer of ``layerscope models``: its ``--json`` output, a JSON array of one object per bundled model."""

    model_config = ConfigDict(frozen=True)


class HardwareRequest(BaseModel):
    """What to list: every hardware preset, or one spec."""

    model_config = MODEL_CONFIG

    hardware: str | None = None
    """A preset name or YAML/JSON/CSV/XLSX file to show alone; ``None``: every preset."""
    device_column: str | None = None
    """The column of a multi-device spreadsheet."""


class MemoryLevelRow(BaseModel):
    """One level of the memory hierarchy."""

    model_config = _RESULT_CONFIG

    name: str
    """Level name (``smem``, ``l2``, ``hbm``, …)."""
    capacity_bytes: float | None
    """Capacity, bytes (per engine when ``per_engine``); ``null`` when unbounded."""
    bandwidth_bytes_per_s: float | None
    """Bandwidth, bytes per second; ``null`` where the spec does not give one."""
    per_engine: bool
    """Whether each engine has its own (shared memory, registers) rather than one for the chip."""


class InterconnectRow(BaseModel):
    """The link between devices."""

    model_config = _RESULT_CONFIG

    name: str
    """Link name (``nvlink4``, ``pcie4-x16``, …)."""
    bandwidth_bytes_per_s: float
    """Bandwidth per device, bytes per second."""
    latency_s: float
    """Latency of one transfer, seconds."""
    domain_gpus: int | None = None
    """GPUs on this link (an NVLink domain); ``null`` where every GPU of a group is."""
    in_switch_reduction: bool = False
    """The switch reduces (NVLS), at ``in_switch_bandwidth_bytes_per_s`` per GPU and direction."""
    in_switch_bandwidth_bytes_per_s: float | None = None
    """Bandwidth of the in-switch reduction; ``null`` without one."""
    network: str | None = None
    """The inter-node network's name; ``null`` where the spec has none."""
    network_bandwidth_bytes_per_s: float | None = None
    """Bandwidth of one GPU's NIC per direction, bytes per second."""
    algorithms: dict[str, tuple[float, float]] = {}
    """Collective algorithm → (α per step in seconds, β: fraction of the link's bandwidth), within the domain."""


class ClusterRow(BaseModel):
    """A cluster's layout (``hardware.cluster``): its GPU, nodes × GPUs and NVLink domain; the links' figures are the
    row's ``interconnect`` (the cluster's fabric and NIC, merged into its GPU's spec)."""

    model_config = _RESULT_CONFIG

    gpu: str
    """The GPU's spec name (a preset)."""
    nodes: int
    """Nodes (servers, compute trays, TPU hosts)."""
    gpus_per_node: int
    """GPUs in one node."""
    total_gpus: int
    """``nodes × gpus_per_node``."""
    domain_gpus: int
    """GPUs of one NVLink domain (GB200 NVL72: 72, over 18 nodes)."""
    topology: str
    """Shape of the fabric: ``switch``, ``mesh`` or ``torus-2d``."""
    sources: dict[str, str]
    """Citation per cluster figure, keyed by its dotted path (``fabric.bandwidth_bytes_per_s`` …)."""


class HardwareRow(BaseModel):
    """One hardware spec's figures, in base units (the field names carry them)."""

    model_config = _RESULT_CONFIG

    name: str
    """Spec name."""
    description: str
    """What the spec describes."""
    kind: str
    """``gpu``, ``cpu``, ``npu``, …"""
    engines: int
    """Compute engines (SMs, cores, CUs)."""
    clock_hz: float
    """Engine clock, Hz."""
    macs_per_cycle: dict[str, float]
    """Multiply-accumulates per cycle per engine, by dtype (where the spec gives them)."""
    peak_flops_per_s: dict[str, float]
    """Peak FLOP/s of the chip, by dtype (where the spec gives them)."""
    peak_bf16_flops_per_s: float
    """Peak bf16 FLOP/s as the cost models resolve it."""
    tf32_flops_per_s: float | None
    """Peak TF32 FLOP/s; ``null`` where the chip has none."""
    vector_flops_per_s: float
    """Peak vector (non-matrix) FLOP/s."""
    memory_levels: list[MemoryLevelRow]
    """The memory hierarchy, innermost first."""
    memory_bytes: float | None
    """Main-memory capacity, bytes; ``null`` when unbounded (a sheet without ``Memory_capacity``)."""
    memory_bandwidth_bytes_per_s: float
    """Main-memory bandwidth, bytes per second."""
    interconnect: InterconnectRow | None
    """The link between devices; ``null`` where the spec has none."""
    launch_overhead_s: float
    """Fixed cost of one kernel launch, seconds."""
    matmul_efficiency: float
    """Fraction of peak FLOP/s matrix ops reach, 0..1."""
    memory_efficiency: float
    """Fraction of peak bandwidth memory-bound ops reach, 0..1."""
    cluster: ClusterRow | None = None
    """The cluster's layout where the spec is one GPU of a cluster preset or file; ``null`` for a chip."""


class HardwareResult(RootModel[list[HardwareRow]]):
    """The answer of ``layerscope hardware``: its ``--json`` output, a JSON array of one object per spec (every
    preset, or the one asked for)."""

    model_config = ConfigDict(frozen=True)


def models(request: ModelsRequest | None = None) -> ModelsResult:
    """Every bundled model config with its counted and published parameter counts."""
    from layerscope.model import list_catalog, load_model_spec, param_counts

    rows = []
    for entry in list_catalog():
        spec = load_model_spec(entry.id)
        counts = param_counts(spec)
        rows.append(ModelRow(
            id=entry.id, alias=entry.alias, model_type=spec.model_type, layers=spec.num_layers,
            hidden=spec.hidden_size, attention=spec.attention_kind, moe=spec.moe is not None,
            params_total=counts.total, params_active=counts.active, published_total=entry.published_total_params,
            published_active=entry.published_active_params,
        ))
    return ModelsResult(rows)


def hardware(request: HardwareRequest | None = None) -> HardwareResult:
    """Every hardware preset then every cluster preset, or the one spec of ``request.hardware``, with its figures
    (a cluster's: one GPU with the cluster's links, and its layout)."""
    from layerscope.hardware import list_presets, load_hardware
    from layerscope.hardware.cluster import cluster_names, cluster_of, load_cluster

    request = request or HardwareRequest()
    if request.hardware is not None:
        spec = load_hardware(request.hardware, device=request.device_column)
        return HardwareResult([hardware_row(spec, cluster_of(request.hardware))])
    chips = [hardware_row(load_hardware(name)) for name in list_presets()]
    clusters = [hardware_row((c := load_cluster(name)).device_spec(), c) for name in cluster_names()]
    return HardwareResult(chips + clusters)


def _finite(value: float | None) -> float | None:
    """``value``, or ``None`` for an unbounded (infinite) capacity: JSON has no infinity."""
    return value if value is not None and math.isfinite(value) else None


def hardware_row(hw: HardwareSpec, cluster: ClusterSpec | None = None) -> HardwareRow:
    """One spec's figures for the listing, in base units; ``cluster``'s layout where ``hw`` is its GPU."""
    from layerscope.units import DType

    return HardwareRow(
        name=hw.name, description=hw.description, kind=hw.kind, engines=hw.engines.count,
        clock_hz=hw.engines.clock_hz,
        macs_per_cycle={d.value: m for d, m in hw.engines.macs_per_cycle.items()},
        peak_flops_per_s={d.value: f for d, f in hw.engines.peak_flops_per_s.items()},
        peak_bf16_flops_per_s=hw.peak_flops(DType.BF16), tf32_flops_per_s=hw.engines.tf32_flops_per_s,
        vector_flops_per_s=hw.engines.vector_flops_per_s,
        memory_levels=[MemoryLevelRow(name=lv.name, capacity_bytes=_finite(lv.capacity_bytes),
                                      bandwidth_bytes_per_s=lv.bandwidth_bytes_per_s, per_engine=lv.per_engine)
                       for lv in hw.memory],
        memory_bytes=_finite(hw.memory_capacity_bytes), memory_bandwidth_bytes_per_s=hw.memory_bandwidth_bytes_per_s,
        interconnect=None if (ic := hw.interconnect) is None else InterconnectRow(
            name=ic.name, bandwidth_bytes_per_s=ic.bandwidth_bytes_per_s, latency_s=ic.latency_s,
            domain_gpus=ic.domain_gpus, in_switch_reduction=ic.in_switch_reduction,
            in_switch_bandwidth_bytes_per_s=ic.in_switch_bandwidth if ic.in_switch_reduction else None,
            network=ic.network.name if ic.network else None,
            network_bandwidth_bytes_per_s=ic.network.bandwidth_bytes_per_s if ic.network else None,
            algorithms={name: (a.alpha_s, a.bandwidth_fraction) for name, a in ic.algorithms.items()}),
        launch_overhead_s=hw.launch_overhead_s, matmul_efficiency=hw.efficiency.matmul,
        memory_efficiency=hw.efficiency.memory,
        cluster=None if cluster is None else ClusterRow(
            gpu=cluster.gpu.name, nodes=cluster.nodes, gpus_per_node=cluster.gpus_per_node,
            total_gpus=cluster.total_gpus, domain_gpus=cluster.domain_gpus, topology=cluster.topology,
            sources=dict(cluster.sources)),
    )
