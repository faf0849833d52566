from __future__ import annotations

import pytest

from layerscope.hardware.spec import HardwareSpec


@pytest.fixture
def toy_hw() -> HardwareSpec:
    """A chip with round numbers so hand-computed times are exact: 100 TFLOP/s bf16,
    10 TFLOP/s vector, 1 TB/s memory, a 4 MiB L2 at 10 TB/s, no overheads, efficiency 1."""
    return HardwareSpec.from_dict({
        "name": "toy",
        "kind": "gpu",
        "engines": {"count": 4, "clock_hz": 1e9, "peak_flops_per_s": {"bf16": 100e12, "fp8": 200e12},
                    "vector_flops_per_s": 10e12},
        "memory": [
            {"name": "smem", "capacity_bytes": 64 * 1024, "bandwidth_bytes_per_s": 40e12, "per_engine": True},
            {"name": "L2", "capacity_bytes": 4 * 1024**2, "bandwidth_bytes_per_s": 10e12},
            {"name": "HBM", "capacity_bytes": 80e9, "bandwidth_bytes_per_s": 1e12},
        ],
        "launch_overhead_s": 0.0,
    })
