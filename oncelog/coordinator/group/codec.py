"""The record formats of ``__consumer_offsets``, byte-compatible with Kafka's.

Every record's key and value start with an int16 schema version. Keys:
  - OffsetCommitKey, version 0 or 1: group string, topic string, partition int32
  - GroupMetadataKey, version 2: group string
Values (written at the highest non-flexible version; older versions are read too):
  - OffsetCommitValue v3: offset int64, leader epoch int32, metadata string,
    commit timestamp int64  (v0/v2: no epoch; v1: an expire timestamp after the commit one)
  - GroupMetadataValue v3: protocol type string, generation int32, protocol nullable string,
    leader nullable string, current state timestamp int64, members array of
    (member id, group instance id nullable, client id, client host, rebalance timeout int32,
    session timeout int32, subscription bytes, assignment bytes)
    (v0: no state timestamp, instance id or rebalance timeout; v1 adds the rebalance timeout;
    v2 the state timestamp; v3 the instance id)
A null value is a tombstone: the offset or the group is deleted.

Big-endian throughout; string = int16 length + UTF-8 (-1 = null), bytes = int32 length,
array = int32 count.
"""

from __future__ import annotations

import functools
import struct
from dataclasses import dataclass

from oncelog.coordinator.binary import BinaryReader
from oncelog.errors import ErrorCode, KafkaError

OFFSET_COMMIT_KEY_VERSION = 1
GROUP_METADATA_KEY_VERSION = 2
OFFSET_COMMIT_VALUE_VERSION = 3
GROUP_METADATA_VALUE_VERSION = 3

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


class CorruptRecord(KafkaError):
    """Bytes that are not a record of a format this module knows."""

    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.corrupt_message, message)


# ---------------------------------------------------------------------------------------
# Record types


@dataclass(frozen=True, slots=True)
class OffsetCommitKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupMetadataKey:
    group: str


@dataclass(frozen=True, slots=True)
class OffsetCommitValue:
    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp: int = -1
    expire_timestamp: int = -1  # only in version 1 records; never written

    def __post_init__(self) -> None:
        _check_range("offset", self.offset, 64)
        _check_range("leader_epoch", self.leader_epoch, 32)
        _check_range("commit_timestamp", self.commit_timestamp, 64)


@dataclass(frozen=True, slots=True)
class MemberRecord:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupMetadataValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int
    members: tuple[MemberRecord, ...] = ()

    def __post_init__(self) -> None:
        _check_range("generation", self.generation, 32)
        _check_range("current_state_timestamp", self.current_state_timestamp, 64)


RecordKey = OffsetCommitKey | GroupMetadataKey


def _check_range(name: str, value: int, bits: int) -> None:
    low, high = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    if not low <= value <= high:
        raise ValueError(f"{name}={value} does not fit int{bits}")


# ---------------------------------------------------------------------------------------
# Writers


class _Writer:
    __slots__ = ("parts",)

    def __init__(self) -> None:
        self.parts: list[bytes] = []

    def int16(self, value: int) -> None:
        self.parts.append(_I16.pack(value))

    def int32(self, value: int) -> None:
        self.parts.append(_I32.pack(value))

    def int64(self, value: int) -> None:
        self.parts.append(_I64.pack(value))

    def string(self, value: str | None) -> None:
        if value is None:
            self.parts.append(_I16.pack(-1))
            return
        data = value.encode("utf-8")
        if len(data) > 0x7FFF:
            raise ValueError(f"string of {len(data)} bytes is longer than int16 allows")
        self.parts.append(_I16.pack(len(data)))
        self.parts.append(data)

    def bytes_(self, value: bytes | None) -> None:
        if value is None:
            self.parts.append(_I32.pack(-1))
            return
        self.parts.append(_I32.pack(len(value)))
        self.parts.append(bytes(value))

    def result(self) -> bytes:
        return b"".join(self.parts)


def encode_offset_key(key: OffsetCommitKey) -> bytes:
    w = _Writer()
    w.int16(OFFSET_COMMIT_KEY_VERSION)
    w.string(key.group)
    w.string(key.topic)
    w.int32(key.partition)
    return w.result()


def encode_group_key(key: GroupMetadataKey) -> bytes:
    w = _Writer()
    w.int16(GROUP_METADATA_KEY_VERSION)
    w.string(key.group)
    return w.result()


def encode_key(key: RecordKey) -> bytes:
    if isinstance(key, OffsetCommitKey):
        return encode_offset_key(key)
    return encode_group_key(key)


