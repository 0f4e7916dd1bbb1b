"""The transaction coordinator's broker killed between a durable PrepareCommit/PrepareAbort
and the markers, and a KIP-939 prepared transaction across a coordinator failover.

Three brokers, replication factor 3, ``min.insync.replicas`` 2. The data partitions are led by
the two brokers that are not the transaction's coordinator, so only the coordinator dies: the
new leader of its ``__transaction_state`` partition loads the Prepare* record (which the
in-sync replicas had before the coordinator went on) and writes the markers itself.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka import TopicPartition as CkTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from oncelog.client import Admin
from oncelog.client import Producer as OncelogProducer
from oncelog.coordinator.transaction import transaction_log_partition
from oncelog.harness.cluster import ClusterProcess, MetadataView
from oncelog.internal_topics import TRANSACTION_STATE_TOPIC

ClusterFactory = Callable[..., ClusterProcess]

TOPIC = "crashcoord"
TXN_PARTITIONS = 3
PER_PARTITION = 3
CRASH_POINT = "txn.prepared.before_markers"
STATES = {"Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit",
          "CompleteAbort", "PrepareEpochFence", "Dead"}
CLUSTER_CONFIGS = {
    "transaction.state.log.num.partitions": TXN_PARTITIONS,
    "offsets.topic.num.partitions": 1,
    "min.insync.replicas": 2,
}


def txn_state_led(m: MetadataView) -> bool:
    parts = m.topics.get(TRANSACTION_STATE_TOPIC, {})
    return len(parts) == TXN_PARTITIONS and all(
        p.leader > 0 and len(p.isr) == 3 for p in parts.values())


def coordinator_of(cluster: ClusterProcess, txn_id: str) -> int:
    view = cluster.wait_until(txn_state_led, "__transaction_state led by 3-replica ISRs")
    return view.topics[TRANSACTION_STATE_TOPIC][
        transaction_log_partition(txn_id, TXN_PARTITIONS)].leader


def create_topic_led_by_others(cluster: ClusterProcess, coordinator: int) -> tuple[int, int]:
    """Two partitions, rf 3, led by the two brokers other than ``coordinator``."""
    first, second = sorted(set(cluster.brokers) - {coordinator})
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    assignment = [[first, second, coordinator], [second, first, coordinator]]
    admin.create_topics([NewTopic(TOPIC, 2, replica_assignment=assignment)])[TOPIC].result(30)
    cluster.wait_until(
        lambda m: m.leaders(TOPIC) == {0: first, 1: second}
        and all(len(p.isr) == 3 for p in m.topics[TOPIC].values()),
        "the topic led by the non-coordinators")
    return first, second


def wait_coordinator_moved(cluster: ClusterProcess, coordinator: int, txn_id: str) -> int:
    index = transaction_log_partition(txn_id, TXN_PARTITIONS)
    view = cluster.wait_until(
        lambda m: coordinator not in m.brokers
        and m.topics[TRANSACTION_STATE_TOPIC][index].leader not in (coordinator, -1),
        "the coordinator's __transaction_state partition moved", timeout=60)
    return view.topics[TRANSACTION_STATE_TOPIC][index].leader


def wait_state(bootstrap: str, txn_id: str, states: set[str], timeout: float = 60) -> str:
    """DescribeTransactions until the id's state is one of ``states``."""
    deadline = time.monotonic() + timeout
    last = "?"
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        while time.monotonic() < deadline:
            try:
                last = admin.describe_transactions([txn_id])[txn_id].state
            except Exception as exc:  # coordinator loading / moving: ask again
                last = repr(exc)
            if last in states:
                return last
            time.sleep(0.2)  # polling interval
    raise AssertionError(f"{txn_id}: state {last}, not {states} within {timeout:.0f}s")


def wait_stable_end(bootstrap: str, ends: dict[int, int], timeout: float = 60) -> None:
    """Until the last stable offset of each partition is its end offset (``ends``): every
    marker written and replicated, nothing left open."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "crashcoord-lso",
                         "isolation.level": "read_committed"})
    deadline = time.monotonic() + timeout
    seen: dict[int, int] = {}
    try:
        while time.monotonic() < deadline:
            try:
                seen = {p: consumer.get_watermark_offsets(CkTopicPartition(TOPIC, p),
                                                          timeout=5, cached=False)[1]
                        for p in ends}
            except KafkaException:
                seen = {}
            if seen == ends:
                return
            time.sleep(0.2)  # polling interval
    finally:
        consumer.close()
    raise AssertionError(f"last stable offsets {seen}, not {ends}, within {timeout:.0f}s")


def read(bootstrap: str, committed: bool, ends: dict[int, int]) -> list[bytes]:
    """Every record of ``TOPIC`` below ``ends``, read_committed or read_uncommitted."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "crashcoord-read",
                         "enable.auto.commit": False, "enable.partition.eof": True,
                         "isolation.level": "read_committed" if committed
                         else "read_uncommitted"})
    consumer.assign([CkTopicPartition(TOPIC, p, 0) for p in ends])
    values: list[bytes] = []
    at_end: set[int] = set()
    deadline = time.monotonic() + 60
    try:
        while at_end != set(ends) and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if (error := msg.error()) is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    at_end.add(int(msg.partition() or 0))
                continue
            values.append(bytes(msg.value() or b""))
    finally:
        consumer.close()
    assert at_end == set(ends), f"not at the end of {set(ends) - at_end}"
    return values


