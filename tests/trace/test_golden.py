"""The golden traces in tests/data/golden are what ``make golden`` produces today (byte for byte)."""

from __future__ import annotations

from pathlib import Path

import pytest

from layerscope.trace.golden import GOLDEN_NAMES, write_golden

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "golden"


@pytest.mark.parametrize("name", GOLDEN_NAMES)
def test_golden_trace_has_not_drifted(tmp_path: Path, name: str) -> None:
    write_golden(tmp_path)
    expected = (GOLDEN / name).read_bytes()
    assert (tmp_path / name).read_bytes() == expected, (
        f"{name} drifted from tests/data/golden; if the change is intended run `make golden` and review the diff"
    )
