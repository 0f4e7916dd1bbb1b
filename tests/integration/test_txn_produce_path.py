"""The transactional produce path against a real broker, with raw requests no client sends:
several batches for one partition, batches at an epoch other than the transaction's, and
the old instance of a two-phase-commit producer writing after InitProducerId(KeepPreparedTxn).
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kio.schema.add_offsets_to_txn.v3.request import AddOffsetsToTxnRequest
from kio.schema.add_partitions_to_txn.v3.request import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnTopic,
)
from kio.schema.create_topics.v5.request import CreatableTopic, CreateTopicsRequest
from kio.schema.end_txn.v3.request import EndTxnRequest
from kio.schema.errors import ErrorCode
from kio.schema.init_producer_id.v6.request import InitProducerIdRequest
from kio.schema.list_offsets.v5.request import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsTopic,
)
from kio.schema.offset_fetch.v7.request import OffsetFetchRequest, OffsetFetchRequestTopic
from kio.schema.txn_offset_commit.v3.request import (
    TxnOffsetCommitRequest,
    TxnOffsetCommitRequestPartition,
    TxnOffsetCommitRequestTopic,
)
from kio.schema.types import BrokerId, GroupId, ProducerId, TopicName, TransactionalId
from kio.static.primitive import i8, i16, i32, i32Timedelta, i64
from rawkafka import RawConnection, produce

from oncelog.records.codec import RecordInput, encode_batch

pytestmark = pytest.mark.integration

TIMEOUT = i32Timedelta.parse(datetime.timedelta(seconds=60))
LATEST = i64(-1)
READ_UNCOMMITTED, READ_COMMITTED = i8(0), i8(1)


@pytest.fixture
def conn(broker_factory: Any) -> Iterator[RawConnection]:
    broker = broker_factory(configs={"transaction.two.phase.commit.enable": True})
    connection = RawConnection(broker.bootstrap)
    try:
        yield connection
    finally:
        connection.close()


def create_topic(conn: RawConnection, partitions: int = 1) -> str:
    name = f"t-{uuid.uuid4().hex[:8]}"
    resp = conn.request(
        CreateTopicsRequest(
            topics=(
                CreatableTopic(
                    name=TopicName(name), num_partitions=i32(partitions),
                    replication_factor=i16(1), assignments=(), configs=(),
                ),
            ),
            timeout=i32Timedelta.parse(datetime.timedelta(seconds=5)),
            validate_only=False,
        )
    )
    assert resp.topics[0].error_code == ErrorCode.none
    return name


def records(
    n: int, *, pid: int = -1, epoch: int = -1, seq: int = -1, txn: bool = False, tag: str = "v"
) -> bytes:
    return encode_batch(
        [RecordInput(key=b"k", value=f"{tag}{i}".encode()) for i in range(n)],
        producer_id=pid, producer_epoch=epoch, base_sequence=seq, transactional=txn,
    )


def init(conn: RawConnection, txn_id: str, **kwargs: Any) -> tuple[int, int]:
    resp = conn.request(
        InitProducerIdRequest(
            transactional_id=TransactionalId(txn_id), transaction_timeout=TIMEOUT, **kwargs
        )
    )
    assert resp.error_code == ErrorCode.none
    return int(resp.producer_id), int(resp.producer_epoch)


def add_partition(conn: RawConnection, txn_id: str, pid: int, epoch: int, topic: str) -> None:
    resp = conn.request(
        AddPartitionsToTxnRequest(
            v3_and_below_transactional_id=TransactionalId(txn_id),
            v3_and_below_producer_id=ProducerId(pid),
            v3_and_below_producer_epoch=i16(epoch),
            v3_and_below_topics=(
                AddPartitionsToTxnTopic(name=TopicName(topic), partitions=(i32(0),)),
            ),
        )
    )
    code = resp.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code
    assert code == ErrorCode.none


def end_txn(conn: RawConnection, txn_id: str, pid: int, epoch: int, commit: bool) -> ErrorCode:
    resp = conn.request(
        EndTxnRequest(
            transactional_id=TransactionalId(txn_id), producer_id=ProducerId(pid),
            producer_epoch=i16(epoch), committed=commit,
        )
    )
    return resp.error_code


def offsets(conn: RawConnection, topic: str) -> tuple[int, int]:
    """(high watermark, last stable offset) of partition 0."""
    found = []
    for isolation in (READ_UNCOMMITTED, READ_COMMITTED):
        resp = conn.request(
            ListOffsetsRequest(
                replica_id=BrokerId(-1),
                isolation_level=isolation,
                topics=(
                    ListOffsetsTopic(
                        name=TopicName(topic),
                        partitions=(
                            ListOffsetsPartition(partition_index=i32(0), timestamp=LATEST),
                        ),
                    ),
                ),
            )
        )
        part = resp.topics[0].partitions[0]
        assert part.error_code == ErrorCode.none
        found.append(int(part.offset))
    return found[0], found[1]


def txn_offset_commit(
    conn: RawConnection, txn_id: str, group: str, pid: int, epoch: int, topic: str, offset: int
) -> ErrorCode:
    resp = conn.request(
        TxnOffsetCommitRequest(
            transactional_id=TransactionalId(txn_id),
            group_id=GroupId(group),
            producer_id=ProducerId(pid),
            producer_epoch=i16(epoch),
            group_instance_id=None,
            topics=(
                TxnOffsetCommitRequestTopic(
                    name=TopicName(topic),
                    partitions=(
                        TxnOffsetCommitRequestPartition(
                            partition_index=i32(0), committed_offset=i64(offset),
                            committed_leader_epoch=i32(-1), committed_metadata="",
                        ),
                    ),
                ),
            ),
        )
    )
    return resp.topics[0].partitions[0].error_code


def committed_offset(conn: RawConnection, group: str, topic: str) -> int:
    resp = conn.request(
        OffsetFetchRequest(
            group_id=GroupId(group),
            topics=(OffsetFetchRequestTopic(name=TopicName(topic), partition_indexes=(i32(0),)),),
            require_stable=True,
        )
    )
    part = resp.topics[0].partitions[0]
    assert part.error_code == ErrorCode.none
    return int(part.committed_offset)


def test_transactional_batch_behind_a_plain_one_for_a_partition_not_added(
    conn: RawConnection,
) -> None:
    # The old check looked at the first batch only: the transactional second one landed on
    # a partition its transaction never added, and held the LSO until an operator aborted.
    topic = create_topic(conn)
    txn_id = f"x-{uuid.uuid4().hex[:8]}"
    pid, epoch = init(conn, txn_id)
    data = records(2) + records(2, pid=pid, epoch=epoch, seq=0, txn=True)
    answer = produce(conn, topic, data, txn_id)
    assert answer.error_code == ErrorCode.invalid_record
    assert offsets(conn, topic) == (0, 0)
    assert produce(conn, topic, records(1)).error_code == ErrorCode.none
    assert offsets(conn, topic) == (1, 1)  # the LSO follows: no transaction is open


def test_duplicate_then_new_batch_in_one_request_is_refused_not_lost(
    conn: RawConnection,
) -> None:
    # The old answer was the duplicate's: the new batch was acknowledged, never written.
    topic = create_topic(conn)
    first = records(2, pid=900, epoch=0, seq=0)
    assert produce(conn, topic, first).error_code == ErrorCode.none
    answer = produce(conn, topic, first + records(3, pid=900, epoch=0, seq=2, tag="new"))
    assert answer.error_code == ErrorCode.invalid_record
    assert offsets(conn, topic) == (2, 2)
    # Sent alone, as a client would retry it, the new batch is written after the first.
    alone = produce(conn, topic, records(3, pid=900, epoch=0, seq=2, tag="new"))
    assert (alone.error_code, alone.base_offset) == (ErrorCode.none, 2)
    assert offsets(conn, topic) == (5, 5)


def test_transactional_batch_at_the_next_epoch_is_refused(conn: RawConnection) -> None:
    # Accepted before, it left an open transaction at epoch+1 that the COMMIT marker at the
    # transaction's epoch could never end: the LSO stayed stuck.
    topic = create_topic(conn)
    txn_id = f"x-{uuid.uuid4().hex[:8]}"
    pid, epoch = init(conn, txn_id)
    add_partition(conn, txn_id, pid, epoch, topic)
    ahead = produce(conn, topic, records(2, pid=pid, epoch=epoch + 1, seq=0, txn=True), txn_id)
    assert ahead.error_code == ErrorCode.invalid_producer_epoch
    assert offsets(conn, topic) == (0, 0)
    ok = produce(conn, topic, records(2, pid=pid, epoch=epoch, seq=0, txn=True), txn_id)
    assert ok.error_code == ErrorCode.none
    assert end_txn(conn, txn_id, pid, epoch, commit=True) == ErrorCode.none
    assert offsets(conn, topic) == (3, 3)  # two records and the COMMIT marker, all stable


def test_zombie_after_keep_prepared_cannot_slip_records_into_the_commit(
    conn: RawConnection,
) -> None:
    topic = create_topic(conn)
    txn_id = f"x-{uuid.uuid4().hex[:8]}"
    group = f"g-{uuid.uuid4().hex[:8]}"
    pid, epoch = init(conn, txn_id, enable2_pc=True)
    add_partition(conn, txn_id, pid, epoch, topic)
    assert conn.request(
        AddOffsetsToTxnRequest(
            transactional_id=TransactionalId(txn_id), producer_id=ProducerId(pid),
            producer_epoch=i16(epoch), group_id=GroupId(group),
        )
    ).error_code == ErrorCode.none
    ok = produce(conn, topic, records(2, pid=pid, epoch=epoch, seq=0, txn=True), txn_id)
    assert ok.error_code == ErrorCode.none
    assert txn_offset_commit(conn, txn_id, group, pid, epoch, topic, 5) == ErrorCode.none

    # A new owner takes the prepared transaction over; the old instance is still alive.
    new_pid, new_epoch = init(conn, txn_id, enable2_pc=True, keep_prepared_txn=True)
    assert (new_pid, new_epoch) == (pid, epoch + 1)
    zombie = produce(
        conn, topic, records(3, pid=pid, epoch=epoch, seq=2, txn=True, tag="zombie"), txn_id
    )
    assert zombie.error_code == ErrorCode.invalid_producer_epoch
    assert txn_offset_commit(conn, txn_id, group, pid, epoch, topic, 99) == (
        ErrorCode.invalid_producer_epoch
    )
    assert offsets(conn, topic) == (2, 0)

    assert end_txn(conn, txn_id, new_pid, new_epoch, commit=True) == ErrorCode.none
    # Only the owner's two records and the marker: the zombie's three were never written.
    assert offsets(conn, topic) == (3, 3)
    assert committed_offset(conn, group, topic) == 5
