"""Shared inputs of the serving tests: a small real model on a real GPU preset."""

from __future__ import annotations

import pytest

from layerscope.hardware import load_hardware
from layerscope.model import load_model_spec

SMALL_MODEL = "llama-3.2-1b"
HARDWARE = "h100-sxm"


@pytest.fixture(scope="session")
def small_spec():
    return load_model_spec(SMALL_MODEL)


@pytest.fixture(scope="session")
def h100():
    return load_hardware(HARDWARE)
