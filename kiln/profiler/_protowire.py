"""The protocol-buffer wire format, by hand (no ``protobuf`` dependency).

Enough to write and read the messages the profiler needs (XSpace, pprof's Profile):
varints, zigzag-free signed ints (``int64`` as two's complement in 10 bytes),
length-delimited fields (strings, bytes, nested messages, packed repeated varints) and
64-bit doubles. A message is built as a ``bytearray`` by appending fields in any order;
readers get ``(field number, wire type, value)`` triples.

What it must not hold: any particular schema.
"""
from __future__ import annotations

import struct

VARINT, I64, LEN, I32 = 0, 1, 2, 5
_MASK64 = (1 << 64) - 1


def varint(n: int) -> bytes:
    """Unsigned LEB128 of ``n`` (negative ``n``: its 64-bit two's complement, as int64)."""
    n &= _MASK64
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _key(field: int, wire: int) -> bytes:
    return varint((field << 3) | wire)


def put_varint(buf: bytearray, field: int, n: int) -> None:
    """``int32/int64/uint64/bool/enum`` field (omitted by callers when it is the default)."""
    buf += _key(field, VARINT)
    buf += varint(n)


def put_bytes(buf: bytearray, field: int, data) -> None:
    """Length-delimited field: ``bytes``, a nested message, or ``str`` (UTF-8)."""
    if isinstance(data, str):
        data = data.encode("utf-8")
    buf += _key(field, LEN)
    buf += varint(len(data))
    buf += data


def put_double(buf: bytearray, field: int, x: float) -> None:
    buf += _key(field, I64)
    buf += struct.pack("<d", x)


def put_packed(buf: bytearray, field: int, values) -> None:
    """Packed repeated varints (proto3's encoding of ``repeated int64/uint64``)."""
    body = bytearray()
    for v in values:
        body += varint(v)
    put_bytes(buf, field, bytes(body))


def read_varint(data, i: int) -> tuple[int, int]:
    """The varint at ``data[i:]`` and the position after it."""
    result = shift = 0
    while True:
        if i >= len(data):
            raise ValueError("truncated varint")
        c = data[i]
        i += 1
        result |= (c & 0x7F) << shift
        if c < 0x80:
            return result, i
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def as_int64(n: int) -> int:
    """A decoded varint as a signed 64-bit integer."""
    return n - (1 << 64) if n >= 1 << 63 else n


def fields(data) -> list[tuple[int, int, object]]:
    """``(field number, wire type, value)`` of each field of a message, in order: ints
    for varints, ``bytes`` for length-delimited, 8/4 raw bytes for fixed-width."""
    out = []
    i, n = 0, len(data)
    while i < n:
        key, i = read_varint(data, i)
        field, wire = key >> 3, key & 7
        if wire == VARINT:
            v, i = read_varint(data, i)
        elif wire == LEN:
            ln, i = read_varint(data, i)
            if i + ln > n:
                raise ValueError("truncated length-delimited field")
            v = bytes(data[i:i + ln])
            i += ln
        elif wire == I64:
            v = bytes(data[i:i + 8])
            i += 8
        elif wire == I32:
            v = bytes(data[i:i + 4])
            i += 4
        else:
            raise ValueError(f"unsupported wire type {wire}")
        out.append((field, wire, v))
    return out


def unpack_varints(data: bytes) -> list[int]:
    """The values of a packed repeated varint field."""
    out = []
    i = 0
    while i < len(data):
        v, i = read_varint(data, i)
        out.append(v)
    return out


def as_double(raw: bytes) -> float:
    return struct.unpack("<d", raw)[0]
