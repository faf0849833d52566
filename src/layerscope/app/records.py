"""``workloads`` and ``verify``: operator workload records of a model, and their coverage.

:func:`workloads` takes one :class:`WorkloadsRequest` and returns one :class:`WorkloadsResult` (records derived
from the model's graph, or recorded from a captured run, written to ``out``); :func:`verify` takes one
:class:`VerifyRequest` and returns one :class:`VerifyResult` (``ok`` when the records cover what is expected).
They are the JSON contracts of ``layerscope workloads --json`` and ``layerscope verify --json`` (their schemas:
docs/schema/workloads.json, docs/schema/verify.json). Building and checking records is :mod:`layerscope.records`
(and :mod:`layerscope.capture.record_run` for a captured run); these verbs check the request, choose the source,
write the records and summarize them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel

from layerscope.app.requests import MODEL_CONFIG, ModelRef, ParallelPlan
from layerscope.errors import RecordsError

if TYPE_CHECKING:
    from layerscope.records import RecordSet
    from layerscope.records.verify import VerifyReport

__all__ = ["VerifyRequest", "VerifyResult", "WorkloadsRequest", "WorkloadsResult", "WorkloadsRun", "result_of",
           "run_workloads", "verify", "verify_result", "workloads"]

_RESULT_CONFIG = MODEL_CONFIG

#: MLA forms a graph-derived record set can be written in.
MLA_FORMS = ("naive", "absorbed")


class WorkloadsRequest(BaseModel):
    """Which model to record, how (derived from its graph, or recorded from a captured run), and where to."""

    model_config = MODEL_CONFIG

    model: ModelRef
    """Catalog name, Hugging Face id (local cache), ``config.json`` or checkpoint directory."""
    out: Path
    """Directory for ``definitions/``, ``workloads/`` and ``calls.json``."""
    from_graph: bool = False
    """Derive the records from the model's graph (no torch); else record a captured run."""
    layers: int | None = None
    """Keep only the first N decoder layers; ``None``: all of them."""
    dtype: str = "bf16"
    """``fp32``, ``bf16`` or ``fp16`` (graph: any layerscope dtype)."""
    device: str = "cpu"
    """``cpu`` or ``cuda`` (captured runs)."""
    batch: int = 1
    """Sequences per pass."""
    prompt_len: int = 128
    """Prompt tokens of the prefill."""
    decode_steps: int = 0
    """Greedy decode steps after the prefill."""
    random_weights: bool = False
    """Random weights even if a checkpoint exists (captured runs)."""
    seed: int = 0
    """Seed of the random weights and prompt tokens (captured runs)."""
    parallel: ParallelPlan = ParallelPlan()
    """How the model is split across devices (graph-derived records only: a run records what it runs)."""
    mla_form: str | None = None
    """MLA form of graph-derived records: ``naive`` (what HF runs) or ``absorbed``; ``None``: the graph's
    (absorbed decode, naive prefill)."""


class DefinitionRow(BaseModel):
    """The calls of one operator definition, summed."""

    model_config = _RESULT_CONFIG

    definition: str
    """flashinfer-bench-style definition name (``gemm_n2048_k2048``, …)."""
    op_type: str
    """Operator type (``gemm``, ``rmsnorm``, ``gqa_paged``, …)."""
    category: str
    """Operator category (``attention``, ``mlp``, ``moe_experts``, …)."""
    calls: int
    """Calls recorded, over every pass and layer."""
    layers: int
    """Decoder layers it was called in (0 for ops outside the layers)."""
    workloads: int
    """Distinct workloads (axis values) recorded for it."""


class WorkloadsResult(BaseModel):
    """The answer of ``layerscope workloads``: its ``--json`` output, a summary of the records written."""

    model_config = _RESULT_CONFIG

    out: str
    """The records directory written."""
    meta: dict[str, Any]
    """Where the records came from (``model``, ``source``: ``graph`` or ``capture``, ``dtype``, ``layers``,
    ``batch``, ``prompt_len``, ``decode_steps``, ``tp``, ``mla_form``, ``attention``, …), as ``calls.json`` holds it."""
    passes: dict[str, int]
    """Forward passes recorded per phase (``prefill``, ``decode``)."""
    definitions: int
    """Operator definitions written."""
    workloads: int
    """Workloads written, over every definition."""
    records: list[DefinitionRow]
    """One row per definition."""


