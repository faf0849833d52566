"""``ClusterSpec``: N nodes × G GPUs, the intra-node fabric and the inter-node network.

A cluster names its GPU (a preset or an inline :class:`HardwareSpec` mapping), how many nodes and GPUs per node it
has, the fabric that joins the GPUs of one NVLink domain (``fabric``: an :class:`InterconnectSpec` block; the
domain is not always the node: GB200 NVL72's spans 18 compute trays of 4 GPUs) and the NIC each GPU has to the
network between domains (``network``). Every figure cites its source in :attr:`ClusterSpec.sources`.

:meth:`ClusterSpec.device_spec` is the one GPU as the cost models see it: the chip with the cluster's links merged
into its ``interconnect`` (``domain_gpus``, ``network``), so every cost path times collectives on the cluster's
links (``cost.collectives``: NVLink within a domain, the NIC's share across domains). The fitted α-β terms of the
GPU preset's own link carry over when the cluster's link is that link (same name and bandwidth); otherwise the
link runs at its datasheet figures (α = ``latency_s`` per step, β = 1) and the spec's sources say so.

Presets live in ``presets/clusters/<name>.yaml`` (:func:`cluster_names`); :func:`load_cluster` takes a preset name
or a YAML/JSON file (a top-level ``cluster:`` mapping, or ``nodes``/``gpus_per_node`` at the top level), and
``load_hardware`` resolves a cluster to its :meth:`~ClusterSpec.device_spec`, so ``--hardware dgx-h100`` works
wherever a hardware spec is asked for. See docs/clusters.md.
"""

from __future__ import annotations

import functools
import math
import re
from pathlib import Path
from typing import Any, Literal, NamedTuple

from pydantic import BaseModel, Field, ValidationError, field_validator, model_validator

from layerscope.docstrings import RESULT_CONFIG
from layerscope.errors import HardwareSpecError
from layerscope.hardware.loaders import is_cluster_mapping
from layerscope.hardware.spec import (
    CollectiveAlgorithmSpec,
    HardwareSpec,
    InterconnectSpec,
    NetworkSpec,
    format_validation_error,
)
from layerscope.units import note_input, quote

__all__ = ["CLUSTER_DIR", "ClusterSpec", "GroupPlacement", "cluster_names", "cluster_of", "find_cluster",
           "is_cluster_mapping", "list_clusters", "load_cluster", "load_cluster_file"]

#: The bundled cluster presets, one YAML file each.
CLUSTER_DIR = Path(__file__).parent / "presets" / "clusters"
#: Most nodes a cluster may have (the largest training clusters are ~10^5 GPUs; more is a typo).
MAX_NODES = 1_000_000
#: Most GPUs per node (an NVL576 rack's trays hold 4; a 'node' of thousands is a typo).
MAX_GPUS_PER_NODE = 1024

FabricTopology = Literal["switch", "mesh", "torus-2d"]


def _key(name: str) -> str:
    """Lookup key of a cluster name: lower case without separators (``DGX_H100`` → ``dgxh100``)."""
    return re.sub(r"[^0-9a-z]+", "", name.lower())


class GroupPlacement(NamedTuple):
    """Where a group of GPUs sits: its members are global ranks 0, s, 2s, … (ranks numbered node by node, so a
    node's GPUs are consecutive ranks and a domain's are consecutive nodes)."""

    gpus: int
    """GPUs in the group."""
    stride: int
    """Ranks between consecutive members (1: packed; a data-parallel group strided by TP·PP: TP·PP)."""
    nodes: int
    """Nodes the group touches."""
    domains: int
    """NVLink domains the group touches; more than 1: its collectives cross the network."""

    @property
    def one_domain(self) -> bool:
        """True when every member shares one NVLink domain (collectives stay on the fabric)."""
        return self.domains == 1

    @property
    def per_domain(self) -> int:
        """Members in each domain touched (the most, where they do not split evenly): what ``cost.collectives``
        takes as ``gpus_per_node``."""
        return math.ceil(self.gpus / self.domains)


def _units_touched(gpus: int, stride: int, unit: int) -> int:
    """Blocks of ``unit`` consecutive ranks touched by ranks 0, stride, …, (gpus−1)·stride: one per member when the
    stride reaches past a block, else every block of the span (each holds a member)."""
    if stride >= unit:
        return gpus
    return math.ceil(((gpus - 1) * stride + 1) / unit)


