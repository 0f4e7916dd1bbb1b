"""ACLs in a cluster live in the metadata store and every broker follows them: an ACL
created through one broker is listed and enforced by the others, without a restart."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

import pytest

from oncelog.client import Admin
from oncelog.client.errors import KafkaClientError
from oncelog.harness.cluster import ClusterProcess
from oncelog.security import acl

pytestmark = pytest.mark.integration

ClusterFactory = Callable[..., ClusterProcess]
T = TypeVar("T")
# No super user; with no ACL on the cluster yet, everyone may create the first one.
CONFIGS = {"authorizer.class.name": acl.AUTHORIZER_CLASS,
           "allow.everyone.if.no.acl.found": "true"}
DESCRIBE_CLUSTER = acl.AclBinding(
    acl.ResourcePattern(acl.ResourceType.CLUSTER, acl.CLUSTER_NAME),
    acl.AccessControlEntry("User:*", "*", acl.AclOperation.DESCRIBE,
                           acl.AclPermissionType.ALLOW))


def _eventually(probe: Callable[[], T], done: Callable[[T], bool], timeout: float = 30) -> T:
    """``probe()`` once its answer is ``done``; its last answer after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        answer = probe()
        if done(answer) or time.monotonic() > deadline:
            return answer
        time.sleep(0.2)


def test_acl_created_on_one_broker_is_listed_and_enforced_by_the_others(
        cluster_factory: ClusterFactory) -> None:
    cluster = cluster_factory(3, CONFIGS)
    first, *others = sorted(cluster.brokers)
    with Admin({"bootstrap.servers": cluster.brokers[first].bootstrap}) as admin:
        assert admin.create_acls([DESCRIBE_CLUSTER]) == {DESCRIBE_CLUSTER: None}
    for node_id in others:
        with Admin({"bootstrap.servers": cluster.brokers[node_id].bootstrap}) as admin:
            assert _eventually(admin.describe_acls, bool) == [DESCRIBE_CLUSTER]
            # the cluster now has an ACL, and it grants Describe only: Alter is refused
            operations = admin.describe_cluster(include_authorized_operations=True)
            assert operations.authorized_operations == {int(acl.AclOperation.DESCRIBE)}
            refused = admin.create_acls([DESCRIBE_CLUSTER])[DESCRIBE_CLUSTER]
            assert isinstance(refused, KafkaClientError)
            assert "CLUSTER_AUTHORIZATION_FAILED" in str(refused)
