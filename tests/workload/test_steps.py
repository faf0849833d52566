"""The names of prefill and decode steps, shared by graphs, traces, captures and joins."""

from __future__ import annotations

import pytest

from layerscope.graph.builder import build_steps_graph
from layerscope.model import load_model_spec
from layerscope.workload import make_workload
from layerscope.workload.steps import (
    PHASE_RANGE_RE,
    PREFILL_RANGE,
    is_phase_range,
    step_of_range,
    step_range,
    without_step,
)


@pytest.mark.parametrize(("name", "phase", "step"), [
    ("prefill", True, None), ("decode_step_0", True, 0), ("decode_step_12", True, 12),
    ("decode_step_", False, None), ("decode_step_x", False, None), ("decode", False, None),
    ("prefill_1", False, None), ("layers.0.mlp", False, None), ("ProfilerStep#3", False, None)])
def test_phase_ranges_by_hand(name, phase, step):
    assert is_phase_range(name) is phase
    assert step_of_range(name) == step
    assert PHASE_RANGE_RE.pattern == "prefill|decode_step_[0-9]+"  # plain syntax: DuckDB reads it too


def test_step_names_round_trip_and_match_the_graph():
    assert PREFILL_RANGE == "prefill" and step_range(3) == "decode_step_3" and step_of_range(step_range(3)) == 3
    assert without_step("decode_step_3.layers.0.mlp.act_mul") == "layers.0.mlp.act_mul"
    assert without_step("layers.0.decode_step_3.x") == "layers.0.decode_step_3.x"
    # a multi-step graph's ops carry exactly these prefixes
    w = make_workload(phase="generate", prompt_len=8, decode_steps=2)
    g = build_steps_graph(load_model_spec("llama-3.2-1b"), w, 2, all_layers=False)
    prefixes = {op.name.split(".", 1)[0] for op in g.ops if op.name.startswith("decode_step_")}
    assert prefixes == {step_range(0), step_range(1)}
