"""Embedding, lm_head and sampling."""

from __future__ import annotations

from layerscope.graph import build_model_graph
from layerscope.workload import Workload


def test_embedding_is_a_gather(spec) -> None:
    w = Workload(phase="prefill", prompt_len=100, batch=3)
    g = build_model_graph(spec("llama-8b"), w.passes()[0], w)
    emb = g.ops[g.index["embed_tokens"]]
    assert emb.weight_bytes == 300 * 4096 * 2  # rows read, not the 128256-row table
    assert emb.flops == 0
    head = g.ops[g.index["lm_head"]]
    assert head.attr("tied_to") is None and head.inputs[1].name == "lm_head.weight"
    assert head.gemm is not None and head.gemm.m == 3


def test_tp_vocab_parallel_head(spec) -> None:
    w = Workload(phase="decode", context=5, tensor_parallel=4)
    g = build_model_graph(spec("llama-8b"), w.passes()[0], w)
    assert g.ops[g.index["lm_head"]].flops == 2 * 4096 * (128256 // 4)
