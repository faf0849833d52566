"""Types of the C scanner (_chrome_scan.c); see its docstrings."""

from typing import Any

from typing_extensions import Buffer

MODE_ALL: int
MODE_HEAD: int
MODE_TAIL: int

def scan(
    text: Buffer, start: int, end: int, mode: int, quoted: bool, side_index: int, /
) -> tuple[object, ...] | str: ...
# offsets, lengths: int32 arrays; rows: int64
def args_strings(text: Buffer, offsets: Any, lengths: Any, rows: Any, /) -> tuple[bytes, bytes]: ...
def args_contain(text: Buffer, offsets: Any, lengths: Any, rows: Any, needle: bytes, /) -> bool: ...
def object_tail(text: Buffer, at: int, /) -> int: ...
# the state after a chunk of JSON text, and where level limit + 1 opens (else -1)
def json_depth(
    data: Buffer, depth: int, in_string: bool, escaped: bool, limit: int, /
) -> tuple[int, bool, bool, int]: ...
