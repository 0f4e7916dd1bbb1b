"""The "authorized operations" bitfields of Metadata, DescribeCluster (and DescribeGroups).

A bit per ACL operation code (Kafka's ``AclOperation``: READ 3, WRITE 4, CREATE 5, DELETE 6,
ALTER 7, DESCRIBE 8, CLUSTER_ACTION 9, DESCRIBE_CONFIGS 10, ALTER_CONFIGS 11,
IDEMPOTENT_WRITE 12). Without an authorizer Kafka answers every operation the resource type
supports; oncelog has no authorizer, so these are constant. The values were read from Kafka
4.4 (Metadata v10 with both ``include_*_authorized_operations`` flags set).

``OMITTED`` is what a response carries when the request did not ask.
"""

from __future__ import annotations

from enum import IntEnum

OMITTED = -(2**31)


class AclOperation(IntEnum):
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12


def bitfield(*operations: AclOperation) -> int:
    return sum(1 << int(op) for op in set(operations))


_A = AclOperation
TOPIC_OPERATIONS = bitfield(
    _A.READ, _A.WRITE, _A.CREATE, _A.DELETE, _A.ALTER, _A.DESCRIBE,
    _A.DESCRIBE_CONFIGS, _A.ALTER_CONFIGS,
)  # 3576
CLUSTER_OPERATIONS = bitfield(
    _A.CREATE, _A.ALTER, _A.DESCRIBE, _A.CLUSTER_ACTION, _A.DESCRIBE_CONFIGS,
    _A.ALTER_CONFIGS, _A.IDEMPOTENT_WRITE,
)  # 8096
GROUP_OPERATIONS = bitfield(_A.READ, _A.DELETE, _A.DESCRIBE)  # 328


def topic_operations(requested: bool) -> int:
    """A topic's authorized operations, or ``OMITTED`` when the request did not ask."""
    return TOPIC_OPERATIONS if requested else OMITTED


def cluster_operations(requested: bool) -> int:
    """The cluster's authorized operations, or ``OMITTED`` when the request did not ask."""
    return CLUSTER_OPERATIONS if requested else OMITTED


def group_operations(requested: bool) -> int:
    """A group's authorized operations, or ``OMITTED`` when the request did not ask."""
    return GROUP_OPERATIONS if requested else OMITTED
