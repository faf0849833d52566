"""Predicted against measured, per op: the charts ``validate`` and ``compare --sim --real`` share."""

from __future__ import annotations

from dataclasses import dataclass

from layerscope.report.charts import Chart, go, layout, left_out_note

__all__ = ["Joined", "error_chart", "predicted_vs_measured_chart"]


@dataclass(frozen=True)
class Joined:
    """One op found in both the prediction and the measurement."""

    name: str
    kind: str
    predicted_s: float | None
    measured_s: float | None

    @property
    def error(self) -> float | None:
        """``(predicted − measured) / measured``: negative when the prediction is too fast."""
        if self.predicted_s is None or not self.measured_s:
            return None
        return (self.predicted_s - self.measured_s) / self.measured_s


def predicted_vs_measured_chart(rows: list[Joined], chart_id: str, title: str, notes: list[str]) -> Chart | None:
    """Log-log scatter of predicted against measured time (µs) per op, coloured by kind, over the line
    predicted = measured and the ±25% band; rows without both times positive are counted in ``notes``."""
    placed = [(r, r.predicted_s, r.measured_s) for r in rows
              if r.predicted_s is not None and r.measured_s is not None and r.predicted_s > 0 and r.measured_s > 0]
    note = left_out_note(len(rows) - len(placed), "ops", "a log axis needs a positive predicted and measured time")
    if note:
        notes.append(f"{title}: {note}")
    if not placed:
        return None
    g = go()
    figure = g.Figure()
    times = [t for _, predicted, measured in placed for t in (predicted, measured)]
    low, high = min(times) * 1e6 / 1.5, max(times) * 1e6 * 1.5
    for factor, name, dash in ((1.0, "predicted = measured", "dash"), (1.25, "+25%", "dot"), (0.75, "−25%", "dot")):
        figure.add_trace(g.Scatter(x=[low, high], y=[low * factor, high * factor], mode="lines", name=name,
                                   line={"color": "#888", "dash": dash}, hoverinfo="skip"))
    for kind in sorted({r.kind for r, _, _ in placed}):
        mine = [item for item in placed if item[0].kind == kind]
        figure.add_trace(g.Scatter(
            x=[measured * 1e6 for _, _, measured in mine], y=[predicted * 1e6 for _, predicted, _ in mine],
            mode="markers", name=kind, marker={"size": 9, "line": {"width": 0.5, "color": "#222"}},
            customdata=[[r.name, 100 * (r.error or 0.0)] for r, _, _ in mine],
            hovertemplate=("%{customdata[0]}<br>measured %{x:.4g} µs, predicted %{y:.4g} µs<br>"
                           "error %{customdata[1]:+.1f}%<extra></extra>")))
    layout(figure, title, height=520, xaxis_type="log", yaxis_type="log", xaxis_title="measured (µs)",
           yaxis_title="predicted (µs)")
    return Chart(chart_id, title, figure)


def error_chart(labels: list[str], errors: list[float | None], chart_id: str, title: str,
                hover: list[str] | None = None) -> Chart | None:
    """Bars of the signed error (%) per label, ``(predicted − measured) / measured``; labels without an error
    are left out; ``None`` when none has one."""
    kept = [(label, error, (hover or labels)[i]) for i, (label, error) in enumerate(zip(labels, errors, strict=True))
            if error is not None]
    if not kept:
        return None
    g = go()
    figure = g.Figure(g.Bar(
        x=[label for label, _, _ in kept], y=[100 * error for _, error, _ in kept],
        marker_color=["#d62728" if error < 0 else "#1f77b4" for _, error, _ in kept],
        customdata=[text for _, _, text in kept], name="error",
        hovertemplate="%{customdata}<br>error %{y:+.1f}%<extra></extra>"))
    layout(figure, title, height=460, yaxis_title="error (%): negative = predicted too fast", showlegend=False,
           xaxis_type="category", xaxis_tickangle=-45)
    return Chart(chart_id, title, figure)
