"""Records of operator workloads: flashinfer-bench-compatible definitions and workloads, plus call counts.

On disk (``write``/``read``), under one directory:

* ``definitions/<op_type>/<name>.json``: a :class:`Definition` (name, op_type, axes, inputs,
  outputs, reference, description, tags), loadable by flashinfer-bench's models;
* ``workloads/<op_type>/<name>.jsonl``: one :class:`WorkloadEntry` per distinct workload (var
  axes values, input shapes and dtypes), ``solution`` and ``evaluation`` null;
* ``calls.json``: what flashinfer-bench has no place for: calls per (definition, layer, phase),
  forward passes per phase, and where the records came from (``meta``).

Every file is written atomically and byte-deterministically (sorted, no timestamps).
"""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ValidationError, model_validator

from layerscope.docstrings import SPEC_CONFIG
from layerscope.errors import RecordsError
from layerscope.records.optypes import INDEX_DTYPE_NAME, OpType, op_type
from layerscope.units import DType, atomic_write, make_output_dir, note_input

#: Version of the ``calls.json`` layout.
CALLS_FORMAT = 1
#: Phases in report order.
PHASES: tuple[str, ...] = ("prefill", "decode")
#: Namespace of the deterministic workload uuids.
_UUID_NAMESPACE = uuid.UUID("8a7f3f4e-2c1b-5d6e-9f00-6c61796572ff")

_DTYPE_NAMES = {"float8_e4m3fn": "float8_e4m3", "float8_e5m2fnuz": "float8_e5m2"}


def dtype_name(dtype: DType | str) -> str:
    """flashinfer-bench's name of a dtype (``bfloat16``, ``float8_e4m3``, ``int64`` …)."""
    name = dtype.torch_name if isinstance(dtype, DType) else str(dtype).removeprefix("torch.")
    return _DTYPE_NAMES.get(name, name)


class Axis(BaseModel):
    """One axis of a definition: ``const`` with its value, or ``var`` (set per workload)."""

    model_config = SPEC_CONFIG

    type: Literal["const", "var"]
    value: int | None = None
    """The value of a const axis (> 0); absent for a var axis."""
    description: str | None = None

    @model_validator(mode="after")
    def _check(self) -> Axis:
        if self.type == "const" and (self.value is None or self.value <= 0):
            raise ValueError(f"a const axis needs a positive value (got {self.value})")
        if self.type == "var" and self.value is not None:
            raise ValueError("a var axis has no value; its values live in the workloads")
        return self


class TensorDecl(BaseModel):
    """A tensor of a definition: shape as axis names, dtype name."""

    model_config = SPEC_CONFIG

    shape: list[str]
    dtype: str
    description: str | None = None


class Definition(BaseModel):
    """A flashinfer-bench definition: one operator instance up to its var axes."""

    model_config = SPEC_CONFIG

    name: str
    op_type: str
    axes: dict[str, Axis]
    inputs: dict[str, TensorDecl]
    outputs: dict[str, TensorDecl]
    reference: str
    """Python source defining ``run(...)``, the op's PyTorch reference."""
    description: str = ""
    tags: list[str] = []

    @model_validator(mode="after")
    def _check(self) -> Definition:
        for kind, tensors in (("input", self.inputs), ("output", self.outputs)):
            for tname, decl in tensors.items():
                unknown = [a for a in decl.shape if a not in self.axes]
                if unknown:
                    raise ValueError(f"{kind} {tname!r} of {self.name} names undefined axes {unknown}")
        return self

    def const_axes(self) -> dict[str, int]:
        return {k: a.value for k, a in self.axes.items() if a.type == "const" and a.value is not None}

    def var_axes(self) -> list[str]:
        return [k for k, a in self.axes.items() if a.type == "var"]


class InputDesc(BaseModel):
    """One input of a workload: random data of this shape and dtype (flashinfer-bench ``RandomInput``
    with the shape and dtype written out, which its loader ignores)."""

    model_config = SPEC_CONFIG

    type: Literal["random"] = "random"
    shape: list[int]
    dtype: str


class WorkloadSpec(BaseModel):
    model_config = SPEC_CONFIG

    uuid: str
    axes: dict[str, int]
    inputs: dict[str, InputDesc]


class WorkloadEntry(BaseModel):
    """One line of a workload JSONL file (a flashinfer-bench workload-only trace)."""

    model_config = SPEC_CONFIG

    definition: str
    workload: WorkloadSpec
    solution: None = None
    evaluation: None = None


class CallCount(BaseModel):
    """Calls of one definition in one layer (``None``: outside the decoder layers) and phase."""

    model_config = SPEC_CONFIG

    definition: str
    op_type: str
    category: str
    layer: int | None
    phase: str
    calls: int


