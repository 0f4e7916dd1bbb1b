"""validate_batches: every check with its Kafka error code; truncation; fuzz. assign_offsets."""

from __future__ import annotations

import struct
from collections.abc import Callable

import pytest
from aiokafka.record.default_records import DefaultRecordBatch as AioBatch
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch as KafkaPythonBatch

from oncelog.errors import ErrorCode, KafkaError
from oncelog.records.batch import (
    ATTR_TIMESTAMP_TYPE,
    TimestampType,
    parse_header,
)
from oncelog.records.codec import RecordInput, decode_batch, encode_batch, iter_records
from oncelog.records.control import ControlType, encode_marker_batch
from oncelog.records.validate import assign_offsets, batch_crc, validate_batches

MAX = 1 << 20
RECORDS = [RecordInput(b"k1", b"v1", [("h", b"x")], 1_000), RecordInput(None, b"v2", (), 1_005)]
GOOD = encode_batch(RECORDS)


def fix_crc(data: bytearray) -> bytes:
    data[17:21] = batch_crc(data, 0, len(data)).to_bytes(4, "big")
    return bytes(data)


def patched(fmt: str, offset: int, value: int, *, recrc: bool = True) -> bytes:
    data = bytearray(GOOD)
    struct.pack_into(fmt, data, offset, value)
    return fix_crc(data) if recrc else bytes(data)


def code_of(data: bytes | None, **kwargs: bool) -> ErrorCode:
    with pytest.raises(KafkaError) as info:
        validate_batches(data, max_batch_bytes=MAX, **kwargs)
    return info.value.code


def test_good_batch_returns_its_header() -> None:
    (header,) = validate_batches(GOOD, max_batch_bytes=MAX)
    assert header == parse_header(GOOD)
    assert header.records_count == 2 and header.size == len(GOOD)


@pytest.mark.parametrize("kind", [bytes, bytearray, memoryview])
def test_accepts_any_buffer(kind: Callable[[bytes], bytes | bytearray | memoryview]) -> None:
    assert len(validate_batches(kind(GOOD * 2), max_batch_bytes=MAX)) == 2


CORRUPT = ErrorCode.corrupt_message
INVALID = ErrorCode.invalid_record

ERROR_TABLE: list[tuple[str, bytes | None, ErrorCode]] = [
    ("none", None, CORRUPT),
    ("empty", b"", CORRUPT),
    ("shorter than the magic byte", GOOD[:16], CORRUPT),
    ("magic 0", patched(">b", 16, 0, recrc=False), ErrorCode.unsupported_for_message_format),
    ("magic 1", patched(">b", 16, 1, recrc=False), ErrorCode.unsupported_for_message_format),
    ("magic 3", patched(">b", 16, 3), CORRUPT),
    ("magic -1", patched(">b", 16, -1), CORRUPT),
    ("header cut after the magic", GOOD[:40], CORRUPT),
    ("batch length below the header", patched(">i", 8, 48), CORRUPT),
    ("negative batch length", patched(">i", 8, -1), CORRUPT),
    ("batch length past the end", patched(">i", 8, len(GOOD) - 12 + 1), CORRUPT),
    ("partial last batch", GOOD + GOOD[:-1], CORRUPT),
    ("partial last header", GOOD + GOOD[:30], CORRUPT),
    ("a few stray bytes after a batch", GOOD + b"\x00" * 5, CORRUPT),
    ("crc field flipped", patched(">I", 17, parse_header(GOOD).crc ^ 1, recrc=False), CORRUPT),
    ("body byte flipped", GOOD[:-1] + bytes([GOOD[-1] ^ 0x40]), CORRUPT),
    ("attributes changed without a new crc", patched(">h", 21, 1, recrc=False), CORRUPT),
    ("codec 5", patched(">h", 21, 5), ErrorCode.unsupported_compression_type),
    ("codec 7", patched(">h", 21, 7), ErrorCode.unsupported_compression_type),
    ("records count 0", patched(">i", 57, 0), INVALID),
    ("records count negative", patched(">i", 57, -3), INVALID),
    ("records count above last offset delta", patched(">i", 57, 3), INVALID),
    ("last offset delta off", patched(">i", 23, 0), INVALID),
    ("control batch from a client", patched(">h", 21, 0x20), INVALID),
    (
        "producer id without a sequence",
        fix_crc(bytearray(encode_batch(RECORDS, producer_id=5, producer_epoch=0))),
        INVALID,
    ),
    ("transactional without a producer id", patched(">h", 21, 0x10), INVALID),
    ("second batch bad", GOOD + patched(">i", 57, 0), INVALID),
]


