"""The result schemas checked into docs/schema/ are the ones the models generate (``make schema``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from layerscope.app.schema import RESULTS, schema, schema_markdown, schema_text

DOCS = Path(__file__).resolve().parents[2] / "docs" / "schema"


@pytest.mark.parametrize("name", RESULTS.names())
def test_checked_in_schema_is_generated(name):
    assert (DOCS / f"{name}.json").read_text() == schema_text(name), "run `make schema`"
    assert (DOCS / f"{name}.md").read_text() == schema_markdown(name), "run `make schema`"


def test_no_stray_schema_files():
    assert {p.stem for p in DOCS.iterdir()} == set(RESULTS.names())


@pytest.mark.parametrize("name", RESULTS.names())
def test_every_field_is_described(name):
    """Attribute docstrings reach the schema: every property of every result model has a description."""
    doc = schema(name)
    models = [doc, *doc.get("$defs", {}).values()]
    missing = [f"{m.get('title')}.{field}" for m in models for field, sub in m.get("properties", {}).items()
               if not sub.get("description") and "$ref" not in sub]
    assert not missing, missing
    assert json.loads(schema_text(name)) == doc
    table = schema_markdown(name).split("|---|---|---|\n", 1)[1]
    assert table.count("\n| `") + table.startswith("| `") + table.count("| *one of:*") >= 1, "an empty field table"
