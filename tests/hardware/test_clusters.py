"""``hardware.cluster``: cluster presets, their cited figures, validation, placement and the device spec the cost
models time collectives on."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import yaml

from layerscope.cost.collectives import collective_cost
from layerscope.errors import HardwareSpecError
from layerscope.hardware import load_hardware
from layerscope.hardware.cluster import ClusterSpec, cluster_names, cluster_of, load_cluster, load_cluster_file

Run = Callable[..., subprocess.CompletedProcess[str]]

PRESETS = ("dgx-a100", "dgx-h100", "gb200-nvl72", "hgx-b200", "hgx-h200", "mi300x-platform", "tpu-v5e-16x16")


def _dgx_h100_mapping(**changes: object) -> dict[str, object]:
    """The dgx-h100 preset's file as a mapping, with ``changes`` applied to its top level."""
    data = yaml.safe_load((Path(__file__).parents[2] / "src/layerscope/hardware/presets/clusters/dgx-h100.yaml")
                          .read_text())
    return {**data, **changes}


def test_the_presets_are_the_issue_s_platforms():
    assert tuple(cluster_names()) == PRESETS


@pytest.mark.parametrize("name", PRESETS)
def test_every_preset_loads_and_cites_every_figure(name: str):
    cluster = load_cluster(name)
    assert cluster.name == name and cluster.description
    missing = [path for path in cluster.figure_paths() if not cluster.sources.get(path, "").strip()]
    assert not missing, f"{name}: figures without a source: {missing}"
    assert set(cluster.sources) <= set(cluster.figure_paths()), "a source keyed by no figure (a typo?)"
    spec = cluster.device_spec()
    assert spec.name == name and spec.interconnect is not None
    assert spec.interconnect.domain_gpus == cluster.domain_gpus
    # every interconnect figure of the device spec cites the cluster's source, never the chip preset's
    for path in cluster.figure_paths():
        if path.startswith("fabric."):
            assert spec.sources["interconnect." + path.removeprefix("fabric.")] == cluster.sources[path]
    assert spec.sources["interconnect.algorithms"]


def test_dgx_h100_hand_checked():
    dgx = load_cluster("dgx-h100")
    assert (dgx.nodes, dgx.gpus_per_node, dgx.total_gpus, dgx.domain_gpus) == (1, 8, 8, 8)
    link = dgx.device_spec().interconnect
    assert link is not None and link.network is not None
    # NVLink4: 900 GB/s bidirectional per GPU -> 450e9 per direction; ConnectX-7 400 Gb/s -> 50e9 B/s
    assert link.bandwidth_bytes_per_s == 450e9 and link.network.bandwidth_bytes_per_s == 400e9 / 8
    assert link.in_switch_reduction and link.name == "nvlink4"
    # the cluster runs the H100 SXM's own link and NIC: its fitted terms carry over unchanged
    h100 = load_hardware("h100-sxm").interconnect
    assert h100 is not None and link == h100
    assert "carried over from h100-sxm" in dgx.device_spec().sources["interconnect.algorithms"]


def test_gb200_nvl72_domain_spans_compute_trays():
    nvl = load_cluster("gb200-nvl72")
    assert (nvl.nodes, nvl.gpus_per_node, nvl.domain_gpus, nvl.total_gpus) == (18, 4, 72, 72)
    assert nvl.placement(72).one_domain and nvl.placement(72).nodes == 18
    two_racks = nvl.with_nodes(36)
    assert two_racks.total_gpus == 144 and two_racks.placement(144).domains == 2
    with pytest.raises(HardwareSpecError, match=r"nodes: 20 × 4 = 80 GPUs is not a whole number of 72-GPU"):
        nvl.with_nodes(20)


