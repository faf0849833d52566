"""The JSON schemas of every verb's result, generated from the result models (attribute docstrings become
``description``s) and checked into docs/schema/; ``tests/app/test_schema.py`` fails when they drift.

Regenerate with ``make schema`` (``python -m layerscope.app.schema docs/schema``).
"""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from layerscope.errors import OutputError
from layerscope.registry import Registry
from layerscope.units import atomic_write

#: Result models by the command whose ``--json`` prints them: ``module:Class`` (imported on use).
RESULTS: Registry[str] = Registry("result schema", OutputError, {
    "estimate": "layerscope.app.estimate:EstimateResult",
    "simulate": "layerscope.app.simulate:SimulateResult",
    "plan": "layerscope.app.plan:PlanResult",
    "sweep": "layerscope.app.sweep:SweepResult",
    "serving": "layerscope.app.serving:ServeResult",
    "serving-max-rate": "layerscope.app.serving:MaxRateResult",
    "serving-grid": "layerscope.app.serving:GridResult",
    "capture": "layerscope.app.capture:CaptureResult",
    "workloads": "layerscope.app.records:WorkloadsResult",
    "verify": "layerscope.app.records:VerifyResult",
    "query": "layerscope.app.analyze:QueryResult",
    "analyze": "layerscope.app.analyze:AnalyzeResult",
    "analyze-ranks": "layerscope.app.ranks:AnalyzeRanksResult",
    "compare": "layerscope.app.analyze:CompareResult",
    "models": "layerscope.app.catalogs:ModelsResult",
    "hardware": "layerscope.app.catalogs:HardwareResult",
    "validate": "layerscope.app.validate:ValidateResult",
    "demo": "layerscope.app.demo:DemoResult",
    "calibrate": "layerscope.app.calibrate:CalibrateResult",
    "calibrate-table": "layerscope.app.table_fit:TableFitResult",
    "report": "layerscope.report.build:ReportResult",
})


def result_model(name: str) -> type[BaseModel]:
    """The result model registered as ``name``."""
    module, _, cls = RESULTS.lookup(name).partition(":")
    model = getattr(importlib.import_module(module), cls)
    assert isinstance(model, type) and issubclass(model, BaseModel)
    return model


def schema(name: str) -> dict[str, Any]:
    """The JSON schema (draft 2020-12, as pydantic writes it) of result ``name``'s ``--json`` output."""
    return result_model(name).model_json_schema(mode="serialization")


def schema_text(name: str) -> str:
    """:func:`schema` as the text checked in: sorted keys, two-space indent, a final newline."""
    return json.dumps(schema(name), indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def _type_of(node: dict[str, Any], defs: dict[str, Any]) -> str:
    if "$ref" in node:
        return node["$ref"].rsplit("/", 1)[-1]
    if "anyOf" in node:
        return " or ".join(_type_of(n, defs) for n in node["anyOf"])
    if "enum" in node:
        return " | ".join(json.dumps(v) for v in node["enum"])
    kind = node.get("type", "any")
    if kind == "array":
        return f"list of {_type_of(node.get('items', {}), defs)}"
    if kind == "object" and isinstance(node.get("additionalProperties"), dict):
        return f"object of {_type_of(node['additionalProperties'], defs)}"
    return str(kind)


def _rows(node: dict[str, Any], defs: dict[str, Any], prefix: str, seen: tuple[str, ...]) -> list[str]:
    """One Markdown row per field, nested objects and lists of objects walked with a dotted path."""
    rows = []
    for field, sub in node.get("properties", {}).items():
        path = f"{prefix}{field}"
        target = sub.get("items", sub)
        ref = target.get("$ref", "").rsplit("/", 1)[-1]
        # pydantic leaves out a field's description when it repeats its model's: take the model's
        text = sub.get("description") or (defs.get(ref, {}).get("description", "") if "items" not in sub else "")
        description = " ".join(text.split()).replace("|", "\\|")
        rows.append(f"| `{path}` | {_type_of(sub, defs).replace('|', '&#124;')} | {description} |")
        if ref and ref not in seen and "properties" in defs.get(ref, {}):
            rows.extend(_rows(defs[ref], defs, f"{path}[]." if "items" in sub else f"{path}.", (*seen, ref)))
    return rows


def schema_markdown(name: str) -> str:
    """The fields of result ``name`` as a Markdown table (path, type, description), from :func:`schema`."""
    doc = schema(name)
    defs = doc.get("$defs", {})
    head = [f"# `layerscope {name} --json`", "",
            "Generated from the result model by `make schema`; do not edit. The JSON schema beside it "
            f"(`{name}.json`) is the contract: field names, units and meaning stay across releases, new fields "
            "may be added, a value that does not apply is `null`.", "",
            " ".join(doc.get("description", "").split()), "", "| field | type | meaning |", "|---|---|---|"]
    return "\n".join([*head, *_top_rows(doc, defs)]) + "\n"


def _top_rows(doc: dict[str, Any], defs: dict[str, Any]) -> list[str]:
    """The rows of a result that is an object, a list of objects (``[].field``), or one of several shapes
    (a sub-table per shape)."""
    if "properties" in doc:
        return _rows(doc, defs, "", ())
    if "anyOf" in doc:
        rows = []
        for shape in doc["anyOf"]:
            ref = shape.get("$ref", "").rsplit("/", 1)[-1]
            description = " ".join(defs.get(ref, {}).get("description", "").split())
            rows += [f"| *one of:* `{ref}` | object | {description} |", *_rows(defs.get(ref, {}), defs, "", (ref,))]
        return rows
    items = doc.get("items", {})
    ref = items.get("$ref", "").rsplit("/", 1)[-1]
    if ref:
        return _rows(defs.get(ref, {}), defs, "[].", (ref,))
    return [f"| `[]` | {_type_of(items, defs).replace('|', '&#124;')} | one row per element |"]


def write_schemas(directory: str | Path) -> list[Path]:
    """Write ``<name>.json`` and ``<name>.md`` for every result into ``directory``; the paths written."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for name in RESULTS.names():
        for path, text in ((out / f"{name}.json", schema_text(name)), (out / f"{name}.md", schema_markdown(name))):
            with atomic_write(path, "w") as fh:
                fh.write(text)
            paths.append(path)
    return paths


if __name__ == "__main__":  # pragma: no cover - `make schema`
    for written in write_schemas(sys.argv[1] if len(sys.argv) > 1 else "docs/schema"):
        print(written)
