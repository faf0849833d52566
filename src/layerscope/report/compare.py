"""Charts of ``compare --json``: predicted against measured per op (``--sim S --real R``), or two traces' kernel
time by category and the kernels that moved most (``compare A B``)."""

from __future__ import annotations

from typing import Any

from layerscope.report.accuracy import Joined, error_chart, predicted_vs_measured_chart
from layerscope.report.charts import Chart, Fact, Section, go, layout, seconds_text
from layerscope.report.documents import Document

__all__ = ["TOP_KERNELS", "charts", "trace_charts"]

#: Kernels shown in the largest-change chart of a trace comparison.
TOP_KERNELS = 20


def _percent(error: float | None) -> str:
    return "n/a" if error is None else f"{100 * error:+.1f}%"


def charts(doc: Document) -> Section:
    """A simulation against a capture: the summary, the op scatter and each op's error."""
    data = doc.data
    summary = data["summary"]
    notes = list(summary["notes"])
    rows = [Joined(op["op"], op["kind"], _seconds(op["predicted_us"]), _seconds(op["measured_us"]))
            for op in data["ops"]]
    out: list[Chart] = []
    scatter = predicted_vs_measured_chart(rows, "predicted-vs-measured", "Predicted vs measured per op", notes)
    if scatter is not None:
        out.append(scatter)
    bars = error_chart([op["op"] for op in data["ops"]], [op["error"] for op in data["ops"]], "error-by-op",
                       "Error per op", [f"{op['op']} ({op['kind']}, {op['rule']})" for op in data["ops"]])
    if bars is not None:
        out.append(bars)
    forward = "n/a"
    if summary["forward_error"] is not None:
        forward = (f"predicted {seconds_text(_seconds(summary['forward_predicted_us']))}, measured "
                   f"{seconds_text(_seconds(summary['forward_measured_us']))} ({_percent(summary['forward_error'])})")
    facts: list[Fact] = [
        ("join", f"{summary['join']}" + (f", {summary['phase']}" if summary["phase"] else "")),
        ("ops joined", f"{summary['ops_joined']} (only simulated: {summary['only_sim']}, only measured: "
                       f"{summary['only_real']})"),
        ("per op", f"median |error| {_percent(summary['median_abs_error'])}, p90 {_percent(summary['p90_abs_error'])}"),
        ("forward", forward), ("iterations", str(summary["iterations"])),
    ]
    return Section(facts, out, notes)


def _seconds(us: float | None) -> float | None:
    return None if us is None else us * 1e-6


def trace_charts(doc: Document) -> Section:
    """Two traces: their summary deltas, kernel time per category in A and B, and the kernels whose time moved
    most."""
    data = doc.data
    facts: list[Fact] = []
    for row in data["summary"]:
        pct = "" if row["delta_pct"] is None else f" ({row['delta_pct']:+.1f}%)"
        facts.append((row["metric"], f"A {row['a']:.6g}, B {row['b']:.6g}{pct}"))
    out = [chart for chart in (_category_chart(data), _top_kernels_chart(data)) if chart is not None]
    notes = [] if out else ["neither trace has GPU kernels to compare"]
    return Section(facts, out, notes)


def _category_chart(data: dict[str, Any]) -> Chart | None:
    rows = data["by_category"]
    if not rows:
        return None
    g = go()
    figure = g.Figure()
    for side in ("a", "b"):
        figure.add_trace(g.Bar(x=[row["category"] for row in rows], y=[row[f"total_ms_{side}"] for row in rows],
                               name=f"trace {side.upper()}",
                               hovertemplate=f"%{{x}} in {side.upper()}: %{{y:.4g}} ms<extra></extra>"))
    title = "Kernel time by category"
    layout(figure, title, barmode="group", yaxis_title="time (ms)", xaxis_type="category")
    return Chart("kernel-time-by-category", title, figure)


def _top_kernels_chart(data: dict[str, Any]) -> Chart | None:
    rows = sorted(data["by_name"], key=lambda row: -abs(row["total_ms_delta"]))[:TOP_KERNELS]
    if not rows:
        return None
    rows.reverse()
    g = go()
    short = [row["name"] if len(row["name"]) <= 60 else row["name"][:57] + "…" for row in rows]
    figure = g.Figure(g.Bar(
        x=[row["total_ms_delta"] for row in rows], y=short, orientation="h",
        marker_color=["#d62728" if row["total_ms_delta"] > 0 else "#2ca02c" for row in rows],
        customdata=[[row["name"], row["total_ms_a"], row["total_ms_b"]] for row in rows], name="B − A",
        hovertemplate="%{customdata[0]}<br>A %{customdata[1]:.4g} ms, B %{customdata[2]:.4g} ms<extra></extra>"))
    title = f"Kernels whose time changed most (B − A, top {len(rows)})"
    layout(figure, title, height=max(300, 60 + 26 * len(rows)), xaxis_title="time B − A (ms)", showlegend=False,
           margin={"l": 380, "r": 30, "t": 60, "b": 60})
    return Chart("kernel-time-change", title, figure)
