"""A 3-broker cluster whose inter-broker listener is SASL_SSL (SCRAM-SHA-512, the brokers'
principal ``User:broker`` in ``super.users`` of the StandardAuthorizer, so that replica
fetches need its ClusterAction): clients use another SASL_SSL listener,
replication is rf=3 with acks=all, confluent-kafka commits transactions, and the cluster
survives a kill -9 of a partition leader.

The SCRAM credentials live in the metadata store; the brokers' own is needed before they
start, so the harness seeds them (as Kafka's ``kafka-storage format --add-scram``). Every
replica fetch and marker goes to the INTERNAL listener, which speaks nothing but TLS then
SASL: a fetcher without TLS (checked by disabling it) never brings a follower into the ISR
and the test fails; the harness's own PLAINTEXT listener is not the inter-broker one.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from oncelog.harness.cluster import ClusterProcess
from oncelog.harness.etcd import EtcdProcess
from oncelog.security.acl import AUTHORIZER_CLASS
from tests.support.replicated import REPLICATION_CONFIGS, in_sync, read_all
from tests.support.tls import TlsMaterial

pytestmark = pytest.mark.integration

SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule required"
USERS = {"broker": ("SCRAM-SHA-512", "broker-secret"),
         "carol": ("SCRAM-SHA-512", "carol-secret")}


def sasl_ssl_configs(tls: TlsMaterial) -> dict[str, str]:
    """Brokers with CLIENT and INTERNAL listeners, both SASL_SSL; the harness keeps its
    PLAINTEXT listener (``--listen``) for its Metadata polls only."""
    return {
        **tls.broker_configs(),
        "listeners": "CLIENT://127.0.0.1:0,INTERNAL://127.0.0.1:0",
        "listener.security.protocol.map":
            "PLAINTEXT:PLAINTEXT,CLIENT:SASL_SSL,INTERNAL:SASL_SSL",
        "inter.broker.listener.name": "INTERNAL",
        "sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
        "listener.name.internal.scram-sha-512.sasl.jaas.config":
            f'{SCRAM} username="broker" password="broker-secret";',
        # The StandardAuthorizer with the brokers' principal a super user: replica fetches
        # (ClusterAction), epoch queries, markers and verifications pass as User:broker.
        # carol's own checks are the single-broker tables' (tests/integration/test_authz_*);
        # ANONYMOUS is the harness's PLAINTEXT listener, which polls Metadata.
        "authorizer.class.name": AUTHORIZER_CLASS,
        "super.users": "User:broker;User:carol;User:ANONYMOUS",
    }


def client_conf(cluster: ClusterProcess, tls: TlsMaterial, mechanism: str, user: str,
                password: str) -> dict[str, Any]:
    return {"bootstrap.servers": cluster.listener_bootstrap("CLIENT"),
            "security.protocol": "SASL_SSL", "ssl.ca.location": str(tls.ca),
            "sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password}


def commit(conf: dict[str, Any], topic: str, values: list[str]) -> None:
    producer = Producer({**conf, "transactional.id": "sasl-ssl-cluster", "acks": "all"})
    producer.init_transactions(60)
    producer.begin_transaction()
    for i, value in enumerate(values):
        producer.produce(topic, value.encode(), partition=i % 3)
    producer.commit_transaction(60)


def test_cluster_on_inter_broker_sasl_ssl(tmp_path: Path, etcd: EtcdProcess,
                                          tls_material: TlsMaterial) -> None:
    cluster = ClusterProcess(tmp_path / "cluster", configs={
        **REPLICATION_CONFIGS, **sasl_ssl_configs(tls_material)}, etcd=etcd,
        scram_users=USERS)
    try:
        run_on(cluster, tls_material)
    except BaseException:
        print(cluster.logs())
        raise
    finally:
        cluster.close()


def run_on(cluster: ClusterProcess, tls: TlsMaterial) -> None:
    cluster.start()
    carol = client_conf(cluster, tls, "SCRAM-SHA-512", "carol", "carol-secret")
    topic = f"sasl-ssl-{uuid.uuid4().hex[:8]}"
    admin = AdminClient(carol)
    admin.create_topics(
        [NewTopic(topic, 3, 3, config={"min.insync.replicas": "2"})],
        operation_timeout=10)[topic].result(timeout=30)
    cluster.wait_until(lambda m: in_sync(m, topic, 3, 3), f"{topic} fully in sync",
                       timeout=60)

    commit(carol, topic, [f"a{i}" for i in range(30)])
    victim = cluster.metadata().topics[topic][0].leader
    cluster.kill(victim)
    cluster.wait_until(lambda m: victim not in m.brokers and all(
        p.leader not in (victim, -1) for p in m.topics[topic].values()),
        f"new leaders without broker {victim}", timeout=60)
    carol = client_conf(cluster, tls, "SCRAM-SHA-512", "carol", "carol-secret")
    commit(carol, topic, [f"b{i}" for i in range(30)])
    assert sorted(read_all(carol["bootstrap.servers"], topic, 3, committed=True,
                           conf=carol)) == sorted(
        f"{p}{i}".encode() for p in "ab" for i in range(30))

    logs = "".join(b.log_path.read_text() for b in cluster.brokers.values())
    assert "on INTERNAL authenticated as User:broker (SCRAM-SHA-512)" in logs
    assert "on CLIENT authenticated as User:carol (SCRAM-SHA-512)" in logs
    assert "secret" not in "".join(
        line for line in logs.splitlines(keepends=True) if not line.startswith("====="))
