"""``layerscope models`` and ``layerscope hardware``: the bundled catalogs."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

from layerscope.cli import options

if TYPE_CHECKING:
    from layerscope.app.catalogs import HardwareResult, HardwareRow, ModelsResult


def register(app: typer.Typer) -> None:
    app.command("models")(models_cmd)
    app.command("hardware")(hardware_cmd)


def models_cmd(as_json: bool = options.as_json("Print one JSON array (docs/schema/models.json).")) -> None:
    """List the bundled model configs (real HF config.json files) with published parameter counts."""
    from layerscope.app.catalogs import ModelsRequest, models

    result = models(ModelsRequest())
    if as_json:
        from layerscope.cli.common import print_json

        print_json(result)
        return
    _render_models(result)


def hardware_cmd(
    source: str | None = options.hardware(
        None, help="Show this preset or YAML/JSON/CSV/XLSX file instead of every preset."),
    device: str | None = options.device_column(),
    as_json: bool = options.as_json("Print one JSON array (docs/schema/hardware.json)."),
) -> None:
    """List the hardware presets and cluster presets (or one spec) with their peak compute, memory and bandwidth.

    A cluster is listed as one of its GPUs with the cluster's links, and its layout (nodes × GPUs, NVLink
    domain, NIC). --json prints every figure in base units, as the field names say (Hz, bytes, bytes/s,
    FLOP/s, seconds); an unbounded capacity (a sheet without Memory_capacity) is null."""
    from layerscope.app.catalogs import HardwareRequest, hardware
    from layerscope.app.requests import build_request

    result = hardware(build_request(HardwareRequest, hardware=source, device_column=device))
    if as_json:
        from layerscope.cli.common import print_json

        print_json(result)
        return
    _render_hardware(result, source)


def _render_models(result: ModelsResult) -> None:
    from rich.table import Table

    from layerscope.cli.common import console, fmt_si

    rows = result.root
    t = Table(title=f"{len(rows)} bundled models")
    for col in ("alias", "HF id", "type", "layers", "hidden", "attn", "params", "active", "published"):
        t.add_column(col)
    for r in rows:
        t.add_row(r.alias, r.id, r.model_type, str(r.layers), str(r.hidden), r.attention,
                  fmt_si(float(r.params_total)), fmt_si(float(r.params_active)), r.published_total)
    console().print(t)


def _render_hardware(result: HardwareResult, source: str | None) -> None:
    from rich.table import Table

    from layerscope.cli.common import console, esc, fmt_si

    rows = [r for r in result.root if r.cluster is None]
    clusters = [r for r in result.root if r.cluster is not None]
    if rows:
        t = Table(title=f"{len(rows)} hardware presets" if source is None else esc(source))
        for col in ("name", "kind", "engines", "bf16 peak", "memory", "bandwidth", "eff mm/mem", "description"):
            t.add_column(col)
        for r in rows:
            t.add_row(esc(r.name), esc(r.kind), str(r.engines), fmt_si(r.peak_bf16_flops_per_s, "FLOP/s"),
                      fmt_si(float("inf") if r.memory_bytes is None else r.memory_bytes, "B"),  # None: unbounded
                      fmt_si(r.memory_bandwidth_bytes_per_s, "B/s"),
                      f"{r.matmul_efficiency:.2f}/{r.memory_efficiency:.2f}", esc(r.description))
        console().print(t)
    if clusters:
        _render_clusters(clusters, source)


def _render_clusters(rows: list[HardwareRow], source: str | None) -> None:
    from rich.table import Table

    from layerscope.cli.common import console, esc, fmt_si

    t = Table(title=f"{len(rows)} cluster presets" if source is None else esc(source))
    for col in ("name", "nodes × GPUs", "GPU", "fabric", "NVLink domain", "link/dir", "NIC/dir", "topology"):
        t.add_column(col)
    for r in rows:
        c, link = r.cluster, r.interconnect
        assert c is not None and link is not None  # a cluster's GPU always carries the cluster's fabric
        nic = link.network_bandwidth_bytes_per_s
        t.add_row(esc(r.name), f"{c.nodes} × {c.gpus_per_node}", esc(c.gpu),
                  esc(link.name) + (" + in-switch reduction" if link.in_switch_reduction else ""), str(c.domain_gpus),
                  fmt_si(link.bandwidth_bytes_per_s, "B/s"),
                  "-" if nic is None else f"{fmt_si(nic, 'B/s')} ({esc(link.network or '')})", esc(c.topology))
    console().print(t)

