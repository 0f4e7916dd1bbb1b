"""Records of ``__transaction_state``: one key/value per transactional id, compacted.

Key (TransactionLogKey, version 0): ``int16 version | string transactional_id``.
Value (TransactionLogValue): ``int16 version`` then, in this order, producer id (int64),
producer epoch (int16), transaction timeout ms (int32), state id (int8), the partitions
(nullable array of topic + int32 partition ids), last update timestamp (int64), start
timestamp (int64). Version 0 uses classic encodings (int16-length strings, int32-length
arrays); version 1 is flexible (compact strings and arrays, tagged fields) and adds, as
tagged fields written only when they differ from their default:

  tag 0  PreviousProducerId        int64, default -1   (Kafka, KIP-890)
  tag 1  NextProducerId            int64, default -1   (Kafka, KIP-890)
  tag 2  ClientTransactionVersion  int16, default 0    (Kafka, KIP-890)
  tag 3  NextProducerEpoch         int16, default -1   (KIP-939's addition; the KIP names it
                                                        without a free tag, 3 is the next one)
  tag 4  LastProducerEpoch         int16, default -1   (oncelog: lets a retried EndTxn or
                                                        InitProducerId be recognised after a
                                                        restart; Kafka keeps it in memory only)

Unknown tags are skipped, as Kafka's readers do. This writer always writes version 1. The
Empty state is written with null partitions, as Kafka does. A null value is a tombstone: the
transactional id expired.
"""

from __future__ import annotations

import struct
from collections import defaultdict

from oncelog.coordinator.binary import BinaryReader
from oncelog.coordinator.transaction.metadata import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    TopicPartition,
    TxnTransitMetadata,
)
from oncelog.coordinator.transaction.state import TransactionState, state_from_id
from oncelog.errors import ErrorCode, KafkaError
from oncelog.records.codec import encode_uvarint

KEY_VERSION = 0
VALUE_VERSION = 1
_MAX_VALUE_VERSION = 1

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_HEAD = struct.Struct(">qhib")  # producer id, epoch, timeout, state

TAG_PREV_PRODUCER_ID = 0
TAG_NEXT_PRODUCER_ID = 1
TAG_CLIENT_TRANSACTION_VERSION = 2
TAG_NEXT_PRODUCER_EPOCH = 3
TAG_LAST_PRODUCER_EPOCH = 4


def _corrupt(message: str) -> KafkaError:
    return KafkaError(ErrorCode.corrupt_message, f"__transaction_state record: {message}")


# ---------------------------------------------------------------------------------- key


def encode_key(transactional_id: str) -> bytes:
    raw = transactional_id.encode()
    return _I16.pack(KEY_VERSION) + _I16.pack(len(raw)) + raw


def decode_key(data: bytes) -> str | None:
    """The transactional id of a key; None for a key version this code does not know
    (Kafka skips those too)."""
    if len(data) < 2:
        raise _corrupt("key too short")
    (version,) = _I16.unpack_from(data, 0)
    if version != KEY_VERSION:
        return None
    if len(data) < 4:
        raise _corrupt("key too short")
    (length,) = _I16.unpack_from(data, 2)
    if length < 0 or 4 + length > len(data):
        raise _corrupt("bad transactional id length")
    try:
        return data[4 : 4 + length].decode()
    except UnicodeDecodeError:
        raise _corrupt("transactional id is not UTF-8") from None


# -------------------------------------------------------------------------------- value


def _grouped(partitions: frozenset[TopicPartition]) -> list[tuple[str, list[int]]]:
    by_topic: dict[str, list[int]] = defaultdict(list)
    for topic, index in partitions:
        by_topic[topic].append(index)
    return [(topic, sorted(ids)) for topic, ids in sorted(by_topic.items())]


