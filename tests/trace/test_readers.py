"""The trace-reader registry: one Registry, one lookup, one error message."""

from __future__ import annotations

from pathlib import Path

import pytest

from layerscope.errors import TraceError
from layerscope.registry import Registry
from layerscope.trace.readers import READERS, read_trace, register_reader


def test_readers_are_a_registry() -> None:
    assert isinstance(READERS, Registry)
    assert list(READERS) == ["chrome_json", "perfetto"]
    assert ".pftrace" in READERS.lookup("perfetto").suffixes


def test_an_unknown_format_name_lists_the_known_ones(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_text("[]")
    with pytest.raises(TraceError, match=r"^unknown trace format 'bogus'; known: chrome_json, perfetto$"):
        read_trace(path, fmt="bogus")


def test_a_format_is_registered_once() -> None:
    with pytest.raises(ValueError, match="registered twice"):
        register_reader("perfetto", (".x",), READERS["perfetto"].read)
