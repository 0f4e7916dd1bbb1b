"""ACLs on a real ``oncelog serve -c authorizer.class.name=...StandardAuthorizer``:
CreateAcls / DescribeAcls / DeleteAcls through confluent-kafka's AdminClient, Kafka's own
``kafka-acls.sh`` (AclCommand, the Java Admin) and ``oncelog acls``; the APIs' own
authorization (CLUSTER_AUTHORIZATION_FAILED), SECURITY_DISABLED without an authorizer, and
the ACLs surviving kill -9. Until SASL is on these listeners every client is
``User:ANONYMOUS`` (PLAINTEXT)."""

from __future__ import annotations

from typing import cast

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)
from java_txn import need_reference
from rawkafka import request_once

from oncelog.client import Admin
from oncelog.client.errors import KafkaClientError
from oncelog.harness.broker import BrokerProcess
from oncelog.security import acl as oacl
from tests.conftest import BrokerFactory
from tests.support.cli import ok, oncelog_cli
from tests.support.kafka import run_kafka_tool

pytestmark = pytest.mark.integration

AUTHORIZER = {"authorizer.class.name": oacl.AUTHORIZER_CLASS}
ADMIN = {**AUTHORIZER, "super.users": "User:ANONYMOUS"}
TIMEOUT = 30
# confluent-kafka's stubs type filter names as str, but None is how a filter says "any".
ANY: str = cast(str, None)


