"""Recording operator workloads from real runs: captured records equal graph-derived ones for 8 tiny
families, tracing never changes outputs, and env-var tracing works on a script that never imports layerscope."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from layerscope.model import model_spec_from_dict, tiny_config
from layerscope.records import RecordSet, expected_from_spec, records_from_spec, verify

pytest.importorskip("torch")
pytest.importorskip("transformers")

pytestmark = pytest.mark.torch

FAMILIES: tuple[str, ...] = ("llama", "qwen3", "qwen3_moe", "mixtral", "gpt_oss", "deepseek_v3", "gemma2", "gpt2")
PROMPT = 6
DECODE = 2


@pytest.mark.parametrize("family", FAMILIES)
def test_captured_records_equal_graph_records(family: str, tiny_config_path: Callable[[str], Path]) -> None:
    from layerscope.capture.record_run import record_workloads

    captured = record_workloads(tiny_config_path(family), prompt_len=PROMPT, decode_steps=DECODE)
    spec = model_spec_from_dict(tiny_config(family), family)
    derived = records_from_spec(spec, prompt_len=PROMPT, decode_steps=DECODE, mla_form="naive")
    assert set(captured.definitions) == set(derived.definitions)
    assert captured.definitions == derived.definitions  # axes, tensors, dtypes
    assert {k: c.calls for k, c in captured.calls.items()} == {k: c.calls for k, c in derived.calls.items()}
    assert captured.passes == derived.passes == {"prefill": 1, "decode": DECODE}
    report = verify(captured, derived, compare_workloads=True)
    assert report.ok, [g.message for g in report.gaps]
    # And against the spec alone.
    assert verify(captured, expected_from_spec(spec, captured)).ok


def _tiny_model(family: str) -> object:
    import torch
    import transformers

    from layerscope.capture.build import hf_config

    torch.manual_seed(0)
    return transformers.AutoModelForCausalLM.from_config(hf_config(tiny_config(family))).eval()


@pytest.mark.parametrize("family", ["qwen3_moe", "deepseek_v3"])
def test_tracing_keeps_outputs_bit_identical(family: str, tmp_path: Path) -> None:
    import torch

    import layerscope

    model = _tiny_model(family)
    ids = torch.randint(0, 256, (2, 5), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        plain = model(input_ids=ids).logits  # type: ignore[operator]
        with layerscope.tracing(tmp_path / "t"):
            traced = model(input_ids=ids).logits  # type: ignore[operator]
        again = model(input_ids=ids).logits  # type: ignore[operator]
    assert torch.equal(plain, traced) and torch.equal(plain, again)
    rs = RecordSet.read(tmp_path / "t")
    assert rs.passes == {"prefill": 1} and rs.meta["source"] == "trace"
    assert any(c.category == "moe_experts" for c in rs.calls.values())


def test_env_var_traces_a_script_that_never_imports_layerscope(tmp_path: Path) -> None:
    script = tmp_path / "user_script.py"
    script.write_text(textwrap.dedent("""
        import torch, transformers
        cfg = transformers.AutoConfig.for_model("llama", hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                                num_key_value_heads=2, head_dim=16, intermediate_size=128,
                                                vocab_size=256)
        torch.manual_seed(0)
        model = transformers.AutoModelForCausalLM.from_config(cfg).eval()
        with torch.no_grad():
            model.generate(torch.randint(0, 256, (1, 6)), max_new_tokens=3, do_sample=False)
    """))
    out = tmp_path / "trace"
    env = {**os.environ, "LAYERSCOPE_TRACE": "1", "LAYERSCOPE_TRACE_DIR": str(out)}
    subprocess.run([sys.executable, str(script)], check=True, env=env, cwd=tmp_path, timeout=120)
    rs = RecordSet.read(out)
    assert rs.passes == {"prefill": 1, "decode": 2}
    assert rs.calls[("gqa_paged_decode_h4_kv2_d16", 1, "decode")].calls == 2
    spec = model_spec_from_dict(tiny_config("llama"), "llama")
    report = verify(rs, expected_from_spec(spec, rs))
    assert report.ok, [g.message for g in report.gaps]
    assert json.loads((out / "definitions/rmsnorm/rmsnorm_h64.json").read_text())["op_type"] == "rmsnorm"


def test_tracing_unset_imports_nothing() -> None:
    code = "import sys; print('torch' in sys.modules, 'layerscope' in sys.modules)"
    env = {k: v for k, v in os.environ.items() if k != "LAYERSCOPE_TRACE"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    assert out.stdout.split() == ["False", "False"]
