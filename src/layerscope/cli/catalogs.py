"""``layerscope models`` and ``layerscope hardware``: the bundled catalogs."""

from __future__ import annotations

from typing import Any

import typer


def register(app: typer.Typer) -> None:
    app.command("models")(models_cmd)
    app.command("hardware")(hardware_cmd)


def models_cmd(as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """List the bundled model configs (real HF config.json files) with published parameter counts."""
    from layerscope.model import list_catalog, load_model_spec, param_counts

    rows = []
    for entry in list_catalog():
        spec = load_model_spec(entry.id)
        counts = param_counts(spec)
        rows.append({
            "id": entry.id,
            "alias": entry.alias,
            "model_type": spec.model_type,
            "layers": spec.num_layers,
            "hidden": spec.hidden_size,
            "attention": spec.attention_kind,
            "moe": spec.moe is not None,
            "params_total": counts.total,
            "params_active": counts.active,
            "published_total": entry.published_total_params,
            "published_active": entry.published_active_params,
        })
    if as_json:
        from layerscope.cli.common import print_json

        print_json(rows)
        return
    from rich.table import Table

    from layerscope.cli.common import console, fmt_si

    t = Table(title=f"{len(rows)} bundled models")
    for col in ("alias", "HF id", "type", "layers", "hidden", "attn", "params", "active", "published"):
        t.add_column(col)
    for r in rows:
        t.add_row(str(r["alias"]), str(r["id"]), str(r["model_type"]), str(r["layers"]), str(r["hidden"]),
                  str(r["attention"]), fmt_si(float(r["params_total"])),  # type: ignore[arg-type]
                  fmt_si(float(r["params_active"])), str(r["published_total"]))  # type: ignore[arg-type]
    console().print(t)


def hardware_cmd(
    source: str | None = typer.Option(
        None, "--hardware", "-H", help="Show this preset or YAML/JSON/CSV/XLSX file instead of every preset."
    ),
    device: str | None = typer.Option(None, "--device-column", help="Column of a multi-device spreadsheet."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """List the hardware presets (or one spec) with their peak compute, memory and bandwidth.

    --json prints every figure in base units, as the field names say (Hz, bytes, bytes/s, FLOP/s,
    seconds); an unbounded capacity (a sheet without Memory_capacity) is null."""
    from layerscope.hardware import list_presets, load_hardware

    specs = [load_hardware(source, device=device)] if source is not None else [
        load_hardware(name) for name in list_presets()
    ]
    rows = [_hardware_row(hw) for hw in specs]
    if as_json:
        from layerscope.cli.common import print_json

        print_json(rows)
        return
    from rich.table import Table

    from layerscope.cli.common import console, esc, fmt_si

    t = Table(title=f"{len(rows)} hardware presets" if source is None else esc(source))
    for col in ("name", "kind", "engines", "bf16 peak", "memory", "bandwidth", "eff mm/mem", "description"):
        t.add_column(col)
    for r in rows:
        t.add_row(esc(r["name"]), esc(r["kind"]), str(r["engines"]),
                  fmt_si(float(r["peak_bf16_flops_per_s"]), "FLOP/s"),
                  fmt_si(float(r["memory_bytes"]), "B"), fmt_si(float(r["memory_bandwidth_bytes_per_s"]), "B/s"),
                  f"{r['matmul_efficiency']:.2f}/{r['memory_efficiency']:.2f}", esc(r["description"]))
    console().print(t)


def _hardware_row(hw: Any) -> dict[str, Any]:
    """One spec's figures for the listing, in base units (the names carry them)."""
    from layerscope.units import DType

    return {
        "name": hw.name,
        "description": hw.description,
        "kind": hw.kind,
        "engines": hw.engines.count,
        "clock_hz": hw.engines.clock_hz,
        "macs_per_cycle": {d.value: m for d, m in hw.engines.macs_per_cycle.items()},
        "peak_flops_per_s": {d.value: f for d, f in hw.engines.peak_flops_per_s.items()},
        "peak_bf16_flops_per_s": hw.peak_flops(DType.BF16),
        "tf32_flops_per_s": hw.engines.tf32_flops_per_s,
        "vector_flops_per_s": hw.engines.vector_flops_per_s,
        "memory_levels": [
            {"name": lv.name, "capacity_bytes": lv.capacity_bytes, "bandwidth_bytes_per_s": lv.bandwidth_bytes_per_s,
             "per_engine": lv.per_engine}
            for lv in hw.memory
        ],
        "memory_bytes": hw.memory_capacity_bytes,
        "memory_bandwidth_bytes_per_s": hw.memory_bandwidth_bytes_per_s,
        "interconnect": None if hw.interconnect is None else {
            "name": hw.interconnect.name, "bandwidth_bytes_per_s": hw.interconnect.bandwidth_bytes_per_s,
            "latency_s": hw.interconnect.latency_s,
        },
        "launch_overhead_s": hw.launch_overhead_s,
        "matmul_efficiency": hw.efficiency.matmul,
        "memory_efficiency": hw.efficiency.memory,
    }
