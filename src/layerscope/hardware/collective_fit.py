"""Collective α-β terms fitted on the collective rows of the kernel table (``data/gpu-kernels.md``, CX and K rows).

Each row is one NCCL collective (all-reduce, all-gather, reduce-scatter) by message size and GPU count, or an
intra-node copy (CUDA P2P / copy-engine writes, the path of a send/recv). A row gives a time (µs) or a bus
bandwidth (GB/s); busbw is turned into a time with NCCL's factor (nccl-tests ``doc/PERFORMANCE.md``: algbw =
busbw / (2(n−1)/n) for all-reduce, busbw / ((n−1)/n) for all-gather and reduce-scatter, t = M / algbw), as the
rows' own notes do (CX-08: "D = 32768 B x 1.75 / busbw"). A row without a message size (CX-04…06, CX-21) is
an asymptotic bandwidth: it pins β alone.

The model is the cost model's own (:mod:`layerscope.cost.collectives`, handed in as an :data:`AlgorithmWork`: the
hardware layer does not import the cost layer): a row of message M over n GPUs takes
``steps · α + bytes / (β · B)`` (the whole NCCL call, its kernel's launch in α: a communication op costs at
least that, whatever the preset's ``launch_overhead_s``), with the algorithm's steps and bytes per GPU, and B
the link's datasheet bandwidth (the in-switch bandwidth for NVLS, the NIC's across nodes, where the slower of
NVLink and NIC binds). Per GPU, by grid search minimising the squared log time
error (α: 0 or 10 ns … 100 µs per step; β: 0.05 … 1):

* ``ring`` within the NVLink domain, on the rows NCCL ran as rings (every all-reduce, all-gather and
  reduce-scatter row but those whose notes name NVLS); ``tree`` takes ring's terms (same link and protocol;
  no row isolates it, and within a node NCCL's tree is a chain, never faster than the ring);
* ``nvls`` on the rows whose notes name NVLS (:data:`ROW_ALGORITHM`) and the NVLS values the notes give
  beside a ring row (:data:`NOTED`), on GPUs whose switch reduces;
* ``direct`` β on the P2P copy rows; its α is ring's;
* across nodes, one (α, β) of the network for ``ring`` and ``tree`` on the multi-node rows, each row timed as
  NCCL's tuner runs it (the faster of the two), NVLink at the domain's fitted ring β.

α needs a latency-bound row (under :data:`SHORT_ROW_S`), β a bandwidth-bound one (a message of at least
:data:`LARGE_MESSAGE_BYTES`, or an asymptotic row); a term the GPU's rows cannot pin comes from the first GPU
along :data:`NEAREST` whose rows do, and the source says so; with none, the link's ``latency_s`` and β = 1
(an assumption, said so). Rows tagged L are never fitted; a row faster than its link allows at β = 1 with no
latency is refused (:class:`~layerscope.errors.HardwareSpecError` naming it); rows the model cannot read are
listed in :data:`SKIPPED` with why.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from layerscope.errors import HardwareSpecError
from layerscope.hardware.kernel_fit import source_key
from layerscope.hardware.kernel_table import KernelRow
from layerscope.hardware.spec import HardwareSpec, InterconnectSpec
from layerscope.units import GIB, MIB

__all__ = [
    "NEAREST",
    "NOTED",
    "ROW_ALGORITHM",
    "SKIPPED",
    "AlgorithmWork",
    "CollectiveRow",
    "InterconnectFit",
    "TermsFit",
    "bus_factor",
    "collective_rows",
    "fit_interconnect",
    "row_target_s",
]

#: (algorithm, collective, message bytes, GPUs, interconnect) -> (α steps, link bytes / link bandwidth, NIC bytes /
#: NIC bandwidth): one GPU's work in an algorithm, at β = 1 (``cost.collectives.algorithm_work``).
AlgorithmWork = Callable[[str, str, float, int, InterconnectSpec], tuple[float, float, float]]

#: busbw / algbw per collective over n GPUs (nccl-tests ``doc/PERFORMANCE.md``).
_BUS_FACTORS: dict[str, Callable[[int], float]] = {
    "all_reduce": lambda n: 2.0 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
    "send_recv": lambda n: 1.0,
}


def bus_factor(collective: str, gpus: int) -> float:
    """NCCL's busbw / algbw: 2(n−1)/n for all-reduce, (n−1)/n for all-gather, reduce-scatter and all-to-all, 1 for
    send/recv (nccl-tests ``doc/PERFORMANCE.md``)."""
    return _BUS_FACTORS[collective](gpus)


#: Where a GPU's rows cannot pin a collective term, the GPU whose fit it takes, and why that one (the convention
#: of ``kernel_fit.NEAREST``, ordered here by the interconnect rather than the die).
NEAREST: dict[str, tuple[str, str]] = {
    "h100-sxm": ("h200", "the same NVLink4 and third-generation NVSwitch HGX board"),
    "h200": ("b200", "the next HGX generation (NVLink5 switch, one 400 Gb/s NIC per GPU)"),
    "b200": ("h100-sxm", "the previous HGX generation (NVSwitch with in-switch reduction, one 400 Gb/s NIC per GPU)"),
    "gh200": ("h100-sxm", "the same GH100 die and NVLink4"),
    "h100-pcie": ("h100-sxm", "the same GH100 die; no PCIe or NVLink-bridge collective rows"),
    "a100-sxm": ("h100-sxm", "the next NVIDIA HGX generation"),
    "a100-pcie": ("a100-sxm", "the same GA100 die; no PCIe collective rows"),
    "l40s": ("a100-sxm", "no PCIe-only GPU has collective rows: the closest NVIDIA GPU with rows"),
    "rtx-4090": ("a100-sxm", "no PCIe-only GPU has collective rows: the closest NVIDIA GPU with rows"),
    "mi300x": ("h200", "no AMD collective rows: an 8-GPU node of similar per-GPU link bandwidth"),
}

#: Rows whose notes name the algorithm NCCL ran (every other all-reduce/all-gather/reduce-scatter row is a
#: ring: the GPU has no in-switch reduction, the group is too small for it, or the notes say RING).
ROW_ALGORITHM: dict[str, tuple[str, str]] = {
    "CX-10": ("nvls", "notes: 'NVLS/SIMPLE from 2 MiB up (E)'"),
    "CX-11": ("nvls", "notes (CX-10): NVLS from 2 MiB up; busbw 436 is above the ring's 367 (CX-12)"),
    "CX-12": ("nvls", "value: 'E busbw with NVLS'"),
    "CX-15": ("nvls", "value: 'E NVLS'"),
    "CX-19": ("nvls", "4 GB on 8x H200, past NCCL's 2 MiB switch to NVLS (CX-10); busbw 465 is above any ring's"),
}


@dataclass(frozen=True)
class Noted:
    """A second measurement a row's notes give beside its value (the other algorithm, the other collective)."""

    row: str
    algorithm: str
    collective: str
    gpus: int
    message_bytes: float | None
    busbw_gbps: float
    quote: str
    """The notes' words, which must appear in the row's notes (tests/hardware/test_collective_fit.py)."""


