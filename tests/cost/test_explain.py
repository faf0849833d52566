"""``cost.explain``: the efficiencies each op got and the spec figures (with their sources and row ids) behind them."""

from __future__ import annotations

import math

import numpy as np
import pytest

from layerscope.cost.api import estimate
from layerscope.cost.explain import (
    FIGURES,
    UNCITED,
    FigureRule,
    efficiency_use,
    explain,
    explain_graph,
    row_ids,
    source_part,
)
from layerscope.cost.features import op_features
from layerscope.graph import linear_op
from layerscope.graph.ops import Op, OpGraph, TensorSpec
from layerscope.hardware import load_hardware
from layerscope.hardware.presets import list_presets
from layerscope.hardware.spec import HardwareSpec
from layerscope.model import load_model_spec
from layerscope.units import DType
from layerscope.workload import Workload

BF16 = DType.BF16
PER_DTYPE = "bf16: fitted on rows G-15, G-22; fp8: fitted on rows GX-15"


def _spec(toy_hw: HardwareSpec, **efficiency: object) -> HardwareSpec:
    data = toy_hw.model_dump()
    data["efficiency"].update(efficiency)
    data["launch_overhead_s"] = 3e-6
    data["sources"] = {"engines.peak_flops_per_s.bf16": "datasheet: 100 TFLOP/s", "launch_overhead_s": "K-08"}
    return HardwareSpec.from_dict(data)


def _gemm(m: int, n: int = 4096, k: int = 4096, dtype: DType = BF16, name: str = "proj") -> Op:
    return linear_op(name, name, 0, "x", m=m, n=n, k=k, weight_dtype=dtype, act_dtype=dtype)


def _norm() -> Op:
    x = TensorSpec("proj:out", (512, 4096), BF16)
    y = TensorSpec("norm:out", (512, 4096), BF16)
    return Op("norm", "norm", "norm", 0, (x,), (y,), flops=4 * 512 * 4096, act_read_bytes=x.nbytes,
              act_write_bytes=y.nbytes)


def test_a_gemm_gets_its_efficiency_times_hockneys_curve(toy_hw):
    # e = 0.5, W½ = 2 GFLOP: a GEMM of W FLOPs runs at e·W/(W + W½) of the peak, and says which figures did it.
    hw = _spec(toy_hw, matmul_per_dtype={"bf16": 0.5}, matmul_per_dtype_source=PER_DTYPE,
               matmul_half_flops={"bf16": 2e9}, matmul_half_flops_source="Hockney (1988); " + PER_DTYPE)
    ex = explain_graph(OpGraph(ops=(_gemm(512),)), hw)
    w = 2 * 512 * 4096 * 4096
    assert ex.compute_efficiency[0] == pytest.approx(0.5 * w / (w + 2e9))
    assert ex.bound[0] == 0  # compute
    assert set(ex.op_figures[0]) >= {"engines.peak_flops_per_s.bf16", "efficiency.matmul_per_dtype.bf16",
                                     "efficiency.matmul_half_flops.bf16", "launch_overhead_s"}
    eff = ex.figures["efficiency.matmul_per_dtype.bf16"]
    assert (eff.value, eff.row_ids, eff.term) == (0.5, ("G-15", "G-22"), "compute")
    assert eff.source == "bf16: fitted on rows G-15, G-22"
    half = ex.figures["efficiency.matmul_half_flops.bf16"]
    assert half.source == "Hockney (1988); bf16: fitted on rows G-15, G-22" and half.row_ids == ("G-15", "G-22")
    assert ex.governing(0)[-1] == "launch_overhead_s" and ex.row_ids(0) == ("G-15", "G-22", "K-08")
    assert ex.overhead_s[0] == pytest.approx(3e-6) and ex.launches[0] == 1 and ex.overhead_host_s[0] == 0


def test_a_memory_bound_gemv_gets_the_bandwidth_times_its_streaming_factor(toy_hw):
    # efficiency.memory 0.8, weight stream factor 0.9: weights at 0.72 of 1 TB/s, activations at 0.8.
    hw = _spec(toy_hw, memory=0.8, weight_stream_k={"bf16": [(1, 0.9)]}, weight_stream_k_source=PER_DTYPE)
    op = _gemm(1)
    ex = explain_graph(OpGraph(ops=(op,)), hw)
    act = op.act_read_bytes + op.act_write_bytes
    memory_s = op.weight_bytes / (1e12 * 0.72) + act / (1e12 * 0.8)
    assert ex.memory_efficiency[0] == pytest.approx((op.weight_bytes + act) / memory_s / 1e12)
    assert ex.bound[0] == 1  # memory
    assert ex.governing(0) == ("memory.HBM.bandwidth_bytes_per_s", "efficiency.memory",
                               "efficiency.weight_stream_k.bf16", "launch_overhead_s")
    assert not ex.figures["memory.HBM.bandwidth_bytes_per_s"].cited
    assert ex.figures["memory.HBM.bandwidth_bytes_per_s"].source == UNCITED
    assert ex.figures["efficiency.weight_stream_k.bf16"].value == ((1.0, 0.9),)
    # an op without FLOPs has no compute efficiency; a vector op is measured against the vector peak
    norm = explain_graph(OpGraph(ops=(_norm(),)), hw)
    assert norm.compute_efficiency[0] == pytest.approx(1.0) and "engines.vector_flops_per_s" in norm.op_figures[0]


