"""One self-contained HTML page: plotly.js inlined once in the head, each document a section (its summary table,
notes and charts), every chart's data inlined as plotly writes it. Nothing is fetched when the page opens."""

from __future__ import annotations

import html
from dataclasses import dataclass

from layerscope.report.charts import Section
from layerscope.report.documents import Document

__all__ = ["PLOT_CONFIG", "Part", "chart_div_id", "render_page"]

#: plotly.js options of every chart: no logo, resizing with the window.
PLOT_CONFIG = {"displaylogo": False, "responsive": True}

_STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 0 auto; max-width: 1280px;
       padding: 1rem 1.5rem 3rem; color: #222; }
h1 { font-size: 1.6rem; margin-bottom: 0.2rem; }
h2 { font-size: 1.25rem; margin-top: 2.5rem; border-bottom: 1px solid #ddd; padding-bottom: 0.3rem; }
table.facts { border-collapse: collapse; margin: 0.5rem 0 1rem; font-size: 0.92rem; }
table.facts th { text-align: left; padding: 0.15rem 1rem 0.15rem 0; color: #555; font-weight: 600; }
table.facts td { padding: 0.15rem 0; }
ul.notes { color: #7a4b00; font-size: 0.9rem; }
nav ul { font-size: 0.92rem; }
.chart { margin: 0.5rem 0 1.5rem; }
code { background: #f4f4f4; padding: 0 0.2rem; }
"""


@dataclass(frozen=True)
class Part:
    """One document and what its builder made of it."""

    document: Document
    section: Section


def chart_div_id(index: int, chart_id: str) -> str:
    """The HTML id of chart ``chart_id`` of the ``index``-th document (stable: tests and links find it)."""
    return f"doc{index}-{chart_id}"


def render_page(parts: list[Part], title: str) -> str:
    """The whole page as text."""
    from plotly.offline import get_plotlyjs

    esc = html.escape
    toc = "".join(f'<li><a href="#doc{i}">{esc(part.document.kind.name)}: {esc(part.document.path.name)}</a></li>'
                  for i, part in enumerate(parts))
    body = [f"<h1>{esc(title)}</h1>",
            f"<p>Made by <code>layerscope report</code> from {len(parts)} document(s); every chart is interactive "
            "(hover, zoom, drag; double-click resets) and the page needs no network.</p>",
            f"<nav><ul>{toc}</ul></nav>"]
    for i, part in enumerate(parts):
        doc, section = part.document, part.section
        body.append(f'<section id="doc{i}" data-kind="{esc(doc.kind.name)}">')
        body.append(f'<h2>{esc(doc.kind.name)}: <code title="{esc(str(doc.path))}">{esc(doc.path.name)}</code></h2>')
        rows = "".join(f"<tr><th>{esc(label)}</th><td>{esc(value)}</td></tr>" for label, value in section.facts)
        body.append(f'<table class="facts">{rows}</table>')
        if section.notes:
            body.append('<ul class="notes">' + "".join(f"<li>{esc(note)}</li>" for note in section.notes) + "</ul>")
        for chart in section.charts:
            div = chart.figure.to_html(full_html=False, include_plotlyjs=False, div_id=chart_div_id(i, chart.id),
                                       config=PLOT_CONFIG)
            body.append(f'<div class="chart" data-chart="{esc(chart.id)}">{div}</div>')
        body.append("</section>")
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            f"<title>{esc(title)}</title>\n<style>{_STYLE}</style>\n"
            f"<script type=\"text/javascript\">{get_plotlyjs()}</script>\n</head>\n<body>\n"
            + "\n".join(body) + "\n</body>\n</html>\n")
