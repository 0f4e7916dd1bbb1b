"""Routine operations that must not lose or replace acknowledged data, on a real 3-broker
cluster on etcd with confluent-kafka (issue 25's cases 1-3):

1. a follower restarted while a record is replicated to it but not to every ISR member
   keeps its checkpointed high watermark, so when it leads next it does not expose that
   record before every ISR member has it (Kafka's ``replication-offset-checkpoint``);
2. a follower restarted with an empty partition directory (a replaced disk) re-enters the
   ISR only once it has fetched in its new life (KIP-903), so it can never be elected with
   an empty log;
3. followers that fetch from a new leader before that leader has applied its leadership
   (NOT_LEADER_OR_FOLLOWER / UNKNOWN_LEADER_EPOCH) retry, so a preferred election right
   after a restart ends with every partition back to a full ISR.

Every wait is on a condition with a deadline.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, Producer

from oncelog.harness.broker import REPO_ROOT, default_argv_prefix
from oncelog.harness.cluster import ClusterProcess, MetadataView
from tests.support.replicated import REPLICATION_CONFIGS, create_topic, log_batches, read_all

pytestmark = pytest.mark.integration

ClusterFactory = Callable[..., ClusterProcess]


def _produce(bootstrap: str, topic: str, values: list[bytes], partition: int = 0,
             **conf: Any) -> list[str | None]:
    """Produce ``values`` to ``partition`` and wait for each delivery report: None for an
    acknowledged record, else the error's name."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", **conf})
    outcomes: dict[bytes, str | None] = {}

    def delivered(error: KafkaError | None, message: Any) -> None:
        outcomes[message.value()] = None if error is None else error.name()

    for value in values:
        producer.produce(topic, value, partition=partition, on_delivery=delivered)
    assert producer.flush(60) == 0, "delivery reports still pending after 60 s"
    return [outcomes[v] for v in values]


