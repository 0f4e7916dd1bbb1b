"""Leader epochs against a real ``oncelog serve`` (a single node leads epoch 0): stored in
every batch, answered by OffsetForLeaderEpoch (KIP-101), checked on Fetch, ListOffsets and
OffsetForLeaderEpoch (KIP-320: FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH), and real clients
that send their leader epochs (librdkafka, kafka-python) consume as before."""

from __future__ import annotations

import datetime
import uuid
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer
from kafka import TopicPartition as KafkaTopicPartition
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.list_offsets.v8.request import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsTopic,
)
from kio.schema.offset_for_leader_epoch.v4.request import (
    OffsetForLeaderEpochRequest,
    OffsetForLeaderPartition,
    OffsetForLeaderTopic,
)
from kio.static.primitive import i8, i32, i32Timedelta, i64
from rawkafka import request_once

from oncelog.harness.broker import BrokerProcess

pytestmark = pytest.mark.integration

RECORDS = 10


@pytest.fixture
def topic(shared_broker: BrokerProcess) -> str:
    name = f"epochs-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": shared_broker.bootstrap})
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(10)
    producer = Producer({"bootstrap.servers": shared_broker.bootstrap, "acks": "all"})
    for i in range(RECORDS):
        producer.produce(name, b"v%d" % i)
    assert producer.flush(10) == 0
    return name


def offset_for_epoch(bootstrap: str, topic: str, epoch: int, current: int = -1,
                     partition: int = 0) -> Any:
    resp = request_once(bootstrap, OffsetForLeaderEpochRequest(
        replica_id=i32(-1),  # type: ignore[arg-type]
        topics=(OffsetForLeaderTopic(
            topic=topic,  # type: ignore[arg-type]
            partitions=(OffsetForLeaderPartition(
                partition=i32(partition), current_leader_epoch=i32(current),
                leader_epoch=i32(epoch)),),
        ),),
    ))
    return resp.topics[0].partitions[0]


def fetch(bootstrap: str, topic: str, current: int) -> Any:
    resp = request_once(bootstrap, FetchRequest(
        max_wait=i32Timedelta.parse(datetime.timedelta(milliseconds=0)),
        min_bytes=i32(0), isolation_level=i8(0), forgotten_topics_data=(), rack_id="",
        topics=(FetchTopic(
            topic=topic,  # type: ignore[arg-type]
            partitions=(FetchPartition(
                partition=i32(0), current_leader_epoch=i32(current), fetch_offset=i64(0),
                partition_max_bytes=i32(1 << 20)),),
        ),),
    ))
    return resp.responses[0].partitions[0]


def list_latest(bootstrap: str, topic: str, current: int) -> Any:
    resp = request_once(bootstrap, ListOffsetsRequest(
        replica_id=i32(-1),  # type: ignore[arg-type]
        isolation_level=i8(0),
        topics=(ListOffsetsTopic(
            name=topic,  # type: ignore[arg-type]
            partitions=(ListOffsetsPartition(
                partition_index=i32(0), current_leader_epoch=i32(current),
                timestamp=i64(-1)),),
        ),),
    ))
    return resp.topics[0].partitions[0]


def test_offset_for_leader_epoch(shared_broker: BrokerProcess, topic: str) -> None:
    bootstrap = shared_broker.bootstrap
    latest = offset_for_epoch(bootstrap, topic, 0)
    assert (latest.error_code, latest.leader_epoch, latest.end_offset) == (
        ErrorCode.none, 0, RECORDS)
    above = offset_for_epoch(bootstrap, topic, 3)
    assert (above.error_code, above.leader_epoch, above.end_offset) == (ErrorCode.none, -1, -1)
    assert offset_for_epoch(bootstrap, topic, 0, current=0).error_code == ErrorCode.none
    assert offset_for_epoch(bootstrap, topic, 0, current=1).error_code == (
        ErrorCode.unknown_leader_epoch)
    assert offset_for_epoch(bootstrap, topic, 0, current=-2).error_code == (
        ErrorCode.fenced_leader_epoch)
    assert offset_for_epoch(bootstrap, topic, 0, partition=7).error_code == (
        ErrorCode.unknown_topic_or_partition)


def test_fetch_and_list_offsets_check_the_current_leader_epoch(
    shared_broker: BrokerProcess, topic: str
) -> None:
    bootstrap = shared_broker.bootstrap
    ok = fetch(bootstrap, topic, 0)
    assert ok.error_code == ErrorCode.none and ok.high_watermark == RECORDS and ok.records
    unknown = fetch(bootstrap, topic, 1)
    assert unknown.error_code == ErrorCode.unknown_leader_epoch and not unknown.records
    assert fetch(bootstrap, topic, -2).error_code == ErrorCode.fenced_leader_epoch

    listed = list_latest(bootstrap, topic, 0)
    assert (listed.error_code, listed.offset, listed.leader_epoch) == (
        ErrorCode.none, RECORDS, 0)
    assert list_latest(bootstrap, topic, 1).error_code == ErrorCode.unknown_leader_epoch
    assert list_latest(bootstrap, topic, -2).error_code == ErrorCode.fenced_leader_epoch


def test_clients_sending_leader_epochs_consume_normally(
    shared_broker: BrokerProcess, topic: str
) -> None:
    bootstrap = shared_broker.bootstrap
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{topic}",
                         "enable.auto.commit": False})
    try:
        # A committed offset with its leader epoch makes librdkafka validate the position
        # with OffsetForLeaderEpoch (KIP-320) before fetching.
        consumer.commit(offsets=[TopicPartition(topic, 0, 3, leader_epoch=0)],
                        asynchronous=False)
        consumer.assign([TopicPartition(topic, 0)])
        values: list[bytes] = []
        for _ in range(100):
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                values.append(msg.value() or b"")
                assert msg.leader_epoch() == 0
            if len(values) == RECORDS - 3:
                break
        assert values == [b"v%d" % i for i in range(3, RECORDS)]
    finally:
        consumer.close()

    kp = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                       consumer_timeout_ms=10_000)
    try:
        partition = KafkaTopicPartition(topic, 0)
        kp.assign([partition])
        kp.seek_to_beginning(partition)
        got: list[bytes] = []
        for record in kp:
            got.append(record.value)
            if len(got) == RECORDS:
                break
        assert got == [b"v%d" % i for i in range(RECORDS)]
    finally:
        kp.close()
