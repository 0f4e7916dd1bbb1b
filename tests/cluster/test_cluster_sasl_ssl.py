"""A 3-broker cluster whose inter-broker listener is SASL_SSL (SCRAM-SHA-512, the brokers'
principal ``User:broker`` in ``super.users``) under the StandardAuthorizer: clients use
another SASL_SSL listener with the ACLs an ``admin`` granted them, replication is rf=3 with
acks=all, confluent-kafka commits transactions, and the cluster survives a kill -9 of a
partition leader. The coordinator's WriteTxnMarkers and the partition leaders'
AddPartitionsToTxn v4 (transaction verification) need ClusterAction, as do their replica
fetches, which the brokers have as super users: without it (checked by leaving
``User:broker`` out of ``super.users``) the verification is refused and the transactional
produce fails; with it the read_committed consumer reads every committed record, so the
markers were written.

The SCRAM credentials live in the metadata store; the brokers' own is needed before they
start, so the harness seeds them (as Kafka's ``kafka-storage format --add-scram``). Every
replica fetch and marker goes to the INTERNAL listener, which speaks nothing but TLS then
SASL: a fetcher without TLS (checked by disabling it) never brings a follower into the ISR
and the test fails; the harness's own PLAINTEXT listener is not the inter-broker one.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any, cast

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from oncelog.harness.cluster import ClusterProcess
from oncelog.harness.etcd import EtcdProcess
from oncelog.security.acl import AUTHORIZER_CLASS
from tests.support.replicated import REPLICATION_CONFIGS, in_sync, read_all
from tests.support.tls import TlsMaterial

pytestmark = pytest.mark.integration

SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule required"
USERS = {"broker": ("SCRAM-SHA-512", "broker-secret"),
         "admin": ("SCRAM-SHA-512", "admin-secret"),
         "carol": ("SCRAM-SHA-512", "carol-secret")}
TOPIC_PREFIX, TXN_ID = "sasl-ssl-", "sasl-ssl-cluster"


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
        # The brokers' principal is a super user: replica fetches (ClusterAction), epoch
        # queries, markers and verifications pass as User:broker. ANONYMOUS is the
        # harness's PLAINTEXT listener, which polls Metadata (topics it may not Describe
        # are hidden).
        "authorizer.class.name": AUTHORIZER_CLASS,
        "super.users": "User:broker;User:admin;User:ANONYMOUS",
    }


def client_conf(cluster: ClusterProcess, tls: TlsMaterial, mechanism: str, user: str,
                password: str) -> dict[str, Any]:
    return {"bootstrap.servers": cluster.listener_bootstrap("CLIENT"),
            "security.protocol": "SASL_SSL", "ssl.ca.location": str(tls.ca),
            "sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password}


def carol_acls() -> list[AclBinding]:
    """What carol needs: create, write and read the test's topics, run its transactional
    id, read with any group; and Describe on the topics for the harness's Metadata polls
    (``User:ANONYMOUS`` on its PLAINTEXT listener)."""
    def acl(rtype: ResourceType, name: str, op: AclOperation,
            pattern: ResourcePatternType = ResourcePatternType.PREFIXED,
            principal: str = "User:carol") -> AclBinding:
        return AclBinding(rtype, name, pattern, principal, "*", op, AclPermissionType.ALLOW)

    return [acl(ResourceType.TOPIC, TOPIC_PREFIX, op) for op in (
        AclOperation.CREATE, AclOperation.WRITE, AclOperation.READ)] + [
        acl(ResourceType.TRANSACTIONAL_ID, TXN_ID, AclOperation.WRITE,
            ResourcePatternType.LITERAL),
        acl(ResourceType.GROUP, "g-", AclOperation.READ),
        acl(ResourceType.TOPIC, TOPIC_PREFIX, AclOperation.DESCRIBE,
            principal="User:ANONYMOUS")]


def grant_everywhere(cluster: ClusterProcess, tls: TlsMaterial,
                     bindings: list[AclBinding]) -> None:
    """Create ``bindings`` as ``admin``, then wait until every broker lists them (the
    metadata store carries them to the others)."""
    def admin(node_id: int) -> AdminClient:
        return AdminClient({**client_conf(cluster, tls, "SCRAM-SHA-512", "admin",
                                          "admin-secret"),
                            "bootstrap.servers": f"127.0.0.1:"
                                                 f"{cluster.listener_port(node_id, 'CLIENT')}"})

    creator = admin(min(cluster.brokers))  # kept: its futures die with it
    for future in creator.create_acls(bindings).values():
        future.result(timeout=30)
    anything = cast(str, None)  # how a filter says "any" (the stubs want a str)
    everything = AclBindingFilter(ResourceType.ANY, anything, ResourcePatternType.ANY,
                                  anything, anything, AclOperation.ANY, AclPermissionType.ANY)
    for node_id in cluster.brokers:
        client = admin(node_id)

        def listed(_view: object, client: AdminClient = client) -> bool:
            return len(client.describe_acls(everything).result(timeout=30)) >= len(bindings)

        cluster.wait_until(listed, f"the ACLs on broker {node_id}", timeout=60,
                           node_id=node_id)


def commit(conf: dict[str, Any], topic: str, values: list[str]) -> None:
    producer = Producer({**conf, "transactional.id": TXN_ID, "acks": "all"})
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
    grant_everywhere(cluster, tls, carol_acls())
    carol = client_conf(cluster, tls, "SCRAM-SHA-512", "carol", "carol-secret")
    topic = f"{TOPIC_PREFIX}{uuid.uuid4().hex[:8]}"
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
    assert "Principal = User:carol is Denied" not in logs
    assert "secret" not in "".join(
        line for line in logs.splitlines(keepends=True) if not line.startswith("====="))