@pytest.mark.parametrize(
    ("data", "code"), [(d, c) for _, d, c in ERROR_TABLE], ids=[n for n, _, _ in ERROR_TABLE]
)
def test_error_table(data: bytes | None, code: ErrorCode) -> None:
    assert code_of(data) == code


def test_message_too_large_is_checked_on_the_whole_batch_size() -> None:
    assert validate_batches(GOOD, max_batch_bytes=len(GOOD))
    with pytest.raises(KafkaError) as info:
        validate_batches(GOOD, max_batch_bytes=len(GOOD) - 1)
    assert info.value.code == ErrorCode.message_too_large


def test_size_is_checked_before_crc_as_in_kafka() -> None:
    bad_crc = patched(">I", 17, 0, recrc=False)
    with pytest.raises(KafkaError) as info:
        validate_batches(bad_crc, max_batch_bytes=10)
    assert info.value.code == ErrorCode.message_too_large


def test_control_batches_pass_when_allowed() -> None:
    marker = encode_marker_batch(ControlType.COMMIT, 7, 1, 0, 123)
    assert code_of(marker) == INVALID
    (header,) = validate_batches(marker, max_batch_bytes=MAX, allow_control=True)
    assert header.is_control and header.is_transactional and header.base_sequence == -1


def test_idempotent_and_transactional_client_batches_pass() -> None:
    data = encode_batch(
        RECORDS, producer_id=5, producer_epoch=0, base_sequence=0, transactional=True
    )
    (header,) = validate_batches(data, max_batch_bytes=MAX)
    assert header.has_producer_id and header.last_sequence == 1


def test_every_truncation_is_corrupt_message() -> None:
    two = GOOD + encode_batch(RECORDS, compression=1)
    for n in range(len(two)):
        if n == len(GOOD):
            assert len(validate_batches(two[:n], max_batch_bytes=MAX)) == 1
            continue
        with pytest.raises(KafkaError) as info:
            validate_batches(two[:n], max_batch_bytes=MAX)
        assert info.value.code == CORRUPT, n
    assert len(validate_batches(two, max_batch_bytes=MAX)) == 2


def test_every_single_bit_flip_in_crc_covered_bytes_is_caught() -> None:
    """Only baseOffset (0..7) and partitionLeaderEpoch (12..15) are outside the CRC."""
    for bit in range(len(GOOD) * 8):
        data = bytearray(GOOD)
        data[bit // 8] ^= 1 << (bit % 8)
        byte = bit // 8
        if byte < 8 or 12 <= byte < 16:
            assert len(validate_batches(data, max_batch_bytes=MAX)) == 1
        else:
            with pytest.raises(KafkaError):
                validate_batches(data, max_batch_bytes=MAX)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_random_bytes_never_crash(data: bytes) -> None:
    try:
        validate_batches(data, max_batch_bytes=MAX)
    except KafkaError:
        pass


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, len(GOOD) * 2 - 1), st.integers(0, 255)), min_size=1, max_size=6
    ),
    st.booleans(),
)
def test_mutated_batches_never_crash(edits: list[tuple[int, int]], recrc: bool) -> None:
    data = bytearray(GOOD + encode_batch(RECORDS, compression=3))
    for index, value in edits:
        data[index] = value
    if recrc and len(data) >= 61:
        size = min(len(data), int.from_bytes(data[8:12], "big", signed=True) + 12)
        if size >= 21:
            data[17:21] = batch_crc(data, 0, size).to_bytes(4, "big")
    try:
        validate_batches(data, max_batch_bytes=MAX, allow_control=True)
    except KafkaError:
        pass
    try:  # the full decoder must be as robust
        list(iter_records(data, verify_crc=False))
    except KafkaError:
        pass


# --------------------------------------------------------------------------- assign_offsets