class ClusterSpec(BaseModel):
    """N nodes of G GPUs: the GPU, the fabric of one NVLink domain and the network between domains."""

    model_config = RESULT_CONFIG

    name: str = Field(min_length=1)
    """Preset-style name (``dgx-h100``)."""
    description: str = ""
    """One line for listings (``NVIDIA DGX H100: 8x H100 SXM5, NVLink4 + NVSwitch, 8x ConnectX-7 400 Gb/s``)."""
    gpu: HardwareSpec
    """The chip (a preset name or an inline :class:`HardwareSpec` mapping in a file, resolved when read)."""
    nodes: int = Field(ge=1, le=MAX_NODES)
    """Nodes (servers, compute trays, TPU hosts)."""
    gpus_per_node: int = Field(ge=1, le=MAX_GPUS_PER_NODE)
    """GPUs in one node."""
    topology: FabricTopology = "switch"
    """Shape of the fabric: ``switch`` (NVSwitch: every GPU reaches every other at its full per-GPU bandwidth),
    ``mesh`` (point-to-point links, one to each peer: the full per-GPU bandwidth only when every peer takes part),
    ``torus-2d`` (TPU ICI: each chip linked to 4 neighbours). The cost model sees every shape as a switch of the
    fabric's per-GPU bandwidth; ``sources['topology']`` says what that approximates."""
    fabric: InterconnectSpec
    """The link within one NVLink domain: per-GPU bandwidth per direction, latency, ``domain_gpus`` (None: one
    node), in-switch reduction. Its ``network`` stays unset: the network is the cluster's ``network``."""
    network: NetworkSpec | None = None
    """The NIC of each GPU to the network between domains; required when the cluster has more than one domain."""
    sources: dict[str, str] = Field(default_factory=dict)
    """Citation per figure, keyed by its dotted path (``nodes``, ``fabric.bandwidth_bytes_per_s``,
    ``network.bandwidth_bytes_per_s``, ``topology`` …)."""

    @field_validator("gpu", mode="before")
    @classmethod
    def _resolve_gpu(cls, value: Any) -> Any:
        if not isinstance(value, str):
            return value
        if find_cluster(value) is not None:
            raise ValueError(f"{value!r} is a cluster; give a GPU preset or spec")
        from layerscope.hardware.loaders import load_hardware

        try:
            return load_hardware(value)
        except HardwareSpecError as exc:
            raise ValueError(str(exc)) from None

    @model_validator(mode="after")
    def _check_layout(self) -> ClusterSpec:
        if self.fabric.network is not None:
            raise ValueError("fabric.network: the inter-node network is the cluster's own 'network' field")
        domain, total = self.domain_gpus, self.total_gpus
        if domain > total:
            raise ValueError(f"fabric.domain_gpus: {domain} GPUs is more than the cluster's {total} "
                             f"(nodes × gpus_per_node = {self.nodes} × {self.gpus_per_node})")
        if domain % self.gpus_per_node and self.gpus_per_node % domain:
            raise ValueError(f"fabric.domain_gpus: {domain} neither divides gpus_per_node ({self.gpus_per_node}) "
                             "nor is a multiple of it (a domain is part of a node or whole nodes)")
        if total % domain:
            raise ValueError(f"nodes: {self.nodes} × {self.gpus_per_node} = {total} GPUs is not a whole number of "
                             f"{domain}-GPU NVLink domains (fabric.domain_gpus)")
        if self.fabric.in_switch_reduction and self.fabric.in_switch_min_gpus > domain:
            raise ValueError(f"fabric.in_switch_min_gpus: {self.fabric.in_switch_min_gpus} is more than the "
                             f"{domain} GPUs of the domain")
        if self.network is None and total > domain:
            raise ValueError(f"network: the cluster's {total} GPUs span {total // domain} NVLink domains of {domain}; "
                             "give the NIC each GPU has to the network")
        return self

    @classmethod
    def from_dict(cls, data: Any, *, origin: str = "cluster spec") -> ClusterSpec:
        """Validate ``data`` (a cluster mapping, or one under a top-level ``cluster:`` key); a bad value raises
        :class:`HardwareSpecError` naming ``origin`` and the field."""
        if isinstance(data, dict) and isinstance(data.get("cluster"), dict) and len(data) == 1:
            data = data["cluster"]
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise HardwareSpecError(format_validation_error(exc, origin)) from None

    # -- layout --------------------------------------------------------------------------------------------------

    @property
    def total_gpus(self) -> int:
        """GPUs in the cluster: ``nodes × gpus_per_node``."""
        return self.nodes * self.gpus_per_node

    @property
    def domain_gpus(self) -> int:
        """GPUs of one NVLink domain: ``fabric.domain_gpus``, or one node's where the fabric does not say."""
        return self.fabric.domain_gpus or self.gpus_per_node

    def with_nodes(self, nodes: int) -> ClusterSpec:
        """This cluster with ``nodes`` nodes (validated: a whole number of domains, a network beyond one)."""
        try:
            return type(self).model_validate({**dict(self), "nodes": nodes})
        except ValidationError as exc:
            raise HardwareSpecError(format_validation_error(exc, f"cluster {self.name!r} with {nodes} nodes")) from None

    def placement(self, group_gpus: int, stride: int = 1) -> GroupPlacement:
        """Nodes and NVLink domains a group of ``group_gpus`` GPUs touches, its members ``stride`` ranks apart
        (ranks node by node: a tensor-parallel group of 8 on a DGX is ranks 0-7, stride 1; its data-parallel peers
        are ``stride`` = 8 apart). Raises :class:`HardwareSpecError` when the group does not fit the cluster."""
        if group_gpus < 1 or stride < 1:
            raise HardwareSpecError(f"{self.name}: a group needs >= 1 GPU and a stride >= 1, got {group_gpus} "
                                    f"GPUs, stride {stride}")
        if (group_gpus - 1) * stride + 1 > self.total_gpus:
            raise HardwareSpecError(f"{self.name}: a group of {group_gpus} GPUs {stride} apart needs "
                                    f"{(group_gpus - 1) * stride + 1} ranks; the cluster has {self.total_gpus}")
        return GroupPlacement(group_gpus, stride, _units_touched(group_gpus, stride, self.gpus_per_node),
                              _units_touched(group_gpus, stride, self.domain_gpus))

    # -- the chip the cost models see ----------------------------------------------------------------------------

    def device_spec(self) -> HardwareSpec:
        """One GPU of the cluster as the cost models see it: the chip with the cluster's fabric as its
        ``interconnect`` (``domain_gpus`` the domain, ``network`` the cluster's NIC, the fitted α-β terms where
        the links are the GPU's own), named after the cluster; its sources cite the cluster's figures."""
        own = self.gpu.interconnect
        same_link = (own is not None and own.name == self.fabric.name
                     and own.bandwidth_bytes_per_s == self.fabric.bandwidth_bytes_per_s)
        own_terms = None if own is None or not same_link else {
            k: v for k, v in own.algorithms.items() if k != "nvls" or self.fabric.in_switch_reduction}
        fabric_terms, fabric_source = _terms(self.fabric.algorithms, own_terms, "link", self.fabric.name, self.gpu.name)
        network = None
        sources = {k: v for k, v in self.gpu.sources.items() if not k.startswith("interconnect")}
        if self.network is not None:
            own_net = own.network if own is not None else None
            same_nic = (own_net is not None and own_net.name == self.network.name
                        and own_net.bandwidth_bytes_per_s == self.network.bandwidth_bytes_per_s)
            network_terms, sources["interconnect.network.algorithms"] = _terms(
                self.network.algorithms, own_net.algorithms if own_net is not None and same_nic else None, "NIC",
                self.network.name, self.gpu.name)
            network = self.network.model_copy(update={"algorithms": network_terms})
        link = InterconnectSpec.model_validate({
            **dict(self.fabric), "domain_gpus": self.domain_gpus, "network": network, "algorithms": fabric_terms})
        for path, text in self.sources.items():
            # fabric.X cites interconnect.X, network.X interconnect.network.X
            if path.startswith(("fabric.", "network.")):
                sources["interconnect." + path.removeprefix("fabric.")] = text
        sources["interconnect.algorithms"] = fabric_source
        sources["cluster"] = (f"{self.name}: {self.nodes} × {self.gpus_per_node} {self.gpu.name}, NVLink domain "
                              f"{self.domain_gpus} GPUs ({self.topology}); {self.sources.get('topology', '')}")
        return self.gpu.model_copy(update={
            "name": self.name,
            "description": (f"{self.gpu.description or self.gpu.name}; one of the {self.total_gpus} of {self.name} "
                            f"({self.nodes} × {self.gpus_per_node})"),
            "interconnect": link, "sources": sources})

    def figure_paths(self) -> list[str]:
        """Dotted paths of the cluster's own figures, each of which a preset cites in ``sources``: the layout, the
        GPU, the topology and every fabric and network figure given (fitted terms cite their own rows)."""
        paths = ["gpu", "nodes", "gpus_per_node", "topology"]
        for prefix, block in (("fabric", self.fabric), ("network", self.network)):
            if block is None:
                continue
            given = block.model_fields_set - {"name", "algorithms", "network"}
            if prefix == "fabric" and not self.fabric.in_switch_reduction:
                given |= {"in_switch_reduction"}  # saying there is none is a figure too
            paths += [f"{prefix}.{field}" for field in sorted(given)]
        return paths


