"""Fixtures of the graph tests: the real HF configs bundled in the package's catalog."""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from pathlib import Path

import pytest

import layerscope.model
from layerscope.model import ModelSpec, load_model_spec

# The package's copy of ../shared/data/hf-configs, so the tests need nothing outside the repository.
HF_CONFIGS = Path(layerscope.model.__file__).resolve().parent / "catalog"

#: Short names of the configs the tests use.
MODELS = {
    "llama-1b": "meta-llama--Llama-3.2-1B",
    "llama-8b": "meta-llama--Llama-3.1-8B",
    "llama2-7b": "meta-llama--Llama-2-7b-hf",
    "qwen3-0.6b": "Qwen--Qwen3-0.6B",
    "qwen3-30b-a3b": "Qwen--Qwen3-30B-A3B",
    "deepseek-v3": "deepseek-ai--DeepSeek-V3",
    "deepseek-v2-lite": "deepseek-ai--DeepSeek-V2-Lite",
    "gemma2-9b": "google--gemma-2-9b-it",
    "gemma3-4b": "google--gemma-3-4b-it",
    "mistral-7b": "mistralai--Mistral-7B-v0.1",
    "mixtral": "mistralai--Mixtral-8x7B-v0.1",
    "gpt-oss-20b": "openai--gpt-oss-20b",
    "gpt2": "openai-community--gpt2",
    "gptj": "EleutherAI--gpt-j-6b",
    "opt": "facebook--opt-1.3b",
    "phi3": "microsoft--Phi-3-mini-4k-instruct",
}


@cache
def load(name: str) -> ModelSpec:
    """The ModelSpec of a short name in :data:`MODELS`."""
    return load_model_spec(HF_CONFIGS / MODELS[name] / "config.json")


@pytest.fixture(scope="session")
def spec() -> Callable[[str], ModelSpec]:
    return load
