from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable

import pytest


@pytest.fixture
def run_cli() -> Callable[..., subprocess.CompletedProcess[str]]:
    """Run ``python -m layerscope ARGS`` as a user would; returns the completed process."""

    def run(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "layerscope", *args], capture_output=True, text=True,
                              timeout=timeout)

    return run
