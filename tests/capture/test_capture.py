"""End-to-end captures of tiny models of every family and of one real-sized Llama-3.2-1B layer."""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from layerscope.graph import build_layer_graph, build_model_graph
from layerscope.model import model_spec_from_dict, param_counts, tiny_config
from layerscope.model.spec import ModelSpec
from layerscope.workload.workload import Workload

pytest.importorskip("torch")
pytest.importorskip("transformers")

pytestmark = pytest.mark.torch

#: The families issue 4 asks the capture to handle.
FAMILIES: tuple[str, ...] = ("llama", "qwen3", "qwen3_moe", "mixtral", "gpt_oss", "deepseek_v3", "gemma2", "gpt2")

PROMPT = 8
DECODE = 2


def _load(path: Path) -> dict[str, Any]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as fh:
        data: dict[str, Any] = json.load(fh)
    return data


def _annotations(trace: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for e in trace["traceEvents"] if e.get("cat") == "user_annotation"]


def _graph_modules(spec: ModelSpec, workload: Workload) -> set[str]:
    """Modules of the layer and whole-model OpGraphs of every pass of ``workload``."""
    modules: set[str] = set()
    for fwd in workload.passes():
        for layer in range(spec.num_layers):
            modules |= {op.module for op in build_layer_graph(spec, fwd, workload, layer).ops}
        modules |= {op.module for op in build_model_graph(spec, fwd, workload).ops}
    return modules


