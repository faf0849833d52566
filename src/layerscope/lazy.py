"""Packages that import their submodules when a name is first used (PEP 562), not when the package is imported.

``import layerscope.hardware.spec`` runs ``layerscope/hardware/__init__.py`` first; when that ``__init__`` imported
every submodule (clusters, spreadsheet readers, preset listings), each command paid for all of them. A package
declares its exports as ``{submodule: names}`` and gets a module ``__getattr__`` and ``__dir__``:

    __getattr__, __dir__ = lazy_exports(__name__, {"layerscope.hardware.spec": ("HardwareSpec",), ...})

with the same imports under ``if TYPE_CHECKING:`` for type checkers. ``tests/test_lazy.py`` checks that every name
in each package's ``__all__`` resolves and that importing a package imports none of its submodules.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Mapping, Sequence
from types import ModuleType
from typing import Any


def lazy_exports(package: str, exports: Mapping[str, Sequence[str]]) -> tuple[Callable[[str], Any],
                                                                             Callable[[], list[str]]]:
    """Module-level ``__getattr__`` and ``__dir__`` for ``package``, resolving each name of ``exports``
    (``{module: names}``) by importing its module on first use and caching it in the package's namespace."""
    where = {name: module for module, names in exports.items() for name in names}
    namespace = importlib.import_module(package).__dict__

    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(where))

    return __getattr__, __dir__


def native_extension(module: ModuleType | None, env_var: str) -> ModuleType | None:
    """An optional C extension (``module``, None where ``setup.py`` could not build it), or None where the environment
    variable ``env_var`` is ``0`` and asks for the pure-Python code it mirrors (the scheduler's event loop, the
    Perfetto writer's packet loop)."""
    if module is None or os.environ.get(env_var, "1") == "0":
        return None
    return module
