"""Energy per op and power per phase (``cost.energy``): hand-computed cases on a toy spec, additivity, the power
limit's rule, and a spec without energy figures reporting none."""

from __future__ import annotations

import pytest

from layerscope.app.estimate import EstimateRequest, estimate_raw, result_of
from layerscope.cost.api import PhaseOps
from layerscope.cost.energy import estimate_energy, phase_energy
from layerscope.cost.features import op_features
from layerscope.cost.models import get_cost_model
from layerscope.graph.ops import GemmShape, Op, OpGraph, TensorSpec
from layerscope.hardware import load_hardware
from layerscope.hardware.spec import HardwareSpec
from layerscope.units import DType

BF16 = DType.BF16
PJ = 1e-12
#: Round figures so every joule below is hand-computed: 1 pJ per bf16 matrix FLOP, 10 per vector FLOP, 100 per
#: HBM byte, 10 per L2 byte, 1 per SRAM byte, 50 per NVLink byte, 500 per network byte; 100 W idle, 1 kW limit.
TOY_ENERGY = {"matrix_pj_per_flop": {"bf16": 1.0}, "vector_pj_per_flop": 10.0, "main_memory_pj_per_byte": 100.0,
              "cache_pj_per_byte": 10.0, "sram_pj_per_byte": 1.0, "interconnect_pj_per_byte": 50.0,
              "network_pj_per_byte": 500.0, "idle_power_w": 100.0, "board_power_limit_w": 1000.0}


def _with_energy(hw: HardwareSpec, **overrides: float) -> HardwareSpec:
    data = hw.model_dump()
    data["energy"] = {**TOY_ENERGY, **overrides}
    data["interconnect"] = {"name": "link", "bandwidth_bytes_per_s": 100e9, "latency_s": 0.0, "domain_gpus": 8,
                           "network": {"name": "nic", "bandwidth_bytes_per_s": 50e9, "latency_s": 0.0}}
    return HardwareSpec.from_dict(data)


def _gemm(m: int, n: int, k: int) -> Op:
    a = TensorSpec("x", (m, k), BF16)
    w = TensorSpec("w.weight", (n, k), BF16, "weight")
    out = TensorSpec("w:out", (m, n), BF16)
    return Op(name="w", kind="gemm", module="w", layer=0, inputs=(a, w), outputs=(out,), flops=2 * m * n * k,
              weight_bytes=w.nbytes, act_read_bytes=a.nbytes, act_write_bytes=out.nbytes, matrix_class="Ma_Mw",
              definition=f"gemm_n{n}_k{k}", gemm=GemmShape(m, n, k))


def _add(tokens: int, width: int) -> Op:
    xs = tuple(TensorSpec(f"x{i}", (tokens, width), BF16) for i in range(2))
    out = TensorSpec("add:out", (tokens, width), BF16)
    return Op(name="add", kind="residual_add", module="add", layer=0, inputs=xs, outputs=(out,),
              flops=tokens * width, act_read_bytes=2 * tokens * width * 2, act_write_bytes=tokens * width * 2,
              matrix_class="Elementwise", definition=f"residual_add_h{width}")


