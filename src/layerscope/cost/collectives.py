"""Collectives on the interconnect: an α-β time per algorithm, by message size and GPU count.

Each algorithm moves a known number of bytes per GPU in a known number of steps, and one step of
``b`` bytes over a link of bandwidth ``B`` costs ``α + b / (β · B)`` (Hockney's model as Thakur,
Rabenseifner & Gropp, "Optimization of collective communication operations in MPICH", IJHPCA 19(1),
2005, §3, apply it per algorithm; pipelined algorithms pay the bytes once over the slowest link and
α once per step). ``α`` (per step) and ``β`` (the fraction of the link's per-direction bandwidth the
algorithm's bytes reach) are fitted per GPU on the collective rows of ``data/gpu-kernels.md``
(:mod:`layerscope.hardware.collective_fit`) and stored in the spec's ``interconnect.algorithms`` (and
``interconnect.network.algorithms`` across nodes); an algorithm without terms takes the ring's, and without
those runs at the link's ``latency_s`` per step and its full bandwidth.

Per GPU, for a message of M bytes (NCCL's convention: the all-reduce buffer, the all-gather's output, the
reduce-scatter's input, the all-to-all's send buffer) over n GPUs:

============== ========= ================================ =============== ==========================
collective     algorithm bytes sent (= received)          steps           source
============== ========= ================================ =============== ==========================
all-reduce     ring      2(n−1)/n · M                     2(n−1)          Patarasuk & Yuan 2009
all-reduce     tree      2 · M                            2(⌈log2 N⌉+g−1) Sanders, Speck & Träff 2009
all-reduce     nvls      M (through the switch)           2               NVLink SHARP (NCCL 2.17+)
all-gather     ring      (n−1)/n · M                      n−1             Thakur et al. 2005 §4.1
reduce-scatter ring      (n−1)/n · M                      n−1             Thakur et al. 2005 §4.4
all-to-all     direct    (n−1)/n · M                      n−1             pairwise exchange, §4.6
send/recv      direct    M                                1
============== ========= ================================ =============== ==========================

NCCL's busbw (nccl-tests ``doc/PERFORMANCE.md``) is the algorithm bandwidth ``M / t`` times 2(n−1)/n for
all-reduce and (n−1)/n for all-gather and reduce-scatter, so that it reads as the link speed a ring reaches:
:data:`BUS_FACTORS`. The tree is NCCL's double binary tree (Jeaugey, "Massively scale your deep learning
training with NCCL 2.4", NVIDIA blog 2019): log-depth across the N nodes, a chain of the g GPUs within a
node, each byte going up (reduce) and down (broadcast) once. NVLS is NCCL's in-switch all-reduce
(``NCCL_NVLS_ENABLE``): each GPU's buffer is reduced by the NVSwitch (``multimem.ld_reduce``) and the
result multicast back (``multimem.st``), ~M each way through the switch, at the switch's bandwidth.

Placement: n GPUs fill NVLink domains of ``interconnect.domain_gpus`` (g = min(n, domain) per node,
N = ⌈n / g⌉ nodes). Within one domain the bytes ride the intra-node link. Across nodes NCCL's rings and
trees run one channel per NIC (one NIC per GPU): each GPU's NIC carries the algorithm's bytes divided by
g (a ring's per-GPU bytes cross a node boundary on one of the g rings), its NVLink the rest; the time
is the slower of the two (pipelined) plus α per step at the network's α. An all-to-all sends
(n−g)/n · M through the GPU's own NIC and (g−1)/n · M over NVLink. A group larger than the domain needs
``interconnect.network``.

The algorithm is the fastest one available at each (M, n), as NCCL's tuner picks it
(``src/graph/tuning.cc``: the predicted time of each algorithm and protocol, the least wins), or a named one.

HBM traffic of the collective itself (:attr:`CollectiveCost.hbm_bytes`): the input buffer read and the
output buffer written once, and for ``ring`` and ``tree`` every received byte written into NCCL's staging
FIFO by the peer and read back by the reducing kernel (``NCCL_BUFFSIZE``, the per-channel buffers of
NCCL's Simple protocol), 2× the bytes received; ``nvls`` and ``direct`` write what they receive into the
destination buffer itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from layerscope.cost.features import OpFeatures
from layerscope.errors import CostModelError
from layerscope.hardware.spec import COLLECTIVE_ALGORITHMS, HardwareSpec, InterconnectSpec
from layerscope.registry import Registry

__all__ = [
    "ALGORITHMS", "BUS_FACTORS", "COLLECTIVES", "Algorithm", "CollectiveCost", "CollectiveTerms", "Traffic",
    "algorithm_work", "bus_factor", "collective_cost", "collective_time_s", "communication_terms", "placement",
    "stage_send_crosses_node",
]

Collective = Literal["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv"]
#: The collectives timed here.
COLLECTIVES: tuple[Collective, ...] = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv")
#: Aliases of collectives by other names (the kernel table's intra-node copies are point-to-point sends).
_ALIASES = {"p2p_copy": "send_recv", "allreduce": "all_reduce", "allgather": "all_gather",
            "reducescatter": "reduce_scatter", "alltoall": "all_to_all"}


def _float(x: np.ndarray | float) -> np.ndarray:
    return np.asarray(x, dtype=np.float64)


def bus_factor(collective: str, gpus: np.ndarray | float) -> np.ndarray:
    """NCCL's busbw / algbw of ``collective`` over ``gpus`` GPUs (nccl-tests ``doc/PERFORMANCE.md``): 2(n−1)/n for
    all-reduce, (n−1)/n for all-gather, reduce-scatter and all-to-all, 1 for send/recv."""
    n = _float(gpus)
    return BUS_FACTORS[_name(collective)](n)


#: busbw / algbw per collective, of the GPU count n.
BUS_FACTORS = {
    "all_reduce": lambda n: 2.0 * (n - 1.0) / n,
    "all_gather": lambda n: (n - 1.0) / n,
    "reduce_scatter": lambda n: (n - 1.0) / n,
    "all_to_all": lambda n: (n - 1.0) / n,
    "send_recv": lambda n: np.ones_like(n),
}


def _name(collective: str) -> str:
    name = _ALIASES.get(collective, collective)
    if name not in COLLECTIVES:
        raise CostModelError(f"unknown collective {collective!r}; known: {', '.join(COLLECTIVES)}")
    return name


@dataclass(frozen=True)
class Placement:
    """Where n GPUs sit: g per NVLink domain (node), N nodes."""

    gpus: np.ndarray
    per_node: np.ndarray
    nodes: np.ndarray

    @property
    def multi_node(self) -> np.ndarray:
        return self.nodes > 1


def placement(gpus: np.ndarray | float, interconnect: InterconnectSpec, gpus_per_node: int | None = None) -> Placement:
    """The GPUs of a group packed into NVLink domains: g = min(n, domain), N = ⌈n / g⌉. ``gpus_per_node``
    overrides the domain (a send/recv between two nodes: 1)."""
    n = np.maximum(_float(gpus), 1.0)
    domain = gpus_per_node if gpus_per_node is not None else interconnect.domain_gpus
    g = n if domain is None else np.minimum(n, float(domain))
    return Placement(n, g, np.ceil(n / g))


@dataclass(frozen=True)
class Traffic:
    """One algorithm's work per GPU: α steps, bytes over the intra-node link (or the switch) and over the NIC,
    bytes received (for the staging buffers), and bytes of the input and output buffers."""

    steps: np.ndarray
    link_bytes: np.ndarray
    nic_bytes: np.ndarray
    received_bytes: np.ndarray
    buffer_bytes: np.ndarray
    """Input read + output written."""


def _buffers(collective: str, m: np.ndarray, n: np.ndarray) -> np.ndarray:
    """Bytes of the input and output buffers: all-gather reads M/n and writes M, reduce-scatter the converse,
    every other collective M each (send/recv: the sender's M read and the receiver's M written)."""
    if collective in ("all_gather", "reduce_scatter"):
        return m + m / n
    return 2.0 * m


def _split(total: np.ndarray, place: Placement) -> tuple[np.ndarray, np.ndarray]:
    """A ring's or tree's per-GPU bytes as (NVLink bytes, NIC bytes): within a node all on the link; across
    nodes the NIC carries the share of one of the g channels (total / g) and the link the rest."""
    nic = np.where(place.multi_node, total / place.per_node, 0.0)
    return total - nic, nic


class Algorithm:
    """How one collective algorithm moves its bytes; subclasses are registered in :data:`ALGORITHMS`."""

    name = ""
    collectives: frozenset[str] = frozenset()
    staged = True
    """Received bytes pass through NCCL's staging FIFO (written by the peer, read back)."""
    multi_node = True
    """The algorithm can span nodes."""

    def available(self, interconnect: InterconnectSpec, place: Placement) -> np.ndarray:
        """Per element: whether the algorithm runs at this placement."""
        ok = place.gpus >= 1
        return ok if self.multi_node else ok & ~place.multi_node

    def traffic(self, collective: str, m: np.ndarray, place: Placement) -> Traffic:
        raise NotImplementedError

    def link_bandwidth(self, interconnect: InterconnectSpec) -> float:
        """Per-direction bandwidth its intra-node bytes move at (before β)."""
        return interconnect.bandwidth_bytes_per_s


