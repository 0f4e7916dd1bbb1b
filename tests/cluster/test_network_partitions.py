"""Network partitions between the brokers of a 3-broker cluster, and between a broker and
etcd: etcd and every broker run in their own network namespace (``netns_cluster_factory``),
the test talks to them from host ``client``, which no fault touches, and cuts links with
``Network.cut`` / ``isolate`` (oncelog/harness/netns.py).

- A leader cut from its followers but not from etcd shrinks its ISR to itself, then refuses
  acks=all with NOT_ENOUGH_REPLICAS (min.insync.replicas=2): it acknowledges nothing only it
  has; healed, the followers catch up and rejoin; no acknowledged record is lost.
- A leader cut from etcd but not from the brokers loses its session: the controller moves
  its leaderships away at a higher leader epoch and the cut broker stops leading at once
  (NOT_LEADER_OR_FOLLOWER, even for acks=1), so only one broker takes writes; healed, it
  registers again (a new broker epoch), follows the new leader and rejoins the ISR.
- The controller's broker cut from everything: another broker becomes controller at a
  higher epoch, and the old one's partition writes are refused by etcd.

Short session (2 s) and replica.lag.time.max.ms (1.5 s); every wait is on a condition with
a deadline.
"""

from __future__ import annotations

import asyncio
import datetime
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
from confluent_kafka import Producer
from kio.schema.produce.v8.request import PartitionProduceData, ProduceRequest, TopicProduceData
from kio.schema.types import TopicName
from kio.static.primitive import Records, i16, i32, i32Timedelta

from oncelog.cluster.metadata import MetadataImage
from oncelog.cluster.metadata_store import EtcdMetadataStore, parse_endpoints
from oncelog.errors import ErrorCode
from oncelog.harness.cluster import CLIENT_HOST, ETCD_HOST, ClusterProcess
from oncelog.harness.netns import Network
from oncelog.harness.rawkafka import RawConnection
from oncelog.records.codec import RecordInput, encode_batch
from tests.support.replicated import create_topic, in_sync, read_all

pytestmark = pytest.mark.integration

ClusterFactory = Callable[..., ClusterProcess]

CONFIGS = {
    "replica.lag.time.max.ms": 1500,
    "replica.fetch.backoff.ms": 200,
    "offsets.topic.num.partitions": 1,
    "transaction.state.log.num.partitions": 1,
}
KEEP = (ETCD_HOST, CLIENT_HOST)
T = TypeVar("T")


@pytest.fixture
def cluster(netns_cluster_factory: ClusterFactory) -> ClusterProcess:
    return netns_cluster_factory(3, CONFIGS)


def produce_acked(cluster: ClusterProcess, topic: str, values: list[bytes],
                  nodes: list[int] | None = None) -> list[bytes]:
    """acks=all through confluent-kafka from host ``client`` (bootstrapped on ``nodes``,
    default every broker); the values acknowledged."""
    acked: list[bytes] = []

    def delivered(error: Any, message: Any) -> None:
        assert error is None, error
        acked.append(message.value())

    with cluster.reach():
        bootstrap = ",".join(cluster.brokers[n].bootstrap for n in nodes or cluster.brokers)
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                             "enable.idempotence": True})
    for value in values:
        producer.produce(topic, value, on_delivery=delivered)
    assert producer.flush(30) == 0
    return acked


def produce_to(cluster: ClusterProcess, node_id: int, topic: str, value: bytes,
               *, acks: int = -1, timeout_ms: int = 5000) -> int:
    """One Produce v8 straight to broker ``node_id`` (whatever the metadata says); its
    error code."""
    with cluster.reach():
        conn = RawConnection(cluster.brokers[node_id].bootstrap)
    try:
        response = conn.request(ProduceRequest(
            transactional_id=None, acks=i16(acks),
            timeout=i32Timedelta.parse(datetime.timedelta(milliseconds=timeout_ms)),
            topic_data=(TopicProduceData(name=TopicName(topic), partition_data=(
                PartitionProduceData(index=i32(0), records=Records(
                    encode_batch([RecordInput(value=value)]))),)),),
        ))
    finally:
        conn.close()
    return int(response.responses[0].partition_responses[0].error_code)