@dataclass(frozen=True)
class OpCall:
    """One operator call as a source (graph or recorder) sees it, before it is named.

    ``params`` holds the const axes and tags (``impl``), ``var`` the var axes; ``shapes`` and
    ``dtypes`` the inputs the source observed (the rest follow from the axes and ``dtypes_by_role``).
    """

    op_type: str
    category: str
    params: Mapping[str, int | str]
    var: Mapping[str, int]
    dtypes_by_role: Mapping[str, str]
    """dtype name per tensor role: ``act``, ``weight`` (``index`` is always int64)."""
    shapes: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    dtypes: Mapping[str, str] = field(default_factory=dict)


def _role_dtype(role: str, by_role: Mapping[str, str]) -> str:
    if role == "index":
        return INDEX_DTYPE_NAME
    return by_role.get(role) or by_role["act"]


def make_definition(op: OpType, params: Mapping[str, int | str], by_role: Mapping[str, str]) -> Definition:
    """The :class:`Definition` of ``op`` at ``params``, tensors typed by ``by_role``."""
    consts = op.consts(params)
    axes = {a: Axis(type="const", value=consts[a], description=d) for a, d in op.const_axes.items()}
    axes.update({a: Axis(type="var", description=d) for a, d in op.var_axes.items()})

    def decls(tensors: Mapping[str, Any]) -> dict[str, TensorDecl]:
        return {n: TensorDecl(shape=list(t.shape), dtype=_role_dtype(t.role, by_role),
                              description=t.description or None) for n, t in tensors.items()}

    tags = [f"op_type:{op.op_type}"] + [f"{t}:{params[t]}" for t in op.tags if t in params]
    return Definition(name=op.name(params), op_type=op.op_type, axes=axes, inputs=decls(op.inputs),
                      outputs=decls(op.outputs), reference=op.reference, description=op.description, tags=tags)


def workload_uuid(definition: str, axes: Mapping[str, int], inputs: Mapping[str, InputDesc]) -> str:
    """A uuid determined by the workload's content, so equal workloads get equal ids everywhere."""
    key = json.dumps({"definition": definition, "axes": dict(axes),
                      "inputs": {k: v.model_dump() for k, v in inputs.items()}}, sort_keys=True)
    return str(uuid.uuid5(_UUID_NAMESPACE, key))


def _phase_key(phase: str) -> tuple[int, str]:
    return (PHASES.index(phase) if phase in PHASES else len(PHASES), phase)


def _call_key(c: CallCount) -> tuple[Any, ...]:
    return (_phase_key(c.phase), -1 if c.layer is None else c.layer, c.category, c.definition)