def _terms(given: dict[str, CollectiveAlgorithmSpec], own: dict[str, CollectiveAlgorithmSpec] | None, what: str,
           link: str, gpu: str) -> tuple[dict[str, CollectiveAlgorithmSpec], str]:
    """The α-β terms of one of a cluster's links and their source: the cluster's own, else those the GPU preset
    fitted on this same link (``own``; None where the cluster's link is another), else none."""
    if given:
        return dict(given), "the cluster's own terms (each citing its rows)"
    if own is not None:
        return dict(own), (f"carried over from {gpu}'s fit: the cluster runs the GPU's own {what} ({link}); each "
                           "term's source names its rows")
    return {}, (f"none: the {what} ({link}) is not {gpu}'s own, so no fitted terms apply; α = latency_s per step, "
                "β = 1 (cost.collectives)")


# -- presets and files ---------------------------------------------------------------------------------------------


@functools.cache
def _index() -> dict[str, tuple[str, Path]]:
    """Lookup key → (cluster preset name, file); a name that a chip preset also answers to is refused (a hardware
    reference must mean one spec)."""
    from layerscope.hardware.presets import find_preset

    index = {_key(path.stem): (path.stem, path) for path in sorted(CLUSTER_DIR.glob("*.yaml"))}
    for name, path in index.values():
        if find_preset(name) is not None:
            raise HardwareSpecError(f"{path}: cluster {name!r} clashes with hardware preset {find_preset(name)!r}")
    return index


