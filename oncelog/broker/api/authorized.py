"""The "authorized operations" bitfields of Metadata, DescribeCluster, DescribeTopicPartitions
and DescribeGroups: a bit per ACL operation code (oncelog.security.acl.AclOperation).

Without an authorizer Kafka answers every operation the resource type supports (the values
were read from Kafka 4.4: Metadata v10 with both ``include_*_authorized_operations`` flags
set); with one, the operations among those the request's principal is allowed
(``AclAuthorizer.authorized_operations``, as Kafka's ``AuthHelper.authorizedOperations``).

``OMITTED`` is what a response carries when the request did not ask.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from oncelog.security.acl import CLUSTER_NAME, AclOperation, ResourceType

if TYPE_CHECKING:
    from oncelog.broker.api import RequestContext

OMITTED = -(2**31)


def bitfield(*operations: AclOperation) -> int:
    return sum(1 << int(op) for op in set(operations))


_A = AclOperation
TOPIC_SUPPORTED = (_A.READ, _A.WRITE, _A.CREATE, _A.DELETE, _A.ALTER, _A.DESCRIBE,
                   _A.DESCRIBE_CONFIGS, _A.ALTER_CONFIGS)
CLUSTER_SUPPORTED = (_A.CREATE, _A.ALTER, _A.DESCRIBE, _A.CLUSTER_ACTION, _A.DESCRIBE_CONFIGS,
                     _A.ALTER_CONFIGS, _A.IDEMPOTENT_WRITE)
GROUP_SUPPORTED = (_A.READ, _A.DELETE, _A.DESCRIBE)
TOPIC_OPERATIONS = bitfield(*TOPIC_SUPPORTED)  # 3576
CLUSTER_OPERATIONS = bitfield(*CLUSTER_SUPPORTED)  # 8096
GROUP_OPERATIONS = bitfield(*GROUP_SUPPORTED)  # 328


def _operations(ctx: RequestContext | None, resource_type: ResourceType, name: str,
                supported: tuple[AclOperation, ...], everything: int) -> int:
    authorizer = None if ctx is None else ctx.services.authorizer
    if ctx is None or authorizer is None:
        return everything
    return bitfield(*(op for op in supported
                      if authorizer.authorize(ctx.session, op, resource_type, name)))


def topic_operations(requested: bool, ctx: RequestContext | None = None,
                     name: str = "") -> int:
    """A topic's authorized operations, or ``OMITTED`` when the request did not ask."""
    if not requested:
        return OMITTED
    return _operations(ctx, ResourceType.TOPIC, name, TOPIC_SUPPORTED, TOPIC_OPERATIONS)


def cluster_operations(requested: bool, ctx: RequestContext | None = None) -> int:
    """The cluster's authorized operations, or ``OMITTED`` when the request did not ask."""
    if not requested:
        return OMITTED
    return _operations(ctx, ResourceType.CLUSTER, CLUSTER_NAME, CLUSTER_SUPPORTED,
                       CLUSTER_OPERATIONS)


def group_operations(requested: bool, ctx: RequestContext | None = None,
                     name: str = "") -> int:
    """A group's authorized operations, or ``OMITTED`` when the request did not ask."""
    if not requested:
        return OMITTED
    return _operations(ctx, ResourceType.GROUP, name, GROUP_SUPPORTED, GROUP_OPERATIONS)
