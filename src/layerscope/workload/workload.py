"""Workloads: what the model is asked to do, as forward passes over groups of sequences.

A forward pass (one model invocation) processes groups of sequences; each group has ``count``
sequences that each bring ``new_tokens`` tokens and attend to ``cached_tokens`` earlier tokens
already in the KV cache. Every phase is expressed this way:

* prefill: ``batch`` x (new = prompt_len, cached = 0)
* decode: ``batch`` x (new = 1, cached = context)
* chunked prefill: one chunk (new = chunk, cached = prefill_offset) plus
  ``batch`` decode sequences (new = 1, cached = context) in the same pass (Sarathi-Serve,
  arXiv 2403.02310)
* generate: a prefill, then ``decode_steps`` decode passes whose cached length grows from
  ``prompt_len`` to ``prompt_len + decode_steps - 1``: ``decode_steps + 1`` output tokens, the first
  from the prefill.

The fields are spelled as the verbs' options are (``--batch``, ``--prompt-len``, ``--decode-steps``,
``--context``, ``--chunk``). The older names (``batch_size``, ``input_len``, ``output_len`` = decode
steps + 1, ``context_len``, ``chunk_size``) are still read, with a ``DeprecationWarning``, until the
next release.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, Field, model_validator

from layerscope.docstrings import RESULT_CONFIG, SPEC_CONFIG
from layerscope.errors import WorkloadError
from layerscope.units import DType, parse_dtype

if TYPE_CHECKING:
    from layerscope.model.spec import ModelSpec

Phase = Literal["prefill", "decode", "chunked", "generate"]
PHASES: tuple[Phase, ...] = ("prefill", "decode", "chunked", "generate")


class SequenceGroup(BaseModel):
    """``count`` sequences, each adding ``new_tokens`` on top of ``cached_tokens`` in the KV cache."""

    model_config = SPEC_CONFIG

    count: int = Field(gt=0)
    new_tokens: int = Field(gt=0)
    cached_tokens: int = Field(default=0, ge=0)

    @property
    def is_decode(self) -> bool:
        return self.new_tokens == 1 and self.cached_tokens > 0


class ForwardPass(BaseModel):
    """One invocation of the model over one or more sequence groups."""

    model_config = SPEC_CONFIG

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


#: The fields' older names, read until the next release (``output_len`` too: it becomes ``decode_steps + 1``).
RENAMED_FIELDS = {"batch_size": "batch", "input_len": "prompt_len", "context_len": "context", "chunk_size": "chunk"}


class Workload(BaseModel):
    """A phase with its batch, lengths, dtypes and parallelism."""

    model_config = RESULT_CONFIG

    phase: Phase = "decode"
    """``prefill``, ``decode``, ``chunked`` or ``generate``."""
    batch: int = Field(default=1, gt=0, le=MAX_BATCH)
    """Sequences per pass (decode sequences alongside the chunk in ``chunked``)."""
    prompt_len: int = Field(default=512, gt=0, le=MAX_TOKENS)
    """Prompt tokens per sequence (prefill, generate)."""
    decode_steps: int = Field(default=127, ge=0, le=MAX_TOKENS)
    """Decode passes after the prefill (generate): ``decode_steps + 1`` generated tokens, the first from the
    prefill."""
    context: int = Field(default=1024, ge=0, le=MAX_TOKENS)
    """Tokens already in the KV cache of each decode sequence (decode, chunked)."""
    chunk: int = Field(default=512, gt=0, le=MAX_TOKENS)
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
    pipeline_parallel: int = Field(default=1, gt=0, le=MAX_DEVICES)
    """Pipeline stages: the decoder layers split into this many consecutive groups, one per group of
    ``tensor_parallel`` devices, activations sent from stage to stage."""
    expert_parallel: int = Field(default=1, gt=0, le=MAX_DEVICES)
    """Devices the routed experts of a MoE layer are spread over (each holds ``experts / expert_parallel`` whole
    experts; tokens reach them by an all-to-all dispatch and return by a combine). 1: experts split like the
    dense MLP, by ``tensor_parallel``."""
    data_parallel: int = Field(default=1, gt=0, le=MAX_DEVICES)
    """Model replicas: each takes ``ceil(batch / data_parallel)`` of the sequences (with ``expert_parallel``,
    the attention replicas of DeepSeek-V3-style serving whose MoE layers share one expert-parallel group)."""
    sequence_parallel: bool = False
    """Megatron-LM sequence parallelism (Korthikanti et al. 2022, arXiv 2205.05198 §4.2.2): the norms and
    residual adds run on ``1/tensor_parallel`` of the tokens, each all-reduce becomes a reduce-scatter after the
    row-parallel linear and an all-gather before the next column-parallel one. Needs ``tensor_parallel > 1``."""
    two_batch_overlap: bool = False
    """A replica's sequences in two micro-batches run together, each layer's communication of one overlapping the
    computation of the other (DeepSeek-V3's inference, arXiv 2412.19437 §3.4; SGLang's two-batch overlap). The
    graph is one micro-batch's; needs two sequences per replica and no pipeline."""
    micro_batches: int = Field(default=1, gt=0, le=MAX_BATCH)
    """Micro-batches a replica's sequences are cut into for the pipeline (GPipe): more fill the stages,
    each smaller. 1 without pipeline parallelism."""

    @property
    def devices(self) -> int:
        """GPUs the workload occupies: tensor × pipeline × data parallel (expert parallelism reuses them)."""
        return self.tensor_parallel * self.pipeline_parallel * self.data_parallel

    @property
    def replica_batch(self) -> int:
        """Sequences one data-parallel replica runs: ``ceil(batch / data_parallel)``."""
        return -(-self.batch // self.data_parallel)

    @property
    def micro_batch(self) -> int:
        """Sequences per micro-batch of a replica: ``ceil(replica_batch / micro_batches)`` (halved again under
        two-batch overlap)."""
        return -(-self.replica_batch // (self.micro_batches * (2 if self.two_batch_overlap else 1)))

    @model_validator(mode="before")
    @classmethod
    def _renamed(cls, data: object) -> object:
        if not isinstance(data, dict):
            return data
        old = [key for key in (*RENAMED_FIELDS, "output_len") if key in data]
        if not old:
            return data
        data = dict(data)
        for key in old:
            new = RENAMED_FIELDS.get(key, "decode_steps")
            if new in data:
                raise ValueError(f"{key} and {new} both given: {key} is the old name of {new}; give {new} only")
            value = data.pop(key)
            if key == "output_len":
                if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                    raise ValueError(f"output_len (generated tokens, decode_steps + 1) must be an integer >= 1, "
                                     f"got {value!r}")
                value -= 1
            data[new] = value
        hint = ", ".join(f"{key} -> {RENAMED_FIELDS.get(key, 'decode_steps (output_len - 1)')}" for key in old)
        warnings.warn(f"Workload field names are deprecated and will be removed in the next release: {hint}",
                      DeprecationWarning, stacklevel=4)
        return data

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
        if self.phase == "decode" and self.context < 1:
            raise ValueError("context must be >= 1 for decode (the KV cache holds the prompt)")
        if self.data_parallel > self.batch:
            raise ValueError(f"data_parallel={self.data_parallel} replicas need at least as many sequences; "
                             f"batch is {self.batch}")
        if self.sequence_parallel and self.tensor_parallel == 1:
            raise ValueError("sequence_parallel splits the tokens over the tensor-parallel devices: it needs "
                             "tensor_parallel > 1")
        if self.two_batch_overlap and (self.pipeline_parallel > 1 or self.micro_batches > 1):
            raise ValueError("two_batch_overlap runs two micro-batches side by side on one stage: not with "
                             "pipeline_parallel or micro_batches")
        if self.two_batch_overlap and self.replica_batch < 2:
            raise ValueError(f"two_batch_overlap needs at least 2 sequences per replica; a replica has "
                             f"{self.replica_batch}")
        if self.micro_batches > self.replica_batch:
            raise ValueError(f"micro_batches={self.micro_batches} exceeds the {self.replica_batch} sequences of a "
                             f"replica (batch {self.batch} / data_parallel {self.data_parallel})")
        return self

    @property
    def output_tokens(self) -> int:
        """Tokens a generation makes: ``decode_steps + 1`` (the first from the prefill)."""
        return self.decode_steps + 1

    def passes(self) -> list[ForwardPass]:
        """The distinct forward passes of this workload (for generate: prefill and the first decode).

        Use :meth:`decode_contexts` for every decode step of a generation.
        """
        return _PASS_BUILDERS[self.phase](self)

    def prefill_pass(self) -> ForwardPass:
        return ForwardPass(groups=(SequenceGroup(count=self.batch, new_tokens=self.prompt_len),),
                           label="prefill")

    def decode_pass(self, cached_tokens: int) -> ForwardPass:
        return ForwardPass(
            groups=(SequenceGroup(count=self.batch, new_tokens=1, cached_tokens=cached_tokens),),
            label=f"decode@{cached_tokens}",
        )

    def decode_contexts(self) -> range:
        """Cached lengths of the decode passes of a generation: prompt_len … prompt_len + decode_steps - 1."""
        return range(self.prompt_len, self.prompt_len + self.decode_steps)

    def max_context_len(self) -> int:
        """Longest KV cache any sequence holds at the end of this workload."""
        return {
            "prefill": self.prompt_len,
            "decode": self.context + 1,
            "chunked": max(self.context + 1, self.prefill_offset + self.chunk),
            "generate": self.prompt_len + self.decode_steps,
        }[self.phase]


def _prefill(w: Workload) -> list[ForwardPass]:
    return [w.prefill_pass()]


def _decode(w: Workload) -> list[ForwardPass]:
    return [w.decode_pass(w.context)]


def _chunked(w: Workload) -> list[ForwardPass]:
    groups = [SequenceGroup(count=1, new_tokens=w.chunk, cached_tokens=w.prefill_offset)]
    groups.append(SequenceGroup(count=w.batch, new_tokens=1, cached_tokens=max(w.context, 1)))
    return [ForwardPass(groups=tuple(groups), label="chunked")]


def _generate(w: Workload) -> list[ForwardPass]:
    passes = [w.prefill_pass()]
    if w.decode_steps > 0:
        passes.append(w.decode_pass(w.prompt_len))
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


def pipeline_stages(num_layers: int, stages: int) -> tuple[range, ...]:
    """The decoder layers of each pipeline stage: consecutive, as even as they go (stage ``s`` holds layers
    ``floor(s·L/p)`` to ``floor((s+1)·L/p) - 1``); the embedding runs on the first stage, the head on the last."""
    bounds = [s * num_layers // stages for s in range(stages + 1)]
    return tuple(range(bounds[s], bounds[s + 1]) for s in range(stages))


def check_parallel(spec: ModelSpec, workload: Workload) -> None:
    """Refuse a parallel plan the model cannot be split by, naming the broken constraint: the heads
    (:func:`check_tensor_parallel`), more pipeline stages than layers, expert parallelism on a dense model, over
    more devices than a stage has (``tensor_parallel × data_parallel``: the expert-parallel group is made of a
    stage's devices) or not dividing the routed experts."""
    check_tensor_parallel(spec, workload.tensor_parallel)
    pp, ep = workload.pipeline_parallel, workload.expert_parallel
    if pp > spec.num_layers:
        raise WorkloadError(f"pipeline_parallel={pp} exceeds the {spec.num_layers} layers of {spec.name}: a stage "
                            f"needs at least one layer")
    if ep == 1:
        return
    if spec.moe is None:
        raise WorkloadError(f"expert_parallel={ep}: {spec.name} is a dense model (no routed experts)")
    experts = spec.moe.num_experts
    if experts % ep:
        raise WorkloadError(f"expert_parallel={ep} does not divide the {experts} routed experts of {spec.name} "
                            f"(use a divisor of {experts})")
    stage = workload.tensor_parallel * workload.data_parallel
    if stage % ep:
        raise WorkloadError(f"expert_parallel={ep} must divide the devices of a pipeline stage, tensor_parallel × "
                            f"data_parallel = {workload.tensor_parallel} × {workload.data_parallel} = {stage}")


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
