"""Transactions v2 (KIP-890 part 2) and v1 with real clients: a broker with
``transaction.version`` 2 (the default) and one configured down to 1.

oncelog.client speaks v2 when the broker finalizes it (no AddPartitionsToTxn, Produce v12,
EndTxn v5 with an epoch bump per transaction) and v1 otherwise; confluent-kafka (librdkafka
2.x, which speaks transactions v1 only) keeps working with both.
"""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer as CKConsumer
from confluent_kafka import Producer as CKProducer
from confluent_kafka import TopicPartition as CKTopicPartition

from oncelog.client import Admin, Consumer, Producer, TopicPartition
from oncelog.harness.broker import BrokerProcess
from tests.support.names import unique_name, unique_topic

pytestmark = pytest.mark.integration

PARTITIONS = 2


@pytest.fixture(params=[2, 1], ids=["tv2", "tv1"])
def tv_broker(request: pytest.FixtureRequest, broker_factory: object) -> tuple[int, BrokerProcess]:
    level = int(request.param)
    return level, broker_factory(configs={"transaction.version": level})  # type: ignore[operator]


def make_topic(bootstrap: str) -> str:
    topic = unique_topic("txv2")
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topic(topic, PARTITIONS)
    return topic


def committed_values(bootstrap: str, topic: str, expected: int) -> list[bytes]:
    """The read_committed values of ``topic`` once ``expected`` have arrived (30 s)."""
    config = {"bootstrap.servers": bootstrap, "auto.offset.reset": "earliest",
              "isolation.level": "read_committed"}
    got: list[bytes] = []
    with Consumer(config) as consumer:
        consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
        for _ in range(150):
            got.extend(m.value or b"" for m in consumer.poll(0.2))
            if len(got) >= expected:
                break
    return sorted(got)


def test_oncelog_client_commit_and_abort(tv_broker: tuple[int, BrokerProcess]) -> None:
    level, broker = tv_broker
    topic = make_topic(broker.bootstrap)
    config = {"bootstrap.servers": broker.bootstrap, "transactional.id": unique_name("tx")}
    with Producer(config) as producer:
        producer.init_transactions()
        first_epoch = producer.producer_epoch
        for outcome in ("commit", "abort", "commit"):
            producer.begin_transaction()
            for p in range(PARTITIONS):
                producer.send(topic, f"{outcome}-{p}-{producer.producer_epoch}".encode(),
                              partition=p)
            if outcome == "commit":
                producer.commit_transaction()
            else:
                producer.flush(30)
                producer.abort_transaction()
        # Transactions v2 bumps the epoch at every EndTxn; v1 keeps it.
        assert producer.producer_epoch == first_epoch + (3 if level >= 2 else 0)
    step = 1 if level >= 2 else 0
    assert committed_values(broker.bootstrap, topic, 4) == sorted(
        f"commit-{p}-{first_epoch + n * step}".encode()
        for n in (0, 2) for p in range(PARTITIONS)
    )


def test_confluent_kafka_commit_and_abort(tv_broker: tuple[int, BrokerProcess]) -> None:
    _, broker = tv_broker
    topic = make_topic(broker.bootstrap)
    producer = CKProducer({"bootstrap.servers": broker.bootstrap,
                           "transactional.id": unique_name("ck")})
    producer.init_transactions(30)
    for outcome in ("commit", "abort", "commit-again"):
        producer.begin_transaction()
        for p in range(PARTITIONS):
            producer.produce(topic, f"{outcome}-{p}".encode(), partition=p)
        if outcome == "abort":
            producer.flush(30)
            producer.abort_transaction(30)
        else:
            producer.commit_transaction(30)
    consumer = CKConsumer({"bootstrap.servers": broker.bootstrap, "group.id": unique_name("g"),
                           "isolation.level": "read_committed",
                           "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        consumer.assign([CKTopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        got: list[bytes] = []
        for _ in range(60):
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                got.append(message.value() or b"")
            if len(got) >= 4:
                break
    finally:
        consumer.close()
    assert sorted(got) == sorted(
        f"{o}-{p}".encode() for o in ("commit", "commit-again") for p in range(PARTITIONS)
    )
