"""An in-process follower (``ReplicaFetcher`` over a local UnifiedLog in tmp) replicating from
a real single-node ``oncelog serve`` leader over TCP: the fetch protocol with a replica id,
truncation of a divergent suffix against the leader's epochs (OffsetForLeaderEpoch), and a
follower whose producer state, aborted transactions and LSO equal the leader's after
replicating committed and aborted transactions written by confluent-kafka."""

from __future__ import annotations

import asyncio
import datetime
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.describe_producers.v0.request import DescribeProducersRequest, TopicRequest
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.static.primitive import i8, i32, i32Timedelta, i64
from rawkafka import request_once

from oncelog.broker.cluster.replica_fetcher import FetcherConfig, LeaderEndpoint, ReplicaFetcher
from oncelog.broker.partition import Partition
from oncelog.client.aio.connection import BrokerConnection
from oncelog.client.errors import AuthenticationError
from oncelog.clock import SystemClock
from oncelog.cluster.follower import FetchPhase
from oncelog.config import LogConfig
from oncelog.harness.broker import BrokerProcess
from oncelog.records.codec import RecordInput, decode_batch, encode_batch
from oncelog.records.validate import validate_batches
from oncelog.storage.engine import AppendOrigin, IsolationLevel
from oncelog.storage.unified_log import UnifiedLog

pytestmark = pytest.mark.integration

FOLLOWER_ID = 7


def _topic(broker: BrokerProcess) -> str:
    name = f"replicated-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(10)
    return name


def _write_transactions(broker: BrokerProcess, topic: str) -> None:
    """Committed, aborted and committed again, plus an idempotent producer's records."""
    txn = Producer({"bootstrap.servers": broker.bootstrap,
                    "transactional.id": f"t-{uuid.uuid4().hex[:6]}"})
    txn.init_transactions(10)
    for commit in (True, False, True):
        txn.begin_transaction()
        for i in range(3):
            txn.produce(topic, b"txn-%d" % i)
        txn.flush(10)
        if commit:
            txn.commit_transaction(10)
        else:
            txn.abort_transaction(10)
    idempotent = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True})
    for i in range(4):
        idempotent.produce(topic, b"idem-%d" % i)
    assert idempotent.flush(10) == 0


def _leader_fetch(broker: BrokerProcess, topic: str, isolation: int) -> Any:
    resp = request_once(broker.bootstrap, FetchRequest(
        max_wait=i32Timedelta.parse(datetime.timedelta(milliseconds=0)),
        min_bytes=i32(0), isolation_level=i8(isolation), forgotten_topics_data=(), rack_id="",
        topics=(FetchTopic(
            topic=topic,  # type: ignore[arg-type]
            partitions=(FetchPartition(
                partition=i32(0), current_leader_epoch=i32(-1), fetch_offset=i64(0),
                partition_max_bytes=i32(1 << 24)),),
        ),),
    ))
    return resp.responses[0].partitions[0]


def _leader_producers(broker: BrokerProcess, topic: str) -> list[tuple[int, int, int, int]]:
    resp = request_once(broker.bootstrap, DescribeProducersRequest(
        topics=(TopicRequest(name=topic, partition_indexes=(i32(0),)),),  # type: ignore[arg-type]
    ))
    return sorted(
        (int(p.producer_id), int(p.producer_epoch), int(p.last_sequence),
         int(p.current_txn_start_offset))
        for p in resp.topics[0].partitions[0].active_producers
    )


def _follower(tmp_path: Path, topic: str) -> Partition:
    log = UnifiedLog.open(tmp_path / f"{topic}-0", LogConfig(), SystemClock(),
                          auto_high_watermark=False, leader_epoch=None)
    log.become_follower(0)
    return Partition(topic, 0, log)


def _replicate(
    broker: BrokerProcess, partition: Partition, done: Callable[[], bool],
    connect: Callable[[LeaderEndpoint], BrokerConnection] | None = None,
) -> ReplicaFetcher:
    """Run a fetcher for ``partition`` until ``done()`` holds (20 s deadline); ``connect``
    makes its connections (default: the fetcher's own)."""
    return asyncio.run(_replicate_until(broker, partition, done, connect))


async def _replicate_until(
    broker: BrokerProcess, partition: Partition, done: Callable[[], bool],
    connect: Callable[[LeaderEndpoint], BrokerConnection] | None,
) -> ReplicaFetcher:
    host, port = broker.bootstrap.rsplit(":", 1)
    fetcher = ReplicaFetcher(
        local_id=FOLLOWER_ID, leader=LeaderEndpoint(0, host, int(port)),
        config=FetcherConfig(fetch_wait_max_ms=50, fetch_backoff_ms=50), connect=connect,
    )
    fetcher.add_partition(partition, 0)
    task = asyncio.create_task(fetcher.run())
    try:
        async with asyncio.timeout(20):
            while not done():
                assert not task.done(), task
                await asyncio.sleep(0.02)
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    return fetcher


def _producers(partition: Partition) -> list[tuple[int, int, int, int]]:
    return sorted(
        (p.producer_id, p.producer_epoch, p.last_sequence, p.current_txn_start_offset)
        for p in partition.producers()
    )


