"""Three brokers whose inter-broker listener is SASL_PLAINTEXT: replica fetches, markers and
verifications authenticate (PLAIN, ``sasl.mechanism.inter.broker.protocol``, the broker's
login from the listener's JAAS line) while clients use the PLAINTEXT listener."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
from confluent_kafka import Producer

from oncelog.client import Admin
from oncelog.client.admin import ScramDeletion, ScramUpsertion
from oncelog.client.errors import AuthenticationError
from oncelog.harness.cluster import ClusterProcess
from tests.support.replicated import REPLICATION_CONFIGS, create_topic, in_sync, read_all

pytestmark = pytest.mark.integration

ClusterFactory = Callable[..., ClusterProcess]

INTERNAL_SASL = {
    "listeners": "INTERNAL://127.0.0.1:0",
    "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:SASL_PLAINTEXT",
    "inter.broker.listener.name": "INTERNAL",
    "sasl.enabled.mechanisms": "PLAIN",
    "sasl.mechanism.inter.broker.protocol": "PLAIN",
    "listener.name.internal.plain.sasl.jaas.config":
        'org.apache.kafka.common.security.plain.PlainLoginModule required '
        'username="broker" password="broker-secret" user_broker="broker-secret";',
}


def test_replication_and_transactions_over_inter_broker_sasl(
        cluster_factory: ClusterFactory) -> None:
    cluster = cluster_factory(3, {**REPLICATION_CONFIGS, **INTERNAL_SASL})
    topic = create_topic(cluster, 3)
    cluster.wait_until(lambda m: in_sync(m, topic, 3, 3), "every replica in sync")
    producer = Producer({"bootstrap.servers": cluster.bootstrap,
                         "transactional.id": "sasl-cluster-txn"})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(30):
        producer.produce(topic, f"v{i}".encode(), partition=i % 3)
    producer.commit_transaction(30)
    assert sorted(read_all(cluster.bootstrap, topic, 3)) == sorted(
        f"v{i}".encode() for i in range(30))
    logs = "".join(b.log_path.read_text() for b in cluster.brokers.values())
    assert "on INTERNAL authenticated as User:broker (PLAIN)" in logs
    assert "broker-secret" not in "".join(
        line for line in logs.splitlines(keepends=True) if not line.startswith("====="))


def internal_port(cluster: ClusterProcess, node_id: int) -> int:
    """The port broker ``node_id`` bound for INTERNAL (from its log line)."""
    found = re.search(r"listener INTERNAL bound on [\d.]+:(\d+)",
                      cluster.brokers[node_id].log_path.read_text())
    assert found is not None
    return int(found.group(1))


def scram_login(port: int, password: str) -> None:
    conf = {"bootstrap.servers": f"127.0.0.1:{port}", "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "erin",
            "sasl.password": password}
    with Admin(conf) as admin:
        admin.list_topics()


def test_scram_users_are_shared_by_every_broker(cluster_factory: ClusterFactory) -> None:
    cluster = cluster_factory(3, {**REPLICATION_CONFIGS, **INTERNAL_SASL,
                                  "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256"})
    with Admin({"bootstrap.servers": cluster.brokers[1].bootstrap}) as admin:
        assert admin.alter_user_scram_credentials(
            [ScramUpsertion("erin", "SCRAM-SHA-256", "erin-secret")]) == {"erin": None}
    for node_id in (1, 2, 3):
        scram_login(internal_port(cluster, node_id), "erin-secret")
    with Admin({"bootstrap.servers": cluster.brokers[2].bootstrap}) as admin:
        assert admin.describe_user_scram_credentials() == {"erin": {"SCRAM-SHA-256": 4096}}
        assert admin.alter_user_scram_credentials(
            [ScramDeletion("erin", "SCRAM-SHA-256")]) == {"erin": None}
    with pytest.raises(AuthenticationError):
        scram_login(internal_port(cluster, 3), "erin-secret")
