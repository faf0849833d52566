"""Charts of ``serving --json``: the latency CDFs (TTFT, TPOT, E2E) and, per engine, KV blocks held, batch size
and queue length over time.

``serving --json`` carries the run's percentiles; the per-request latencies are in the table it names
(``requests_table``, written by ``--requests-out``) and the per-step counters in the trace it names (``trace``,
written by ``--out``). Both are read where they exist (a relative path from the working directory, else from the
document's folder); without the table the CDFs show the percentiles only, without the trace there is no time
chart, and the section's notes say so."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from layerscope.report.charts import Chart, Fact, Section, go, layout
from layerscope.report.documents import Document, ReportError

__all__ = ["COUNTERS", "MAX_POINTS", "charts", "engine_series", "latencies", "linked_file"]

#: The serving trace's counter tracks (``trace.serving_writer``), and the panel each is drawn in.
COUNTERS = {"engine kv blocks": "KV blocks held", "engine batch sequences": "sequences in the step",
            "engine running": "requests running", "engine queue length": "requests waiting"}
#: Points per series drawn; longer runs are cut into this many bins, each drawn as its largest value.
MAX_POINTS = 4000
#: The three latency CDFs: the requests table's column (seconds), the metrics' prefix (``median_<prefix>_ms``, …)
#: and the panel's title.
LATENCIES = (("ttft_s", "ttft", "TTFT (ms)"), ("tpot_s", "tpot", "TPOT (ms)"), ("e2el_s", "e2el", "E2E latency (ms)"))


def linked_file(doc: Document, value: str | None) -> Path | None:
    """A file the document names: as written (from the working directory), else beside the document."""
    if not value:
        return None
    path = Path(value)
    for candidate in (path, doc.path.parent / path):
        if candidate.is_file():
            return candidate
    return None


def charts(doc: Document) -> Section:
    """The run's summary, its latency CDFs and its counters over time."""
    data = doc.data
    notes: list[str] = []
    out = [_cdf_chart(data, latencies(doc, notes))]
    series = engine_series(doc, notes)
    if series:
        out.append(_time_chart(series, notes))
    return Section(_facts(data), out, notes)


def _facts(data: dict[str, Any]) -> list[Fact]:
    m = data["metrics"]
    facts: list[Fact] = [
        ("model", data["model"]), ("hardware", data["hardware"]),
        ("scheduler", f"{data['scheduler']}, {data['engines']} engine(s): {', '.join(data['roles'])}"),
        ("requests", f"{m['completed']} of {data['requests']} completed in {m['duration_s']:.4g} s"),
        ("throughput", f"{m['request_throughput']:.4g} requests/s, {m['output_throughput']:.4g} output tokens/s"),
        ("TTFT", f"median {m['median_ttft_ms']:.4g} ms, p99 {m['p99_ttft_ms']:.4g} ms"),
        ("TPOT", f"median {m['median_tpot_ms']:.4g} ms, p99 {m['p99_tpot_ms']:.4g} ms"),
        ("E2E", f"median {m['median_e2el_ms']:.4g} ms, p99 {m['p99_e2el_ms']:.4g} ms"),
        ("KV cache", f"{data['kv_capacity_tokens']} tokens; mean usage {100 * m['mean_kv_usage']:.2f}%, max "
                     f"{100 * m['max_kv_usage']:.2f}%"),
        ("preemptions", str(m["preemptions"])),
    ]
    if m["request_goodput"] is not None:
        facts.append(("goodput", f"{m['request_goodput']:.4g} requests/s ({100 * (m['goodput_share'] or 0):.1f}% "
                                 "meet the SLO)"))
    return facts


def latencies(doc: Document, notes: list[str]) -> dict[str, list[float]] | None:
    """Each request's TTFT, TPOT and E2E in seconds (finite values only) from the requests table the document
    names; ``None`` (and a note) where it names none or the file is gone."""
    named = doc.data.get("requests_table")
    path = linked_file(doc, named)
    if path is None:
        notes.append("latency CDFs: the median, p90 and p99 only; "
                     + (f"the per-request table {named!r} was not found" if named else
                        "the run wrote no per-request table (serving --requests-out FILE.csv gives every request)"))
        return None
    import pyarrow as pa

    from layerscope.units import note_input

    note_input(path)
    try:
        if path.suffix.lower() == ".parquet":
            from layerscope.trace.tables import read_parquet

            table = read_parquet(path)
        else:
            import pyarrow.csv as pcsv

            table = pcsv.read_csv(path)
    except (pa.ArrowException, OSError) as exc:
        raise ReportError(f"cannot read the per-request table {str(path)!r} named by {str(doc.path)!r}: {exc}"
                          ) from None
    out: dict[str, list[float]] = {}
    for column, _, _ in LATENCIES:
        if column not in table.column_names:
            raise ReportError(f"the per-request table {str(path)!r} has no column {column!r}")
        values = table.column(column).to_pylist()
        out[column] = [float(v) for v in values if isinstance(v, (int, float)) and math.isfinite(v)]
    return out


