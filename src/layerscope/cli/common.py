"""Helpers shared by the command modules: JSON output and rich tables."""

from __future__ import annotations

import json
import math
import sys
from typing import Any


def _default(value: Any) -> Any:
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    if hasattr(value, "tolist"):
        return value.tolist()
    if hasattr(value, "value"):
        return value.value
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    raise TypeError(f"not JSON serializable: {type(value).__name__}")


def _clean(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def print_json(obj: Any) -> None:
    """Print ``obj`` as JSON on stdout (NaN/inf become null, so the output is strict JSON)."""
    sys.stdout.write(json.dumps(_clean(obj), default=_default, indent=2, allow_nan=False) + "\n")


def console() -> Any:
    """A rich console; when output is not a terminal, wide enough that tables don't wrap."""
    from rich.console import Console

    con = Console()
    return con if con.is_terminal else Console(width=200)


def fmt_si(value: float, unit: str = "") -> str:
    """1.23e9 -> '1.23 G' + unit."""
    if value == 0 or not math.isfinite(value):
        return f"{value:g} {unit}".strip()
    for factor, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            return f"{value / factor:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}".strip()


def fmt_time_s(seconds: float) -> str:
    """Seconds in the most readable unit (chosen by magnitude: a negative time keeps its sign)."""
    if not math.isfinite(seconds):
        return "-"
    size = abs(seconds)
    if size >= 1:
        return f"{seconds:.3f} s"
    if size >= 1e-3:
        return f"{seconds * 1e3:.3f} ms"
    if size >= 1e-6:
        return f"{seconds * 1e6:.2f} µs"
    return f"{seconds * 1e9:.0f} ns"
