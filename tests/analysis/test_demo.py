"""The README's main job, end to end on the bundled default (a shorter prompt to keep CI quick)."""

from __future__ import annotations

import gzip
import json

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from layerscope.analysis.demo import run_demo


def test_demo_estimates_simulates_captures_and_compares(tmp_path):
    result = run_demo(tmp_path / "demo", prompt_len=32, engines=4, iterations=1)
    out = tmp_path / "demo"
    for name in ("this-machine.yaml", "simulated-1engine.json.gz", "simulated-4engines.json.gz", "captured.json.gz"):
        assert (out / name).is_file(), name
    sim = json.loads(gzip.decompress((out / "simulated-4engines.json.gz").read_bytes()))
    threads = {e["args"]["name"] for e in sim["traceEvents"] if e.get("ph") == "M" and e["name"] == "thread_name"}
    assert threads == {f"engine {i}" for i in range(4)}
    assert result.estimate.scope == "layer 0"
    # The projections and norms of the layer join by name between the simulation and the capture.
    joined = set(result.comparison.ops.column("op").to_pylist())
    assert {"layers.0.self_attn.q_proj", "layers.0.mlp.down_proj", "layers.0.input_layernorm"} <= joined
    assert result.comparison.median_abs_error is not None
    doc = result.to_dict()
    assert doc["comparison"]["ops_joined"] == len(joined)
