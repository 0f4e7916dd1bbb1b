"""oncelog.client against a 3-broker cluster: its producers (idempotent acks=all, and
transactional) and its consumer (a group member reading read_committed) ride through a
kill -9 of the broker that leads the data partition *and* coordinates the transactional id
(both moves at once): nothing acknowledged is lost, nothing is written twice, the next
transaction commits on the new coordinator, and the same consumer goes on from where it was.
The consumer's group is coordinated by that broker too: the group moves with its
``__consumer_offsets`` partition, and the consumer's offsets commit lands on the new
coordinator."""

from __future__ import annotations

import time
from collections.abc import Callable

from oncelog.broker.cluster_view import coordinator_partition
from oncelog.client import Admin, Consumer, Producer, TopicPartition
from oncelog.client.errors import KafkaClientError
from oncelog.client.types import Message
from oncelog.harness.cluster import ClusterProcess, MetadataView
from oncelog.internal_topics import OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC
from tests.support.names import unique_name

ClusterFactory = Callable[..., ClusterProcess]
INTERNAL_PARTITIONS = 3


def in_sync(topic: str) -> Callable[[MetadataView], bool]:
    def check(m: MetadataView) -> bool:
        parts = m.topics.get(topic, {})
        return bool(parts) and all(p.leader > 0 and len(p.isr) == 3 for p in parts.values())

    return check


def pick(prefix: str, partition_of: Callable[[str], int], leaders: dict[int, int],
         wanted: Callable[[int], bool]) -> str:
    """The first ``prefix-N`` whose internal partition is led by a broker ``wanted`` accepts."""
    for i in range(100):
        key = f"{prefix}-{i}"
        if wanted(leaders[partition_of(key)]):
            return key
    raise AssertionError(f"no {prefix}-N coordinated where wanted (leaders {leaders})")


def send_all(producer: Producer, topic: str, values: list[bytes]) -> list[KafkaClientError]:
    errors: list[KafkaClientError] = []

    def delivered(error: KafkaClientError | None, _: object) -> None:
        if error is not None:
            errors.append(error)

    for value in values:
        producer.send(topic, value, key=b"k", on_delivery=delivered)
    assert producer.flush(90) == 0, "records not acknowledged within 90 s"
    return errors


def consume(consumer: Consumer, count: int, seen: list[Message], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while len(seen) < count:
        assert time.monotonic() < deadline, f"{len(seen)} of {count} records within {timeout} s"
        seen.extend(consumer.poll(0.5))


def values(batch: str) -> list[bytes]:
    return [f"{batch}{i}".encode() for i in range(10)]


def test_producers_and_consumer_ride_through_a_leader_and_coordinator_kill(
    cluster_factory: ClusterFactory,
) -> None:
    cluster = cluster_factory(configs={
        "transaction.state.log.num.partitions": INTERNAL_PARTITIONS,
        "offsets.topic.num.partitions": INTERNAL_PARTITIONS,
        "group.initial.rebalance.delay.ms": 0,
    })  # fmt: skip
    topic = unique_name("failover")
    bootstrap = cluster.bootstrap
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topic(topic, 1, 3, {"min.insync.replicas": "2"})
    meta = cluster.wait_until(in_sync(topic), f"{topic} in sync")
    meta = cluster.wait_until(
        lambda m: in_sync(TRANSACTION_STATE_TOPIC)(m) and in_sync(OFFSETS_TOPIC)(m),
        "internal topics in sync",
    )
    victim = meta.topics[topic][0].leader
    txn_id = pick("failover-txn", lambda k: coordinator_partition(INTERNAL_PARTITIONS, k),
                  meta.leaders(TRANSACTION_STATE_TOPIC), lambda leader: leader == victim)
    group = pick("failover-group",
                 lambda k: coordinator_partition(INTERNAL_PARTITIONS, k),
                 meta.leaders(OFFSETS_TOPIC), lambda leader: leader == victim)

    idempotent = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                           "acks": "all", "delivery.timeout.ms": 120000})
    transactional = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id,
                              "transaction.timeout.ms": 60000})
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "isolation.level": "read_committed", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    try:
        transactional.init_transactions()
        transactional.begin_transaction()
        assert send_all(transactional, topic, values("a")) == []
        transactional.commit_transaction()
        assert send_all(idempotent, topic, values("b")) == []
        consumer.subscribe([topic])
        seen: list[Message] = []
        consume(consumer, 20, seen)
        consumer.commit()  # to the group's coordinator, the broker killed next

        cluster.kill(victim)
        cluster.wait_until(
            lambda m: victim not in m.brokers and m.topics[topic][0].leader not in (victim, -1),
            f"{topic} led by another broker than {victim}",
        )
        transactional.begin_transaction()
        assert send_all(transactional, topic, values("c")) == []
        transactional.commit_transaction(90)
        assert send_all(idempotent, topic, values("d")) == []
        consume(consumer, 40, seen)
        consumer.commit()  # to the group's new coordinator
        tp = TopicPartition(topic, 0)
        committed = consumer.committed([tp])[tp]
        assert committed is not None and committed.offset == consumer.position(tp)
    finally:
        for client in (idempotent, transactional, consumer):
            client.close()
    got = [m.value or b"" for m in seen]
    assert sorted(got) == sorted(values("a") + values("b") + values("c") + values("d")), got
    assert [m.offset for m in seen] == sorted(m.offset for m in seen)  # in offset order

