from __future__ import annotations

import pytest

from layerscope.errors import WorkloadError
from layerscope.units import DType
from layerscope.workload import make_workload


def test_prefill_pass_has_prompt_tokens_and_no_cache():
    w = make_workload(phase="prefill", batch=4, prompt_len=256)
    (fwd,) = w.passes()
    assert fwd.num_tokens == 4 * 256
    assert fwd.groups[0].cached_tokens == 0


def test_decode_pass_is_one_token_per_sequence_against_the_cache():
    w = make_workload(phase="decode", batch=8, context=2048)
    (fwd,) = w.passes()
    assert fwd.num_tokens == 8
    assert fwd.groups[0].cached_tokens == 2048
    assert w.max_context_len() == 2049


def test_chunked_pass_mixes_a_prefill_chunk_and_decode_sequences():
    w = make_workload(phase="chunked", batch=16, chunk=512, context=1000, prefill_offset=1024)
    (fwd,) = w.passes()
    assert fwd.num_tokens == 512 + 16
    assert [(g.count, g.new_tokens, g.cached_tokens) for g in fwd.groups] == [(1, 512, 1024), (16, 1, 1000)]


def test_generation_decode_contexts_grow_one_token_per_step():
    w = make_workload(phase="generate", prompt_len=100, decode_steps=4)
    # The first output token comes from prefill; 4 decode steps see 100..103 cached tokens.
    assert list(w.decode_contexts()) == [100, 101, 102, 103]
    assert w.max_context_len() == 104


def test_dtypes_parse_aliases():
    w = make_workload(weight_dtype="float8_e4m3fn", act_dtype="bfloat16", kv_dtype="int4")
    assert (w.weight_dtype, w.act_dtype, w.kv_dtype) == (DType.FP8, DType.BF16, DType.INT4)
    assert DType.INT4.bytes == 0.5 and DType.FP4.bits == 4


@pytest.mark.parametrize(
    ("fields", "needle"),
    [
        ({"phase": "train"}, "phase"),
        ({"batch": 0}, "batch"),
        ({"prompt_len": -3}, "prompt_len"),
        ({"kv_dtype": "fp7"}, "kv_dtype"),
        ({"tensor_parallel": 0}, "tensor_parallel"),
    ],
)
def test_bad_workloads_name_the_field(fields, needle):
    with pytest.raises(WorkloadError, match=needle):
        make_workload(**fields)


def test_old_field_names_still_read_for_one_release_with_a_warning():
    """The names before the verbs' spelling: batch_size, input_len, output_len (= decode_steps + 1), context_len,
    chunk_size give the same workload as the new ones, and a DeprecationWarning naming each."""
    with pytest.warns(DeprecationWarning, match=r"batch_size -> batch.*input_len -> prompt_len.*output_len"):
        old = make_workload(phase="generate", batch_size=3, input_len=100, output_len=5)
    assert old == make_workload(phase="generate", batch=3, prompt_len=100, decode_steps=4)
    with pytest.warns(DeprecationWarning, match="context_len -> context.*chunk_size -> chunk"):
        chunked = make_workload(phase="chunked", context_len=900, chunk_size=256)
    assert (chunked.context, chunked.chunk) == (900, 256)


@pytest.mark.parametrize(
    ("fields", "needle"),
    [
        ({"batch_size": 2, "batch": 2}, "batch_size and batch both given"),
        ({"output_len": 0}, "output_len .* must be an integer >= 1, got 0"),
        ({"output_len": "many"}, "output_len .* got 'many'"),
    ],
)
def test_old_field_names_refused_when_they_clash_or_are_bad(fields, needle):
    with pytest.raises(WorkloadError, match=needle):
        make_workload(**fields)
