"""Interop both ways with confluent-kafka (librdkafka) and kafka-python on a real broker:
the same key lands on the same partition, and each reads what the other wrote."""

from __future__ import annotations

import time

import pytest

from oncelog.client import Admin, Consumer, Producer, TopicPartition
from oncelog.client.partitioner import partition_for_key
from oncelog.harness.broker import BrokerProcess
from tests.support.names import unique_group, unique_topic

PARTITIONS = 7
KEYS = [f"key-{i}".encode() for i in range(60)] + [b"", b"\x00\xff", "ключ".encode()]


def make_topic(bootstrap: str, prefix: str) -> str:
    topic = unique_topic(prefix)
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topic(topic, PARTITIONS)
    return topic


def oncelog_produce(bootstrap: str, topic: str) -> dict[bytes, int]:
    with Producer({"bootstrap.servers": bootstrap}) as producer:
        futures = {key: producer.send(topic, b"from-oncelog:" + key, key=key) for key in KEYS}
        producer.flush(30)
        return {key: f.result().partition for key, f in futures.items()}


def confluent_produce(bootstrap: str, topic: str) -> dict[bytes, int]:
    from confluent_kafka import Producer as CProducer

    producer = CProducer({"bootstrap.servers": bootstrap, "partitioner": "murmur2_random"})
    result: dict[bytes, int] = {}

    def report(err: object, msg: object) -> None:
        assert err is None, err
        result[msg.key()] = msg.partition()  # type: ignore[attr-defined]

    for key in KEYS:
        producer.produce(topic, value=b"from-confluent:" + key, key=key, on_delivery=report)
    assert producer.flush(30) == 0
    return result


def kafka_python_produce(bootstrap: str, topic: str) -> dict[bytes, int]:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap)
    try:
        futures = {
            key: producer.send(topic, value=b"from-kafka-python:" + key, key=key) for key in KEYS
        }
        producer.flush(30)
        return {key: f.get(30).partition for key, f in futures.items()}
    finally:
        producer.close()


def oncelog_read(bootstrap: str, topic: str, expected: int) -> dict[bytes, int]:
    got: dict[bytes, int] = {}
    with Consumer({"bootstrap.servers": bootstrap, "auto.offset.reset": "earliest"}) as consumer:
        consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
        deadline = time.monotonic() + 30
        while len(got) < expected and time.monotonic() < deadline:
            for m in consumer.poll(0.5):
                assert m.key is not None and m.value is not None
                got[m.key] = m.partition
                assert m.value.endswith(m.key)
    return got


def confluent_read(bootstrap: str, topic: str, expected: int) -> dict[bytes, int]:
    from confluent_kafka import Consumer as CConsumer

    consumer = CConsumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": unique_group("c"),
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    got: dict[bytes, int] = {}
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 60
        while len(got) < expected and time.monotonic() < deadline:
            for m in consumer.consume(100, 0.5):
                if m.error():
                    continue
                key, partition = m.key(), m.partition()
                assert key is not None and partition is not None
                got[key] = partition
                assert m.value() == b"from-oncelog:" + key
    finally:
        consumer.close()
    return got


def kafka_python_read(bootstrap: str, topic: str, expected: int) -> dict[bytes, int]:
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        group_id=None,
        consumer_timeout_ms=1000,
        isolation_level="read_committed",
    )
    got: dict[bytes, int] = {}
    try:
        deadline = time.monotonic() + 60
        while len(got) < expected and time.monotonic() < deadline:
            for batch in consumer.poll(500).values():
                for m in batch:
                    got[m.key] = m.partition
                    assert m.value == b"from-oncelog:" + m.key
    finally:
        consumer.close()
    return got


def test_partitions_agree_with_the_java_formula(shared_broker: BrokerProcess) -> None:
    topic = make_topic(shared_broker.bootstrap, "formula")
    ours = oncelog_produce(shared_broker.bootstrap, topic)
    assert ours == {key: partition_for_key(key, PARTITIONS) for key in KEYS}


@pytest.mark.parametrize("other", ["confluent", "kafka-python"])
def test_same_key_same_partition_as_other_clients(shared_broker: BrokerProcess, other: str) -> None:
    topic = make_topic(shared_broker.bootstrap, f"keys-{other}")
    ours = oncelog_produce(shared_broker.bootstrap, topic)
    produce = confluent_produce if other == "confluent" else kafka_python_produce
    theirs = produce(shared_broker.bootstrap, topic)
    assert theirs == ours


@pytest.mark.parametrize("other", ["confluent", "kafka-python"])
def test_others_read_what_oncelog_wrote(shared_broker: BrokerProcess, other: str) -> None:
    topic = make_topic(shared_broker.bootstrap, f"o2x-{other}")
    ours = oncelog_produce(shared_broker.bootstrap, topic)
    read = confluent_read if other == "confluent" else kafka_python_read
    assert read(shared_broker.bootstrap, topic, len(KEYS)) == ours


@pytest.mark.parametrize("other", ["confluent", "kafka-python"])
def test_oncelog_reads_what_others_wrote(shared_broker: BrokerProcess, other: str) -> None:
    topic = make_topic(shared_broker.bootstrap, f"x2o-{other}")
    produce = confluent_produce if other == "confluent" else kafka_python_produce
    theirs = produce(shared_broker.bootstrap, topic)
    assert oncelog_read(shared_broker.bootstrap, topic, len(KEYS)) == theirs