def _three_batches() -> bytearray:
    return bytearray(
        encode_batch(RECORDS)
        + encode_batch(
            [
                RecordInput(b"a", b"1", (), 7),
                RecordInput(b"b", b"2", (), 9),
                RecordInput(b"c", b"3", (), 8),
            ],
            compression=1,
        )
        + encode_batch(
            [RecordInput(None, b"solo", (), 50)], producer_id=3, producer_epoch=0, base_sequence=0
        )
    )


def test_assign_offsets_rewrites_base_offsets_consecutively() -> None:
    buf = _three_batches()
    headers = validate_batches(buf, max_batch_bytes=MAX)
    out = assign_offsets(buf, headers, 1_000, None)
    assert [h.base_offset for h in out] == [1_000, 1_002, 1_005]
    assert [h.next_offset for h in out] == [1_002, 1_005, 1_006]
    assert validate_batches(buf, max_batch_bytes=MAX) == out  # in place, crc untouched
    offsets = [r.offset for _, recs in iter_records(buf) for r in recs]
    assert offsets == list(range(1_000, 1_006))
    timestamps = [r.timestamp for _, recs in iter_records(buf) for r in recs]
    assert timestamps == [1_000, 1_005, 7, 9, 8, 50]


def test_assign_offsets_log_append_time_rewrites_and_recomputes_crc() -> None:
    buf = _three_batches()
    headers = validate_batches(buf, max_batch_bytes=MAX)
    out = assign_offsets(buf, headers, 40, 99_999, partition_leader_epoch=4)
    assert validate_batches(buf, max_batch_bytes=MAX) == out  # crc is valid again
    for h, before in zip(out, headers, strict=True):
        assert h.timestamp_type == TimestampType.LOG_APPEND_TIME
        assert h.max_timestamp == 99_999
        assert h.base_timestamp == before.base_timestamp
        assert h.partition_leader_epoch == 4
        assert h.compression == before.compression
        assert h.producer_id == before.producer_id
    decoded = [(r.offset, r.timestamp) for _, recs in iter_records(buf) for r in recs]
    assert decoded == [(40 + i, 99_999) for i in range(6)]
    # A real client reads the rewritten batches the same way.
    pos = 0
    for h in out:
        chunk = bytes(buf[pos : pos + h.size])
        for reader in (KafkaPythonBatch, AioBatch):
            batch = reader(chunk)
            assert batch.validate_crc()
            assert batch.timestamp_type == 1
            got = [(r.offset, r.timestamp) for r in batch]
            assert got == [(h.base_offset + i, 99_999) for i in range(h.records_count)]
        pos += h.size


def test_assign_offsets_create_time_clears_a_client_log_append_bit() -> None:
    buf = bytearray(encode_batch(RECORDS, timestamp_type=1))
    headers = validate_batches(buf, max_batch_bytes=MAX)
    (out,) = assign_offsets(buf, headers, 0, None)
    assert not out.attributes & ATTR_TIMESTAMP_TYPE
    assert validate_batches(buf, max_batch_bytes=MAX) == [out]
    assert [r.timestamp for r in decode_batch(buf)[1]] == [1_000, 1_005]


def test_assign_offsets_on_a_view_of_a_larger_buffer_layout() -> None:
    """Positions are the cumulative sizes: the first batch starts at byte 0 of buf."""
    buf = bytearray(GOOD * 4)
    out = assign_offsets(buf, validate_batches(buf, max_batch_bytes=MAX), 0, None)
    assert [parse_header(buf, i * len(GOOD)).base_offset for i in range(4)] == [0, 2, 4, 6]
    assert [h.base_offset for h in out] == [0, 2, 4, 6]


def test_validate_leaves_a_bytearray_resizable_even_after_an_error() -> None:
    buf = bytearray(GOOD + GOOD[:-1])
    with pytest.raises(KafkaError):
        validate_batches(buf, max_batch_bytes=MAX)
    del buf[len(GOOD) :]  # BufferError if a view were still exported
    assert len(validate_batches(buf, max_batch_bytes=MAX)) == 1
    buf += GOOD
    assert len(validate_batches(buf, max_batch_bytes=MAX)) == 2
