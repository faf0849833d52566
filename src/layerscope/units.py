"""Units and data types shared by every layer.

Conventions (DESIGN.md): ``_s`` float seconds in cost models, ``_ns`` integer nanoseconds in
schedules and traces, ``_bytes``, ``_flops``, ``_flops_per_s``, ``_bytes_per_s``.
"""

from __future__ import annotations

import datetime
import decimal
import enum
import math
import os
import reprlib
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from contextvars import ContextVar
from pathlib import Path
from typing import IO, Any

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


#: Longest quoted value in an error message: a config or sheet value, a cell or
#: an expanded YAML value, can be megabytes long.
MAX_QUOTED_CHARS = 60

_QUOTE = reprlib.Repr()
_QUOTE.maxstring = MAX_QUOTED_CHARS
_QUOTE.maxother = MAX_QUOTED_CHARS
_QUOTE.maxlevel = 2
_QUOTE.maxlist = _QUOTE.maxtuple = _QUOTE.maxdict = _QUOTE.maxset = 3


def quote(value: Any) -> str:
    """``repr(value)`` for an error message, bounded: long strings and large or deep containers are
    elided (``'9999…9999'``, ``[[…], …]``) without walking all of them, so quoting a huge or
    alias-expanded value costs little and prints a short line."""
    text = _QUOTE.repr(value)
    return text if len(text) <= 2 * MAX_QUOTED_CHARS else text[: 2 * MAX_QUOTED_CHARS - 1] + "…"


#: Readable time units by magnitude: (lower bound in seconds, scale, unit, decimals of the fixed style).
_TIME_UNITS = ((1.0, 1.0, "s", 3), (1e-3, 1e3, "ms", 3), (1e-6, 1e6, "µs", 2), (0.0, 1e9, "ns", 0))


def readable_seconds(seconds: float | None, *, significant: int | None = None, missing: str = "-") -> str:
    """``seconds`` in the unit its magnitude reads best in (s, ms, µs, ns; a negative time keeps its sign): with
    fixed decimals (``12.35 µs``, ``4.560 ms``), or ``significant`` digits (``12.3 µs``); ``missing`` for None or
    a non-finite value."""
    if seconds is None or not math.isfinite(seconds):
        return missing
    size = abs(seconds)
    for bound, scale, unit, decimals in _TIME_UNITS:
        if size >= bound:
            value = seconds * scale
            return f"{value:.{significant}g} {unit}" if significant is not None else f"{value:.{decimals}f} {unit}"
    raise AssertionError("unreachable: the last unit's bound is 0")


def s_to_ns(seconds: float) -> int:
    """Seconds to integer nanoseconds, rounded to nearest."""
    return round(seconds * NS_PER_S)


#: Inputs the running command has read (see :func:`reading_inputs`); None outside such a scope.
_INPUTS_READ: ContextVar[set[Path] | None] = ContextVar("layerscope_inputs_read", default=None)

#: A temporary of a killed writer is removed when it is older than this and its writer's pid is gone
#: (or its name carries no pid: temporaries of older releases).
STALE_TEMP_S = 600.0


@contextmanager
def reading_inputs() -> Iterator[set[Path]]:
    """A scope (one CLI command) within which every input a loader reads is remembered
    (:func:`note_input`), so that every writer refuses to write over any of them."""
    token = _INPUTS_READ.set(set())
    try:
        yield _INPUTS_READ.get() or set()
    finally:
        _INPUTS_READ.reset(token)


def note_input(path: str | os.PathLike[str]) -> None:
    """Remember ``path`` (a file or a directory) as an input of the running command, if inside
    :func:`reading_inputs`; outside one, writers see only the ``inputs`` they are given."""
    seen = _INPUTS_READ.get()
    if seen is not None:
        with suppress(OSError, RuntimeError):
            seen.add(Path(path).resolve())


def check_output(path: str | os.PathLike[str], inputs: tuple[str | os.PathLike[str], ...] = ()) -> Path:
    """The guard every writer passes first; returns the resolved output path.

    Refuses (:class:`OutputError`) an output whose directory does not exist, that is a directory,
    that resolves (``..``, symlinks, hard links) to one of ``inputs`` or of the inputs the command has
    read (:func:`note_input`), or that is an existing file inside an input directory (a model
    directory's ``config.json``)."""
    target = Path(path)
    parent = target.parent if str(target.parent) else Path(".")
    if not parent.is_dir():
        raise OutputError(f"output directory {str(parent)!r} does not exist")
    if target.is_dir():
        raise OutputError(f"output path {str(target)!r} is a directory")
    try:
        resolved = target.resolve()
    except (OSError, RuntimeError) as exc:
        raise OutputError(f"output path {str(target)!r} cannot be resolved: {exc}") from None
    candidates = {Path(p) for p in inputs} | (_INPUTS_READ.get() or set())
    exists = target.exists()
    for src in candidates:
        try:
            src_resolved = src.resolve()
        except (OSError, RuntimeError):
            continue
        same = resolved == src_resolved or (exists and src.exists() and target.samefile(src))
        if same:
            raise OutputError(f"refusing to overwrite the input {str(src)!r} with an output ({str(target)!r})")
        if exists and src_resolved.is_dir() and src_resolved in resolved.parents:
            raise OutputError(f"refusing to overwrite {str(target)!r}: it is inside the input directory "
                              f"{str(src)!r}")
    return resolved


