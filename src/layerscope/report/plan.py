"""Charts of ``plan --json``: the valid plans ranked, latency against throughput per GPU, and why the others
were left out."""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

from layerscope.report.charts import Chart, Fact, Section, go, layout, seconds_text
from layerscope.report.documents import Document

__all__ = ["MAX_RANKED", "charts", "plan_label"]

#: Plans drawn in the ranking (the best first); the scatter shows every valid plan.
MAX_RANKED = 40


def plan_label(row: dict[str, Any]) -> str:
    """A plan in one short line: ``8 GPUs: tp4 pp2 ep1 dp1 ×2`` (the last figure the micro-batches)."""
    return (f"{row['gpus']} GPUs: tp{row['tensor_parallel']} pp{row['pipeline_parallel']} "
            f"ep{row['expert_parallel']} dp{row['data_parallel']} ×{row['micro_batches']}")


def charts(doc: Document) -> Section:
    """The plan's summary, its ranking, its latency-throughput scatter and its reasons for leaving plans out."""
    data = doc.data
    notes: list[str] = []
    out: list[Chart] = []
    if data["plans"]:
        out += [_ranking_chart(data), _tradeoff_chart(data)]
        if len(data["plans"]) > MAX_RANKED:
            notes.append(f"ranking: the best {MAX_RANKED} of {len(data['plans'])} valid plans drawn")
    else:
        notes.append("no valid plan: nothing to rank")
    if data["failures"]:
        out.append(_failures_chart(data))
    best = data["plans"][0] if data["plans"] else None
    facts: list[Fact] = [
        ("model", data["model"]), ("hardware", data["hardware"]),
        ("GPUs available", "any" if data["gpus_available"] is None else str(data["gpus_available"])),
        ("phase", data["phase"]), ("ranked by", data["objective"]),
        ("plans", f"{len(data['plans'])} valid, {len(data['failures'])} left out"),
    ]
    if best is not None:
        facts.append(("best", f"{plan_label(best)}, {seconds_text(best['latency_s'])}, "
                              f"{best['output_tokens_per_s_per_gpu']:.4g} tokens/s per GPU"))
    return Section(facts, out, notes)


def _ranking_chart(data: dict[str, Any]) -> Chart:
    rows = data["plans"][:MAX_RANKED]
    labels = [f"#{i + 1} {plan_label(row)}" for i, row in enumerate(rows)]
    g = go()
    from plotly.subplots import make_subplots

    figure = make_subplots(rows=1, cols=2, shared_yaxes=True, horizontal_spacing=0.04,
                           subplot_titles=("latency (ms)", "output tokens/s per GPU"))
    hover = [[100 * row["communication_share"], row["memory_per_gpu_bytes"] / 1e9] for row in rows]
    figure.add_trace(g.Bar(x=[row["latency_s"] * 1e3 for row in rows], y=labels, orientation="h", name="latency",
                           customdata=hover, marker_color="#1f77b4",
                           hovertemplate=("%{y}<br>%{x:.4g} ms, communication %{customdata[0]:.0f}%, "
                                          "%{customdata[1]:.3g} GB per GPU<extra></extra>")), row=1, col=1)
    figure.add_trace(g.Bar(x=[row["output_tokens_per_s_per_gpu"] for row in rows], y=labels, orientation="h",
                           name="tokens/s per GPU", marker_color="#ff7f0e",
                           hovertemplate="%{y}<br>%{x:.4g} tokens/s per GPU<extra></extra>"), row=1, col=2)
    title = f"Plans ranked by {data['objective']} (best on top)"
    layout(figure, title, height=max(320, 90 + 24 * len(rows)), showlegend=False,
           margin={"l": 260, "r": 30, "t": 80, "b": 50})
    figure.update_yaxes(autorange="reversed", type="category")
    return Chart("plan-ranking", title, figure)


def _tradeoff_chart(data: dict[str, Any]) -> Chart:
    rows = data["plans"]
    g = go()
    figure = g.Figure()
    for gpus in sorted({row["gpus"] for row in rows}):
        mine = [row for row in rows if row["gpus"] == gpus]
        figure.add_trace(g.Scatter(
            x=[row["latency_s"] * 1e3 for row in mine], y=[row["output_tokens_per_s_per_gpu"] for row in mine],
            mode="markers", name=f"{gpus} GPUs", marker={"size": 10, "line": {"width": 0.5, "color": "#222"}},
            customdata=[plan_label(row) for row in mine],
            hovertemplate="%{customdata}<br>%{x:.4g} ms, %{y:.4g} tokens/s per GPU<extra></extra>"))
    title = "Latency against throughput per GPU, every valid plan"
    layout(figure, title, xaxis_title="latency (ms)", yaxis_title="output tokens/s per GPU")
    return Chart("plan-tradeoff", title, figure)


def _failures_chart(data: dict[str, Any]) -> Chart:
    counts = Counter(_reason_kind(row["reason"]) for row in data["failures"])
    reasons = sorted(counts, key=lambda reason: counts[reason])
    g = go()
    figure = g.Figure(g.Bar(x=[counts[r] for r in reasons], y=reasons, orientation="h", name="plans left out",
                            marker_color="#7f7f7f", hovertemplate="%{y}: %{x} plans<extra></extra>"))
    title = "Plans left out, by reason"
    layout(figure, title, height=max(260, 80 + 30 * len(reasons)), xaxis_title="plans", showlegend=False,
           margin={"l": 320, "r": 30, "t": 60, "b": 50})
    return Chart("plan-failures", title, figure)


def _reason_kind(reason: str) -> str:
    """A failure's reason without its numbers, so that plans failing one constraint share a bar."""
    text = re.sub(r"\d+(?:\.\d+)?", "N", reason)
    return text if len(text) <= 70 else text[:67] + "…"
