"""A TxnOffsetCommit whose verification answer arrives after the transaction ended must not
leave offsets pending forever (the hang ``oncelog verify --spawn cluster`` found, seed 15:
OffsetFetch answered UNSTABLE_OFFSET_COMMIT for the rest of the run and the group stopped).

Three brokers behind fault proxies. The group's offsets partition is led by broker B, the
transactional id's coordinator is broker A. A confluent-kafka producer (a real client over
TCP) sends its offsets; B takes the partition's verification guard and asks A
(AddPartitionsToTxn v4); A answers NONE, and A's proxy holds that answer. Meanwhile the
transaction is aborted (EndTxn at the same epoch, as a transactions-v1 client or an operator
would): A writes the ABORT marker to the offsets partition on B. Then the answer is released.
B must refuse the append (INVALID_TXN_STATE: the marker removed the guard): the client gets
an error, and OffsetFetch with require_stable answers at once, without
UNSTABLE_OFFSET_COMMIT. Without the guard B appended the offsets after the marker, into a
transaction no marker would ever end."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from oncelog.coordinator.group.codec import partition_for
from oncelog.errors import ErrorCode
from oncelog.harness.cluster import ClusterProcess
from oncelog.harness.etcd import EtcdProcess
from oncelog.harness.fault_proxy import ApiKey, FaultRules
from oncelog.harness.rawkafka import request_once
from oncelog.internal_topics import OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC
from oncelog.protocol import versions
from oncelog.protocol.build import make, request_module
from tests.support.replicated import in_sync

TXN_ID = "offsets-hang"
TOPIC = "consumed"
OFFSET_PARTITIONS = 3
CONFIGS = {
    "transaction.state.log.num.partitions": 1,  # one coordinator: that partition's leader
    "offsets.topic.num.partitions": OFFSET_PARTITIONS,
}


@pytest.fixture
def cluster(request: pytest.FixtureRequest, tmp_path: Path, etcd: EtcdProcess
            ) -> Iterator[ClusterProcess]:
    made = ClusterProcess(tmp_path / "cluster", configs=CONFIGS, etcd=etcd, proxied=True)
    failed_before = request.session.testsfailed
    try:
        yield made.start()
    finally:
        if request.session.testsfailed > failed_before:
            print(made.logs())
        made.close()


def group_led_elsewhere(cluster: ClusterProcess, coordinator: int) -> tuple[str, int]:
    """A group whose offsets partition is led by a broker other than ``coordinator``."""
    view = cluster.wait_until(lambda m: in_sync(m, OFFSETS_TOPIC, OFFSET_PARTITIONS, 3),
                              "__consumer_offsets in sync")
    for i in range(1000):
        group = f"hang-group-{i}"
        leader = view.topics[OFFSETS_TOPIC][partition_for(group, OFFSET_PARTITIONS)].leader
        if leader != coordinator:
            return group, leader
    raise AssertionError("every offsets partition is led by the transaction coordinator")


def describe_transaction(bootstrap: str) -> Any:
    mod = request_module(versions.DESCRIBE_TRANSACTIONS, 0)
    response = request_once(bootstrap, make(mod.DescribeTransactionsRequest,
                                            transactional_ids=(TXN_ID,)))
    (state,) = response.transaction_states
    assert state.error_code == ErrorCode.none
    return state


def abort(bootstrap: str, producer_id: int, producer_epoch: int) -> ErrorCode:
    """EndTxn(abort) v3: transactions v1, the markers keep the producer's epoch."""
    mod = request_module(versions.END_TXN, 3)
    response = request_once(bootstrap, make(
        mod.EndTxnRequest, transactional_id=TXN_ID, producer_id=producer_id,
        producer_epoch=producer_epoch, committed=False))
    return ErrorCode(response.error_code)


def stable_offset_fetch(bootstrap: str, group: str) -> tuple[ErrorCode, int]:
    """OffsetFetch v7 with require_stable for TOPIC-0: (error, committed offset)."""
    mod = request_module(versions.OFFSET_FETCH, 7)
    response = request_once(bootstrap, make(
        mod.OffsetFetchRequest, group_id=group, require_stable=True,
        topics=(make(mod.OffsetFetchRequestTopic, name=TOPIC, partition_indexes=(0,)),)))
    assert response.error_code == ErrorCode.none
    ((part,),) = [t.partitions for t in response.topics]
    return ErrorCode(part.error_code), int(part.committed_offset)


def test_an_abort_marker_before_the_verification_answer_refuses_the_offsets(
    cluster: ClusterProcess,
) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(TOPIC, 1, 3)])[TOPIC].result(timeout=30)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": TXN_ID,
                         "transaction.timeout.ms": 60000})
    producer.init_transactions(30)
    view = cluster.wait_until(lambda m: in_sync(m, TRANSACTION_STATE_TOPIC, 1, 3),
                              "__transaction_state in sync")
    coordinator = view.topics[TRANSACTION_STATE_TOPIC][0].leader
    # Creates __consumer_offsets (FindCoordinator for a group).
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "hang-probe",
                         "enable.auto.commit": False})
    consumer.committed([TopicPartition(TOPIC, 0)], timeout=30)
    consumer.close()
    group, offsets_leader = group_led_elsewhere(cluster, coordinator)
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group,
                         "enable.auto.commit": False})
    metadata = consumer.consumer_group_metadata()

    coordinator_proxy = cluster.proxies[coordinator]
    producer.begin_transaction()
    # B's verification reaches A, A answers; the answer waits at A's proxy.
    coordinator_proxy.set_rules(FaultRules(
        hold_responses=frozenset({ApiKey.ADD_PARTITIONS_TO_TXN})))
    outcome: list[BaseException | None] = []

    def send_offsets() -> None:
        try:
            producer.send_offsets_to_transaction([TopicPartition(TOPIC, 0, 5)], metadata, 60)
            outcome.append(None)
        except BaseException as exc:  # handed to the test thread
            outcome.append(exc)

    sender = threading.Thread(target=send_offsets, daemon=True)
    sender.start()
    try:
        coordinator_proxy.wait_for(
            lambda s: s.responses_held.get(ApiKey.ADD_PARTITIONS_TO_TXN, 0) >= 1, timeout=30)
        # The transaction ends meanwhile: its ABORT marker is written to the offsets
        # partition on B (EndTxn answers once the markers are written).
        state = describe_transaction(coordinator_proxy.bootstrap)
        assert (OFFSETS_TOPIC, partition_for(group, OFFSET_PARTITIONS)) in {
            (t.topic, p) for t in state.topics for p in t.partitions}
        assert abort(coordinator_proxy.bootstrap, state.producer_id,
                     state.producer_epoch) == ErrorCode.none
    finally:
        coordinator_proxy.set_rules(FaultRules())  # the stale NONE reaches B now
    sender.join(90)
    assert not sender.is_alive()
    (error,) = outcome
    # The offsets were written in no transaction: the client must not hear success.
    assert isinstance(error, KafkaException), error
    assert error.args[0].code() == ErrorCode.invalid_txn_state, error
    # Nothing is pending on the offsets partition: OffsetFetch is stable, nothing committed.
    offsets_bootstrap = cluster.proxies[offsets_leader].bootstrap
    assert stable_offset_fetch(offsets_bootstrap, group) == (ErrorCode.none, -1)
    consumer.close()
