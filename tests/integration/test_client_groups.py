"""Consumer groups with oncelog.client members on a real broker: two members split the
partitions (range and cooperative-sticky), commits survive, a leaving member's partitions
move, and a mixed group with a kafka-python member works."""

from __future__ import annotations

import threading
import time

import pytest

from oncelog.client import Admin, Consumer, OffsetAndMetadata, Producer, TopicPartition
from oncelog.client.types import Message
from oncelog.harness.broker import BrokerProcess
from tests.support.names import unique_group, unique_topic

PARTITIONS = 4


@pytest.fixture
def group_broker(broker_factory: object) -> BrokerProcess:
    """A broker that does not hold the first rebalance back for 3 s."""
    return broker_factory(configs={"group.initial.rebalance.delay.ms": 0})  # type: ignore[operator]


def setup_topic(bootstrap: str, records: int) -> str:
    topic = unique_topic("grp")
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topic(topic, PARTITIONS)
    with Producer({"bootstrap.servers": bootstrap}) as producer:
        for i in range(records):
            producer.send(topic, f"v{i}".encode(), partition=i % PARTITIONS)
        assert producer.flush(30) == 0
    return topic


def consumer_config(bootstrap: str, group: str, strategy: str) -> dict[str, object]:
    return {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "partition.assignment.strategy": strategy,
        "heartbeat.interval.ms": 200,
        "session.timeout.ms": 6000,
    }


def wait_for(predicate: object, timeout: float = 30.0, step: object = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if step is not None:
            step()  # type: ignore[operator]
        if predicate():  # type: ignore[operator]
            return
        time.sleep(0.05)
    raise AssertionError("condition not reached in time")


@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
def test_two_members_split_the_partitions(group_broker: BrokerProcess, strategy: str) -> None:
    topic = setup_topic(group_broker.bootstrap, 40)
    group = unique_group(strategy)
    config = consumer_config(group_broker.bootstrap, group, strategy)
    first, second = Consumer(config), Consumer(config)
    got: dict[str, list[Message]] = {"first": [], "second": []}
    try:
        first.subscribe([topic])
        second.subscribe([topic])

        def poll_both() -> None:
            got["first"].extend(first.poll(0.1))
            got["second"].extend(second.poll(0.1))

        def split() -> bool:
            a, b = set(first.assignment()), set(second.assignment())
            return len(a) == 2 and len(b) == 2 and not a & b

        wait_for(split, step=poll_both)
        wait_for(
            lambda: len({(m.partition, m.offset) for ms in got.values() for m in ms}) == 40,
            step=poll_both,
        )
        everything = {tp for tp in first.assignment() + second.assignment()}
        assert everything == {TopicPartition(topic, p) for p in range(PARTITIONS)}
        assert first.group_metadata().generation_id == second.group_metadata().generation_id >= 1
        assert first.group_metadata().member_id != second.group_metadata().member_id
    finally:
        first.close()
        second.close()


def test_commit_and_committed_survive_a_new_consumer(group_broker: BrokerProcess) -> None:
    topic = setup_topic(group_broker.bootstrap, 20)
    group = unique_group("commit")
    config = consumer_config(group_broker.bootstrap, group, "range")
    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    with Consumer(config) as consumer:
        consumer.subscribe([topic])
        seen: list[Message] = []
        wait_for(lambda: len(seen) >= 20, step=lambda: seen.extend(consumer.poll(0.2)))
        consumer.commit()
        assert consumer.committed(tps) == {tp: OffsetAndMetadata(5) for tp in tps}
        consumer.commit({TopicPartition(topic, 0): OffsetAndMetadata(2, "meta")})
        assert consumer.committed([TopicPartition(topic, 0)])[
            TopicPartition(topic, 0)
        ] == OffsetAndMetadata(2, "meta")
    with Consumer(config) as again:
        again.subscribe([topic])
        resumed: list[Message] = []
        wait_for(lambda: len(resumed) >= 3, step=lambda: resumed.extend(again.poll(0.2)))
        assert sorted((m.partition, m.offset) for m in resumed) == [(0, 2), (0, 3), (0, 4)]


def test_auto_commit_on_close(group_broker: BrokerProcess) -> None:
    topic = setup_topic(group_broker.bootstrap, 8)
    group = unique_group("auto")
    config = consumer_config(group_broker.bootstrap, group, "range") | {"enable.auto.commit": True}
    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    consumer = Consumer(config)
    consumer.subscribe([topic])
    seen: list[Message] = []
    wait_for(lambda: len(seen) >= 8, step=lambda: seen.extend(consumer.poll(0.2)))
    consumer.close()
    with Consumer(config) as check:
        assert check.committed(tps) == {tp: OffsetAndMetadata(2) for tp in tps}


def test_leaving_member_hands_over_its_partitions(group_broker: BrokerProcess) -> None:
    topic = setup_topic(group_broker.bootstrap, 4)
    group = unique_group("leave")
    config = consumer_config(group_broker.bootstrap, group, "cooperative-sticky")
    stay, leave = Consumer(config), Consumer(config)
    try:
        stay.subscribe([topic])
        leave.subscribe([topic])
        wait_for(
            lambda: len(stay.assignment()) == 2 and len(leave.assignment()) == 2,
            step=lambda: (stay.poll(0.1), leave.poll(0.1)),
        )
        leave.close()
        wait_for(lambda: len(stay.assignment()) == PARTITIONS, step=lambda: stay.poll(0.1))
    finally:
        stay.close()
        leave.close()


def test_mixed_group_with_kafka_python_member(group_broker: BrokerProcess) -> None:
    from kafka import KafkaConsumer
    from kafka.coordinator.assignors.range import RangePartitionAssignor

    topic = setup_topic(group_broker.bootstrap, 8)
    group = unique_group("mixed")
    ours = Consumer(consumer_config(group_broker.bootstrap, group, "range"))
    theirs = KafkaConsumer(
        bootstrap_servers=group_broker.bootstrap,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        partition_assignment_strategy=[RangePartitionAssignor],
        heartbeat_interval_ms=200,
        session_timeout_ms=6000,
    )
    stop = threading.Event()
    their_partitions: set[int] = set()

    def run_theirs() -> None:
        theirs.subscribe([topic])
        while not stop.is_set():
            theirs.poll(100)
            their_partitions.clear()
            their_partitions.update(tp.partition for tp in theirs.assignment())

    thread = threading.Thread(target=run_theirs, daemon=True)
    try:
        ours.subscribe([topic])
        thread.start()
        wait_for(
            lambda: (
                len(ours.assignment()) == 2
                and len(their_partitions) == 2
                and {tp.partition for tp in ours.assignment()}.isdisjoint(their_partitions)
            ),
            timeout=60,
            step=lambda: ours.poll(0.1),
        )
    finally:
        stop.set()
        thread.join(10)
        theirs.close()
        ours.close()