def encode_offset_value(value: OffsetCommitValue) -> bytes:
    w = _Writer()
    w.int16(OFFSET_COMMIT_VALUE_VERSION)
    w.int64(value.offset)
    w.int32(value.leader_epoch)
    w.string(value.metadata)
    w.int64(value.commit_timestamp)
    return w.result()


def encode_group_value(value: GroupMetadataValue) -> bytes:
    w = _Writer()
    w.int16(GROUP_METADATA_VALUE_VERSION)
    w.string(value.protocol_type)
    w.int32(value.generation)
    w.string(value.protocol)
    w.string(value.leader)
    w.int64(value.current_state_timestamp)
    w.int32(len(value.members))
    for m in value.members:
        w.string(m.member_id)
        w.string(m.group_instance_id)
        w.string(m.client_id)
        w.string(m.client_host)
        w.int32(m.rebalance_timeout_ms)
        w.int32(m.session_timeout_ms)
        w.bytes_(m.subscription)
        w.bytes_(m.assignment)
    return w.result()


# ---------------------------------------------------------------------------------------
# Readers


def _reader(data: bytes) -> BinaryReader:
    return BinaryReader(data, CorruptRecord)


def decode_key(data: bytes) -> RecordKey | None:
    """The key of an offsets-topic record; None for key versions this coordinator does not
    own (Kafka's newer consumer-group and share-group records), which loading skips."""
    r = _reader(data)
    version = r.int16()
    if version in (0, 1):
        key: RecordKey = OffsetCommitKey(r.string(), r.string(), r.int32())
    elif version == 2:
        key = GroupMetadataKey(r.string())
    else:
        return None
    r.finish()
    return key


def decode_offset_value(data: bytes) -> OffsetCommitValue:
    r = _reader(data)
    version = r.int16()
    if version == 3:
        offset = r.int64()
        epoch = r.int32()
        metadata = r.string()
        value = OffsetCommitValue(offset, epoch, metadata, r.int64())
    elif version in (0, 1, 2):
        offset = r.int64()
        metadata = r.string()
        commit_ts = r.int64()
        expire_ts = r.int64() if version == 1 else -1
        value = OffsetCommitValue(offset, -1, metadata, commit_ts, expire_ts)
    else:
        raise CorruptRecord(f"unknown OffsetCommitValue version {version}")
    r.finish()
    return value


def decode_group_value(data: bytes) -> GroupMetadataValue:
    r = _reader(data)
    version = r.int16()
    if not 0 <= version <= 3:
        raise CorruptRecord(f"unknown GroupMetadataValue version {version}")
    protocol_type = r.string()
    generation = r.int32()
    protocol = r.nullable_string()
    leader = r.nullable_string()
    state_ts = r.int64() if version >= 2 else -1
    count = r.int32()
    if count < 0:
        raise CorruptRecord(f"negative member count {count}")
    members = []
    for _ in range(count):
        member_id = r.string()
        instance_id = r.nullable_string() if version >= 3 else None
        client_id = r.string()
        client_host = r.string()
        rebalance_timeout = r.int32() if version >= 1 else -1
        session_timeout = r.int32()
        if rebalance_timeout == -1:
            rebalance_timeout = session_timeout
        members.append(
            MemberRecord(
                member_id,
                instance_id,
                client_id,
                client_host,
                rebalance_timeout,
                session_timeout,
                r.bytes_(),
                r.bytes_(),
            )
        )
    r.finish()
    return GroupMetadataValue(protocol_type, generation, protocol, leader, state_ts,
                              tuple(members))


# ---------------------------------------------------------------------------------------
# Partitioning of groups over the offsets topic


@functools.lru_cache(maxsize=65536)
def java_string_hash(text: str) -> int:
    """Java's String.hashCode: s[0]*31^(n-1) + ... + s[n-1] over UTF-16 code units, int32.
    Memoized: every request of a group or transactional id places it again."""
    h = 0
    units = text.encode("utf-16-be", "surrogatepass")
    for i in range(0, len(units), 2):
        h = (31 * h + ((units[i] << 8) | units[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def kafka_abs(n: int) -> int:
    """Kafka's Utils.abs: Math.abs, except that Integer.MIN_VALUE maps to 0."""
    return 0 if n == -(1 << 31) else abs(n)


def partition_for(group_id: str, num_partitions: int) -> int:
    """The ``__consumer_offsets`` partition that holds a group, as Kafka computes it."""
    return kafka_abs(java_string_hash(group_id)) % num_partitions
