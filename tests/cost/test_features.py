"""``cost.features.op_features`` of a graph whose builder deferred its ops: computed once per template op."""

from __future__ import annotations

from dataclasses import fields, replace

import numpy as np
import pytest

from layerscope.cost import models
from layerscope.cost.api import time_graph
from layerscope.cost.features import OpFeatures, op_features
from layerscope.graph import build_model_graph, build_steps_graph
from layerscope.graph.ops import DeferredOps, OpGraph
from layerscope.hardware import load_hardware
from layerscope.model import load_model_spec
from layerscope.workload import make_workload

CASES = [
    ("llama-3.1-8b", dict(phase="decode", batch=1, context=1031)),
    ("qwen3-30b-a3b", dict(phase="prefill", batch=2, prompt_len=77, weight_dtype="fp8")),
    ("gpt-oss-20b", dict(phase="decode", batch=4, context=333, weight_dtype="int4")),
    ("deepseek-v2-lite", dict(phase="chunked", batch=2, chunk=32, context=64, tensor_parallel=2,
                              sequence_parallel=True, pipeline_parallel=3)),
    ("gemma-2-9b-it", dict(phase="decode", batch=2, context=5000)),
]
HARDWARE = ("h100-sxm", "a100-sxm", "b200", "server-cpu")


def _facts(f: OpFeatures, hw: str) -> list[np.ndarray | None]:
    """The per-op facts of cost.models computed from the ops (``_per_op``)."""
    spec = load_hardware(hw)
    return [models._causal_ops(f), models.decode_attention_ops(f), models.weight_only_dtypes(f),
            models.weight_stream_factor(f, spec), models.row_reread_bytes(f, spec),
            *(f.kind_mask(k) for k in ("attention", "gemm", "norm", "communication"))]


@pytest.mark.parametrize(("name", "kw"), CASES)
def test_features_of_deferred_ops_equal_those_of_the_ops(name: str, kw: dict) -> None:
    """Features and per-op facts gathered from the template ops equal, array by array, those read from every
    op; timing the graph makes none of its ops."""
    spec = load_model_spec(name)
    w = make_workload(**kw)
    g = build_model_graph(spec, w.passes()[0], w)
    lazy = op_features(g)
    assert lazy.rep_of is not None and len(lazy.reps) < len(g) / 4 and isinstance(lazy.ops, DeferredOps)
    for hw in HARDWARE:
        time_graph(g, load_hardware(hw))
    assert "ops" not in vars(g)
    eager = op_features(OpGraph(ops=g.ops, name=g.name))
    assert eager.rep_of is None and eager.ops is g.ops
    for f in fields(OpFeatures):
        if f.compare:
            a, b = getattr(lazy, f.name), getattr(eager, f.name)
            if isinstance(a, np.ndarray):
                assert a.dtype == b.dtype and np.array_equal(a, b), f.name
            else:
                assert a == b, f.name
    for hw in HARDWARE:
        for a, b in zip(_facts(lazy, hw), _facts(eager, hw), strict=True):
            assert (a is None and b is None) or (a.dtype == b.dtype and np.array_equal(a, b))  # type: ignore[union-attr]
    for hw in HARDWARE:
        spec_hw = load_hardware(hw)
        t_lazy, t_eager = time_graph(g, spec_hw), time_graph(OpGraph(ops=g.ops, name=g.name), spec_hw)
        assert np.array_equal(t_lazy.time_s, t_eager.time_s) and t_lazy.bound == t_eager.bound


def test_steps_graph_features_per_template() -> None:
    spec = load_model_spec("llama-3.2-1b")
    w = make_workload(phase="decode", batch=2, context=91)
    g = build_steps_graph(spec, w, 3)
    lazy = op_features(g)
    assert lazy.rep_of is not None and len(lazy.rep_of) == len(g)
    eager = op_features(OpGraph(ops=g.ops, name=g.name))
    # each decode step's context differs, so each has its own templates: all its ops but 15 of its 16 layers'
    per_layer = sum(1 for op in g.ops if op.layer == 0) // 3
    assert len(lazy.reps) == len(g) - 3 * 15 * per_layer
    assert np.array_equal(lazy.flops, eager.flops) and lazy.kinds == eager.kinds
    assert np.array_equal(lazy.dtype_code, eager.dtype_code) and np.array_equal(lazy.gemm_mnkb, eager.gemm_mnkb)


@pytest.mark.parametrize(("name", "kw"), CASES)
def test_weight_only_dtypes_extracted_with_the_features_equal_those_read_from_the_ops(name: str,
                                                                                          kw: dict) -> None:
    """``OpFeatures.weight_only_code`` (extracted with the other features) gives the weight-only quantized GEMMs that
    reading each op's weights gives (int4 weights on gpt-oss, fp8 weights under bf16 activations on qwen3; none
    elsewhere)."""
    spec = load_model_spec(name)
    w = make_workload(**kw)
    f = op_features(build_model_graph(spec, w.passes()[0], w))
    assert f.weight_only_code is not None
    read = models.weight_only_dtypes(replace(f, weight_only_code=None, plans={}))
    assert np.array_equal(models.weight_only_dtypes(f), read)
    assert (read >= 0).any() == (kw.get("weight_dtype") in ("int4", "fp8"))


@pytest.mark.parametrize("row_capacity", [1024, 4096, 1 << 20])
def test_row_rereads_decided_from_the_templates_equal_those_of_every_op(row_capacity: int) -> None:
    """A model graph's norms re-read their 4 KB rows (Llama-3.2-1B, bf16 hidden 2048) on engines holding
    1 KB, not on those holding 4 KB or 1 MB: the few template ops decide it as every op does."""
    base = load_hardware("h100-sxm").model_dump()
    base["memory"] = [{**lvl, "capacity_bytes": row_capacity} if lvl["per_engine"] else lvl
                      for lvl in base["memory"]]
    hw = type(load_hardware("h100-sxm")).from_dict(base)
    assert hw.row_capacity_bytes() == row_capacity
    spec = load_model_spec("llama-3.2-1b")
    w = make_workload(phase="prefill", batch=2, prompt_len=64)
    g = build_model_graph(spec, w.passes()[0], w)
    lazy, eager = op_features(g), op_features(OpGraph(ops=g.ops, name=g.name))
    a, b = models.row_reread_bytes(lazy, hw), models.row_reread_bytes(eager, hw)
    if row_capacity == 1024:
        assert a is not None and b is not None and np.array_equal(a, b) and (a > 0).sum() == 2 * 16 + 1
    else:
        assert a is None and b is None
