"""Workloads: what the model is asked to do, as forward passes over groups of sequences.

A forward pass (one model invocation) processes groups of sequences; each group has ``count``
sequences that each bring ``new_tokens`` tokens and attend to ``cached_tokens`` earlier tokens
already in the KV cache. Every phase is expressed this way:

* prefill: ``batch`` x (new = prompt_len, cached = 0)
* decode: ``batch`` x (new = 1, cached = context_len)
* chunked prefill: one chunk (new = chunk_size, cached = prefill_offset) plus
  ``batch`` decode sequences (new = 1, cached = context_len) in the same pass (Sarathi-Serve,
  arXiv 2403.02310)
* generate: a prefill, then ``output_len - 1`` decode passes whose cached length grows from
  ``input_len`` to ``input_len + output_len - 2`` (the first output token comes from prefill).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from layerscope.errors import WorkloadError
from layerscope.units import DType, parse_dtype

if TYPE_CHECKING:
    from layerscope.model.spec import ModelSpec

Phase = Literal["prefill", "decode", "chunked", "generate"]
PHASES: tuple[Phase, ...] = ("prefill", "decode", "chunked", "generate")


class SequenceGroup(BaseModel):
    """``count`` sequences, each adding ``new_tokens`` on top of ``cached_tokens`` in the KV cache."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    count: int = Field(gt=0)
    new_tokens: int = Field(gt=0)
    cached_tokens: int = Field(default=0, ge=0)

    @property
    def is_decode(self) -> bool:
        return self.new_tokens == 1 and self.cached_tokens > 0


class ForwardPass(BaseModel):
    """One invocation of the model over one or more sequence groups."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    groups: tuple[SequenceGroup, ...] = Field(min_length=1)
    label: str = "forward"

    @property
    def num_tokens(self) -> int:
        """Tokens processed in this pass (the M dimension of every projection GEMM)."""
        return sum(g.count * g.new_tokens for g in self.groups)

    @property
    def num_sequences(self) -> int:
        return sum(g.count for g in self.groups)


#: Bounds that keep every derived count (tokens × widths, FLOPs) inside the int64 arrays the cost
#: models use: far beyond any real deployment (2^24 sequences a pass, 2^31 tokens a sequence).
MAX_BATCH = 2**24
MAX_TOKENS = 2**31
MAX_DEVICES = 2**16


class Workload(BaseModel):
    """A phase with its batch, lengths, dtypes and parallelism."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    phase: Phase = "decode"
    """``prefill``, ``decode``, ``chunked`` or ``generate``."""
    batch_size: int = Field(default=1, gt=0, le=MAX_BATCH)
    """Sequences per pass (decode sequences alongside the chunk in ``chunked``)."""
    input_len: int = Field(default=512, gt=0, le=MAX_TOKENS)
    """Prompt tokens (prefill, generate)."""
    output_len: int = Field(default=128, gt=0, le=MAX_TOKENS)
    """Generated tokens (generate)."""
    context_len: int = Field(default=1024, ge=0, le=MAX_TOKENS)
    """Tokens already in the KV cache of each decode sequence (decode, chunked)."""
    chunk_size: int = Field(default=512, gt=0, le=MAX_TOKENS)
    """Prompt tokens processed per pass in ``chunked``."""
    prefill_offset: int = Field(default=0, ge=0, le=MAX_TOKENS)
    """Prompt tokens of the chunked request already processed before this chunk."""
    weight_dtype: DType = DType.BF16
    """Weight data type."""
    act_dtype: DType = DType.BF16
    """Activation data type."""
    kv_dtype: DType = DType.BF16
    """KV-cache data type."""
    tensor_parallel: int = Field(default=1, gt=0, le=MAX_DEVICES)
    """Devices a layer is split across (Megatron-style: heads and FFN columns divided)."""

    @model_validator(mode="before")
    @classmethod
    def _dtypes(cls, data: object) -> object:
        if isinstance(data, dict):
            for key in ("weight_dtype", "act_dtype", "kv_dtype"):
                if key in data and data[key] is not None and not isinstance(data[key], DType):
                    data[key] = parse_dtype(data[key], field=key)
        return data

    @model_validator(mode="after")
    def _check(self) -> Workload:
        if self.phase == "decode" and self.context_len < 1:
            raise ValueError("context_len must be >= 1 for decode (the KV cache holds the prompt)")
        return self

    def passes(self) -> list[ForwardPass]:
        """The distinct forward passes of this workload (for generate: prefill and the first decode).

        Use :meth:`decode_contexts` for every decode step of a generation.
        """
        return _PASS_BUILDERS[self.phase](self)

    def prefill_pass(self) -> ForwardPass:
        return ForwardPass(groups=(SequenceGroup(count=self.batch_size, new_tokens=self.input_len),),
                           label="prefill")

    def decode_pass(self, cached_tokens: int) -> ForwardPass:
        return ForwardPass(
            groups=(SequenceGroup(count=self.batch_size, new_tokens=1, cached_tokens=cached_tokens),),
            label=f"decode@{cached_tokens}",
        )

    def decode_contexts(self) -> range:
        """Cached lengths of the decode passes of a generation: input_len … input_len+output_len-2."""
        return range(self.input_len, self.input_len + self.output_len - 1)

    def max_context_len(self) -> int:
        """Longest KV cache any sequence holds at the end of this workload."""
        return {
            "prefill": self.input_len,
            "decode": self.context_len + 1,
            "chunked": max(self.context_len + 1, self.prefill_offset + self.chunk_size),
            "generate": self.input_len + self.output_len - 1,
        }[self.phase]


