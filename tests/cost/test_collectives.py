"""cost.collectives: α-β times per algorithm, checked on hand-computed volumes and times."""

from __future__ import annotations

import numpy as np
import pytest

from layerscope.cost.collectives import (
    ALGORITHMS,
    algorithm_work,
    bus_factor,
    collective_cost,
    collective_time_s,
)
from layerscope.errors import CostModelError
from layerscope.hardware.spec import COLLECTIVE_ALGORITHMS, InterconnectSpec

MIB = 2**20
B = 100e9  # link bytes/s per direction
NIC = 10e9


def link(**kw) -> InterconnectSpec:
    data = {"name": "test", "bandwidth_bytes_per_s": B, "latency_s": 1e-6, **kw}
    return InterconnectSpec.model_validate(data)


def terms(alpha: float, beta: float) -> dict:
    return {"alpha_s": alpha, "bandwidth_fraction": beta}


def test_registry_names_match_the_spec() -> None:
    assert tuple(ALGORITHMS) == COLLECTIVE_ALGORITHMS


def test_ring_all_reduce_moves_2_n_minus_1_over_n_of_the_message() -> None:
    ic = link()
    m, n = 64 * MIB, 8
    cost = collective_cost("all_reduce", m, n, ic, algorithm="ring")
    assert cost.link_bytes == pytest.approx(2 * 7 / 8 * m)  # Patarasuk & Yuan: 2(n-1)/n · M per GPU
    # 2(n-1) = 14 steps of α = latency_s (1 µs), bytes at the full bandwidth (β = 1)
    assert cost.time_s == pytest.approx(14e-6 + 2 * 7 / 8 * m / B)
    # staged: input M + output M + 2 x received
    assert cost.hbm_bytes == pytest.approx(2 * m + 2 * (2 * 7 / 8 * m))


def test_fitted_terms_replace_latency_and_bandwidth() -> None:
    ic = link(algorithms={"ring": terms(3e-6, 0.5)})
    m, n = 8 * MIB, 4
    t = collective_time_s("all_reduce", m, n, ic, algorithm="ring")
    assert t == pytest.approx(6 * 3e-6 + 2 * 3 / 4 * m / (0.5 * B))


def test_all_gather_reduce_scatter_all_to_all_and_send_recv_volumes() -> None:
    ic = link()
    m, n = 16 * MIB, 4
    ag = collective_cost("all_gather", m, n, ic)
    assert ag.link_bytes == pytest.approx(3 / 4 * m) and ag.time_s == pytest.approx(3e-6 + 3 / 4 * m / B)
    assert ag.hbm_bytes == pytest.approx(m / 4 + m + 2 * 3 / 4 * m)
    rs = collective_cost("reduce_scatter", m, n, ic)
    assert rs.link_bytes == pytest.approx(3 / 4 * m)
    a2a = collective_cost("all_to_all", m, n, ic)
    assert a2a.link_bytes == pytest.approx(3 / 4 * m) and a2a.time_s == pytest.approx(3e-6 + 3 / 4 * m / B)
    assert a2a.hbm_bytes == pytest.approx(2 * m)  # direct writes: no staging
    sr = collective_cost("send_recv", m, 2, ic)
    assert sr.link_bytes == pytest.approx(m) and sr.time_s == pytest.approx(1e-6 + m / B)


def test_bus_factors_are_nccls() -> None:
    assert bus_factor("all_reduce", 8) == pytest.approx(1.75)
    assert bus_factor("all_gather", 8) == pytest.approx(0.875)
    assert bus_factor("send_recv", 2) == pytest.approx(1.0)


def test_nvls_within_a_domain_and_faster_than_ring_for_large_messages() -> None:
    ic = link(domain_gpus=8, in_switch_reduction=True, in_switch_min_gpus=4,
              algorithms={"ring": terms(2e-6, 0.8), "nvls": terms(30e-6, 0.6)})
    m = 1024 * MIB
    nvls = collective_cost("all_reduce", m, 8, ic, algorithm="nvls")
    assert nvls.link_bytes == pytest.approx(m)
    assert nvls.time_s == pytest.approx(2 * 30e-6 + m / (0.6 * B))
    assert nvls.hbm_bytes == pytest.approx(2 * m)
    ring = collective_time_s("all_reduce", m, 8, ic, algorithm="ring")
    assert nvls.time_s <= ring
    # the tuner picks NVLS for large messages and the ring for small ones (NVLS's larger α)
    picked = collective_cost("all_reduce", np.array([32e3, m]), 8, ic)
    assert picked.algorithm_names == ["ring", "nvls"]
    with pytest.raises(CostModelError, match="not available"):
        collective_cost("all_reduce", m, 2, ic, algorithm="nvls")  # below in_switch_min_gpus
    with pytest.raises(CostModelError, match="not available"):
        collective_cost("all_reduce", m, 8, link(), algorithm="nvls")  # no in-switch reduction


