"""Authorized operations, as Metadata, DescribeCluster and DescribeTopicPartitions answer
them when asked: every operation Kafka defines for the resource type, since oncelog has no
authorizer (a Kafka broker without one allows everything)."""

from __future__ import annotations

# Kafka's AclOperation codes.
READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE = 3, 4, 5, 6, 7, 8
CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE = 9, 10, 11, 12
TWO_PHASE_COMMIT = 15

# Kafka's ResourceType codes.
RESOURCE_TOPIC, RESOURCE_GROUP, RESOURCE_CLUSTER, RESOURCE_TRANSACTIONAL_ID = 2, 3, 4, 5

# The operations an ACL may grant on each resource type (Kafka's AclEntry).
_OPERATIONS: dict[int, tuple[int, ...]] = {
    RESOURCE_TOPIC: (
        READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS,
    ),
    RESOURCE_GROUP: (READ, DELETE, DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS),
    RESOURCE_CLUSTER: (
        CREATE, ALTER, DESCRIBE, CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS,
        IDEMPOTENT_WRITE,
    ),
    RESOURCE_TRANSACTIONAL_ID: (WRITE, DESCRIBE, TWO_PHASE_COMMIT),
}

NOT_REQUESTED = -(2**31)
"""The value of an authorized-operations field the request did not ask for."""


def authorized_operations(resource_type: int) -> int:
    """The bit field (bit n = AclOperation n) of what a client may do on ``resource_type``."""
    bits = 0
    for operation in _OPERATIONS.get(resource_type, ()):
        bits |= 1 << operation
    return bits