def encode_value(t: TxnTransitMetadata) -> bytes:
    """The value record of ``t`` (version 1)."""
    if t.state is TransactionState.DEAD:
        raise ValueError("Dead is never written: an expired id gets a tombstone")
    out = bytearray(_I16.pack(VALUE_VERSION))
    out += _HEAD.pack(t.producer_id, t.producer_epoch, t.txn_timeout_ms, t.state.id)
    if t.state is TransactionState.EMPTY:
        out += encode_uvarint(0)  # null array
    else:
        topics = _grouped(t.partitions)
        out += encode_uvarint(len(topics) + 1)
        for topic, ids in topics:
            raw = topic.encode()
            out += encode_uvarint(len(raw) + 1) + raw
            out += encode_uvarint(len(ids) + 1)
            for index in ids:
                out += _I32.pack(index)
            out += encode_uvarint(0)  # no tagged fields in the nested struct
    out += _I64.pack(t.txn_last_update_timestamp) + _I64.pack(t.txn_start_timestamp)
    tags: list[tuple[int, bytes]] = []
    if t.prev_producer_id != NO_PRODUCER_ID:
        tags.append((TAG_PREV_PRODUCER_ID, _I64.pack(t.prev_producer_id)))
    if t.next_producer_id != NO_PRODUCER_ID:
        tags.append((TAG_NEXT_PRODUCER_ID, _I64.pack(t.next_producer_id)))
    if t.client_transaction_version != 0:
        tags.append((TAG_CLIENT_TRANSACTION_VERSION, _I16.pack(t.client_transaction_version)))
    if t.next_producer_epoch != NO_PRODUCER_EPOCH:
        tags.append((TAG_NEXT_PRODUCER_EPOCH, _I16.pack(t.next_producer_epoch)))
    if t.last_producer_epoch != NO_PRODUCER_EPOCH:
        tags.append((TAG_LAST_PRODUCER_EPOCH, _I16.pack(t.last_producer_epoch)))
    out += encode_uvarint(len(tags))
    for tag, payload in tags:
        out += encode_uvarint(tag) + encode_uvarint(len(payload)) + payload
    return bytes(out)


def _tag_int(tags: dict[int, bytes], tag: int, s: struct.Struct, default: int) -> int:
    raw = tags.get(tag)
    if raw is None:
        return default
    if len(raw) != s.size:
        raise _corrupt(f"tagged field {tag} has {len(raw)} bytes")
    (value,) = s.unpack(raw)
    return int(value)


def decode_value(data: bytes | None) -> TxnTransitMetadata | None:
    """The state in a value record; None for a tombstone. CORRUPT_MESSAGE if malformed."""
    if data is None:
        return None
    r = BinaryReader(data, _corrupt)
    version = r.int16()
    if not 0 <= version <= _MAX_VALUE_VERSION:
        raise _corrupt(f"unknown value version {version}")
    flexible = version >= 1
    producer_id, epoch, timeout_ms, state_id = r.unpack(_HEAD)
    try:
        state = state_from_id(state_id)
    except ValueError as exc:
        raise _corrupt(str(exc)) from None
    count = r.array_length(flexible)
    partitions: set[TopicPartition] = set()
    for _ in range(max(count, 0)):
        topic = r.string(flexible)
        n = r.array_length(flexible)
        for _ in range(max(n, 0)):
            partitions.add((topic, r.int32()))
        if flexible:
            r.tagged_fields()
    last_update = r.int64()
    start = r.int64()
    tags = r.tagged_fields() if flexible else {}
    if state is TransactionState.EMPTY:
        partitions.clear()  # Kafka ignores whatever an Empty record lists
    try:
        return TxnTransitMetadata(
            state=state,
            producer_id=producer_id,
            producer_epoch=epoch,
            txn_timeout_ms=timeout_ms,
            partitions=frozenset(partitions),
            txn_start_timestamp=start,
            txn_last_update_timestamp=last_update,
            prev_producer_id=_tag_int(tags, TAG_PREV_PRODUCER_ID, _I64, NO_PRODUCER_ID),
            next_producer_id=_tag_int(tags, TAG_NEXT_PRODUCER_ID, _I64, NO_PRODUCER_ID),
            client_transaction_version=_tag_int(tags, TAG_CLIENT_TRANSACTION_VERSION, _I16, 0),
            next_producer_epoch=_tag_int(
                tags, TAG_NEXT_PRODUCER_EPOCH, _I16, NO_PRODUCER_EPOCH
            ),
            last_producer_epoch=_tag_int(
                tags, TAG_LAST_PRODUCER_EPOCH, _I16, NO_PRODUCER_EPOCH
            ),
        )
    except ValueError as exc:
        raise _corrupt(str(exc)) from None


def encode_record(transactional_id: str, t: TxnTransitMetadata) -> tuple[bytes, bytes]:
    return encode_key(transactional_id), encode_value(t)


def tombstone(transactional_id: str) -> tuple[bytes, None]:
    """The record that removes an expired transactional id from the compacted log."""
    return encode_key(transactional_id), None
