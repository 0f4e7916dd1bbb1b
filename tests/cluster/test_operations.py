"""The procedures of docs/operations.md ("Operating a cluster"), each run as written against
three real brokers on etcd with confluent-kafka: a rolling restart under an idempotent
acks=all producer (nothing acknowledged lost, no duplicate, full ISR after each step within
a bounded time), replacing the disk of a crashed broker (it rejoins as a follower and
enters the ISR only with every acknowledged record; then it alone serves them all), and a
preferred leader election after a restart (every partition, internal topics included, led
by its preferred replica and back to a full ISR, its followers still following).

"Healthy", the condition each procedure waits for before its next step, is what the page
tells operators to watch: every broker's Metadata names all brokers and gives every
partition a leader and its full ISR, every broker's ``oncelog_under_replicated_partitions``
is 0, and ``oncelog cluster`` prints ``Under-replicated partitions: 0``."""

from __future__ import annotations

import re
import shutil
import struct
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, Message, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from oncelog.cli.metrics import parse as parse_metrics
from oncelog.harness.cluster import ClusterProcess
from oncelog.harness.fault_proxy import FaultRules
from tests.support.cli import ok, oncelog_cli
from tests.support.replicated import REPLICATION_CONFIGS, NumberedStream, in_sync, read_all

pytestmark = pytest.mark.integration

ClusterFactory = Callable[..., ClusterProcess]

HEAL_S = 30.0  # the bound on "back to a full ISR" after each step
LAG_S = int(REPLICATION_CONFIGS["replica.lag.time.max.ms"]) / 1000
# Many partitions, many leadership moves per step: a follower's race with its new leader
# (issue 25: seen with 21 partitions) gets its chances.
PARTITIONS = 12


# -- what to watch ----------------------------------------------------------------------------
def under_replicated_metric(cluster: ClusterProcess, node_id: int) -> int:
    with urllib.request.urlopen(cluster.metrics_url(node_id), timeout=5) as response:
        text = response.read().decode()
    (value,) = [m.value for m in parse_metrics(text)
                if m.name == "oncelog_under_replicated_partitions"]
    return int(float(value))


def unhealthy(cluster: ClusterProcess) -> str | None:
    """Why the cluster is not healthy (module docstring) as its brokers see it, else None."""
    expected = set(cluster.brokers)
    for node_id in cluster.running:
        m = cluster.metadata(node_id)
        if m.brokers != expected:
            return f"broker {node_id} lists brokers {sorted(m.brokers)}"
        for topic, partitions in m.topics.items():
            for index, p in partitions.items():
                if p.leader <= 0 or sorted(p.isr) != sorted(p.replicas):
                    return (f"broker {node_id}: {topic}-{index} leader {p.leader} replicas "
                            f"{list(p.replicas)} isr {list(p.isr)}")
        count = under_replicated_metric(cluster, node_id)
        if count:
            return f"broker {node_id}: oncelog_under_replicated_partitions {count}"
    return None


def wait_healthy(cluster: ClusterProcess, what: str, timeout: float = HEAL_S) -> float:
    """Poll until healthy (then ``oncelog cluster`` must agree); the seconds it took."""
    started = time.monotonic()
    while True:
        try:
            problem = unhealthy(cluster)
        except Exception as exc:  # a broker still starting
            problem = repr(exc)
        if problem is None:
            out = ok(oncelog_cli("cluster", "--bootstrap-server", cluster.bootstrap))
            listed = {int(n) for n in re.findall(r"^\s*(\d+)\s+\S+\s+\d+", out, re.MULTILINE)}
            if "Under-replicated partitions: 0\n" in out and listed == set(cluster.brokers):
                return time.monotonic() - started
            problem = f"oncelog cluster printed:\n{out}"
        assert time.monotonic() - started < timeout, (
            f"{what}: not back to a full ISR within {timeout:.0f}s: {problem}\n{cluster.logs()}")
        time.sleep(0.2)  # polling the cluster's state


def create_topic(cluster: ClusterProcess, name: str, partitions: int,
                 min_insync: int) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(name, partitions, 3,
                                  config={"min.insync.replicas": str(min_insync)})],
                        operation_timeout=10)[name].result(timeout=30)
    cluster.wait_until(lambda m: in_sync(m, name, partitions, 3), f"{name} in sync")