@pytest.fixture(scope="module")
def captures(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One capture per family (prefill of 8 tokens + 2 decode steps), shared by the tests below."""
    from layerscope.capture import capture

    out: dict[str, Any] = {}
    root = tmp_path_factory.mktemp("captures")
    for family in FAMILIES:
        directory = root / family
        directory.mkdir()
        config_path = directory / "config.json"
        config_path.write_text(json.dumps(tiny_config(family)))
        result = capture(config_path, prompt_len=PROMPT, decode_steps=DECODE, warmup=1, iterations=1,
                         out=directory / "trace.json.gz")
        out[family] = (result, _load(result.trace_path))
    return out


@pytest.mark.parametrize("family", FAMILIES)
def test_trace_has_every_module_phase_and_metadata(family: str, captures: dict[str, Any]) -> None:
    result, trace = captures[family]
    spec = model_spec_from_dict(tiny_config(family), family)
    names = {e["name"] for e in _annotations(trace)}
    assert {"prefill", "decode_step_0", "decode_step_1", "sampling"} <= names
    assert "decode_step_2" not in names
    meta = trace["layerscope"]
    assert meta["model_type"] == family and meta["weights"] == "random" and meta["layers"] == 2
    assert (meta["prompt_len"], meta["decode_steps"], meta["dtype"], meta["device"]) == (PROMPT, DECODE, "bf16", "cpu")
    assert meta["torch_version"] and meta["transformers_version"]
    assert [p.name for p in result.phases] == ["prefill", "decode_step_0", "decode_step_1"]
    # Every decoder layer is a range of its own in prefill and in each decode step.
    mods = spec.modules
    for layer in range(2):
        layer_name = mods.op(layer)
        assert sum(e["name"] == layer_name for e in _annotations(trace)) == 1 + DECODE
    # Every recorded module is in the trace, under the name the summary gives it.
    assert {r.name for r in result.summary} <= names


@pytest.mark.parametrize("family", FAMILIES)
def test_recorded_shapes(family: str, captures: dict[str, Any]) -> None:
    result, _ = captures[family]
    spec = model_spec_from_dict(tiny_config(family), family)
    by_key = {(r.phase, r.name): r for r in result.summary}
    hidden = spec.hidden_size
    for layer in range(2):
        prefill, decode = by_key[("prefill", spec.modules.op(layer))], by_key[("decode", spec.modules.op(layer))]
        assert prefill.input_shapes[0] == [1, PROMPT, hidden]
        assert prefill.output_shapes[0] == [1, PROMPT, hidden]
        assert decode.input_shapes[0] == [1, 1, hidden]
        assert (prefill.calls, decode.calls) == (1, DECODE)
        assert prefill.total_ms > 0 and prefill.mean_ms == pytest.approx(prefill.total_ms)
    head = by_key[("prefill", spec.modules.lm_head)]
    # Logits of the last position only, as HF generate and the graph's lm_head op compute them.
    assert head.output_shapes[0] == [1, 1, spec.vocab_size]
    assert by_key[("decode", spec.modules.lm_head)].output_shapes[0] == [1, 1, spec.vocab_size]
    if spec.modules.q_proj is not None and spec.mla is None:
        q = by_key[("prefill", spec.modules.op(0, spec.modules.attn, spec.modules.q_proj))]
        assert q.output_shapes == [[1, PROMPT, spec.num_attention_heads * spec.head_dim]]
    assert by_key[("decode", "sampling")].calls == DECODE


@pytest.mark.parametrize("family", FAMILIES)
def test_names_join_the_op_graph(family: str, captures: dict[str, Any]) -> None:
    """Every module of the OpGraph of the same config is an annotation of the captured trace."""
    _, trace = captures[family]
    spec = model_spec_from_dict(tiny_config(family), family)
    workload = Workload(phase="generate", batch=1, prompt_len=PROMPT, decode_steps=DECODE)
    captured = {e["name"] for e in _annotations(trace)}
    missing = _graph_modules(spec, workload) - captured
    assert not missing, f"graph modules absent from the {family} capture: {sorted(missing)}"


@pytest.mark.slow
def test_single_real_sized_llama_layer(tmp_path: Path) -> None:
    """Llama-3.2-1B, one decoder layer (full 128256-token lm_head), 256-token prefill, on CPU.

    Its time is a benchmark (bench/), not a pass/fail criterion: a loaded machine is slow, not wrong."""
    from layerscope.capture import capture

    result = capture("meta-llama/Llama-3.2-1B", layers=1, prompt_len=256, warmup=1, iterations=1,
                     out=tmp_path / "llama.json.gz")
    assert (result.layers, result.total_layers, result.weights) == (1, 16, "random")
    # Exact parameter count of the built model = layerscope.model's count for a 1-layer spec.
    config = json.loads(Path(_catalog_config("meta-llama--Llama-3.2-1B")).read_text())
    spec = model_spec_from_dict({**config, "num_hidden_layers": 1}, "llama-1l")
    assert result.param_count == param_counts(spec).total == 323_491_840
    by_name = {r.name: r for r in result.summary if r.phase == "prefill"}
    assert by_name["lm_head"].input_shapes == [[1, 1, 2048]]
    assert by_name["lm_head"].output_shapes == [[1, 1, 128256]]
    assert by_name["layers.0.mlp.gate_proj"].output_shapes == [[1, 256, 8192]]
    assert by_name["layers.0.self_attn.k_proj"].output_shapes == [[1, 256, 512]]
    assert not any(name.startswith("layers.1") for name in by_name)
    assert by_name["layers.0"].total_ms >= by_name["layers.0.mlp"].total_ms > by_name["layers.0.mlp.down_proj"].total_ms


def _catalog_config(folder: str) -> str:
    from layerscope.model.catalog import catalog_root

    return str(catalog_root().joinpath(folder, "config.json"))


def test_static_cache_and_json_output(tiny_config_path: Callable[[str], Path], tmp_path: Path) -> None:
    from layerscope.capture import capture

    out = tmp_path / "static.json"
    result = capture(tiny_config_path("llama"), cache="static", prompt_len=PROMPT, decode_steps=3, warmup=0,
                     iterations=2, out=out)
    trace = _load(out)  # plain JSON: no gzip for a .json path
    assert trace["layerscope"]["cache"] == "static" and trace["layerscope"]["iterations"] == 2
    assert [(p.name, p.calls) for p in result.phases] == [
        ("prefill", 2), ("decode_step_0", 2), ("decode_step_1", 2), ("decode_step_2", 2)
    ]
    layer = {(r.phase, r.name): r for r in result.summary}
    assert (layer[("prefill", "layers.0")].calls, layer[("decode", "layers.0")].calls) == (2, 6)


def test_default_out_path_and_never_over_the_input(tiny_config_path: Callable[[str], Path],
                                                   tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from layerscope.capture import capture
    from layerscope.errors import OutputError

    config = tiny_config_path("qwen3")
    monkeypatch.chdir(tmp_path)
    result = capture("meta-llama/Llama-3.2-1B", layers=1, prompt_len=4, warmup=0, dtype="fp32")
    assert result.trace_path == Path("capture-meta-llama-Llama-3.2-1B-1l.json.gz")
    assert (tmp_path / result.trace_path).is_file()
    before = config.read_bytes()
    with pytest.raises(OutputError, match="refusing to overwrite the input"):
        capture(config, prompt_len=4, warmup=0, out=config)
    assert config.read_bytes() == before


def test_layers_truncate_per_layer_lists(tiny_config_path: Callable[[str], Path], tmp_path: Path) -> None:
    from layerscope.capture import capture

    result = capture(tiny_config_path("gpt_oss"), layers=1, prompt_len=4, warmup=0, out=tmp_path / "o.json.gz")
    assert (result.layers, result.total_layers) == (1, 2)
    names = {r.name for r in result.summary}
    assert "layers.0.mlp.experts" in names and not any(n.startswith("layers.1") for n in names)


def test_capture_of_a_built_module(tmp_path: Path) -> None:
    import torch
    import transformers

    from layerscope.capture import capture

    config = transformers.AutoConfig.for_model(**tiny_config("gpt2"))
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config)
    result = capture(model, prompt_len=4, decode_steps=1, warmup=0, dtype="fp32", out=tmp_path / "g.json.gz")
    assert result.weights == "loaded" and result.model == "GPT2LMHeadModel"
    names = {r.name for r in result.summary}
    assert {"h.0.attn.c_attn", "h.1.mlp.c_fc", "wte", "ln_f", "lm_head"} <= names


def test_loads_weights_from_a_checkpoint_directory(tmp_path: Path) -> None:
    import torch
    import transformers

    from layerscope.capture import capture

    config = transformers.AutoConfig.for_model(**tiny_config("llama"))
    torch.manual_seed(0)
    transformers.AutoModelForCausalLM.from_config(config).save_pretrained(tmp_path / "ckpt")
    loaded = capture(tmp_path / "ckpt", prompt_len=4, warmup=0, out=tmp_path / "a.json.gz")
    forced = capture(tmp_path / "ckpt", prompt_len=4, warmup=0, random_weights=True, out=tmp_path / "b.json.gz")
    assert (loaded.weights, forced.weights) == ("loaded", "random")


def test_trace_loads_in_perfetto(perfetto_oracle: Any, captures: dict[str, Any]) -> None:
    """The real Perfetto trace processor imports the capture (the layerscope key included) with no
    errors, and answers as our SQL engine does: slices, threads, flows, args and process names
    (Kineto's string pids such as "Spans" get made-up numbers that differ between the two)."""
    from layerscope.analysis.engine import TraceDB

    result, _ = captures["llama"]
    trace = perfetto_oracle.load(result.trace_path)
    assert trace.errors() == []
    rows = {r["name"]: r["n"] for r in trace.query(
        "SELECT name, COUNT(*) AS n FROM slice WHERE name LIKE 'layers.0.%' OR name = 'decode_step_1' "
        "GROUP BY name ORDER BY name")}
    assert rows["layers.0.self_attn.q_proj"] == 1 + DECODE
    assert rows["decode_step_1"] == 1
    sql = ("SELECT COUNT(*) AS slices, SUM(dur) AS total_dur, MIN(ts) AS first_ts, MAX(ts + dur) AS last_end, "
           "MAX(depth) AS max_depth FROM slice",
           "SELECT s.ts, s.dur, s.depth, s.name, s.category, t.name AS thread FROM slice s "
           "JOIN thread_track tt ON s.track_id = tt.id JOIN thread t USING (utid) "
           "ORDER BY s.ts, thread, s.depth, s.name, s.dur",
           "SELECT o.ts AS out_ts, o.name AS out_name, i.ts AS in_ts, i.name AS in_name FROM flow f "
           "JOIN slice o ON f.slice_out = o.id JOIN slice i ON f.slice_in = i.id ORDER BY out_ts, out_name, in_ts",
           "SELECT s.ts, s.name, a.key, a.int_value, a.string_value, a.real_value FROM slice s "
           "JOIN args a USING (arg_set_id) ORDER BY s.ts, s.name, a.key, a.display_value",
           "SELECT name FROM process WHERE name IS NOT NULL AND name != '' ORDER BY name")
    with TraceDB(result.trace_path, use_cache=False) as db:
        assert trace.disagreements(db.records, sql) == []


def test_cuda_capture_has_kernels_and_device_times(tiny_config_path: Callable[[str], Path], tmp_path: Path) -> None:
    """On a GPU machine: kernels, runtime calls and CPU→GPU flows land in the trace, and the spans
    of the GPU work each module launched give ``device_ms``, a parent's covering its children's.
    (Skipped on CPU-only CI.)"""
    import torch

    from layerscope.capture import capture

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    result = capture(tiny_config_path("llama"), device="cuda", prompt_len=PROMPT, decode_steps=DECODE,
                     out=tmp_path / "cuda.json.gz")
    trace = _load(result.trace_path)
    cats = {e.get("cat") for e in trace["traceEvents"]}
    assert {"kernel", "cuda_runtime", "gpu_user_annotation", "ac2g"} <= cats
    by_key = {(r.phase, r.name): r for r in result.summary}
    q = by_key[("prefill", "layers.0.self_attn.q_proj")].device_ms
    attn, layer = by_key[("prefill", "layers.0.self_attn")].device_ms, by_key[("prefill", "layers.0")].device_ms
    assert q is not None and attn is not None and layer is not None and 0 < q < attn < layer
    assert trace["layerscope"]["device"] == "cuda"
    # validate's reading of the same trace: the forward is the phase's host range, modules their GPU spans.
    from layerscope.analysis.validate import captured_times

    times = captured_times(result.trace_path, device="cuda")
    assert times.modules["prefill"]["layers.0"] == pytest.approx(layer / 1e3 / times.iterations * result.iterations,
                                                                 rel=1e-6)
    assert times.modules["prefill"]["layers.0"] < times.ranges["prefill"]
