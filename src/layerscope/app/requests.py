"""What every verb is asked: a model, a hardware spec, a workload and a parallel plan, spelled once.

The CLI's options and the library's keyword arguments use these names: ``prompt_len`` (prompt
tokens), ``decode_steps`` (decode passes after the prefill), ``context`` (tokens already cached),
``attention`` (the view of attention, :data:`DEFAULT_ATTENTION` everywhere).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from pydantic import BaseModel, Field

from layerscope.app.defaults import DEFAULT_ATTENTION
from layerscope.docstrings import RESULT_CONFIG
from layerscope.errors import LayerscopeError, WorkloadError
from layerscope.graph.attention import AttentionView
from layerscope.workload.workload import MAX_BATCH, MAX_DEVICES, MAX_TOKENS

if TYPE_CHECKING:
    from layerscope.workload import Workload

__all__ = ["DEFAULT_ATTENTION", "MODEL_CONFIG", "AttentionView", "HardwareRef", "ModelRef", "ParallelPlan",
           "WorkloadRequest", "build_request"]

M = TypeVar("M", bound=BaseModel)

#: The configuration of every request and result model of the verbs: immutable, no unknown fields, attribute
#: docstrings exported as the JSON schema's descriptions (read only then), validators built on first use.
MODEL_CONFIG = RESULT_CONFIG


#: A model: a catalog name (``llama-3.2-1b``), a Hugging Face id, a ``config.json`` or a directory,
#: or an already loaded :class:`~layerscope.model.ModelSpec`.
ModelRef = Any
#: A hardware spec: a preset name, a YAML/JSON/CSV/XLSX file, or a :class:`~layerscope.hardware.HardwareSpec`.
HardwareRef = Any


class ParallelPlan(BaseModel):
    """How the model is split across devices: tensor parallelism (Megatron-style: heads and FFN columns
    divided, an all-reduce after attention and after the MLP; Shoeybi et al. 2019, arXiv 1909.08053 §3),
    pipeline stages (layers in consecutive groups, activations sent between them), expert parallelism (whole
    routed experts spread over devices, all-to-all dispatch and combine) and data-parallel replicas."""

    model_config = MODEL_CONFIG

    tensor_parallel: int = Field(default=1, gt=0, le=MAX_DEVICES)
    """Devices each layer is split across."""
    pipeline_parallel: int = Field(default=1, gt=0, le=MAX_DEVICES)
    """Pipeline stages."""
    expert_parallel: int = Field(default=1, gt=0, le=MAX_DEVICES)
    """Devices the routed experts are spread over (1: experts split like the dense MLP)."""
    data_parallel: int = Field(default=1, gt=0, le=MAX_DEVICES)
    """Model replicas, each with its share of the batch."""
    micro_batches: int = Field(default=1, gt=0, le=MAX_BATCH)
    """Micro-batches per replica through the pipeline."""
    sequence_parallel: bool = False
    """Megatron sequence parallelism over the tensor-parallel devices (reduce-scatter + all-gather)."""
    two_batch_overlap: bool = False
    """Two micro-batches side by side, each layer's communication of one under the other's computation."""

    @property
    def devices(self) -> int:
        """Devices the plan occupies: tensor × pipeline × data parallel."""
        return self.tensor_parallel * self.pipeline_parallel * self.data_parallel

    def workload_fields(self) -> dict[str, int | bool]:
        """The :class:`~layerscope.workload.Workload` fields of this plan that differ from 1."""
        fields: dict[str, int | bool] = {
            name: value for name in ("tensor_parallel", "pipeline_parallel", "expert_parallel", "data_parallel",
                                     "micro_batches") if (value := getattr(self, name)) != 1}
        for flag in ("sequence_parallel", "two_batch_overlap"):
            if getattr(self, flag):
                fields[flag] = True
        return fields


class WorkloadRequest(BaseModel):
    """The workload of a request, in the verbs' spelling. ``None`` takes :class:`~layerscope.workload.Workload`'s
    default (batch 1, prompt 512, context 1024, chunk 512, 128 generated tokens)."""

    model_config = MODEL_CONFIG

    phase: Literal["prefill", "decode", "chunked", "generate"] = "decode"
    """``prefill`` (the prompt), ``decode`` (one token per sequence over a cached context), ``chunked``
    (a prompt chunk beside decodes), ``generate`` (a prefill, then the decode steps)."""
    batch: int | None = Field(default=None, gt=0, le=MAX_BATCH)
    """Sequences per pass."""
    prompt_len: int | None = Field(default=None, gt=0, le=MAX_TOKENS)
    """Prompt tokens per sequence (prefill, generate)."""
    decode_steps: int | None = Field(default=None, ge=0, le=MAX_TOKENS)
    """Decode passes after the prefill: ``generate`` makes ``decode_steps + 1`` tokens (the first comes from
    the prefill); ``simulate`` of ``decode`` stacks this many steps with a growing KV cache."""
    context: int | None = Field(default=None, ge=0, le=MAX_TOKENS)
    """Tokens already in each decode sequence's KV cache (decode, chunked)."""
    chunk: int | None = Field(default=None, gt=0, le=MAX_TOKENS)
    """Prompt tokens per chunked-prefill pass."""
    weight_dtype: str = "bf16"
    """Weight data type (bf16, fp8, int4, …)."""
    act_dtype: str = "bf16"
    """Activation data type."""
    kv_dtype: str = "bf16"
    """KV-cache data type."""

    def to_workload(self, plan: ParallelPlan | None = None) -> Workload:
        """The :class:`~layerscope.workload.Workload` this request describes (a ``WorkloadError`` names a bad field)."""
        from layerscope.workload import make_workload

        fields: dict[str, object] = {"phase": self.phase, "weight_dtype": self.weight_dtype,
                                     "act_dtype": self.act_dtype, "kv_dtype": self.kv_dtype}
        for name, value in (("batch", self.batch), ("prompt_len", self.prompt_len),
                            ("context", self.context), ("chunk", self.chunk)):
            if value is not None:
                fields[name] = value
        if self.decode_steps is not None and self.phase == "generate":
            fields["decode_steps"] = self.decode_steps
        if plan is not None:
            fields.update(plan.workload_fields())
        return make_workload(**fields)


