"""Charts of ``validate --json``: per phase, predicted against measured per op and the error per op kind."""

from __future__ import annotations

from typing import Any

from layerscope.report.accuracy import Joined, error_chart, predicted_vs_measured_chart
from layerscope.report.charts import Chart, Fact, Section, seconds_text
from layerscope.report.documents import Document

__all__ = ["charts"]


def _percent(error: float | None) -> str:
    return "n/a" if error is None else f"{100 * error:+.1f}%"


def charts(doc: Document) -> Section:
    """The validation's summary and, per phase, its op scatter and its error by kind."""
    data = doc.data
    notes: list[str] = []
    out: list[Chart] = []
    for phase in data["phases"]:
        name = phase["phase"]
        rows = [Joined(op["name"], op["kind"], op["predicted_s"], op["measured_s"]) for op in phase["ops"]]
        scatter = predicted_vs_measured_chart(rows, f"predicted-vs-measured-{name}",
                                              f"Predicted vs measured per op ({name})", notes)
        if scatter is not None:
            out.append(scatter)
        kinds = phase["by_kind"]
        bars = error_chart([row["kind"] for row in kinds], [row["error"] for row in kinds], f"error-by-kind-{name}",
                           f"Error by op kind ({name})",
                           [f"{row['kind']}: {row['rows']} rows, predicted {seconds_text(row['predicted_s'])}, "
                            f"measured {seconds_text(row['measured_s'])}" for row in kinds])
        if bars is not None:
            out.append(bars)
    return Section(_facts(data), out, notes)


def _facts(data: dict[str, Any]) -> list[Fact]:
    facts: list[Fact] = [
        ("model", data["model"]), ("hardware", data["hardware"]), ("cost model", data["cost_model"]),
        ("capture", f"{data['device']}, {data['dtype']}, {data['layers']} layers, batch {data['batch']}, prompt "
                    f"{data['prompt_len']}, {data['decode_steps']} decode steps, {data['threads']} threads, "
                    f"{data['weights']} weights"),
    ]
    for phase in data["phases"]:
        forward = phase["forward"]
        facts.append((f"{phase['phase']} forward", f"predicted {seconds_text(forward['predicted_s'])}, measured "
                      f"{seconds_text(forward['measured_s'])} ({_percent(forward['error'])})"))
        facts.append((f"{phase['phase']} per op", f"median |error| {_percent(phase['median_abs_error'])}, p90 "
                      f"{_percent(phase['p90_abs_error'])} over {phase['ops_joined']} rows"))
    return facts
