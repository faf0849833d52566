"""Loading ModelSpecs from files, folders, the bundled catalog and the local HF cache."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from layerscope.errors import ConfigError
from layerscope.model import list_catalog, load_model_spec, model_spec_from_dict
from layerscope.model.catalog import catalog_root, find_catalog_entry
from layerscope.model.loader import hf_cache_dir
from layerscope.units import DType

CATALOG = Path(str(catalog_root()))
LLAMA_1B = CATALOG / "meta-llama--Llama-3.2-1B" / "config.json"


@pytest.fixture(autouse=True)
def _no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """Loading must never open a socket."""

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("layerscope.model tried to open a network connection")

    monkeypatch.setattr(socket, "socket", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


def test_catalog_is_bundled_inside_the_package() -> None:
    assert (CATALOG / "index.json").is_file()
    assert "layerscope" in CATALOG.parts and "model" in CATALOG.parts
    entries = list_catalog()
    assert len(entries) == 31
    for entry in entries:
        assert (CATALOG / entry.dir / "config.json").is_file()
        assert entry.id == entry.dir.replace("--", "/", 1)
    assert len({e.alias for e in entries}) == len(entries)


def test_catalog_entry_fields() -> None:
    entry = find_catalog_entry("meta-llama/Llama-3.1-8B")
    assert entry is not None
    assert entry.alias == "llama-3.1-8b"
    assert entry.model_type == "llama"
    assert entry.published_total_params == "8.03B (8,030,261,248)"
    assert entry.published_active_params is None
    assert entry.status == "exact-file"
    assert "aiconfigurator" in entry.source
    moe = find_catalog_entry("qwen3-30b-a3b")
    assert moe is not None and moe.published_active_params == "3.3B"


@pytest.mark.parametrize(
    ("source", "expected_id"),
    [
        ("meta-llama/Llama-3.1-8B", "meta-llama/Llama-3.1-8B"),
        ("llama-3.1-8b", "meta-llama/Llama-3.1-8B"),
        ("LLAMA-3.1-8B", "meta-llama/Llama-3.1-8B"),
        ("qwen3-30b-a3b", "Qwen/Qwen3-30B-A3B"),
        ("gpt-oss-20b", "openai/gpt-oss-20b"),
        ("deepseek-v3", "deepseek-ai/DeepSeek-V3"),
        ("gemma-2-9b-it", "google/gemma-2-9b-it"),
        ("gpt2", "openai-community/gpt2"),
        ("Qwen/qwen3-8b", "Qwen/Qwen3-8B"),
    ],
)
def test_catalog_names_and_aliases(source: str, expected_id: str) -> None:
    assert load_model_spec(source).name == expected_id


def test_load_from_file_and_folder(tmp_path: Path) -> None:
    from_file = load_model_spec(LLAMA_1B)
    assert from_file.name == str(LLAMA_1B)
    assert from_file.hidden_size == 2048
    folder = tmp_path / "llama"
    folder.mkdir()
    shutil.copy(LLAMA_1B, folder / "config.json")
    from_dir = load_model_spec(folder)
    assert from_dir.model_dump(exclude={"name"}) == from_file.model_dump(exclude={"name"})
    assert load_model_spec(str(folder / "config.json")).num_layers == 16


def test_folder_sidecar_hf_quant_config(tmp_path: Path) -> None:
    src = CATALOG / "nvidia--Llama-3.1-70B-Instruct-FP8"
    shutil.copytree(src, tmp_path / "fp8")
    spec = load_model_spec(tmp_path / "fp8")
    assert spec.weight_dtype == DType.FP8
    assert spec.base_dtype == DType.BF16
    assert spec.quantized_modules_excluded == ("lm_head",)
    catalog_spec = load_model_spec("nvidia/Llama-3.1-70B-Instruct-FP8")
    assert catalog_spec.weight_dtype == DType.FP8
    (tmp_path / "fp8" / "hf_quant_config.json").unlink()
    assert load_model_spec(tmp_path / "fp8").weight_dtype == DType.BF16


def test_folder_without_config_json(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"no config\.json"):
        load_model_spec(tmp_path)


def test_bad_json(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text("{not json")
    with pytest.raises(ConfigError, match="not valid JSON"):
        load_model_spec(path)
    path.write_text("[1, 2]")
    with pytest.raises(ConfigError, match="expected a JSON object"):
        load_model_spec(path)


def _fake_snapshot(cache: Path, model_id: str, revision: str, hidden: int) -> Path:
    cfg = json.loads(LLAMA_1B.read_text())
    cfg["hidden_size"] = hidden
    snap = cache / ("models--" + model_id.replace("/", "--")) / "snapshots" / revision
    snap.mkdir(parents=True)
    (snap / "config.json").write_text(json.dumps(cfg))
    return snap


def test_hf_cache_prefers_refs_main(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    _fake_snapshot(tmp_path, "acme/tiny-llama", "aaaa", hidden=1024)
    _fake_snapshot(tmp_path, "acme/tiny-llama", "bbbb", hidden=512)
    refs = tmp_path / "models--acme--tiny-llama" / "refs"
    refs.mkdir()
    (refs / "main").write_text("aaaa\n")
    spec = load_model_spec("acme/tiny-llama")
    assert spec.name == "acme/tiny-llama"
    assert spec.hidden_size == 1024


def test_hf_cache_without_refs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    _fake_snapshot(tmp_path, "acme/only", "cccc", hidden=512)
    assert load_model_spec("acme/only").hidden_size == 512


def test_hf_cache_location(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    assert hf_cache_dir() == tmp_path / "hub"
    monkeypatch.delenv("HF_HOME")
    assert hf_cache_dir() == Path.home() / ".cache" / "huggingface" / "hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "c"))
    assert hf_cache_dir() == tmp_path / "c"


def test_not_found_message(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    with pytest.raises(ConfigError) as err:
        load_model_spec("meta-llama/Llama-3.1-8")
    msg = str(err.value)
    assert "not a local file" in msg
    assert "not in the bundled catalog" in msg
    assert "meta-llama/Llama-3.1-8B" in msg  # difflib suggestion
    assert str(tmp_path) in msg
    assert "does not download" in msg
    assert "huggingface-cli download meta-llama/Llama-3.1-8 config.json" in msg


def test_model_spec_from_dict_names_the_spec() -> None:
    cfg = json.loads(LLAMA_1B.read_text())
    spec = model_spec_from_dict(cfg, "my-llama")
    assert spec.name == "my-llama"
    assert spec.family == "llama"
    assert spec.architecture == "LlamaForCausalLM"


def test_importing_model_does_not_import_torch() -> None:
    code = (
        "import sys, layerscope.model as m; m.load_model_spec('gpt-oss-20b'); m.tiny_config('llama');"
        "bad = [k for k in ('torch', 'transformers') if k in sys.modules]; assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
