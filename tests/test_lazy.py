"""Packages resolve their exports on first use (:mod:`layerscope.lazy`)."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

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
    code = (f"import sys, {package}; print(sorted(m for m in sys.modules if m.startswith('{package}.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "[]"


def test_a_spec_module_does_not_import_clusters_or_spreadsheet_readers() -> None:
    code = ("import sys, layerscope.hardware.spec, layerscope.model.spec; "
            "print(sorted(m for m in ('layerscope.hardware.cluster', 'layerscope.hardware.loaders', "
            "'layerscope.model.catalog') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "[]"


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