#: The other measurements in the rows' notes, each as its row's notes write it.
NOTED: tuple[Noted, ...] = (
    Noted("CX-12", "ring", "all_reduce", 8, 16 * GIB, 367.61, "ring 367.61"),
    Noted("CX-13", "ring", "reduce_scatter", 8, 16 * GIB, 362.9, "reduce-scatter 362.9"),
    Noted("CX-14", "nvls", "all_reduce", 8, 8 * GIB, 473.1, "8 GPUs NVLS 473.1"),
    Noted("CX-14", "ring", "all_reduce", 8, 8 * GIB, 365.6, "ring 365.6"),
    Noted("CX-15", "ring", "all_reduce", 8, 8 * GIB, 682.2, "ring 682.2"),
    Noted("CX-21", "nvls", "all_reduce", 8, None, 480.0, "NVLS all-reduce peak busbw ~480"),
)

#: Collective rows the model does not read, and why.
SKIPPED: dict[str, str] = {
    "CX-07": "a host-to-device copy, no collective",
    "CX-20": "one 200 Gb/s EFA adapter of a node with several per GPU: a NIC's rate, not a GPU's",
    "CX-22": "an expected per-NIC rate, without a message size or GPU count",
    "CX-23": "nodes with 4 NICs for 8 GPUs (the preset has one per GPU), A100 40GB, busbw peak over 8 B-128 MiB",
    "CX-32": "GH200's NVLink-C2C host link, no collective",
}