class Ring(Algorithm):
    """Ring all-reduce (reduce-scatter then all-gather around a ring: 2(n−1) steps of M/n; Patarasuk & Yuan,
    "Bandwidth optimal all-reduce algorithms for clusters of workstations", JPDC 69(2), 2009) and ring
    all-gather / reduce-scatter (n−1 steps of M/n; Thakur et al. 2005 §4.1, §4.4)."""

    name = "ring"
    collectives = frozenset({"all_reduce", "all_gather", "reduce_scatter"})

    def traffic(self, collective: str, m: np.ndarray, place: Placement) -> Traffic:
        n = place.gpus
        rounds = 2.0 if collective == "all_reduce" else 1.0
        total = rounds * (n - 1.0) / n * m
        link, nic = _split(total, place)
        return Traffic(rounds * (n - 1.0), link, nic, total, _buffers(collective, m, n))


class Tree(Algorithm):
    """NCCL's double binary tree all-reduce (Sanders, Speck & Träff, "Two-tree algorithms for full bandwidth
    broadcast, reduction and scan", Parallel Computing 35(12), 2009; NCCL 2.4): a reduce up and a broadcast
    down two complementary trees, each carrying half the message, so each GPU sends and receives ~2M; depth
    ⌈log2 N⌉ across nodes plus a chain of the g GPUs in a node, each way."""

    name = "tree"
    collectives = frozenset({"all_reduce"})

    def traffic(self, collective: str, m: np.ndarray, place: Placement) -> Traffic:
        n = place.gpus
        total = np.where(n > 1, 2.0 * m, 0.0)
        link, nic = _split(total, place)
        steps = np.where(n > 1, 2.0 * (np.ceil(np.log2(place.nodes)) + place.per_node - 1.0), 0.0)
        return Traffic(steps, link, nic, total, _buffers(collective, m, n))