def check_devices(hardware: HardwareRef, plan: ParallelPlan) -> None:
    """Refuse a plan needing more GPUs than the cluster ``hardware`` names has (a ``WorkloadError`` naming both);
    a bare GPU spec takes any count."""
    if plan.devices == 1 or not isinstance(hardware, str | os.PathLike):
        return
    from layerscope.hardware.cluster import cluster_of

    cluster = cluster_of(os.fspath(hardware))
    if cluster is not None and plan.devices > cluster.total_gpus:
        raise WorkloadError(f"the plan needs {plan.devices} GPUs (tp {plan.tensor_parallel} × pp "
                            f"{plan.pipeline_parallel} × dp {plan.data_parallel}); {cluster.name} has "
                            f"{cluster.total_gpus} ({cluster.nodes} nodes × {cluster.gpus_per_node})")


def with_execution(hardware: HardwareRef, execution: str | None, device_column: str | None = None) -> HardwareRef:
    """``hardware`` running execution profile ``execution`` (``--execution``: loaded, its ``execution.kernels``
    replaced, :func:`layerscope.cost.execution.with_profile`); unchanged when ``execution`` is None. An unknown
    profile raises the registry's error (exit 2), naming the known ones."""
    if execution is None:
        return hardware
    from layerscope.cost.execution import EXECUTION_PROFILES, with_profile
    from layerscope.hardware import HardwareSpec, load_hardware

    EXECUTION_PROFILES.lookup(execution)
    hw = hardware if isinstance(hardware, HardwareSpec) else load_hardware(os.fspath(hardware), device=device_column)
    return with_profile(hw, execution)


def build_request(model: type[M], /, error: type[LayerscopeError] = WorkloadError, **fields: object) -> M:
    """``model(**fields)``, a bad field raising ``error`` that names it (the CLI's exit 2), not pydantic's error."""
    from pydantic import ValidationError

    try:
        return model(**fields)
    except ValidationError as exc:
        parts = []
        for err in exc.errors():
            if not err["loc"]:  # a check of the whole request: its message names the fields
                parts.append(f"{model.__name__}: {err['msg'].removeprefix('Value error, ')}")
                continue
            loc = ".".join(str(p) for p in err["loc"])
            parts.append(f"{loc}: {err['msg']} (got {err.get('input')!r})")
        raise error("; ".join(parts)) from None