@dataclass(frozen=True)
class WorkloadsRun:
    """What :func:`run_workloads` made: the records (written to ``out``) and what to know about the inputs
    (a prompt beyond the model's positions)."""

    records: RecordSet
    out: Path
    warnings: tuple[str, ...] = ()


def run_workloads(request: WorkloadsRequest) -> WorkloadsRun:
    """Make the records of ``request`` (from the graph, or a captured run) and write them to ``request.out``."""
    if request.from_graph:
        return _from_graph(request)
    if request.parallel.tensor_parallel != 1 or request.mla_form is not None:
        raise RecordsError("--tp and --mla-form apply to --from-graph only (a run records what it runs)")
    from layerscope.capture.record_run import record_workloads

    records = record_workloads(request.model, out=request.out, layers=request.layers, dtype=request.dtype,
                               device=request.device, batch=request.batch, prompt_len=request.prompt_len,
                               decode_steps=request.decode_steps, random_weights=request.random_weights,
                               seed=request.seed)
    return WorkloadsRun(records, request.out)


def _from_graph(request: WorkloadsRequest) -> WorkloadsRun:
    from layerscope.model import ModelSpec, load_model_spec
    from layerscope.records import records_from_spec
    from layerscope.workload import context_warnings, make_workload

    mla_form = request.mla_form
    if mla_form is not None and mla_form not in MLA_FORMS:
        raise RecordsError(f"--mla-form: unknown form {mla_form!r}; known: naive, absorbed")
    batch, prompt_len, decode_steps, layers = request.batch, request.prompt_len, request.decode_steps, request.layers
    for name, value, low in (("--batch", batch, 1), ("--prompt-len", prompt_len, 1),
                             ("--decode-steps", decode_steps, 0)):
        if value < low:
            raise RecordsError(f"{name}: {value} is out of range; must be >= {low}")
    model = request.model
    spec = model if isinstance(model, ModelSpec) else load_model_spec(model)
    if layers is not None and not 1 <= layers <= spec.num_layers:
        raise RecordsError(f"--layers: {layers} is out of range; the model has {spec.num_layers} decoder layers")
    workload = make_workload(phase="generate" if decode_steps else "prefill", batch=batch, prompt_len=prompt_len,
                             decode_steps=decode_steps)
    warnings = tuple(context_warnings(spec, workload))
    records = records_from_spec(spec, batch=batch, prompt_len=prompt_len, decode_steps=decode_steps,
                                dtype=request.dtype, tp=request.parallel.tensor_parallel,
                                layers=None if layers is None else range(layers),
                                mla_form=mla_form)  # type: ignore[arg-type]  # checked against MLA_FORMS
    config = None if isinstance(model, ModelSpec) else Path(model)
    records.write(request.out, inputs=(config,) if config is not None and config.is_file() else ())
    return WorkloadsRun(records, request.out, warnings)


def result_of(run: WorkloadsRun) -> WorkloadsResult:
    """The summary of the records made: one row per definition."""
    records = run.records
    per_def: dict[str, dict[str, Any]] = {}
    for c in records.sorted_calls():
        row = per_def.setdefault(c.definition, {"definition": c.definition, "op_type": c.op_type,
                                                "category": c.category, "calls": 0, "layers": set()})
        row["calls"] += c.calls
        if c.layer is not None:
            row["layers"].add(c.layer)
    rows = [DefinitionRow(**{**r, "layers": len(r["layers"]),
                             "workloads": len(records.workloads.get(r["definition"], {}))})
            for r in per_def.values()]
    return WorkloadsResult(out=str(run.out), meta=records.meta, passes=records.passes,
                           definitions=len(records.definitions), workloads=records.workload_count(), records=rows)


def workloads(request: WorkloadsRequest) -> WorkloadsResult:
    """Make and write the records of ``request`` (see :func:`run_workloads`) and summarize them."""
    return result_of(run_workloads(request))


