"""The shared reader of the internal topics' records (oncelog/coordinator/binary.py)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from oncelog.coordinator.binary import BinaryReader
from oncelog.errors import ErrorCode, KafkaError


class Corrupt(KafkaError):
    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.corrupt_message, message)


def reader(data: bytes) -> BinaryReader:
    return BinaryReader(data, Corrupt)


def test_classic_and_compact_encodings() -> None:
    r = reader(b"\x00\x02hi" + b"\xff\xff" + b"\x03ok" + b"\x00" + b"\x00\x00\x00\x02ab")
    assert r.string() == "hi"
    assert r.nullable_string() is None
    assert r.string(flexible=True) == "ok"
    assert r.nullable_string(flexible=True) is None
    assert r.bytes_() == b"ab"
    r.finish()


def test_array_lengths_and_tagged_fields() -> None:
    r = reader(b"\x00\x00\x00\x03" + b"\x04" + b"\x00" + b"\x02" + b"\x00\x01x" + b"\x05\x02yz")
    assert r.array_length(flexible=False) == 3
    assert r.array_length(flexible=True) == 3
    assert r.array_length(flexible=True) == -1
    assert r.tagged_fields() == {0: b"x", 5: b"yz"}
    r.finish()


@pytest.mark.parametrize(
    "data, read",
    [
        (b"\x00", lambda r: r.int16()),
        (b"\x00\x05abc", lambda r: r.string()),
        (b"\xff\xff", lambda r: r.string()),
        (b"\x00\x01\xff", lambda r: r.string()),
        (b"\xff\xff\xff\xff\xff\xff", lambda r: r.uvarint()),
        (b"\x00\x00\x00\x00", lambda r: r.int64()),
    ],
)
def test_malformed_input_raises_the_callers_error(
    data: bytes, read: Callable[[BinaryReader], object]
) -> None:
    with pytest.raises(Corrupt):
        read(reader(data))


def test_trailing_bytes_are_refused() -> None:
    r = reader(b"\x00\x01\x00")
    assert r.int16() == 1
    with pytest.raises(Corrupt, match="1 trailing"):
        r.finish()