def _all_reduce(gpus: int, message_bytes: int) -> Op:
    x = TensorSpec("ar:in", (message_bytes // 2,), BF16)
    out = TensorSpec("ar:out", (message_bytes // 2,), BF16)
    return Op(name="ar", kind="communication", module="ar", layer=0, inputs=(x,), outputs=(out,), flops=0,
              act_read_bytes=message_bytes, act_write_bytes=message_bytes, matrix_class="Collective",
              definition="all_reduce", attrs=(("collective", "all_reduce"), ("gpus", gpus),
                                              ("message_bytes", message_bytes)),
              comm_bytes=2 * (gpus - 1) * message_bytes // gpus)


def _phase(hw: HardwareSpec, *ops: Op) -> PhaseOps:
    graph = OpGraph(ops=ops)
    feats = op_features(graph)
    cost = get_cost_model("roofline")(feats, hw)
    return PhaseOps(graph, "prefill", cost.time_s, (feats.flops, feats.weight_bytes, feats.act_bytes,
                                                     feats.kv_bytes), cost.bound, cost)


def test_gemm_and_memory_bound_op_by_hand(toy_hw):
    hw = _with_energy(toy_hw)
    part = _phase(hw, _gemm(8192, 8192, 8192), _add(4096, 4096))
    pe = phase_energy(part, hw)
    # GEMM: 2·8192³ FLOPs at 1 pJ; A, W and C (3·8192²·2 B) from HBM through L2 (110 pJ/B) and SRAM (1 pJ/B);
    # compute-bound at 100 TFLOP/s: 2·8192³ / 100e12 s of 100 W idle power.
    flops, gemm_bytes = 2 * 8192**3, 3 * 8192**2 * 2
    gemm_s = flops / 100e12
    assert part.bound[0] == 0 and part.time_s[0] == pytest.approx(gemm_s)
    assert pe.dynamic.compute_j[0] == pytest.approx(flops * 1.0 * PJ)
    assert pe.op_energy_j[0] == pytest.approx((flops * 1.0 + gemm_bytes * 111.0) * PJ + 100.0 * gemm_s)
    # residual add: 4096² FLOPs on the vector units at 10 pJ; 3·4096²·2 B at 111 pJ/B; memory-bound at 1 TB/s
    add_bytes = 3 * 4096**2 * 2
    add_s = add_bytes / 1e12
    assert part.time_s[1] == pytest.approx(add_s)
    assert pe.op_energy_j[1] == pytest.approx((4096**2 * 10.0 + add_bytes * 111.0) * PJ + 100.0 * add_s)
    assert pe.dynamic.wire_j.tolist() == [0.0, 0.0]
    assert not pe.power_limited and pe.clock_factor == 1.0
    assert pe.average_power_w == pytest.approx(pe.energy_j / (gemm_s + add_s))
    # the add draws more than the GEMM: 111 pJ/B at 1 TB/s is 111 W of traffic, plus 1.67 W of FLOPs and idle
    assert pe.peak_power_w == pytest.approx(111.0 + 4096**2 * 10.0 * PJ / add_s + 100.0)
    assert pe.peak_power_w > pe.op_energy_j[0] / gemm_s


def test_collective_wire_bytes_on_nvlink_and_across_nodes(toy_hw):
    hw = _with_energy(toy_hw)
    msg = 2**20
    inside = phase_energy(_phase(hw, _all_reduce(8, msg)), hw)
    across = phase_energy(_phase(hw, _all_reduce(16, msg)), hw)
    # ring all-reduce: 2(p−1)/p of the message on the wire per GPU; 50 pJ/B within the 8-GPU domain, 500 beyond
    assert inside.dynamic.wire_j[0] == pytest.approx(2 * 7 * msg // 8 * 50.0 * PJ)
    assert across.dynamic.wire_j[0] == pytest.approx(2 * 15 * msg // 16 * 500.0 * PJ)


def test_power_limit_stretches_compute_bound_ops_to_the_limit(toy_hw):
    hw = _with_energy(toy_hw, board_power_limit_w=150.0)
    part = _phase(hw, _gemm(8192, 8192, 8192), _add(4096, 4096))
    pe = phase_energy(part, hw)
    free = phase_energy(part, _with_energy(toy_hw))
    dyn_j = float(pe.dynamic.total_j.sum())
    gemm_s, add_s = float(part.time_s[0]), float(part.time_s[1])
    assert dyn_j / (gemm_s + add_s) > 50.0  # above the 50 W headroom over idle
    # r = (E_dyn / (P_lim − P_idle) − T_rest) / T_compute; only the compute-bound GEMM stretches
    r = (dyn_j / 50.0 - add_s) / gemm_s
    assert pe.power_limited and pe.clock_factor == pytest.approx(r)
    assert pe.op_time_s[0] == pytest.approx(gemm_s * r) and pe.op_time_s[1] == pytest.approx(add_s)
    assert pe.average_power_w == pytest.approx(150.0)
    # dynamic joules are held; the longer time adds idle joules
    assert pe.dynamic.total_j.tolist() == pytest.approx(free.dynamic.total_j.tolist())
    assert pe.energy_j == pytest.approx(free.energy_j + 100.0 * gemm_s * (r - 1))


@pytest.fixture(scope="module")
def generate_8b():
    request = EstimateRequest.model_validate({"model": "llama-3.2-1b", "hardware": "h100-sxm",
                                              "workload": {"phase": "generate", "batch": 4, "decode_steps": 15}})
    return estimate_raw(request)


def test_phase_joules_are_the_sum_of_op_joules(generate_8b):
    result = result_of(generate_8b)
    energy = result.energy
    assert energy is not None
    for phase, row in energy.phases.items():
        ops = [op.energy_j for op in result.ops if op.phase == phase]
        assert all(j is not None and j > 0 for j in ops)
        assert row.energy_j == pytest.approx(sum(j for j in ops if j is not None), rel=1e-12)
        assert row.energy_j == pytest.approx(row.compute_j + row.memory_j + row.sram_j + row.wire_j + row.static_j)
    # one device: the run's joules are its phases' plus idle power over the host time between steps
    assert energy.devices == 1
    assert energy.energy_j == pytest.approx(sum(r.energy_j for r in energy.phases.values()) + energy.idle_j)
    tokens = 4 * 16
    assert energy.j_per_output_token == pytest.approx(energy.energy_j / tokens)
    assert energy.output_tokens_per_j == pytest.approx(tokens / energy.energy_j)


def test_spec_without_energy_reports_none_and_changes_nothing_else():
    hw = load_hardware("h100-sxm")
    assert hw.energy is not None
    bare = hw.model_copy(update={"energy": None})
    request = {"model": "llama-3.1-8b", "workload": {"phase": "generate", "batch": 2, "decode_steps": 7}}
    with_energy = result_of(estimate_raw(EstimateRequest.model_validate({**request, "hardware": hw})))
    without = result_of(estimate_raw(EstimateRequest.model_validate({**request, "hardware": bare})))
    assert without.energy is None and all(op.energy_j is None for op in without.ops)
    assert estimate_energy(estimate_raw(EstimateRequest.model_validate({**request, "hardware": bare}))) is None
    assert with_energy.energy is not None
    stripped = with_energy.model_dump(mode="json", exclude={"energy": True, "ops": {"__all__": {"energy_j"}}})
    assert stripped == without.model_dump(mode="json", exclude={"energy": True, "ops": {"__all__": {"energy_j"}}})