# --- verify -----------------------------------------------------------------------------------------------


class VerifyRequest(BaseModel):
    """Which records to check, and against what: a model's spec, or another records directory (exactly one)."""

    model_config = MODEL_CONFIG

    traces: Path
    """Records directory (``workloads --out``, or a tracing directory)."""
    model: ModelRef | None = None
    """Verify against this model's spec (catalog name, HF id, ``config.json``, or a loaded ModelSpec)."""
    against: Path | None = None
    """Verify against another records directory."""
    dtype: str | None = None
    """Expected dtype (``None``: the records' own)."""
    compare_workloads: bool | None = None
    """Also compare workload axes (``None``: on with ``against``, off with ``model``)."""


class GapRow(BaseModel):
    """One way the observed records fall short of the expected ones."""

    model_config = _RESULT_CONFIG

    kind: Literal["no_passes", "missing_category", "missing_definition", "calls", "shape", "dtype", "unexpected",
                  "workload"]
    """What is wrong."""
    category: str
    """Operator category it is in (``-`` for the whole record set)."""
    message: str
    """What is wrong, in words."""
    definition: str | None
    """The definition concerned, if one."""
    layer: int | None
    """The decoder layer concerned, if one."""
    phase: str | None
    """The phase concerned, if one."""


class CategoryRow(BaseModel):
    """Expected and found coverage of one operator category."""

    model_config = _RESULT_CONFIG

    category: str
    """Operator category."""
    status: Literal["required", "optional", "unexpected"]
    """``required`` (the model must run it), ``optional`` (never fails a check) or ``unexpected`` (found only)."""
    expected_definitions: list[str]
    """Definitions expected."""
    found_definitions: list[str]
    """Definitions found."""
    expected_layers: int
    """Decoder layers the category must appear in (0 for ops outside the layers)."""
    found_layers: int
    """Decoder layers it was found in."""
    expected_calls_per_pass: int | float
    """Calls per forward pass, summed over layers and the phases checked (``0`` where none is expected)."""
    found_calls_per_pass: int | float
    """Calls per forward pass found (``0`` where none is found)."""
    gaps: list[GapRow]
    """The category's gaps."""
    ok: bool
    """No gap."""


class VerifyResult(BaseModel):
    """The answer of ``layerscope verify``: its ``--json`` output (exit 1 when ``ok`` is false)."""

    model_config = _RESULT_CONFIG

    model: str
    """The model the records are of."""
    against: str
    """``spec``, or the records directory compared with."""
    phases: list[str]
    """Phases checked (``prefill``, ``decode``)."""
    ok: bool
    """The records cover what is expected: no gap."""
    categories: list[CategoryRow]
    """One row per operator category."""
    gaps: list[GapRow]
    """Every gap."""


def verify_report(request: VerifyRequest) -> VerifyReport:
    """The records layer's :class:`~layerscope.records.verify.VerifyReport` of ``request``."""
    from layerscope.records import RecordSet, expected_from_spec
    from layerscope.records import verify as check

    if (request.model is None) == (request.against is None):
        raise RecordsError("give exactly one of --model (verify against the spec) and --against (another records dir)")
    observed = RecordSet.read(request.traces)
    if request.model is not None:
        from layerscope.model import ModelSpec, load_model_spec

        spec = request.model if isinstance(request.model, ModelSpec) else load_model_spec(request.model)
        expected = expected_from_spec(spec, observed, dtype=request.dtype)
        return check(observed, expected, model=spec.name, against="spec",
                     compare_workloads=bool(request.compare_workloads))
    assert request.against is not None
    expected = RecordSet.read(request.against)
    return check(observed, expected, against=str(request.against),
                 compare_workloads=True if request.compare_workloads is None else request.compare_workloads)


def verify_result(report: VerifyReport) -> VerifyResult:
    """The result model of a verify report."""
    return VerifyResult.model_validate(report.to_dict())


def verify(request: VerifyRequest) -> VerifyResult:
    """Check the records of ``request.traces`` against a model's spec or another records directory."""
    return verify_result(verify_report(request))