def test_placement_matches_brute_force():
    dgx = load_cluster("dgx-h100").with_nodes(4)
    for gpus in range(1, 33):
        for stride in range(1, 33):
            if (gpus - 1) * stride + 1 > dgx.total_gpus:
                continue
            ranks = [k * stride for k in range(gpus)]
            place = dgx.placement(gpus, stride)
            assert place.nodes == len({r // dgx.gpus_per_node for r in ranks})
            assert place.domains == len({r // dgx.domain_gpus for r in ranks})
    assert dgx.placement(8).one_domain and not dgx.placement(16).one_domain
    assert dgx.placement(4, stride=8).per_domain == 1  # a data-parallel group, one GPU per node
    with pytest.raises(HardwareSpecError, match="needs 33 ranks; the cluster has 32"):
        dgx.placement(2, stride=32)


def test_tp8_stays_on_nvlink_and_16_gpus_cross_the_network():
    link = load_cluster("dgx-h100").with_nodes(2).device_spec().interconnect
    assert link is not None and link.network is not None
    m = 64 * 2**20
    within = collective_cost("all_reduce", m, 8, link)
    across = collective_cost("all_reduce", m, 16, link, algorithm="ring")
    assert float(within.nic_bytes[()]) == 0.0
    # a ring over 16 GPUs in 2 domains: 2(n-1)/n · M per GPU, the NIC carrying one of the g = 8 channels' share
    assert float(across.nic_bytes[()]) == pytest.approx(2 * 15 / 16 * m / 8)
    assert float(across.time_s[()]) > 3 * float(within.time_s[()])
    # the NIC at 50 GB/s bounds it: at least its bytes at the full NIC rate
    assert float(across.time_s[()]) > 2 * 15 / 16 * m / 8 / 50e9


def test_algorithms_do_not_carry_over_to_another_link():
    data = _dgx_h100_mapping(fabric={"name": "pcie5-x16", "bandwidth_bytes_per_s": 64e9, "latency_s": 2e-6,
                                     "domain_gpus": 8})
    cluster = ClusterSpec.from_dict(data)
    link = cluster.device_spec().interconnect
    assert link is not None and link.algorithms == {}
    assert link.network is not None and link.network.algorithms  # the NIC is still the H100 preset's own
    source = cluster.device_spec().sources["interconnect.algorithms"]
    assert source.startswith("none: the link (pcie5-x16) is not h100-sxm's own")


@pytest.mark.parametrize(("changes", "field"), [
    ({"nodes": 0}, "field 'nodes': Input should be greater than or equal to 1"),
    ({"gpus_per_node": 4}, "fabric.domain_gpus: 8 GPUs is more than the cluster's 4"),
    ({"nodes": 2, "network": None}, "network: the cluster's 16 GPUs span 2 NVLink domains of 8"),
    ({"gpu": "h100-sxmm"}, "field 'gpu': Value error, unknown hardware 'h100-sxmm'"),
    ({"gpu": "dgx-a100"}, "field 'gpu': Value error, 'dgx-a100' is a cluster"),
    ({"gpus_per_node": 12, "nodes": 2}, "fabric.domain_gpus: 8 neither divides gpus_per_node (12)"),
    ({"fabric": {"name": "nvlink4", "bandwidth_bytes_per_s": 450e9, "latency_s": 1e-6,
                 "network": {"name": "x", "bandwidth_bytes_per_s": 1e9, "latency_s": 0.0}, "domain_gpus": 8}},
     "fabric.network: the inter-node network is the cluster's own 'network' field"),
])
def test_bad_clusters_name_the_field(changes: dict[str, object], field: str):
    with pytest.raises(HardwareSpecError, match="^cluster spec: .*" + field.replace("(", r"\(").replace(")", r"\)")):
        ClusterSpec.from_dict(_dgx_h100_mapping(**changes))


def test_cluster_files_load_through_the_hardware_loaders(tmp_path: Path):
    gpu = tmp_path / "my-gpu.yaml"
    gpu.write_text(yaml.safe_dump(json.loads(load_hardware("h100-sxm").model_dump_json())))
    wrapped = tmp_path / "two-dgx.yaml"
    body = _dgx_h100_mapping(name="two-dgx", nodes=2, gpu="my-gpu.yaml")  # the GPU file beside the cluster's
    network = body["network"]
    assert isinstance(network, dict)
    body["network"] = {**network, "bandwidth_bytes_per_s": "400 Gb/s"}  # units, as in hardware files
    wrapped.write_text(yaml.safe_dump({"cluster": body}))
    flat = tmp_path / "one-dgx.json"
    flat.write_text(json.dumps(_dgx_h100_mapping(name="one-dgx")))
    two = load_cluster(wrapped)
    assert two.total_gpus == 16 and two.network is not None and two.network.bandwidth_bytes_per_s == 50e9
    spec = load_hardware(wrapped)  # what --hardware FILE gives: the cluster's GPU
    assert spec.name == "two-dgx" and spec.interconnect is not None and spec.interconnect.domain_gpus == 8
    assert load_hardware(flat).name == "one-dgx" and load_cluster_file(flat).total_gpus == 8
    assert cluster_of(flat) == load_cluster_file(flat) and cluster_of("h100-sxm") is None
    assert cluster_of("dgx-h100") == load_cluster("dgx-h100")
    assert load_hardware("DGX_H100") == load_cluster("dgx-h100").device_spec()
    with pytest.raises(HardwareSpecError, match="not a cluster"):
        load_cluster(gpu)
    with pytest.raises(HardwareSpecError, match=r"unknown cluster 'dgx-h1000'.*clusters: dgx-a100"):
        load_cluster("dgx-h1000")


def test_tpu_slice_is_one_ici_domain_and_mi300x_a_mesh_without_switch():
    tpu = load_cluster("tpu-v5e-16x16")
    assert (tpu.nodes, tpu.gpus_per_node, tpu.domain_gpus, tpu.topology) == (32, 8, 256, "torus-2d")
    assert tpu.network is not None and tpu.network.bandwidth_bytes_per_s == 6.4e12 / 8 / 256  # 6.4 Tbps per pod
    mi = load_cluster("mi300x-platform").device_spec().interconnect
    assert mi is not None and not mi.in_switch_reduction and mi.domain_gpus == 8
    assert "nvls" not in mi.algorithms and mi.algorithms  # the MI300X preset's fitted xGMI terms


# -- through the real entry point ----------------------------------------------------------------------------


def test_cli_lists_clusters_and_shows_one(run_cli: Run):
    done = run_cli("hardware", "-H", "dgx-h100", "--json")
    assert done.returncode == 0, done.stderr
    (row,) = json.loads(done.stdout)
    assert row["name"] == "dgx-h100" and row["cluster"]["total_gpus"] == 8 and row["cluster"]["gpu"] == "h100-sxm"
    assert row["interconnect"]["bandwidth_bytes_per_s"] == 450e9
    assert row["interconnect"]["network_bandwidth_bytes_per_s"] == 50e9
    assert "ConnectX-7" in row["cluster"]["sources"]["network.bandwidth_bytes_per_s"]
    listing = run_cli("hardware")
    assert listing.returncode == 0 and "7 cluster presets" in listing.stdout and "gb200-nvl72" in listing.stdout


def test_cli_bad_cluster_file_exits_2_naming_the_field(run_cli: Run, tmp_path: Path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(_dgx_h100_mapping(nodes=0)))
    done = run_cli("hardware", "-H", str(bad))
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "field 'nodes'" in lines[0], done.stderr


def test_cli_estimate_times_tp8_on_the_cluster_s_nvlink(run_cli: Run):
    done = run_cli("estimate", "-H", "dgx-h100", "--tp", "8", "--json")
    assert done.returncode == 0, done.stderr
    ops = json.loads(done.stdout)["ops"]
    reduces = [op for op in ops if op["bound"] == "network"]
    assert reduces and all(np.isfinite(op["time_s"]) and op["time_s"] > 0 for op in reduces)
    assert json.loads(done.stdout)["hardware"] == "dgx-h100"


def _dgx_h100_sheet(tmp_path, suffix: str = ".csv"):
    """The dgx-h100 preset written as a field-per-row sheet (units in the cells, a source column)."""
    import csv

    rows = [["field", "my-dgx", "source"],
            ["name", "my-dgx", ""], ["gpu", "h100-sxm", "the preset"], ["nodes", "2", "two systems"],
            ["gpus_per_node", "8", "DGX H100 user guide"], ["topology", "switch", ""],
            ["fabric.name", "nvlink4", ""], ["fabric.bandwidth_bytes_per_s", "450 GB/s", "S19 / 2"],
            ["fabric.latency_s", "1 us", "assumption"], ["fabric.domain_gpus", "8", ""],
            ["fabric.in_switch_reduction", "true", ""], ["fabric.in_switch_bandwidth_bytes_per_s", "450 GB/s", ""],
            ["fabric.in_switch_min_gpus", "5", ""],
            ["network.name", "connectx7-ndr400", ""], ["network.bandwidth_bytes_per_s", "50 GB/s", "CX-7"],
            ["network.latency_s", "3 us", "assumption"]]
    path = tmp_path / f"my-dgx{suffix}"
    if suffix == ".csv":
        with path.open("w", newline="") as fh:
            csv.writer(fh).writerows(rows)
    else:
        import openpyxl

        book = openpyxl.Workbook()
        for row in rows:
            book.active.append(row)
        book.save(path)
    return path


@pytest.mark.parametrize("suffix", [".csv", ".xlsx"])
def test_a_cluster_loads_from_a_spreadsheet_like_a_device(tmp_path, suffix) -> None:
    from layerscope.hardware import load_hardware
    from layerscope.hardware.cluster import cluster_of

    path = _dgx_h100_sheet(tmp_path, suffix)
    sheet = cluster_of(str(path))
    preset = load_cluster("dgx-h100").with_nodes(2)
    assert sheet is not None and sheet.total_gpus == 16
    assert sheet.fabric.bandwidth_bytes_per_s == preset.fabric.bandwidth_bytes_per_s == 450e9
    assert sheet.network is not None and sheet.network.bandwidth_bytes_per_s == 50e9
    assert sheet.fabric.in_switch_reduction is True
    assert sheet.sources["network.bandwidth_bytes_per_s"] == "CX-7"
    assert load_hardware(str(path)).interconnect == sheet.device_spec().interconnect


def test_a_cluster_sheet_through_the_cli(tmp_path, run_cli) -> None:
    path = _dgx_h100_sheet(tmp_path)
    ok = run_cli("estimate", "--model", "llama-3.1-8b", "--hardware", str(path), "--tp", "16", "--json")
    assert ok.returncode == 0, ok.stderr
    bad = path.with_name("bad.csv")
    bad.write_text(path.read_text().replace("nodes,2,", "nodes,0,"))
    res = run_cli("estimate", "--model", "llama-3.1-8b", "--hardware", str(bad))
    assert res.returncode == 2 and "nodes" in res.stderr and "Traceback" not in res.stderr


def test_a_cluster_sheet_is_named_by_its_column(tmp_path) -> None:
    from layerscope.hardware.cluster import cluster_of

    path = _dgx_h100_sheet(tmp_path)
    path.write_text("\n".join(line for line in path.read_text().splitlines() if not line.startswith("name,")) + "\n")
    sheet = cluster_of(str(path))
    assert sheet is not None and sheet.name == "my-dgx" and sheet.total_gpus == 16
