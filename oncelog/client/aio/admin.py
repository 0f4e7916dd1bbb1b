"""The asyncio admin client, ``AIOAdmin``: one class over the admin roles, each in its own
module.

- ``admin_topics``: topics, partitions, configs;
- ``admin_cluster``: describe_cluster, leader elections, reassignments, log dirs;
- ``admin_groups``: consumer groups, their offsets, ListOffsets, DeleteRecords;
- ``admin_transactions``: transactions and producers (KIP-939 force-terminate, abort of a
  hanging transaction); find-hanging is built on them in ``oncelog.client.admin_views``;
- ``admin_scram``: SCRAM credentials (KIP-554);
- ``admin_acls``: ACLs (CreateAcls, DescribeAcls, DeleteAcls);
- ``admin_types``: the value types they take and answer, and ``AdminBase``.
"""

from __future__ import annotations

from oncelog.client.aio.admin_acls import AclAdmin
from oncelog.client.aio.admin_cluster import ClusterAdmin
from oncelog.client.aio.admin_groups import (
    ConsumerGroupDescription,
    ConsumerGroupListing,
    GroupsAdmin,
    MemberDescription,
    OffsetSpec,
)
from oncelog.client.aio.admin_scram import ScramAdmin, ScramDeletion, ScramUpsertion
from oncelog.client.aio.admin_topics import TopicsAdmin
from oncelog.client.aio.admin_transactions import TransactionsAdmin
from oncelog.client.aio.admin_types import (
    FORCE_TERMINATE_TIMEOUT_MS,
    TWO_PHASE_COMMIT_TIMEOUT_MS,
    ClusterDescription,
    LogDirDescription,
    NewPartitions,
    NewTopic,
    PartitionReassignment,
    ProducerState,
    ReplicaInfo,
    TopicDescription,
    TransactionDescription,
    TransactionListing,
)

__all__ = [
    "FORCE_TERMINATE_TIMEOUT_MS",
    "TWO_PHASE_COMMIT_TIMEOUT_MS",
    "AIOAdmin",
    "ClusterDescription",
    "ConsumerGroupDescription",
    "ConsumerGroupListing",
    "LogDirDescription",
    "MemberDescription",
    "NewPartitions",
    "NewTopic",
    "OffsetSpec",
    "PartitionReassignment",
    "ProducerState",
    "ReplicaInfo",
    "ScramDeletion",
    "ScramUpsertion",
    "TopicDescription",
    "TransactionDescription",
    "TransactionListing",
]


class AIOAdmin(TopicsAdmin, ClusterAdmin, GroupsAdmin, TransactionsAdmin, ScramAdmin,
               AclAdmin):
    """Kafka's Admin client on asyncio: every role's methods on one object."""
