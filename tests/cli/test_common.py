"""Shared CLI formatting (:mod:`layerscope.cli.common`)."""

from __future__ import annotations

import math

import pytest

from layerscope.cli.common import fmt_time_s


@pytest.mark.parametrize(("seconds", "text"), [
    (2.5, "2.500 s"), (0.0123, "12.300 ms"), (4.5e-5, "45.00 µs"), (3e-8, "30 ns"), (0.0, "0 ns"),
    # A negative time (the profiler's share of a forward, within noise) keeps its unit by magnitude.
    (-0.004726997, "-4.727 ms"), (-2.5e-6, "-2.50 µs"), (-1.5, "-1.500 s"), (math.nan, "-"),
])
def test_fmt_time_s(seconds: float, text: str) -> None:
    assert fmt_time_s(seconds) == text
