"""Read the published GPU kernel measurement table into typed :class:`KernelRow` records.

The table is ``layerscope/data/gpu-kernels.md`` (a byte-identical copy of ``shared/data/gpu-kernels.md``):
markdown tables with the columns ``id | source | hardware | model | precision | framework | batch |
input_len | output_len | parallelism | metric | value | notes`` under several headings, one row per
published kernel-level number (GEMMs by shape, memory-bound kernels, attention, collectives,
overheads, power), each citing its source (keys S4…S32, T1…T27 in the file). This module only parses
and normalizes: integers out of the length cells, the value (with ``~`` approximations and ``a–b``
ranges), the unit, the confidence tags, the row's kind, the GEMM shape, the collective and its
message size, and the layerscope preset the hardware cell names. Fitting presets on the rows is
:mod:`layerscope.hardware.kernel_fit`'s job.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from layerscope.errors import HardwareSpecError
from layerscope.units import GB, GIB, KB, KIB, MB, MIB, quote

__all__ = ["COLUMNS", "AttentionShape", "GemmShape", "KernelRow", "default_table_path", "read_kernel_table"]

Kind = Literal["gemm", "memory", "attention", "collective", "overhead", "power", "other"]
Unit = Literal["TFLOPS", "GBps", "Gbps", "us", "ms", "%", "W", "MHz"]
Collective = Literal["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv", "p2p_copy"]

#: The header every measurement table of the file has, in order.
COLUMNS = (
    "id", "source", "hardware", "model", "precision", "framework", "batch",
    "input_len", "output_len", "parallelism", "metric", "value", "notes",
)
#: Cells that mean "not given".
#: Metric cell -> normalized unit; a metric outside this table is an error.
_UNITS: dict[str, Unit] = {
    "TFLOPS": "TFLOPS", "GBps": "GBps", "GB/s": "GBps", "Gbps": "Gbps", "Gb/s": "Gbps",
    "us": "us", "µs": "us", "μs": "us", "ms": "ms", "%": "%", "W": "W", "MHz": "MHz",
}
#: Confidence tags the file defines (E exact, D derived, F read off a figure, L low confidence).
_TAG_RE = re.compile(r"^([EDFL])\b")
_SOURCE_LOW_CONFIDENCE = "(L)"

_SEPARATOR_RE = re.compile(r"^\|(?:\s*:?-+:?\s*\|)+$")
_INT = r"\d{1,3}(?:,\d{3})+|\d+"
_NUMBER = rf"(?:{_INT})(?:\.\d+)?"
_INT_RE = re.compile(rf"^({_INT})$")
_KV_RE = re.compile(rf"^KV\s+({_INT})$")
#: A value cell: optional ``~``/``≈``, a number, optionally ``–``/``-`` and a second number.
_VALUE_RE = re.compile(rf"^(?P<approx>[~≈])?\s*(?P<low>{_NUMBER})(?:\s*[–-]\s*(?P<high>{_NUMBER}))?(?P<pct>\s*%)?$")


@dataclass(frozen=True, slots=True)
class GemmShape:
    """A GEMM ``C[M, N] = A[M, K] @ B[K, N]``, ``groups`` times (grouped MoE GEMMs)."""

    m: int
    n: int
    k: int
    groups: int = 1


@dataclass(frozen=True, slots=True)
class AttentionShape:
    """The heads of an attention row, what it ran (prefill or decode) and whether it was causal.

    ``kv_heads`` equals ``heads`` where the row names no grouping (MHA); ``latent`` is True for MLA decode
    rows, whose cache holds one latent of ``head_dim`` elements per token and KV head that serves as both K
    and V (DeepSeek-V2, arXiv 2405.04434 §2.1); ``causal`` is None where the row does not say.
    """

    heads: int | None
    kv_heads: int | None
    head_dim: int | None
    decode: bool
    causal: bool | None
    latent: bool = False
    value_dim: int | None = None
    """Elements per head of the output where they differ from ``head_dim`` (MLA: 512 of a 576 latent)."""


@dataclass(frozen=True, slots=True)
class RowShape:
    """A row-reduction kernel's input (softmax, a norm): ``rows`` rows of ``cols`` elements of ``element_bytes``,
    each row owned by a ``cluster`` of engines (QuACK's thread-block clusters; 1 for one block per row)."""

    rows: int
    cols: int
    element_bytes: int
    cluster: int = 1

    @property
    def row_bytes(self) -> int:
        return self.cols * self.element_bytes

    @property
    def nbytes(self) -> int:
        return self.rows * self.row_bytes


@dataclass(frozen=True, slots=True)
class KernelRow:
    """One measurement row: the raw cells (stripped) and what layerscope reads out of them."""

    id: str
    line: int
    """1-based line of the row in the file."""
    source: str
    hardware: str
    description: str
    """The ``model`` column: what was run (a GEMM shape, a kernel, a collective)."""
    precision: str
    framework: str
    parallelism: str
    metric: str
    notes: str
    batch_text: str
    input_text: str
    output_text: str
    batch: int | None
    kv_len: int | None
    """Cached KV length, from an ``input_len`` cell written ``KV 65536``."""
    input_len: int | None
    output_len: int | None
    value: float | None
    """The number in :attr:`unit`; the midpoint of a range; None when the cell is qualitative."""
    value_low: float | None
    value_high: float | None
    approximate: bool
    """The value was written ``~x`` or ``≈x``."""
    unit: Unit
    tags: frozenset[str]
    """Confidence tags: the leading E/D/F/L of ``notes``, plus L when the source is marked ``(L)``."""
    kind: Kind
    gemm: GemmShape | None
    gpu: str | None
    """The layerscope preset the hardware cell names; None when no preset fits or several GPUs are named."""
    gpus: int | None
    """GPUs the measurement spans, from ``parallelism`` or a ``8x A100`` hardware prefix."""
    message_bytes: float | None
    """Message size of a collective row, in bytes."""
    collective: Collective | None
    attention: AttentionShape | None = None
    """Heads, head dim, phase and causality of an attention row (None for other kinds)."""
    proxy_of: str = ""
    """The part actually measured when :attr:`gpu` stands in for it (``H800`` for h100-sxm)."""
    variant_stated: bool = True
    """False when the cell does not say which form factor (SXM/PCIe/NVL) of a multi-variant part ran."""
    qualitative: str = ""
    """The value cell's text when it holds no number (``≈100 % of peak BW at long seq``)."""
    row_shape: RowShape | None = None
    """Rows and columns of a softmax or norm row (None for other kinds, or without a full shape)."""


@dataclass(frozen=True, slots=True)
class _GpuRule:
    """Hardware cells matching ``pattern`` name ``preset`` (None: a part with no preset)."""

    pattern: re.Pattern[str]
    preset: str | None
    proxy_of: str = ""
    has_variants: bool = False
    """The part ships in several form factors, so the cell must say which."""
    not_for_kinds: frozenset[str] = frozenset()
    """Row kinds for which the proxy does not hold (H800's NVLink is cut, so no collective rows)."""


#: First match wins, so specific names come before the families that contain them.
_GPU_RULES: tuple[_GpuRule, ...] = (
    # The file: "H800 SXM5 = H100 SXM compute and HBM3 ... with NVLink cut to 400 GB/s ...
    # used here as an H100-SXM proxy for compute/HBM rows only, never for NVLink rows".
    _GpuRule(re.compile(r"\bH800\b"), "h100-sxm", "H800", has_variants=True, not_for_kinds=frozenset({"collective"})),
    _GpuRule(re.compile(r"\bH100 NVL\b"), None),
    _GpuRule(re.compile(r"\bH100\b.*\bPCIe\b"), "h100-pcie"),
    _GpuRule(re.compile(r"\bH100\b"), "h100-sxm", has_variants=True),
    _GpuRule(re.compile(r"\bGH200\b"), "gh200"),
    _GpuRule(re.compile(r"\bH200 NVL\b"), None),
    _GpuRule(re.compile(r"\bH200\b"), "h200", has_variants=True),
    # The presets are the 80 GB parts; a 40 GB A100 has less HBM bandwidth (1,555 vs 1,935/2,039 GB/s).
    _GpuRule(re.compile(r"\bA100\b.*\bPCIe\b.*\b40\s?GB"), "a100-pcie", "A100 40GB"),
    _GpuRule(re.compile(r"\bA100\b.*\b40\s?GB"), "a100-sxm", "A100 40GB", has_variants=True),
    _GpuRule(re.compile(r"\bA100\b.*\bPCIe\b"), "a100-pcie"),
    _GpuRule(re.compile(r"\bA100\b"), "a100-sxm", has_variants=True),
    _GpuRule(re.compile(r"\bB200\b"), "b200"),
    _GpuRule(re.compile(r"\bL40S\b"), "l40s"),
    _GpuRule(re.compile(r"\bMI300X\b"), "mi300x"),
    _GpuRule(re.compile(r"\bRTX 4090\b"), "rtx-4090"),
)
#: A GPU part name (A100, GH200, MI300X, L40S, SM100, RTX 4090); two distinct ones mean a multi-GPU cell.
_GPU_NAME_RE = re.compile(r"\b(?:[A-Z]{1,3}\d{2,3}[A-Z]?|RTX \d{4})\b")
_PARENTHESES_RE = re.compile(r"\([^()]*\)")
#: Says which form factor ran: ``80GB HBM3`` is the H100 SXM's nvidia-smi name.
_VARIANT_RE = re.compile(r"SXM|PCIe|\bNVL\b|NVSwitch|DGX|HGX|80\s?GB HBM3")
_VARIANT_NOT_STATED_RE = re.compile(r"\bn/s\b|not stated")

#: ``parallelism`` cell -> GPU count: ``8 GPUs``, ``EP 8x2``, ``TP4``, ``EP16 (2 nodes)``.
_PARALLEL_RULES: tuple[tuple[re.Pattern[str], Callable[[re.Match[str]], int]], ...] = (
    (re.compile(r"^(\d+)\s*GPUs?\b"), lambda m: int(m[1])),
    (re.compile(r"^(?:TP|EP|PP|DP)\s*(\d+)\s*[x×]\s*(\d+)"), lambda m: int(m[1]) * int(m[2])),
    (re.compile(r"^(?:TP|EP|PP|DP)\s*(\d+)"), lambda m: int(m[1])),
)
#: Hardware prefix ``8x A100``, ``4×A100``, ``4 nodes x 8 B200``.
_HARDWARE_COUNT_RE = re.compile(r"^(?:(\d+)\s*nodes?\s*[x×]\s*)?(\d+)\s*[x×]\s*(?=[A-Z]+\d)")

#: Description keywords -> collective, searched together so the leftmost one names the row's
#: collective (``all-gather / reduce-scatter 16 GiB`` is an all-gather row). Intra-node GPU-to-GPU
#: copies (CUDA P2P writes, copy-engine memcpy) are ``p2p_copy``; an inter-node point-to-point RDMA
#: write is ``send_recv``, the path a cross-node NCCL send/recv rides on. Host<->device copies are
#: no collective.
_COLLECTIVE_PATTERNS: dict[Collective, str] = {
    "all_reduce": r"all-?reduce",
    "all_gather": r"all-?gather",
    "reduce_scatter": r"reduce-?scatter",
    "all_to_all": r"dispatch|combine|all-?to-?all",
    "p2p_copy": r"\bP2P\b|device-to-device",
    "send_recv": r"RDMA write|point-to-point|send/?recv",
}
_COLLECTIVE_RE = re.compile("|".join(f"(?P<{name}>{p})" for name, p in _COLLECTIVE_PATTERNS.items()), re.IGNORECASE)
_COLLECTIVE_NAMES: dict[str, Collective] = {name: name for name in _COLLECTIVE_PATTERNS}
_SIZE_UNITS = {"B": 1, "KB": KB, "MB": MB, "GB": GB, "KiB": KIB, "MiB": MIB, "GiB": GIB}
_SIZE_RE = re.compile(r"(?P<num>\d+(?:\.\d+)?)\s*(?P<unit>[KMG]i?B|B)\b(?P<range>\s*[–-]\s*\d)?")

_GEMM_DIMS_RE = re.compile(r"((?:\b[MNK]\s*=\s*)+)(\d+)")
#: mamf-finder prints the best shape as MxNxK.
_GEMM_MNK_RE = re.compile(r"\b(\d+)\s*[x×]\s*(\d+)\s*[x×]\s*(\d+)\b")
_GEMM_GROUPS_RE = re.compile(r"\b(\d+)\s+groups?\s*[x×]")

#: G/K description keywords -> kind, first match wins.
_GEMM_KEYWORDS = re.compile(r"GEMM")
_MEMORY_KEYWORDS = re.compile(r"softmax|layer\s?norm|rms\s?norm|\brope\b|stream|copy", re.IGNORECASE)
_ATTENTION_KEYWORDS = re.compile(r"attention|\bGQA\b", re.IGNORECASE)
_ALL_REDUCE_KEYWORDS = re.compile(r"all-?reduce", re.IGNORECASE)
#: A row continuing the one above: ``same``, ``same, h_q=64``, or a bare ``(B,H,S,D)`` tuple.
_CONTINUATION_RE = re.compile(r"^(?:same\b|\(\d+(?:\s*,\s*\d+)+\)$)", re.IGNORECASE)


def default_table_path() -> Path:
    """The bundled table, ``layerscope/data/gpu-kernels.md``."""
    return Path(__file__).resolve().parent.parent / "data" / "gpu-kernels.md"


def own_table_path() -> Path:
    """Our own kernel measurements in the table's format, ``layerscope/data/own-kernels.md``: rows the preset fit
    reads only where no published row of a kind exists (:mod:`layerscope.hardware.kernel_fit`)."""
    return default_table_path().with_name("own-kernels.md")


def read_kernel_table(path: Path | str | None = None) -> list[KernelRow]:
    """Every measurement row of ``path`` (None: the bundled table), in file order.

    Raises :class:`HardwareSpecError` (``file:line: row ID: ...``) for a row with the wrong number of
    cells, an empty or duplicate id, a metric that is no known unit or an inverted value range, and
    for a file that cannot be read or has no rows.
    """
    table = Path(path) if path is not None else default_table_path()
    try:
        text = table.read_text(encoding="utf-8")
    except (OSError, UnicodeError) as exc:
        raise HardwareSpecError(f"{table}: cannot read the GPU kernel table: {exc}") from None
    rows: list[KernelRow] = []
    first_line: dict[str, int] = {}
    for line, cells in _table_rows(table, text):
        row = _parse_row(table, line, cells, rows[-1] if rows else None)
        if row.id in first_line:
            raise HardwareSpecError(f"{table}:{line}: row {row.id}: duplicate id (first on line {first_line[row.id]})")
        first_line[row.id] = line
        rows.append(row)
    if not rows:
        raise HardwareSpecError(f"{table}: no measurement rows (no table with the header | {' | '.join(COLUMNS)} |)")
    return rows


def _table_rows(table: Path, text: str) -> Iterator[tuple[int, list[str]]]:
    """(line, cells) of every data row of every table headed by :data:`COLUMNS`."""
    in_table = False
    for line, raw in enumerate(text.splitlines(), start=1):
        stripped = raw.strip()
        if not stripped.startswith("|"):
            in_table = False
            continue
        cells = _split_cells(stripped)
        if cells and cells[0] == COLUMNS[0]:
            if tuple(cells) != COLUMNS:
                raise HardwareSpecError(
                    f"{table}:{line}: table header has columns {cells}, expected {list(COLUMNS)}")
            in_table = True
        elif in_table and not _SEPARATOR_RE.match(stripped.replace(" ", "")):
            if len(cells) != len(COLUMNS):
                name = f"row {cells[0]}" if cells and cells[0] else "row"
                raise HardwareSpecError(
                    f"{table}:{line}: {name}: has {len(cells)} cells, the header has {len(COLUMNS)}")
            yield line, cells


def _split_cells(stripped: str) -> list[str]:
    """The stripped cells of a ``| a | b |`` line."""
    inner = stripped[1:-1] if stripped.endswith("|") and len(stripped) > 1 else stripped[1:]
    return [cell.strip() for cell in inner.split("|")]


def _parse_row(table: Path, line: int, cells: list[str], previous: KernelRow | None) -> KernelRow:
    """One :class:`KernelRow` out of the 13 cells of ``line``."""
    (row_id, source, hardware, description, precision, framework, batch_text, input_text, output_text,
     parallelism, metric, value_text, notes) = cells
    where = f"{table}:{line}: row {row_id}"
    if not row_id:
        raise HardwareSpecError(f"{table}:{line}: row with an empty id")
    unit = _UNITS.get(metric)
    if unit is None:
        raise HardwareSpecError(f"{where}: metric {quote(metric)} is no unit; known: {', '.join(sorted(_UNITS))}")
    value, low, high, approximate = _parse_value(value_text, unit, where)
    # "same" rows (K-04…K-07, CX-28) are of the kind, and run the collective, of the row above.
    above = _continued(row_id, description, previous)
    kind = above.kind if above else _row_kind(row_id, description, unit)
    gpu, proxy_of, variant_stated = _gpu_preset(hardware, kind)
    collective, message_bytes = None, None
    if kind == "collective":
        collective = _collective(description) or (above.collective if above else None)
        message_bytes = _message_bytes(description) or (above.message_bytes if above else None)
    kv_len = _kv_len(input_text)
    attention = None
    if kind == "attention":
        attention = _attention_shape(f"{description} {source}", above.attention if above else None)
    return KernelRow(
        id=row_id, line=line, source=source, hardware=hardware, description=description, precision=precision,
        framework=framework, parallelism=parallelism, metric=metric, notes=notes,
        batch_text=batch_text, input_text=input_text, output_text=output_text,
        batch=_int_cell(batch_text), kv_len=kv_len, input_len=None if kv_len is not None else _int_cell(input_text),
        output_len=_int_cell(output_text),
        value=value, value_low=low, value_high=high, approximate=approximate, unit=unit,
        tags=_tags(source, notes), kind=kind, gemm=_gemm_shape(description) if kind == "gemm" else None,
        gpu=gpu, gpus=_gpu_count(parallelism, hardware),
        message_bytes=message_bytes, collective=collective, attention=attention,
        proxy_of=proxy_of, variant_stated=variant_stated,
        qualitative=value_text if value is None else "",
        row_shape=_row_shape(description, precision, framework) if kind == "memory" else None,
    )


#: A row reduction, as the memory rows name one: ``softmax``, ``layernorm``, ``RMSNorm`` (``residual-add +
#: RMSNorm`` too); not RoPE, copies or streaming benchmarks.
_ROW_KERNEL_RE = re.compile(r"^\s*(?:residual-add\s*\+\s*)?(softmax|layer\s*norm|rms\s*norm)\b", re.IGNORECASE)
#: ``16K rows x 131K cols``, ``16K-32K rows x 262K cols``, ``16K x 65K``.
_ROWS_X_COLS_RE = re.compile(r"(\d+)(K?)(?:-\d+K?)?\s*(?:rows\s*)?x\s*(\d+)(K?)\b")
#: ``M=32768, N=4096``, ``M=2048, H=32768``, ``M=N=4096``.
_M_RE = re.compile(r"\bM\s*=\s*(?:N\s*=\s*)?(\d+)")
_N_RE = re.compile(r"\b[NH]\s*=\s*(\d+)")
_CLUSTER_RE = re.compile(r"cluster size\s*(\d+)", re.IGNORECASE)
_ELEMENT_BYTES = (("fp32", 4), ("bf16", 2), ("fp16", 2))


def _thousands(number: str, k: str) -> int:
    """``131`` ``K`` -> 131072: a K-suffixed size is the power of two it rounds (131K, 262K, 65K columns), or
    ×1024 when none is within 5 %."""
    if not k:
        return int(number)
    n = int(number) * 1000
    power = 1 << round(math.log2(n))
    return power if abs(power - n) <= 0.05 * n else int(number) * 1024


def _row_shape(description: str, precision: str, framework: str) -> RowShape | None:
    """The rows and columns of a softmax/norm row, its element size and the engines per row; None when the row
    is another kernel or does not give both dimensions and one dtype."""
    if not _ROW_KERNEL_RE.search(description):
        return None
    words = precision.lower()
    element = next((b for name, b in _ELEMENT_BYTES if name in words), None)
    if element is None or (" and " in words):
        return None
    cluster = int(m[1]) if (m := _CLUSTER_RE.search(framework)) else 1
    if match := _ROWS_X_COLS_RE.search(description):
        return RowShape(_thousands(match[1], match[2]), _thousands(match[3], match[4]), element, cluster)
    rows, cols = _M_RE.search(description), _N_RE.search(description)
    if rows is None:
        return None
    if cols is None:  # M=N=4096
        return RowShape(int(rows[1]), int(rows[1]), element, cluster) if "M=N=" in description.replace(" ", "") \
            else None
    return RowShape(int(rows[1]), int(cols[1]), element, cluster)


def _int_cell(text: str) -> int | None:
    """``1024`` or ``4,096`` as an int; None for ``–``, ranges and text."""
    match = _INT_RE.match(text)
    return int(match[1].replace(",", "")) if match else None


def _kv_len(text: str) -> int | None:
    """The cached length of an ``input_len`` cell written ``KV 3072``."""
    match = _KV_RE.match(text)
    return int(match[1].replace(",", "")) if match else None


def _number(text: str) -> float:
    return float(text.replace(",", ""))


def _parse_value(text: str, unit: Unit, where: str) -> tuple[float | None, float | None, float | None, bool]:
    """(value, low, high, approximate) of a value cell; all None when the cell is qualitative (words around
    numbers: ``≈100 % of peak BW``, ``300 / 600``). A cell with no number at all (``abc``, ``–``) cannot be
    parsed, and is an error naming the row."""
    if not any(c.isdigit() for c in text):
        raise HardwareSpecError(f"{where}: value {quote(text)} has no number")
    match = _VALUE_RE.match(text)
    # A "%" in the cell of a non-% metric is a share of a peak, not a value in the metric's unit.
    if match is None or (match["pct"] and unit != "%"):
        return None, None, None, False
    low = _number(match["low"])
    if match["high"] is None:
        return low, None, None, match["approx"] is not None
    high = _number(match["high"])
    if high < low:
        raise HardwareSpecError(f"{where}: value range {quote(text)} runs downward")
    return (low + high) / 2, low, high, match["approx"] is not None


def _tags(source: str, notes: str) -> frozenset[str]:
    """Leading E/D/F/L tag of the notes, plus L for a source marked ``(L)``."""
    tags = set()
    if match := _TAG_RE.match(notes):
        tags.add(match[1])
    if _SOURCE_LOW_CONFIDENCE in source:
        tags.add("L")
    return frozenset(tags)


def _gemm_table_kind(description: str, unit: Unit) -> Kind:
    """Kind of a G-/GX-row: most are GEMMs, a few are memory-bound kernels measured alongside."""
    if _GEMM_KEYWORDS.search(description) or _gemm_shape(description) is not None:
        return "gemm"
    if _MEMORY_KEYWORDS.search(description):
        return "memory"
    # A whole decode step reported in GB/s is weight streaming (G-29, G-30).
    if re.search(r"\bdecode\b", description) and unit == "GBps":
        return "memory"
    return "other"


def _mixed_table_kind(description: str, unit: Unit) -> Kind:
    """Kind of a K-row: attention kernels, GEMMs and all-reduces share that table."""
    if _ATTENTION_KEYWORDS.search(description):
        return "attention"
    if _ALL_REDUCE_KEYWORDS.search(description):
        return "collective"
    if _GEMM_KEYWORDS.search(description):
        return "gemm"
    return "other"


def _described_kind(description: str, unit: Unit) -> Kind:
    """Kind of a row whose id prefix is not one of the bundled table's (a user's own table): read from the
    description alone, GEMMs and memory-bound kernels first, then attention and all-reduces."""
    kind = _gemm_table_kind(description, unit)
    return kind if kind != "other" else _mixed_table_kind(description, unit)


def _fixed(kind: Kind) -> Callable[[str, Unit], Kind]:
    return lambda description, unit: kind


#: Id prefix -> how the kind of its rows is decided; an unknown prefix is read from the description.
_KIND_BY_PREFIX: dict[str, Callable[[str, Unit], Kind]] = {
    "G": _gemm_table_kind, "GX": _gemm_table_kind, "K": _mixed_table_kind,
    "MX": _fixed("memory"), "AX": _fixed("attention"), "CX": _fixed("collective"),
    "OX": _fixed("overhead"), "PX": _fixed("power"),
}


def _prefix(row_id: str) -> str:
    return row_id.split("-", 1)[0]


def _continued(row_id: str, description: str, previous: KernelRow | None) -> KernelRow | None:
    """The row above when this row's description continues it (``same``, ``(8,16,2048,128)``)."""
    if previous is not None and _prefix(previous.id) == _prefix(row_id) and _CONTINUATION_RE.match(description):
        return previous
    return None


def _row_kind(row_id: str, description: str, unit: Unit) -> Kind:
    """The kind of a row from its id prefix and, in mixed tables, its description."""
    return _KIND_BY_PREFIX.get(_prefix(row_id), _described_kind)(description, unit)


def _gemm_shape(description: str) -> GemmShape | None:
    """M, N, K (and groups) of a GEMM description; None when it gives no full shape."""
    dims: dict[str, int] = {}
    for letters, size in _GEMM_DIMS_RE.findall(description):
        for letter in re.findall(r"[MNK]", letters):
            dims[letter] = int(size)
    if len(dims) < 3:
        mnk = _GEMM_MNK_RE.search(description)
        if mnk is None:
            return None
        dims = {"M": int(mnk[1]), "N": int(mnk[2]), "K": int(mnk[3])}
    groups = _GEMM_GROUPS_RE.search(description)
    return GemmShape(dims["M"], dims["N"], dims["K"], int(groups[1]) if groups else 1)


#: Attention head counts and sizes as the rows write them: ``16 q-heads, 2 kv-heads``, ``64 q / 8 kv``,
#: ``h_q=16, h_kv=1, d=576/dv=512``, ``hdim 128``, ``(B,H,S,D)=(1,16,16384,128)``, ``H·D=2048``.
_HEADS_RES = (re.compile(r"\b(\d+)\s*q-heads"), re.compile(r"\b(\d+)\s*q\s*/"), re.compile(r"\bh_q\s*=\s*(\d+)"),
              re.compile(r"\b(\d+)\s+heads\b"))
_KV_HEADS_RES = (re.compile(r"\b(\d+)\s*kv-heads"), re.compile(r"/\s*(\d+)\s*kv\b"), re.compile(r"\bh_kv\s*=\s*(\d+)"))
_HEAD_DIM_RES = (re.compile(r"\bhdim\s*(\d+)"), re.compile(r"\bhead_dim(?:_k)?\s*(\d+)"),
                 re.compile(r"\bd\s*=\s*(\d+)"))
_VALUE_DIM_RE = re.compile(r"\bdv\s*=\s*(\d+)")
_BHSD_RE = re.compile(r"\(\s*(\d+)\s*,\s*(\d+)\s*,\s*(\d+)\s*,\s*(\d+)\s*\)")
_HD_PRODUCT_RE = re.compile(r"\bH\s*[·*x×]\s*D\s*=\s*(\d+)")
_NON_CAUSAL_RE = re.compile(r"non-causal", re.IGNORECASE)
_CAUSAL_RE = re.compile(r"\bcausal\b", re.IGNORECASE)
_DECODE_RE = re.compile(r"\bdecode\b", re.IGNORECASE)
_MLA_RE = re.compile(r"\bMLA\b")


def _first_int(patterns: tuple[re.Pattern[str], ...], text: str) -> int | None:
    for pattern in patterns:
        if match := pattern.search(text):
            return int(match[1])
    return None


def _attention_shape(text: str, above: AttentionShape | None) -> AttentionShape:
    """The :class:`AttentionShape` a description (and its source cell, which names a figure's causal panel)
    gives; what it leaves out comes from the row it continues (``same, h_q=64``)."""
    heads = _first_int(_HEADS_RES, text)
    head_dim = _first_int(_HEAD_DIM_RES, text)
    if bhsd := _BHSD_RE.search(text):
        heads, head_dim = int(bhsd[2]), int(bhsd[4])
    if heads is None and head_dim and (product := _HD_PRODUCT_RE.search(text)):
        heads = int(product[1]) // head_dim
    kv_heads = _first_int(_KV_HEADS_RES, text)
    value_dim = (int(vd[1]) if (vd := _VALUE_DIM_RE.search(text)) else None)
    causal = False if _NON_CAUSAL_RE.search(text) else (True if _CAUSAL_RE.search(text) else None)
    if above is not None:
        heads = heads if heads is not None else above.heads
        head_dim = head_dim if head_dim is not None else above.head_dim
        kv_heads = kv_heads if kv_heads is not None else above.kv_heads
        value_dim = value_dim if value_dim is not None else above.value_dim
        causal = causal if causal is not None else above.causal
    decode = bool(_DECODE_RE.search(text)) or (above is not None and above.decode)
    latent = bool(_MLA_RE.search(text)) or (above is not None and above.latent)
    if kv_heads is None and heads is not None and not latent:
        kv_heads = heads  # no grouping named: multi-head attention
    return AttentionShape(heads=heads, kv_heads=kv_heads, head_dim=head_dim, decode=decode, causal=causal,
                          latent=latent, value_dim=value_dim)


def _gpu_preset(hardware: str, kind: Kind) -> tuple[str | None, str, bool]:
    """(preset, proxy_of, variant_stated) of a hardware cell; no preset when it names several GPUs."""
    not_stated = _VARIANT_NOT_STATED_RE.search(hardware) is not None
    names = set(_GPU_NAME_RE.findall(_PARENTHESES_RE.sub("", hardware)))
    if len(names) > 1:
        return None, "", not not_stated
    for rule in _GPU_RULES:
        if rule.pattern.search(hardware):
            if kind in rule.not_for_kinds:
                return None, "", not not_stated
            stated = not not_stated and (not rule.has_variants or _VARIANT_RE.search(hardware) is not None)
            return rule.preset, rule.proxy_of, stated
    return None, "", not not_stated


def _gpu_count(parallelism: str, hardware: str) -> int | None:
    """GPUs involved: from the parallelism cell, else from a ``8x A100`` hardware prefix."""
    for pattern, count in _PARALLEL_RULES:
        if match := pattern.match(parallelism):
            return count(match)
    if match := _HARDWARE_COUNT_RE.match(hardware):
        return int(match[2]) * (int(match[1]) if match[1] else 1)
    return None


def _collective(description: str) -> Collective | None:
    """The collective a description names first; None for host<->device copies and unnamed ones."""
    match = _COLLECTIVE_RE.search(description)
    return _COLLECTIVE_NAMES.get(match.lastgroup or "") if match else None


def _message_bytes(description: str) -> float | None:
    """First message size in a collective description (KiB = 1024 B, KB = 1000 B); None for a size range."""
    match = _SIZE_RE.search(description)
    if match is None or match["range"]:
        return None
    return float(match["num"]) * _SIZE_UNITS[match["unit"]]
