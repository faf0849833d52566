"""Units and data types shared by every layer.

Conventions (DESIGN.md): ``_s`` float seconds in cost models, ``_ns`` integer nanoseconds in
schedules and traces, ``_bytes``, ``_flops``, ``_flops_per_s``, ``_bytes_per_s``.
"""

from __future__ import annotations

import enum
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import IO

from layerscope.errors import OutputError, WorkloadError

NS_PER_S = 1_000_000_000
US_PER_S = 1_000_000
KIB = 1024
MIB = 1024**2
GIB = 1024**3
KB = 1000
MB = 1000**2
GB = 1000**3
TB = 1000**4


class DType(enum.StrEnum):
    """Element types for weights, activations and KV cache."""

    FP32 = "fp32"
    BF16 = "bf16"
    FP16 = "fp16"
    FP8 = "fp8"
    INT8 = "int8"
    INT4 = "int4"
    FP4 = "fp4"

    @property
    def bits(self) -> int:
        """Storage bits per element (block scales of fp4/int4/fp8 formats are not counted)."""
        return _DTYPE_BITS[self]

    @property
    def bytes(self) -> float:
        """Storage bytes per element; 0.5 for the 4-bit types."""
        return _DTYPE_BITS[self] / 8

    @property
    def torch_name(self) -> str:
        """The name flashinfer-bench and torch use (``bfloat16``, ``float8_e4m3fn`` …)."""
        return _TORCH_NAMES[self]


_DTYPE_BITS = {
    DType.FP32: 32,
    DType.BF16: 16,
    DType.FP16: 16,
    DType.FP8: 8,
    DType.INT8: 8,
    DType.INT4: 4,
    DType.FP4: 4,
}

_TORCH_NAMES = {
    DType.FP32: "float32",
    DType.BF16: "bfloat16",
    DType.FP16: "float16",
    DType.FP8: "float8_e4m3fn",
    DType.INT8: "int8",
    DType.INT4: "int4",
    DType.FP4: "float4_e2m1",
}

_DTYPE_ALIASES = {
    "float32": DType.FP32,
    "float": DType.FP32,
    "fp32": DType.FP32,
    "bfloat16": DType.BF16,
    "bf16": DType.BF16,
    "float16": DType.FP16,
    "half": DType.FP16,
    "fp16": DType.FP16,
    "fp8": DType.FP8,
    "float8": DType.FP8,
    "float8_e4m3fn": DType.FP8,
    "e4m3": DType.FP8,
    "fp8_e4m3": DType.FP8,
    "int8": DType.INT8,
    "int4": DType.INT4,
    "fp4": DType.FP4,
    "mxfp4": DType.FP4,
    "nvfp4": DType.FP4,
}


def parse_dtype(value: str | DType, *, field: str = "dtype") -> DType:
    """Parse a dtype name (``bf16``, ``bfloat16``, ``fp8`` …) or raise naming ``field``."""
    if isinstance(value, DType):
        return value
    key = str(value).strip().lower()
    if key in _DTYPE_ALIASES:
        return _DTYPE_ALIASES[key]
    known = ", ".join(d.value for d in DType)
    raise WorkloadError(f"{field}: unknown dtype {value!r}; known: {known}")


def s_to_ns(seconds: float) -> int:
    """Seconds to integer nanoseconds, rounded to nearest."""
    return round(seconds * NS_PER_S)


@contextmanager
def atomic_write(path: str | os.PathLike[str], mode: str = "wb",
                 inputs: tuple[str | os.PathLike[str], ...] = ()) -> Iterator[IO]:  # type: ignore[type-arg]
    """Write ``path`` through a temporary file in the same directory, renamed on success.

    Refuses to write over any of ``inputs`` (the files the output was computed from), and to
    write into a directory that does not exist. On an exception the temporary file is removed
    and ``path`` is left as it was.
    """
    target = Path(path)
    parent = target.parent if str(target.parent) else Path(".")
    if not parent.is_dir():
        raise OutputError(f"output directory {str(parent)!r} does not exist")
    if target.is_dir():
        raise OutputError(f"output path {str(target)!r} is a directory")
    for src in inputs:
        try:
            if target.exists() and Path(src).exists() and target.samefile(src):
                raise OutputError(f"refusing to overwrite the input file {str(src)!r} with an output")
        except OSError:
            continue
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=parent)
    # mkstemp creates 0600 files; outputs get the permissions a plain open() would give them.
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)
    try:
        with os.fdopen(fd, mode) as handle:
            yield handle
        os.replace(tmp, target)
    except BaseException:
        with suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