def test_row_ids_come_from_the_ops_own_dtype_part():
    assert source_part(PER_DTYPE, "bf16") == ("bf16: fitted on rows G-15, G-22", True)
    assert row_ids(source_part(PER_DTYPE, "bf16")[0]) == ("G-15", "G-22")
    assert row_ids(source_part(PER_DTYPE, "fp8")[0]) == ("GX-15",)
    assert source_part(PER_DTYPE, "fp16")[0] == "bf16: fitted on rows G-15, G-22"  # one datapath, one rate
    assert source_part(PER_DTYPE, "int8") == (PER_DTYPE, False)  # no part for it: its rows are unknown
    assert source_part("fitted on rows MX-01, MX-02", "fp8") == ("fitted on rows MX-01, MX-02", True)
    # parts split at top-level semicolons only; a tag leads its part ("int4 (weight-only ...): ...")
    text = "common (a; b) K-01; int4 (weight-only): rows GX-32; bf16 causal: rows K-08"
    assert source_part(text, "int4")[0] == "common (a; b) K-01; int4 (weight-only): rows GX-32"
    assert row_ids("hardware-specs.md S19, W4A16 rows AX-07 and OX-02; G-15.") == ("AX-07", "OX-02", "G-15")


def test_per_dtype_figures_of_an_fp8_gemm_cite_the_fp8_rows(toy_hw):
    hw = _spec(toy_hw, matmul_per_dtype={"bf16": 0.8, "fp8": 0.6}, matmul_per_dtype_source=PER_DTYPE)
    ex = explain_graph(OpGraph(ops=(_gemm(256, dtype=DType.FP8, name="a"), _gemm(256, name="b"))), hw)
    assert ex.op_figures[0][:2] == ("engines.peak_flops_per_s.fp8", "efficiency.matmul_per_dtype.fp8")
    assert ex.figures["efficiency.matmul_per_dtype.fp8"].row_ids == ("GX-15",)
    assert ex.figures["efficiency.matmul_per_dtype.bf16"].row_ids == ("G-15", "G-22")
    assert ex.compute_efficiency.tolist() == pytest.approx([0.6, 0.8])


def test_missing_sources_say_so_and_never_raise(toy_hw):
    hw = _spec(toy_hw, matmul_per_dtype={"bf16": 0.7})  # no matmul_per_dtype_source
    ex = explain_graph(OpGraph(ops=(_gemm(64), _norm())), hw)
    fig = ex.figures["efficiency.matmul_per_dtype.bf16"]
    assert (fig.source, fig.row_ids, fig.cited) == (UNCITED, (), False)
    assert ex.figures["efficiency.vector"].source.startswith("assumption")  # the default's own words


def test_execution_profile_overhead_parts(toy_hw):
    # hf-eager: an RMSNorm is 8 bf16 kernels and one module call; the host part is that call.
    data = _spec(toy_hw).model_dump()
    data["execution"] = {"kernels": "hf-eager", "module_call_s": 5e-6, "source": "measured: run 7"}
    hw = HardwareSpec.from_dict(data)
    spec = load_model_spec("llama-3.2-1b")
    from layerscope.graph import build_layer_graph

    workload = Workload(phase="decode", batch=1, context=64)
    graph = build_layer_graph(spec, workload.passes()[0], workload, layer=0)
    ex = explain_graph(graph, hw)
    i = next(i for i, op in enumerate(graph.ops) if op.kind == "norm")
    assert ex.launches[i] == 8 and ex.overhead_host_s[i] == pytest.approx(5e-6)
    assert ex.overhead_s[i] == pytest.approx(8 * 3e-6 + 5e-6)
    assert {"execution.kernels", "execution.module_call_s", "launch_overhead_s"} <= set(ex.op_figures[i])
    assert ex.figures["execution.module_call_s"].source == "measured: run 7"


