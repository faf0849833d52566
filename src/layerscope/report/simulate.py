"""Charts of ``simulate --json``: the engine sweep (makespan and speedup by engine count) and how busy the engines
and the memory bandwidth were."""

from __future__ import annotations

from typing import Any

from layerscope.report.charts import Chart, Fact, Section, go, layout, seconds_text
from layerscope.report.documents import Document

__all__ = ["LOWER_BOUNDS", "charts", "sweep_chart", "utilization_chart"]

#: The sweep rows' lower bounds on the makespan, drawn under it where the document has them.
LOWER_BOUNDS = (("bandwidth_bound_ns", "bound: memory traffic / bandwidth"),
                ("dependencies_bound_ns", "bound: longest dependency chain"),
                ("compute_bound_ns", "bound: engine time / engines"))


def charts(doc: Document) -> Section:
    """The simulation's summary, its sweep curve and its utilization by engine count."""
    data = doc.data
    notes = []
    if len(data["sweep"]) == 1:
        notes.append("the sweep has one engine count (simulate --engines LO..HI sweeps a range)")
    return Section(_facts(data), [sweep_chart(data), utilization_chart(data)], notes)


def _facts(data: dict[str, Any]) -> list[Fact]:
    best = min(data["sweep"], key=lambda row: row["makespan_ns"])
    facts: list[Fact] = [
        ("model", data["model"]), ("hardware", data["hardware"]), ("graph", data["graph"]),
        ("ops", f"{data['ops']} ({data['dependencies']} dependencies)"), ("cost model", data["cost_model"]),
        ("policy", data["policy"] + (", engines share the bandwidth" if data["share_bandwidth"] else "")),
        ("sum of op times", seconds_text(data["sum_of_op_times_ns"] * 1e-9)),
        ("best makespan", f"{seconds_text(best['makespan_ns'] * 1e-9)} on {best['engines']} engines "
                          f"({best['speedup']:.3g}x)"),
        ("engines used", f"{data['engines_used']} (the fewest within 2% of the best)"),
    ]
    if data.get("curve"):  # the question asked (split or add engines) and why the curve has its shape
        facts.append(("why this shape", str(data["curve"])))
    return facts


def sweep_chart(data: dict[str, Any]) -> Chart:
    """Makespan (µs, left axis) and speedup over one engine (right axis) by engine count; the sum of the ops'
    times (one engine, no overlap) as a reference line."""
    from plotly.subplots import make_subplots

    g = go()
    rows = data["sweep"]
    engines = [row["engines"] for row in rows]
    figure = make_subplots(specs=[[{"secondary_y": True}]])
    limits = [f", {row['bound']}-bound" if row.get("bound") else "" for row in rows]
    figure.add_trace(g.Scatter(x=engines, y=[row["makespan_ns"] / 1e3 for row in rows], mode="lines+markers",
                               name="makespan", customdata=limits,
                               hovertemplate="%{x} engines: %{y:.4g} µs%{customdata}<extra></extra>"),
                     secondary_y=False)
    figure.add_trace(g.Scatter(x=engines, y=[row["speedup"] for row in rows], mode="lines+markers",
                               name="speedup", line={"dash": "dot"},
                               hovertemplate="%{x} engines: %{y:.3g}x<extra></extra>"), secondary_y=True)
    figure.add_trace(g.Scatter(x=[engines[0], engines[-1]], y=[data["sum_of_op_times_ns"] / 1e3] * 2, mode="lines",
                               name="sum of op times", line={"color": "#888", "dash": "dash"},
                               hovertemplate="ops one after another: %{y:.4g} µs<extra></extra>"), secondary_y=False)
    for key, name in LOWER_BOUNDS:
        if all(isinstance(row.get(key), (int, float)) for row in rows):
            figure.add_trace(g.Scatter(x=engines, y=[row[key] / 1e3 for row in rows], mode="lines", name=name,
                                       line={"width": 1, "dash": "dot"},
                                       hovertemplate=f"{name}: %{{y:.4g}} µs on %{{x}} engines<extra></extra>"),
                             secondary_y=False)
    title = "Engine sweep: makespan and speedup"
    layout(figure, title, xaxis_title="engines", xaxis_dtick=1)
    figure.update_yaxes(title_text="makespan (µs)", rangemode="tozero", secondary_y=False)
    figure.update_yaxes(title_text="speedup over 1 engine", rangemode="tozero", secondary_y=True)
    return Chart("engine-sweep", title, figure)


def utilization_chart(data: dict[str, Any]) -> Chart:
    """Engine utilization (busy engine-time over engines × makespan) and memory-bandwidth utilization (bytes
    moved over what the bandwidth could move in the makespan), in percent, by engine count."""
    g = go()
    rows = data["sweep"]
    engines = [row["engines"] for row in rows]
    figure = g.Figure()
    for key, name in (("engine_utilization", "engines busy"), ("bandwidth_utilization", "bandwidth used")):
        figure.add_trace(g.Scatter(x=engines, y=[100 * row[key] for row in rows], mode="lines+markers", name=name,
                                   hovertemplate=f"{name}: %{{y:.1f}}% on %{{x}} engines<extra></extra>"))
    title = "Engine sweep: utilization"
    layout(figure, title, xaxis_title="engines", yaxis_title="utilization (%)", xaxis_dtick=1,
           yaxis_range=[0, 105])
    return Chart("engine-utilization", title, figure)
