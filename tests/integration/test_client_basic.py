"""oncelog.client against a real ``oncelog serve``: produce, consume, admin, positions."""

from __future__ import annotations

import time

import pytest

from oncelog.client import Admin, Consumer, NewTopic, Producer, TopicPartition
from oncelog.client.errors import (
    IllegalStateError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from oncelog.client.types import Message
from oncelog.harness.broker import BrokerProcess
from tests.support.names import unique_topic

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topic(topic, partitions)


def consume_all(consumer: Consumer, expected: int, timeout: float = 30.0) -> list[Message]:
    got: list[Message] = []
    deadline = time.monotonic() + timeout
    while len(got) < expected and time.monotonic() < deadline:
        got.extend(consumer.poll(0.5))
    return got


@pytest.mark.parametrize("codec", CODECS)
def test_round_trip_with_each_codec(shared_broker: BrokerProcess, codec: str) -> None:
    topic = unique_topic(f"rt-{codec}")
    create_topic(shared_broker.bootstrap, topic, 3)
    with Producer(
        {"bootstrap.servers": shared_broker.bootstrap, "compression.type": codec}
    ) as producer:
        futures = [
            producer.send(
                topic,
                f"value-{i}".encode() * 10,
                key=f"k{i % 13}".encode(),
                headers=[("i", str(i).encode()), ("empty", None)],
            )
            for i in range(500)
        ]
        assert producer.flush(30) == 0
        metas = [f.result() for f in futures]
    assert producer.producer_id >= 0  # idempotent by default
    # Offsets are dense per partition, in send order.
    by_partition: dict[int, list[int]] = {}
    for meta in metas:
        by_partition.setdefault(meta.partition, []).append(meta.offset)
    for offsets in by_partition.values():
        assert offsets == list(range(len(offsets)))

    with Consumer(
        {"bootstrap.servers": shared_broker.bootstrap, "auto.offset.reset": "earliest"}
    ) as consumer:
        consumer.assign([TopicPartition(topic, p) for p in range(3)])
        got = consume_all(consumer, 500)
    assert len(got) == 500
    values = sorted(m.value or b"" for m in got)
    assert values == sorted(f"value-{i}".encode() * 10 for i in range(500))
    one = next(m for m in got if m.value == b"value-7" * 10)
    assert one.key == b"k7"
    assert one.headers == (("i", b"7"), ("empty", None))
    sent = {(m.partition, m.offset) for m in metas}
    assert {(m.partition, m.offset) for m in got} == sent


def test_delivery_callback_and_explicit_partition(shared_broker: BrokerProcess) -> None:
    topic = unique_topic("cb")
    create_topic(shared_broker.bootstrap, topic, 2)
    seen: list[tuple[object, object]] = []
    with Producer({"bootstrap.servers": shared_broker.bootstrap, "linger.ms": 0}) as producer:
        future = producer.send(
            topic,
            b"v",
            partition=1,
            timestamp=1_600_000_000_000,
            on_delivery=lambda err, meta: seen.append((err, meta)),
        )
        meta = future.result(30)
        producer.flush(10)
    assert (meta.topic, meta.partition, meta.offset, meta.timestamp) == (
        topic,
        1,
        0,
        1_600_000_000_000,
    )
    assert seen == [(None, meta)]


def test_seek_position_and_offsets(shared_broker: BrokerProcess) -> None:
    topic = unique_topic("seek")
    create_topic(shared_broker.bootstrap, topic, 1)
    tp = TopicPartition(topic, 0)
    with Producer({"bootstrap.servers": shared_broker.bootstrap}) as producer:
        for i in range(10):
            producer.send(topic, str(i).encode())
        producer.flush(30)
    with Consumer(
        {"bootstrap.servers": shared_broker.bootstrap, "auto.offset.reset": "latest"}
    ) as consumer:
        consumer.assign([tp])
        assert consumer.position(tp) == 10  # latest
        consumer.seek(tp, 4)
        assert consumer.position(tp) == 4
        got = consume_all(consumer, 6)
        assert [m.offset for m in got] == [4, 5, 6, 7, 8, 9]
        assert consumer.position(tp) == 10
        consumer.seek_to_beginning()
        assert consumer.position(tp) == 0
        consumer.seek_to_end([tp])
        assert consumer.position(tp) == 10
        assert consumer.end_offsets([tp]) == {tp: 10}
        assert consumer.beginning_offsets([tp]) == {tp: 0}
        with pytest.raises(IllegalStateError):
            consumer.seek(TopicPartition(topic, 5), 0)


def test_admin_topics(shared_broker: BrokerProcess) -> None:
    topic = unique_topic("admin")
    with Admin({"bootstrap.servers": shared_broker.bootstrap}) as admin:
        assert admin.create_topics([NewTopic(topic, 4)]) == {topic: None}
        assert admin.list_topics()[topic] == 4
        errors = admin.create_topics([NewTopic(topic, 4)])
        assert isinstance(errors[topic], TopicAlreadyExistsError)
        assert admin.delete_topics([topic]) == {topic: None}
        assert topic not in admin.list_topics()
        # Aborting a hanging transaction on a topic that no longer exists names the error
        # (and does not auto-create the topic).
        with pytest.raises(UnknownTopicOrPartitionError):
            admin.abort_transaction(TopicPartition(topic, 0), 1, 0, 0)
        assert topic not in admin.list_topics()


def test_describe_producers_shows_the_idempotent_producer(shared_broker: BrokerProcess) -> None:
    topic = unique_topic("producers")
    create_topic(shared_broker.bootstrap, topic, 1)
    with Producer({"bootstrap.servers": shared_broker.bootstrap}) as producer:
        for _ in range(3):
            producer.send(topic, b"x", partition=0)
        producer.flush(30)
        pid = producer.producer_id
    with Admin({"bootstrap.servers": shared_broker.bootstrap}) as admin:
        states = admin.describe_producers([TopicPartition(topic, 0)])[TopicPartition(topic, 0)]
    assert [(s.producer_id, s.last_sequence) for s in states] == [(pid, 2)]


def test_producer_without_idempotence_and_acks_1(shared_broker: BrokerProcess) -> None:
    topic = unique_topic("acks1")
    create_topic(shared_broker.bootstrap, topic, 1)
    with Producer({"bootstrap.servers": shared_broker.bootstrap, "acks": 1}) as producer:
        meta = producer.send(topic, b"x").result(30)
        assert producer.producer_id == -1
    assert meta.offset == 0


def test_unreachable_broker_times_out(tmp_path: object) -> None:
    from oncelog.harness.net import free_port

    producer = Producer(
        {
            "bootstrap.servers": f"127.0.0.1:{free_port()}",
            "max.block.ms": 1000,
            "socket.connection.setup.timeout.ms": 200,
        }
    )
    try:
        future = producer.send("nowhere", b"x")
        with pytest.raises(Exception) as info:
            future.result(10)
        assert "within 1000 ms" in str(info.value)
    finally:
        producer.close(1)
