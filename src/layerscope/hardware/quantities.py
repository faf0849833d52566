"""Numbers with units as people write them in spec sheets: ``2.5 GHz``, ``342 GB/s``, ``36 MB``.

Decimal vs binary: ``KB``/``MB``/``GB``/``TB`` are powers of 1000 (as vendors print memory
bandwidth and HBM capacity); only the IEC names ``KiB``/``MiB``/``GiB``/``TiB`` are powers of
1024. A lower-case ``b`` in a rate (``Gbps``, ``Gb/s``) means bits and is divided by 8; every
other unit is matched case-insensitively (``mb`` is a megabyte). A number without a unit is in the
base unit of its dimension (:data:`BASE_UNITS`): ``2500000000`` Hz, ``367219703808`` B/s.
"""

from __future__ import annotations

import math
import re
from typing import Literal

from layerscope.units import quote

Dimension = Literal["count", "fraction", "hz", "bytes", "bytes_per_s", "flops_per_s", "s", "pj_per_flop", "pj_per_byte",
                    "w"]

_PREFIX = {"": 1.0, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12, "p": 1e15}
_BINARY = {"ki": 1024.0, "mi": 1024.0**2, "gi": 1024.0**3, "ti": 1024.0**4}


def _unit_table() -> dict[Dimension, dict[str, float]]:
    table: dict[Dimension, dict[str, float]] = {
        "count": {"": 1.0, "x": 1.0, "macs": 1.0, "macs/cycle": 1.0, "macs/cycle/core": 1.0,
                  "cores": 1.0, "sms": 1.0, "cus": 1.0},
        "fraction": {"": 1.0, "%": 0.01},
        "hz": {},
        "bytes": {"bytes": 1.0, "byte": 1.0},
        "bytes_per_s": {"bytes/s": 1.0},
        "flops_per_s": {"flop/s": 1.0, "flops": 1.0, "ops": 1.0, "op/s": 1.0},
        "s": {"s": 1.0, "sec": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ns": 1e-9},
        "pj_per_flop": {"pj/flop": 1.0, "pj/op": 1.0, "fj/flop": 1e-3, "nj/flop": 1e3},
        # a byte is 8 bits: pJ/bit figures (HBM, links) times 8
        "pj_per_byte": {"pj/b": 1.0, "pj/byte": 1.0, "pj/bit": 8.0, "fj/bit": 8e-3, "fj/b": 1e-3, "nj/b": 1e3},
        "w": {"w": 1.0, "watt": 1.0, "watts": 1.0, "kw": 1e3},
    }
    for prefix, scale in _PREFIX.items():
        table["hz"][f"{prefix}hz"] = scale
        table["bytes"][f"{prefix}b"] = scale
        for rate in ("b/s", "bps", "b/sec"):
            table["bytes_per_s"][f"{prefix}{rate}"] = scale
        for flops in ("flop/s", "flops", "ops", "op/s"):
            table["flops_per_s"][f"{prefix}{flops}"] = scale
    for prefix, scale in _BINARY.items():
        table["bytes"][f"{prefix}b"] = scale
        for rate in ("b/s", "bps"):
            table["bytes_per_s"][f"{prefix}{rate}"] = scale
    return table


BASE_UNITS: dict[Dimension, str] = {
    "count": "", "fraction": "", "hz": "Hz", "bytes": "B", "bytes_per_s": "B/s", "flops_per_s": "FLOP/s", "s": "s",
    "pj_per_flop": "pJ/FLOP", "pj_per_byte": "pJ/B", "w": "W",
}
"""The unit of a bare number, per dimension (``count`` and ``fraction`` have none)."""

UNITS: dict[Dimension, dict[str, float]] = _unit_table()
"""Per dimension, lower-cased unit name → factor to the base unit (Hz, B, B/s, FLOP/s, s)."""

# Bit rates, matched case-sensitively before the case-insensitive byte table.
_BIT_RATE = re.compile(r"^([kKMGT]?)b(?:ps|/s)$")

_NON_FINITE = re.compile(r"[-+]?(?:nan|inf(?:inity)?)(?![a-z])", re.IGNORECASE)

# Matched against stripped text with a greedy tail: a lazy tail before trailing spaces backtracks
# quadratically on a long cell.
_NUMBER = re.compile(r"([-+]?(?:\d[\d,_]*\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*(.*)", re.DOTALL)


def allowed_units(dimension: Dimension) -> str:
    """The unit names accepted for ``dimension``, for error messages."""
    shown = {
        "count": "a plain number",
        "fraction": "a number in (0, 1] or a percentage (83 %)",
        "hz": "Hz, kHz, MHz, GHz",
        "bytes": "B, KB, MB, GB, TB (×1000) or KiB, MiB, GiB, TiB (×1024)",
        "bytes_per_s": "B/s, KB/s, MB/s, GB/s, TB/s (or GBps …), GiB/s …, Gb/s (bits)",
        "flops_per_s": "FLOP/s, GFLOP/s, TFLOP/s, PFLOP/s (or TFLOPS, TOPS)",
        "s": "s, ms, us (µs), ns",
        "pj_per_flop": "pJ/FLOP, fJ/FLOP, nJ/FLOP",
        "pj_per_byte": "pJ/B, pJ/bit (×8), fJ/bit, nJ/B",
        "w": "W, kW",
    }
    return shown[dimension]


def unit_factor(unit: str, dimension: Dimension) -> float | None:
    """Factor from ``unit`` to the base unit of ``dimension``, or None when not allowed."""
    text = unit.strip()
    if dimension == "bytes_per_s":
        bits = _BIT_RATE.match(text)
        if bits:
            return _PREFIX[bits.group(1).lower()] / 8.0
    return UNITS[dimension].get(text.lower().replace(" ", ""))


def split_number(text: str) -> tuple[float, str] | None:
    """``"2.5 GHz"`` → ``(2.5, "GHz")``; ``"1,935"`` → ``(1935.0, "")``; None when no number leads."""
    match = _NUMBER.fullmatch(text.strip())
    if not match:
        return None
    try:
        value = float(match.group(1).replace(",", "").replace("_", ""))
    except ValueError:
        return None
    return value, match.group(2)


def parse_quantity(text: str | float | int, dimension: Dimension, default_unit: str = "") -> float:
    """``text`` in the base unit of ``dimension`` (:data:`BASE_UNITS`).

    The unit is the one written after the number, else ``default_unit``, else the base unit itself
    (a bare ``2500000000`` is 2.5 GHz). Raises ValueError with a message saying what was wrong and
    what is allowed; the value is quoted shortened (:func:`quote`).
    """
    if isinstance(text, bool):
        raise ValueError(f"expected a number, got {text!r}")
    if isinstance(text, int | float):
        value, unit = float(text), ""
    else:
        if _NON_FINITE.match(text.strip()):
            raise ValueError(f"{quote(text)} is not a finite number")
        split = split_number(text)
        if split is None:
            raise ValueError(f"not a number: {quote(text)}; expected e.g. '2.5' or '2.5 {_example(dimension)}'")
        value, unit = split
    unit = unit or default_unit
    factor = unit_factor(unit, dimension) if unit else 1.0
    if factor is None:
        raise ValueError(f"unknown unit {quote(unit)} in {quote(text)}; allowed: {allowed_units(dimension)}")
    result = value * factor
    if not math.isfinite(result):
        raise ValueError(f"{quote(text)} is not a finite number")
    return result


def _example(dimension: Dimension) -> str:
    return {"hz": "GHz", "bytes": "MB", "bytes_per_s": "GB/s", "flops_per_s": "TFLOP/s", "s": "us",
            "pj_per_flop": "pJ/FLOP", "pj_per_byte": "pJ/bit", "w": "W"}.get(
        dimension, ""
    )
