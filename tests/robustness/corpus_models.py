"""Model configs: hostile bytes, wrong JSON shapes, impossible sizes, bad paths and names."""

from __future__ import annotations

from .harness import Case
from .inputs import (
    DIR,
    FIFO,
    MISTRAL_DIR,
    QWEN_MOE_DIR,
    config_text,
    config_with,
    model_dir,
    nested,
    random_bytes,
    symlink_to,
)


def estimate_cfg(case_id: str, content: bytes | object, *expect: str, name: str = "cfg.json") -> Case:
    """``estimate --model FILE`` with FILE holding ``content``; the error names the file unless told."""
    return Case(f"model-{case_id}", ("estimate", "--model", name), {name: content}, expect or (name,))  # type: ignore[dict-item]


def field(case_id: str, key: str, value: object, folder: str | None = None) -> Case:
    """A bundled config with ``key`` set to ``value``: the error names the field."""
    content = config_with(folder, **{key: value}) if folder else config_with(**{key: value})
    return estimate_cfg(case_id, content, key)


KV_HEADS = "num_key_value_heads|num_kv_heads"
"""The config's key, or the spec's name for it."""

CASES: list[Case] = [
    # Positive controls: a real config as a file and as a checkpoint directory.
    Case("model-ok-file", ("estimate", "--model", "cfg.json", "--json"), {"cfg.json": config_text()},
         code=0, stdout_json=True),
    Case("model-ok-dir", ("estimate", "--model", "ckpt", "--json"), {"ckpt": model_dir()}, code=0, stdout_json=True),
    # Bytes that are not a JSON object.
    estimate_cfg("random-bytes", random_bytes()),
    estimate_cfg("random-bytes-no-suffix", random_bytes(seed=7), "blob", name="blob"),
    estimate_cfg("latin1-text", '{"model_type": "llamá"}'.encode("latin-1")),
    estimate_cfg("utf16-bom", '{"hidden_size": 1}'.encode("utf-16")),
    estimate_cfg("empty", b""),
    estimate_cfg("whitespace", b"  \n\t \n"),
    estimate_cfg("nul-bytes", b"\x00" * 64),
    estimate_cfg("deep-list-200k", nested("[", 200_000)),
    estimate_cfg("deep-list-closed-100k", nested("[", 100_000, "]")),
    estimate_cfg("deep-object-100k", nested('{"a":', 100_000)),
    estimate_cfg("json-list", b"[1, 2, 3]"),
    estimate_cfg("json-number", b"42"),
    estimate_cfg("json-string", b'"meta-llama/Llama-3.2-1B"'),
    estimate_cfg("json-null", b"null"),
    estimate_cfg("json-true", b"true"),
    estimate_cfg("json-empty-object", b"{}"),
    estimate_cfg("truncated", config_text()[:300]),
    estimate_cfg("trailing-garbage", config_text() + b"\n}}}"),
    estimate_cfg("huge-int-literal", b'{"hidden_size": 1' + b"0" * 5000 + b"}"),
    # Required keys missing.
    estimate_cfg("missing-hidden_size", config_with(drop=("hidden_size",)), "hidden_size"),
    estimate_cfg("missing-num_hidden_layers", config_with(drop=("num_hidden_layers",)), "num_hidden_layers"),
    estimate_cfg("missing-num_attention_heads", config_with(drop=("num_attention_heads", "head_dim")),
                 "num_attention_heads"),
    estimate_cfg("missing-vocab_size", config_with(drop=("vocab_size",)), "vocab_size"),
    estimate_cfg("missing-intermediate_size", config_with(drop=("intermediate_size",)), "intermediate_size"),
    # Impossible values, one field at a time.
    field("hidden_size-0", "hidden_size", 0),
    field("hidden_size-negative", "hidden_size", -2048),
    field("hidden_size-float", "hidden_size", 2048.5),
    field("hidden_size-string", "hidden_size", "2048"),
    field("hidden_size-null", "hidden_size", None),
    field("hidden_size-bool", "hidden_size", True),
    field("hidden_size-list", "hidden_size", [2048]),
    field("hidden_size-huge", "hidden_size", 10**30),
    field("hidden_size-nan", "hidden_size", float("nan")),
    field("num_hidden_layers-1e12", "num_hidden_layers", 10**12),
    field("num_hidden_layers-1e12-float", "num_hidden_layers", 1e12),
    field("num_hidden_layers-0", "num_hidden_layers", 0),
    field("num_hidden_layers-negative", "num_hidden_layers", -16),
    field("num_attention_heads-0", "num_attention_heads", 0),
    field("num_attention_heads-negative", "num_attention_heads", -32),
    estimate_cfg("heads-not-dividing-hidden", config_with(drop=("head_dim",), num_attention_heads=30,
                                                          num_key_value_heads=30), "num_attention_heads"),
    estimate_cfg("num_key_value_heads-not-dividing", config_with(num_key_value_heads=5), KV_HEADS),
    estimate_cfg("num_key_value_heads-above-heads", config_with(num_key_value_heads=64), KV_HEADS),
    estimate_cfg("num_key_value_heads-0", config_with(num_key_value_heads=0), KV_HEADS),
    field("vocab_size-0", "vocab_size", 0),
    field("vocab_size-negative", "vocab_size", -1),
    field("intermediate_size-0", "intermediate_size", 0),
    field("intermediate_size-negative", "intermediate_size", -8192),
    field("head_dim-0", "head_dim", 0),
    field("head_dim-negative", "head_dim", -64),
    field("max_position_embeddings-negative", "max_position_embeddings", -1),
    field("sliding_window-negative", "sliding_window", -4096, folder=MISTRAL_DIR),
    field("sliding_window-string", "sliding_window", "wide", folder=MISTRAL_DIR),
    field("num_experts_per_tok-above-experts", "num_experts_per_tok", 512, folder=QWEN_MOE_DIR),
    field("num_experts-0", "num_experts", 0, folder=QWEN_MOE_DIR),
    field("num_experts-negative", "num_experts", -128, folder=QWEN_MOE_DIR),
    estimate_cfg("unknown-model_type-nothing-usable", b'{"model_type": "zzz-unknown", "foo": 1}', "zzz-unknown"),
    estimate_cfg("text_config-not-object", config_with(text_config=[1, 2]), "text_config"),
    # Paths and names that are not a config.
    Case("model-dir-without-config", ("estimate", "--model", "ckpt"), {"ckpt": DIR}, ("config.json",)),
    Case("model-dir-config-is-dir", ("estimate", "--model", "ckpt"), {"ckpt/config.json": DIR}, ("config.json",)),
    Case("model-missing-path", ("estimate", "--model", "./missing/config.json"), {}, ("missing",)),
    Case("model-missing-file", ("estimate", "--model", "nothere.json"), {}, ("nothere.json",)),
    Case("model-dangling-symlink", ("estimate", "--model", "link.json"), {"link.json": symlink_to("gone.json")},
         ("link.json",)),
    Case("model-symlink-loop", ("estimate", "--model", "loop.json"), {"loop.json": symlink_to("loop.json")},
         ("loop.json",)),
    Case("model-fifo", ("estimate", "--model", "pipe.json"), {"pipe.json": FIFO}, ("pipe.json",)),
    Case("model-dev-null", ("estimate", "--model", "/dev/null"), {}, ("/dev/null",)),
    Case("model-alias-typo", ("estimate", "--model", "llama-3.2-1bb"), {}, ("llama-3.2-1b",)),
    Case("model-alias-typo-qwen", ("estimate", "--model", "qwen3-8bb"), {}, ("qwen3-8b",)),
    Case("model-empty-name", ("estimate", "--model", ""), {}, ("model",)),
    Case("model-hf-id-not-cached", ("estimate", "--model", "no-such-org/no-such-model"), {}, ("no-such-model",)),
    # The same configs through the other commands that read one (refused before any work).
    Case("model-simulate-hidden_size-0", ("simulate", "--model", "cfg.json"), {"cfg.json": config_with(hidden_size=0)},
         ("hidden_size",)),
    Case("model-simulate-deep-list", ("simulate", "--model", "cfg.json"), {"cfg.json": nested("[", 200_000)},
         ("cfg.json",)),
    Case("model-simulate-1e12-layers", ("simulate", "--model", "cfg.json", "--all-layers"),
         {"cfg.json": config_with(num_hidden_layers=10**12)}, ("num_hidden_layers",)),
    Case("model-workloads-hidden_size-0", ("workloads", "--from-graph", "--model", "cfg.json", "--out", "wl"),
         {"cfg.json": config_with(hidden_size=0)}, ("hidden_size",)),
    Case("model-workloads-random-bytes", ("workloads", "--from-graph", "--model", "cfg.json", "--out", "wl"),
         {"cfg.json": random_bytes()}, ("cfg.json",)),
    Case("model-capture-hidden_size-0", ("capture", "--model", "cfg.json", "--layers", "1", "--random-weights",
                                         "--out", "t.json.gz"), {"cfg.json": config_with(hidden_size=0)},
         ("hidden_size",)),
    Case("model-capture-random-bytes", ("capture", "--model", "cfg.json", "--out", "t.json.gz"),
         {"cfg.json": random_bytes()}, ("cfg.json",)),
    Case("model-capture-alias-typo", ("capture", "--model", "gpt22", "--out", "t.json.gz"), {}, ("gpt2",)),
    Case("model-validate-hidden_size-0", ("validate", "--model", "cfg.json", "--hardware", "h100-sxm", "--out", "v"),
         {"cfg.json": config_with(hidden_size=0)}, ("hidden_size",)),
    Case("model-verify-unknown-model", ("verify", "--traces", "wl", "--model", "llama-3.2-1bb"), {}, ("llama-3.2-1b",),
         before=(("workloads", "--from-graph", "--model", "llama-3.2-1b", "--layers", "1", "--out", "wl"),)),
    Case("model-demo-unknown-model", ("demo", "--model", "llama-3.2-1bb", "--hardware", "h100-sxm", "--out", "d"),
         {}, ("llama-3.2-1b",)),
]
