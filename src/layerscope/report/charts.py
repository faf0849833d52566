"""What every chart builder shares: the :class:`Chart` record, the plotly import (named by its extra when
missing), one layout and a summary table per document."""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType
from typing import Any

from layerscope.report.documents import ReportError
from layerscope.units import readable_seconds

__all__ = ["PLOTLY_EXTRA", "Chart", "Fact", "Section", "go", "layout", "left_out_note", "require_plotly",
           "seconds_text"]

#: The optional dependency group that installs plotly.
PLOTLY_EXTRA = "pip install 'layerscope[report]'"

#: One row of a document's summary table: a label and its value as text.
Fact = tuple[str, str]


@dataclass(frozen=True)
class Chart:
    """One plotly figure of a report, with a stable id (the HTML element's id) and its title."""

    id: str
    """A slug unique within its document (``roofline``, ``time-by-layer-prefill``)."""
    title: str
    """What the chart shows, in words."""
    figure: Any
    """The ``plotly.graph_objects.Figure``."""

    def traces(self) -> int:
        """Traces of the figure."""
        return len(self.figure.data)

    def points(self) -> int:
        """Data points over all traces (the longest of each trace's x and y)."""
        total = 0
        for trace in self.figure.data:
            total += max((len(v) for v in (getattr(trace, "x", None), getattr(trace, "y", None)) if v is not None),
                         default=0)
        return total


@dataclass(frozen=True)
class Section:
    """What a builder makes of one document: a summary table, its charts and what could not be drawn."""

    facts: list[Fact]
    """Label and value rows shown above the charts."""
    charts: list[Chart]
    """The charts, in the order shown; each has data."""
    notes: list[str]
    """What is missing from the document for a chart, or left off one, and why."""


def require_plotly() -> ModuleType:
    """plotly, or a :class:`ReportError` saying which extra installs it."""
    try:
        import plotly
        import plotly.graph_objects  # the figures' module; fails on a broken install too
    except ImportError:
        raise ReportError(f"the HTML report draws its charts with plotly, which is not installed: {PLOTLY_EXTRA}"
                          ) from None
    return plotly


def go() -> ModuleType:
    """``plotly.graph_objects`` (after :func:`require_plotly`), named as plotly's own examples name it."""
    require_plotly()
    import plotly.graph_objects

    return plotly.graph_objects


def layout(figure: Any, title: str, *, height: int = 420, **axes: Any) -> Any:
    """``figure`` with the report's look: white template, its title, a legend on the right, ``axes`` applied
    (``xaxis_title=…``, ``yaxis_type="log"``)."""
    axes.setdefault("margin", {"l": 70, "r": 30, "t": 60, "b": 60})
    figure.update_layout(title={"text": title, "x": 0.01}, template="plotly_white", height=height,
                         hovermode="closest", **axes)
    return figure


def seconds_text(seconds: float | None) -> str:
    """``seconds`` in a readable unit (``12.3 µs``, ``4.56 ms``, ``1.23 s``); ``n/a`` when unknown."""
    return readable_seconds(seconds, significant=3, missing="n/a")


def left_out_note(left_out: int, what: str, why: str) -> str | None:
    """A note that ``left_out`` items of ``what`` are not on a chart, and why (``None`` when none is)."""
    if left_out <= 0:
        return None
    return f"{left_out} {what} not drawn: {why}"
