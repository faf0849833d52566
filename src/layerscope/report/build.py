"""``layerscope report``: documents in, one self-contained HTML file out, and a :class:`ReportResult` saying
what it holds."""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Sequence
from pathlib import Path

from pydantic import BaseModel

from layerscope.docstrings import RESULT_CONFIG
from layerscope.report.charts import Section, require_plotly
from layerscope.report.documents import Document, ReportError, load_document
from layerscope.report.page import Part, chart_div_id, render_page

__all__ = ["DEFAULT_TITLE", "ChartRow", "ReportResult", "SectionRow", "build_parts", "report", "section_of"]

DEFAULT_TITLE = "layerscope report"

_CONFIG = RESULT_CONFIG


class ChartRow(BaseModel):
    """One chart of the page."""

    model_config = _CONFIG

    id: str
    """The chart's HTML element id (``doc0-roofline``)."""
    title: str
    """What it shows."""
    traces: int
    """plotly traces drawn."""
    points: int
    """Data points over its traces."""


class SectionRow(BaseModel):
    """One input document's section."""

    model_config = _CONFIG

    input: str
    """The document's path, as given."""
    kind: str
    """Its kind (``estimate``, ``simulate``, ``validate``, ``compare``, ``compare-traces``, ``plan``, ``serving``)."""
    charts: list[ChartRow]
    """Its charts, in page order."""
    notes: list[str]
    """What could not be drawn from it, and why."""


class ReportResult(BaseModel):
    """The answer of ``layerscope report``: its ``--json`` output."""

    model_config = _CONFIG

    out: str
    """The HTML file written."""
    bytes: int
    """Its size, bytes (plotly.js itself is about 4.8 MB of it)."""
    title: str
    """The page's title."""
    sections: list[SectionRow]
    """One per input, in the order given."""


def section_of(doc: Document) -> Section:
    """The charts of ``doc`` by its kind's builder."""
    module, _, name = doc.kind.builder.partition(":")
    builder: Callable[[Document], Section] = getattr(importlib.import_module(module), name)
    return builder(doc)


def build_parts(paths: Sequence[str | os.PathLike[str]]) -> list[Part]:
    """Every input read, recognized, validated and drawn (plotly checked first, so a missing extra is said
    before any input is read)."""
    require_plotly()
    if not paths:
        raise ReportError("give at least one --json output to report on")
    parts = []
    for path in paths:
        doc = load_document(path)
        parts.append(Part(doc, section_of(doc)))
    return parts


def report(paths: Sequence[str | os.PathLike[str]], out: str | os.PathLike[str], *,
           title: str = DEFAULT_TITLE) -> ReportResult:
    """Write the report of ``paths`` to ``out`` (atomically; never over one of the inputs or a file they name)
    and say what it holds."""
    from layerscope.units import atomic_write, check_output

    target = Path(out)
    check_output(target, tuple(paths))
    parts = build_parts(paths)
    text = render_page(parts, title).encode("utf-8")
    with atomic_write(target, "wb", inputs=tuple(paths)) as handle:
        handle.write(text)
    sections = [SectionRow(input=str(part.document.path), kind=part.document.kind.name, notes=part.section.notes,
                           charts=[ChartRow(id=chart_div_id(i, c.id), title=c.title, traces=c.traces(),
                                            points=c.points()) for c in part.section.charts])
                for i, part in enumerate(parts)]
    return ReportResult(out=str(target), bytes=len(text), title=title, sections=sections)