class Nvls(Algorithm):
    """NVLink SHARP all-reduce (NCCL's NVLS): the NVSwitch reduces each GPU's buffer and multicasts the result,
    ~M through the switch each way in two steps (reduce, multicast), at the in-switch bandwidth; one NVLink
    domain of at least ``in_switch_min_gpus`` GPUs, on a switch that reduces."""

    name = "nvls"
    collectives = frozenset({"all_reduce"})
    staged = False
    multi_node = False

    def available(self, interconnect: InterconnectSpec, place: Placement) -> np.ndarray:
        if not interconnect.in_switch_reduction:
            return np.zeros(np.shape(place.gpus), dtype=bool)
        return super().available(interconnect, place) & (place.gpus >= interconnect.in_switch_min_gpus)

    def traffic(self, collective: str, m: np.ndarray, place: Placement) -> Traffic:
        n = place.gpus
        moved = np.where(n > 1, m, 0.0)
        return Traffic(np.where(n > 1, 2.0, 0.0), moved, np.zeros_like(moved), moved, _buffers(collective, m, n))

    def link_bandwidth(self, interconnect: InterconnectSpec) -> float:
        return interconnect.in_switch_bandwidth


class Direct(Algorithm):
    """Point-to-point: a send/recv moves M in one step; an all-to-all sends (n−1)/n · M to its n−1 peers by
    pairwise exchange (n−1 steps, Thakur et al. 2005 §4.6), the (n−g)/n · M bound for other nodes through
    the GPU's own NIC. Writes land in the destination buffer (CUDA P2P / RDMA writes)."""

    name = "direct"
    collectives = frozenset({"all_to_all", "send_recv"})
    staged = False

    def traffic(self, collective: str, m: np.ndarray, place: Placement) -> Traffic:
        n, g = place.gpus, place.per_node
        if collective == "send_recv":
            total = np.where(n > 1, m, 0.0)
            nic = np.where(place.multi_node, total, 0.0)
            return Traffic(np.where(n > 1, 1.0, 0.0), total - nic, nic, total, _buffers(collective, m, n))
        total = (n - 1.0) / n * m
        nic = (n - g) / n * m
        return Traffic(n - 1.0, total - nic, nic, total, _buffers(collective, m, n))


