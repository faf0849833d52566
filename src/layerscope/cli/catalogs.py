"""``layerscope models`` and ``layerscope hardware``: the bundled catalogs."""

from __future__ import annotations

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


def hardware_cmd(as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """List the hardware presets with their peak compute, memory and bandwidth."""
    from layerscope.hardware import list_presets, load_hardware
    from layerscope.units import DType

    rows = []
    for name in list_presets():
        hw = load_hardware(name)
        rows.append({
            "name": hw.name,
            "description": hw.description,
            "kind": hw.kind,
            "engines": hw.engines.count,
            "peak_bf16_flops_per_s": hw.peak_flops(DType.BF16),
            "memory_bytes": hw.memory_capacity_bytes,
            "memory_bandwidth_bytes_per_s": hw.memory_bandwidth_bytes_per_s,
            "matmul_efficiency": hw.efficiency.matmul,
            "memory_efficiency": hw.efficiency.memory,
        })
    if as_json:
        from layerscope.cli.common import print_json

        print_json(rows)
        return
    from rich.table import Table

    from layerscope.cli.common import console, fmt_si

    t = Table(title=f"{len(rows)} hardware presets")
    for col in ("name", "kind", "engines", "bf16 peak", "memory", "bandwidth", "eff mm/mem", "description"):
        t.add_column(col)
    for r in rows:
        t.add_row(str(r["name"]), str(r["kind"]), str(r["engines"]),
                  fmt_si(float(r["peak_bf16_flops_per_s"]), "FLOP/s"),  # type: ignore[arg-type]
                  fmt_si(float(r["memory_bytes"]), "B"), fmt_si(float(r["memory_bandwidth_bytes_per_s"]), "B/s"),  # type: ignore[arg-type]
                  f"{r['matmul_efficiency']:.2f}/{r['memory_efficiency']:.2f}", str(r["description"]))
    console().print(t)
