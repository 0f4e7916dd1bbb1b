"""Faults a replicated partition must survive, on a real 3-broker cluster:

- the leader paused (SIGSTOP) past its session: a new leader is elected; resumed, the old
  leader registers again, learns from the metadata watch that it was replaced, truncates
  what it appended alone and rejoins the ISR; acknowledged acks=all records are all there
  once, and no read_committed consumer ever sees the zombie's own writes;
- a follower that diverged after an unclean stop (it took acks=1 writes alone, then died,
  and a stale replica was elected uncleanly) truncates its divergent suffix (KIP-101/279)
  and ends with the new leader's log.

Short session and lag timeouts come from config; every wait is on a condition with a
deadline (Metadata polled by ``ClusterProcess.wait_until``, deliveries by the streams).
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from oncelog.errors import ErrorCode
from oncelog.harness.cluster import ClusterProcess
from oncelog.harness.rawkafka import RawConnection, produce
from oncelog.records.codec import RecordInput, encode_batch
from tests.support.replicated import (
    PAUSE_TOLERANT_PRODUCER,
    REPLICATION_CONFIGS,
    NumberedStream,
    create_topic,
    in_sync,
    leader_of,
    log_batches,
    read_all,
)

pytestmark = pytest.mark.integration

ClusterFactory = Callable[..., ClusterProcess]


@pytest.fixture
def cluster(cluster_factory: ClusterFactory) -> ClusterProcess:
    return cluster_factory(3, REPLICATION_CONFIGS)


class CommittedReader:
    """A read_committed consumer assigned to partition 0 from offset 0, polling from a
    thread until stopped; ``seen`` is every value it was ever given."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.consumer = Consumer({
            "bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex[:6]}",
            "enable.auto.commit": False, "isolation.level": "read_committed",
        })
        self.consumer.assign([TopicPartition(topic, 0, 0)])
        self.seen: list[bytes] = []
        self._progress = threading.Condition()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                message = self.consumer.poll(0.2)
                if message is None or message.error() is not None:
                    continue
                with self._progress:
                    self.seen.append(bytes(message.value() or b""))
                    self._progress.notify_all()
        finally:
            self.consumer.close()

    def wait_seen(self, values: set[bytes], timeout: float = 60) -> None:
        with self._progress:
            assert self._progress.wait_for(lambda: values <= set(self.seen), timeout), (
                f"{len(values - set(self.seen))} values never read")

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)


def zombie_batch(prefix: bytes, count: int) -> bytes:
    return encode_batch([RecordInput(value=prefix + str(i).encode()) for i in range(count)])


def same_logs_below_high_watermark(cluster: ClusterProcess, topic: str, hw: int,
                                   leader: int) -> None:
    """Every replica's log files hold the leader's batches below ``hw`` (brokers killed
    first, so the files are still)."""
    for node in cluster.running:
        cluster.kill(node)
    logs = {n: log_batches(b.data_dir, topic, 0, hw) for n, b in cluster.brokers.items()}
    assert logs[leader], "the leader's log is empty"
    assert all(batches == logs[leader] for batches in logs.values()), {
        n: len(batches) for n, batches in logs.items()}