#: Collective algorithms by name (the names ``interconnect.algorithms`` may carry terms for).
ALGORITHMS: Registry[Algorithm] = Registry("collective algorithm", CostModelError, {
    "ring": Ring(), "tree": Tree(), "nvls": Nvls(), "direct": Direct(),
})
assert tuple(ALGORITHMS) == COLLECTIVE_ALGORITHMS, "the spec's algorithm names and the registry must agree"


def terms(interconnect: InterconnectSpec, algorithm: str, *, network: bool) -> tuple[float, float]:
    """(α per step, β) of ``algorithm`` within the domain or across the network: the spec's fitted terms, else the
    ring's there (same link and protocol), else the link's ``latency_s`` and β = 1."""
    if network:
        net = interconnect.network
        if net is None:
            raise CostModelError(f"interconnect {interconnect.name}: no network for a collective across nodes")
        fitted, latency = net.algorithms.get(algorithm) or net.algorithms.get("ring"), net.latency_s
    else:
        fitted = interconnect.algorithms.get(algorithm) or interconnect.algorithms.get("ring")
        latency = interconnect.latency_s
    return (fitted.alpha_s, fitted.bandwidth_fraction) if fitted else (latency, 1.0)


def algorithm_time_s(algorithm: Algorithm, collective: str, m: np.ndarray, place: Placement,
                     interconnect: InterconnectSpec) -> tuple[np.ndarray, Traffic]:
    """(seconds, traffic) of ``algorithm`` at every element; ``inf`` where it is not available.

    ``t = steps · α + max(link bytes / (β · B_link), NIC bytes / (β_net · B_nic))``, the network's α where the
    group spans nodes; 0 for a group of one GPU."""
    traffic = algorithm.traffic(collective, m, place)
    alpha, beta = terms(interconnect, algorithm.name, network=False)
    link_s = traffic.link_bytes / (beta * algorithm.link_bandwidth(interconnect))
    nic_s: np.ndarray | float = 0.0
    step_alpha: np.ndarray | float = alpha
    multi = place.multi_node
    if np.any(multi):
        if interconnect.network is None:
            most = int(np.max(place.gpus[multi]))
            raise CostModelError(f"interconnect {interconnect.name}: a {collective} over {most} GPUs spans more than "
                                 f"the {interconnect.domain_gpus} GPUs of one NVLink domain (interconnect.domain_gpus) "
                                 "and the spec has no interconnect.network")
        net_alpha, net_beta = terms(interconnect, algorithm.name, network=True)
        nic_s = traffic.nic_bytes / (net_beta * interconnect.network.bandwidth_bytes_per_s)
        step_alpha = np.where(multi, net_alpha, alpha)
    seconds = traffic.steps * step_alpha + np.maximum(link_s, nic_s)
    ok = algorithm.available(interconnect, place)
    return np.where(ok, np.where(place.gpus > 1, seconds, 0.0), np.inf), traffic


@dataclass(frozen=True)
class CollectiveCost:
    """A collective timed at every (message, GPU count) element."""

    time_s: np.ndarray
    algorithm: np.ndarray
    """Index into :data:`ALGORITHMS` of the algorithm that ran (-1 for a group of one GPU)."""
    link_bytes: np.ndarray
    """Bytes each GPU sends over the intra-node link (the switch for NVLS)."""
    nic_bytes: np.ndarray
    """Bytes each GPU sends through its NIC."""
    hbm_bytes: np.ndarray
    """HBM bytes of each GPU's collective: its buffers, and the staging buffers' write and read back."""

    @property
    def algorithm_names(self) -> list[str]:
        names = list(ALGORITHMS)
        return ["" if i < 0 else names[i] for i in np.ravel(self.algorithm)]


