"""``layerscope sweep``: models × hardware × batch × lengths × dtypes timed at once (``cost.sweep``), as a table,
CSV/Parquet, JSON and an HTML plot with the throughput-latency Pareto front marked.

One row per point: the pass time (TPOT for decode, TTFT for prefill), tokens per second (on the one GPU a point
runs on), the weights and KV cache it holds, whether they fit, and whether the point is on the Pareto front of its
model, phase and dtype: no other point that fits has both a shorter pass and more tokens per second (Pareto 1896,
as LLM-Viewer and GenZ plot throughput against latency).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, field_validator

from layerscope.docstrings import RESULT_CONFIG
from layerscope.errors import OutputError, WorkloadError

#: Weight-only types: their GEMMs run in the activation dtype (bf16 here), as :data:`cost.features` times them.
_WEIGHT_ONLY = ("int4", "int8", "nf4", "mxfp4", "fp4")


class SweepRequest(BaseModel):
    """The grid: every combination of the lists is one point."""

    model_config = RESULT_CONFIG

    models: list[str] = Field(min_length=1)
    hardware: list[str] = Field(min_length=1)
    batches: list[int] = Field(min_length=1)
    lengths: list[int] = Field(min_length=1)
    """Prompt tokens (prefill) or cached tokens (decode) per sequence."""
    phase: Literal["decode", "prefill"] = "decode"
    dtypes: list[str] = Field(default_factory=lambda: ["bf16"], min_length=1)
    """Weight dtypes; the activations run in the same type, except weight-only types (int4, int8, fp4), whose
    activations are bf16."""
    kv_dtype: str = "bf16"
    cost_model: str = "roofline"

    @field_validator("batches", "lengths")
    @classmethod
    def _positive(cls, value: list[int]) -> list[int]:
        bad = [v for v in value if v < 1]
        if bad:
            raise ValueError(f"must be positive integers, not {bad}")
        return value


class SweepRow(BaseModel):
    model_config = RESULT_CONFIG

    model: str
    """The model's name (its config's)."""
    hardware: str
    """The hardware spec's name."""
    dtype: str
    """Weight dtype (activations in the same type, bf16 for weight-only types)."""
    phase: str
    """decode or prefill."""
    batch: int
    """Sequences in the pass."""
    length: int
    """Prompt tokens (prefill) or cached tokens (decode) per sequence."""
    time_s: float
    """Pass time: TPOT for decode, TTFT for prefill."""
    tokens_per_s: float
    """Tokens the pass makes (decode: one per sequence) or takes in (prefill: the prompts) per second."""
    weights_bytes: float
    """Bytes of the weights at the dtype."""
    kv_cache_bytes: float
    """Bytes of the KV cache the batch holds after the pass."""
    fits_in_memory: bool
    """Weights and KV cache fit the hardware's memory."""
    pareto: bool
    """On the throughput-latency front of its model, phase and dtype (among the points that fit)."""


class SweepResult(BaseModel):
    """``layerscope sweep --json``."""

    model_config = RESULT_CONFIG

    phase: str
    """decode or prefill."""
    points: int
    """Rows: every combination of the grid."""
    rows: list[SweepRow]
    """One per point."""
    wall_s: float
    """Seconds the sweep took on this machine."""
    table: str | None = None
    """The CSV/Parquet file written (``--out``)."""
    html: str | None = None
    """The HTML plot written (``--html``)."""


def _dtypes_of(entry: str) -> tuple[str, str]:
    weight = entry.strip().lower()
    return weight, ("bf16" if weight in _WEIGHT_ONLY else weight)


def pareto_mask(latency: list[float], throughput: list[float]) -> list[bool]:
    """True where no other point has both a shorter (or equal) latency and a larger (or equal) throughput, one of
    them strictly."""
    order = sorted(range(len(latency)), key=lambda i: (latency[i], -throughput[i]))
    best = -1.0
    front = [False] * len(latency)
    for i in order:
        if throughput[i] > best:
            front[i] = True
            best = throughput[i]
    return front


def run_sweep(request: SweepRequest) -> SweepResult:
    """Time every point of ``request``'s grid (``cost.sweep.sweep``, one fitted graph per model and dtype)."""
    from layerscope.cost.sweep import sweep
    from layerscope.hardware import load_hardware
    from layerscope.model import load_model_spec
    from layerscope.workload import make_workload

    t0 = time.perf_counter()
    specs = [load_model_spec(m) for m in request.models]
    hws = [load_hardware(h) for h in request.hardware]
    rows: list[dict[str, Any]] = []
    for entry in request.dtypes:
        weight, act = _dtypes_of(entry)
        template = make_workload(phase=request.phase, weight_dtype=weight, act_dtype=act,
                                 kv_dtype=request.kv_dtype)
        result = sweep(specs, hws, request.batches, request.lengths, phase=request.phase, template=template,
                       cost_model=request.cost_model)
        rows += [r | {"dtype": weight} for r in result.records()]
    groups: dict[tuple[str, str, str], list[int]] = {}
    for i, r in enumerate(rows):
        groups.setdefault((r["model"], r["phase"], r["dtype"]), []).append(i)
    front = [False] * len(rows)
    for members in groups.values():
        fits = [i for i in members if rows[i]["fits_in_memory"]]
        mask = pareto_mask([rows[i]["time_s"] for i in fits], [rows[i]["tokens_per_s"] for i in fits])
        for i, on in zip(fits, mask, strict=True):
            front[i] = on
    out = [SweepRow(model=str(r["model"]), hardware=str(r["hardware"]), dtype=r["dtype"], phase=r["phase"],
                    batch=int(r["batch"]), length=int(r["length"]), time_s=float(r["time_s"]),
                    tokens_per_s=float(r["tokens_per_s"]) * (int(r["length"]) if r["phase"] == "prefill" else 1),
                    weights_bytes=float(r["weights_bytes"]), kv_cache_bytes=float(r["kv_cache_bytes"]),
                    fits_in_memory=bool(r["fits_in_memory"]), pareto=front[i]) for i, r in enumerate(rows)]
    return SweepResult(phase=request.phase, points=len(out), rows=out, wall_s=time.perf_counter() - t0)