def test_paused_leader_is_replaced_truncated_and_rejoins(
    cluster: ClusterProcess, streams: list[NumberedStream]
) -> None:
    topic = create_topic(cluster)
    old = leader_of(cluster, topic)
    others = [n for n in cluster.brokers if n != old]
    stream = NumberedStream(cluster.bootstrap, topic, PAUSE_TOLERANT_PRODUCER)
    streams.append(stream)
    reader = CommittedReader(cluster.bootstrap, topic)
    try:
        stream.wait_acked(300)
        cluster.pause(old)
        view = cluster.wait_until(
            lambda m: old not in m.brokers and m.topics[topic][0].leader in others,
            "a new leader while the old one is paused", node_id=others[0])
        new = view.topics[topic][0].leader
        stream.wait_acked(len(stream.acked) + 300)
        # A write to the old leader, sent while it is still stopped (it waits in its
        # socket), so it is read as soon as the process runs again, racing the metadata
        # watch that tells it it was replaced: refused, or appended alone and truncated.
        zombie = RawConnection(cluster.brokers[old].bootstrap, timeout=30)
        answers: list[int] = []
        writer = threading.Thread(target=lambda: answers.append(int(produce(
            zombie, topic, zombie_batch(b"zombie-", 5), acks=1).error_code)))
        writer.start()
        cluster.resume(old)
        writer.join(40)
        zombie.close()
        assert answers and answers[0] in (
            ErrorCode.none, ErrorCode.not_leader_or_follower, ErrorCode.fenced_leader_epoch,
        ), answers
        # It registered again (its session had expired), follows the new leader and is
        # back in the ISR.
        cluster.wait_until(
            lambda m: old in m.brokers and m.topics[topic][0].leader == new
            and in_sync(m, topic, 1, 3), "the old leader back in the ISR")
        stream.wait_acked(len(stream.acked) + 300)
        stream.stop()
        assert stream.failed == []
        values = read_all(cluster.brokers[new].bootstrap, topic, 1)
        reader.wait_seen(set(stream.acked))
    finally:
        reader.stop()
    assert len(values) == len(set(values)), "a record is in the log twice"
    assert set(stream.acked) <= set(values), "an acknowledged record is lost"
    assert not [v for v in values if v.startswith(b"zombie-")], "the zombie's write stayed"
    assert not [v for v in reader.seen if v.startswith(b"zombie-")], (
        "a read_committed consumer saw the zombie's write")
    same_logs_below_high_watermark(cluster, topic, len(values), new)


def test_diverged_follower_is_truncated_to_the_unclean_leaders_log(
    cluster: ClusterProcess,
) -> None:
    topic = f"diverge-{uuid.uuid4().hex[:6]}"
    first, stale, third = 1, 2, 3
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(
        topic, 1, replica_assignment=[[first, stale, third]],
        config={"unclean.leader.election.enable": "true", "min.insync.replicas": "1"},
    )])[topic].result(timeout=30)
    cluster.wait_until(lambda m: in_sync(m, topic, 1, 3), f"{topic} in sync")

    def send(bootstrap: str, values: list[bytes], acks: str) -> None:
        errors: list[KafkaError | None] = []
        producer = Producer({"bootstrap.servers": bootstrap, "acks": acks,
                             "enable.idempotence": False, "linger.ms": 0,
                             "message.timeout.ms": 30000})
        for value in values:
            producer.produce(topic, value, partition=0,
                             on_delivery=lambda err, _: errors.append(err))
        assert producer.flush(40) == 0
        assert errors == [None] * len(values), errors

    common = [f"common-{i}".encode() for i in range(50)]
    send(cluster.brokers[first].bootstrap, common, "all")
    # The followers stop; the leader alone takes acks=1 writes (its divergent suffix).
    cluster.kill(stale)
    cluster.kill(third)
    cluster.wait_until(lambda m: m.topics[topic][0].isr == (first,), "the ISR shrunk",
                       node_id=first)
    send(cluster.brokers[first].bootstrap,
         [f"divergent-{i}".encode() for i in range(20)], "1")
    # The leader dies; the stale replica comes back alone and is elected uncleanly.
    cluster.kill(first)
    cluster.restart(stale)
    view = cluster.wait_until(
        lambda m: m.topics[topic][0].leader == stale, "the stale replica elected uncleanly",
        timeout=60)
    assert view.topics[topic][0].isr == (stale,)
    later = [f"later-{i}".encode() for i in range(30)]
    send(cluster.brokers[stale].bootstrap, later, "1")
    # The old leader and the third replica come back as followers: truncated, caught up.
    cluster.restart(first)
    cluster.restart(third)
    cluster.wait_until(lambda m: m.topics[topic][0].leader == stale
                       and in_sync(m, topic, 1, 3), "every replica back in the ISR",
                       timeout=60)
    values = read_all(cluster.brokers[stale].bootstrap, topic, 1)
    assert values == common + later
    same_logs_below_high_watermark(cluster, topic, len(values), stale)
