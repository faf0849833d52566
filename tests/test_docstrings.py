"""Attribute docstrings become JSON-schema descriptions only when a schema is generated."""

from __future__ import annotations

from pydantic import BaseModel, Field

from layerscope.docstrings import RESULT_CONFIG, attribute_docstrings


class _Inner(BaseModel):
    """An inner model."""

    model_config = RESULT_CONFIG

    n: int
    """How many."""


class _Base(BaseModel):
    model_config = RESULT_CONFIG

    a: int
    """From the base."""
    b: str = "x"
    """Overridden below."""


class _Child(_Base):
    b: str = "y"
    """The child's own."""
    explicit: int = Field(0, description="Given explicitly.")
    """Not used: an explicit description wins."""
    inner: _Inner
    """An inner model."""
    other: _Inner | None = None
    """Another inner model, described here."""
    plain: float = 0.0


def test_docstrings_follow_inheritance_and_the_subclass_wins() -> None:
    assert attribute_docstrings(_Child) == {
        "a": "From the base.", "b": "The child's own.", "explicit": "Not used: an explicit description wins.",
        "inner": "An inner model.", "other": "Another inner model, described here."}


def test_the_schema_carries_them_as_pydantic_use_attribute_docstrings_would() -> None:
    props = _Child.model_json_schema(mode="serialization")["properties"]
    assert props["a"]["description"] == "From the base."
    assert props["b"]["description"] == "The child's own."
    assert props["explicit"]["description"] == "Given explicitly."
    # Repeating the referenced model's own docstring is left out, as pydantic does.
    assert props["inner"] == {"$ref": "#/$defs/_Inner"}
    assert props["other"]["description"] == "Another inner model, described here."
    assert "description" not in props["plain"]


def test_models_keep_no_description_at_run_time() -> None:
    # The docstrings are read on schema generation only: defining the class reads no source.
    assert _Child.model_fields["a"].description is None
