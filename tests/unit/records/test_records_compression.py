"""Compression codecs: round trips, the wire framings clients use, corrupt input."""

from __future__ import annotations

import gzip
import struct

import cramjam
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oncelog.errors import ErrorCode, KafkaError
from oncelog.records.batch import Compression
from oncelog.records.compression import (
    XERIAL_BLOCK_SIZE,
    XERIAL_HEADER,
    compress,
    decompress,
    snappy_compress,
)

CODECS = list(Compression)
TEXT = b"the quick brown fox jumps over the lazy dog. " * 50


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("data", [b"", b"x", TEXT, bytes(range(256)) * 300])
def test_round_trip(codec: Compression, data: bytes) -> None:
    packed = compress(codec, data)
    assert decompress(codec, packed) == data
    assert decompress(codec, bytearray(packed)) == data
    assert decompress(codec, memoryview(packed)) == data


@settings(max_examples=50, deadline=None)
@given(st.sampled_from(CODECS), st.binary(max_size=2000))
def test_round_trip_property(codec: Compression, data: bytes) -> None:
    assert decompress(codec, compress(codec, data)) == data


@pytest.mark.parametrize("codec", CODECS[1:])
def test_compressed_text_is_smaller(codec: Compression) -> None:
    assert len(compress(codec, TEXT)) < len(TEXT) // 4


def test_snappy_writes_xerial_blocks_of_32k() -> None:
    data = bytes(range(256)) * 520  # 133,120 bytes: five blocks
    packed = snappy_compress(data)
    assert packed.startswith(XERIAL_HEADER)
    pos, blocks = len(XERIAL_HEADER), []
    while pos < len(packed):
        (length,) = struct.unpack_from(">i", packed, pos)
        blocks.append(bytes(cramjam.snappy.decompress_raw(packed[pos + 4 : pos + 4 + length])))
        pos += 4 + length
    assert [len(b) for b in blocks] == [XERIAL_BLOCK_SIZE] * 4 + [len(data) - 4 * XERIAL_BLOCK_SIZE]
    assert b"".join(blocks) == data


def test_snappy_decodes_raw_blocks_as_librdkafka_sends_them() -> None:
    assert decompress(Compression.SNAPPY, bytes(cramjam.snappy.compress_raw(TEXT))) == TEXT


def test_snappy_ignores_xerial_version_fields() -> None:
    little_endian = b"\x82SNAPPY\x00" + struct.pack("<ii", 1, 1)
    packed = snappy_compress(TEXT)
    assert decompress(Compression.SNAPPY, little_endian + packed[16:]) == TEXT


def test_gzip_accepts_concatenated_members() -> None:
    assert decompress(Compression.GZIP, gzip.compress(b"ab") + gzip.compress(b"cd")) == b"abcd"


def test_lz4_uses_independent_blocks_and_no_content_checksum() -> None:
    packed = compress(Compression.LZ4, TEXT)
    assert packed[:4] == b"\x04\x22\x4d\x18"  # LZ4 frame magic
    flags = packed[4]
    assert flags & 0x20  # block independence (KIP-57)
    assert not flags & 0x04  # no content checksum


def _truncated_xerial() -> bytes:
    packed = snappy_compress(TEXT)
    return packed[:-3]


@pytest.mark.parametrize(
    ("codec", "data"),
    [
        (Compression.GZIP, b"not gzip at all"),
        (Compression.GZIP, gzip.compress(TEXT)[:-10]),
        (Compression.SNAPPY, b"\xff\xff\xff\xff\x0f garbage"),
        (Compression.SNAPPY, XERIAL_HEADER + b"\x00\x00"),
        (Compression.SNAPPY, XERIAL_HEADER + struct.pack(">i", 1000) + b"abc"),
        (Compression.SNAPPY, XERIAL_HEADER + struct.pack(">i", -5)),
        (Compression.LZ4, b"\x04\x22\x4d\x18 garbage"),
        (Compression.ZSTD, b"\x28\xb5\x2f\xfd garbage"),
    ],
    ids=["gzip", "gzip-cut", "snappy", "xerial-len", "xerial-long", "xerial-neg", "lz4", "zstd"],
)
def test_corrupt_input_is_corrupt_message(codec: Compression, data: bytes) -> None:
    with pytest.raises(KafkaError) as info:
        decompress(codec, data)
    assert info.value.code == ErrorCode.corrupt_message


def test_truncated_xerial_stream_is_corrupt_message() -> None:
    with pytest.raises(KafkaError) as info:
        decompress(Compression.SNAPPY, _truncated_xerial())
    assert info.value.code == ErrorCode.corrupt_message


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(CODECS[1:]), st.binary(max_size=300))
def test_garbage_never_crashes(codec: Compression, data: bytes) -> None:
    try:
        decompress(codec, data)
    except KafkaError as exc:
        assert exc.code == ErrorCode.corrupt_message


@pytest.mark.parametrize("codec", [5, 6, 7])
def test_unknown_codec(codec: int) -> None:
    for op in (compress, decompress):
        with pytest.raises(KafkaError) as info:
            op(codec, b"x")
        assert info.value.code == ErrorCode.unsupported_compression_type