def new_topic(cluster: ClusterProcess, assignment: list[list[int]] | None = None) -> str:
    """An rf=3 topic of one partition, min.insync.replicas=2, fully in sync."""
    with cluster.reach():
        return create_topic(cluster, assignment=assignment)


def check_log(cluster: ClusterProcess, topic: str, acked: list[bytes], *,
              never: list[bytes], committed: bool = False) -> None:
    """Partition 0 of ``topic`` read to its end from host ``client``: every acknowledged
    value once, none of ``never``."""
    with cluster.reach():
        values = read_all(cluster.bootstrap, topic, 1, committed=committed)
    assert not set(never) & set(values), "a refused write is in the log"
    assert len(values) == len(set(values)), "a record is in the log twice"
    assert set(acked) <= set(values), "an acknowledged record is lost"


def with_store(cluster: ClusterProcess,
               action: Callable[[EtcdMetadataStore], Awaitable[T]]) -> T:
    """``action`` on a metadata store of our own, talking to the cluster's etcd from host
    ``client``, through a Unix-socket tunnel: gRPC connects from its own threads, which may
    sit in the root namespace (where 10.X.Y.Z:2379 reaches whatever answers there -- an HTTP
    404 -- not this etcd) whatever thread the coroutine runs in."""
    assert cluster.etcd is not None and cluster.network is not None
    ((host, port),) = parse_endpoints(cluster.etcd.endpoint)

    async def run(target: str) -> T:
        # aetcd dials f"{host}:{port}": gRPC's "unix:DIR/etcd" + ":PORT" names the socket.
        store = EtcdMetadataStore([(target, port)], prefix=cluster.prefix)
        try:
            return await action(store)
        finally:
            await store.close()

    with tempfile.TemporaryDirectory(prefix="etcd-tunnel-") as directory:
        path = Path(directory) / f"etcd:{port}"
        with cluster.network.unix_tunnel(CLIENT_HOST, host, port, path):
            return asyncio.run(run(f"unix:{directory}/etcd"))


def etcd_image(cluster: ClusterProcess) -> MetadataImage:
    return with_store(cluster, lambda store: store.load())


def test_leader_cut_from_its_followers_shrinks_its_isr_and_refuses_acks_all(
    cluster: ClusterProcess, network: Network
) -> None:
    topic = new_topic(cluster)
    leader = cluster.metadata().topics[topic][0].leader
    acked = produce_acked(cluster, topic, [b"before-%d" % i for i in range(20)])

    network.isolate(cluster.host(leader), keep=KEEP)
    # Followers that stopped fetching stay in sync while they have the leader's whole log
    # (Kafka's isCaughtUp); a write puts them behind, and replica.lag.time.max.ms later
    # the leader drops them. That write is not acknowledged (and the high watermark does
    # not pass it while the ISR is below min.insync.replicas).
    code = produce_to(cluster, leader, topic, b"appended-alone", timeout_ms=500)
    assert code == ErrorCode.request_timed_out, code
    view = cluster.wait_until(lambda m: m.topics[topic][0].isr == (leader,),
                              f"broker {leader} alone in the ISR of {topic}")
    assert view.topics[topic][0].leader == leader  # still registered: no election

    code = produce_to(cluster, leader, topic, b"only-on-the-leader")
    assert code == ErrorCode.not_enough_replicas, code

    network.heal_all()
    cluster.wait_until(lambda m: in_sync(m, topic, 1, 3), "the followers back in the ISR")
    acked += produce_acked(cluster, topic, [b"after-%d" % i for i in range(20)])
    check_log(cluster, topic, acked, never=[b"only-on-the-leader"])  # refused before append


