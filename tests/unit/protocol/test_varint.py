"""The one unsigned-varint decoder (``oncelog.protocol.varint``) and the error each of its
callers turns a bad varint into: round trips, every truncation, over-long input, the end
bound."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import oncelog
from oncelog.client import wire
from oncelog.errors import ErrorCode, KafkaError
from oncelog.protocol import codec as protocol_codec
from oncelog.protocol import skim
from oncelog.protocol.varint import VarintError, read_uvarint
from oncelog.records.codec import decode_uvarint, encode_uvarint, encode_uvarlong


@given(st.integers(0, 2**64 - 1), st.binary(max_size=3), st.binary(max_size=3))
def test_round_trip_with_surrounding_bytes(value: int, before: bytes, after: bytes) -> None:
    data = encode_uvarlong(value)
    buf = before + data + after
    assert read_uvarint(buf, len(before), len(buf), 10) == (value, len(before) + len(data))


@given(st.integers(0, 2**35 - 1))
def test_five_bytes_carry_35_bits(value: int) -> None:
    data = encode_uvarlong(value)
    assert len(data) <= 5
    assert read_uvarint(data, 0, len(data)) == (value, len(data))


@given(st.integers(2**7, 2**64 - 1))
def test_every_truncation_is_reported_as_truncated(value: int) -> None:
    data = encode_uvarlong(value)
    for cut in range(len(data)):
        with pytest.raises(VarintError) as info:
            read_uvarint(data, 0, cut, 10)
        assert info.value.truncated


def test_the_end_bound_is_respected_even_with_bytes_after_it() -> None:
    data = b"\xac\x02"  # 300
    with pytest.raises(VarintError) as info:
        read_uvarint(data, 0, 1)
    assert info.value.truncated
    assert read_uvarint(data, 0, 2) == (300, 2)


@pytest.mark.parametrize("max_bytes", [1, 5, 6, 10])
def test_overlong_input_is_refused_at_the_byte_limit(max_bytes: int) -> None:
    data = b"\x80" * max_bytes + b"\x00"
    with pytest.raises(VarintError) as info:
        read_uvarint(data, 0, len(data), max_bytes)
    assert not info.value.truncated
    assert str(info.value) == f"varint longer than {max_bytes} bytes"
    assert read_uvarint(data[1:], 0, len(data) - 1, max_bytes) == (0, max_bytes)


def test_a_varint_error_is_a_value_error() -> None:
    assert issubclass(VarintError, ValueError)


# ------------------------------------------------------------------ each caller's errors

TRUNCATED = b"\x80\x80"
SIX_BYTES = b"\x80" * 5 + b"\x00"
SEVEN_BYTES = b"\x80" * 6 + b"\x00"


def test_records_answer_corrupt_message() -> None:
    for data, message in ((TRUNCATED, "truncated varint"),
                          (SIX_BYTES, "varint longer than 5 bytes")):
        with pytest.raises(KafkaError) as info:
            decode_uvarint(data)
        assert (info.value.code, info.value.message) == (ErrorCode.corrupt_message, message)
    assert decode_uvarint(encode_uvarint(2**32 - 1)) == (2**32 - 1, 5)


def test_request_header_reader_answers_invalid_request() -> None:
    for data, message in ((TRUNCATED, "truncated varint"), (SIX_BYTES, "varint too long")):
        with pytest.raises(KafkaError) as info:
            protocol_codec._read_uvarint(data, 0)
        assert (info.value.code, info.value.message) == (ErrorCode.invalid_request, message)


def test_skim_keeps_its_end_bound_its_error_and_six_bytes() -> None:
    assert skim._uvarint(SIX_BYTES, 0, len(SIX_BYTES)) == (0, 6)
    cases = ((b"\xac\x02", 1, "truncated varint"), (SEVEN_BYTES, 7, "varint too long"))
    for data, end, message in cases:
        with pytest.raises(KafkaError) as info:
            skim._uvarint(data, 0, end)
        assert (info.value.code, info.value.message) == (ErrorCode.invalid_request, message)


def test_client_response_reader_refuses_truncated_and_overlong_tagged_fields() -> None:
    assert wire._skip_tagged_fields(b"\x00\x00\x00\x00\x01\x05\x02ab", 4) == 9
    with pytest.raises(VarintError):
        wire._skip_tagged_fields(b"\x00\x00\x00\x00\x01\x85", 4)
    with pytest.raises(VarintError):
        wire._skip_tagged_fields(b"\x00\x00\x00\x00" + SIX_BYTES, 4)


def test_there_is_one_varint_decoding_loop() -> None:
    """Every other module calls ``read_uvarint`` instead of shifting 7-bit groups itself."""
    root = Path(oncelog.__file__).parent
    loops = sorted(
        str(path.relative_to(root))
        for path in root.rglob("*.py")
        if re.search(r"& 0x7[fF]\) << ", path.read_text())
    )
    assert loops == ["protocol/varint.py"]