#: A row this short pins α: at ~3 µs a step, 14 steps of an 8-GPU ring are >= 4 % of it.
SHORT_ROW_S = 1e-3
#: A message this large pins β (the α steps are under 1 % of its time).
LARGE_MESSAGE_BYTES = 64 * MIB
_GRID_ALPHA_S = np.concatenate(([0.0], np.geomspace(1e-8, 1e-4, 121)))
_GRID_BETA = np.round(np.linspace(0.05, 1.0, 191), 4)


@dataclass(frozen=True)
class CollectiveRow:
    """One collective measurement as the fit reads it."""

    id: str
    """The row id, with the noted algorithm or collective for a value from its notes (``CX-12 ring``)."""
    row: KernelRow
    gpu: str
    collective: str
    algorithm: str | None
    """The algorithm NCCL ran; None where the tuner chose (multi-node rows)."""
    gpus: int
    message_bytes: float | None
    """None for an asymptotic bandwidth row."""
    time_s: float | None
    busbw_bytes_per_s: float
    """NCCL's bus bandwidth of the row (for a timed row, from its time)."""

    @property
    def source(self) -> str:
        return source_key(self.row)

    @property
    def headline(self) -> bool:
        """Exact or derived (E/D) and not read off a figure or of low confidence."""
        return not ({"F", "L"} & self.row.tags) and bool({"E", "D"} & self.row.tags)


def collective_rows(rows: Iterable[KernelRow]) -> list[CollectiveRow]:
    """The collective rows of a preset GPU the model reads (module docstring), with the values their notes give
    (:data:`NOTED`); L-tagged rows, :data:`SKIPPED` ones and rows of no preset GPU left out."""
    out: list[CollectiveRow] = []
    by_id: dict[str, KernelRow] = {}
    for r in rows:
        by_id[r.id] = r
        if (r.kind != "collective" or r.gpu is None or r.value is None or "L" in r.tags or r.id in SKIPPED
                or r.collective is None or r.gpus is None):
            continue
        collective = "send_recv" if r.collective == "p2p_copy" else r.collective
        if collective not in ("all_reduce", "all_gather", "reduce_scatter", "send_recv"):
            continue
        algorithm = ROW_ALGORITHM.get(r.id, ("direct" if collective == "send_recv" else "ring", ""))[0]
        out.append(_row(r.id, r, collective, algorithm, r.gpus, r.message_bytes, r.value, r.unit))
    for note in NOTED:
        noted = by_id.get(note.row)
        if noted is None or noted.gpu is None or "L" in noted.tags:
            continue
        tag = note.algorithm if note.collective == noted.collective else note.collective.replace("_", "-")
        out.append(_row(f"{note.row} {tag}", noted, note.collective, note.algorithm, note.gpus, note.message_bytes,
                        note.busbw_gbps, "GBps"))
    return out


def _row(rid: str, r: KernelRow, collective: str, algorithm: str, gpus: int, message: float | None, value: float,
         unit: str) -> CollectiveRow:
    factor = bus_factor(collective, gpus)
    time_s: float | None
    if unit == "us":
        if message is None:
            raise HardwareSpecError(f"gpu-kernels.md:{r.line}: row {rid}: a collective time without a message size")
        time_s = value * 1e-6
        busbw = message / time_s * factor
    elif unit in ("GBps", "Gbps"):
        busbw = value * (1e9 if unit == "GBps" else 1e9 / 8)
        time_s = None if message is None else message * factor / busbw
    else:
        raise HardwareSpecError(f"gpu-kernels.md:{r.line}: row {rid}: a collective in {unit}, neither a time nor a "
                                "bandwidth")
    if algorithm != "ring" and algorithm != "nvls" and algorithm != "direct":
        raise HardwareSpecError(f"row {rid}: unknown algorithm {algorithm!r}")
    return CollectiveRow(rid, r, r.gpu or "", collective, algorithm, gpus, message, time_s, busbw)


# --------------------------------------------------------------------------------------------------------------
# The model of a row


@dataclass(frozen=True)
class _Work:
    """A row's work per candidate algorithm: α steps, NVLink (or switch) seconds per unit β, NIC seconds per unit
    β, and the target (seconds; for an asymptotic row, seconds per message byte with no α)."""

    steps: np.ndarray  # [candidates]
    link_s: np.ndarray
    nic_s: np.ndarray
    target_s: float


def _network_row(row: CollectiveRow, ic: InterconnectSpec) -> bool:
    return ic.domain_gpus is not None and row.gpus > ic.domain_gpus


