"""Self-contained HTML reports with plotly charts of the commands' ``--json`` outputs (``layerscope report``;
docs/report.md).

Each input is recognized by its fields (:data:`KINDS`), validated against its command's result model and drawn by
its kind's builder (one module per kind: ``estimate``, ``simulate``, ``validate``, ``compare``, ``plan``,
``serving``); :mod:`~layerscope.report.page` writes them as one page with plotly.js and the data inlined. plotly is
the optional extra ``report``; only the builders import it.
"""

from __future__ import annotations

from layerscope.report.build import ReportResult, build_parts, report
from layerscope.report.charts import Chart, Section, require_plotly
from layerscope.report.documents import KINDS, Document, ReportError, ReportKind, load_document

__all__ = ["KINDS", "Chart", "Document", "ReportError", "ReportKind", "ReportResult", "Section", "build_parts",
           "load_document", "report", "require_plotly"]
