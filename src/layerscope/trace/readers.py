"""Trace readers, registered by format name, chosen by suffix or by sniffing the content.

    tables = read_trace("trace.json.gz")          # Chrome/Kineto JSON
    tables = read_trace("sim.pftrace")            # Perfetto protobuf
    tables = read_trace("x.bin", fmt="perfetto")  # explicit format

Limits every reader applies to what a file may ask of this machine (a trace over them is refused
with a :class:`TraceError` naming the file, never read into a traceback or a full disk):

* gzip input inflates to at most :func:`inflate_budget` bytes: ``LAYERSCOPE_MAX_TRACE_MB``
  (default 4096 MiB: ~10x what the in-memory JSON path holds, ~12M Kineto events), and beyond
  the first 64 MiB at most ``LAYERSCOPE_MAX_GZIP_RATIO`` (default 100) times the file's size
  on disk. Trace JSON compresses 7-21:1 (tests/data/traces); 100:1 is Apache POI's bound for
  zip bombs (``ZipSecureFile``), and a gzip of whitespace inflates 1000:1.
* JSON nests at most :data:`MAX_JSON_DEPTH` levels and Perfetto debug annotations at most
  :data:`MAX_PROTO_DEPTH`: parsers recurse per level.
"""

from __future__ import annotations

import gzip
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from layerscope.errors import TraceError
from layerscope.registry import Registry
from layerscope.trace.tables import TraceTables
from layerscope.units import note_input

#: Arrays and objects nested deeper than this refuse a JSON trace (Kineto's args nest a few
#: levels; DuckDB's JSON reader and orjson recurse per level, orjson stops at 1024).
MAX_JSON_DEPTH = 512
#: Nested DebugAnnotations (dicts, arrays) deeper than this refuse a Perfetto trace: protobuf's
#: own parsers stop at 100 nested messages.
MAX_PROTO_DEPTH = 100
DEFAULT_MAX_TRACE_MB = 4096
DEFAULT_MAX_GZIP_RATIO = 100
#: Inflating this much is always allowed, whatever the ratio (small files of repeated events).
RATIO_FLOOR_BYTES = 64 << 20


def _env_int(name: str, default: int, path: Path) -> int:
    text = os.environ.get(name)
    if text is None or not text.strip():
        return default
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise TraceError(f"{str(path)!r}: cannot apply {name}={text!r}: expected a whole number of at least 1")
    return value


def inflate_budget(path: Path) -> tuple[int, str]:
    """Bytes a gzip trace at ``path`` may inflate to, and why that many (for the error)."""
    limit = _env_int("LAYERSCOPE_MAX_TRACE_MB", DEFAULT_MAX_TRACE_MB, path) << 20
    ratio = _env_int("LAYERSCOPE_MAX_GZIP_RATIO", DEFAULT_MAX_GZIP_RATIO, path)
    try:
        on_disk = path.stat().st_size
    except OSError:
        on_disk = 0
    by_ratio = max(RATIO_FLOOR_BYTES, ratio * on_disk)
    if by_ratio < limit:
        return by_ratio, (f"{ratio}x its {on_disk} bytes on disk, a decompression bomb's ratio "
                          "(LAYERSCOPE_MAX_GZIP_RATIO raises it)")
    return limit, f"the {limit >> 20} MiB limit (LAYERSCOPE_MAX_TRACE_MB raises it)"


def too_big(path: Path, budget: tuple[int, str]) -> TraceError:
    """The error for a gzip trace that inflates past its budget."""
    return TraceError(f"{str(path)!r}: gzip stream inflates to more than {budget[0]} bytes, {budget[1]}")


@dataclass(frozen=True)
class ReaderInfo:
    """A registered reader: its name, the suffixes it claims and the function that reads."""

    name: str
    suffixes: tuple[str, ...]
    read: Callable[[Path], TraceTables]


#: Trace readers by format name, in registration order (the order suffixes are matched in).
READERS: Registry[ReaderInfo] = Registry("trace format", TraceError)


def register_reader(name: str, suffixes: tuple[str, ...], read: Callable[[Path], TraceTables]) -> None:
    """Register ``read`` under ``name`` for files ending in any of ``suffixes``."""
    READERS.add(name, ReaderInfo(name, suffixes, read))


def _read_chrome(path: Path) -> TraceTables:
    from layerscope.trace.chrome_reader import read_chrome_json

    return read_chrome_json(path)


def _read_perfetto(path: Path) -> TraceTables:
    from layerscope.trace.perfetto_reader import read_perfetto

    return read_perfetto(path)


register_reader("chrome_json", (".json", ".json.gz", ".trace.json", ".pt.trace.json"), _read_chrome)
register_reader("perfetto", (".pftrace", ".perfetto-trace", ".pb", ".pftrace.gz"), _read_perfetto)


def sniff_format(path: Path) -> str | None:
    """Guess the format from the first bytes: JSON starts with ``{``/``[``; else protobuf."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(64)
            if head[:2] == b"\x1f\x8b":
                handle.seek(0)
                try:
                    with gzip.GzipFile(fileobj=handle) as inner:
                        head = inner.read(64)
                except (OSError, EOFError):
                    return "chrome_json"
    except OSError as exc:
        raise TraceError(f"cannot open trace {str(path)!r}: {exc.strerror}") from None
    stripped = head.lstrip(b" \t\r\n\xef\xbb\xbf")
    if stripped[:1] in (b"{", b"["):
        return "chrome_json"
    if stripped[:1] == b"\x0a":
        # field 1 (TracePacket), wire type 2: a Perfetto Trace message
        return "perfetto"
    return None


def format_for(path: Path) -> str:
    """The reader name for ``path``: by suffix, then by content."""
    name = path.name.lower()
    for info in READERS.values():
        if any(name.endswith(s) for s in info.suffixes):
            return info.name
    sniffed = sniff_format(path)
    if sniffed is None:
        raise TraceError(f"{str(path)!r}: unknown trace format; known: {', '.join(READERS)} "
                         f"(suffixes {', '.join(s for i in READERS.values() for s in i.suffixes)})")
    return sniffed


def read_trace(path: str | os.PathLike[str], fmt: str | None = None) -> TraceTables:
    """Read any supported trace into :class:`TraceTables`. ``fmt`` forces a reader by name."""
    source = Path(path)
    if not source.is_file():
        raise TraceError(f"trace {str(source)!r} does not exist or is not a file")
    note_input(source)
    return READERS.lookup(fmt or format_for(source)).read(source)
