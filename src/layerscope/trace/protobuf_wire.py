"""A tiny protobuf wire-format encoder and decoder (no protobuf dependency).

Wire format: https://protobuf.dev/programming-guides/encoding/ . A field is a key
``(field_number << 3) | wire_type`` (varint) and a value: wire type 0 varint, 1 fixed 64 bits,
2 length-delimited bytes, 5 fixed 32 bits. Negative int64 values are varints of their two's
complement (10 bytes).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

from layerscope.errors import TraceError

VARINT, FIXED64, LEN, FIXED32 = 0, 1, 2, 5

_pack_d = struct.Struct("<d").pack
_pack_q = struct.Struct("<Q").pack
_unpack_d = struct.Struct("<d").unpack_from
_unpack_q = struct.Struct("<Q").unpack_from
_unpack_i = struct.Struct("<I").unpack_from

#: ``SMALL_VARINTS[x] == varint(x)`` for ``x < 2**16`` (a list lookup is the fastest encoder).
SMALL_VARINTS = (
    [bytes([i]) for i in range(128)]
    + [bytes([(i & 0x7F) | 0x80, i >> 7]) for i in range(128, 1 << 14)]
    + [bytes([(i & 0x7F) | 0x80, ((i >> 7) & 0x7F) | 0x80, i >> 14]) for i in range(1 << 14, 1 << 16)]
)
_SMALL = SMALL_VARINTS


def varint(value: int) -> bytes:
    """Unsigned LEB128; negative values as 64-bit two's complement."""
    if 0 <= value < 65536:
        return _SMALL[value]
    if value < 0:
        value &= (1 << 64) - 1
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def key(field: int, wire_type: int) -> bytes:
    return varint((field << 3) | wire_type)


def f_varint(field: int, value: int) -> bytes:
    return key(field, VARINT) + varint(value)


def f_bytes(field: int, value: bytes) -> bytes:
    return key(field, LEN) + varint(len(value)) + value


def f_string(field: int, value: str) -> bytes:
    return f_bytes(field, value.encode("utf-8"))


def f_double(field: int, value: float) -> bytes:
    return key(field, FIXED64) + _pack_d(value)


def f_fixed64(field: int, value: int) -> bytes:
    return key(field, FIXED64) + _pack_q(value)


def read_varint(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(buf):
            raise TraceError("protobuf: truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise TraceError("protobuf: varint longer than 10 bytes")


def iter_fields(buf: bytes | memoryview) -> Iterator[tuple[int, int, int | bytes]]:
    """Yield ``(field_number, wire_type, value)``; LEN values as bytes, fixed64 as unsigned int."""
    pos, end = 0, len(buf)
    while pos < end:
        field, wt, v, pos = next_field(buf, pos, end)
        yield field, wt, v


def next_field(buf: bytes | memoryview, pos: int, end: int) -> tuple[int, int, int | bytes, int]:
    """The field at ``pos``: ``(field_number, wire_type, value, next position)``."""
    k, pos = read_varint(buf, pos)
    field, wt = k >> 3, k & 7
    if wt == VARINT:
        v, pos = read_varint(buf, pos)
        return field, wt, v, pos
    if wt == FIXED64:
        if pos + 8 > end:
            raise TraceError("protobuf: truncated fixed64")
        return field, wt, _unpack_q(buf, pos)[0], pos + 8
    if wt == LEN:
        n, pos = read_varint(buf, pos)
        if pos + n > end:
            raise TraceError("protobuf: truncated length-delimited field")
        return field, wt, bytes(buf[pos:pos + n]), pos + n
    if wt == FIXED32:
        if pos + 4 > end:
            raise TraceError("protobuf: truncated fixed32")
        return field, wt, _unpack_i(buf, pos)[0], pos + 4
    raise TraceError(f"protobuf: unsupported wire type {wt} at field {field}")


def decode_fields(buf: bytes) -> list[tuple[int, int, int | bytes]]:
    """Every field of one message, as :func:`iter_fields` yields them, in one tight loop.

    Varints are decoded inline (no call per key or value: the decoder's cost is the Python
    interpreter's per-operation overhead). Raises :class:`TraceError` on truncation.
    """
    out: list[tuple[int, int, int | bytes]] = []
    append = out.append
    pos, end = 0, len(buf)
    try:
        while pos < end:
            k = buf[pos]
            pos += 1
            if k >= 0x80:
                k &= 0x7F
                shift = 7
                while True:
                    b = buf[pos]
                    pos += 1
                    k |= (b & 0x7F) << shift
                    if b < 0x80:
                        break
                    shift += 7
                    if shift > 63:
                        raise TraceError("protobuf: varint longer than 10 bytes")
            wt = k & 7
            if wt == 0 or wt == 2:
                v = buf[pos]
                pos += 1
                if v >= 0x80:
                    v &= 0x7F
                    shift = 7
                    while True:
                        b = buf[pos]
                        pos += 1
                        v |= (b & 0x7F) << shift
                        if b < 0x80:
                            break
                        shift += 7
                        if shift > 63:
                            raise TraceError("protobuf: varint longer than 10 bytes")
                if wt == 0:
                    append((k >> 3, 0, v))
                else:
                    stop = pos + v
                    if stop > end:
                        raise TraceError("protobuf: truncated length-delimited field")
                    append((k >> 3, 2, buf[pos:stop]))
                    pos = stop
            elif wt == 1:
                if pos + 8 > end:
                    raise TraceError("protobuf: truncated fixed64")
                append((k >> 3, 1, _unpack_q(buf, pos)[0]))
                pos += 8
            elif wt == 5:
                if pos + 4 > end:
                    raise TraceError("protobuf: truncated fixed32")
                append((k >> 3, 5, _unpack_i(buf, pos)[0]))
                pos += 4
            else:
                raise TraceError(f"protobuf: unsupported wire type {wt} at field {k >> 3}")
    except IndexError:
        raise TraceError("protobuf: truncated varint") from None
    return out


def as_double(fixed64: int) -> float:
    return float(_unpack_d(_pack_q(fixed64), 0)[0])


def as_signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value