def log_end(data_dir: Path, topic: str, index: int) -> int:
    """The end offset of a replica's log as its segment files hold it (a torn last batch,
    being written, does not count)."""
    end = 0
    for segment in sorted((data_dir / f"{topic}-{index}").glob("*.log")):
        buf = segment.read_bytes()
        pos = 0
        while pos + 27 <= len(buf):
            base, length = struct.unpack_from(">qi", buf, pos)
            if length <= 0 or pos + 12 + length > len(buf):
                break
            (last_delta,) = struct.unpack_from(">i", buf, pos + 23)
            end = max(end, base + last_delta + 1)
            pos += 12 + length
    return end


# -- the procedures ---------------------------------------------------------------------------
def test_rolling_restart_loses_nothing_and_heals_after_each_step(
    cluster_factory: ClusterFactory, streams: list[NumberedStream],
) -> None:
    # More controlled-shutdown attempts than Kafka's 3 (test_cluster_basics: a slow machine
    # needed them to move the controller's ~40 leaderships).
    cluster = cluster_factory(configs={**REPLICATION_CONFIGS,
                                       "controlled.shutdown.max.retries": 12}, metrics=True)
    topic = "rolling"
    create_topic(cluster, topic, PARTITIONS, min_insync=2)
    stream = NumberedStream(cluster.bootstrap, topic)
    streams.append(stream)
    stream.wait_acked(100)
    healed: dict[int, float] = {}
    for node_id in (1, 2, 3):
        acked = len(stream.acked)
        assert cluster.stop(node_id) == 0  # SIGTERM: a controlled shutdown, exit 0
        stopped = cluster.brokers[node_id].log_text(since_start=True)
        assert "controlled shutdown: this broker leads no partition" in stopped
        cluster.restart(node_id)
        healed[node_id] = wait_healthy(cluster, f"after restarting broker {node_id}")
        stream.wait_acked(acked + 100)  # the producer went on through the step
    # A follower that stopped fetching after the last step would leave the ISR
    # replica.lag.time.max.ms later: the ISRs must still be full after twice that.
    restarted_at = time.monotonic() - healed[3]
    while time.monotonic() < restarted_at + 2 * LAG_S:
        time.sleep(0.2)  # the producer goes on meanwhile
    wait_healthy(cluster, "a while after the rolling restart")
    stream.stop()
    assert not stream.failed, stream.failed[:5]
    values = read_all(cluster.bootstrap, topic, PARTITIONS)
    lost = set(stream.acked) - set(values)
    assert not lost, f"{len(lost)} acknowledged records lost, e.g. {sorted(lost)[:5]}"
    assert len(values) == len(set(values)), "duplicates in the log"
    print(f"rolling restart: {len(stream.acked)} acknowledged; full ISR after each restart "
          f"in {', '.join(f'{healed[n]:.1f}s' for n in (1, 2, 3))}")


RECORDS = 1500