def _cdf_chart(data: dict[str, Any], per_request: dict[str, list[float]] | None) -> Chart:
    from plotly.subplots import make_subplots

    g = go()
    figure = make_subplots(rows=1, cols=3, subplot_titles=[title for _, _, title in LATENCIES],
                           horizontal_spacing=0.07)
    metrics = data["metrics"]
    for col, (column, prefix, title) in enumerate(LATENCIES, start=1):
        if per_request is not None:
            values = sorted(v * 1e3 for v in per_request[column])
            n = len(values)
            figure.add_trace(g.Scatter(x=values, y=[(i + 1) / n for i in range(n)], mode="lines",
                                       line_shape="hv", name=title, showlegend=False,
                                       hovertemplate=f"{title.split(' (')[0]} ≤ %{{x:.4g}} ms: %{{y:.1%}} of "
                                                     "requests<extra></extra>"), row=1, col=col)
        else:
            points = [(metrics[f"median_{prefix}_ms"], 0.5), (metrics[f"p90_{prefix}_ms"], 0.9),
                      (metrics[f"p99_{prefix}_ms"], 0.99)]
            kept = [(x, y) for x, y in points if x is not None]
            figure.add_trace(g.Scatter(x=[x for x, _ in kept], y=[y for _, y in kept], mode="lines+markers",
                                       name=title, showlegend=False,
                                       hovertemplate="p%{y:.0%}: %{x:.4g} ms<extra></extra>"), row=1, col=col)
        figure.update_xaxes(title_text="ms", row=1, col=col)
    figure.update_yaxes(range=[0, 1.02], tickformat=".0%")
    figure.update_yaxes(title_text="share of requests", row=1, col=1)
    title = "Latency CDFs" + ("" if per_request is not None else " (percentiles of serving --json)")
    layout(figure, title, height=380)
    return Chart("latency-cdfs", title, figure)


def engine_series(doc: Document, notes: list[str]) -> dict[str, dict[str, tuple[list[float], list[float]]]]:
    """Per counter (:data:`COUNTERS`) and engine, the step start times (s) and values from the trace the document
    names; empty (and a note) where it names none or the file is gone."""
    named = doc.data.get("trace")
    path = linked_file(doc, named)
    if path is None:
        notes.append("KV, batch and queue over time: " + (f"the trace {named!r} was not found" if named else
                     "the run wrote no trace (serving --out FILE.json.gz records every step)"))
        return {}
    from layerscope.trace.readers import read_trace

    tables = read_trace(path)
    process = {row["upid"]: row["name"] or f"process {row['upid']}" for row in tables.process.to_pylist()}
    tracks = {row["id"]: (row["name"], process.get(row["upid"], "engine")) for row in tables.track.to_pylist()
              if row["name"] in COUNTERS}
    out: dict[str, dict[str, tuple[list[float], list[float]]]] = {name: {} for name in COUNTERS}
    for row in tables.counter.sort_by([("ts", "ascending")]).to_pylist():
        found = tracks.get(row["track_id"])
        if found is None:
            continue
        times, values = out[found[0]].setdefault(found[1], ([], []))
        times.append(row["ts"] * 1e-9)
        values.append(row["value"])
    if not any(out.values()):
        notes.append(f"KV, batch and queue over time: the trace {str(path)!r} has no serving counters")
        return {}
    return out


def _envelope(times: list[float], values: list[float]) -> tuple[list[float], list[float]]:
    """At most :data:`MAX_POINTS` points: each bin of consecutive points as its first time and largest value."""
    if len(times) <= MAX_POINTS:
        return times, values
    size = math.ceil(len(times) / MAX_POINTS)
    return times[::size], [max(values[i:i + size]) for i in range(0, len(values), size)]


def _time_chart(series: dict[str, dict[str, tuple[list[float], list[float]]]], notes: list[str]) -> Chart:
    from plotly.subplots import make_subplots

    g = go()
    panels = ("KV blocks held", "batch: sequences in the step, requests running", "queue: requests waiting")
    figure = make_subplots(rows=3, cols=1, shared_xaxes=True, vertical_spacing=0.08, subplot_titles=panels)
    row_of = {"engine kv blocks": 1, "engine batch sequences": 2, "engine running": 2, "engine queue length": 3}
    binned = False
    for counter, engines in series.items():
        for engine, (times, values) in engines.items():
            xs, ys = _envelope(times, values)
            binned |= len(xs) < len(times)
            figure.add_trace(g.Scatter(x=xs, y=ys, mode="lines", line_shape="hv", name=f"{COUNTERS[counter]} · "
                                       f"{engine}", hovertemplate=f"{COUNTERS[counter]} ({engine}) at %{{x:.4g}} s: "
                                       "%{y}<extra></extra>"), row=row_of[counter], col=1)
    if binned:
        notes.append(f"over time: series longer than {MAX_POINTS} steps drawn as the largest value of each bin")
    figure.update_xaxes(title_text="time since the first arrival (s)", row=3, col=1)
    title = "KV cache, batch and queue over time"
    layout(figure, title, height=640)
    return Chart("serving-over-time", title, figure)