def _work(row: CollectiveRow, spec: HardwareSpec, model: AlgorithmWork) -> _Work:
    ic = spec.interconnect
    assert ic is not None
    asymptotic = row.message_bytes is None
    m = 1.0 if asymptotic else float(row.message_bytes or 0.0)
    names = [row.algorithm] if row.algorithm and not _network_row(row, ic) else ["ring", "tree"]
    work = np.array([model(name, row.collective, m, row.gpus, ic) for name in names])
    steps = np.zeros(len(names)) if asymptotic else work[:, 0]
    target = bus_factor(row.collective, row.gpus) / row.busbw_bytes_per_s if asymptotic else float(row.time_s or 0.0)
    return _Work(steps, work[:, 1], work[:, 2], target)


def _predict(work: Sequence[_Work], alpha: np.ndarray, beta: np.ndarray, *, network: bool,
             link_beta: float) -> np.ndarray:
    """Predicted seconds of every row at every (α, β) of the broadcast grids: [..., rows]."""
    out = []
    for w in work:
        a = alpha[..., None]
        b = beta[..., None]
        bytes_s = np.maximum(w.link_s / link_beta, w.nic_s / b) if network else w.link_s / b
        t = w.steps * a + bytes_s
        out.append(t.min(axis=-1))
    return np.stack(out, axis=-1)


@dataclass(frozen=True)
class TermsFit:
    """α and β of one algorithm (group) on one GPU, with the rows behind them."""

    alpha_s: float
    beta: float
    rows: tuple[str, ...]
    alpha_from: str = ""
    """Empty when fitted on this GPU's rows, else where α came from."""
    beta_from: str = ""
    rms_log_error: float = 0.0
    copied: str = ""
    """Why these are another algorithm's terms (tree, direct); empty when fitted for this one."""

    def source(self, what: str) -> str:
        fitted = f"fitted on gpu-kernels.md rows {', '.join(self.rows)}" if self.rows else ""
        notes = [f"α: {self.alpha_from}" for _ in (1,) if self.alpha_from] + \
                [f"β: {self.beta_from}" for _ in (1,) if self.beta_from]
        head = f"{what}: α-β on the link (cost.collectives)" + (f", {self.copied}" if self.copied else "")
        body = "; ".join(x for x in (fitted, *notes) if x)
        rms = f"; RMS log time error {self.rms_log_error:.3f}" if self.rows else ""
        return f"{head}, {body}{rms}"


#: The fitted groups: (tier, algorithm); tree and the network's direct take ring's terms, direct's α ring's.
_GROUPS = (("link", "ring"), ("link", "nvls"), ("link", "direct"), ("network", "ring"))


def _group_rows(rows: Iterable[CollectiveRow], gpu: str, tier: str, algorithm: str,
                spec: HardwareSpec) -> list[CollectiveRow]:
    ic = spec.interconnect
    if ic is None:
        return []
    out = []
    for r in rows:
        if r.gpu != gpu:
            continue
        net = _network_row(r, ic)
        if (tier == "network" and net) or (tier == "link" and not net and r.algorithm == algorithm):
            out.append(r)
    return out


def _pins(rows: Sequence[CollectiveRow]) -> tuple[bool, bool]:
    """(pins α, pins β): a short timed row; a large or asymptotic one."""
    alpha = any(r.time_s is not None and r.time_s < SHORT_ROW_S for r in rows)
    beta = any(r.message_bytes is None or r.message_bytes >= LARGE_MESSAGE_BYTES for r in rows)
    return alpha, beta


def check_physical(rows: Sequence[CollectiveRow], spec: HardwareSpec, model: AlgorithmWork, *,
                   network: bool = False) -> None:
    """Refuse rows faster than the link allows: bytes at the full datasheet bandwidth (β = 1) and no latency
    taking longer than the row (naming every such row)."""
    bad = []
    for r in rows:
        w = _work(r, spec, model)
        bytes_s = float((np.maximum(w.link_s, w.nic_s) if network else w.link_s).min())
        if bytes_s > w.target_s * 1.0001:
            bad.append(f"{r.id} (busbw {r.busbw_bytes_per_s / 1e9:g} GB/s over {r.gpus} GPUs)")
    if bad:
        raise HardwareSpecError(f"{spec.name}: collective rows faster than the link allows at β = 1: "
                                f"{', '.join(bad)}; check the rows' GPU, GPU count and message size, or the "
                                "preset's interconnect bandwidth")