class RecordSet:
    """Definitions, deduplicated workloads, per-(definition, layer, phase) call counts and passes."""

    def __init__(self, meta: Mapping[str, Any] | None = None) -> None:
        self.meta: dict[str, Any] = dict(meta or {})
        """Where the records came from: ``model``, ``source`` (capture/graph/trace), ``dtype``, ``layers`` …"""
        self.definitions: dict[str, Definition] = {}
        self.workloads: dict[str, dict[str, WorkloadEntry]] = {}
        """definition name -> uuid -> workload."""
        self.calls: dict[tuple[str, int | None, str], CallCount] = {}
        self.passes: dict[str, int] = {}
        """Forward passes per phase."""

    def add_pass(self, phase: str, n: int = 1) -> None:
        self.passes[phase] = self.passes.get(phase, 0) + n

    def add(self, call: OpCall, layer: int | None, phase: str, n: int = 1) -> str:
        """Record ``n`` calls of ``call`` in ``layer`` and ``phase``; returns the definition name."""
        op = op_type(call.op_type)
        name = op.name(call.params)
        definition = self.definitions.get(name)
        if definition is None:
            definition = self.definitions[name] = make_definition(op, call.params, call.dtypes_by_role)
        values: dict[str, int] = {**definition.const_axes(), **{k: int(v) for k, v in call.var.items()}}
        missing = [a for a in definition.var_axes() if a not in values]
        if missing:
            raise RecordsError(f"{name}: a call without var axes {', '.join(missing)}")
        derived = op.shapes(values)
        inputs = {}
        for tname, decl in op.inputs.items():
            shape = call.shapes.get(tname, derived[tname])
            dtype = call.dtypes.get(tname) or _role_dtype(decl.role, call.dtypes_by_role)
            inputs[tname] = InputDesc(shape=list(shape), dtype=dtype)
        axes = {a: values[a] for a in definition.var_axes()}
        wid = workload_uuid(name, axes, inputs)
        per_def = self.workloads.setdefault(name, {})
        if wid not in per_def:
            per_def[wid] = WorkloadEntry(definition=name, workload=WorkloadSpec(uuid=wid, axes=axes, inputs=inputs))
        key = (name, layer, phase)
        prev = self.calls.get(key)
        self.calls[key] = CallCount(definition=name, op_type=op.op_type, category=call.category, layer=layer,
                                    phase=phase, calls=n + (prev.calls if prev else 0))
        return name

    # -- queries -------------------------------------------------------------------------------

    def sorted_calls(self) -> list[CallCount]:
        return sorted(self.calls.values(), key=_call_key)

    def categories(self) -> dict[str, set[str]]:
        """Category -> definition names recorded in it."""
        out: dict[str, set[str]] = {}
        for c in self.calls.values():
            out.setdefault(c.category, set()).add(c.definition)
        return out

    def workload_count(self) -> int:
        return sum(len(w) for w in self.workloads.values())

    # -- files ---------------------------------------------------------------------------------

    def write(self, out_dir: str | os.PathLike[str], inputs: Iterable[str | os.PathLike[str]] = ()) -> list[Path]:
        """Write every file under ``out_dir`` (created if missing; its parent must exist); returns the paths."""
        root = Path(out_dir)
        parent = root.parent if str(root.parent) else Path(".")
        if not parent.is_dir():
            raise RecordsError(f"output directory {str(parent)!r} does not exist")
        if root.exists() and not root.is_dir():
            raise RecordsError(f"output path {str(root)!r} is not a directory")
        srcs = tuple(inputs)
        written: list[Path] = []
        for name in sorted(self.definitions):
            d = self.definitions[name]
            path = root / "definitions" / d.op_type / f"{name}.json"
            self._write(path, json.dumps(d.model_dump(mode="json", exclude_none=True), indent=2) + "\n", srcs)
            written.append(path)
            entries = sorted(self.workloads.get(name, {}).values(),
                             key=lambda e: (sorted(e.workload.axes.items()), e.workload.uuid))
            lines = "".join(json.dumps(e.model_dump(mode="json"), separators=(",", ":")) + "\n" for e in entries)
            wpath = root / "workloads" / d.op_type / f"{name}.jsonl"
            self._write(wpath, lines, srcs)
            written.append(wpath)
        head = {
            "format": CALLS_FORMAT,
            "meta": dict(sorted(self.meta.items())),
            "passes": {p: self.passes[p] for p in sorted(self.passes, key=_phase_key)},
        }
        # One call per line: thousands of rows stay readable and diffable.
        rows = ",\n".join("  " + json.dumps(c.model_dump(mode="json"), separators=(", ", ": "))
                          for c in self.sorted_calls())
        text = json.dumps(head, indent=1)[:-2] + ',\n "calls": [\n' + rows + "\n ]\n}\n"
        cpath = root / "calls.json"
        self._write(cpath, text, srcs)
        written.append(cpath)
        return written

    @staticmethod
    def _write(path: Path, text: str, inputs: tuple[str | os.PathLike[str], ...]) -> None:
        make_output_dir(path.parent)
        with atomic_write(path, "w", inputs=inputs) as fh:
            fh.write(text)

    @classmethod
    def read(cls, directory: str | os.PathLike[str]) -> RecordSet:
        """Read a directory written by :meth:`write` (or by ``layerscope.tracing``)."""
        root = Path(directory)
        calls_path = root / "calls.json"
        if not root.is_dir():
            raise RecordsError(f"records directory {str(root)!r} does not exist")
        if not calls_path.is_file():
            raise RecordsError(f"{str(root)!r} holds no calls.json: not a layerscope records directory")
        note_input(root)
        try:
            summary = json.loads(calls_path.read_text(encoding="utf-8"))
            if summary.get("format") != CALLS_FORMAT:
                raise RecordsError(f"{calls_path}: unknown format {summary.get('format')!r}; known: {CALLS_FORMAT}")
            rs = cls(summary.get("meta", {}))
            rs.passes = {str(k): int(v) for k, v in summary.get("passes", {}).items()}
            for raw in summary.get("calls", []):
                c = CallCount.model_validate(raw)
                rs.calls[(c.definition, c.layer, c.phase)] = c
            for path in sorted((root / "definitions").glob("*/*.json")):
                d = Definition.model_validate_json(path.read_text(encoding="utf-8"))
                rs.definitions[d.name] = d
            for path in sorted((root / "workloads").glob("*/*.jsonl")):
                for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                    if not line.strip():
                        continue
                    try:
                        e = WorkloadEntry.model_validate_json(line)
                    except ValidationError as exc:
                        raise RecordsError(f"{path}:{lineno}: not a workload: {exc.errors()[0]['msg']}") from None
                    rs.workloads.setdefault(e.definition, {})[e.workload.uuid] = e
        except (ValidationError, OSError, TypeError, ValueError) as exc:
            raise RecordsError(f"cannot read records in {str(root)!r}: {exc}") from None
        unknown = sorted({c.definition for c in rs.calls.values()} - rs.definitions.keys())
        if unknown:
            raise RecordsError(f"{calls_path}: calls of definitions with no definition file: {', '.join(unknown)}")
        return rs


def digest(directory: str | os.PathLike[str]) -> str:
    """sha256 over every file of a records directory (relative path and bytes), for determinism checks."""
    h = hashlib.sha256()
    root = Path(directory)
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        h.update(str(path.relative_to(root)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()
