"""__consumer_offsets record formats: golden bytes in Kafka's layout, round trips, older
versions, and the group -> partition mapping (Java's String.hashCode, Kafka's Utils.abs)."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from oncelog.coordinator.group import codec
from oncelog.coordinator.group.codec import (
    CorruptRecord,
    GroupMetadataKey,
    GroupMetadataValue,
    MemberRecord,
    OffsetCommitKey,
    OffsetCommitValue,
)

# -- golden bytes, laid out by hand from Kafka's message definitions -------------------------


def test_offset_key_golden() -> None:
    data = codec.encode_offset_key(OffsetCommitKey("g1", "t", 7))
    assert data == b"\x00\x01" + b"\x00\x02g1" + b"\x00\x01t" + b"\x00\x00\x00\x07"


def test_group_key_golden() -> None:
    assert codec.encode_group_key(GroupMetadataKey("grp")) == b"\x00\x02\x00\x03grp"


def test_offset_value_v3_golden() -> None:
    data = codec.encode_offset_value(OffsetCommitValue(42, 5, "md", 1_700_000_000_000))
    expected = (
        b"\x00\x03"
        + struct.pack(">q", 42)
        + struct.pack(">i", 5)
        + b"\x00\x02md"
        + struct.pack(">q", 1_700_000_000_000)
    )
    assert data == expected


def test_group_value_v3_golden() -> None:
    value = GroupMetadataValue(
        protocol_type="consumer",
        generation=3,
        protocol="range",
        leader="m1",
        current_state_timestamp=99,
        members=(MemberRecord("m1", None, "cid", "/h", 300, 100, b"S", b"AA"),),
    )
    expected = (
        b"\x00\x03"
        + b"\x00\x08consumer"
        + b"\x00\x00\x00\x03"
        + b"\x00\x05range"
        + b"\x00\x02m1"
        + struct.pack(">q", 99)
        + b"\x00\x00\x00\x01"
        + b"\x00\x02m1"
        + b"\xff\xff"  # null group instance id
        + b"\x00\x03cid"
        + b"\x00\x02/h"
        + struct.pack(">i", 300)
        + struct.pack(">i", 100)
        + b"\x00\x00\x00\x01S"
        + b"\x00\x00\x00\x02AA"
    )
    assert codec.encode_group_value(value) == expected
    assert codec.decode_group_value(expected) == value


def test_empty_group_value_has_null_protocol_and_leader() -> None:
    value = GroupMetadataValue("consumer", 4, None, None, 5, ())
    data = codec.encode_group_value(value)
    assert data.endswith(b"\xff\xff\xff\xff" + struct.pack(">q", 5) + b"\x00\x00\x00\x00")
    assert codec.decode_group_value(data) == value


# -- older value versions are still read -----------------------------------------------------


def test_decode_offset_value_v1_with_expire_timestamp() -> None:
    data = b"\x00\x01" + struct.pack(">q", 10) + b"\x00\x01m" + struct.pack(">qq", 1000, 2000)
    assert codec.decode_offset_value(data) == OffsetCommitValue(10, -1, "m", 1000, 2000)


@pytest.mark.parametrize("version", [0, 2])
def test_decode_offset_value_v0_v2(version: int) -> None:
    data = struct.pack(">hq", version, 11) + b"\x00\x00" + struct.pack(">q", 3)
    assert codec.decode_offset_value(data) == OffsetCommitValue(11, -1, "", 3)


def test_decode_group_value_v0() -> None:
    data = (
        b"\x00\x00" + b"\x00\x08consumer" + b"\x00\x00\x00\x01" + b"\x00\x05range"
        + b"\x00\x02m1" + b"\x00\x00\x00\x01"
        + b"\x00\x02m1" + b"\x00\x01c" + b"\x00\x01h" + struct.pack(">i", 6000)
        + b"\x00\x00\x00\x00" + b"\x00\x00\x00\x00"
    )
    value = codec.decode_group_value(data)
    assert value.current_state_timestamp == -1
    member = value.members[0]
    assert member.group_instance_id is None
    assert member.rebalance_timeout_ms == member.session_timeout_ms == 6000


def test_decode_key_versions() -> None:
    v0 = b"\x00\x00\x00\x01g\x00\x01t\x00\x00\x00\x01"
    assert codec.decode_key(v0) == OffsetCommitKey("g", "t", 1)
    # Keys of Kafka's newer (KIP-848) group records are not ours: skipped, not an error.
    assert codec.decode_key(b"\x00\x03\x00\x01g") is None


@pytest.mark.parametrize(
    "data",
    [
        b"\x00",  # truncated version
        b"\x00\x01\x00\x05ab",  # truncated string
        b"\x00\x02\x00\x01gX",  # trailing byte
        b"\x00\x02\xff\xffX",  # null group id
    ],
)
def test_corrupt_keys(data: bytes) -> None:
    with pytest.raises(CorruptRecord):
        codec.decode_key(data)


def test_unknown_value_version() -> None:
    with pytest.raises(CorruptRecord):
        codec.decode_offset_value(b"\x00\x09" + bytes(20))
    with pytest.raises(CorruptRecord):
        codec.decode_group_value(b"\x00\x04" + bytes(20))


def test_values_check_their_ranges() -> None:
    with pytest.raises(ValueError):
        OffsetCommitValue(2**63)
    with pytest.raises(ValueError):
        GroupMetadataValue("consumer", 2**31, None, None, 0)


# -- round trips -----------------------------------------------------------------------------

names = st.text(max_size=40)
int32 = st.integers(-(2**31), 2**31 - 1)
int64 = st.integers(-(2**63), 2**63 - 1)
members = st.builds(
    MemberRecord,
    member_id=names,
    group_instance_id=st.none() | names,
    client_id=names,
    client_host=names,
    rebalance_timeout_ms=int32.filter(lambda v: v != -1),
    session_timeout_ms=int32,
    subscription=st.binary(max_size=64),
    assignment=st.binary(max_size=64),
)


@given(names, names, int32)
def test_offset_key_round_trip(group: str, topic: str, partition: int) -> None:
    key = OffsetCommitKey(group, topic, partition)
    assert codec.decode_key(codec.encode_key(key)) == key


@given(names)
def test_group_key_round_trip(group: str) -> None:
    key = GroupMetadataKey(group)
    assert codec.decode_key(codec.encode_key(key)) == key


@given(int64, int32, names, int64)
def test_offset_value_round_trip(offset: int, epoch: int, metadata: str, ts: int) -> None:
    value = OffsetCommitValue(offset, epoch, metadata, ts)
    assert codec.decode_offset_value(codec.encode_offset_value(value)) == value


@given(
    st.builds(
        GroupMetadataValue,
        protocol_type=names,
        generation=int32,
        protocol=st.none() | names,
        leader=st.none() | names,
        current_state_timestamp=int64,
        members=st.lists(members, max_size=4).map(tuple),
    )
)
def test_group_value_round_trip(value: GroupMetadataValue) -> None:
    assert codec.decode_group_value(codec.encode_group_value(value)) == value


# -- partitioning ----------------------------------------------------------------------------


def java_hash_by_hand(text: str) -> int:
    """s[0]*31^(n-1) + ... + s[n-1], folded into int32 at every step, over UTF-16 units."""
    units = text.encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(units), 2):
        h = h * 31 + int.from_bytes(units[i : i + 2], "big")
        h = (h + 2**31) % 2**32 - 2**31
    return h


@pytest.mark.parametrize(
    "text,expected",
    [
        ("", 0),
        ("a", 97),
        ("ab", 97 * 31 + 98),
        ("hello", 99162322),  # the value every Java tutorial prints
        ("my-group", -1906497762),
        ("polygenelubricants", -(2**31)),  # famously Integer.MIN_VALUE
        ("\U0001F600", 0xD83D * 31 + 0xDE00),  # a surrogate pair counts as two units
    ],
)
def test_java_string_hash(text: str, expected: int) -> None:
    assert java_hash_by_hand(text) == expected
    assert codec.java_string_hash(text) == expected


@given(st.text(max_size=30))
def test_java_string_hash_matches_reference(text: str) -> None:
    assert codec.java_string_hash(text) == java_hash_by_hand(text)


def test_partition_for_uses_utils_abs() -> None:
    # Math.abs, not a sign-bit mask: -1906497762 -> 1906497762 % 50 = 12 (a mask gives 36).
    assert codec.partition_for("my-group", 50) == 12
    assert codec.partition_for("hello", 50) == 22
    # Utils.abs(Integer.MIN_VALUE) is 0.
    assert codec.partition_for("polygenelubricants", 50) == 0
    assert codec.partition_for("anything", 1) == 0
