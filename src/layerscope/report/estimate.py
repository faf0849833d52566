"""Charts of ``estimate --json``: time by op kind and by layer, and the roofline with every op as a point."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from layerscope.report.charts import Chart, Fact, Section, go, layout, left_out_note, seconds_text
from layerscope.report.documents import Document

__all__ = ["by_kind_chart", "by_layer_charts", "charts", "kind_colors", "roofline_chart", "roofs"]

#: Category of the ops outside the decoder layers (embedding, final norm, lm_head, sampling) on the layer axis.
OUTSIDE_LAYERS = "outside layers"
#: Figure-key prefixes of the compute roofs (``docs/estimate-json.md``, "figures").
PEAK_PREFIXES = ("engines.peak_flops_per_s.", "engines.vector_flops_per_s")
#: Figure keys of a memory level's bandwidth: ``memory.<level>.bandwidth_bytes_per_s``.
BANDWIDTH_SUFFIX = ".bandwidth_bytes_per_s"


def kind_colors(kinds: list[str]) -> dict[str, str]:
    """One colour per op kind, the same in every chart of a report (plotly's qualitative palette, cycled)."""
    from plotly.colors import qualitative

    palette = qualitative.Plotly + qualitative.D3
    return {kind: palette[i % len(palette)] for i, kind in enumerate(sorted(set(kinds)))}


def charts(doc: Document) -> Section:
    """The estimate's summary, its time by kind, by layer (one chart per phase) and its roofline."""
    data = doc.data
    ops = data["ops"]
    colors = kind_colors([op["kind"] for op in ops])
    out = [by_kind_chart(data, colors), *by_layer_charts(ops, colors)]
    notes: list[str] = []
    roofline = roofline_chart(data, colors, notes)
    if roofline is not None:
        out.append(roofline)
    return Section(_facts(data), out, notes)


def _facts(data: dict[str, Any]) -> list[Fact]:
    work = data["workload"]
    memory = data["memory_bytes"]
    facts: list[Fact] = [
        ("model", data["model"]), ("hardware", data["hardware"]), ("cost model", data["cost_model"]),
        ("workload", f"{work['phase']}, batch {work['batch']}, prompt {work['prompt_len']}, context "
                     f"{work['context']}, {work['weight_dtype']} weights"),
        ("TTFT", seconds_text(data["ttft_s"])), ("TPOT", seconds_text(data["tpot_s"])),
        ("end to end", seconds_text(data["e2e_s"])), ("ops", str(data["totals"]["ops"])),
        ("memory", f"{memory['total'] / 1e9:.3g} GB of {data['memory_capacity_bytes'] / 1e9:.3g} GB"
                   f"{'' if data['fits_in_memory'] else ' (does not fit)'}"),
    ]
    return facts


def by_kind_chart(data: dict[str, Any], colors: dict[str, str]) -> Chart:
    """Horizontal bars: each op kind's summed time (µs), largest on top, its share of the total in the hover."""
    rows = sorted(data["by_kind"], key=lambda row: row["time_s"])
    g = go()
    figure = g.Figure(g.Bar(
        x=[row["time_s"] * 1e6 for row in rows], y=[row["kind"] for row in rows], orientation="h",
        marker_color=[colors.get(row["kind"], "#636efa") for row in rows],
        customdata=[[row["ops"], 100 * row["share"]] for row in rows],
        hovertemplate="%{y}: %{x:.4g} µs, %{customdata[1]:.1f}% of the time, %{customdata[0]} ops<extra></extra>",
        name="time by kind"))
    title = "Time by op kind"
    layout(figure, title, height=max(260, 40 + 32 * len(rows)), xaxis_title="time (µs)", showlegend=False)
    return Chart("time-by-kind", title, figure)


def _layer_label(layer: int | None) -> str:
    return OUTSIDE_LAYERS if layer is None else f"L{layer}"


def by_layer_charts(ops: list[dict[str, Any]], colors: dict[str, str]) -> list[Chart]:
    """Per phase, stacked bars of each decoder layer's time (µs) by op kind; the ops outside the layers in one
    bar at the end."""
    phases = list(dict.fromkeys(op["phase"] for op in ops))
    out = []
    g = go()
    for phase in phases:
        mine = [op for op in ops if op["phase"] == phase]
        layers = sorted({op["layer"] for op in mine if op["layer"] is not None})
        labels = [_layer_label(layer) for layer in layers]
        if any(op["layer"] is None for op in mine):
            labels.append(OUTSIDE_LAYERS)
        time_us: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        for op in mine:
            time_us[op["kind"]][_layer_label(op["layer"])] += op["time_s"] * 1e6
        figure = g.Figure()
        for kind in sorted(time_us, key=lambda k: -sum(time_us[k].values())):
            figure.add_trace(g.Bar(x=labels, y=[time_us[kind].get(label, 0.0) for label in labels], name=kind,
                                   marker_color=colors[kind],
                                   hovertemplate=f"{kind} in %{{x}}: %{{y:.4g}} µs<extra></extra>"))
        title = f"Time by layer ({phase})" if len(phases) > 1 else "Time by layer"
        layout(figure, title, barmode="stack", xaxis_title="decoder layer", yaxis_title="time (µs)",
               xaxis_type="category")
        out.append(Chart(f"time-by-layer-{phase}", title, figure))
    return out


def roofs(figures: dict[str, dict[str, Any]]) -> tuple[dict[str, float], dict[str, float]]:
    """The hardware's roofs among the estimate's figures: compute peaks (FLOP/s) by name (``bf16``, ``vector``)
    and memory bandwidths (bytes/s) by level (``hbm``)."""
    peaks: dict[str, float] = {}
    bandwidths: dict[str, float] = {}
    for key, figure in figures.items():
        value = figure.get("value")
        if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
            continue
        if key.startswith(PEAK_PREFIXES[0]):
            peaks[key.removeprefix(PEAK_PREFIXES[0])] = float(value)
        elif key == PEAK_PREFIXES[1]:
            peaks["vector"] = float(value)
        elif key.startswith("memory.") and key.endswith(BANDWIDTH_SUFFIX):
            bandwidths[key.removeprefix("memory.").removesuffix(BANDWIDTH_SUFFIX)] = float(value)
    return peaks, bandwidths


def roofline_chart(data: dict[str, Any], colors: dict[str, str], notes: list[str]) -> Chart | None:
    """Every op with FLOPs as a point (arithmetic intensity = FLOPs / bytes, achieved FLOP/s = FLOPs / time)
    under the hardware's roofs: a horizontal line per compute peak (per dtype, and the vector units) and a line
    of slope 1 per memory bandwidth (attainable FLOP/s = bandwidth × intensity; Williams, Waterman & Patterson,
    CACM 2009). Ops without FLOPs or bytes cannot sit on log axes and are counted in ``notes``."""
    ops = data["ops"]
    placed = [op for op in ops if op["flops"] > 0 and op["bytes"] > 0 and op["time_s"] > 0]
    note = left_out_note(len(ops) - len(placed), "ops without FLOPs or bytes (embedding lookups, KV writes, "
                         "collectives)", "a roofline point needs both")
    if note:
        notes.append(f"roofline: {note}")
    peaks, bandwidths = roofs(data["figures"])
    if not peaks or not bandwidths:
        notes.append("roofline: the estimate's figures name no compute peak or no memory bandwidth, so there is "
                     "no roof to draw")
    if not placed:
        notes.append("roofline: no op has both FLOPs and bytes")
        return None
    g = go()
    figure = g.Figure()
    intensity = [op["flops"] / op["bytes"] for op in placed]
    x_low, x_high = min(intensity) / 4, max(intensity) * 4
    for bandwidth in bandwidths.values():
        for peak in peaks.values():
            x_low, x_high = min(x_low, peak / bandwidth / 4), max(x_high, peak / bandwidth * 4)
    top = max(peaks.values(), default=max(op["flops"] / op["time_s"] for op in placed))
    for name, bandwidth in sorted(bandwidths.items()):
        ridge = top / bandwidth
        figure.add_trace(g.Scatter(
            x=[x_low, max(ridge, x_low)], y=[bandwidth * x_low, bandwidth * max(ridge, x_low)], mode="lines",
            line={"color": "#444", "dash": "dash"}, name=f"{name} {bandwidth / 1e12:.3g} TB/s",
            hovertemplate=f"{name} bandwidth {bandwidth / 1e9:.4g} GB/s<extra></extra>"))
    for name, peak in sorted(peaks.items(), key=lambda item: -item[1]):
        figure.add_trace(g.Scatter(
            x=[x_low, x_high], y=[peak, peak], mode="lines", line={"color": "#888", "dash": "dot"},
            name=f"{name} peak {peak / 1e12:.4g} TFLOP/s",
            hovertemplate=f"{name} peak {peak / 1e12:.4g} TFLOP/s<extra></extra>"))
    phases = list(dict.fromkeys(op["phase"] for op in placed))
    symbols = ("circle", "diamond", "square", "triangle-up")
    for p, phase in enumerate(phases):
        for kind in sorted({op["kind"] for op in placed if op["phase"] == phase}):
            mine = [op for op in placed if op["phase"] == phase and op["kind"] == kind]
            figure.add_trace(g.Scatter(
                x=[op["flops"] / op["bytes"] for op in mine], y=[op["flops"] / op["time_s"] for op in mine],
                mode="markers", name=kind if len(phases) == 1 else f"{phase} · {kind}",
                marker={"color": colors[kind], "size": 8, "symbol": symbols[p % len(symbols)],
                        "line": {"width": 0.5, "color": "#222"}},
                customdata=[[op["name"], op["time_s"] * 1e6, op["bound"]] for op in mine],
                hovertemplate=("%{customdata[0]}<br>%{x:.3g} FLOP/byte, %{y:.3s}FLOP/s<br>"
                               "%{customdata[1]:.4g} µs, %{customdata[2]}-bound<extra></extra>")))
    title = "Roofline: every op against the hardware's roofs"
    layout(figure, title, height=520, xaxis_type="log", yaxis_type="log",
           xaxis_title="arithmetic intensity (FLOP/byte)", yaxis_title="achieved FLOP/s")
    return Chart("roofline", title, figure)