def _prefill(w: Workload) -> list[ForwardPass]:
    return [w.prefill_pass()]


def _decode(w: Workload) -> list[ForwardPass]:
    return [w.decode_pass(w.context_len)]


def _chunked(w: Workload) -> list[ForwardPass]:
    groups = [SequenceGroup(count=1, new_tokens=w.chunk_size, cached_tokens=w.prefill_offset)]
    groups.append(SequenceGroup(count=w.batch_size, new_tokens=1, cached_tokens=max(w.context_len, 1)))
    return [ForwardPass(groups=tuple(groups), label="chunked")]


def _generate(w: Workload) -> list[ForwardPass]:
    passes = [w.prefill_pass()]
    if w.output_len > 1:
        passes.append(w.decode_pass(w.input_len))
    return passes


_PASS_BUILDERS = {"prefill": _prefill, "decode": _decode, "chunked": _chunked, "generate": _generate}


def make_workload(**fields: object) -> Workload:
    """Build a :class:`Workload`, turning pydantic's errors into a :class:`WorkloadError`."""
    from pydantic import ValidationError

    if "phase" in fields and fields["phase"] not in PHASES:
        raise WorkloadError(f"phase: unknown phase {fields['phase']!r}; known: {', '.join(PHASES)}")
    try:
        return Workload(**fields)  # type: ignore[arg-type]
    except ValidationError as exc:
        raise WorkloadError(_format_validation(exc)) from None


def _format_validation(exc: object) -> str:
    from pydantic import ValidationError

    assert isinstance(exc, ValidationError)
    parts = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "workload"
        parts.append(f"{loc}: {err['msg']} (got {err.get('input')!r})")
    return "; ".join(parts)


def check_tensor_parallel(spec: ModelSpec, tensor_parallel: int) -> None:
    """Refuse a tensor-parallel degree the model's heads cannot be split by.

    Megatron-LM's attention split (Shoeybi et al. 2019, arXiv 1909.08053 §3) gives each device
    ``heads / tp`` query heads, so ``tp`` must divide the query heads; KV heads are split the same
    way, or replicated when there are fewer than ``tp`` of them, which needs ``tp`` to be a multiple
    of the KV heads (vLLM's ``QKVParallelLinear``). MLA models split their heads only."""
    tp = tensor_parallel
    if tp == 1:
        return
    heads, kv_heads = spec.num_attention_heads, spec.num_kv_heads
    if heads % tp:
        raise WorkloadError(f"tensor_parallel={tp} does not divide the {heads} attention heads of {spec.name} "
                            f"(use a divisor of {heads})")
    if spec.mla is None and kv_heads % tp and tp % kv_heads:
        raise WorkloadError(f"tensor_parallel={tp} cannot split or replicate the {kv_heads} KV heads of "
                            f"{spec.name}: it must divide them or be a multiple of them")


def context_warnings(spec: ModelSpec, workload: Workload) -> list[str]:
    """What is wrong with running ``workload`` on ``spec`` without being impossible; raises
    :class:`WorkloadError` for what is impossible.

    A model with learned positions (GPT-2, OPT) has no embedding past ``max_position_embeddings``:
    a longer context is refused. A RoPE model computes one, but was trained up to that length: the
    estimate is made and a warning says so."""
    longest = workload.max_context_len()
    limit = spec.max_position_embeddings
    if longest <= limit:
        return []
    if spec.position == "learned":
        raise WorkloadError(f"the longest context, {longest} tokens, exceeds the {limit} learned positions of "
                            f"{spec.name} (max_position_embeddings)")
    return [f"the longest context, {longest} tokens, exceeds {spec.name}'s max_position_embeddings ({limit}): "
            "the model was not trained that long; computed anyway"]