def write_sweep_table(result: SweepResult, path: Path, *, inputs: tuple[str | os.PathLike[str], ...] = ()) -> Path:
    """The rows as CSV or, for a ``.parquet`` path, Parquet (pyarrow); written atomically."""
    from layerscope.app.tables import write_columns

    columns = {c: [getattr(r, c) for r in result.rows] for c in SweepRow.model_fields}
    return write_columns(columns, path, what="sweep table", inputs=inputs)


def sweep_figures(result: SweepResult) -> list[Any]:
    """Two plotly figures: pass time against batch, one line per (hardware, model, dtype, length); and tokens per
    second against pass time for every point that fits, the Pareto front of each (model, dtype) drawn as a line."""
    try:
        import plotly.graph_objects as go
    except ImportError:
        raise OutputError("the sweep's HTML plot needs plotly: pip install 'layerscope[report]'") from None
    what = "TPOT" if result.phase == "decode" else "TTFT"
    lines: dict[tuple[str, str, str, int], list[SweepRow]] = {}
    for r in result.rows:
        lines.setdefault((r.hardware, r.model, r.dtype, r.length), []).append(r)
    curve = go.Figure()
    for (hw, model, dtype, length), rows in lines.items():
        rows = sorted(rows, key=lambda r: r.batch)
        curve.add_trace(go.Scatter(x=[r.batch for r in rows], y=[r.time_s * 1e3 for r in rows], mode="lines+markers",
                                   name=f"{hw} · {model} · {dtype} · {length} tokens",
                                   marker={"symbol": ["circle" if r.fits_in_memory else "x" for r in rows]}))
    curve.update_layout(title=f"{what} against batch (x: does not fit in memory)", xaxis={"title": "batch",
                        "type": "log"}, yaxis={"title": f"{what} (ms)"})
    scatter = go.Figure()
    fronts: dict[tuple[str, str], list[SweepRow]] = {}
    for r in result.rows:
        if r.fits_in_memory:
            fronts.setdefault((r.model, r.dtype), []).append(r)
    for (model, dtype), rows in fronts.items():
        scatter.add_trace(go.Scatter(
            x=[r.time_s * 1e3 for r in rows], y=[r.tokens_per_s for r in rows], mode="markers",
            name=f"{model} · {dtype}", text=[f"{r.hardware}, batch {r.batch}, {r.length} tokens" for r in rows]))
        front = sorted((r for r in rows if r.pareto), key=lambda r: r.time_s)
        scatter.add_trace(go.Scatter(x=[r.time_s * 1e3 for r in front], y=[r.tokens_per_s for r in front],
                                     mode="lines", name=f"Pareto front · {model} · {dtype}"))
    scatter.update_layout(title=f"throughput against latency ({result.phase})",
                          xaxis={"title": f"{what} (ms)", "type": "log"},
                          yaxis={"title": "tokens per second", "type": "log"})
    return [curve, scatter]


def write_sweep_html(result: SweepResult, path: Path, *, inputs: tuple[str | os.PathLike[str], ...] = ()) -> Path:
    """One self-contained HTML file (plotly's script inlined) with :func:`sweep_figures`."""
    from layerscope.units import atomic_write, check_output

    if path.suffix.lower() not in (".html", ".htm"):
        raise OutputError(f"sweep plot {str(path)!r}: write an .html file")
    check_output(path, inputs=inputs)
    figures = sweep_figures(result)
    parts = [fig.to_html(full_html=False, include_plotlyjs=(i == 0)) for i, fig in enumerate(figures)]
    page = ("<!DOCTYPE html><html><head><meta charset='utf-8'><title>layerscope sweep</title></head><body>"
            + "".join(parts) + "</body></html>")
    with atomic_write(path, "w") as fh:
        fh.write(page)
    return path


def parse_ints(text: str, what: str) -> list[int]:
    """``1,8,32`` or ``LO..HI`` (the powers of two from LO to HI, both included when powers of two) as a list;
    anything else a :class:`WorkloadError` naming ``what``."""
    text = text.strip()
    lo_s, sep, hi_s = text.partition("..")
    try:
        if sep:
            lo, hi = int(lo_s), int(hi_s)
            if lo < 1 or hi < lo:
                raise ValueError
            out, v = [], lo
            while v <= hi:
                out.append(v)
                v *= 2
            return out
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise WorkloadError(f"{what}: {text!r} is not a list of positive integers (1,8,32) or a range LO..HI "
                            "(powers of two)") from None
    if not values or min(values) < 1:
        raise WorkloadError(f"{what}: {text!r} is not a list of positive integers")
    return values
