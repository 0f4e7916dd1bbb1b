"""The transaction coordinator's __transaction_state writes count only once the ISR has them
(Kafka appends them with acks=-1): EndTxn is not answered as success while the followers of
the coordinator's partition cannot have PrepareCommit, and a commit answered to the client
survives a kill -9 of the coordinator's broker right after the answer."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from oncelog.harness.cluster import ClusterProcess, MetadataView
from oncelog.internal_topics import TRANSACTION_STATE_TOPIC
from tests.support.replicated import in_sync, read_all

TOPIC = "payments"
PARTITIONS = 3
CONFIGS = {
    "transaction.state.log.num.partitions": 1,  # one coordinator: the partition's leader
    "offsets.topic.num.partitions": 1,
    "replica.lag.time.max.ms": 1500,
}

ClusterFactory = Callable[..., ClusterProcess]


def start(cluster_factory: ClusterFactory, **configs: int) -> tuple[ClusterProcess, MetadataView]:
    cluster = cluster_factory(configs={**CONFIGS, **configs})
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3)])[TOPIC].result(timeout=30)
    cluster.wait_until(lambda m: in_sync(m, TOPIC, PARTITIONS, 3), "the topic in sync")
    view = cluster.wait_until(lambda m: in_sync(m, TRANSACTION_STATE_TOPIC, 1, 3),
                              "__transaction_state in sync")
    return cluster, view


def read_committed(cluster: ClusterProcess) -> list[bytes]:
    return read_all(cluster.bootstrap, TOPIC, PARTITIONS, committed=True)


def producer(cluster: ClusterProcess, transactional_id: str) -> Producer:
    made = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": transactional_id,
                     "transaction.timeout.ms": 60000})
    made.init_transactions(30)
    return made


def test_commit_answered_then_coordinator_killed_completes_on_the_new_coordinator(
    cluster_factory: ClusterFactory,
) -> None:
    cluster, view = start(cluster_factory)
    coordinator = view.topics[TRANSACTION_STATE_TOPIC][0].leader
    # Data partitions led elsewhere: their markers do not die with the coordinator.
    targets = [i for i, p in view.topics[TOPIC].items() if p.leader != coordinator]
    assert targets
    txn = producer(cluster, "israppend-kill")
    txn.begin_transaction()
    for index in targets:
        txn.produce(TOPIC, value=f"v{index}".encode(), partition=index)
    txn.commit_transaction(30)
    cluster.kill(coordinator)  # right after the answer

    cluster.wait_until(
        lambda m: coordinator not in m.brokers
        and m.topics[TRANSACTION_STATE_TOPIC][0].leader not in (coordinator, -1),
        "the coordinator's partition moved")
    expected = sorted(f"v{index}".encode() for index in targets)
    assert sorted(read_committed(cluster)) == expected
    # The new coordinator knows the transaction committed: the producer continues.
    txn.begin_transaction()
    txn.produce(TOPIC, value=b"after", partition=targets[0])
    txn.commit_transaction(60)
    assert sorted(read_committed(cluster)) == sorted([*expected, b"after"])


def test_end_txn_is_not_a_success_while_the_followers_cannot_have_it(
    cluster_factory: ClusterFactory,
) -> None:
    # Sessions outlive the pause: only the ISR (replica.lag.time.max.ms) sees it.
    cluster, view = start(cluster_factory, **{"broker.session.timeout.ms": 20000,
                                              "broker.heartbeat.interval.ms": 1000})
    state = view.topics[TRANSACTION_STATE_TOPIC][0]
    coordinator = state.leader
    followers = [r for r in state.replicas if r != coordinator]
    index = next(i for i, p in view.topics[TOPIC].items() if p.leader == coordinator)
    txn = producer(cluster, "israppend-isr")
    txn.begin_transaction()
    txn.produce(TOPIC, value=b"held", partition=index)
    txn.flush(30)
    for follower in followers:
        cluster.pause(follower)
    try:
        started = time.monotonic()
        with pytest.raises(KafkaException) as refused:
            txn.commit_transaction(6)
        assert refused.value.args[0].retriable(), refused.value
        assert time.monotonic() - started >= 5  # retried until the client's own timeout
    finally:
        for follower in followers:
            cluster.resume(follower)
    cluster.wait_until(
        lambda m: len(m.topics[TRANSACTION_STATE_TOPIC][0].isr) >= 2,
        "the followers back in the ISR", node_id=coordinator)
    txn.commit_transaction(30)  # the retry commits once the ISR has it
    assert read_committed(cluster) == [b"held"]