def check_writable(path: str | os.PathLike[str], inputs: tuple[str | os.PathLike[str], ...] = ()) -> Path:
    """:func:`check_output`, and a real write into the output's directory (a temporary created and
    removed), for commands that work minutes before they write: a read-only or pseudo file system
    (``/proc``) fails now, not after the work."""
    resolved = check_output(path, inputs)
    target = Path(path)
    parent = target.parent if str(target.parent) else Path(".")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f"{_temp_prefix(target.name)}{os.getpid()}.", suffix=".tmp", dir=parent)
        os.close(fd)
        os.unlink(tmp)
    except OSError as exc:
        raise OutputError(f"cannot write {str(target)!r}: {exc.strerror or exc}") from None
    return resolved


def make_output_dir(path: str | os.PathLike[str]) -> Path:
    """Create the output directory ``path`` (and its parents) for a command's files; returns it.

    Refuses (:class:`OutputError`) a path that exists and is not a directory (an input file
    included) and one the file system will not create (``/proc``, read-only, permission). The files
    written into it each pass :func:`check_output`, so none replaces an input."""
    out = Path(path)
    if out.exists() and not out.is_dir():
        raise OutputError(f"output directory {str(out)!r} exists and is not a directory")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"cannot create the output directory {str(out)!r}: {exc.strerror or exc}") from None
    return out


def _temp_prefix(name: str) -> str:
    return f".{name}."


def remove_stale_temporaries(directory: Path, name: str) -> list[Path]:
    """Remove ``.NAME.*.tmp`` files in ``directory`` left by writers that were killed
    (:func:`atomic_write`'s temporaries, ``.NAME.<pid>.<random>.tmp``): those whose pid is not running,
    and, for names without a pid, those older than :data:`STALE_TEMP_S`. Returns what was removed."""
    removed: list[Path] = []
    prefix = _temp_prefix(name)
    try:
        entries = list(directory.iterdir())
    except OSError:
        return removed
    now = time.time()
    for entry in entries:
        if not (entry.name.startswith(prefix) and entry.name.endswith(".tmp")):
            continue
        middle = entry.name[len(prefix):-len(".tmp")]
        pid_text = middle.split(".", 1)[0]
        try:
            if pid_text.isdigit() and "." in middle:
                if pid_alive(int(pid_text)):
                    continue
            elif now - entry.stat().st_mtime < STALE_TEMP_S:
                continue
            entry.unlink()
            removed.append(entry)
        except OSError:
            continue
    return removed


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` still runs (this process does; one we may not signal is taken to):
    how a killed writer's temporary is told from a live writer's."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # PermissionError: someone else's process
        return True
    return True


@contextmanager
def atomic_write(path: str | os.PathLike[str], mode: str = "wb",
                 inputs: tuple[str | os.PathLike[str], ...] = ()) -> Iterator[IO]:  # type: ignore[type-arg]
    """Write ``path`` through a temporary file in the same directory, renamed on success.

    Passes :func:`check_output` first (never over an input, only into an existing directory).
    The temporary is ``.NAME.<pid>.<random>.tmp``; stale ones of killed writers are removed
    (:func:`remove_stale_temporaries`). On an exception the temporary file is removed and ``path``
    is left as it was; a file system that refuses the write (read-only, ``/proc``, full) is an
    :class:`OutputError` naming the path.
    """
    check_output(path, inputs)
    target = Path(path)
    parent = target.parent if str(target.parent) else Path(".")
    remove_stale_temporaries(parent, target.name)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f"{_temp_prefix(target.name)}{os.getpid()}.", suffix=".tmp", dir=parent)
    except OSError as exc:
        raise OutputError(f"cannot write {str(target)!r}: {exc.strerror or exc}") from None
    try:
        # mkstemp creates 0600 files; outputs get the permissions a plain open() would give them.
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        with os.fdopen(fd, mode) as handle:
            yield handle
        os.replace(tmp, target)
    except OSError as exc:
        with suppress(OSError):
            os.unlink(tmp)
        raise OutputError(f"cannot write {str(target)!r}: {exc.strerror or exc}") from None
    except BaseException:
        with suppress(OSError):
            os.unlink(tmp)
        raise


def json_value(value: Any) -> Any:
    """A value of a SQL result (a pyarrow ``to_pylist`` cell) as the JSON value the commands print: numbers,
    strings, booleans and ``None`` as they are (NaN and infinities ``None``), lists and objects cell by cell,
    dates and times ISO 8601, a duration in seconds, a decimal as an integer or float (a non-finite one ``None``),
    a UUID as text, bytes as UTF-8 text (undecodable bytes ``\\xNN``), an enum as its value. Any other type:
    ``TypeError``. The one conversion of the CLI's JSON output and the SQL results' cells."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: json_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [json_value(v) for v in value]
    if isinstance(value, (datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, datetime.timedelta):
        return value.total_seconds()
    if isinstance(value, decimal.Decimal):
        if not value.is_finite():
            return None
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).decode("utf-8", "backslashreplace")
    if hasattr(value, "tolist"):
        return json_value(value.tolist())
    if isinstance(value, enum.Enum):
        return json_value(value.value)
    raise TypeError(f"not JSON serializable: {type(value).__name__}")