def _wait_for(predicate: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"no {what} within {timeout:.0f}s"
        time.sleep(0.1)  # polling interval, not synchronisation


def _isr(m: MetadataView, topic: str) -> list[int]:
    return sorted(m.topics[topic][0].isr)


def _all_full(m: MetadataView) -> bool:
    """Every partition of every topic (internal ones too) led, with its full ISR."""
    return bool(m.topics) and all(
        p.leader > 0 and sorted(p.isr) == sorted(p.replicas)
        for parts in m.topics.values() for p in parts.values())


def test_restarted_follower_keeps_its_high_watermark(cluster_factory: ClusterFactory) -> None:
    """Case 1: broker 3 is paused while in the ISR, so u1 (acks=all) is never acknowledged;
    broker 2, which has u1, restarts cleanly and then leads (broker 1 stopped cleanly) with
    ISR [2, 3]. Its high watermark is the one it had (1), not its log end (2): no consumer
    reads u1 until broker 3 has it too."""
    cluster = cluster_factory(3, {
        **REPLICATION_CONFIGS,
        # broker 3, paused, stays registered and in the ISR for the whole test
        "replica.lag.time.max.ms": 60000, "broker.session.timeout.ms": 60000,
    })
    topic = create_topic(cluster, assignment=[[1, 2, 3]])
    assert _produce(cluster.bootstrap, topic, [b"c0"]) == [None]
    cluster.pause(3)
    try:
        one = cluster.brokers[1].bootstrap
        outcome = _produce(one, topic, [b"u1"], retries=0, **{
            "enable.idempotence": False, "request.timeout.ms": 1500,
            "message.timeout.ms": 5000})
        assert outcome != [None], "u1 was acknowledged without broker 3"
        _wait_for(lambda: len(log_batches(cluster.brokers[2].data_dir, topic, 0, 10)) == 2,
                  "u1 on broker 2")

        assert cluster.stop(2) == 0
        cluster.restart(2)
        cluster.wait_until(lambda m: _isr(m, topic) == [1, 2, 3], "broker 2 back in the ISR",
                           node_id=1)
        assert cluster.stop(1) == 0
        m = cluster.wait_until(lambda m: m.topics[topic][0].leader == 2, "broker 2 leading",
                               node_id=2)
        assert _isr(m, topic) == [2, 3]
        two = cluster.brokers[2].bootstrap
        assert read_all(two, topic, 1) == [b"c0"], "u1 exposed before broker 3 had it"
        assert read_all(two, topic, 1, committed=True) == [b"c0"]
    finally:
        cluster.resume(3)
    # Once broker 3 has fetched u1 the ISR holds it: now it is readable, at offset 1.
    _wait_for(lambda: read_all(cluster.brokers[2].bootstrap, topic, 1) == [b"c0", b"u1"],
              "u1 readable once broker 3 has it")


def test_replaced_disk_rejoins_the_isr_only_after_fetching(
    cluster_factory: ClusterFactory,
) -> None:
    """Case 2: broker 3 loses its partition directory (a replaced disk) and comes back;
    it is stopped right after it registers, before it fetches anything. The leader must not
    take its previous life's log end for its new one: the ISR stays [1, 2], so when brokers
    1 and 2 die broker 3 is not elected with an empty log, and nothing acknowledged is lost
    once they are back."""
    cluster = cluster_factory(3, REPLICATION_CONFIGS)
    topic = create_topic(cluster, assignment=[[1, 2, 3]])
    acked = [f"w{i}".encode() for i in range(5)]
    assert _produce(cluster.bootstrap, topic, acked, **{"enable.idempotence": True}) == [
        None] * 5
    three = cluster.brokers[3]
    cluster.kill(3)
    cluster.wait_until(lambda m: 3 not in m.brokers and _isr(m, topic) == [1, 2],
                       "broker 3 out of the ISR")
    shutil.rmtree(three.data_dir / f"{topic}-0")

    three.env = {**(three.env or {}), "ONCELOG_PAUSE_AT": "broker.registered"}
    three.start(wait_ready=False)
    try:
        cluster.wait_until(lambda m: 3 in m.brokers, "broker 3 registered", node_id=1)
        _wait_for(lambda: _process_state(three.pid) == "T", "broker 3 stopped")
        # A record acknowledged now was fetched by broker 2 after the leader saw broker 3's
        # new registration: the leader's ISR expansion check ran since.
        more = _produce(cluster.brokers[1].bootstrap, topic, [b"w5"])
        assert more == [None]
        m = cluster.metadata(1)
        assert _isr(m, topic) == [1, 2], "broker 3 re-entered the ISR before fetching"
        log = cluster.brokers[1].log_text(since_start=True)
        assert f"expanding ISR of {topic}-0" not in log, log[-3000:]
        cluster.kill(1)
        cluster.kill(2)
    finally:
        if three.pid is not None:
            subprocess.run(["kill", "-CONT", str(three.pid)], check=False)
    # Broker 3 alone: it must not lead (it has nothing); 1 and 2 come back with the data.
    m = cluster.wait_until(
        lambda m: not {1, 2} & m.brokers and m.topics[topic][0].leader not in (1, 2),
        "brokers 1 and 2 gone and their leadership with them", node_id=3)
    assert m.topics[topic][0].leader == -1, "broker 3 was elected with an empty log"
    cluster.restart(1)
    cluster.restart(2)
    cluster.wait_until(lambda m: m.topics[topic][0].leader in (1, 2)
                       and _isr(m, topic) == [1, 2, 3], "partition led by 1 or 2, full ISR",
                       timeout=60)
    assert read_all(cluster.bootstrap, topic, 1) == [*acked, b"w5"]


def _process_state(pid: int | None) -> str:
    if pid is None:
        return ""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return ""
    return stat.rsplit(")", 1)[1].split()[0]


def test_preferred_election_after_a_restart_ends_in_sync(
    cluster_factory: ClusterFactory,
) -> None:
    """Case 3: broker 1 restarts with a slow metadata watch (each change applied 500 ms
    late), so after the preferred election the followers fetch from it before it knows it
    leads (NOT_LEADER_OR_FOLLOWER, UNKNOWN_LEADER_EPOCH). They must retry: every partition,
    ends led by its preferred replica, acks=all writes go through and reach every
    replica."""
    cluster = cluster_factory(3, REPLICATION_CONFIGS)
    topic = create_topic(cluster, 3, assignment=[[1, 2, 3], [1, 3, 2], [2, 3, 1]])
    cluster.wait_until(_all_full, "every partition in sync")
    one = cluster.brokers[1]
    assert cluster.stop(1) == 0
    one.env = {**(one.env or {}), "ONCELOG_METADATA_DELAY_MS": "500"}
    cluster.restart(1)
    cluster.wait_until(lambda m: _all_full(m) and 1 in m.brokers, "broker 1 back in sync",
                       timeout=60)
    assert cluster.metadata(2).topics[topic][0].leader != 1
    done = subprocess.run(
        [*default_argv_prefix(), "topics", "elect-leaders", "--bootstrap-server",
         cluster.brokers[2].bootstrap, "--election-type", "preferred",
         "--all-topic-partitions"],
        capture_output=True, text=True, timeout=60, cwd=REPO_ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    cluster.wait_until(
        lambda m: _all_full(m) and all(
            p.leader == p.replicas[0] for parts in m.topics.values() for p in parts.values()),
        "every partition led by its preferred replica", timeout=30)
    # Every follower fetches from its new leader: a record written to each partition now
    # reaches every replica's log (a follower that gave up never gets it).
    for index in range(3):
        assert _produce(cluster.bootstrap, topic, [b"after"], index) == [None]
    _wait_for(lambda: all(
        len(log_batches(cluster.brokers[node].data_dir, topic, index, 100)) == 1
        for index in range(3) for node in (1, 2, 3)), "the records on every replica")
    cluster.wait_until(_all_full, "every partition in sync")


def test_a_leader_registered_again_leads_at_a_new_leader_epoch(
    cluster_factory: ClusterFactory,
) -> None:
    """etcd pauses past every broker's session: each one is fenced and registers again
    with a new broker epoch, and the controller role changes hands. No partition may then
    be led at the leader epoch of its leader's previous life (what that life appended while
    fenced may be missing elsewhere; Kafka bumps the leader epoch on every fence): the new
    controller finds each such leader from the partition states and elects again."""
    cluster = cluster_factory(3, REPLICATION_CONFIGS)
    topic = create_topic(cluster, 3)
    before = {(t, i): p.leader_epoch for t, parts in cluster.metadata().topics.items()
              for i, p in parts.items()}
    cluster.pause_etcd()
    try:
        _wait_for(lambda: all("session lost" in b.log_text(since_start=True)
                              for b in cluster.brokers.values()), "every session lost")
    finally:
        cluster.resume_etcd()
    cluster.wait_until(
        lambda m: all(p.leader > 0 and p.leader_epoch > before[(t, i)]
                      for t, parts in m.topics.items() for i, p in parts.items()),
        "every partition led at a newer leader epoch", timeout=30)
    cluster.wait_until(_all_full, "every partition in sync", timeout=30)
    for index in range(3):
        assert _produce(cluster.bootstrap, topic, [b"after"], index) == [None]
