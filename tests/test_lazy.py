"""Packages resolve their exports on first use (:mod:`layerscope.lazy`)."""

from __future__ import annotations

import importlib
import sys

import pytest
from tests.conftest import modules_loaded

from layerscope.lazy import lazy_exports

PACKAGES = ("layerscope.hardware", "layerscope.graph", "layerscope.cost", "layerscope.model")


@pytest.mark.parametrize("package", PACKAGES)
def test_every_exported_name_resolves_to_its_submodule_object(package: str) -> None:
    pkg = importlib.import_module(package)
    for name in pkg.__all__:
        value = getattr(pkg, name)
        home = getattr(value, "__module__", None)
        assert home is None or home.startswith(package) or not callable(value), (name, home)
        assert name in dir(pkg)


@pytest.mark.parametrize("package", PACKAGES)
def test_importing_a_package_imports_none_of_its_submodules(package: str) -> None:
    submodules = {m for m in lazy_modules(importlib.import_module(package)) if m.startswith(f"{package}.")}
    assert submodules and modules_loaded(f"import {package}", submodules) == []


def test_a_spec_module_does_not_import_clusters_or_spreadsheet_readers() -> None:
    assert modules_loaded("import layerscope.hardware.spec, layerscope.model.spec", (
        "layerscope.hardware.cluster", "layerscope.hardware.loaders", "layerscope.model.catalog")) == []


def lazy_modules(pkg: object) -> set[str]:
    """The submodules a lazy package resolves its names from."""
    return {getattr(pkg, name).__module__ for name in pkg.__all__  # type: ignore[attr-defined]
            if hasattr(getattr(pkg, name), "__module__")}


def test_an_unknown_name_is_an_attribute_error_and_a_resolved_one_is_cached() -> None:
    import types

    module = types.ModuleType("layerscope._lazy_probe")
    sys.modules[module.__name__] = module
    try:
        getattr_, dir_ = lazy_exports(module.__name__, {"math": ("sqrt",)})
        import math

        assert getattr_("sqrt") is math.sqrt and module.__dict__["sqrt"] is math.sqrt
        assert "sqrt" in dir_()
        with pytest.raises(AttributeError, match="no attribute 'nope'"):
            getattr_("nope")
    finally:
        del sys.modules[module.__name__]
