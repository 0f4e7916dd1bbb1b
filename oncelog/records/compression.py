"""Compression codecs of RecordBatch v2 bodies (everything after the 61-byte header).

Codec ids are the batch attribute bits 0-2 (``Compression``): 0 none, 1 gzip, 2 snappy,
3 lz4, 4 zstd. All work goes through ``cramjam``; any failure to decode is reported as
``KafkaError(CORRUPT_MESSAGE)``, an unknown codec id as ``UNSUPPORTED_COMPRESSION_TYPE``.

Wire formats, as Kafka clients use them:
- gzip: an RFC 1952 gzip stream (several concatenated members are accepted on decode).
- snappy: the Java client writes the *xerial* block framing (a 16-byte header
  ``\\x82SNAPPY\\x00`` + version + compat, then blocks of int32 length + raw snappy block);
  librdkafka and some other clients send a single raw snappy block. ``decompress`` accepts
  both (it looks for the xerial magic). ``compress`` writes xerial framing with 32 KiB input
  blocks, like the Java client, which every client can read.
- lz4: the LZ4 frame format with independent blocks and no content checksum (KIP-57).
- zstd: a zstd frame (level 3, Kafka's default).
"""

from __future__ import annotations

import struct

import cramjam

from oncelog.errors import ErrorCode, KafkaError
from oncelog.records.batch import Compression

__all__ = [
    "XERIAL_BLOCK_SIZE",
    "XERIAL_HEADER",
    "compress",
    "decompress",
    "snappy_compress",
    "snappy_decompress",
]

Buffer = bytes | bytearray | memoryview

# marker byte, "SNAPPY", NUL, version 1, minimum compatible version 1
XERIAL_MAGIC = b"\x82SNAPPY\x00"
XERIAL_HEADER = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
XERIAL_BLOCK_SIZE = 32 * 1024
_INT32 = struct.Struct(">i")

GZIP_LEVEL = 6
LZ4_LEVEL = 9
ZSTD_LEVEL = 3


def snappy_compress(data: Buffer) -> bytes:
    """Snappy in xerial block framing (what the Java client sends)."""
    view = memoryview(data)
    parts = [XERIAL_HEADER]
    for start in range(0, len(view), XERIAL_BLOCK_SIZE):
        block = bytes(cramjam.snappy.compress_raw(view[start : start + XERIAL_BLOCK_SIZE]))
        parts.append(_INT32.pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def snappy_decompress(data: Buffer) -> bytes:
    """Decode xerial-framed or raw snappy. Raises cramjam/ValueError errors on bad input."""
    view = memoryview(data)
    if len(view) < len(XERIAL_HEADER) or view[:8] != XERIAL_MAGIC:
        return bytes(cramjam.snappy.decompress_raw(view))
    # The version/compat fields are not checked: some producers write them little-endian.
    out: list[bytes] = []
    pos = len(XERIAL_HEADER)
    end = len(view)
    while pos < end:
        if pos + 4 > end:
            raise ValueError("truncated xerial block length")
        (length,) = _INT32.unpack_from(view, pos)
        pos += 4
        if length < 0 or pos + length > end:
            raise ValueError(f"bad xerial block length {length}")
        out.append(bytes(cramjam.snappy.decompress_raw(view[pos : pos + length])))
        pos += length
    return b"".join(out)


def _lz4_compress(data: Buffer) -> bytes:
    compressor = cramjam.lz4.Compressor(level=LZ4_LEVEL, content_checksum=False, block_linked=False)
    compressor.compress(data if isinstance(data, bytes) else bytes(data))
    return bytes(compressor.finish())


def compress(codec: int, data: Buffer) -> bytes:
    """Compress a batch body with ``codec``; codec 0 returns the bytes unchanged."""
    if codec == Compression.NONE:
        return bytes(data)
    if codec == Compression.GZIP:
        return bytes(cramjam.gzip.compress(data, level=GZIP_LEVEL))
    if codec == Compression.SNAPPY:
        return snappy_compress(data)
    if codec == Compression.LZ4:
        return _lz4_compress(data)
    if codec == Compression.ZSTD:
        return bytes(cramjam.zstd.compress(data, level=ZSTD_LEVEL))
    raise KafkaError(ErrorCode.unsupported_compression_type, f"unknown compression codec {codec}")


def decompress(codec: int, data: Buffer) -> bytes:
    """Decompress a batch body; corrupt input raises KafkaError(CORRUPT_MESSAGE)."""
    try:
        if codec == Compression.NONE:
            return bytes(data)
        if codec == Compression.GZIP:
            return bytes(cramjam.gzip.decompress(data))
        if codec == Compression.SNAPPY:
            return snappy_decompress(data)
        if codec == Compression.LZ4:
            return bytes(cramjam.lz4.decompress(data))
        if codec == Compression.ZSTD:
            return bytes(cramjam.zstd.decompress(data))
    except (cramjam.DecompressionError, ValueError) as exc:
        name = Compression(codec).name.lower()
        raise KafkaError(ErrorCode.corrupt_message, f"cannot decompress {name}: {exc}") from exc
    raise KafkaError(ErrorCode.unsupported_compression_type, f"unknown compression codec {codec}")