def test_tree_is_log_depth_across_nodes_and_a_chain_within() -> None:
    ic = link(domain_gpus=8, network={"name": "nic", "bandwidth_bytes_per_s": NIC, "latency_s": 5e-6})
    steps, _, nic_s = algorithm_work("tree", "all_reduce", 1e6, 32, ic)
    assert steps == 2 * (2 + 7)  # 2(⌈log2 4⌉ + 8 - 1)
    assert nic_s == pytest.approx(2e6 / 8 / NIC)
    steps, *_ = algorithm_work("tree", "all_reduce", 1e6, 8, ic)
    assert steps == 14  # within a node: a chain, as long as the ring
    assert collective_cost("all_reduce", 1e6, 8, ic).algorithm_names == ["ring"]


def test_across_nodes_the_nic_carries_one_channels_share() -> None:
    ic = link(domain_gpus=8, network={"name": "nic", "bandwidth_bytes_per_s": NIC, "latency_s": 5e-6})
    m, n = 1024 * MIB, 32
    ring = collective_cost("all_reduce", m, n, ic, algorithm="ring")
    total = 2 * 31 / 32 * m
    assert ring.nic_bytes == pytest.approx(total / 8)
    # NIC-bound: busbw = the node's NICs (8 x 10 GB/s), NCCL's inter-node busbw
    assert ring.time_s == pytest.approx(62 * 5e-6 + (total / 8) / NIC)
    a2a = collective_cost("all_to_all", m, n, ic)
    assert a2a.nic_bytes == pytest.approx(24 / 32 * m)
    with pytest.raises(CostModelError, match=r"interconnect\.network"):
        collective_cost("all_reduce", m, 16, link(domain_gpus=8))


def test_monotone_in_message_and_zero_for_one_gpu() -> None:
    ic = link(domain_gpus=8, in_switch_reduction=True, network={"name": "n", "bandwidth_bytes_per_s": NIC,
                                                                 "latency_s": 5e-6})
    m = np.geomspace(1, 1e10, 50)
    for collective in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv"):
        for n in (2, 8, 16):
            t = collective_time_s(collective, m, n, ic)
            assert np.all(np.diff(t) >= 0), (collective, n)
        one = collective_cost(collective, m, 1, ic)
        assert not one.time_s.any() and not one.hbm_bytes.any()


def test_bad_names() -> None:
    with pytest.raises(CostModelError, match="unknown collective"):
        collective_time_s("broadcast", 1.0, 2, link())
    with pytest.raises(CostModelError, match="does not run all_gather"):
        collective_time_s("all_gather", 1.0, 2, link(), algorithm="tree")
    with pytest.raises(CostModelError, match="known"):
        collective_time_s("all_reduce", 1.0, 2, link(), algorithm="butterfly")


def test_the_cost_model_times_tp_all_reduces_on_the_interconnect() -> None:
    from layerscope.cost.api import estimate
    from layerscope.cost.models import BOUND_NAMES
    from layerscope.hardware import load_hardware
    from layerscope.model import load_model_spec
    from layerscope.workload import Workload

    hw = load_hardware("h100-sxm")
    spec = load_model_spec("llama-3.1-8b")
    w = Workload(phase="decode", batch=4, context=1024, tensor_parallel=2)
    with_link = estimate(spec, hw, w, layer=0)
    without = estimate(spec, hw.model_copy(update={"interconnect": None}), w, layer=0)
    ops = with_link.phases[0].graph.ops
    comm = [i for i, op in enumerate(ops) if op.kind == "communication"]
    other = [i for i, op in enumerate(ops) if op.kind != "communication"]
    assert comm
    t_with, t_without = with_link.phases[0].time_s, without.phases[0].time_s
    np.testing.assert_array_equal(t_with[other], t_without[other])  # nothing else moves
    m = float(ops[comm[0]].attr("message_bytes"))
    expected = collective_time_s("all_reduce", m, 2, hw.interconnect)  # the whole NCCL call, its launch in α
    assert t_with[comm[0]] == pytest.approx(expected)
    assert BOUND_NAMES[int(with_link.phases[0].bound[comm[0]])] == "network"


def test_sweep_grid_matches_point_estimates_with_collectives(toy_hw) -> None:
    """The vectorized sweep times communication ops exactly: their message is read from the op's activation bytes."""
    from layerscope.cost.sweep import _point_time_s, fit_linear_graph, time_grid
    from layerscope.model import load_model_spec
    from layerscope.workload import Workload

    hw = toy_hw.model_copy(update={"interconnect": link(algorithms={"ring": terms(3e-6, 0.7)})})
    spec = load_model_spec("llama-3.2-1b")
    tmpl = Workload(tensor_parallel=2)
    lin = fit_linear_graph(spec, "decode", tmpl)
    b, L = np.array([1, 4, 16]), np.array([8, 100, 900])
    grid = time_grid(lin, hw, b, L)
    points = [_point_time_s(spec, hw, tmpl, "decode", int(x), int(y), "roofline") for x, y in zip(b, L, strict=True)]
    np.testing.assert_allclose(grid, points, rtol=1e-9)
    no_link = time_grid(lin, toy_hw, b, L)
    assert np.all(grid > no_link)
