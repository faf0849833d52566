"""``layerscope sweep``: a grid of models × hardware × batch × lengths × dtypes, timed at once."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

from layerscope.cli import options

if TYPE_CHECKING:
    from layerscope.app.sweep import SweepResult


def register(app: typer.Typer) -> None:
    app.command("sweep")(sweep_cmd)


def _names(text: str, what: str) -> list[str]:
    from layerscope.errors import WorkloadError

    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise WorkloadError(f"{what}: {text!r} names nothing (a comma-separated list)")
    return names


def sweep_cmd(
    model: str = options.model("llama-3.1-8b", help="Models, comma-separated (catalog names, HF ids, configs)."),
    hardware: str = options.hardware("h100-sxm,h200,a100-sxm", help="Hardware, comma-separated (presets or files)."),
    batch: str = typer.Option("1..256", "--batch", "-b", help="Batches: 1,8,32 or LO..HI (powers of two)."),
    length: str = typer.Option("1024", "--length", help="Prompt tokens (prefill) or cached tokens (decode) per "
                               "sequence: 512,4096 or LO..HI (powers of two)."),
    phase: str = typer.Option("decode", "--phase", help="decode (TPOT) | prefill (TTFT)."),
    dtypes: str = typer.Option("bf16", "--dtypes", help="Weight dtypes, comma-separated (bf16,fp8,int4); "
                               "activations run in the same type, bf16 for weight-only int4/int8/fp4."),
    kv_dtype: str = options.kv_dtype(),
    cost_model: str = options.cost_model(),
    out: str | None = typer.Option(None, "--out", "-o", help="Write every row to a .csv or .parquet file."),
    html: str | None = typer.Option(None, "--html", help="Write an HTML plot (pass time against batch; "
                                    "throughput against latency with the Pareto front)."),
    top: int = typer.Option(20, "--top", min=1, help="Rows shown (the Pareto front first)."),
    as_json: bool = options.as_json("Print one JSON object (docs/schema/sweep.json)."),
) -> None:
    """Time every point of a grid through the vectorized sweep; mark the throughput-latency Pareto front."""
    from pathlib import Path

    from layerscope.app.requests import build_request
    from layerscope.app.sweep import (
        SweepRequest,
        parse_ints,
        run_sweep,
        write_sweep_html,
        write_sweep_table,
    )

    request = build_request(SweepRequest, models=_names(model, "--model"), hardware=_names(hardware, "--hardware"),
                            batches=parse_ints(batch, "--batch"), lengths=parse_ints(length, "--length"),
                            phase=phase, dtypes=_names(dtypes, "--dtypes"), kv_dtype=kv_dtype, cost_model=cost_model)
    from layerscope.errors import OutputError
    from layerscope.units import check_output

    # every output checked before the sweep runs, not after
    if out is not None:
        if not out.lower().endswith((".csv", ".parquet")):
            raise OutputError(f"--out {out!r}: write a .csv or .parquet file")
        check_output(out)
    if html is not None:
        if not html.lower().endswith((".html", ".htm")):
            raise OutputError(f"--html {html!r}: write an .html file")
        check_output(html)
        _check_plotly()
    result = run_sweep(request)
    updates = {}
    if out is not None:
        updates["table"] = str(write_sweep_table(result, Path(out)))
    if html is not None:
        updates["html"] = str(write_sweep_html(result, Path(html)))
    result = result.model_copy(update=updates)
    if as_json:
        from layerscope.cli.common import print_json

        print_json(result)
        return
    _render(result, top)


def _check_plotly() -> None:
    from layerscope.errors import OutputError

    try:
        import plotly  # noqa: F401
    except ImportError:
        raise OutputError("--html needs plotly: pip install 'layerscope[report]'") from None


def _render(result: SweepResult, top: int) -> None:
    from rich.table import Table

    from layerscope.cli.common import console, esc

    con = console()
    what = "TPOT" if result.phase == "decode" else "TTFT"
    rows = sorted(result.rows, key=lambda r: (not r.pareto, not r.fits_in_memory, r.time_s))[:top]
    t = Table(title=f"{result.points} points ({result.phase}) in {result.wall_s:.2f} s; * = on the Pareto front")
    for name, justify in (("", "left"), ("model", "left"), ("hardware", "left"), ("dtype", "left"),
                          ("batch", "right"), ("length", "right"), (f"{what} (ms)", "right"), ("tokens/s", "right"),
                          ("weights + KV (GB)", "right"), ("fits", "left")):
        t.add_column(name, justify=justify)  # type: ignore[arg-type]
    for r in rows:
        held_gb = (r.weights_bytes + r.kv_cache_bytes) / 1e9
        t.add_row("*" if r.pareto else "", esc(r.model), esc(r.hardware), r.dtype, f"{r.batch}", f"{r.length}",
                  f"{r.time_s * 1e3:.3f}", f"{r.tokens_per_s:,.0f}", f"{held_gb:.1f}",
                  "yes" if r.fits_in_memory else "no")
    con.print(t)
    for what_file, path in (("table", result.table), ("plot", result.html)):
        if path:
            con.print(f"{what_file}: {esc(path)}")
