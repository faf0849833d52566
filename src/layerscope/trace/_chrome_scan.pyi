"""Types of the C scanner (_chrome_scan.c); see its docstrings."""

from typing import Any

from typing_extensions import Buffer

VIEW_BYTES: int

def scan(
    text: Buffer, start: int, end: int, mode: int, quoted: bool, side_index: int, /
) -> tuple[object, ...] | str: ...
def join_args(text: Buffer, offsets: Any, lengths: Any, rows: Any, /) -> bytes: ...  # int32, int32, int64 arrays
def object_tail(text: Buffer, at: int, /) -> int: ...