def admin_client(broker: BrokerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def read_acl(topic: str, principal: str = "User:alice",
             pattern: ResourcePatternType = ResourcePatternType.LITERAL) -> AclBinding:
    return AclBinding(ResourceType.TOPIC, topic, pattern, principal, "*", AclOperation.READ,
                      AclPermissionType.ALLOW)


def described(client: AdminClient, flt: AclBindingFilter | None = None) -> set[tuple[
        str, str, str, str, str, str, str]]:
    flt = flt or AclBindingFilter(ResourceType.ANY, ANY, ResourcePatternType.ANY, ANY, ANY,
                                  AclOperation.ANY, AclPermissionType.ANY)
    found = client.describe_acls(flt).result(timeout=TIMEOUT)
    return {(b.restype.name, b.name, b.resource_pattern_type.name, b.principal, b.host,
             b.operation.name, b.permission_type.name) for b in found}


def test_create_describe_delete_with_confluent_admin(broker_factory: BrokerFactory) -> None:
    broker = broker_factory(configs=ADMIN)
    client = admin_client(broker)
    created = [read_acl("orders"), read_acl("orders.", "User:bob", ResourcePatternType.PREFIXED),
               AclBinding(ResourceType.GROUP, "g1", ResourcePatternType.LITERAL, "User:*",
                          "10.0.0.1", AclOperation.DESCRIBE, AclPermissionType.DENY)]
    for future in client.create_acls(created).values():
        future.result(timeout=TIMEOUT)
    assert described(client) == {
        ("TOPIC", "orders", "LITERAL", "User:alice", "*", "READ", "ALLOW"),
        ("TOPIC", "orders.", "PREFIXED", "User:bob", "*", "READ", "ALLOW"),
        ("GROUP", "g1", "LITERAL", "User:*", "10.0.0.1", "DESCRIBE", "DENY"),
    }
    match = AclBindingFilter(ResourceType.TOPIC, "orders.eu", ResourcePatternType.MATCH, ANY,
                             ANY, AclOperation.ANY, AclPermissionType.ANY)
    assert {row[1] for row in described(client, match)} == {"orders."}
    by_principal = AclBindingFilter(ResourceType.ANY, ANY, ResourcePatternType.ANY,
                                    "User:alice", ANY, AclOperation.ANY, AclPermissionType.ANY)
    deleted = client.delete_acls([by_principal])[by_principal].result(timeout=TIMEOUT)
    assert [(b.name, b.principal) for b in deleted] == [("orders", "User:alice")]
    assert {row[1] for row in described(client)} == {"orders.", "g1"}


def test_invalid_bindings_are_refused_one_by_one(broker_factory: BrokerFactory) -> None:
    broker = broker_factory(configs=ADMIN)
    with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
        good = oacl.AclBinding.of(2, "t", 3, "User:alice", "*", 3, 3)
        bad_cluster = oacl.AclBinding.of(4, "my-cluster", 3, "User:alice", "*", 7, 3)
        match_pattern = oacl.AclBinding.of(2, "t", 2, "User:alice", "*", 3, 3)
        results = admin.create_acls([good, bad_cluster, match_pattern])
        assert results[good] is None
        assert "INVALID_REQUEST" in str(results[bad_cluster]).upper().replace(" ", "_")
        assert "INVALID_REQUEST" in str(results[match_pattern]).upper().replace(" ", "_")
        assert admin.describe_acls() == [good]


@pytest.mark.parametrize(("configs", "error"), [
    (AUTHORIZER, "CLUSTER_AUTHORIZATION_FAILED"),  # no super user, no ACL on the cluster
    ({}, "SECURITY_DISABLED"),  # no authorizer
])
def test_acl_apis_refused(broker_factory: BrokerFactory, configs: dict[str, str],
                          error: str) -> None:
    broker = broker_factory(configs=configs)
    client = admin_client(broker)
    with pytest.raises(KafkaException) as refused:
        client.create_acls([read_acl("t")])[read_acl("t")].result(timeout=TIMEOUT)
    assert refused.value.args[0].name() == error
    with Admin({"bootstrap.servers": broker.bootstrap}) as admin, pytest.raises(
            KafkaClientError, match=error):
        admin.describe_acls()  # librdkafka reports DescribeAcls' top-level error as []
    if configs:
        assert "Principal = User:ANONYMOUS is Denied operation = ALTER" in broker.log_text()


def test_acls_survive_kill_9(broker_factory: BrokerFactory) -> None:
    broker = broker_factory(configs=ADMIN)
    client = admin_client(broker)
    client.create_acls([read_acl("kept")])[read_acl("kept")].result(timeout=TIMEOUT)
    broker.restart(kill=True)
    assert {row[1] for row in described(admin_client(broker))} == {"kept"}


def test_authorized_operations_come_from_the_acls(broker_factory: BrokerFactory) -> None:
    """Describe on the cluster for everyone (no super user): DescribeCluster's authorized
    operations are DESCRIBE alone."""
    broker = broker_factory(configs=ADMIN)
    describe = AclBinding(ResourceType.BROKER, "kafka-cluster", ResourcePatternType.LITERAL,
                          "User:*", "*", AclOperation.DESCRIBE, AclPermissionType.ALLOW)
    client = admin_client(broker)
    client.create_acls([describe])[describe].result(timeout=TIMEOUT)
    broker.stop()
    broker.configs.pop("super.users")
    broker.start()
    with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
        cluster = admin.describe_cluster(include_authorized_operations=True)
    assert cluster.authorized_operations == {int(oacl.AclOperation.DESCRIBE)}


def test_kafka_acls_sh_round_trip(broker_factory: BrokerFactory) -> None:
    need_reference()
    broker = broker_factory(configs=ADMIN)
    added = run_kafka_tool("AclCommand", "--bootstrap-server", broker.bootstrap, "--add",
                           "--allow-principal", "User:alice", "--operation", "Write",
                           "--operation", "Describe", "--topic", "payments",
                           "--resource-pattern-type", "prefixed", timeout=120)
    assert added.returncode == 0, added.stderr
    listed = run_kafka_tool("AclCommand", "--bootstrap-server", broker.bootstrap, "--list",
                            "--topic", "payments", "--resource-pattern-type", "prefixed",
                            timeout=120)
    assert listed.returncode == 0, listed.stderr
    assert "principal=User:alice, host=*, operation=WRITE, permissionType=ALLOW" in listed.stdout
    assert "operation=DESCRIBE" in listed.stdout
    removed = run_kafka_tool("AclCommand", "--bootstrap-server", broker.bootstrap, "--remove",
                             "--force", "--topic", "payments", "--resource-pattern-type",
                             "prefixed", timeout=120)
    assert removed.returncode == 0, removed.stderr
    assert described(admin_client(broker)) == set()


def test_oncelog_acls_cli_round_trip(broker_factory: BrokerFactory) -> None:
    broker = broker_factory(configs=ADMIN)
    bs = ("--bootstrap-server", broker.bootstrap)
    ok(oncelog_cli("acls", "add", *bs, "--allow-principal", "User:alice", "--operation",
                   "Read", "--operation", "TwoPhaseCommit", "--transactional-id", "tx-",
                   "--resource-pattern-type", "prefixed"))
    ok(oncelog_cli("acls", "add", *bs, "--deny-principal", "User:bob", "--deny-host",
                   "10.1.1.1", "--topic", "t1", "--topic", "t2"))
    listed = ok(oncelog_cli("acls", "list", *bs))
    assert "TRANSACTIONAL_ID  tx-" in listed and "TWO_PHASE_COMMIT" in listed
    assert listed.count("User:bob") == 2 and "10.1.1.1" in listed
    only_alice = ok(oncelog_cli("acls", "list", *bs, "--principal", "User:alice"))
    assert "User:bob" not in only_alice and "READ" in only_alice
    refused = oncelog_cli("acls", "remove", *bs, "--topic", "t1")
    assert refused.returncode != 0 and "--force" in refused.stderr
    ok(oncelog_cli("acls", "remove", *bs, "--topic", "t1", "--force"))
    assert {row[1] for row in described(admin_client(broker))} == {"tx-", "t2"}


def test_describe_groups_authorized_operations(broker_factory: BrokerFactory) -> None:
    """DescribeGroups v5 with include_authorized_operations: every group operation without
    an authorizer (Kafka's 328); with one, those the ACLs grant (here READ, implying
    DESCRIBE)."""
    from kio.schema.describe_groups import v5
    from kio.schema.types import GroupId

    ask = v5.DescribeGroupsRequest(groups=(GroupId("g"),), include_authorized_operations=True)
    plain = broker_factory()
    assert request_once(plain.bootstrap, ask).groups[0].authorized_operations == 328
    secured = broker_factory(configs=ADMIN)
    read = AclBinding(ResourceType.GROUP, "g", ResourcePatternType.LITERAL, "User:*", "*",
                      AclOperation.READ, AclPermissionType.ALLOW)
    client = admin_client(secured)
    client.create_acls([read])[read].result(timeout=TIMEOUT)
    secured.stop()
    secured.configs.pop("super.users")
    secured.start()
    expected = (1 << int(oacl.AclOperation.READ)) | (1 << int(oacl.AclOperation.DESCRIBE))
    assert request_once(secured.bootstrap, ask).groups[0].authorized_operations == expected
