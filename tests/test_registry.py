"""``layerscope.registry.Registry``: one lookup, one error message, registration order, no double names."""

from __future__ import annotations

import pytest

from layerscope.errors import CostModelError, ScheduleError
from layerscope.registry import Registry


def test_lookup_and_mapping_view():
    reg: Registry[int] = Registry("widget", CostModelError, {"b": 2, "a": 1})
    assert reg.lookup("a") == 1 and reg["b"] == 2
    assert list(reg) == ["b", "a"] and reg.names() == ["a", "b"] and len(reg) == 2
    assert "a" in reg and "c" not in reg and reg.get("c") is None
    with pytest.raises(KeyError):
        reg["c"]


def test_unknown_name_raises_the_registrys_error_listing_the_known_names():
    reg: Registry[int] = Registry("policy", ScheduleError, {"list": 1, "in-order": 2})
    with pytest.raises(ScheduleError) as info:
        reg.lookup("heft")
    assert str(info.value) == "unknown policy 'heft'; known: in-order, list"
    with pytest.raises(ScheduleError, match="unknown policy"):
        reg.lookup(["unhashable"])  # type: ignore[arg-type]


def test_register_as_decorator_and_twice_refused():
    reg: Registry[object] = Registry("thing", CostModelError)

    @reg.register("f")
    def f() -> int:
        return 3

    assert reg.lookup("f") is f and reg.register("g", 4) == 4
    with pytest.raises(ValueError, match="registered twice"):
        reg.add("f", f)
    with pytest.raises(ValueError, match="non-empty"):
        reg.add("", 1)
