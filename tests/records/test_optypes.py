"""The op-type registry: names from const axes, hand-checked definitions, references that parse."""

from __future__ import annotations

import ast

import pytest

from layerscope.errors import RecordsError
from layerscope.records.optypes import REGISTRY, op_type
from layerscope.records.schema import make_definition


def test_every_reference_defines_run_and_every_shape_names_an_axis() -> None:
    for op in REGISTRY.values():
        tree = ast.parse(op.reference)
        assert any(isinstance(n, ast.FunctionDef) and n.name == "run" for n in tree.body), op.op_type
        axes = set(op.const_axes) | set(op.var_axes)
        for t in (*op.inputs.values(), *op.outputs.values()):
            assert set(t.shape) <= axes, op.op_type


def test_gemm_definition_by_hand() -> None:
    # Llama-3.1-70B q_proj: 8192 -> 64 heads x 128 = 8192 features.
    d = make_definition(op_type("gemm"), {"N": 8192, "K": 8192}, {"act": "bfloat16", "weight": "bfloat16"})
    assert d.name == "gemm_n8192_k8192" and d.op_type == "gemm"
    assert d.const_axes() == {"N": 8192, "K": 8192} and d.var_axes() == ["M"]
    assert d.inputs["A"].shape == ["M", "K"] and d.inputs["B"].shape == ["N", "K"]
    assert d.outputs["C"].shape == ["M", "N"] and d.inputs["B"].dtype == "bfloat16"


def test_moe_name_derived_axes_and_index_dtype() -> None:
    params = {"impl": "fused", "num_experts": 128, "hidden_size": 2048, "intermediate_size": 768, "top_k": 8}
    d = make_definition(op_type("moe"), params, {"act": "bfloat16", "weight": "float8_e4m3"})
    assert d.name == "moe_fused_e128_h2048_i768_topk8"
    assert d.const_axes()["gemm1_out_size"] == 2 * 768
    assert d.inputs["topk_ids"].dtype == "int64" and d.inputs["w13"].dtype == "float8_e4m3"
    assert "impl:fused" in d.tags


def test_unknown_op_type_lists_known() -> None:
    with pytest.raises(RecordsError, match=r"^unknown op type 'conv2d'; known: .*gemm"):
        op_type("conv2d")


def test_missing_const_axis_is_an_error() -> None:
    with pytest.raises(RecordsError, match="K"):
        op_type("gemm").name({"N": 4})


def test_importing_records_never_imports_torch() -> None:
    import subprocess
    import sys

    code = "import sys, layerscope.records, layerscope.cli.records; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
