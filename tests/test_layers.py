"""The one-way layering of DESIGN.md, checked on the source: no module imports a lower layer."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "layerscope"

#: Layers, top (imported by everyone) to bottom (imports everyone).
LAYERS = ("errors", "units", "registry", "model", "hardware", "workload", "graph", "records", "cost", "schedule",
          "serving",
          "trace", "capture", "analysis", "app", "report", "cli")
RANK = {name: i for i, name in enumerate(LAYERS)}
# errors, units, registry, docstrings and lazy are one layer.
RANK["units"] = RANK["registry"] = RANK["docstrings"] = RANK["lazy"] = RANK["errors"]


def _layer_of(path: Path) -> str:
    rel = path.relative_to(SRC).parts
    return rel[0].removesuffix(".py")


def _imports(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(), filename=str(path))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append((node.lineno, node.module))
        elif isinstance(node, ast.Import):
            out.extend((node.lineno, alias.name) for alias in node.names)
    return out


def test_no_back_edges():
    violations = []
    for path in sorted(SRC.rglob("*.py")):
        if path.name == "__init__.py" and path.parent == SRC:
            continue
        own = _layer_of(path)
        if own not in RANK:
            continue
        for lineno, module in _imports(path):
            parts = module.split(".")
            if parts[0] != "layerscope" or len(parts) < 2 or parts[1] not in RANK:
                continue
            if RANK[parts[1]] > RANK[own]:
                violations.append(f"{path.relative_to(SRC)}:{lineno} ({own}) imports {module}")
    assert not violations, "imports against the layering:\n" + "\n".join(violations)


def test_every_package_has_a_layer():
    """A new top-level package or module gets its place in LAYERS, so its imports are checked too."""
    tops = {p.name.removesuffix(".py") for p in SRC.iterdir() if p.suffix == ".py" or (p / "__init__.py").exists()}
    assert tops - {"__init__", "__main__"} <= set(RANK), sorted(tops - {"__init__", "__main__"} - set(RANK))


@pytest.mark.parametrize("module", ["layerscope", "layerscope.cli.app", "layerscope.cost", "layerscope.model"])
def test_importing_never_imports_torch(module):
    code = f"import sys, {module}; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_the_cli_app_loads_no_library():
    """``layerscope --help`` and option parsing load no numpy, pydantic or library package: every command
    imports what it needs when it runs (its options' defaults come from import-free modules)."""
    code = ("import sys, layerscope.cli.app; print(sorted(m for m in ('numpy', 'pydantic', 'layerscope.graph', "
            "'layerscope.cost', 'layerscope.app.requests') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