def collective_cost(collective: str, message_bytes: np.ndarray | float, gpus: np.ndarray | float,
                    interconnect: InterconnectSpec, *, algorithm: str | None = None,
                    gpus_per_node: int | None = None) -> CollectiveCost:
    """Time, chosen algorithm and bytes of ``collective`` (module docstring), broadcast over ``message_bytes`` and
    ``gpus``: the fastest available algorithm (NCCL's tuner), or ``algorithm``. Raises :class:`CostModelError`
    for an unknown collective or algorithm, one that does not run the collective or is unavailable at some
    element, and a group beyond the NVLink domain on a spec without a network."""
    name = _name(collective)
    m, n = np.broadcast_arrays(np.maximum(_float(message_bytes), 0.0), _float(gpus))
    if np.any(n < 1) or not np.all(np.isfinite(n)):
        bad = np.unique(n[(n < 1) | ~np.isfinite(n)])
        raise CostModelError(f"{name}: GPU counts must be finite and >= 1, got {bad}")
    place = placement(n, interconnect, gpus_per_node)
    if algorithm is not None:
        algo = ALGORITHMS.lookup(algorithm)
        if name not in algo.collectives:
            raise CostModelError(f"collective algorithm {algorithm!r} does not run {name}; it runs "
                                 f"{', '.join(sorted(algo.collectives))}")
        candidates = [(list(ALGORITHMS).index(algorithm), algo)]
    else:
        candidates = [(i, a) for i, a in enumerate(ALGORITHMS.values()) if name in a.collectives]
    times, traffics = [], []
    for _, algo in candidates:
        t, tr = algorithm_time_s(algo, name, m, place, interconnect)
        times.append(t)
        traffics.append(tr)
    stacked = np.stack(times)
    best = np.argmin(stacked, axis=0)
    time_s = np.take_along_axis(stacked, best[None], axis=0)[0]
    if np.any(np.isinf(time_s)):
        bad = np.unique(n[np.isinf(time_s)])
        raise CostModelError(f"{name}: algorithm {algorithm or 'none'} is not available on {interconnect.name} "
                             f"for {', '.join(f'{x:g}' for x in bad)} GPUs")

    def pick(field: str) -> np.ndarray:
        return np.take_along_axis(np.stack([np.broadcast_to(getattr(tr, field), m.shape) for tr in traffics]),
                                  best[None], axis=0)[0]

    staged = np.array([algo.staged for _, algo in candidates])[best]
    hbm = pick("buffer_bytes") + np.where(staged, 2.0 * pick("received_bytes"), 0.0)
    index = np.array([i for i, _ in candidates])[best]
    single = n <= 1
    return CollectiveCost(time_s=np.where(single, 0.0, time_s), algorithm=np.where(single, -1, index),
                          link_bytes=np.where(single, 0.0, pick("link_bytes")),
                          nic_bytes=np.where(single, 0.0, pick("nic_bytes")), hbm_bytes=np.where(single, 0.0, hbm))


def collective_time_s(collective: str, message_bytes: np.ndarray | float, gpus: np.ndarray | float,
                      interconnect: InterconnectSpec, *, algorithm: str | None = None,
                      gpus_per_node: int | None = None) -> np.ndarray:
    """Seconds of ``collective`` (:func:`collective_cost`'s time)."""
    return collective_cost(collective, message_bytes, gpus, interconnect, algorithm=algorithm,
                           gpus_per_node=gpus_per_node).time_s


# ---------------------------------------------------------------------------------------------------------------
# The cost models' hook


