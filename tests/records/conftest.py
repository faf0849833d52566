"""Fixtures of the records tests: real catalog specs."""

from __future__ import annotations

import pytest

from layerscope.model import load_model_spec
from layerscope.model.spec import ModelSpec


@pytest.fixture(scope="session")
def llama70b() -> ModelSpec:
    return load_model_spec("meta-llama/Llama-3.1-70B")