def test_a_generations_decode_is_explained_over_every_step():
    spec, hw = load_model_spec("llama-3.2-1b"), load_hardware("h100-sxm")
    est = estimate(spec, hw, Workload(phase="generate", batch=1, prompt_len=32, decode_steps=5))
    decode = est.phases[1]
    assert decode.passes == 5 and decode.cost is not None
    ex = explain(op_features(decode.graph).with_work(*decode.work), hw, decode.cost, passes=decode.passes)
    i = next(i for i, op in enumerate(decode.graph.ops) if op.name == "layers.0.mlp.down_proj")
    assert ex.overhead_s[i] == pytest.approx(5 * hw.launch_overhead_s) and ex.overhead_host_s[i] == 0
    # a GEMV: no W½; its arithmetic time is its serial K-loop (K = 8192 at 1.22 ns), the figure cited for it
    op = decode.graph.ops[i]
    k_loop_s = op.inputs[0].shape[-1] * hw.gemm_k_loop_s(BF16)
    assert k_loop_s > op.flops / (hw.engines.peak_flops_per_s[BF16] * hw.efficiency.matmul_for(BF16))
    assert ex.compute_efficiency[i] == pytest.approx(op.flops / k_loop_s / hw.engines.peak_flops_per_s[BF16])
    assert "efficiency.gemm_k_loop_s.bf16" in ex.op_figures[i]
    assert "kernels-kloop-cuda-graph.json" in ex.figures["efficiency.gemm_k_loop_s.bf16"].source
    assert decode.cost.time_s.sum() == pytest.approx(est.phase_times_s["decode"])


def test_a_new_figure_is_one_registry_entry(toy_hw, monkeypatch):
    rule = FigureRule("memory", lambda ctx: ctx.kind_is("norm"),
                      lambda ctx, _: (efficiency_use(ctx, "vector", "vector_source", 0.25, "memory"),))
    monkeypatch.setitem(FIGURES._entries, "efficiency.example", rule)
    ex = explain_graph(OpGraph(ops=(_gemm(64), _norm())), toy_hw)
    assert "efficiency.vector" in ex.op_figures[1] and "efficiency.vector" not in ex.op_figures[0]


@pytest.mark.parametrize("preset", sorted(name for name, _ in list_presets().items()
                                          if load_hardware(name).kind == "gpu"))
def test_every_figure_of_a_llama_8b_decode_on_a_gpu_preset_is_cited(preset):
    spec, hw = load_model_spec("llama-3.1-8b"), load_hardware(preset)
    est = estimate(spec, hw, Workload(phase="decode", batch=8, context=1024))
    part = est.phases[0]
    assert part.cost is not None
    ex = explain(op_features(part.graph).with_work(*part.work), hw, part.cost)
    uncited = sorted(path for path, fig in ex.figures.items() if not fig.cited or not fig.source.strip())
    assert not uncited, f"{preset}: figures without a source: {uncited}"
    assert {"launch_overhead_s", "efficiency.memory", f"memory.{hw.main_memory.name}.bandwidth_bytes_per_s"} \
        <= set(ex.figures)
    assert all(math.isnan(c) or 0 < c <= 1 + 1e-9 for c in ex.compute_efficiency)
    assert np.nanmax(ex.memory_efficiency) <= 1.5


def test_a_tensor_parallel_all_reduce_cites_the_interconnect_and_its_collective_rows():
    from layerscope.cost.explain import explain_graph
    from layerscope.graph import build_layer_graph

    spec = load_model_spec("llama-3.1-8b")
    workload = Workload(phase="decode", context=1024, tensor_parallel=2)
    graph = build_layer_graph(spec, workload.passes()[0], workload, layer=0)
    ex = explain_graph(graph, load_hardware("h100-sxm"))
    i = next(i for i, op in enumerate(graph.ops) if op.kind == "communication")
    assert {"interconnect.bandwidth_bytes_per_s", "interconnect.algorithms.ring"} <= set(ex.op_figures[i])
    assert any(r.startswith("CX-") for r in ex.figures["interconnect.algorithms.ring"].row_ids)
    gemm = next(i for i, op in enumerate(graph.ops) if op.kind == "gemm")
    assert not any(p.startswith("interconnect") for p in ex.op_figures[gemm])


def test_graph_replayed_kernels_cite_the_graph_node_cost_and_launched_ones_the_launch():
    from layerscope.cost.explain import explain_graph
    from layerscope.graph import build_model_graph

    data = load_hardware("h100-sxm").model_dump(mode="json", exclude={"calibration"})
    data["execution"] = {"kernels": "serving-graph"}
    hw = HardwareSpec.from_dict(data)
    workload = Workload(phase="decode", context=256)
    graph = build_model_graph(load_model_spec("llama-3.2-1b"), workload.passes()[0], workload)
    ex = explain_graph(graph, hw)
    names = [op.name for op in graph.ops]
    q = names.index("layers.0.self_attn.q_proj")
    head = names.index("lm_head")
    assert "execution.graph_node_s" in ex.op_figures[q] and "launch_overhead_s" not in ex.op_figures[q]
    assert "launch_overhead_s" in ex.op_figures[head] and "execution.graph_node_s" not in ex.op_figures[head]
    assert "record graph_node" in ex.figures["execution.graph_node_s"].source
