"""Parameter counts against published figures for every catalog model, and weight bytes."""

from __future__ import annotations

import pytest

from layerscope.model import list_catalog, load_model_spec, param_counts, weight_bytes
from layerscope.model.catalog import CatalogEntry, find_catalog_entry, parse_published_count
from layerscope.model.params import is_excluded, layer_param_counts
from layerscope.units import DType

#: Published "active" figures that leave out the input embedding (catalog README).
ACTIVE_WITHOUT_EMBEDDING = {"openai/gpt-oss-20b", "openai/gpt-oss-120b", "deepseek-ai/DeepSeek-V2-Lite"}

#: Entries whose published figure counts something our text-only spec does not model; they are
#: compared with the catalog README's computed text-stack count instead, with the reason.
TEXT_STACK_TOTALS = {
    # "7.3B" was announced; the config implies 7.24B, which the Hub page shows (catalog README).
    "mistralai/Mistral-7B-v0.1": 7_241_732_096,
    # 4.3B includes the SigLIP vision tower (~0.42B) and projector; ModelSpec is the text stack.
    "google/gemma-3-4b-it": 3_880_263_168,
    # 109B includes the vision encoder; the text stack alone is 107.77B.
    "meta-llama/Llama-4-Scout-17B-16E-Instruct": 107_769_845_760,
}

#: FP8 re-quantizations publish "same as BF16 base": compare with the base entry's figures.
FP8_BASE = {
    "Qwen/Qwen3-30B-A3B-FP8": "Qwen/Qwen3-30B-A3B",
    "Qwen/Qwen3-32B-FP8": "Qwen/Qwen3-32B",
    "Qwen/Qwen3-235B-A22B-FP8": "Qwen/Qwen3-235B-A22B",
}

REL_TOL = 0.005


def _agrees(computed: int, published: tuple[int, int]) -> bool:
    """Within 0.5%, or within one unit of the last published digit (cards round or truncate:
    Qwen3-30B-A3B's 3.35B active is published as "3.3B", DeepSeek-V3's 37.55B as "37B")."""
    value, resolution = published
    return abs(computed - value) <= max(REL_TOL * value, resolution)


def _published(entry: CatalogEntry) -> tuple[tuple[int, int] | None, tuple[int, int] | None, str]:
    source = entry
    if entry.id in FP8_BASE:
        base = find_catalog_entry(FP8_BASE[entry.id])
        assert base is not None
        source = base
    total = parse_published_count(source.published_total_params)
    active = parse_published_count(source.published_active_params)
    if entry.id in TEXT_STACK_TOTALS:
        total = (TEXT_STACK_TOTALS[entry.id], 1)
    return total, active, source.id


@pytest.mark.parametrize("entry", list_catalog(), ids=lambda e: e.alias)
def test_catalog_counts_match_published(entry: CatalogEntry) -> None:
    spec = load_model_spec(entry.id)
    counts = param_counts(spec)
    total, active, source = _published(entry)
    assert total is not None, f"{entry.id}: no published total in {source}"
    assert _agrees(counts.total, total), (entry.id, counts.total, total)
    if spec.moe is None:
        assert counts.active == counts.total
        assert active is None
        return
    assert active is not None, f"{entry.id}: MoE without a published active count"
    without_embedding = entry.id in ACTIVE_WITHOUT_EMBEDDING
    computed_active = counts.active_excluding_embedding if without_embedding else counts.active
    assert _agrees(computed_active, active), (entry.id, computed_active, active)


def test_every_catalog_entry_is_checked() -> None:
    ids = {e.id for e in list_catalog()}
    assert set(TEXT_STACK_TOTALS) | set(FP8_BASE) | ACTIVE_WITHOUT_EMBEDDING <= ids
    assert len(ids) == 31


def test_llama_3_2_1b_components_by_hand() -> None:
    c = param_counts(load_model_spec("meta-llama/Llama-3.2-1B"))
    h, v, i, kv, layers = 2048, 128256, 8192, 8 * 64, 16
    assert c.embedding == v * h
    assert c.lm_head == 0  # tied
    assert c.attention == layers * (h * (h + 2 * kv) + h * h)
    assert c.dense_mlp == layers * 3 * h * i
    assert c.norms == layers * 2 * h + h
    assert c.routed_experts == c.router == c.shared_experts == c.position_embedding == 0
    assert c.total == 1_235_814_400


