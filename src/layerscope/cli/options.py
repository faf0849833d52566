"""The options every command shares, declared once: one spelling per concept, one help text, one default.

A command declares ``prompt_len: int | None = options.prompt_len()``; where an older spelling existed
it also declares the hidden alias (``input_alias: int | None = options.alias("--input")``) and resolves
the two with :func:`resolve`, which prints the deprecation once and refuses both given at once.
Old spellings stay, hidden, for one release after the one that renamed them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import typer

from layerscope.errors import WorkloadError

T = TypeVar("T")

MODEL_HELP = "Catalog name, HF id, config.json or directory."
HARDWARE_HELP = "Preset name or YAML/JSON/CSV/XLSX file."


def model(default: Any = "llama-3.2-1b", help: str = MODEL_HELP) -> Any:
    return typer.Option(default, "--model", "-m", help=help)


def hardware(default: Any = "h100-sxm", help: str = HARDWARE_HELP) -> Any:
    return typer.Option(default, "--hardware", "-H", help=help)


def device_column() -> Any:
    return typer.Option(None, "--device-column", help="Column of a multi-device spreadsheet.")


def batch(default: int | None = 1) -> Any:
    return typer.Option(default, "--batch", "-b", help="Sequences per pass.")


def prompt_len(default: int | None, help: str = "Prompt tokens per sequence.") -> Any:
    return typer.Option(default, "--prompt-len", help=help)


def decode_steps(default: int | None, help: str = "Decode passes after the prefill.") -> Any:
    return typer.Option(default, "--decode-steps", help=help)


def context(default: int | None = 1024) -> Any:
    return typer.Option(default, "--context", help="Tokens already in each decode sequence's KV cache.")


def chunk(default: int | None = 512) -> Any:
    return typer.Option(default, "--chunk", help="Prompt tokens per chunked-prefill pass.")


def weight_dtype() -> Any:
    return typer.Option("bf16", "--weight-dtype", help="Weight data type (bf16, fp8, int4, …).")


def act_dtype() -> Any:
    return typer.Option("bf16", "--act-dtype", help="Activation data type.")


def kv_dtype() -> Any:
    return typer.Option("bf16", "--kv-dtype", help="KV-cache data type.")


def tensor_parallel() -> Any:
    return typer.Option(1, "--tp", help="Tensor-parallel devices.")


def pipeline_parallel() -> Any:
    return typer.Option(1, "--pp", help="Pipeline stages (the layers in consecutive groups).")


def expert_parallel() -> Any:
    return typer.Option(1, "--ep", help="Expert-parallel devices (whole routed experts spread over them, "
                        "all-to-all dispatch and combine); must divide tp x dp.")


def data_parallel() -> Any:
    return typer.Option(1, "--dp", help="Data-parallel replicas (each takes its share of --batch).")


def sequence_parallel() -> Any:
    return typer.Option(False, "--sp", help="Sequence parallelism over the --tp devices (norms on 1/tp of the "
                        "tokens, reduce-scatter + all-gather instead of all-reduce).")


def two_batch_overlap() -> Any:
    return typer.Option(False, "--two-batch-overlap", help="Two micro-batches side by side, each layer's "
                        "communication of one under the other's computation (DeepSeek-V3, SGLang).")


def micro_batches() -> Any:
    return typer.Option(1, "--micro-batches", help="Micro-batches per replica through the pipeline.")


def cost_model(default: str | None = "roofline") -> Any:
    return typer.Option(default, "--cost-model", help="roofline | tiling | hierarchical")


def attention() -> Any:
    from layerscope.app.defaults import DEFAULT_ATTENTION

    return typer.Option(DEFAULT_ATTENTION, "--attention",
                        help="fused (one attention op, as FlashAttention/SDPA run it) | unfused (QKᵀ, softmax, PV)")


def execution() -> Any:
    return typer.Option(None, "--execution",
                        help="Execution profile: fused | hf-eager | serving-graph (docs/execution-profiles.md) "
                             "[default: the hardware spec's execution.kernels].")


def as_json(help: str = "Print one JSON object (its schema: docs/schema/).") -> Any:
    return typer.Option(False, "--json", help=help)


def alias(name: str) -> Any:
    """A deprecated spelling, hidden from ``--help``, kept for one release; resolve it with :func:`resolve`."""
    return typer.Option(None, name, hidden=True)


#: Deprecation warnings of the running command, printed once it has run (:func:`flush_deprecations`): a
#: command that fails prints its one ``error:`` line alone.
_PENDING: list[str] = []


def resolve(new: T | None, new_name: str, old: Any, old_name: str, default: T,
            convert: Callable[[Any], T] | None = None, hint: str = "") -> T:
    """The value of an option that has a deprecated alias: the new spelling's, else the alias's (a
    deprecation warning queued for stderr), else ``default``. Both given is an error naming both."""
    if old is None:
        return default if new is None else new
    if new is not None:
        raise WorkloadError(f"{old_name} is the deprecated spelling of {new_name}: give {new_name} only")
    value = convert(old) if convert is not None else old
    _PENDING.append(f"warning: {old_name} is deprecated and will be removed in the next release; use {new_name}"
                    f"{hint}")
    return value


def flush_deprecations(print_them: bool = True) -> None:
    """Print (or, for a failed command, drop) the queued deprecation warnings, on stderr."""
    for line in _PENDING if print_them else ():
        typer.echo(line, err=True)
    _PENDING.clear()
