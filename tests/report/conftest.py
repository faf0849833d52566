"""Real inputs of the report: each command's ``--json`` output, made once per session through the installed
``layerscope`` on the bundled models (llama-3.2-1b decode on h100-sxm, as the estimate tests use) and the real
H200 capture in tests/data/traces; ``validate`` captures a tiny Llama on this CPU (needs torch)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from tests.conftest import layerscope_command

TRACES = Path(__file__).resolve().parents[1] / "data" / "traces"
#: The real capture of Llama-3.2-1B on an H200 (prefill 512, bf16; tests/data/traces/README.md).
H200_CAPTURE = TRACES / "h200-llama-3.2-1b-prefill-512-bf16.json.gz"


def make(folder: Path, name: str, *args: str, timeout: float = 180) -> Path:
    """Run ``layerscope ARGS --json`` in ``folder`` and keep its stdout as ``folder/name``."""
    done = subprocess.run([*layerscope_command(), *args, "--json"], capture_output=True, text=True, cwd=folder,
                          timeout=timeout, env={**os.environ, "NO_COLOR": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    path = folder / name
    path.write_text(done.stdout)
    return path


@pytest.fixture(scope="session")
def docs_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("report-inputs")


@pytest.fixture(scope="session")
def estimate_json(docs_dir: Path) -> Path:
    return make(docs_dir, "estimate.json", "estimate", "--model", "llama-3.2-1b", "--hardware", "h100-sxm",
                "--phase", "decode", "--batch", "1", "--context", "1024")


@pytest.fixture(scope="session")
def generate_json(docs_dir: Path) -> Path:
    return make(docs_dir, "generate.json", "estimate", "--model", "llama-3.2-1b", "--hardware", "h100-sxm",
                "--phase", "generate", "--prompt-len", "128", "--decode-steps", "3")


@pytest.fixture(scope="session")
def simulate_json(docs_dir: Path) -> Path:
    return make(docs_dir, "simulate.json", "simulate", "--model", "llama-3.2-1b", "--hardware", "nvl-ax",
                "--engines", "1..8")


@pytest.fixture(scope="session")
def plan_json(docs_dir: Path) -> Path:
    return make(docs_dir, "plan.json", "plan", "--model", "llama-3.1-70b", "--hardware", "dgx-h100", "--nodes", "2",
                "--gpus", "1..16", "--phase", "decode", "--batch", "64", "--context", "4096")


@pytest.fixture(scope="session")
def serving_json(docs_dir: Path) -> Path:
    """A run that wrote its trace and per-request table (relative paths, beside the document)."""
    return make(docs_dir, "serving.json", "serving", "--model", "llama-3.2-1b", "--hardware", "h100-sxm", "--rate",
                "20", "-n", "60", "--prompt-len", "256", "--output-len", "32", "--out", "serving.json.gz",
                "--requests-out", "serving.csv")


@pytest.fixture(scope="session")
def serving_bare_json(docs_dir: Path) -> Path:
    """A run with no trace and no per-request table: only the percentiles."""
    return make(docs_dir, "serving-bare.json", "serving", "--model", "llama-3.2-1b", "--hardware", "h100-sxm",
                "--rate", "20", "-n", "60", "--prompt-len", "256", "--output-len", "32")


@pytest.fixture(scope="session")
def compare_json(docs_dir: Path) -> Path:
    """The whole model simulated on the H200 preset against the real H200 capture, joined by module."""
    make(docs_dir, "sim.json", "simulate", "--model", "llama-3.2-1b", "--hardware", "h200", "--phase", "prefill",
         "--prompt-len", "512", "--all-layers", "--engines", "1", "--attention", "fused", "--out", "sim.json.gz")
    return make(docs_dir, "compare.json", "compare", "--sim", "sim.json.gz", "--real", str(H200_CAPTURE),
                "--no-cache")


@pytest.fixture(scope="session")
def compare_traces_json(docs_dir: Path) -> Path:
    """A real trace against its straggler copy (every time 5/4 of the original's; tests/data/traces/README.md)."""
    return make(docs_dir, "compare-traces.json", "compare", str(TRACES / "ranks" / "rank0.json.gz"),
                str(TRACES / "ranks" / "rank2.json.gz"), "--no-cache")


@pytest.fixture(scope="session")
def validate_json(docs_dir: Path) -> Path:
    """A tiny Llama's first layer captured on this CPU (the profiled path, as tests/app/test_validate.py runs it on
    every landing) and predicted on the server-cpu preset: about 14 s, most of it importing torch and transformers
    and building the model."""
    pytest.importorskip("torch", reason="validate captures a model: torch is not installed")
    pytest.importorskip("transformers", reason="validate captures a model: transformers is not installed")
    from layerscope.model import tiny_config

    config = docs_dir / "tiny-config.json"
    config.write_text(json.dumps(tiny_config("llama")))
    return make(docs_dir, "validate.json", "validate", "--model", str(config), "--hardware", "server-cpu",
                "--layers", "1", "--context", "6", "--decode-steps", "1", "--warmup", "0", "--iterations", "1",
                "--no-probe", "--profiled-times", "--out", str(docs_dir / "validate-out"), timeout=300)


#: Every kind's fixture, for tests that take one document of each kind.
KIND_FIXTURES = {"estimate": "estimate_json", "simulate": "simulate_json", "validate": "validate_json",
                 "compare": "compare_json", "compare-traces": "compare_traces_json", "plan": "plan_json",
                 "serving": "serving_json"}
