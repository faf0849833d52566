"""``layerscope simulate --layers N``: the model cut to its first N decoder layers, simulated whole, as
``capture --layers N`` runs it (so ``compare`` can join the two forward to forward)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from layerscope.cli.app import app
from layerscope.errors import LayerscopeError
from layerscope.model import tiny_config


def _simulate(*args: str) -> dict[str, object]:
    res = CliRunner().invoke(app, ["simulate", "--hardware", "h100-sxm", "--engines", "1", "--steps", "2",
                                   "--json", *args])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert isinstance(doc, dict)
    return doc


def _op_names(path: Path) -> set[str]:
    events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    return {e["name"] for e in events if e.get("ph") == "X"}


@pytest.mark.parametrize("family", ["llama", "qwen3_moe"])
def test_layers_is_the_cut_config_simulated_whole(tmp_path: Path, family: str) -> None:
    """``--layers 1`` of a 2-layer config ≡ ``--all-layers`` of the same config written with 1 layer."""
    full, cut = tiny_config(family), tiny_config(family)
    assert full["num_hidden_layers"] == 2
    cut["num_hidden_layers"] = 1
    (tmp_path / "full.json").write_text(json.dumps(full))
    (tmp_path / "cut.json").write_text(json.dumps(cut))
    by_layers = _simulate("--model", str(tmp_path / "full.json"), "--layers", "1", "--out",
                          str(tmp_path / "a.json.gz"))
    by_config = _simulate("--model", str(tmp_path / "cut.json"), "--all-layers", "--out",
                          str(tmp_path / "b.json.gz"))
    for key in ("ops", "dependencies", "sum_of_op_times_ns", "sweep"):
        assert by_layers[key] == by_config[key], key
    assert str(by_layers["graph"]).endswith("full.json:decode_steps2")  # named after the model given
    names = _op_names(tmp_path / "a.json.gz")
    assert names == _op_names(tmp_path / "b.json.gz")
    # Embedding to lm_head around the kept layer, for each decode step; nothing of layer 1.
    assert {"decode_step_0.embed_tokens", "decode_step_1.layers.0.mlp.down_proj" if family == "llama" else
            "decode_step_1.layers.0.input_layernorm", "decode_step_1.lm_head"} <= names
    assert not any(".layers.1." in name for name in names)


def test_layers_out_of_range_or_with_layer_is_refused(tmp_path: Path) -> None:
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(tiny_config("llama")))
    for args, message in ((["--layers", "0"], "out of range"), (["--layers", "3"], "1..2"),
                          (["--layers", "1", "--layer", "1"], "give one of them")):
        res = CliRunner().invoke(app, ["simulate", "--model", str(cfg), *args])
        assert isinstance(res.exception, LayerscopeError), (args, res.output)
        assert message in str(res.exception), (args, str(res.exception))
