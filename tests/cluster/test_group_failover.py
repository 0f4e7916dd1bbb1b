"""The group coordinator moves with its ``__consumer_offsets`` partition.

- kill -9 the broker leading a consumer group's offsets partition: the consumer finds the
  coordinator again on the new leader, which loaded the partition from its replica; the
  committed offsets survive (OffsetFetch), the member keeps consuming and committing, and a
  new consumer of the group starts exactly at the last commit.
- consume-transform-produce with the group's coordinator on another broker than the
  transaction coordinator: the offsets sent to an aborted transaction never become the
  group's, those of a committed one do once it commits (its markers reach the group's
  broker by WriteTxnMarkers).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from oncelog.coordinator.group import codec
from oncelog.coordinator.transaction import transaction_log_partition
from oncelog.harness.cluster import ClusterProcess
from oncelog.internal_topics import OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC
from tests.support.replicated import in_sync

ClusterFactory = Callable[..., ClusterProcess]
INTERNAL_PARTITIONS = 3
CONFIGS = {"offsets.topic.num.partitions": INTERNAL_PARTITIONS,
           "transaction.state.log.num.partitions": INTERNAL_PARTITIONS}
NO_OFFSET = -1001  # librdkafka's OFFSET_INVALID: nothing committed


def start(cluster_factory: ClusterFactory) -> ClusterProcess:
    cluster = cluster_factory(configs=CONFIGS)
    cluster.wait_until(
        lambda m: all(in_sync(m, t, INTERNAL_PARTITIONS, 3)
                      for t in (OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC)),
        "the internal topics in sync")
    return cluster


def create_topic(cluster: ClusterProcess, name: str, leader: int, records: int) -> None:
    """A one-partition rf=3 topic led by ``leader``, holding b"0".. acknowledged by all."""
    others = [n for n in sorted(cluster.brokers) if n != leader]
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})  # alive until the result
    admin.create_topics(
        [NewTopic(name, 1, replica_assignment=[[leader, *others]])])[name].result(timeout=30)
    cluster.wait_until(lambda m: in_sync(m, name, 1, 3), f"{name} in sync")
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for i in range(records):
        producer.produce(name, str(i).encode())
    assert producer.flush(30) == 0


def offsets_leader(cluster: ClusterProcess, group: str) -> int:
    index = codec.partition_for(group, INTERNAL_PARTITIONS)
    return cluster.metadata().topics[OFFSETS_TOPIC][index].leader


def committed(cluster: ClusterProcess, group: str, topic: str, *, stable: bool = False) -> int:
    """The group's committed offset of ``topic``-0 by OffsetFetch; ``stable``: with
    require_stable (a read_committed consumer's), which librdkafka retries while offsets
    of an open transaction are pending (UNSTABLE_OFFSET_COMMIT)."""
    probe = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group,
                      "enable.auto.commit": False,
                      "isolation.level": "read_committed" if stable else "read_uncommitted"})
    try:
        [tp] = probe.committed([TopicPartition(topic, 0)], timeout=30)
        return int(tp.offset)
    finally:
        probe.close()


def wait_replicated_commit(cluster: ClusterProcess, group: str, topic: str,
                           offset: int) -> None:
    """Until the commit of ``offset`` is below the offsets partition's high watermark
    (every ISR replica has it): the kill comes only after that."""
    reader = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "probe",
                       "enable.auto.commit": False})
    index = codec.partition_for(group, INTERNAL_PARTITIONS)
    reader.assign([TopicPartition(OFFSETS_TOPIC, index, 0)])
    wanted = codec.OffsetCommitKey(group, topic, 0)
    deadline = time.monotonic() + 30
    try:
        while time.monotonic() < deadline:
            message = reader.poll(1)
            value = None if message is None or message.error() else message.value()
            if message is None or value is None:
                continue
            key = codec.decode_key(message.key() or b"")
            if key == wanted and codec.decode_offset_value(value).offset == offset:
                return
    finally:
        reader.close()
    raise AssertionError(f"the commit of {offset} by {group} was not replicated within 30 s")


def poll_values(consumer: Consumer, count: int, timeout: float = 60) -> list[int]:
    values: list[int] = []
    deadline = time.monotonic() + timeout
    while len(values) < count and time.monotonic() < deadline:
        message: Message | None = consumer.poll(0.5)
        if message is None:
            continue
        error = message.error()
        assert error is None or error.code() == KafkaError._PARTITION_EOF, error
        if error is None:
            values.append(int(message.value() or b""))
    assert len(values) == count, f"consumed {len(values)} of {count}"
    return values


def test_group_finds_its_coordinator_on_the_new_leader(cluster_factory: ClusterFactory) -> None:
    cluster = start(cluster_factory)
    group, topic = "groupmove-1", "events"
    coordinator = offsets_leader(cluster, group)
    create_topic(cluster, topic, leader=next(n for n in cluster.brokers if n != coordinator),
                 records=100)

    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group,
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "session.timeout.ms": 30000, "max.poll.interval.ms": 120000})
    consumer.subscribe([topic])
    try:
        assert poll_values(consumer, 40) == list(range(40))
        consumer.commit(offsets=[TopicPartition(topic, 0, 40)], asynchronous=False)
        wait_replicated_commit(cluster, group, topic, 40)

        cluster.kill(coordinator)
        index = codec.partition_for(group, INTERNAL_PARTITIONS)
        cluster.wait_until(
            lambda m: coordinator not in m.brokers
            and m.topics[OFFSETS_TOPIC][index].leader not in (coordinator, -1),
            "the group's offsets partition moved")

        # The member goes on: OffsetFetch and commits reach the new coordinator.
        [tp] = consumer.committed([TopicPartition(topic, 0)], timeout=60)
        assert tp.offset == 40
        assert poll_values(consumer, 30) == list(range(40, 70))
        consumer.commit(offsets=[TopicPartition(topic, 0, 70)], asynchronous=False)
    finally:
        consumer.close()

    assert committed(cluster, group, topic) == 70
    second = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group,
                       "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    second.subscribe([topic])
    try:  # nothing committed is read again
        assert poll_values(second, 30) == list(range(70, 100))
    finally:
        second.close()


def ids_on_different_brokers(cluster: ClusterProcess) -> tuple[str, str]:
    """A group id and a transactional id whose coordinators are on different brokers."""
    m = cluster.metadata()
    offsets = m.leaders(OFFSETS_TOPIC)
    txns = m.leaders(TRANSACTION_STATE_TOPIC)
    for i in range(1000):
        group, txn = f"ctp-group-{i}", f"ctp-txn-{i}"
        group_leader = offsets[codec.partition_for(group, INTERNAL_PARTITIONS)]
        if group_leader != txns[transaction_log_partition(txn, INTERNAL_PARTITIONS)]:
            return group, txn
    raise AssertionError("every group and transactional id share a coordinator broker")


def test_transactional_offsets_commit_on_another_brokers_group_coordinator(
    cluster_factory: ClusterFactory,
) -> None:
    cluster = start(cluster_factory)
    group, txn_id = ids_on_different_brokers(cluster)
    source, sink = "ctp-in", "ctp-out"
    create_topic(cluster, source, leader=1, records=10)
    create_topic(cluster, sink, leader=2, records=0)

    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group,
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "isolation.level": "read_committed"})
    consumer.subscribe([source])
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": txn_id})
    producer.init_transactions(30)
    try:
        values = poll_values(consumer, 10)
        # The aborted transaction sends offset 5, the committed one 10.
        for commit, offset in ((False, 5), (True, 10)):
            producer.begin_transaction()
            for value in values:
                producer.produce(sink, str(value * 2).encode())
            producer.send_offsets_to_transaction([TopicPartition(source, 0, offset)],
                                                 consumer.consumer_group_metadata(), 30)
            # Sent, not yet decided: not the group's committed offset.
            assert committed(cluster, group, source) == NO_OFFSET
            if commit:
                producer.commit_transaction(30)
            else:
                producer.abort_transaction(30)
            # Stable once the marker reached the group's broker: applied or dropped.
            assert committed(cluster, group, source, stable=True) == (
                offset if commit else NO_OFFSET)
    finally:
        consumer.close()
