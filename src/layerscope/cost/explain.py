"""Why each op took its time: the efficiencies a cost model applied and the spec figures behind them.

:func:`explain` takes a timed graph's parts (the ops' :class:`~layerscope.cost.features.OpFeatures`, the
:class:`~layerscope.hardware.spec.HardwareSpec` and the cost model's :class:`~layerscope.cost.models.CostArrays`)
and gives, per op (:class:`Explanation`):

* ``compute_efficiency``: the FLOP/s the op's arithmetic got (FLOPs / ``compute_s``) over the datasheet peak of
  the unit that ran it (``engines.peak_flops_per_s`` of its dtype after the fallback rules, the TF32 peak, or
  ``engines.vector_flops_per_s``): the efficiency figure times every shape term (Hockney's W½, the measured
  tables by rows, shapes or query length, attention occupancy) as they were applied, read back from the time;
* ``memory_efficiency``: the bytes/s its traffic got (``memory_bytes`` / ``memory_s``) over the datasheet
  main-memory bandwidth (``efficiency.memory``, the weight-streaming factors, a decode attention floor, cache
  residency, all included; above 1 where bytes are served by a cache);
* ``overhead_s`` with its parts: kernels per pass (the execution profile's ``launches``) and the host time
  beyond the kernels' fixed cost (module calls, grouped-GEMM loops, page faults);
* the spec figures that entered its time, each a :class:`FigureUse`: its dotted path in the spec
  (``efficiency.matmul_per_dtype.bf16``, ``memory.hbm.bandwidth_bytes_per_s``), its value, its source text and
  the kernel-table row ids cited there (``G-15``, ``GX-22``; the part of a per-dtype source that belongs to the
  op's dtype only, see :func:`source_part`).

Figures are found by :data:`FIGURES`, a registry of :class:`FigureRule`: one entry per family of spec
figures, each saying which ops the family applies to (a vectorized predicate over the ops), how an op picks
its member (a per-op *variant*: its dtype, its kind, or none) and what that member's path, value and source
are. Nothing here branches on a figure's name.

Adding a figure
---------------
A new spec figure that a cost model reads (an attention decode floor, a collective's α-β terms, a per-step
serving overhead) is one entry::

    FIGURES.register("efficiency.my_figure", FigureRule(
        term="memory",                                        # the term of the op's time it enters
        applies=lambda ctx: ctx.kind_is("attention") & (ctx.hw.efficiency.my_figure > 0),
        resolve=lambda ctx, variant: (efficiency_use(ctx, "my_figure", "my_figure_source",
                                                     ctx.hw.efficiency.my_figure, "memory"),),
    ))

``applies`` returns a bool per op (:class:`ExplainContext` has the ops' arrays and common masks); ``variant``
(optional) returns a string per op that selects the member (:func:`dtype_variant`, :func:`kind_variant`), and
``resolve`` gets each distinct variant once and returns the :class:`FigureUse`\\ s it stands for (none when the
spec has no such member). :func:`datasheet_use` cites a figure from ``HardwareSpec.sources``,
:func:`efficiency_use` from an ``EfficiencySpec`` ``*_source`` field (the op's dtype part). A figure whose
source is missing says so (:data:`UNCITED`) and is flagged ``cited=False``; nothing here raises on a spec.
tests/cost/test_explain.py checks that every figure a Llama-3.1-8B decode uses on each shipped GPU preset
is cited.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import Literal

import numpy as np

from layerscope.cost.execution import KernelPlan, kernel_plan
from layerscope.cost.features import DTYPE_ORDER, OpFeatures, distinct, op_features
from layerscope.cost.models import (
    BOUND_NAMES,
    CostArrays,
    _activation_cache,
    _causal_ops,
    _chip_capacity_bytes,
    _cold_costs,
    _shared_cache,
    decode_attention_ops,
    gemm_k_loop_time_s,
    get_cost_model,
    streaming_ops,
    weight_only_dtypes,
)
from layerscope.errors import CostModelError
from layerscope.graph.ops import OP_KINDS, OpGraph
from layerscope.hardware.spec import HardwareSpec, MemoryLevel
from layerscope.registry import Registry
from layerscope.units import DType

__all__ = [
    "FIGURES",
    "UNCITED",
    "ExplainContext",
    "Explanation",
    "FigureRule",
    "FigureUse",
    "datasheet_use",
    "efficiency_use",
    "explain",
    "explain_graph",
    "merge_figures",
    "row_ids",
    "source_part",
]

Term = Literal["compute", "memory", "network", "overhead", "execution"]
#: The terms of an op's time a figure can enter: the bound terms of ``cost.models.BOUND_NAMES``, and ``execution``,
#: the execution profile (kernel granularity and residency), which shapes both the bytes and the kernels.
TERMS: tuple[Term, ...] = ("compute", "memory", "network", "overhead", "execution")

#: A figure's value: a number, a name (the execution profile's kernels), or a measured table (one row per point).
FigureValue = float | str | tuple[tuple[float, ...], ...] | None

#: The source of a figure the spec cites nothing for.
UNCITED = "uncalibrated: the spec records no source for this figure"

#: Row ids of the bundled kernel table (``data/gpu-kernels.md``: ``G-15``, ``GX-22``, ``MX-14``, ``K-08``,
#: ``AX-12``, ``CX-11``, ``OX-02``, ``PX-03``): one to three capitals, a hyphen, digits. Datasheet citations
#: (``hardware-specs.md S19``) have no hyphen and are not rows.
ROW_ID = re.compile(r"(?<![\w-])[A-Z]{1,3}-\d{1,4}(?![\w-])")

#: Dtypes that run on one datapath at one rate on every chip modelled (``hardware.spec``'s fallback rules), so
#: a source that fitted one speaks for the other where it names only one of them.
_SAME_RATE: dict[str, tuple[str, ...]] = {"bf16": ("fp16",), "fp16": ("bf16",)}
_DTYPE_TAGS = frozenset(dt.value for dt in DTYPE_ORDER)
_DTYPE_NAMES: tuple[str, ...] = tuple(dt.value for dt in DTYPE_ORDER)
_DTYPE_INDEX = {dt: i for i, dt in enumerate(DTYPE_ORDER)}
#: The units a matrix op's arithmetic can run on (``HardwareSpec.resolve_flops``), by code.
FLOPS_PATHS: tuple[str, ...] = ("matrix", "tf32", "vector")
#: Key of the ops' kind codes in ``OpFeatures.plans``.
_KIND_CODES = "(kind_codes)"  # parenthesized: never an execution profile name
#: A per-op choice among names: (codes per op, the names they index).
Categories = tuple[np.ndarray, tuple[str, ...]]
_KIND_TAGS = frozenset(OP_KINDS)
_LEADING_WORD = re.compile(r"\s*([A-Za-z0-9_]+)")


@dataclass(frozen=True)
class FigureUse:
    """One spec figure as an op used it."""

    path: str
    """Dotted path in the spec (``efficiency.matmul_per_dtype.bf16``, ``memory.hbm.bandwidth_bytes_per_s``)."""
    value: FigureValue
    """The figure's value in the spec's units (a fraction, FLOP/s, bytes/s, seconds, FLOPs) or its table."""
    source: str
    """Where the figure comes from: the spec's citation, the part of it for the op's dtype, or :data:`UNCITED`."""
    row_ids: tuple[str, ...]
    """Kernel-table row ids cited in ``source`` (:func:`row_ids`)."""
    term: Term
    """The term of the op's time the figure enters."""
    cited: bool = True
    """False when the spec gives no source for the figure."""


