"""verify: expectations derived from the spec, and precise reports of missing categories, layer calls, shapes."""

from __future__ import annotations

from pathlib import Path

import pytest

from layerscope.model import load_model_spec, model_spec_from_dict, tiny_config
from layerscope.model.spec import ModelSpec
from layerscope.records import RecordSet, expected_from_spec, records_from_spec, verify
from layerscope.records.schema import InputDesc


def _observed(spec: ModelSpec, layers: int = 2) -> RecordSet:
    return records_from_spec(spec, prompt_len=8, decode_steps=2, layers=range(layers), mla_form="naive")


def test_complete_records_verify(llama70b: ModelSpec) -> None:
    obs = _observed(llama70b)
    report = verify(obs, expected_from_spec(llama70b, obs))
    assert report.ok and report.phases == ["prefill", "decode"]
    rows = {r.category: r for r in report.categories}
    assert rows["norm"].status == "required" and rows["sampling"].status == "optional"
    # 2 layers x (2 norms) + final norm, per pass.
    assert rows["norm"].expected_calls_per_pass == rows["norm"].found_calls_per_pass == 2 * (2 * 2 + 1)


@pytest.mark.parametrize(("family", "required", "absent"), [
    ("llama", {"rope", "activation"}, {"moe_router", "moe_topk", "moe_experts"}),
    ("qwen3_moe", {"moe_router", "moe_topk", "moe_experts", "rope"}, {"activation"}),
    ("gpt2", {"activation"}, {"rope", "moe_experts"}),
])
def test_required_categories_come_from_the_architecture(family: str, required: set[str], absent: set[str]) -> None:
    spec = model_spec_from_dict(tiny_config(family), family)
    exp = expected_from_spec(spec, _observed(spec))
    cats = exp.categories()
    assert required <= cats.keys() and not absent & cats.keys()
    if family == "gpt2":
        assert cats["activation"] == {"gelu_h256"} and cats["norm"] == {"layernorm_h64"}
    if family == "llama":
        assert cats["activation"] == {"silu_h128"}


def test_missing_category_is_reported(llama70b: ModelSpec) -> None:
    obs = _observed(llama70b)
    obs.calls = {k: c for k, c in obs.calls.items() if c.category != "rope"}
    report = verify(obs, expected_from_spec(llama70b, obs))
    assert not report.ok
    assert [(g.kind, g.message) for g in report.gaps] == [
        ("missing_category", "rope: expected rope_h64_d128; none recorded")]


def test_missing_layer_calls_are_reported(llama70b: ModelSpec) -> None:
    obs = _observed(llama70b)
    del obs.calls[("silu_h28672", 1, "decode")]
    key = ("rmsnorm_h8192", 0, "prefill")
    obs.calls[key] = obs.calls[key].model_copy(update={"calls": 1})
    report = verify(obs, expected_from_spec(llama70b, obs))
    assert [g.message for g in report.gaps] == [
        "layer 0, prefill: rmsnorm_h8192 expected 2 call(s) per pass, found 1",
        "layer 1, decode: silu_h28672 expected 1 call(s) per pass, found none",
    ]
    assert {g.kind for g in report.gaps} == {"calls", "missing_definition"}


def test_shape_mismatches_are_reported(tmp_path: Path) -> None:
    # Records of a model with 60-wide norms verified against the 64-wide spec.
    spec = model_spec_from_dict(tiny_config("llama"), "llama")
    other = model_spec_from_dict({**tiny_config("llama"), "hidden_size": 60, "num_attention_heads": 4,
                                  "head_dim": 15}, "llama60")
    obs = records_from_spec(other, prompt_len=8, layers=range(2))
    report = verify(obs, expected_from_spec(spec, obs))
    shapes = [g.message for g in report.gaps if g.kind == "shape" and g.category == "norm"]
    assert "layer 0, prefill: expected rmsnorm_h64, found rmsnorm_h60 (hidden_size=64 vs 60)" in shapes


def test_workload_shape_and_dtype_mismatches(tmp_path: Path, llama70b: ModelSpec) -> None:
    obs = _observed(llama70b, layers=1)
    name = "rmsnorm_h8192"
    wid, entry = next(iter(obs.workloads[name].items()))
    inputs = dict(entry.workload.inputs)
    inputs["hidden_states"] = InputDesc(shape=[8, 4096], dtype="float16")
    obs.workloads[name][wid] = entry.model_copy(update={"workload": entry.workload.model_copy(
        update={"inputs": inputs})})
    obs.write(tmp_path / "r")
    back = RecordSet.read(tmp_path / "r")
    report = verify(back, expected_from_spec(llama70b, back))
    msgs = {(g.kind, g.message) for g in report.gaps}
    assert ("shape", f"{name}: input hidden_states has shape [8, 4096], the definition's axes "
            "['batch_size', 'hidden_size'] give [8, 8192]") in msgs
    assert ("dtype", f"{name}: input hidden_states is float16, expected bfloat16") in msgs


def test_two_record_sets_compare_with_workloads() -> None:
    spec = load_model_spec("Qwen/Qwen3-30B-A3B")
    a = records_from_spec(spec, prompt_len=8, decode_steps=1, layers=range(2))
    b = records_from_spec(spec, prompt_len=12, decode_steps=1, layers=range(2))
    assert verify(a, a, compare_workloads=True).ok
    report = verify(a, b, compare_workloads=True)
    assert not report.ok and {g.kind for g in report.gaps} == {"workload"}
    assert verify(a, b).ok  # same definitions and calls per pass


def test_no_passes_is_a_gap(llama70b: ModelSpec) -> None:
    report = verify(RecordSet(), records_from_spec(llama70b, prompt_len=2, layers=range(1)))
    assert [g.kind for g in report.gaps] == ["no_passes"]
