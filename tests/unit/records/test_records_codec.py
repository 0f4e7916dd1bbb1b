"""Varint helpers and the full record codec: properties, known vectors, error cases."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oncelog.errors import ErrorCode, KafkaError
from oncelog.records.batch import Compression, TimestampType, parse_header
from oncelog.records.codec import (
    Record,
    RecordInput,
    decode_batch,
    decode_uvarint,
    decode_uvarlong,
    decode_varint,
    decode_varlong,
    encode_batch,
    encode_uvarint,
    encode_uvarlong,
    encode_varint,
    encode_varlong,
    iter_records,
    varlong_size,
)
from oncelog.records.validate import batch_crc, validate_batches

INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)

# ------------------------------------------------------------------------------ varints


@pytest.mark.parametrize(
    ("value", "encoded"),
    [
        (0, b"\x00"),
        (-1, b"\x01"),
        (1, b"\x02"),
        (-2, b"\x03"),
        (63, b"\x7e"),
        (-64, b"\x7f"),
        (64, b"\x80\x01"),
        (150, b"\xac\x02"),
        (2**31 - 1, b"\xfe\xff\xff\xff\x0f"),
        (-(2**31), b"\xff\xff\xff\xff\x0f"),
    ],
)
def test_zigzag_varint_vectors(value: int, encoded: bytes) -> None:
    assert encode_varint(value) == encoded
    assert decode_varint(encoded) == (value, len(encoded))


def test_varlong_extremes() -> None:
    assert encode_varlong(-(2**63)) == b"\xff" * 9 + b"\x01"
    assert encode_varlong(2**63 - 1) == b"\xfe" + b"\xff" * 8 + b"\x01"
    assert encode_uvarint(300) == b"\xac\x02"


@given(INT32)
def test_varint_round_trip(value: int) -> None:
    data = encode_varint(value)
    assert len(data) <= 5 and len(data) == varlong_size(value)
    assert decode_varint(b"\xaa" + data + b"\xff", 1) == (value, 1 + len(data))


@given(INT64)
def test_varlong_round_trip(value: int) -> None:
    data = encode_varlong(value)
    assert len(data) <= 10 and len(data) == varlong_size(value)
    assert decode_varlong(data) == (value, len(data))


@given(st.integers(0, 2**32 - 1))
def test_uvarint_round_trip(value: int) -> None:
    data = encode_uvarint(value)
    assert decode_uvarint(data) == (value, len(data))


@given(st.integers(0, 2**64 - 1))
def test_uvarlong_round_trip(value: int) -> None:
    data = encode_uvarlong(value)
    assert decode_uvarlong(data) == (value, len(data))


@given(INT32)
def test_small_magnitudes_take_few_bytes(value: int) -> None:
    """Zigzag: |v| < 64 fits in one byte, whatever the sign."""
    assert (len(encode_varint(value)) == 1) == (-64 <= value < 64)


@pytest.mark.parametrize(
    ("encode", "value"),
    [
        (encode_varint, 2**31),
        (encode_varint, -(2**31) - 1),
        (encode_varlong, 2**63),
        (encode_uvarint, -1),
        (encode_uvarint, 2**32),
        (encode_uvarlong, 2**64),
    ],
)
def test_encoders_refuse_out_of_range(encode: object, value: int) -> None:
    with pytest.raises(ValueError):
        encode(value)  # type: ignore[operator]


@pytest.mark.parametrize(
    ("decode", "data"),
    [
        (decode_varint, b""),
        (decode_varint, b"\x80\x80"),  # truncated
        (decode_varint, b"\xff\xff\xff\xff\x1f"),  # 33 bits
        (decode_varint, b"\x80\x80\x80\x80\x80\x00"),  # six bytes
        (decode_varlong, b"\xff" * 10 + b"\x01"),  # eleven bytes
        (decode_uvarlong, b"\xff" * 9 + b"\x7f"),  # 70 bits
    ],
)
def test_decoders_reject_bad_varints(decode: object, data: bytes) -> None:
    with pytest.raises(KafkaError) as info:
        decode(data)  # type: ignore[operator]
    assert info.value.code == ErrorCode.corrupt_message


# ------------------------------------------------------------------------- batch codec

BYTES = st.none() | st.binary(max_size=40)
RECORD_INPUTS = st.builds(
    RecordInput,
    key=BYTES,
    value=BYTES,
    headers=st.lists(st.tuples(st.text(max_size=8), BYTES), max_size=3).map(tuple),
    timestamp=st.integers(0, 2**45),
)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(RECORD_INPUTS, min_size=1, max_size=8),
    st.sampled_from(list(Compression)),
    st.integers(0, 2**40),
)
def test_batch_round_trip(records: list[RecordInput], codec: int, base_offset: int) -> None:
    data = encode_batch(records, base_offset=base_offset, compression=codec)
    header, decoded = decode_batch(data)
    assert header.compression == codec and header.size == len(data)
    assert header.base_timestamp == records[0].timestamp
    assert header.max_timestamp == max(r.timestamp or 0 for r in records)
    assert decoded == [
        Record(base_offset + i, r.timestamp or 0, r.key, r.value, tuple(r.headers))
        for i, r in enumerate(records)
    ]
    assert validate_batches(data, max_batch_bytes=1 << 20) == [header]
    # Re-encoding decoded records gives back the same batch.
    assert encode_batch(decoded, base_offset=base_offset, compression=codec) == data


def test_header_fields_are_written() -> None:
    data = encode_batch(
        [RecordInput(value=b"v")],
        base_offset=7,
        producer_id=11,
        producer_epoch=3,
        base_sequence=99,
        transactional=True,
        control=True,
        partition_leader_epoch=5,
        base_timestamp=1_234,
    )
    h = parse_header(data)
    assert (h.base_offset, h.partition_leader_epoch, h.magic) == (7, 5, 2)
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (11, 3, 99)
    assert h.is_transactional and h.is_control
    assert h.base_timestamp == h.max_timestamp == 1_234  # timestamp=None takes the base
    assert decode_batch(data)[1][0].timestamp == 1_234


def test_explicit_base_timestamp_gives_signed_deltas() -> None:
    data = encode_batch(
        [RecordInput(value=b"a", timestamp=90), RecordInput(value=b"b", timestamp=130)],
        base_timestamp=100,
    )
    assert parse_header(data).base_timestamp == 100
    assert [r.timestamp for r in decode_batch(data)[1]] == [90, 130]


def test_no_timestamps_at_all_is_minus_one() -> None:
    assert [r.timestamp for r in decode_batch(encode_batch([RecordInput()]))[1]] == [-1]


def test_log_append_time_records_take_max_timestamp() -> None:
    data = encode_batch(
        [RecordInput(value=b"a", timestamp=5), RecordInput(value=b"b", timestamp=9)],
        timestamp_type=TimestampType.LOG_APPEND_TIME,
    )
    header, records = decode_batch(data)
    assert header.timestamp_type == TimestampType.LOG_APPEND_TIME
    assert [r.timestamp for r in records] == [9, 9]


def test_encode_refuses_empty_batches_and_unknown_codecs() -> None:
    with pytest.raises(ValueError):
        encode_batch([])
    with pytest.raises(ValueError):
        encode_batch([RecordInput()], compression=5)


def test_decode_at_position() -> None:
    a = encode_batch([RecordInput(value=b"a")], base_offset=0)
    b = encode_batch([RecordInput(value=b"b")], base_offset=1)
    header, records = decode_batch(a + b, len(a))
    assert header.base_offset == 1 and records[0].value == b"b"


def test_iter_records_skips_only_a_partial_trailing_batch() -> None:
    batches = [encode_batch([RecordInput(value=bytes([i]))], base_offset=i) for i in range(3)]
    data = b"".join(batches)
    for cut in range(len(batches[2])):
        got = [h.base_offset for h, _ in iter_records(data[: len(data) - len(batches[2]) + cut])]
        assert got == [0, 1]
    assert [recs[0].value for _, recs in iter_records(data)] == [b"\x00", b"\x01", b"\x02"]
    assert list(iter_records(b"")) == []


def _recrc(data: bytearray) -> bytes:
    data[17:21] = batch_crc(data, 0, len(data)).to_bytes(4, "big")
    return bytes(data)


def _corrupt_code(data: bytes, **kwargs: bool) -> ErrorCode:
    with pytest.raises(KafkaError) as info:
        decode_batch(data, **kwargs)
    return info.value.code


def test_decode_errors_are_corrupt_message() -> None:
    good = encode_batch([RecordInput(b"k", b"v", [("h", b"x")], 1)])
    flipped = bytearray(good)
    flipped[-1] ^= 1
    assert _corrupt_code(bytes(flipped)) == ErrorCode.corrupt_message  # crc
    assert _corrupt_code(good[:-1]) == ErrorCode.corrupt_message  # truncated
    assert _corrupt_code(good[:30]) == ErrorCode.corrupt_message
    # One byte more in the body than the record holds.
    longer = bytearray(good + b"\x00")
    longer[8:12] = (int.from_bytes(good[8:12], "big") + 1).to_bytes(4, "big")
    assert _corrupt_code(_recrc(longer)) == ErrorCode.corrupt_message
    # A count larger than the records present.
    more = bytearray(good)
    more[57:61] = (2).to_bytes(4, "big")
    assert _corrupt_code(_recrc(more)) == ErrorCode.corrupt_message
    # Header key that is not UTF-8.
    bad_key = bytearray(good.replace(b"\x02h", b"\x02\xff"))
    assert _corrupt_code(_recrc(bad_key)) == ErrorCode.corrupt_message
    # A compressed codec over bytes that are not compressed.
    fake_gzip = bytearray(good)
    fake_gzip[22] |= 1
    assert _corrupt_code(_recrc(fake_gzip)) == ErrorCode.corrupt_message
    # Legacy magic.
    legacy = bytearray(good)
    legacy[16] = 1
    assert _corrupt_code(bytes(legacy)) == ErrorCode.corrupt_message


def test_verify_crc_can_be_skipped() -> None:
    good = bytearray(encode_batch([RecordInput(b"k", b"v")]))
    good[17] ^= 0xFF
    assert decode_batch(bytes(good), verify_crc=False)[1][0].value == b"v"