def _split_parts(text: str) -> list[str]:
    """``text`` split at its top-level ``;`` (not inside parentheses or brackets), parts stripped."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth = max(depth - 1, 0)
        elif ch == ";" and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p.strip() for p in parts if p.strip()]


def _tag(part: str, tags: Collection[str]) -> str | None:
    match = _LEADING_WORD.match(part)
    word = match.group(1) if match else ""
    return word if word in tags else None


@lru_cache(maxsize=1024)
def source_part(text: str, tag: str | None, tags: frozenset[str] = _DTYPE_TAGS) -> tuple[str, bool]:
    """The part of a source that speaks for ``tag`` and whether one did: ``(text, found)``.

    Per-dtype sources list their dtypes' parts separated by ``;``, each led by its tag
    (``"bf16: fitted on rows G-15, G-22; fp8: fitted on rows GX-15"``; ``"int4 (weight-only …): …"``); parts led
    by none of ``tags`` (``"Hockney and Jesshope (1988) half-performance work"``) speak for every tag. For a tag
    with parts: the untagged parts and its own (bf16 and fp16 stand for each other where only one is named). A
    text with no tagged part: all of it. A tag with no part in a tagged text: all of it, ``found`` False (its
    rows are not the op's). ``tag`` None: the untagged parts (all of the text when there are none)."""
    parts = _split_parts(text)
    tagged = [(_tag(p, tags), p) for p in parts]
    common = [p for t, p in tagged if t is None]
    if tag is None:
        return ("; ".join(common) if common else text.strip()), True
    if len(common) == len(parts):
        return text.strip(), True
    for candidate in (tag, *_SAME_RATE.get(tag, ())):
        own = [p for t, p in tagged if t == candidate]
        if own:
            return "; ".join([*common, *own]), True
    return text.strip(), False


@lru_cache(maxsize=1024)
def row_ids(text: str) -> tuple[str, ...]:
    """The kernel-table row ids cited in ``text`` (:data:`ROW_ID`), each once, in order of first mention."""
    return tuple(dict.fromkeys(ROW_ID.findall(text)))


@dataclass(frozen=True)
class ExplainContext:
    """What the figure rules read: the ops' arrays, the spec, the cost model's times and the execution plan.

    Work arrays (FLOPs, bytes) are per op, summed over the ``passes`` of the phase they explain."""

    features: OpFeatures
    hw: HardwareSpec
    cost: CostArrays
    cost_model: str = "roofline"
    passes: int = 1

    @property
    def n_ops(self) -> int:
        return len(self.features.kinds)

    @cached_property
    def m(self) -> np.ndarray:
        """Per op: the rows M of its matrix product (0 without one)."""
        return self.features.gemm_mnkb[:, 0].astype(np.float64)

    @cached_property
    def kind_codes(self) -> Categories:
        """Per op: its kind, as codes into the graph's kinds (computed once per graph)."""
        cached = self.features.plans.get(_KIND_CODES)
        if cached is None or len(cached[0]) != self.n_ops:
            names, codes = np.unique(np.asarray(self.features.kinds, dtype=object), return_inverse=True)
            cached = self.features.plans[_KIND_CODES] = (np.asarray(codes).reshape(-1), tuple(names.tolist()))
        return cached  # type: ignore[no-any-return]

    def kind_is(self, kind: str) -> np.ndarray:
        """Per op: whether its kind is ``kind``."""
        codes, names = self.kind_codes
        return codes == names.index(kind) if kind in names else np.zeros(self.n_ops, dtype=bool)

    @cached_property
    def has_flops(self) -> np.ndarray:
        return np.asarray(self.features.flops, dtype=np.float64).reshape(-1, self.n_ops).sum(axis=0) > 0

    @cached_property
    def has_weights(self) -> np.ndarray:
        return np.asarray(self.features.weight_bytes, dtype=np.float64).reshape(-1, self.n_ops).sum(axis=0) > 0

    @cached_property
    def moves_bytes(self) -> np.ndarray:
        return (np.asarray(self.cost.memory_s) > 0) | (np.asarray(self.cost.memory_bytes) > 0)

    @cached_property
    def _resolved(self) -> tuple[np.ndarray, np.ndarray]:
        """Per dtype code: the unit that runs it (:data:`FLOPS_PATHS` code) and the code of the dtype whose
        matrix figures it uses (fp32 for the tf32 and vector paths)."""
        resolved = [self.hw.resolve_flops(dt) for dt in DTYPE_ORDER]
        paths = np.array([FLOPS_PATHS.index(r.path) for r in resolved])
        dtypes = np.array([_DTYPE_INDEX[r.dtype or DType.FP32] for r in resolved])
        return paths, dtypes

    @cached_property
    def flops_path(self) -> np.ndarray:
        """Per op: the code in :data:`FLOPS_PATHS` (matrix, tf32, vector) of the unit its arithmetic runs on."""
        paths = self._resolved[0][self.features.dtype_code]
        return np.where(self.features.uses_matrix_units, paths, FLOPS_PATHS.index("vector"))

    def on_path(self, path: str) -> np.ndarray:
        """Per op: whether its arithmetic runs on ``path`` (``matrix``, ``tf32``, ``vector``)."""
        return np.asarray(self.flops_path == FLOPS_PATHS.index(path), dtype=bool)

    @cached_property
    def resolved_dtype(self) -> Categories:
        """Per op: the dtype whose matrix figures it uses, after the fallback rules (``fp32`` for tf32/vector)."""
        return self._resolved[1][self.features.dtype_code], _DTYPE_NAMES

    @cached_property
    def decode_attention(self) -> np.ndarray:
        if not self.features.ops:
            return np.zeros(self.n_ops, dtype=bool)
        return np.asarray(decode_attention_ops(self.features), dtype=bool)

    @cached_property
    def plan(self) -> KernelPlan | None:
        """The execution profile's kernel plan (None: the fused default, one kernel per op)."""
        if self.hw.execution.is_default or not self.features.ops:
            return None
        name = self.hw.execution.kernels
        plan = self.features.plans.get(name)
        if plan is None:
            plan = self.features.plans[name] = kernel_plan(name, self.features.ops)
        return plan

    @cached_property
    def launches(self) -> np.ndarray:
        """Per op: kernels per pass."""
        return np.ones(self.n_ops) if self.plan is None else np.asarray(self.plan.launches, dtype=np.float64)

    @cached_property
    def per_pass(self) -> OpFeatures:
        """The features with the work of one mean pass (the cost model's per-kernel costs read it)."""
        f = self.features
        if self.passes == 1:
            return f
        return f.with_work(f.flops / self.passes, f.weight_bytes / self.passes, f.act_bytes / self.passes,
                           f.kv_bytes / self.passes)

    @cached_property
    def per_kernel_s(self) -> np.ndarray:
        """Per op: the fixed cost of one of its kernels (``execution.cold_by_reuse`` or ``launch_overhead_s``)."""
        kernel_s, _ = _cold_costs(self.per_pass, self.hw) if self.features.ops else (None, 0.0)
        if kernel_s is None:
            return np.full(self.n_ops, self.hw.launch_overhead_s)
        return np.asarray(kernel_s, dtype=np.float64)


Applies = Callable[[ExplainContext], np.ndarray]
Variant = Callable[[ExplainContext], Categories]
Resolve = Callable[[ExplainContext, str], Sequence[FigureUse]]


@dataclass(frozen=True)
class FigureRule:
    """One family of spec figures (see the module docstring, "Adding a figure")."""

    term: Term
    applies: Applies
    """Per op: whether the family enters its time."""
    resolve: Resolve
    """The figure(s) of one variant (empty: the spec has none for it)."""
    variant: Variant | None = None
    """Per op: the name that picks the family's member (its dtype, its kind), as codes and the names they index;
    None: one member for all."""


def datasheet_use(ctx: ExplainContext, path: str, value: FigureValue, term: Term) -> FigureUse:
    """A figure cited in ``HardwareSpec.sources`` under its ``path`` (:data:`UNCITED` when not)."""
    source = (ctx.hw.sources.get(path) or "").strip()
    return FigureUse(path, value, source or UNCITED, row_ids(source), term, bool(source))


def efficiency_use(ctx: ExplainContext, path: str, source_field: str, value: FigureValue, term: Term,
                   tag: str | None = None, tags: frozenset[str] = _DTYPE_TAGS,
                   owner: object | None = None) -> FigureUse:
    """A figure cited by the ``source_field`` of ``owner`` (default the spec's ``efficiency``): the part for
    ``tag`` (:func:`source_part`); row ids only from a part that speaks for it. ``path`` is relative to
    ``efficiency.`` (``owner`` None) or to the root (another owner)."""
    text = str(getattr(ctx.hw.efficiency if owner is None else owner, source_field, "") or "").strip()
    full = f"efficiency.{path}" if owner is None else path
    if not text:
        return FigureUse(full, value, UNCITED, (), term, False)
    part, found = source_part(text, tag, tags)
    return FigureUse(full, value, part, row_ids(part) if found else (), term, True)


def _table(rows: Sequence[Sequence[float]]) -> tuple[tuple[float, ...], ...]:
    return tuple(tuple(float(x) for x in row) for row in rows)


def dtype_variant(ctx: ExplainContext) -> Categories:
    """Per op: the dtype whose matrix figures it uses (:attr:`ExplainContext.resolved_dtype`)."""
    return ctx.resolved_dtype


def kind_variant(ctx: ExplainContext) -> Categories:
    """Per op: its kind."""
    return ctx.kind_codes


# --- compute ------------------------------------------------------------------------------------------------


def _matrix_path(ctx: ExplainContext) -> np.ndarray:
    return ctx.has_flops & ctx.on_path("matrix")


def _peak(ctx: ExplainContext, dt: str) -> Sequence[FigureUse]:
    path = f"engines.peak_flops_per_s.{dt}"
    return (datasheet_use(ctx, path, ctx.hw.engines.peak_flops_per_s.get(DType(dt)), "compute"),)


def _matmul_efficiency(ctx: ExplainContext, key: str) -> Sequence[FigureUse]:
    eff = ctx.hw.efficiency
    if key != "tf32" and DType(key) in eff.matmul_per_dtype:
        return (efficiency_use(ctx, f"matmul_per_dtype.{key}", "matmul_per_dtype_source",
                               eff.matmul_per_dtype[DType(key)], "compute", tag=key),)
    return (efficiency_use(ctx, "matmul", "matmul_source", eff.matmul, "compute"),)


def _matmul_efficiency_variant(ctx: ExplainContext) -> Categories:
    codes, names = ctx.resolved_dtype
    return np.where(ctx.on_path("tf32"), len(names), codes), (*names, "tf32")


def _vector_kind_variant(ctx: ExplainContext) -> Categories:
    """Per op: its kind where it is not a matrix op (``efficiency.vector_per_kind``), else ``""``."""
    codes, names = ctx.kind_codes
    return np.where(ctx.features.uses_matrix_units, len(names), codes), (*names, "")


def _vector_efficiency(ctx: ExplainContext, kind: str) -> Sequence[FigureUse]:
    eff = ctx.hw.efficiency
    if kind in eff.vector_per_kind:
        return (efficiency_use(ctx, f"vector_per_kind.{kind}", "vector_per_kind_source", eff.vector_per_kind[kind],
                               "compute", tag=kind, tags=_KIND_TAGS),)
    return (efficiency_use(ctx, "vector", "vector_source", eff.vector, "compute"),)


def _half_flops_ops(ctx: ExplainContext) -> np.ndarray:
    gemm = ctx.features.uses_matrix_units & ctx.has_flops & (ctx.m > 1)
    if ctx.hw.efficiency.attention_rows:
        gemm &= ~ctx.kind_is("attention")
    return gemm


def _half_flops(ctx: ExplainContext, dt: str) -> Sequence[FigureUse]:
    half = ctx.hw.efficiency.matmul_half_flops.get(DType(dt), 0.0)
    if not half:
        return ()
    return (efficiency_use(ctx, f"matmul_half_flops.{dt}", "matmul_half_flops_source", half, "compute", tag=dt),)


def _k_loop_ops(ctx: ExplainContext) -> np.ndarray:
    """Ops whose arithmetic time is their serial K-loop (``efficiency.gemm_k_loop_s``): the floor binds."""
    if not ctx.hw.efficiency.gemm_k_loop_s:
        return np.zeros(ctx.n_ops, dtype=bool)
    loop_s = gemm_k_loop_time_s(ctx.features, ctx.hw) * ctx.passes
    return (loop_s > 0) & (loop_s >= np.asarray(ctx.cost.compute_s) * (1.0 - 1e-9))


def _k_loop(ctx: ExplainContext, dt: str) -> Sequence[FigureUse]:
    per_k = ctx.hw.efficiency.gemm_k_loop_s.get(DType(dt), 0.0)
    if not per_k:
        return ()
    return (efficiency_use(ctx, f"gemm_k_loop_s.{dt}", "gemm_k_loop_source", per_k, "compute", tag=dt),)


def _rows_tables(ctx: ExplainContext, dt: str) -> Sequence[FigureUse]:
    eff = ctx.hw.efficiency
    shapes = eff.matmul_shapes.get(DType(dt))
    if shapes:
        return (efficiency_use(ctx, f"matmul_shapes.{dt}", "matmul_shapes_source", _table(shapes), "compute",
                               tag=dt),)
    rows = eff.matmul_rows.get(DType(dt))
    if rows:
        return (efficiency_use(ctx, f"matmul_rows.{dt}", "matmul_rows_source", _table(rows), "compute", tag=dt),)
    return ()


def _attention_prefill(ctx: ExplainContext) -> np.ndarray:
    return ctx.kind_is("attention") & (ctx.m > 1)


def _attention_table(field_name: str) -> Resolve:
    def resolve(ctx: ExplainContext, dt: str) -> Sequence[FigureUse]:
        rows = getattr(ctx.hw.efficiency, field_name).get(DType(dt))
        if not rows:
            return ()
        return (efficiency_use(ctx, f"{field_name}.{dt}", "attention_rows_source", _table(rows), "compute",
                               tag=dt),)
    return resolve


def _cached_or_noncausal(ctx: ExplainContext) -> np.ndarray:
    prefill = _attention_prefill(ctx)
    if not prefill.any():
        return prefill
    n = ctx.features.gemm_mnkb[:, 1].astype(np.float64)
    return prefill & ((n > ctx.m) | ~_causal_ops(ctx.features))


# --- memory -------------------------------------------------------------------------------------------------

#: Cost models that time decode attention at ``efficiency.attention_decode_*`` (``cost.models._memory_s``;
#: ``hierarchical`` times every level's traffic and has no such term).
DECODE_ATTENTION_MODELS = frozenset({"roofline", "tiling"})


def _decode_attention_figures(ctx: ExplainContext) -> np.ndarray:
    eff = ctx.hw.efficiency
    has = eff.attention_decode_memory is not None or eff.attention_decode_floor_s > 0
    if not has or ctx.cost_model not in DECODE_ATTENTION_MODELS or ctx.hw.execution.activations_in_cache:
        return np.zeros(ctx.n_ops, dtype=bool)
    return ctx.decode_attention & ctx.moves_bytes


def _main_bandwidth(ctx: ExplainContext, _: str) -> Sequence[FigureUse]:
    main = ctx.hw.main_memory
    return (datasheet_use(ctx, f"memory.{main.name}.bandwidth_bytes_per_s", main.bandwidth_bytes_per_s, "memory"),)


def _memory_efficiency_ops(ctx: ExplainContext) -> np.ndarray:
    own = _decode_attention_figures(ctx) & (ctx.hw.efficiency.attention_decode_memory is not None)
    return ctx.moves_bytes & ~own


def _stream_dtype(ctx: ExplainContext) -> Categories:
    """Per op: the dtype whose weight-streaming table it reads (its weights' where weight-only quantized; no
    fallback to another dtype)."""
    quantized = weight_only_dtypes(ctx.features)
    return np.where(quantized >= 0, quantized, ctx.features.dtype_code), _DTYPE_NAMES


def _weight_stream(ctx: ExplainContext, dt: str) -> Sequence[FigureUse]:
    rows = ctx.hw.efficiency.weight_stream_k.get(DType(dt))
    if not rows:
        return ()
    return (efficiency_use(ctx, f"weight_stream_k.{dt}", "weight_stream_k_source", _table(rows), "memory", tag=dt),)


def _streaming_activations(ctx: ExplainContext) -> np.ndarray:
    streaming = streaming_ops(ctx.features.act_bytes, ctx.hw)
    if streaming is None:
        return np.zeros(ctx.n_ops, dtype=bool)
    act = np.asarray(ctx.features.act_bytes).reshape(-1, ctx.n_ops).sum(axis=0) > 0
    return np.asarray(streaming).reshape(-1, ctx.n_ops).any(axis=0) & act


def _resident_activations(ctx: ExplainContext) -> np.ndarray:
    level = _activation_cache(ctx.hw)
    if not ctx.hw.execution.activations_in_cache or level is None or not ctx.features.ops:
        return np.zeros(ctx.n_ops, dtype=bool)
    act = np.asarray(ctx.per_pass.act_bytes).reshape(-1, ctx.n_ops).max(axis=0)
    return (act > 0) & (act <= _chip_capacity_bytes(level, ctx.hw))


def _cache_bandwidth(ctx: ExplainContext, _: str) -> Sequence[FigureUse]:
    level = _activation_cache(ctx.hw)
    if level is None:
        return ()
    return (datasheet_use(ctx, f"memory.{level.name}.bandwidth_bytes_per_s", level.bandwidth_bytes_per_s,
                          "memory"),)


def _model_is(*names: str) -> Callable[[ExplainContext], bool]:
    return lambda ctx: ctx.cost_model in names


def _tiled_ops(ctx: ExplainContext) -> np.ndarray:
    return ctx.m > 0


def _tile_caches(ctx: ExplainContext, _: str) -> Sequence[FigureUse]:
    """The capacities the GEMM tiles were searched for: the shared cache (``tiling``), every inner level
    (``hierarchical``)."""
    levels: tuple[MemoryLevel, ...]
    if ctx.cost_model == "tiling":
        level = _shared_cache(ctx.hw)
        levels = () if level is None else (level,)
    else:
        levels = tuple(ctx.hw.memory[:-1])
    return tuple(datasheet_use(ctx, f"memory.{lv.name}.capacity_bytes", lv.capacity_bytes, "memory") for lv in levels)


def _level_bandwidths(ctx: ExplainContext, _: str) -> Sequence[FigureUse]:
    """The on-chip levels' bandwidths (``hierarchical``: traffic crosses every level)."""
    return tuple(datasheet_use(ctx, f"memory.{lv.name}.bandwidth_bytes_per_s", lv.bandwidth_bytes_per_s, "memory")
                 for lv in ctx.hw.memory[1:-1] if lv.bandwidth_bytes_per_s)


# --- overhead and execution ---------------------------------------------------------------------------------


def _execution_use(ctx: ExplainContext, path: str, value: FigureValue, term: Term) -> FigureUse:
    return efficiency_use(ctx, f"execution.{path}" if path else "execution.kernels", "source", value, term,
                          owner=ctx.hw.execution)


def _plan_has(attr: str) -> Applies:
    def applies(ctx: ExplainContext) -> np.ndarray:
        values = None if ctx.plan is None else getattr(ctx.plan, attr)
        if values is None or np.size(values) == 0:
            return np.zeros(ctx.n_ops, dtype=bool)
        return np.asarray(values).reshape(ctx.n_ops, -1).sum(axis=1) > 0
    return applies


def _fresh_page_ops(ctx: ExplainContext) -> np.ndarray:
    pages = ctx.hw.execution.fresh_pages
    if pages is None or ctx.plan is None or not ctx.plan.alloc_bytes.size:
        return np.zeros(ctx.n_ops, dtype=bool)
    return np.asarray((np.asarray(ctx.plan.alloc_bytes) >= pages.min_bytes).reshape(ctx.n_ops, -1).any(axis=1))


def _when(condition: Callable[[ExplainContext], bool], mask: Applies) -> Applies:
    def applies(ctx: ExplainContext) -> np.ndarray:
        return mask(ctx) if condition(ctx) else np.zeros(ctx.n_ops, dtype=bool)
    return applies


def _one(make: Callable[[ExplainContext], FigureUse]) -> Resolve:
    return lambda ctx, _variant: (make(ctx),)


def _graph_replayed(ctx: ExplainContext) -> np.ndarray:
    """Per op: its kernels replay inside the pass's CUDA graph (``cost.execution.captured_kernels``)."""
    from layerscope.cost.execution import captured_kernels, engine_terms, graph_mode

    plan = ctx.plan
    terms = engine_terms(ctx.hw.execution)
    if plan is None or plan.graph_capture is None or terms.graph_node_s <= 0:
        return np.zeros(ctx.n_ops, dtype=bool)
    return np.asarray(captured_kernels(plan.graph_capture, graph_mode(ctx.features.ops, terms)), dtype=bool)


def _graph_node(ctx: ExplainContext, _variant: str) -> Sequence[FigureUse]:
    from layerscope.cost.execution import engine_terms

    value = engine_terms(ctx.hw.execution).graph_node_s
    if ctx.hw.execution.graph_node_s is not None:
        return (_execution_use(ctx, "graph_node_s", value, "overhead"),)
    return (FigureUse("execution.graph_node_s", value, GRAPH_NODE_SOURCE, (), "overhead", True),)


#: Where the profile's default graph-node cost comes from (``cost.execution.H200_GRAPH_NODE_S``).
GRAPH_NODE_SOURCE = ("the serving-graph profile's default: measured, 1000 captured kernels replayed on an H200 "
                     "(bench/gpu/h200-2026-11-26/kernels-cuda-graph.json, record graph_node); an assumption on "
                     "other GPUs")


def _communication(ctx: ExplainContext) -> np.ndarray:
    """Per op: a collective timed on the spec's interconnect (``cost.collectives``)."""
    if ctx.hw.interconnect is None:
        return np.zeros(ctx.n_ops, dtype=bool)
    return ctx.features.kind_mask("communication")


def _interconnect(ctx: ExplainContext, _variant: str) -> Sequence[FigureUse]:
    """The link's datasheet bandwidth and latency, the network's when it has one, and every algorithm's fitted
    α-β terms (the collective runs the fastest of them: ``cost.collectives``)."""
    link = ctx.hw.interconnect
    if link is None:
        return ()
    uses = [datasheet_use(ctx, "interconnect.bandwidth_bytes_per_s", link.bandwidth_bytes_per_s, "network"),
            datasheet_use(ctx, "interconnect.latency_s", link.latency_s, "network")]
    owners = [("interconnect", link.algorithms)]
    if link.network is not None:
        uses.append(datasheet_use(ctx, "interconnect.network.bandwidth_bytes_per_s",
                                  link.network.bandwidth_bytes_per_s, "network"))
        owners.append(("interconnect.network", link.network.algorithms))
    for prefix, algorithms in owners:
        for name, terms in sorted(algorithms.items()):
            uses.append(efficiency_use(ctx, f"{prefix}.algorithms.{name}", "source",
                                       ((terms.alpha_s, terms.bandwidth_fraction),), "network", owner=terms))
    return tuple(uses)


#: Every family of spec figures an op's time can use, by the family's dotted path.
FIGURES: Registry[FigureRule] = Registry("spec figure", CostModelError, {
    "engines.peak_flops_per_s": FigureRule("compute", _matrix_path, _peak, dtype_variant),
    "engines.tf32_flops_per_s": FigureRule(
        "compute", lambda ctx: ctx.has_flops & ctx.on_path("tf32"),
        _one(lambda ctx: datasheet_use(ctx, "engines.tf32_flops_per_s", ctx.hw.engines.tf32_flops_per_s,
                                       "compute"))),
    "engines.vector_flops_per_s": FigureRule(
        "compute", lambda ctx: ctx.has_flops & ctx.on_path("vector"),
        _one(lambda ctx: datasheet_use(ctx, "engines.vector_flops_per_s", ctx.hw.engines.vector_flops_per_s,
                                       "compute"))),
    "efficiency.matmul": FigureRule(
        "compute", lambda ctx: ctx.has_flops & (ctx.on_path("matrix") | ctx.on_path("tf32")), _matmul_efficiency,
        _matmul_efficiency_variant),
    "efficiency.vector": FigureRule(
        "compute", lambda ctx: ctx.has_flops & ctx.on_path("vector"), _vector_efficiency, _vector_kind_variant),
    "efficiency.matmul_half_flops": FigureRule("compute", _half_flops_ops, _half_flops, dtype_variant),
    "efficiency.gemm_k_loop_s": FigureRule("compute", _k_loop_ops, _k_loop, dtype_variant),
    "efficiency.matmul_rows": FigureRule(
        "compute", lambda ctx: ctx.features.uses_matrix_units & (ctx.m > 1) & ctx.has_weights, _rows_tables,
        dtype_variant),
    "efficiency.attention_rows": FigureRule("compute", _attention_prefill, _attention_table("attention_rows"),
                                            dtype_variant),
    "efficiency.attention_rows_noncausal": FigureRule(
        "compute", _cached_or_noncausal, _attention_table("attention_rows_noncausal"), dtype_variant),
    "efficiency.attention_half_head_dim": FigureRule(
        "compute", _when(lambda ctx: ctx.hw.efficiency.attention_half_head_dim > 0, _attention_prefill),
        _one(lambda ctx: efficiency_use(ctx, "attention_half_head_dim", "attention_rows_source",
                                        ctx.hw.efficiency.attention_half_head_dim, "compute"))),
    "interconnect": FigureRule("network", _communication, _interconnect),
    "memory.bandwidth_bytes_per_s": FigureRule("memory", lambda ctx: ctx.moves_bytes, _main_bandwidth),
    "efficiency.memory": FigureRule(
        "memory", _memory_efficiency_ops,
        _one(lambda ctx: efficiency_use(ctx, "memory", "memory_source", ctx.hw.efficiency.memory, "memory"))),
    "efficiency.weight_stream_k": FigureRule(
        "memory", lambda ctx: ctx.has_weights & (ctx.features.gemm_mnkb[:, 2] > 0) & ctx.moves_bytes,
        _weight_stream, _stream_dtype),
    "efficiency.activation_stream": FigureRule(
        "memory", _streaming_activations,
        _one(lambda ctx: efficiency_use(ctx, "activation_stream", "activation_stream_source",
                                        ctx.hw.efficiency.activation_stream, "memory"))),
    "efficiency.attention_decode_memory": FigureRule(
        "memory", _when(lambda ctx: ctx.hw.efficiency.attention_decode_memory is not None,
                        _decode_attention_figures),
        _one(lambda ctx: efficiency_use(ctx, "attention_decode_memory", "attention_decode_source",
                                        ctx.hw.efficiency.attention_decode_memory, "memory"))),
    "efficiency.attention_decode_floor_s": FigureRule(
        "memory", _when(lambda ctx: ctx.hw.efficiency.attention_decode_floor_s > 0, _decode_attention_figures),
        _one(lambda ctx: efficiency_use(ctx, "attention_decode_floor_s", "attention_decode_source",
                                        ctx.hw.efficiency.attention_decode_floor_s, "memory"))),
    "memory.cache_bandwidth_bytes_per_s": FigureRule("memory", _resident_activations, _cache_bandwidth),
    "memory.capacity_bytes": FigureRule("memory", _when(_model_is("tiling", "hierarchical"), _tiled_ops),
                                        _tile_caches),
    "memory.level_bandwidth_bytes_per_s": FigureRule(
        "memory", _when(_model_is("hierarchical"), lambda ctx: ctx.moves_bytes), _level_bandwidths),
    "execution.kernels": FigureRule(
        "execution", lambda ctx: np.full(ctx.n_ops, not ctx.hw.execution.is_default),
        _one(lambda ctx: _execution_use(ctx, "kernels", ctx.hw.execution.kernels, "execution"))),
    "execution.graph_node_s": FigureRule("overhead", _graph_replayed, _graph_node),
    "launch_overhead_s": FigureRule(
        "overhead", lambda ctx: (ctx.launches > 0) & (not ctx.hw.execution.cold_by_reuse) & ~_graph_replayed(ctx),
        _one(lambda ctx: datasheet_use(ctx, "launch_overhead_s", ctx.hw.launch_overhead_s, "overhead"))),
    "execution.cold_by_reuse": FigureRule(
        "overhead", lambda ctx: (ctx.launches > 0) & bool(ctx.hw.execution.cold_by_reuse),
        _one(lambda ctx: _execution_use(ctx, "cold_by_reuse", _table(
            [(p.reuse_bytes, p.kernel_s, p.module_call_s) for p in ctx.hw.execution.cold_by_reuse]), "overhead"))),
    "execution.module_call_s": FigureRule(
        "overhead", _when(lambda ctx: not ctx.hw.execution.cold_by_reuse and ctx.hw.execution.module_call_s > 0,
                          _plan_has("module_calls")),
        _one(lambda ctx: _execution_use(ctx, "module_call_s", ctx.hw.execution.module_call_s, "overhead"))),
    "execution.grouped_mm_group_s": FigureRule(
        "overhead", _when(lambda ctx: ctx.hw.execution.grouped_mm_group_s > 0, _plan_has("grouped_mm_groups")),
        _one(lambda ctx: _execution_use(ctx, "grouped_mm_group_s", ctx.hw.execution.grouped_mm_group_s,
                                        "overhead"))),
    "execution.fresh_pages": FigureRule(
        "overhead", _fresh_page_ops,
        _one(lambda ctx: _execution_use(ctx, "fresh_pages", None if ctx.hw.execution.fresh_pages is None else (
            (ctx.hw.execution.fresh_pages.min_bytes, ctx.hw.execution.fresh_pages.s_per_byte),), "overhead"))),
})


@dataclass(frozen=True)
class Explanation:
    """Per op (arrays aligned with the ops): what its time was made of and which spec figures made it."""

    compute_efficiency: np.ndarray
    """FLOPs / ``compute_s`` / the datasheet peak of the unit that ran them; NaN for an op without FLOPs."""
    memory_efficiency: np.ndarray
    """``memory_bytes`` / ``memory_s`` / the datasheet main-memory bandwidth; NaN for an op without traffic."""
    overhead_s: np.ndarray
    """The cost model's fixed time per op (summed over the passes)."""
    launches: np.ndarray
    """Kernels per pass (the execution profile's; 1 for the fused default)."""
    overhead_host_s: np.ndarray
    """The part of ``overhead_s`` beyond ``launches`` × the fixed cost per kernel: module calls, grouped-GEMM
    loops, page faults (0 for fused kernels)."""
    bound: np.ndarray
    """BOUND_* codes (``cost.models``)."""
    figures: dict[str, FigureUse]
    """Every figure some op used, by path."""
    op_figures: tuple[tuple[str, ...], ...]
    """Per op: the paths of the figures that entered its time, in :data:`FIGURES` order."""

    def governing(self, i: int) -> tuple[str, ...]:
        """Op ``i``'s figures of the term that bound it, its overhead and its execution profile."""
        bound = BOUND_NAMES[int(self.bound[i])]
        keep = {bound, "overhead", "execution"}
        return tuple(p for p in self.op_figures[i] if self.figures[p].term in keep)

    def row_ids(self, i: int, *, governing: bool = True) -> tuple[str, ...]:
        """The kernel-table rows behind op ``i``'s figures (those of :meth:`governing` by default)."""
        paths = self.governing(i) if governing else self.op_figures[i]
        return tuple(dict.fromkeys(r for p in paths for r in self.figures[p].row_ids))


def explain(features: OpFeatures, hw: HardwareSpec, cost: CostArrays, *, cost_model: str = "roofline",
            passes: int = 1) -> Explanation:
    """:class:`Explanation` of ops timed by ``cost_model`` on ``hw`` into ``cost``. ``features`` and ``cost``
    are per op, summed over the ``passes`` of a phase where it has several (a generation's decode steps: the
    efficiencies are then the flop- and byte-weighted means over the steps)."""
    ctx = ExplainContext(features, hw, cost, cost_model, max(int(passes), 1))
    n = ctx.n_ops
    flops = _per_op_sum(features.flops, n)
    compute_s = _per_op_sum(cost.compute_s, n)
    peak = np.where(ctx.on_path("vector"), hw.engines.vector_flops_per_s,
                    np.array([hw.peak_flops(dt) for dt in DTYPE_ORDER])[features.dtype_code])
    with np.errstate(divide="ignore", invalid="ignore"):
        compute_eff = np.where((flops > 0) & (compute_s > 0), flops / compute_s / peak, np.nan)
        memory_s = _per_op_sum(cost.memory_s, n)
        mem_bytes = _per_op_sum(cost.memory_bytes, n)
        memory_eff = np.where((mem_bytes > 0) & (memory_s > 0),
                              mem_bytes / memory_s / hw.memory_bandwidth_bytes_per_s, np.nan)
    overhead = _per_op_sum(cost.overhead_s, n)
    kernels_s = ctx.launches * ctx.per_kernel_s * ctx.passes
    host = np.maximum(overhead - kernels_s, 0.0)
    host = np.where(host > 1e-9 * np.maximum(overhead, 1e-300), host, 0.0)  # rounding of the sums
    figures, op_figures = _figures(ctx)
    bound = np.asarray(cost.bound)
    return Explanation(compute_eff, memory_eff, overhead, ctx.launches, host,
                       bound.reshape(-1, n)[-1] if bound.size else bound, figures, op_figures)


def explain_graph(graph: OpGraph, hw: HardwareSpec, cost_model: str = "roofline") -> Explanation:
    """:func:`explain` of ``graph`` timed on ``hw`` by the registered cost model ``cost_model``."""
    features = op_features(graph)
    return explain(features, hw, get_cost_model(cost_model)(features, hw), cost_model=cost_model)


def _per_op_sum(values: np.ndarray | float, n: int) -> np.ndarray:
    """``values`` per op, summed over any leading dimensions (a cost call over several passes)."""
    arr = np.asarray(values, dtype=np.float64)
    return np.broadcast_to(arr, (n,)).copy() if arr.ndim == 0 else arr.reshape(-1, n).sum(axis=0)


def _figures(ctx: ExplainContext) -> tuple[dict[str, FigureUse], tuple[tuple[str, ...], ...]]:
    """Every rule of :data:`FIGURES` on the ops: the figures used and, per op, their paths."""
    figures: dict[str, FigureUse] = {}
    masks: dict[str, np.ndarray] = {}
    for rule in FIGURES.values():
        applies = np.asarray(rule.applies(ctx), dtype=bool)
        if not applies.any():
            continue
        if rule.variant is None:
            members: list[tuple[str, np.ndarray]] = [("", applies)]
        else:
            codes, names = rule.variant(ctx)
            codes = np.asarray(codes)
            members = [(names[c], applies & (codes == c)) for c in distinct(codes[applies])]
        for variant, sel in members:
            for use in rule.resolve(ctx, variant):
                figures.setdefault(use.path, use)
                masks[use.path] = masks[use.path] | sel if use.path in masks else sel
    if not masks:
        return figures, tuple(() for _ in range(ctx.n_ops))
    paths = tuple(masks)
    # each op's set of figures as one integer (a bit per figure), so that the distinct sets are found at once
    codes = np.zeros(ctx.n_ops, dtype=object if len(paths) > 62 else np.int64)
    for j, path in enumerate(paths):
        codes = codes + np.where(masks[path], 1 << j, 0)
    patterns, inverse = np.unique(codes, return_inverse=True)
    lists = [tuple(p for j, p in enumerate(paths) if int(pattern) >> j & 1) for pattern in patterns.tolist()]
    return figures, tuple(lists[i] for i in np.asarray(inverse).reshape(-1).tolist())


def merge_figures(*tables: dict[str, FigureUse]) -> dict[str, FigureUse]:
    """One figure table from several explanations of one spec (first use of a path wins), sorted by path."""
    out: dict[str, FigureUse] = {}
    for table in tables:
        for path, use in table.items():
            out.setdefault(path, use)
    return dict(sorted(out.items()))
