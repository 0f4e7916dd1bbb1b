"""Kafka's varints for records: zigzag-encoded (signed) and unsigned, in and out.

Decoding is the one decoder's (``oncelog.protocol.varint.read_uvarint``), with the record
codec's error policy: a bad varint is ``KafkaError(CORRUPT_MESSAGE)``. ``oncelog.records
.codec`` re-exports all of these.
"""

from __future__ import annotations

from oncelog.errors import ErrorCode, KafkaError
from oncelog.protocol.varint import VarintError, read_uvarint

__all__ = [
    "corrupt_varint",
    "decode_uvarint",
    "decode_uvarlong",
    "decode_varint",
    "decode_varlong",
    "encode_uvarint",
    "encode_uvarlong",
    "encode_varint",
    "encode_varlong",
    "varlong_size",
    "zigzag",
]

Buffer = bytes | bytearray | memoryview

_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


# --------------------------------------------------------------------------- varints


def encode_uvarlong(value: int) -> bytes:
    """Unsigned LEB128 of a value in [0, 2**64)."""
    if not 0 <= value < 2**64:
        raise ValueError(f"unsigned varlong out of range: {value}")
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def encode_uvarint(value: int) -> bytes:
    """Unsigned varint of a value in [0, 2**32) (Kafka's ``writeUnsignedVarint``)."""
    if not 0 <= value < 2**32:
        raise ValueError(f"unsigned varint out of range: {value}")
    return encode_uvarlong(value)


def encode_varint(value: int) -> bytes:
    """Zigzag varint of an int32 (Kafka's ``writeVarint``)."""
    if not _INT32_MIN <= value <= _INT32_MAX:
        raise ValueError(f"varint out of int32 range: {value}")
    return encode_uvarlong(((value << 1) ^ (value >> 31)) & 0xFFFFFFFF)


def encode_varlong(value: int) -> bytes:
    """Zigzag varlong of an int64 (Kafka's ``writeVarlong``)."""
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise ValueError(f"varlong out of int64 range: {value}")
    return encode_uvarlong(((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF)


def varlong_size(value: int) -> int:
    """Bytes that ``encode_varlong(value)`` (or ``encode_varint``) takes."""
    z = ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF
    size = 1
    while z > 0x7F:
        z >>= 7
        size += 1
    return size


def corrupt_varint(exc: VarintError) -> KafkaError:
    """The record codec's error for a varint the one decoder refused."""
    return KafkaError(ErrorCode.corrupt_message, str(exc))


def decode_uvarint(buf: Buffer, pos: int = 0) -> tuple[int, int]:
    """Read an unsigned varint (at most 5 bytes); return (value, position after it)."""
    try:  # the one decoder, called directly: this runs several times per record
        value, pos = read_uvarint(buf, pos, len(buf), 5)
    except VarintError as exc:
        raise corrupt_varint(exc) from None
    if value >= 2**32:
        raise KafkaError(ErrorCode.corrupt_message, "unsigned varint exceeds 32 bits")
    return value, pos


def decode_uvarlong(buf: Buffer, pos: int = 0) -> tuple[int, int]:
    """Read an unsigned varlong (at most 10 bytes); return (value, position after it)."""
    try:
        value, pos = read_uvarint(buf, pos, len(buf), 10)
    except VarintError as exc:
        raise corrupt_varint(exc) from None
    if value >= 2**64:
        raise KafkaError(ErrorCode.corrupt_message, "unsigned varlong exceeds 64 bits")
    return value, pos


def decode_varint(buf: Buffer, pos: int = 0) -> tuple[int, int]:
    """Read a zigzag int32 varint; return (value, position after it)."""
    z, pos = decode_uvarint(buf, pos)
    return (z >> 1) ^ -(z & 1), pos


def decode_varlong(buf: Buffer, pos: int = 0) -> tuple[int, int]:
    """Read a zigzag int64 varlong; return (value, position after it)."""
    z, pos = decode_uvarlong(buf, pos)
    return (z >> 1) ^ -(z & 1), pos


ZIGZAG_TABLE_SIZE = 1 << 14
# zigzag(i) for the small non-negative values records are made of (lengths, deltas)
ZIGZAG_TABLE = tuple(encode_uvarlong(i << 1) for i in range(ZIGZAG_TABLE_SIZE))


def zigzag(value: int) -> bytes:
    """``encode_varlong(value)``, from a table for small non-negative values."""
    if 0 <= value < ZIGZAG_TABLE_SIZE:
        return ZIGZAG_TABLE[value]
    return encode_varlong(value)