def _grid_fit(rows: Sequence[CollectiveRow], spec: HardwareSpec, model: AlgorithmWork, *, alpha: float | None,
              beta: float | None, network: bool, link_beta: float) -> tuple[float, float, float]:
    """(α, β, RMS log error) minimising the squared log time error of ``rows``; a given α or β is held."""
    check_physical(rows, spec, model, network=network)
    work = [_work(r, spec, model) for r in rows]
    grid_a = _GRID_ALPHA_S if alpha is None else np.array([alpha])
    grid_b = _GRID_BETA if beta is None else np.array([beta])
    a, b = np.meshgrid(grid_a, grid_b, indexing="ij")
    pred = _predict(work, a, b, network=network, link_beta=link_beta)
    target = np.array([w.target_s for w in work])
    loss = (np.log(pred / target) ** 2).sum(axis=-1)
    i = np.unravel_index(int(np.argmin(loss)), loss.shape)
    return float(a[i]), float(b[i]), float(np.sqrt(loss[i] / len(rows)))


@dataclass
class _Fitter:
    """Fits of every GPU's groups on one set of rows, each computed once (GPUs take terms along NEAREST)."""

    rows: list[CollectiveRow]
    specs: dict[str, HardwareSpec]
    model: AlgorithmWork
    memo: dict[tuple[str, str, str], TermsFit | None] = field(default_factory=dict)

    def own(self, gpu: str, tier: str, algorithm: str) -> list[CollectiveRow]:
        spec = self.specs.get(gpu)
        return [] if spec is None else _group_rows(self.rows, gpu, tier, algorithm, spec)

    def nearest(self, gpu: str, tier: str, algorithm: str, which: int) -> tuple[str, str] | None:
        """The first GPU along NEAREST (not ``gpu``) whose own rows pin α (which=0) or β (which=1), and why."""
        seen, step = {gpu}, NEAREST.get(gpu)
        while step is not None and step[0] not in seen:
            other, why = step
            if self.specs.get(other) is not None and _pins(self.own(other, tier, algorithm))[which]:
                return other, why
            seen.add(other)
            step = NEAREST.get(other)
        return None

    def fit(self, gpu: str, tier: str, algorithm: str) -> TermsFit | None:
        """The group's terms on ``gpu``: its rows, the NEAREST GPU's for what they cannot pin; None where neither
        this GPU nor any along NEAREST has rows of the group."""
        key = (gpu, tier, algorithm)
        if key in self.memo:
            return self.memo[key]
        self.memo[key] = None  # a cycle along NEAREST finds nothing
        spec = self.specs[gpu]
        own = self.own(gpu, tier, algorithm)
        pins = _pins(own)
        held: list[float | None] = [None, None]
        froms = ["", ""]
        for which in (0, 1):
            if pins[which]:
                continue
            near = self.nearest(gpu, tier, algorithm, which)
            other = self.fit(near[0], tier, algorithm) if near is not None else None
            if near is not None and other is not None:
                held[which] = other.alpha_s if which == 0 else other.beta
                froms[which] = f"{near[0]}'s fit ({near[1]})"
        if not own and held[0] is None and held[1] is None:
            return None
        if not own:
            result = TermsFit(alpha_s=_default(held[0], spec, tier, 0), beta=_default(held[1], spec, tier, 1),
                              rows=(), alpha_from=froms[0] or _no_rows(tier, 0),
                              beta_from=froms[1] or _no_rows(tier, 1))
        else:
            if held[0] is None and not pins[0]:
                held[0], froms[0] = _default(None, spec, tier, 0), _no_rows(tier, 0)
            if held[1] is None and not pins[1]:
                held[1], froms[1] = _default(None, spec, tier, 1), _no_rows(tier, 1)
            link_beta = 1.0
            if tier == "network":
                ring = self.fit(gpu, "link", "ring")
                link_beta = ring.beta if ring is not None else 1.0
            a, b, rms = _grid_fit(own, spec, self.model, alpha=held[0], beta=held[1], network=tier == "network",
                                  link_beta=link_beta)
            result = TermsFit(alpha_s=float(f"{a:.4g}"), beta=round(b, 4), rows=tuple(r.id for r in own),
                              alpha_from=froms[0], beta_from=froms[1], rms_log_error=rms)
        self.memo[key] = result
        return result


