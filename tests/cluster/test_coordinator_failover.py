"""The transaction coordinator moves with its ``__transaction_state`` partition: kill -9 the
broker leading it between two transactions, and the producer's next transaction commits
against the new leader, which loaded the partition from its replica."""

from __future__ import annotations

from collections.abc import Callable

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from oncelog.coordinator.transaction import transaction_log_partition
from oncelog.harness.cluster import ClusterProcess, MetadataView
from oncelog.internal_topics import TRANSACTION_STATE_TOPIC

TOPIC = "payments"
TXN_ID = "coordmove-1"
TXN_PARTITIONS = 3


ClusterFactory = Callable[..., ClusterProcess]


def led(topic: str, partitions: int) -> Callable[[MetadataView], bool]:
    def check(m: MetadataView) -> bool:
        parts = m.topics.get(topic, {})
        return len(parts) == partitions and all(
            p.leader > 0 and len(p.isr) == 3 for p in parts.values())
    return check


def read_committed(bootstrap: str, expected: int) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "coordmove",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "isolation.level": "read_committed"})
    consumer.subscribe([TOPIC])
    seen: list[bytes] = []
    try:
        for _ in range(120):
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                seen.append(bytes(msg.value() or b""))
            if len(seen) >= expected:
                break
    finally:
        consumer.close()
    return seen


def test_next_transaction_commits_on_the_new_coordinator(cluster_factory: ClusterFactory
                                                         ) -> None:
    cluster = cluster_factory(configs={"transaction.state.log.num.partitions": TXN_PARTITIONS,
                                       "offsets.topic.num.partitions": 3})
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(TOPIC, 1, 3)])[TOPIC].result(timeout=30)
    cluster.wait_until(led(TOPIC, 1), "the topic led")
    before = cluster.wait_until(led(TRANSACTION_STATE_TOPIC, TXN_PARTITIONS),
                                "__transaction_state led")
    index = transaction_log_partition(TXN_ID, TXN_PARTITIONS)
    coordinator = before.topics[TRANSACTION_STATE_TOPIC][index].leader

    producer = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": TXN_ID,
                         "transaction.timeout.ms": 60000})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(TOPIC, value=b"first")
    producer.commit_transaction(30)

    cluster.kill(coordinator)
    cluster.wait_until(
        lambda m: coordinator not in m.brokers
        and m.topics[TRANSACTION_STATE_TOPIC][index].leader not in (coordinator, -1),
        "the coordinator's partition moved")

    producer.begin_transaction()
    producer.produce(TOPIC, value=b"second")
    producer.commit_transaction(60)
    assert sorted(read_committed(cluster.bootstrap, 2)) == [b"first", b"second"]