def test_follower_rebuilds_producer_state_aborted_list_and_lso(
    shared_broker: BrokerProcess, tmp_path: Path
) -> None:
    topic = _topic(shared_broker)
    _write_transactions(shared_broker, topic)
    leader = _leader_fetch(shared_broker, topic, isolation=1)
    leader_end = int(leader.high_watermark)
    follower = _follower(tmp_path, topic)

    fetcher = _replicate(
        shared_broker, follower, lambda: follower.high_watermark == leader_end
    )

    assert fetcher.partitions[(topic, 0)].phase is FetchPhase.FETCHING
    assert follower.log_end_offset == leader_end
    committed = follower.read(0, 1 << 24, IsolationLevel.READ_COMMITTED)
    assert committed.last_stable_offset == int(leader.last_stable_offset)
    assert [(t.producer_id, t.first_offset) for t in committed.aborted or []] == [
        (int(a.producer_id), int(a.first_offset)) for a in leader.aborted_transactions
    ]
    assert committed.aborted, "the aborted transaction is in the follower's index"
    assert _producers(follower) == _leader_producers(shared_broker, topic)
    raw = _leader_fetch(shared_broker, topic, isolation=0)
    assert follower.read(0, 1 << 24, upto_log_end=True).data == bytes(raw.records)


def test_follower_truncates_a_divergent_suffix_to_the_leaders_log(
    shared_broker: BrokerProcess, tmp_path: Path
) -> None:
    """The follower holds the leader's log and then batches of a leader epoch the leader
    never had (an unclean past): OffsetForLeaderEpoch says epoch 1 is unknown there, the
    follower truncates to its high watermark and then fetches the leader's later records."""
    topic = _topic(shared_broker)
    producer = Producer({"bootstrap.servers": shared_broker.bootstrap, "acks": "all"})
    for i in range(5):
        producer.produce(topic, b"a%d" % i)
    assert producer.flush(10) == 0
    follower = _follower(tmp_path, topic)
    _replicate(shared_broker, follower, lambda: follower.high_watermark == 5)
    for _ in range(2):  # the divergent suffix, written under a leader epoch 1
        buf = bytearray(encode_batch(
            [RecordInput(value=b"divergent" * 10)] * 3, base_offset=follower.log_end_offset,
            partition_leader_epoch=1,
        ))
        follower.append(buf, validate_batches(buf, max_batch_bytes=1 << 20),
                        origin=AppendOrigin.REPLICATION)
    assert follower.log_end_offset == 11
    for i in range(4):
        producer.produce(topic, b"b%d" % i)
        assert producer.flush(10) == 0  # one batch each: boundaries differ from the suffix

    _replicate(shared_broker, follower, lambda: follower.high_watermark == 9)

    raw = _leader_fetch(shared_broker, topic, isolation=0)
    assert follower.log_end_offset == 9
    assert follower.read(0, 1 << 24, upto_log_end=True).data == bytes(raw.records)
    assert [(e.epoch, e.start_offset) for e in follower.log.epochs.entries] == [(0, 0)]


class _RefusedLogin(BrokerConnection):
    """A connection whose login the leader refuses (wrong inter-broker credentials)."""

    async def connect(self) -> None:
        raise AuthenticationError("SASL_AUTHENTICATION_FAILED: Authentication failed")


def test_a_refused_login_is_retried_not_the_end_of_the_fetcher(
    shared_broker: BrokerProcess, tmp_path: Path
) -> None:
    topic = _topic(shared_broker)
    _write_transactions(shared_broker, topic)
    leader_end = int(_leader_fetch(shared_broker, topic, isolation=1).high_watermark)
    follower = _follower(tmp_path, topic)
    attempts: list[LeaderEndpoint] = []

    def connect(leader: LeaderEndpoint) -> BrokerConnection:
        attempts.append(leader)
        cls = _RefusedLogin if len(attempts) <= 2 else BrokerConnection
        return cls(leader.host, leader.port, node_id=leader.node_id)

    _replicate(shared_broker, follower, lambda: follower.high_watermark == leader_end,
               connect)
    assert len(attempts) >= 3, "the refused logins were retried"
    assert follower.log_end_offset == leader_end


def test_a_follower_behind_the_leaders_log_start_starts_over_there(
    shared_broker: BrokerProcess, tmp_path: Path
) -> None:
    """The leader deleted records below offset 6 while the follower was away: its fetch at
    0 is OFFSET_OUT_OF_RANGE, it asks the leader for its log start and end (ListOffsets as a
    replica) and starts over at 6, empty, with the leader's records from there."""
    topic = _topic(shared_broker)
    producer = Producer({"bootstrap.servers": shared_broker.bootstrap, "acks": "all"})
    for i in range(10):
        producer.produce(topic, b"r%d" % i)
        assert producer.flush(10) == 0
    admin = AdminClient({"bootstrap.servers": shared_broker.bootstrap})
    deleted = admin.delete_records([TopicPartition(topic, 0, 6)])
    next(iter(deleted.values())).result(10)
    follower = _follower(tmp_path, topic)

    _replicate(shared_broker, follower, lambda: follower.log_end_offset == 10)

    assert follower.log_start_offset == 6
    values = [r.value for r in _records(follower.read(6, 1 << 24, upto_log_end=True).data)]
    assert values == [b"r%d" % i for i in range(6, 10)]


def _records(data: bytes) -> list[Any]:
    buf = bytearray(data)
    out: list[Any] = []
    pos = 0
    for header in validate_batches(buf, max_batch_bytes=1 << 24, allow_control=True):
        out.extend(decode_batch(buf, pos)[1])
        pos += header.batch_length + 12
    return out
