"""Markers and offset commits count only once the ISR has them (Kafka appends both with
requiredAcks=-1): with a follower of a data partition paused, a committed transaction stays
PREPARE_COMMIT (its marker is not acknowledged) until the follower is back (the LSO side
is tests/unit/broker/test_markers_isr.py: a paused leader's partition gives a consumer no
end to read to); with the followers of the group's offsets partition paused, an OffsetCommit is
never visible to OffsetFetch and fails with COORDINATOR_NOT_AVAILABLE after
offsets.commit.timeout.ms, and is reverted."""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.offset_commit.v8 import request as oc
from kio.schema.offset_fetch.v7 import request as of
from kio.schema.types import GroupId, TopicName
from kio.static.primitive import i32, i64

from oncelog.client import Admin
from oncelog.errors import ErrorCode
from oncelog.harness.cluster import ClusterProcess
from oncelog.harness.rawkafka import RawConnection
from oncelog.internal_topics import OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC
from tests.support.replicated import in_sync, read_all

TOPIC = "held"
PARTITIONS = 3
SINGLE_COORDINATORS = {
    "transaction.state.log.num.partitions": 1,
    "offsets.topic.num.partitions": 1,
    # Sessions outlive the pauses: only the ISR sees them.
    "broker.session.timeout.ms": 60000,
    "broker.heartbeat.interval.ms": 1000,
}
WINDOW_S = 3.0  # how long "does not complete while paused" is watched

ClusterFactory = Callable[..., ClusterProcess]


def start(cluster_factory: ClusterFactory, configs: dict[str, int],
          topic_configs: dict[str, str]) -> ClusterProcess:
    cluster = cluster_factory(configs={**SINGLE_COORDINATORS, **configs})
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3, config=topic_configs)])[TOPIC].result(
        timeout=30)
    cluster.wait_until(lambda m: in_sync(m, TOPIC, PARTITIONS, 3)
                       and in_sync(m, TRANSACTION_STATE_TOPIC, 1, 3)
                       and in_sync(m, OFFSETS_TOPIC, 1, 3), "every partition in sync")
    return cluster


def txn_state(cluster: ClusterProcess, node_id: int, transactional_id: str) -> str:
    admin = Admin({"bootstrap.servers": cluster.brokers[node_id].bootstrap})
    try:
        return admin.describe_transactions([transactional_id])[transactional_id].state
    finally:
        admin.close()


def test_commit_stays_prepared_until_the_data_partitions_isr_has_the_marker(
    cluster_factory: ClusterFactory,
) -> None:
    cluster = start(cluster_factory, {"replica.lag.time.max.ms": 1500},
                    {"min.insync.replicas": "3"})
    view = cluster.metadata()
    coordinator = view.topics[TRANSACTION_STATE_TOPIC][0].leader
    # A data partition with a follower that is not the coordinator: pausing it leaves
    # __transaction_state two in-sync replicas (its min.isr), so PrepareCommit is durable,
    # while the data partition (min.insync.replicas=3) cannot acknowledge the marker.
    index, follower = next(
        (i, r) for i, p in sorted(view.topics[TOPIC].items())
        for r in p.replicas if r not in (p.leader, coordinator))
    txn_id = "markerisr-held"
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": txn_id,
                         "transaction.timeout.ms": 120000})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(TOPIC, value=b"held", partition=index)
    producer.flush(30)
    cluster.pause(follower)
    try:
        producer.commit_transaction(60)  # PrepareCommit is durable: EndTxn succeeds
        cluster.wait_until(lambda m: follower not in m.topics[TOPIC][index].isr,
                           "the paused follower out of the ISR", node_id=coordinator)
        watched_until = time.monotonic() + WINDOW_S
        while time.monotonic() < watched_until:
            assert txn_state(cluster, coordinator, txn_id) == "PrepareCommit"
    finally:
        cluster.resume(follower)
    deadline = time.monotonic() + 90
    while (state := txn_state(cluster, coordinator, txn_id)) != "CompleteCommit":
        assert time.monotonic() < deadline, f"still {state} after the follower came back"
        time.sleep(0.2)  # polling interval of the wait above, not a synchronisation
    assert read_all(cluster.bootstrap, TOPIC, PARTITIONS, committed=True) == [b"held"]


def _commit(offset: int) -> oc.OffsetCommitRequest:
    return oc.OffsetCommitRequest(
        group_id=GroupId("markerisr-group"), generation_id_or_member_epoch=i32(-1),
        member_id="", group_instance_id=None,
        topics=(oc.OffsetCommitRequestTopic(name=TopicName(TOPIC), partitions=(
            oc.OffsetCommitRequestPartition(partition_index=i32(0), committed_offset=i64(offset),
                                            committed_leader_epoch=i32(-1),
                                            committed_metadata=""),)),),
    )


def _fetched(conn: RawConnection) -> int:
    response = conn.request(of.OffsetFetchRequest(
        group_id=GroupId("markerisr-group"), require_stable=False,
        topics=(of.OffsetFetchRequestTopic(name=TopicName(TOPIC), partition_indexes=(i32(0),)),)))
    assert response.error_code == 0, response
    return int(response.topics[0].partitions[0].committed_offset)


def test_offset_commit_is_invisible_until_replicated_and_reverted_on_timeout(
    cluster_factory: ClusterFactory,
) -> None:
    # Followers stay in the ISR for the whole pause: the commit's wait times out.
    cluster = start(cluster_factory, {"offsets.commit.timeout.ms": 3000}, {})
    state = cluster.metadata().topics[OFFSETS_TOPIC][0]
    followers = [r for r in state.replicas if r != state.leader]
    bootstrap = cluster.brokers[state.leader].bootstrap
    fetcher = RawConnection(bootstrap, timeout=60)
    committer = RawConnection(bootstrap, timeout=60)
    try:
        assert _fetched(fetcher) == -1
        for follower in followers:
            cluster.pause(follower)
        try:
            with ThreadPoolExecutor(1) as pool:
                started = time.monotonic()
                answer = pool.submit(committer.request, _commit(41))
                seen: list[int] = []
                while not answer.done():
                    seen.append(_fetched(fetcher))
                response = answer.result()
                waited = time.monotonic() - started
            code = response.topics[0].partitions[0].error_code
            assert ErrorCode(code) is ErrorCode.coordinator_not_available
            assert waited >= 2.5  # answered after offsets.commit.timeout.ms
            assert len(seen) >= 3 and set(seen) == {-1}  # never visible while waiting
            assert _fetched(fetcher) == -1  # and reverted
        finally:
            for follower in followers:
                cluster.resume(follower)
        cluster.wait_until(lambda m: len(m.topics[OFFSETS_TOPIC][0].isr) == 3,
                           "the followers back in the ISR", node_id=state.leader)
        retried = committer.request(_commit(42))
        assert retried.topics[0].partitions[0].error_code == 0
        assert _fetched(fetcher) == 42
    finally:
        fetcher.close()
        committer.close()