@pytest.mark.parametrize(
    ("model", "total"),
    [
        ("meta-llama/Llama-3.1-8B", 8_030_261_248),
        ("microsoft/Phi-3-mini-4k-instruct", 3_821_079_552),
        ("openai-community/gpt2", 124_439_808),
        ("facebook/opt-1.3b", 1_315_758_080),
        ("deepseek-ai/DeepSeek-V3", 671_026_419_200),  # catalog README, without the 14B MTP module
        ("openai/gpt-oss-20b", 20_914_757_184),
        ("google/gemma-2-9b-it", 9_241_705_984),
    ],
)
def test_exact_totals(model: str, total: int) -> None:
    assert param_counts(load_model_spec(model)).total == total


def test_moe_active_by_hand() -> None:
    spec = load_model_spec("mistralai/Mixtral-8x7B-v0.1")
    c = param_counts(spec)
    per_expert = 3 * 4096 * 14336
    assert c.routed_experts == 32 * 8 * per_expert
    assert c.routed_experts_active == 32 * 2 * per_expert
    assert c.router == 32 * 8 * 4096
    assert c.active == 12_879_925_248
    gpt_oss = param_counts(load_model_spec("openai/gpt-oss-20b"))
    assert gpt_oss.active_excluding_embedding == 3_608_307_264
    assert gpt_oss.active == gpt_oss.active_excluding_embedding + 201088 * 2880


def test_deepseek_v3_layer_kinds() -> None:
    spec = load_model_spec("deepseek-v3")
    dense, moe = layer_param_counts(spec, 0), layer_param_counts(spec, 3)
    assert dense["dense_mlp"] == 3 * 7168 * 18432 and dense["routed_experts"] == 0
    assert moe["dense_mlp"] == 0
    assert moe["shared_experts"] == 3 * 7168 * 2048
    assert moe["router"] == 256 * 7168 + 256  # + e_score_correction_bias
    # MLA: q_a, q_b, kv_a, kv_b, o (DeepSeek-V2 paper §2.1 / modeling_deepseek_v3.py).
    assert moe["attention"] == (7168 * 1536 + 1536 * 128 * 192 + 7168 * 576 + 512 * 128 * 256
                                + 128 * 128 * 7168)


def test_weight_bytes_unquantized() -> None:
    spec = load_model_spec("meta-llama/Llama-3.2-1B")
    assert weight_bytes(spec) == 2 * 1_235_814_400
    assert weight_bytes(spec, DType.FP8) == 1_235_814_400  # a bf16 checkpoint served in fp8
    assert weight_bytes(load_model_spec("meta-llama/Llama-2-7b-hf")) == 2 * 6_738_415_616


def test_weight_bytes_mxfp4_honours_excluded_modules() -> None:
    spec = load_model_spec("openai/gpt-oss-20b")
    c = param_counts(spec)
    # Experts in fp4; attention, router, embeddings, norms, lm_head excluded -> bf16.
    expected = c.routed_experts // 2 + 2 * (c.total - c.routed_experts)
    assert weight_bytes(spec) == expected


def test_weight_bytes_fp8() -> None:
    spec = load_model_spec("Qwen/Qwen3-30B-A3B-FP8")
    c = param_counts(spec)
    linear = c.attention + c.routed_experts
    assert weight_bytes(spec) == linear + 2 * (c.total - linear)
    nvidia = load_model_spec("nvidia/Llama-3.1-70B-Instruct-FP8")
    n = param_counts(nvidia)
    assert weight_bytes(nvidia) == n.attention + n.dense_mlp + 2 * (n.total - n.attention - n.dense_mlp)


def test_excluded_patterns() -> None:
    patterns = ("model.layers.*.self_attn", "lm_head", "model.layers.0.mlp.gate")
    assert is_excluded("model.layers.3.self_attn", patterns)
    assert is_excluded("model.layers.3.self_attn.q_proj", patterns)
    assert is_excluded("lm_head", patterns)
    assert not is_excluded("model.layers.3.mlp.experts", patterns)
    assert not is_excluded("model.layers.0.mlp.gate_proj", patterns)
    assert is_excluded("model.layers.0.mlp.gate", patterns)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1.23B", (1_230_000_000, 10_000_000)),
        ("8.03B (8,030,261,248)", (8_030_261_248, 1)),
        ("124M (124,439,808)", (124_439_808, 1)),
        ("7B (6.74B)", (6_740_000_000, 10_000_000)),
        ("0.6B (0.44B non-embedding)", (600_000_000, 100_000_000)),
        ("405B (HF lists ~406B)", (405_000_000_000, 1_000_000_000)),
        ("20.9B (20.91B)", (20_910_000_000, 10_000_000)),
        ("671B (685B on HF incl. 14B MTP module)", (671_000_000_000, 1_000_000_000)),
        ("same as BF16 base", None),
        (None, None),
    ],
)
def test_parse_published_count(text: str | None, expected: tuple[int, int] | None) -> None:
    assert parse_published_count(text) == expected