def test_replaced_disk_rejoins_as_a_follower_and_enters_the_isr_once_caught_up(
    cluster_factory: ClusterFactory,
) -> None:
    # One batch per follower fetch (the first batch is returned whole): catching up with
    # 1,500 batches takes many rounds, so an ISR entry before the copy is complete shows.
    # Proxied: the leader's proxy can refuse the restarted broker's connections.
    cluster = cluster_factory(configs={**REPLICATION_CONFIGS, "replica.fetch.max.bytes": 0},
                              metrics=True, proxied=True)
    topic = "disk"
    create_topic(cluster, topic, 1, min_insync=2)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all",
                         "enable.idempotence": True, "linger.ms": 0,
                         "batch.num.messages": 1, "message.timeout.ms": 60000})

    sent = [f"r{i}".encode() for i in range(RECORDS)]
    for value in sent:
        producer.produce(topic, value=value, partition=0)
        producer.poll(0)
    assert producer.flush(60) == 0  # every record acknowledged by the ISR
    leader = cluster.metadata().topics[topic][0].leader
    victim = next(n for n in (1, 2, 3) if n != leader)

    # The disk fails and takes the broker down (kill -9): it leaves the ISR when its lease
    # expires, the leader's log end still where the broker's was.
    cluster.kill(victim)
    # The procedure: an empty data directory, the same node id.
    data_dir = cluster.brokers[victim].data_dir
    shutil.rmtree(data_dir)
    data_dir.mkdir()
    # While it cannot fetch from the leader it must not enter the ISR, whatever the leader
    # remembers of its previous life (Kafka's KIP-903), however often the other follower
    # fetches meanwhile: the leader's proxy refuses new connections (the restarted broker's)
    # and keeps the other follower's; watched for twice the lag time.
    proxy = cluster.proxies[leader]
    proxy.set_rules(FaultRules(refuse=True))
    cluster.restart(victim)  # ready once registered (after its old lease expired)
    meta = (data_dir / "meta.properties").read_text()
    peer_meta = (cluster.brokers[leader].data_dir / "meta.properties").read_text()
    assert meta.splitlines()[0] == peer_meta.splitlines()[0]  # cluster.id, from etcd
    assert f"node.id={victim}" in meta
    watched_until = time.monotonic() + 2 * LAG_S
    while time.monotonic() < watched_until:
        isr = cluster.metadata(leader).topics[topic][0].isr
        assert victim not in isr, (
            f"broker {victim} in the ISR {list(isr)} before fetching anything\n"
            f"{cluster.logs()}")
        time.sleep(0.05)  # polling the ISR through the whole window
    proxy.set_rules(FaultRules())

    # A follower that enters the ISR only once its log holds every acknowledged record.
    deadline = time.monotonic() + HEAL_S
    while victim not in cluster.metadata(leader).topics[topic][0].isr:
        assert time.monotonic() < deadline, cluster.logs()
        time.sleep(0.05)  # polling the ISR
    held = log_end(data_dir, topic, 0)
    assert held >= len(sent), (
        f"broker {victim} entered the ISR holding {held} of {len(sent)} acknowledged "
        f"records\n{cluster.logs()}")
    healed = wait_healthy(cluster, f"broker {victim} with a new disk")

    # Its copy is whole: with the two others stopped it leads alone and serves everything.
    for other in (n for n in (1, 2, 3) if n != victim):
        assert cluster.stop(other) == 0
    cluster.wait_until(lambda m: m.topics[topic][0].leader == victim,
                       f"broker {victim} leading", node_id=victim)
    assert read_all(cluster.brokers[victim].bootstrap, topic, 1) == sent
    print(f"disk replacement: full ISR {healed:.1f}s after the ISR entry")


def test_preferred_election_after_a_restart_leaves_every_partition_in_sync(
    cluster_factory: ClusterFactory,
) -> None:
    cluster = cluster_factory(configs=REPLICATION_CONFIGS, metrics=True)
    topic = "preferred"
    create_topic(cluster, topic, PARTITIONS, min_insync=3)  # acks=all needs every replica
    victim = 2
    assert cluster.stop(victim) == 0
    cluster.restart(victim)
    wait_healthy(cluster, f"after restarting broker {victim}")
    moved = [f"{t}-{i}" for t, parts in cluster.metadata().topics.items()
             for i, p in parts.items() if p.leader != p.replicas[0]]
    assert moved  # the restarted broker leads nothing

    out = ok(oncelog_cli("topics", "elect-leaders", "--bootstrap-server", cluster.bootstrap,
                         "--election-type", "preferred", "--all-topic-partitions"))
    elected_at = time.monotonic()
    assert out.startswith("Successfully completed leader election (PREFERRED)"), out
    assert all(name in out for name in moved), out
    cluster.wait_until(lambda m: all(p.leader == p.replicas[0] for parts in m.topics.values()
                                     for p in parts.values()),
                       "every partition led by its preferred replica")

    # Every follower goes on following its new leader: writes that need all three replicas
    # are acknowledged until well past replica.lag.time.max.ms (a follower that stopped
    # fetching would have been dropped from the ISR by then), and the ISRs stay full.
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all",
                         "enable.idempotence": True, "message.timeout.ms": 15000})
    failures: list[str] = []

    def delivered(error: KafkaError | None, message: Message) -> None:
        if error is not None:
            failures.append(f"{message.topic()}-{message.partition()}: {error}")

    rounds = 0
    while rounds == 0 or time.monotonic() < elected_at + 3 * LAG_S:
        for index in range(PARTITIONS):
            producer.produce(topic, value=f"after the election {rounds}".encode(),
                             partition=index, on_delivery=delivered)
        assert producer.flush(20) == 0 and not failures, (
            f"round {rounds} not acknowledged: {failures}\n{cluster.logs()}")
        rounds += 1
        time.sleep(0.2)  # pacing the writes, not waiting for a state
    healed = wait_healthy(cluster, "after the preferred election")
    print(f"preferred election: {rounds} rounds of writes; healthy {healed:.1f}s later")
