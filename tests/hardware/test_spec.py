"""HardwareSpec: validation, MAC-derived peaks, fallback rules of peak_flops, memory levels."""

from __future__ import annotations

from typing import Any

import pydantic
import pytest

from layerscope.errors import HardwareSpecError
from layerscope.hardware import EfficiencySpec, EngineSpec, HardwareSpec, load_hardware
from layerscope.units import DType


def _spec(**overrides: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "name": "toy",
        "engines": {"count": 4, "clock_hz": 1e9, "peak_flops_per_s": {"bf16": 100e12},
                    "vector_flops_per_s": 5e12},
        "memory": [{"name": "l2", "capacity_bytes": 1e6},
                   {"name": "dram", "capacity_bytes": 1e9, "bandwidth_bytes_per_s": 1e12}],
    }
    data.update(overrides)
    return data


def test_peak_from_macs_is_count_clock_two_macs() -> None:
    engines = EngineSpec(count=32, clock_hz=2.5e9, macs_per_cycle={DType.FP16: 2048}, vector_flops_per_s=1e12)
    assert engines.peak_flops_per_s[DType.FP16] == 32 * 2.5e9 * 2 * 2048 == 327.68e12


def test_given_peak_wins_over_macs_and_dtype_aliases_are_normalized() -> None:
    engines = EngineSpec.model_validate({
        "count": 2, "clock_hz": 1e9, "macs_per_cycle": {"bfloat16": 10, "int8": 20},
        "peak_flops_per_s": {"bf16": 1.0e12}, "vector_flops_per_s": 1e9,
    })
    assert engines.peak_flops_per_s == {DType.BF16: 1.0e12, DType.INT8: 2 * 1e9 * 2 * 20}
    assert engines.macs_per_cycle == {DType.BF16: 10, DType.INT8: 20}


def test_a100_fallbacks() -> None:
    a100 = load_hardware("a100-sxm")  # no fp8 units
    assert a100.peak_flops(DType.BF16) == a100.peak_flops(DType.FP16) == 312e12
    assert a100.peak_flops(DType.FP8) == 312e12  # fp8 → bf16
    assert a100.peak_flops(DType.FP4) == 312e12  # fp4 → fp8 → bf16
    assert a100.peak_flops(DType.INT4) == 624e12  # int4 → int8
    assert a100.peak_flops(DType.FP32) == 156e12  # tf32
    assert a100.peak_flops(DType.FP32, allow_tf32=False) == 19.5e12  # vector
    assert a100.resolve_flops("fp8").dtype is DType.BF16


def test_h100_and_b200_fallbacks() -> None:
    h100 = load_hardware("h100-sxm")
    assert h100.peak_flops("fp8") == 1979e12
    assert h100.peak_flops(DType.FP4) == 1979e12  # fp4 → fp8
    assert h100.peak_flops(DType.INT4) == 1979e12  # int4 → int8
    assert load_hardware("b200").peak_flops(DType.FP4) == 9000e12


def test_fp16_falls_back_to_bf16_and_fp32_to_vector_without_tf32() -> None:
    tpu = load_hardware("tpu-v5e")  # bf16 only, no tf32
    assert tpu.peak_flops(DType.FP16) == 197e12
    assert tpu.peak_flops(DType.FP8) == 197e12
    resolved = tpu.resolve_flops(DType.FP32)
    assert resolved.path == "vector" and resolved.peak_flops_per_s == tpu.engines.vector_flops_per_s


def test_fp32_matrix_peak_wins_over_vector() -> None:
    cpu = load_hardware("server-cpu")
    assert cpu.resolve_flops(DType.FP32).path == "matrix"
    assert cpu.peak_flops(DType.FP32) == 96 * 2.4e9 * 2 * 16


def test_only_vector_units_serve_every_dtype() -> None:
    spec = HardwareSpec.from_dict(_spec(engines={"count": 1, "clock_hz": 1e9, "vector_flops_per_s": 2e9}))
    for dtype in DType:
        assert spec.peak_flops(dtype) == 2e9


def test_achievable_rates_apply_the_right_efficiency() -> None:
    # the datasheet presets with their hand-set efficiencies (the shipped ones are fitted: tests/hardware/
    # test_presets_fitted.py)
    from layerscope.app.presets import BASE_DIR

    h100 = load_hardware(BASE_DIR / "h100-sxm.yaml")
    assert h100.achievable_flops_per_s(DType.BF16) == pytest.approx(989e12 * 0.803)
    assert h100.achievable_flops_per_s(DType.FP8) == pytest.approx(1979e12 * 0.709)
    assert h100.achievable_flops_per_s(DType.FP32, allow_tf32=False) == pytest.approx(67e12 * 1.0)
    assert h100.achievable_bandwidth_bytes_per_s() == pytest.approx(3.35e12 * 0.834)
    a100 = load_hardware(BASE_DIR / "a100-sxm.yaml")
    assert a100.achievable_flops_per_s(DType.FP8) == pytest.approx(312e12 * 0.869)  # bf16 path
    fitted = load_hardware("a100-sxm")  # no fp8 units: no fp8 efficiency fitted, fp8 runs at the bf16 one
    assert DType.FP8 not in fitted.efficiency.matmul_per_dtype
    assert fitted.achievable_flops_per_s(DType.FP8) == fitted.achievable_flops_per_s(DType.BF16)