@dataclass(frozen=True)
class CollectiveTerms:
    """What the interconnect adds to a graph's communication ops (arrays shaped like the work features)."""

    mask: np.ndarray
    """Per op: a communication op timed on the interconnect."""
    network_s: np.ndarray
    """The collective's time (0 for other ops)."""
    hbm_bytes: np.ndarray
    """The collective's own HBM traffic (the op's compulsory bytes elsewhere)."""
    hbm_s: np.ndarray
    """``hbm_bytes`` at the achievable main-memory bandwidth."""

    def memory(self, memory_s: np.ndarray, memory_bytes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The models' memory time and bytes with the communication ops' replaced by the collective's own."""
        return np.where(self.mask, self.hbm_s, memory_s), np.where(self.mask, self.hbm_bytes, memory_bytes)


#: Key of the communication ops' static facts in ``OpFeatures.plans``.
_COMMUNICATION = "(communication)"  # parenthesized: never an execution profile name


def _communication_ops(features: OpFeatures) -> tuple[np.ndarray, tuple[str, ...], np.ndarray, np.ndarray,
                                                     tuple[tuple[int, int] | None, ...]]:
    """Per op (one scan per graph): communication op?, its collective, its GPU count (``tp`` or ``gpus``),
    message bytes per activation byte (the op's ``message_bytes`` over its read + write bytes: both scale with
    the tokens, so the ratio holds for every work array a sweep or a decode sum gives the op) and, for a
    pipeline send, (stage index, GPUs per stage)."""
    cached = features.plans.get(_COMMUNICATION)
    if cached is None or len(cached[0]) != len(features.kinds):
        ops = features.ops
        mask = np.zeros(len(ops), dtype=bool)
        names = [""] * len(ops)
        gpus = np.ones(len(ops))
        ratio = np.zeros(len(ops))
        stages: list[tuple[int, int] | None] = [None] * len(ops)
        for i, op in enumerate(ops):
            collective = op.attr("collective")
            if op.kind != "communication" or not isinstance(collective, str):
                continue
            act = op.act_read_bytes + op.act_write_bytes
            n = op.attr("gpus", op.attr("tp", 1))
            message = op.attr("message_bytes", 0)
            if act <= 0 or not isinstance(n, int | float) or not isinstance(message, int | float):
                continue
            mask[i], names[i], gpus[i], ratio[i] = True, _name(collective), float(n), float(message) / act
            stage, stage_gpus = op.attr("pp_stage"), op.attr("stage_gpus")
            if isinstance(stage, int) and isinstance(stage_gpus, int):
                stages[i] = (stage, stage_gpus)
        cached = features.plans[_COMMUNICATION] = (mask, tuple(names), gpus, ratio, tuple(stages))
    return cached


def stage_send_crosses_node(stage: int, stage_gpus: int, domain_gpus: int | None) -> bool:
    """Whether a pipeline send from stage ``stage`` to the next leaves the NVLink domain for some device pair.

    Stages hold consecutive GPUs (stage ``s``: GPUs ``s·S`` to ``(s+1)·S − 1``, ``S = stage_gpus``), packed
    into domains of ``domain_gpus``; device ``r`` of a stage sends to device ``r`` of the next, ``S`` GPUs
    further on. The slowest pair sets the stage's time, so one crossing pair puts the send on the network."""
    if domain_gpus is None:
        return False
    start = stage * stage_gpus
    return any((start + r) // domain_gpus != (start + stage_gpus + r) // domain_gpus for r in range(stage_gpus))


def communication_terms(features: OpFeatures, hw: HardwareSpec) -> CollectiveTerms | None:
    """The collective time and HBM bytes of ``features``' communication ops on ``hw``'s interconnect, from
    their activation bytes (any leading work dimensions); None where ``hw`` has no interconnect or the graph
    no such op (the ops are then timed as local memory traffic, as before)."""
    if hw.interconnect is None or "communication" not in features.kinds or len(features.ops) != len(features.kinds):
        return None
    mask, names, gpus, ratio, stages = _communication_ops(features)
    if not mask.any():
        return None
    act = np.asarray(features.act_bytes, dtype=np.float64)
    network_s = np.zeros(act.shape)
    hbm = np.zeros(act.shape)
    domain = hw.interconnect.domain_gpus
    cross = [st is not None and stage_send_crosses_node(st[0], st[1], domain) for st in stages]
    for name in sorted(set(names) - {""}):
        for across in (False, True):
            sel = np.fromiter((x == name and c == across for x, c in zip(names, cross, strict=True)), dtype=bool,
                              count=len(names))
            if not sel.any():
                continue
            cost = collective_cost(name, act[..., sel] * ratio[sel], gpus[sel], hw.interconnect,
                                   gpus_per_node=1 if across else None)
            network_s[..., sel] = cost.time_s
            hbm[..., sel] = cost.hbm_bytes
    # a collective reads and writes at least the op's own bytes
    hbm = np.where(mask, np.maximum(hbm, act), 0.0)
    return CollectiveTerms(mask=mask, network_s=network_s, hbm_bytes=hbm,
                           hbm_s=hbm / hw.achievable_bandwidth_bytes_per_s())


def algorithm_work(algorithm: str, collective: str, message_bytes: float, gpus: int,
                   interconnect: InterconnectSpec) -> tuple[float, float, float]:
    """One GPU's work in ``algorithm`` at β = 1: (α steps, link bytes / link bandwidth, NIC bytes / NIC bandwidth),
    what ``hardware.collective_fit`` fits α and β on (:data:`~layerscope.hardware.collective_fit.AlgorithmWork`)."""
    algo = ALGORITHMS.lookup(algorithm)
    place = placement(np.array([float(gpus)]), interconnect)
    traffic = algo.traffic(_name(collective), np.array([float(message_bytes)]), place)
    nic_bw = interconnect.network.bandwidth_bytes_per_s if interconnect.network is not None else np.inf
    return (float(traffic.steps[0]), float(traffic.link_bytes[0]) / algo.link_bandwidth(interconnect),
            float(traffic.nic_bytes[0]) / nic_bw)
