"""Coverage verification: do recorded operator calls cover what the model must run?

Expectations are derived, never tabulated: :func:`expected_from_spec` builds the model's graph
from its :class:`ModelSpec` for one prefill pass (and one decode pass when the records have
decode) and turns it into records (:mod:`layerscope.records.from_graph`). So the categories a
model requires follow from its architecture: ``moe_router``/``moe_topk``/``moe_experts`` only
where ``spec.moe`` makes MoE layers, ``rope`` only for rotary positions, the activation op type
(``silu``/``gelu``/``relu``) from ``spec.activation``, MLA attention from ``spec.mla``.
Categories in :data:`OPTIONAL_CATEGORIES` do not depend on the model and never fail a check.

:func:`verify` compares observed records with expected ones, per (definition, layer, phase), in
calls per forward pass; an expected definition missing where the observed records hold another
definition of the same op type in the same place is reported as a shape mismatch with the axes
that differ. Every observed workload's input shapes and dtypes are checked against its definition.
The same function compares two record sets (graph-derived against captured), then optionally
also their workloads.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from layerscope.errors import RecordsError
from layerscope.graph.attention import check_attention_view
from layerscope.model.spec import ModelSpec
from layerscope.records.from_graph import records_from_spec
from layerscope.records.optypes import CATEGORIES
from layerscope.records.schema import PHASES, Definition, RecordSet
from layerscope.units import parse_dtype

#: Categories that are never required, with the reason.
OPTIONAL_CATEGORIES: dict[str, str] = {
    "sampling": "done by the caller (the runner or generate()), not by the model's modules",
    "softmax": "a separate op only in the unfused attention view",
}

GapKind = Literal["no_passes", "missing_category", "missing_definition", "calls", "shape", "dtype", "unexpected",
                  "workload"]


@dataclass(frozen=True)
class Gap:
    """One way the observed records fall short of the expected ones."""

    kind: GapKind
    category: str
    message: str
    definition: str | None = None
    layer: int | None = None
    phase: str | None = None


@dataclass
class CategoryReport:
    """Expected and found coverage of one operator category."""

    category: str
    status: Literal["required", "optional", "unexpected"]
    expected_definitions: list[str] = field(default_factory=list)
    found_definitions: list[str] = field(default_factory=list)
    expected_layers: int = 0
    """Decoder layers the category must appear in (0 for ops outside the layers)."""
    found_layers: int = 0
    expected_calls_per_pass: float = 0.0
    """Calls per forward pass, summed over layers and the phases checked."""
    found_calls_per_pass: float = 0.0
    gaps: list[Gap] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.gaps


@dataclass
class VerifyReport:
    """The result of :func:`verify`: one row per category, every gap, ``ok`` when there is none."""

    model: str
    against: str
    phases: list[str]
    categories: list[CategoryReport]
    gaps: list[Gap]

    @property
    def ok(self) -> bool:
        return not self.gaps

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model, "against": self.against, "phases": self.phases, "ok": self.ok,
            "categories": [{**asdict(c), "ok": c.ok} for c in self.categories],
            "gaps": [asdict(g) for g in self.gaps],
        }


def expected_from_spec(spec: ModelSpec, observed: RecordSet, *, dtype: str | None = None) -> RecordSet:
    """The records ``spec`` implies for the phases, layers, dtype and forms ``observed`` was recorded with."""
    meta = observed.meta
    phases = [p for p in PHASES if observed.passes.get(p)]
    layers = int(meta.get("layers") or spec.num_layers)
    if not 1 <= layers <= spec.num_layers:
        raise RecordsError(f"the records cover {layers} layers but {spec.name} has {spec.num_layers}")
    mla_form = meta.get("mla_form")
    attention = check_attention_view(meta.get("attention", "fused"), RecordsError)
    dt = parse_dtype(dtype or meta.get("dtype") or spec.base_dtype.value)
    expected = records_from_spec(
        spec, batch=1, prompt_len=2, decode_steps=1 if "decode" in phases else 0, dtype=dt, tp=int(meta.get("tp", 1)),
        layers=range(layers), mla_form=mla_form if mla_form in ("naive", "absorbed") else None, attention=attention,
    )
    if "prefill" not in phases:
        expected.passes.pop("prefill", None)
        expected.calls = {k: v for k, v in expected.calls.items() if v.phase != "prefill"}
    expected.meta["source"] = "spec"
    return expected


def _axes_diff(a: Definition, b: Definition) -> str:
    ca, cb = a.const_axes(), b.const_axes()
    diff = [f"{k}={ca.get(k)} vs {cb.get(k)}" for k in sorted(ca.keys() | cb.keys()) if ca.get(k) != cb.get(k)]
    return ", ".join(diff)


def _where(layer: int | None, phase: str) -> str:
    return f"{'layer ' + str(layer) if layer is not None else 'outside the layers'}, {phase}"


def _fmt(x: float) -> str:
    return f"{x:g}"


def _check_workloads(observed: RecordSet, expected: RecordSet, category_of: dict[str, str],
                     dtype_ref: bool) -> list[Gap]:
    """Input shapes of every observed workload against its definition; dtypes against the expected ones."""
    gaps: list[Gap] = []
    for name, entries in sorted(observed.workloads.items()):
        d = observed.definitions.get(name)
        if d is None:
            continue
        cat = category_of.get(name, d.op_type)
        ref = expected.definitions.get(name) if dtype_ref else None
        consts = d.const_axes()
        for entry in entries.values():
            w = entry.workload
            for tname, decl in d.inputs.items():
                got = w.inputs.get(tname)
                if got is None:
                    gaps.append(Gap("shape", cat, f"{name}: workload {w.uuid} has no input {tname!r}", name))
                    continue
                want = [consts.get(a, w.axes.get(a, -1)) for a in decl.shape]
                if list(got.shape) != want:
                    gaps.append(Gap("shape", cat, f"{name}: input {tname} has shape {got.shape}, the definition's "
                                    f"axes {decl.shape} give {want}", name))
                want_dt = ref.inputs[tname].dtype if ref is not None and tname in ref.inputs else decl.dtype
                if got.dtype != want_dt:
                    gaps.append(Gap("dtype", cat, f"{name}: input {tname} is {got.dtype}, expected {want_dt}", name))
    return gaps


def verify(observed: RecordSet, expected: RecordSet, *, model: str = "", against: str = "spec",
           compare_workloads: bool = False) -> VerifyReport:
    """Compare ``observed`` with ``expected`` per category; see the module docstring."""
    phases = [p for p in PHASES if observed.passes.get(p)]
    gaps_by_cat: dict[str, list[Gap]] = defaultdict(list)
    if not phases:
        gap = Gap("no_passes", "-", "the records hold no forward pass (nothing was traced)")
        return VerifyReport(model, against, [], [], [gap])
    checked = [p for p in phases if expected.passes.get(p)]
    for p in phases:
        if p not in checked:
            gaps_by_cat["-"].append(Gap("unexpected", "-", f"the expectation has no {p} pass to compare with", phase=p))

    def per_pass(rs: RecordSet, key: tuple[str, int | None, str]) -> float:
        c = rs.calls.get(key)
        return c.calls / rs.passes[key[2]] if c is not None else 0.0

    exp_keys = {k: c for k, c in expected.calls.items() if c.phase in checked}
    obs_keys = {k: c for k, c in observed.calls.items() if c.phase in checked}
    category_of = {c.definition: c.category for c in (*expected.calls.values(), *observed.calls.values())}
    exp_cats = {c.category for c in exp_keys.values()}
    obs_cats = {c.category for c in obs_keys.values()}
    # Unexpected observed definitions by (layer, phase, category, op_type), to pair with missing expected ones.
    strays: dict[tuple[int | None, str, str, str], list[str]] = defaultdict(list)
    for key, c in sorted(obs_keys.items(), key=lambda kv: kv[0][0]):
        if key not in exp_keys:
            strays[(c.layer, c.phase, c.category, c.op_type)].append(c.definition)
    paired: set[tuple[str, int | None, str]] = set()
    for cat in sorted(exp_cats - obs_cats):
        if cat not in OPTIONAL_CATEGORIES:
            defs = sorted({c.definition for c in exp_keys.values() if c.category == cat})
            gaps_by_cat[cat].append(Gap("missing_category", cat, f"{cat}: expected {', '.join(defs)}; none recorded"))
    for key, c in sorted(exp_keys.items(), key=lambda kv: (PHASES.index(kv[0][2]), kv[0][1] or -1, kv[0][0])):
        cat = c.category
        if cat not in obs_cats or cat in OPTIONAL_CATEGORIES:
            continue
        want = per_pass(expected, key)
        got = per_pass(observed, key)
        if got == want:
            continue
        if got == 0:
            others = strays.get((c.layer, c.phase, cat, c.op_type), [])
            if others:
                other = others.pop(0)
                paired.add((other, c.layer, c.phase))
                diff = _axes_diff(expected.definitions[c.definition], observed.definitions[other])
                gaps_by_cat[cat].append(Gap("shape", cat, f"{_where(c.layer, c.phase)}: expected {c.definition}, "
                                            f"found {other} ({diff})", c.definition, c.layer, c.phase))
            else:
                gaps_by_cat[cat].append(Gap("missing_definition", cat, f"{_where(c.layer, c.phase)}: {c.definition} "
                                            f"expected {_fmt(want)} call(s) per pass, found none",
                                            c.definition, c.layer, c.phase))
        else:
            gaps_by_cat[cat].append(Gap("calls", cat, f"{_where(c.layer, c.phase)}: {c.definition} expected "
                                        f"{_fmt(want)} call(s) per pass, found {_fmt(got)}",
                                        c.definition, c.layer, c.phase))
    for key, c in sorted(obs_keys.items(), key=lambda kv: (PHASES.index(kv[0][2]), kv[0][1] or -1, kv[0][0])):
        if key in exp_keys or key in paired or c.category in OPTIONAL_CATEGORIES:
            continue
        gaps_by_cat[c.category].append(Gap("unexpected", c.category, f"{_where(c.layer, c.phase)}: {c.definition} "
                                           f"recorded {_fmt(per_pass(observed, key))} call(s) per pass, not expected",
                                           c.definition, c.layer, c.phase))
    for g in _check_workloads(observed, expected, category_of, dtype_ref=True):
        gaps_by_cat[g.category].append(g)
    if compare_workloads:
        for g in _compare_workloads(observed, expected, category_of):
            gaps_by_cat[g.category].append(g)

    rows = []
    for cat in sorted(exp_cats | obs_cats | (gaps_by_cat.keys() - {"-"}),
                      key=lambda x: (CATEGORIES.index(x) if x in CATEGORIES else len(CATEGORIES), x)):
        status: Literal["required", "optional", "unexpected"] = (
            "optional" if cat in OPTIONAL_CATEGORIES else "required" if cat in exp_cats else "unexpected")
        e = [c for k, c in exp_keys.items() if c.category == cat]
        o = [c for k, c in obs_keys.items() if c.category == cat]
        rows.append(CategoryReport(
            category=cat, status=status,
            expected_definitions=sorted({c.definition for c in e}), found_definitions=sorted({c.definition for c in o}),
            expected_layers=len({c.layer for c in e if c.layer is not None}),
            found_layers=len({c.layer for c in o if c.layer is not None}),
            expected_calls_per_pass=sum(per_pass(expected, (c.definition, c.layer, c.phase)) for c in e),
            found_calls_per_pass=sum(per_pass(observed, (c.definition, c.layer, c.phase)) for c in o),
            gaps=gaps_by_cat.get(cat, []),
        ))
    all_gaps = gaps_by_cat.get("-", []) + [g for r in rows for g in r.gaps]
    return VerifyReport(model or str(observed.meta.get("model", "")), against, checked, rows, all_gaps)


def _compare_workloads(observed: RecordSet, expected: RecordSet, category_of: dict[str, str]) -> Iterable[Gap]:
    """Workloads (var axes and input shapes) of definitions both sets hold, as sets."""
    def axes(rs: RecordSet, name: str) -> set[str]:
        return {str(sorted(e.workload.axes.items())) for e in rs.workloads[name].values()}

    for name in sorted(observed.workloads.keys() & expected.workloads.keys()):
        only_obs = sorted(axes(observed, name) - axes(expected, name))
        only_exp = sorted(axes(expected, name) - axes(observed, name))
        if only_obs or only_exp:
            cat = category_of.get(name, "-")
            yield Gap("workload", cat, f"{name}: workloads differ; only observed {only_obs}, only expected {only_exp}",
                      name)
