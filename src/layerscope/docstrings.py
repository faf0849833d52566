"""Attribute docstrings as JSON-schema ``description``s, read only when a schema is generated.

Every result model documents its fields with a string under each attribute (PEP 257's "attribute docstrings").
pydantic's ``use_attribute_docstrings`` reads them from the source each time a model class is *defined*: on every
``import``, in every process, although only ``layerscope.app.schema`` (docs/schema/, ``make schema``) needs them.
That read (``inspect`` + ``tokenize`` on each class) was a fifth of ``layerscope estimate``'s run. Here the same
docstrings are read from the source when a JSON schema is asked for, through pydantic's ``json_schema_extra`` hook,
and nowhere else; the schemas come out as before (``tests/app/test_schema.py`` checks them byte for byte).

:data:`RESULT_CONFIG` is the config of result and request models: frozen, no unknown fields, the docstring hook,
and ``defer_build`` so that a model's validator is built the first time it is used, not when its module is
imported (a command imports many models it never instantiates).
"""

from __future__ import annotations

import ast
import functools
import inspect
import itertools
import textwrap
from typing import Any

from pydantic import BaseModel, ConfigDict


@functools.cache
def _own_docstrings(cls: type) -> dict[str, str]:
    """``{attribute: docstring}`` of the annotated attributes ``cls`` itself defines (cleaned as ``inspect.cleandoc``
    does); empty when the source cannot be read (a class made at run time, a frozen app)."""
    try:
        source = textwrap.dedent(inspect.getsource(cls))
    except (OSError, TypeError):
        return {}
    body = next((n.body for n in ast.parse(source).body if isinstance(n, ast.ClassDef)), [])
    docs: dict[str, str] = {}
    for node, after in itertools.pairwise(body):
        if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant) and isinstance(after.value.value, str)):
            docs[node.target.id] = inspect.cleandoc(after.value.value)
    return docs


def attribute_docstrings(cls: type) -> dict[str, str]:
    """``{field: docstring}`` for ``cls`` and the models it inherits from, a subclass's docstring winning."""
    docs: dict[str, str] = {}
    for base in reversed(cls.__mro__):
        if isinstance(base, type) and issubclass(base, BaseModel) and base is not BaseModel:
            docs.update(_own_docstrings(base))
    return docs


def describe_fields(schema: dict[str, Any], cls: type[BaseModel]) -> None:
    """``json_schema_extra`` hook: give each property of ``cls``'s schema its attribute docstring as
    ``description`` (an explicit ``Field(description=...)`` is kept), keyed by the field's serialization alias."""
    properties = schema.get("properties")
    if not isinstance(properties, dict):
        return
    docs = attribute_docstrings(cls)
    for name, field in cls.model_fields.items():
        doc = docs.get(name)
        key = field.serialization_alias or field.alias or name
        prop = properties.get(key)
        if (doc and isinstance(prop, dict) and field.description is None
                and not _repeats_ref(prop, field.annotation, doc)):
            prop["description"] = doc


def _repeats_ref(prop: dict[str, Any], annotation: Any, doc: str) -> bool:
    """Whether ``doc`` is the description the ``$ref``'d model already has: pydantic leaves such a repeat out."""
    return ("$ref" in prop and isinstance(annotation, type) and issubclass(annotation, BaseModel)
            and annotation.__doc__ is not None and inspect.cleandoc(annotation.__doc__) == doc)


#: Config of result and request models (see the module docstring).
RESULT_CONFIG = ConfigDict(frozen=True, extra="forbid", json_schema_extra=describe_fields, defer_build=True)

#: Config of the specs (model, hardware, workload, calibration, records): frozen, no unknown fields, validators
#: built on first use (``estimate`` never validates a calibration run's measurement tables, for one).
SPEC_CONFIG = ConfigDict(frozen=True, extra="forbid", defer_build=True)
