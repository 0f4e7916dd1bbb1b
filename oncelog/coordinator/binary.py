"""The one binary reader of the internal topics' key/value records.

``__consumer_offsets`` and ``__transaction_state`` records follow Kafka's versioned message
schemas: big-endian integers, classic encodings (int16-length strings, int32-length bytes
and arrays, -1 = null) and, in flexible versions, compact encodings (unsigned-varint length
+ 1, 0 = null) with tagged fields. ``BinaryReader`` reads both; every malformed input
raises the caller's corruption error (each codec names its own topic in the message).
The unsigned varint is ``oncelog.records.codec.decode_uvarint``, the one decoder of it.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

from oncelog.errors import KafkaError
from oncelog.records.codec import decode_uvarint

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


class BinaryReader:
    """Reads one record key or value from ``pos``; ``corrupt`` builds the error raised for
    malformed bytes (truncation, bad lengths, bad varints, invalid UTF-8)."""

    __slots__ = ("corrupt", "data", "pos")

    def __init__(
        self, data: bytes, corrupt: Callable[[str], KafkaError], pos: int = 0
    ) -> None:
        self.data = data
        self.corrupt = corrupt
        self.pos = pos

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise self.corrupt(f"truncated record: need {n} bytes at {self.pos}")
        chunk = self.data[self.pos : self.pos + n]
        self.pos += n
        return chunk

    def unpack(self, s: struct.Struct) -> tuple[int, ...]:
        return tuple(int(v) for v in s.unpack(self.take(s.size)))

    def int8(self) -> int:
        return self.unpack(_I8)[0]

    def int16(self) -> int:
        return self.unpack(_I16)[0]

    def int32(self) -> int:
        return self.unpack(_I32)[0]

    def int64(self) -> int:
        return self.unpack(_I64)[0]

    def uvarint(self) -> int:
        try:
            value, self.pos = decode_uvarint(self.data, self.pos)
        except (KafkaError, IndexError, ValueError):
            raise self.corrupt("bad varint") from None
        return value

    def length(self, flexible: bool, classic: struct.Struct = _I16) -> int:
        """A string/bytes/array length: compact (uvarint - 1) or classic; -1 = null."""
        return self.uvarint() - 1 if flexible else self.unpack(classic)[0]

    def nullable_string(self, flexible: bool = False) -> str | None:
        length = self.length(flexible)
        if length == -1:
            return None
        if length < 0:
            raise self.corrupt(f"negative string length {length}")
        try:
            return self.take(length).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise self.corrupt(f"string is not UTF-8: {exc}") from None

    def string(self, flexible: bool = False) -> str:
        value = self.nullable_string(flexible)
        if value is None:
            raise self.corrupt("null where a string is required")
        return value

    def bytes_(self) -> bytes:
        """Classic bytes (int32 length); null reads as empty."""
        length = self.int32()
        if length == -1:
            return b""
        return bytes(self.take(length))

    def array_length(self, flexible: bool) -> int:
        """An array's element count (compact or int32); -1 = null."""
        return self.length(flexible, _I32)

    def tagged_fields(self) -> dict[int, bytes]:
        """The tagged fields of a flexible struct, raw (unknown tags are kept, not read)."""
        tags: dict[int, bytes] = {}
        for _ in range(self.uvarint()):
            tag = self.uvarint()
            tags[tag] = self.take(self.uvarint())
        return tags

    def finish(self) -> None:
        if self.pos != len(self.data):
            raise self.corrupt(f"{len(self.data) - self.pos} trailing bytes in record")
