"""A broker restarted while its previous life's registration is still alive in etcd (kill -9
and start again within ``broker.session.timeout.ms``) waits for that lease to expire,
logging why once per attempt, then registers and serves -- as Kafka's broker keeps
retrying its registration -- instead of exiting with "registered by a live broker"."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from oncelog.harness.cluster import ClusterProcess
from tests.support.replicated import REPLICATION_CONFIGS, in_sync

pytestmark = pytest.mark.integration

SESSION_MS = 8000  # long enough that the restarted process starts well before it lapses


def test_broker_restarted_within_its_session_waits_for_the_old_lease_then_serves(
    cluster_factory: Callable[..., ClusterProcess],
) -> None:
    cluster = cluster_factory(configs={**REPLICATION_CONFIGS,
                                       "broker.session.timeout.ms": SESSION_MS})
    topic = "restarted"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    # min.insync.replicas=3: an acks=all write is acknowledged only with every replica.
    admin.create_topics([NewTopic(topic, 3, 3, config={"min.insync.replicas": "3"})],
                        operation_timeout=10)[topic].result(timeout=30)
    cluster.wait_until(lambda m: in_sync(m, topic, 3, 3), "the topic fully in sync")

    victim = 3
    cluster.kill(victim)
    killed_at = time.monotonic()
    broker = cluster.restart(victim)  # returns at its ready line (ServerStartError if it exits)
    ready_after = time.monotonic() - killed_at

    log = broker.log_text(since_start=True)
    waits = [line for line in log.splitlines() if "is still registered" in line]
    assert waits, log
    assert "expires in" in waits[0]  # the old lease's remaining time, from etcd
    assert log.index(waits[-1]) < log.index("registered at")  # waited, then registered
    # The old lease was last renewed at most a heartbeat before the kill.
    assert ready_after > SESSION_MS / 1000 - 2, f"ready {ready_after:.1f}s after the kill"

    # It serves: answers Metadata (wait_until asks every running broker), is back in every
    # ISR, and an acks=all write that needs all three replicas is acknowledged.
    cluster.wait_until(lambda m: victim in m.brokers and in_sync(m, topic, 3, 3),
                       f"broker {victim} back in every ISR")
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all",
                         "enable.idempotence": True, "message.timeout.ms": 20000})
    for index in range(3):
        producer.produce(topic, value=b"after the restart", partition=index)
    assert producer.flush(30) == 0
