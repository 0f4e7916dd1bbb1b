"""``__transaction_state`` records: golden bytes for both value versions, round trips."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from oncelog.coordinator.transaction.log_codec import (
    decode_key,
    decode_value,
    encode_key,
    encode_value,
    tombstone,
)
from oncelog.coordinator.transaction.metadata import TxnTransitMetadata
from oncelog.coordinator.transaction.state import TransactionState
from oncelog.errors import KafkaError

S = TransactionState


def test_key_golden_bytes() -> None:
    assert encode_key("tx") == b"\x00\x00\x00\x02tx"
    assert decode_key(b"\x00\x00\x00\x02tx") == "tx"
    assert decode_key(encode_key("ünï")) == "ünï"


def test_unknown_key_version_is_skipped_and_short_keys_are_corrupt() -> None:
    assert decode_key(b"\x00\x01\x00\x02tx") is None
    for bad in (b"", b"\x00", b"\x00\x00\x00", b"\x00\x00\x00\x05tx"):
        with pytest.raises(KafkaError):
            decode_key(bad)


def test_tombstone_has_a_null_value() -> None:
    key, value = tombstone("tx")
    assert key == encode_key("tx") and value is None
    assert decode_value(None) is None


def _v0_value(
    pid: int,
    epoch: int,
    timeout: int,
    state: int,
    topics: list[tuple[str, list[int]]] | None,
    update: int,
    start: int,
) -> bytes:
    """TransactionLogValue version 0, assembled by hand from Kafka's schema."""
    out = struct.pack(">hqhib", 0, pid, epoch, timeout, state)
    if topics is None:
        out += struct.pack(">i", -1)
    else:
        out += struct.pack(">i", len(topics))
        for topic, ids in topics:
            out += struct.pack(">h", len(topic)) + topic.encode() + struct.pack(">i", len(ids))
            out += b"".join(struct.pack(">i", i) for i in ids)
    return out + struct.pack(">qq", update, start)


def test_reads_kafka_version_0_values() -> None:
    data = _v0_value(7, 3, 60000, 1, [("a", [0, 2]), ("b", [1])], 1000, 900)
    t = decode_value(data)
    assert t == TxnTransitMetadata(
        state=S.ONGOING, producer_id=7, producer_epoch=3, txn_timeout_ms=60000,
        partitions=frozenset({("a", 0), ("a", 2), ("b", 1)}),
        txn_start_timestamp=900, txn_last_update_timestamp=1000,
    )
    empty = decode_value(_v0_value(7, 4, 60000, 0, None, 1001, -1))
    assert empty is not None and empty.state is S.EMPTY and empty.partitions == frozenset()


def test_version_1_golden_bytes() -> None:
    t = TxnTransitMetadata(
        state=S.PREPARE_COMMIT, producer_id=5, producer_epoch=2, txn_timeout_ms=1000,
        partitions=frozenset({("t", 1)}), txn_start_timestamp=10, txn_last_update_timestamp=20,
        prev_producer_id=4, client_transaction_version=2,
    )
    expected = (
        struct.pack(">hqhib", 1, 5, 2, 1000, 2)
        + bytes([2])  # one topic (compact array: n + 1)
        + bytes([2]) + b"t"  # compact string
        + bytes([2]) + struct.pack(">i", 1)  # one partition id
        + bytes([0])  # nested tagged fields
        + struct.pack(">qq", 20, 10)
        + bytes([2])  # two tagged fields
        + bytes([0, 8]) + struct.pack(">q", 4)  # PreviousProducerId
        + bytes([2, 2]) + struct.pack(">h", 2)  # ClientTransactionVersion
    )
    assert encode_value(t) == expected
    assert decode_value(expected) == t


def test_empty_is_written_with_null_partitions() -> None:
    t = TxnTransitMetadata(state=S.EMPTY, producer_id=1, producer_epoch=0, txn_timeout_ms=5,
                           txn_last_update_timestamp=3)
    assert encode_value(t)[2 + 15] == 0  # null compact array right after the fixed head


def test_unknown_tags_are_skipped() -> None:
    t = TxnTransitMetadata(state=S.COMPLETE_ABORT, producer_id=1, producer_epoch=1,
                           txn_timeout_ms=5, txn_start_timestamp=1, txn_last_update_timestamp=2)
    data = encode_value(t)
    assert data[-1] == 0
    with_unknown = data[:-1] + bytes([1, 40, 3]) + b"xyz"
    assert decode_value(with_unknown) == t


@pytest.mark.parametrize(
    "data",
    [
        b"\x00\x02" + b"\x00" * 40,  # unknown version
        struct.pack(">hqhib", 1, 1, 1, 1, 9) + b"\x00" + b"\x00" * 17,  # unknown state
        struct.pack(">hqhib", 1, 1, 1, 1, 1) + b"\x02",  # truncated
        struct.pack(">hqhib", 1, -5, 1, 1, 1) + b"\x01" + b"\x00" * 17,  # negative pid
    ],
)
def test_corrupt_values_raise(data: bytes) -> None:
    with pytest.raises(KafkaError):
        decode_value(data)


def test_dead_is_never_encoded() -> None:
    t = TxnTransitMetadata(state=S.DEAD, producer_id=1, producer_epoch=-1, txn_timeout_ms=5)
    with pytest.raises(ValueError, match="tombstone"):
        encode_value(t)


epochs = st.integers(0, 2**15 - 1)
opt_epochs = st.integers(-1, 2**15 - 1)
pids = st.integers(0, 2**63 - 1)
opt_pids = st.integers(-1, 2**63 - 1)
timestamps = st.integers(-1, 2**62)
partition_sets = st.frozensets(
    st.tuples(st.text(min_size=1, max_size=20), st.integers(0, 2**31 - 1)), max_size=8
)


@st.composite
def transits(draw: st.DrawFn) -> TxnTransitMetadata:
    state = draw(st.sampled_from([s for s in S if s is not S.DEAD]))
    return TxnTransitMetadata(
        state=state,
        producer_id=draw(pids),
        producer_epoch=draw(epochs),
        txn_timeout_ms=draw(st.integers(1, 2**31 - 1)),
        partitions=frozenset() if state is S.EMPTY else draw(partition_sets),
        txn_start_timestamp=draw(timestamps),
        txn_last_update_timestamp=draw(timestamps),
        last_producer_epoch=draw(opt_epochs),
        prev_producer_id=draw(opt_pids),
        next_producer_id=draw(opt_pids),
        next_producer_epoch=draw(opt_epochs),
        client_transaction_version=draw(st.integers(0, 2**15 - 1)),
    )


@given(transits(), st.text(max_size=50))
def test_round_trip(t: TxnTransitMetadata, transactional_id: str) -> None:
    assert decode_value(encode_value(t)) == t
    assert decode_key(encode_key(transactional_id)) == transactional_id


@given(st.binary(max_size=80))
def test_arbitrary_bytes_decode_or_raise_kafka_error(data: bytes) -> None:
    try:
        decode_value(data)
    except KafkaError:
        pass