@pytest.mark.parametrize("commit", [True, False], ids=["commit", "abort"])
def test_coordinator_killed_after_prepare_before_markers(
    cluster_factory: ClusterFactory, commit: bool
) -> None:
    txn_id = f"crashcoord-{'commit' if commit else 'abort'}"
    # The periodic sweep (which also restarts the markers of a prepared transaction nobody
    # is completing) is pushed past the test: the new coordinator must finish the
    # transaction because it loaded it (Kafka's onElection), not minutes later.
    configs = {**CLUSTER_CONFIGS,
               "transaction.abort.timed.out.transaction.cleanup.interval.ms": 300000}
    cluster = cluster_factory(configs=configs, env={"ONCELOG_CRASH_AT": CRASH_POINT})
    coordinator = coordinator_of(cluster, txn_id)
    create_topic_led_by_others(cluster, coordinator)

    producer = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": txn_id,
                         "transaction.timeout.ms": 60000, "acks": "all"})
    producer.init_transactions(30)
    producer.begin_transaction()
    written = [f"p{p}-{i}".encode() for p in (0, 1) for i in range(PER_PARTITION)]
    for value in written:
        producer.produce(TOPIC, value=value, partition=int(value[1:2]))
    assert producer.flush(30) == 0

    # The coordinator dies at the crash point, after Prepare* is acknowledged by the ISR
    # and before any marker. confluent-kafka's answer: either the end succeeds (its retries
    # reach the new coordinator, which finished it) or a retriable/abortable error.
    error: KafkaException | None = None
    try:
        if commit:
            producer.commit_transaction(60)
        else:
            producer.abort_transaction(60)
    except KafkaException as exc:
        error = exc
    broker = cluster.brokers[coordinator]
    deadline = time.monotonic() + 30
    while broker.is_running and time.monotonic() < deadline:
        time.sleep(0.05)  # polling interval
    assert broker.kill() == -9, "the coordinator did not die at the crash point"  # reaps it
    assert f"crash point {CRASH_POINT} reached" in broker.log_text(since_start=True)
    if error is not None:
        kafka_error = error.args[0]
        assert not kafka_error.fatal(), kafka_error
        print(f"confluent-kafka's end of transaction: {kafka_error}")
    else:
        print("confluent-kafka's end of transaction: succeeded")

    new_coordinator = wait_coordinator_moved(cluster, coordinator, txn_id)
    assert new_coordinator != coordinator
    expected = "CompleteCommit" if commit else "CompleteAbort"
    assert wait_state(cluster.bootstrap, txn_id, {expected, "Empty"}, timeout=30) == expected
    ends = {0: PER_PARTITION + 1, 1: PER_PARTITION + 1}  # the records and one marker
    wait_stable_end(cluster.bootstrap, ends, timeout=30)
    assert sorted(read(cluster.bootstrap, False, ends)) == sorted(written)
    assert sorted(read(cluster.bootstrap, True, ends)) == (sorted(written) if commit else [])
    producer.flush(5)


def test_prepared_2pc_transaction_survives_coordinator_failover(
    cluster_factory: ClusterFactory,
) -> None:
    """KIP-939: a prepared transaction is kept by the new coordinator (never timed out, even
    well past transaction.max.timeout.ms) and committed by a new client instance."""
    txn_id = "crashcoord-2pc"
    max_timeout_ms = 1500
    cluster = cluster_factory(configs={
        **CLUSTER_CONFIGS,
        "transaction.two.phase.commit.enable": True,
        "transaction.max.timeout.ms": max_timeout_ms,
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": 200,
    })
    coordinator = coordinator_of(cluster, txn_id)
    create_topic_led_by_others(cluster, coordinator)
    config = {"bootstrap.servers": cluster.bootstrap, "transactional.id": txn_id,
              "transaction.two.phase.commit.enable": True, "transaction.timeout.ms": 1000}
    written = [f"p{p}-2pc".encode() for p in (0, 1)]
    first = OncelogProducer(config)
    try:
        first.init_transactions(timeout=30)
        first.begin_transaction()
        for p, value in enumerate(written):
            first.send(TOPIC, value, partition=p)
        state = first.prepare_transaction(timeout=30)
        cluster.kill(coordinator)
    finally:
        first.close()
    new_coordinator = wait_coordinator_moved(cluster, coordinator, txn_id)
    assert new_coordinator != coordinator

    # The new coordinator has it (loaded), and keeps it Ongoing past the max timeout and
    # many abort sweeps: checked over the whole window, not once at its end.
    assert wait_state(cluster.bootstrap, txn_id, STATES) == "Ongoing"
    with Admin({"bootstrap.servers": cluster.bootstrap}) as admin:
        until = time.monotonic() + 2 * max_timeout_ms / 1000
        while time.monotonic() < until:
            described = admin.describe_transactions([txn_id])[txn_id]
            assert described.state == "Ongoing", described
            assert described.two_phase_commit, described
            time.sleep(0.2)  # polling interval
    assert read(cluster.bootstrap, True, {0: 1, 1: 1}) == []  # LSO held by the open txn

    second = OncelogProducer({**config, "bootstrap.servers": cluster.bootstrap})
    try:
        second.init_transactions(keep_prepared_txn=True, timeout=60)
        assert second.prepared_state == state
        second.complete_transaction(state, timeout=60)
    finally:
        second.close()
    assert wait_state(cluster.bootstrap, txn_id, {"CompleteCommit", "Empty"}) == "CompleteCommit"
    ends = {0: 2, 1: 2}
    wait_stable_end(cluster.bootstrap, ends)
    assert sorted(read(cluster.bootstrap, True, ends)) == sorted(written)