def cluster_names() -> list[str]:
    """Names of the bundled cluster presets, sorted."""
    return sorted(name for name, _ in _index().values())


def find_cluster(name: str) -> str | None:
    """The canonical cluster preset name ``name`` stands for (case/dash-insensitive), or None."""
    entry = _index().get(_key(name))
    return None if entry is None else entry[0]


@functools.cache
def _load_preset(key: str) -> ClusterSpec:
    name, path = _index()[key]
    cluster = load_cluster_file(path)
    if cluster.name != name:
        raise HardwareSpecError(f"{path}: name {cluster.name!r} differs from the file name {name!r}")
    return cluster


def load_cluster_file(path: str | Path) -> ClusterSpec:
    """A cluster from a YAML/JSON file, or a CSV/XLSX sheet of one column with a dotted field per row
    (:func:`~layerscope.hardware.loaders.sheet_mapping`); numbers may carry units, as in hardware files. A ``gpu``
    naming a file is read relative to the cluster file."""
    from layerscope.hardware.loaders import SHEET_READERS, read_mapping, sheet_mapping

    file = Path(path)
    note_input(file)
    data = sheet_mapping(file) if file.suffix.lower() in SHEET_READERS else read_mapping(file)
    if not is_cluster_mapping(data):
        raise HardwareSpecError(f"{file}: not a cluster (no top-level 'cluster:' mapping, nodes or gpus_per_node)")
    return cluster_from_mapping(data, file)


def cluster_from_mapping(data: dict[str, Any], file: Path) -> ClusterSpec:
    """The cluster a mapping read from ``file`` holds (units already converted); a ``gpu`` naming a file beside
    ``file`` is read from there."""
    body = data["cluster"] if isinstance(data.get("cluster"), dict) and len(data) == 1 else data
    gpu = body.get("gpu")
    if isinstance(gpu, str) and find_cluster(gpu) is None and not Path(gpu).is_absolute():
        beside = file.parent / gpu
        if beside.is_file():
            body = {**body, "gpu": str(beside)}
    return ClusterSpec.from_dict(body, origin=str(file))


def load_cluster(source: str | Path) -> ClusterSpec:
    """A :class:`ClusterSpec` from a preset name (``dgx-h100``, ``DGX_H100``) or a YAML/JSON file."""
    from layerscope.hardware.loaders import MAPPING_READERS

    path = Path(source)
    if path.suffix.lower() in MAPPING_READERS or path.exists():
        return load_cluster_file(path)
    name = find_cluster(str(source))
    if name is None:
        raise HardwareSpecError(f"unknown cluster {quote(str(source))}: not a file and not a cluster preset; "
                                f"clusters: {', '.join(cluster_names())}")
    return _load_preset(_key(name))


def cluster_of(source: str | Path) -> ClusterSpec | None:
    """The cluster ``source`` stands for where ``load_hardware`` reads it as one (a cluster preset name that is not
    a chip preset's, or a YAML/JSON/CSV/XLSX file holding a cluster), else None."""
    from layerscope.hardware.loaders import LOADERS, MAPPING_READERS, SHEET_READERS, is_cluster_sheet, read_mapping
    from layerscope.hardware.presets import find_preset

    path = Path(source)
    if path.suffix.lower() in LOADERS or path.exists():
        suffix = path.suffix.lower()
        if not path.is_file():
            return None
        if (suffix in MAPPING_READERS and is_cluster_mapping(read_mapping(path))) or (
                suffix in SHEET_READERS and is_cluster_sheet(path)):
            return load_cluster_file(path)
        return None
    if find_preset(str(source)) is not None or find_cluster(str(source)) is None:
        return None
    return load_cluster(str(source))


def list_clusters() -> dict[str, str]:
    """Cluster preset name → one-line description, sorted by name."""
    return {name: load_cluster(name).description for name in cluster_names()}
