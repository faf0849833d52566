"""Trace readers, registered by format name, chosen by suffix or by sniffing the content.

    tables = read_trace("trace.json.gz")          # Chrome/Kineto JSON
    tables = read_trace("sim.pftrace")            # Perfetto protobuf
    tables = read_trace("x.bin", fmt="perfetto")  # explicit format
"""

from __future__ import annotations

import gzip
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from layerscope.errors import TraceError
from layerscope.trace.tables import TraceTables


@dataclass(frozen=True)
class ReaderInfo:
    """A registered reader: its name, the suffixes it claims and the function that reads."""

    name: str
    suffixes: tuple[str, ...]
    read: Callable[[Path], TraceTables]


READERS: dict[str, ReaderInfo] = {}


def register_reader(name: str, suffixes: tuple[str, ...], read: Callable[[Path], TraceTables]) -> None:
    """Register ``read`` under ``name`` for files ending in any of ``suffixes``."""
    READERS[name] = ReaderInfo(name, suffixes, read)


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
    name = fmt or format_for(source)
    if name not in READERS:
        raise TraceError(f"unknown trace format {name!r}; known: {', '.join(READERS)}")
    return READERS[name].read(source)
