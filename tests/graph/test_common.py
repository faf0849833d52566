"""The shared op factories of the graph builders, by hand (layerscope/graph/_common.py)."""

from __future__ import annotations

import pytest

from layerscope.graph import build_layer_graph
from layerscope.graph._common import Group, all_reduce, make_context
from layerscope.units import DType
from layerscope.workload import Workload

BF16 = DType.BF16


@pytest.mark.parametrize("tp", [2, 4, 8])
def test_ring_all_reduce_by_hand(spec, tp: int) -> None:
    # x[T=2, 4096] bf16 over p = tp devices (Patarasuk & Yuan 2009): reduce-scatter leaves each device
    # one chunk of numel/p elements, summed from the p devices' copies: (p - 1) adds per element of it,
    # (p - 1)·numel/p in all (p = 4: 3 x 8192 / 4 = 6144), not p·numel/p = numel. The wire carries
    # 2·(p - 1)/p of the 16 KiB message; the local buffer is read and written once.
    ctx = make_context(spec("llama-8b"), (Group(count=2, new=1, cached=100),), BF16, BF16, BF16, tp)
    ar = all_reduce(ctx, "o_proj.all_reduce", "o_proj", 0, "o_proj:out", 4096)
    numel, msg = 2 * 4096, 2 * 4096 * 2
    assert ar.flops == {2: 4096, 4: 6144, 8: 7168}[tp] == (tp - 1) * numel // tp
    assert ar.comm_bytes == 2 * (tp - 1) * msg // tp
    assert (ar.act_read_bytes, ar.act_write_bytes) == (msg, msg)
    assert ar.attr("tp") == tp and ar.attr("message_bytes") == msg


def test_every_all_reduce_of_a_tensor_parallel_layer_adds_half_the_elements_at_tp2(spec) -> None:
    # Llama-3.1-8B decode, 3 sequences, tp = 2: attention's and the MLP's all-reduces each sum
    # x[3, 4096] across 2 devices, one add per element of each device's half: 3 x 4096 / 2 = 6144.
    w = Workload(phase="decode", batch=3, context=50, tensor_parallel=2)
    g = build_layer_graph(spec("llama-8b"), w.passes()[0], w, layer=0)
    reduces = [op for op in g.ops if op.kind == "communication"]
    assert [op.name for op in reduces] == ["layers.0.self_attn.o_proj.all_reduce", "layers.0.mlp.down_proj.all_reduce"]
    assert [op.flops for op in reduces] == [3 * 4096 // 2] * 2
