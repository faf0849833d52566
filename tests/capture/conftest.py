"""Fixtures of the capture tests: tiny configs of each family written to disk."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from layerscope.model import tiny_config


@pytest.fixture
def tiny_config_path(tmp_path: Path) -> Callable[[str], Path]:
    """Write the tiny (2-layer, hidden-64) config of a family to ``tmp_path/<family>/config.json``."""

    def write(family: str) -> Path:
        directory = tmp_path / family
        directory.mkdir()
        path = directory / "config.json"
        path.write_text(json.dumps(tiny_config(family)))
        return path

    return write