def _default(value: float | None, spec: HardwareSpec, tier: str, which: int) -> float:
    if value is not None:
        return value
    if which == 1:
        return 1.0
    ic = spec.interconnect
    assert ic is not None
    return ic.network.latency_s if tier == "network" and ic.network is not None else ic.latency_s


def _no_rows(tier: str, which: int) -> str:
    what = ("no latency-bound row (under 1 ms)", "no bandwidth-bound row (>= 64 MiB or asymptotic)")[which]
    return f"{what} here or along NEAREST: " + ("the link's latency_s (an assumption)" if which == 0
                                                 else "the datasheet bandwidth, β = 1 (an assumption)")


@dataclass(frozen=True)
class InterconnectFit:
    """A preset with its collective terms fitted, and the fits behind them by (tier, algorithm)."""

    spec: HardwareSpec
    terms: dict[tuple[str, str], TermsFit]


def fit_interconnect(base: HardwareSpec, rows: Sequence[KernelRow], presets: dict[str, HardwareSpec],
                     model: AlgorithmWork, *, exclude_sources: Iterable[str] = (),
                     collective: Sequence[CollectiveRow] | None = None) -> InterconnectFit:
    """``base`` with ``interconnect.algorithms`` (and ``interconnect.network.algorithms``) fitted on the collective
    rows (module docstring), leaving out ``exclude_sources``; ``presets`` are the other GPUs' specs (for the terms
    taken along :data:`NEAREST`); ``model`` is the cost model's work per algorithm
    (``cost.collectives.algorithm_work``). A spec without an interconnect is returned as it is."""
    ic = base.interconnect
    if ic is None:
        return InterconnectFit(base, {})
    excluded = set(exclude_sources)
    usable = [r for r in (collective if collective is not None else collective_rows(rows))
              if r.source not in excluded]
    fitter = _Fitter(usable, {**presets, base.name: base}, model)
    terms: dict[tuple[str, str], TermsFit] = {}
    for tier, algorithm in _GROUPS:
        if (tier == "network" and ic.network is None) or (algorithm == "nvls" and not ic.in_switch_reduction):
            continue
        fit = fitter.fit(base.name, tier, algorithm)
        if fit is not None:
            terms[(tier, algorithm)] = fit
    ring = terms.get(("link", "ring"))
    if ring is not None:
        terms[("link", "tree")] = replace(ring, copied="ring's terms: within a node NCCL's tree is a chain on the same "
                                                       "link and protocol, and no row isolates it")
        direct = terms.get(("link", "direct"))
        if direct is None:
            terms[("link", "direct")] = replace(ring, copied="ring's terms: no copy rows here or along NEAREST")
        else:
            terms[("link", "direct")] = replace(direct, alpha_s=ring.alpha_s, alpha_from="ring's (copy rows give no "
                                                                                          "latency)")
    net = terms.get(("network", "ring"))
    if net is not None:
        for name in ("tree", "direct"):
            terms[("network", name)] = replace(net, copied="the network ring's terms: no row isolates it (the "
                                                           "multi-node rows are timed as NCCL's tuner picks ring or "
                                                           "tree)")
    data = base.model_dump(mode="json", exclude={"calibration"})
    link = data["interconnect"]
    link["algorithms"] = {name: _entry(fit, name) for (tier, name), fit in sorted(terms.items()) if tier == "link"}
    if link.get("network") is not None:
        link["network"]["algorithms"] = {name: _entry(fit, f"{name} across nodes")
                                         for (tier, name), fit in sorted(terms.items()) if tier == "network"}
    spec = HardwareSpec.from_dict(data, origin=f"{base.name} collectives fitted on gpu-kernels.md")
    return InterconnectFit(spec, terms)


def _entry(fit: TermsFit, name: str) -> dict[str, object]:
    return {"alpha_s": fit.alpha_s, "bandwidth_fraction": fit.beta, "source": fit.source(name)}


def row_target_s(row: CollectiveRow) -> float:
    """What the replay compares a prediction with: the row's time, or seconds per message byte."""
    if row.message_bytes is None:
        return bus_factor(row.collective, row.gpus) / row.busbw_bytes_per_s
    return float(row.time_s or 0.0)


_ID_RE = re.compile(r"^([A-Z]+-\d+)")


def row_id(row: CollectiveRow) -> str:
    """The table row's own id (``CX-12`` for ``CX-12 ring``)."""
    match = _ID_RE.match(row.id)
    return match.group(1) if match else row.id