def test_leader_cut_from_etcd_stops_leading_and_comes_back_as_a_follower(
    cluster: ClusterProcess, network: Network
) -> None:
    controller = cluster.metadata().controller_id
    leader = next(n for n in cluster.brokers if n != controller)
    others = [n for n in cluster.brokers if n != leader]
    topic = new_topic(cluster, [[leader, *others]])
    before = cluster.metadata().topics[topic][0]
    assert before.leader == leader
    acked = produce_acked(cluster, topic, [b"before-%d" % i for i in range(20)])

    network.cut(cluster.host(leader), ETCD_HOST)
    moved = cluster.wait_until(
        lambda m: leader not in m.brokers and m.topics[topic][0].leader in others
        and m.topics[topic][0].leader_epoch > before.leader_epoch,
        f"the leadership of {topic} moved away from broker {leader}", node_id=others[0])
    # Its session is lost: the cut broker stopped leading before the controller could move
    # anything, so the two leaders never take writes at the same time (acks=1 included).
    assert produce_to(cluster, leader, topic, b"late-1", acks=1) == \
        ErrorCode.not_leader_or_follower
    assert produce_to(cluster, leader, topic, b"late-all") == ErrorCode.not_leader_or_follower
    # Its own Metadata (from its stale image) no longer sends clients to it.
    assert cluster.metadata(leader).topics[topic][0].leader != leader
    # The other two take writes meanwhile. (A client that knows only the cut broker waits
    # for the heal: its stale metadata names no leader.)
    acked += produce_acked(cluster, topic, [b"during-%d" % i for i in range(20)], others)

    network.heal(cluster.host(leader), ETCD_HOST)
    # It registers again (a new broker epoch), follows the new leader and rejoins the ISR.
    cluster.wait_until(lambda m: leader in m.brokers and in_sync(m, topic, 1, 3)
                       and m.topics[topic][0].leader == moved.topics[topic][0].leader,
                       f"broker {leader} back in the ISR of {topic}")
    check_log(cluster, topic, acked, never=[b"late-1", b"late-all"], committed=True)


def test_controller_cut_from_everything_is_replaced_and_its_writes_are_refused(
    cluster: ClusterProcess, network: Network
) -> None:
    topic = new_topic(cluster)
    before = etcd_image(cluster).controller
    assert before is not None
    old, old_epoch = before
    others = [n for n in cluster.brokers if n != old]

    network.isolate(cluster.host(old), keep=())
    cluster.wait_until(lambda m: m.controller_id in others and old not in m.brokers
                       and m.topics[topic][0].leader in others,
                       f"a controller other than broker {old}", node_id=others[0])
    image = etcd_image(cluster)
    assert image.controller is not None
    new, new_epoch = image.controller
    assert new in others and new_epoch > old_epoch
    # The old controller's write, on the partition's current version: etcd refuses it
    # because the controller key is not the old controller's. The leader may shrink the ISR
    # (the cut broker lags) between the read and the write, which would refuse it for the
    # version instead: only an attempt the version did not move under counts.
    for _ in range(20):
        current = etcd_image(cluster).partitions[(topic, 0)]
        zombie = current.state.with_leader(old, (old,), old_epoch)
        written = with_store(
            cluster,
            lambda store, state=zombie, version=current.version:  # type: ignore[misc]
            store.compare_and_set_partition(topic, 0, state, version,
                                            as_controller=(old, old_epoch)))
        assert written is None
        after = etcd_image(cluster).partitions[(topic, 0)]
        assert after.state != zombie
        if after == current:
            break
    else:
        raise AssertionError("the partition's state kept moving under the zombie's writes")

    network.heal_all()
    # The old controller's broker lived through it, registered again and follows.
    cluster.wait_until(lambda m: old in m.brokers and m.controller_id == new
                       and in_sync(m, topic, 1, 3), f"broker {old} back, {new} controller")
    assert cluster.brokers[old].is_running
    assert etcd_image(cluster).controller == (new, new_epoch)
