"""The one unsigned-varint decoder (LEB128: 7 bits a byte, low bits first, the high bit says
another byte follows), as Kafka's ``ByteUtils.readUnsignedVarint``/``readUnsignedVarlong``.

Every reader of varints uses it: the record codec (``records.codec``: zigzag varints and
varlongs of records), the request header parser (``protocol.codec``), the request skimmer
(``protocol.skim``, which bounds the read by the end of the request), the client's response
reader (``client.wire``) and, through the record codec, the internal topics' readers. It is
a leaf with no error policy of its own: it raises ``VarintError`` and each caller turns
that into its layer's error (CORRUPT_MESSAGE for records, INVALID_REQUEST for requests).
The encoders live with the record codec (``records.codec.encode_uvarint`` and friends).
"""

from __future__ import annotations

__all__ = ["VarintError", "read_uvarint"]


class VarintError(ValueError):
    """A varint that ends before ``end`` (``truncated``) or runs past its byte limit."""

    def __init__(self, message: str, *, truncated: bool) -> None:
        super().__init__(message)
        self.truncated = truncated


def read_uvarint(
    buf: bytes | bytearray | memoryview, pos: int, end: int, max_bytes: int = 5
) -> tuple[int, int]:
    """Read an unsigned varint of at most ``max_bytes`` bytes (5 for Kafka's varint, 10 for
    its varlong) from ``buf[pos:end]``; return (value, position after it). The value is not
    range-checked (5 bytes can carry 35 bits): callers that need 32 or 64 bits check it."""
    result = 0
    shift = 0
    for _ in range(max_bytes):
        if pos >= end:
            raise VarintError("truncated varint", truncated=True)
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7
    raise VarintError(f"varint longer than {max_bytes} bytes", truncated=False)