def test_memory_levels() -> None:
    h100 = load_hardware("h100-sxm")
    assert [lv.name for lv in h100.memory] == ["smem", "l2", "hbm"]
    assert h100.main_memory.name == "hbm"
    assert h100.level("L2").capacity_bytes == 50e6
    assert h100.level("smem").per_engine
    assert h100.memory_capacity_bytes == 80e9
    with pytest.raises(HardwareSpecError, match=r"no memory level 'l3'; levels: smem, l2, hbm"):
        h100.level("l3")


@pytest.mark.parametrize("override, field, value", [
    ({"efficiency": {"matmul": 1.5}}, "efficiency.matmul", "1.5"),
    ({"efficiency": {"memory": 0}}, "efficiency.memory", "0"),
    ({"launch_overhead_s": -1e-6}, "launch_overhead_s", "-1e-06"),
    ({"kind": "fpga"}, "kind", "'fpga'"),
    ({"colour": "red"}, "colour", "'red'"),
    ({"engines": {"count": 0, "clock_hz": 1e9, "vector_flops_per_s": 1.0}}, "engines.count", "0"),
    ({"engines": {"count": 1, "clock_hz": 1e9, "vector_flops_per_s": 1.0, "peak_flops_per_s": {"fp7": 1.0}}},
     "engines.peak_flops_per_s", "fp7"),
    ({"engines": {"count": 1, "clock_hz": 1e9, "vector_flops_per_s": 1.0, "peak_flops_per_s": {"bf16": -1}}},
     "engines.peak_flops_per_s", "-1"),
])
def test_bad_values_name_field_and_value(override: dict[str, Any], field: str, value: str) -> None:
    with pytest.raises(HardwareSpecError) as info:
        HardwareSpec.from_dict(_spec(**override), origin="toy.yaml")
    message = str(info.value)
    assert message.startswith("toy.yaml: ")
    assert field in message and value in message


def test_memory_rules() -> None:
    no_bw = [{"name": "dram", "capacity_bytes": 1e9}]
    with pytest.raises(HardwareSpecError, match="main memory 'dram' needs bandwidth_bytes_per_s"):
        HardwareSpec.from_dict(_spec(memory=no_bw))
    twice = [{"name": "l2", "capacity_bytes": 1e6}, {"name": "l2", "capacity_bytes": 1e9,
                                                    "bandwidth_bytes_per_s": 1e12}]
    with pytest.raises(HardwareSpecError, match="repeated: \\['l2'\\]"):
        HardwareSpec.from_dict(_spec(memory=twice))
    per_engine = [{"name": "sram", "capacity_bytes": 1e6, "bandwidth_bytes_per_s": 1e12, "per_engine": True}]
    with pytest.raises(HardwareSpecError, match="cannot be per_engine"):
        HardwareSpec.from_dict(_spec(memory=per_engine))
    with pytest.raises(HardwareSpecError, match="memory"):
        HardwareSpec.from_dict(_spec(memory=[]))


def test_spec_is_frozen() -> None:
    spec = HardwareSpec.from_dict(_spec())
    with pytest.raises(pydantic.ValidationError):
        spec.launch_overhead_s = 1.0  # type: ignore[misc]


def test_efficiency_defaults_are_ideal_and_labelled() -> None:
    eff = EfficiencySpec()
    assert (eff.matmul, eff.vector, eff.memory) == (1.0, 1.0, 1.0)
    assert "assumption" in eff.matmul_source
    with pytest.raises(pydantic.ValidationError):
        EfficiencySpec(matmul_per_dtype={DType.FP8: 1.2})


def test_a_row_reduction_reads_its_input_twice_only_past_the_engines_storage() -> None:
    from layerscope.hardware.spec import row_input_reads
    assert row_input_reads(64 * 1024, 228e3) == 1  # a 16K fp32 row fits an H100 SM
    assert row_input_reads(256 * 1024, 228e3) == 2  # 65K fp32: two passes
    assert row_input_reads(512 * 1024, 228e3, cluster=4) == 1  # QuACK's 4-SM cluster holds 131K fp32
    assert row_input_reads(1 << 30, None) == 1  # no per-engine level: never re-read
