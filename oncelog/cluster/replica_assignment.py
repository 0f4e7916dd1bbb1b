"""Manual replica assignments (CreateTopics, CreatePartitions, AlterPartitionReassignments),
checked against the live brokers with Kafka's rules and messages.

Kafka's controller (``ReplicationControlManager``) checks each partition's replica list:
not empty, every broker registered, no broker twice (in sorted order, so the lowest bad id
is named), and as many replicas as the partitions before it. On one node the only live
broker is this one, so the one valid list is ``[node_id]``.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from oncelog.errors import ErrorCode, KafkaError


def _invalid(message: str) -> KafkaError:
    return KafkaError(ErrorCode.invalid_replica_assignment, message)


def check_replicas(
    replicas: Sequence[int], live_brokers: Collection[int], replication_factor: int | None
) -> None:
    """One partition's replica list; INVALID_REPLICA_ASSIGNMENT when Kafka would refuse it."""
    if not replicas:
        raise _invalid("The manual partition assignment includes an empty replica list.")
    previous: int | None = None
    for broker in sorted(replicas):
        if broker not in live_brokers:
            raise _invalid(
                f"The manual partition assignment includes broker {broker}, but no such "
                "broker is registered."
            )
        if broker == previous:
            raise _invalid(
                f"The manual partition assignment includes the broker {broker} more than once."
            )
        previous = broker
    if replication_factor is not None and len(replicas) != replication_factor:
        raise _invalid(
            f"The manual partition assignment includes a partition with {len(replicas)} "
            "replica(s), but this is not consistent with previous partitions, which have "
            f"{replication_factor} replica(s)."
        )


def topic_assignment(
    assignments: Sequence[tuple[int, Sequence[int]]],
    num_partitions: int,
    replication_factor: int,
    live_brokers: Collection[int],
) -> tuple[int, int]:
    """A CreateTopics assignment (partition index, replicas) checked as Kafka checks it;
    returns the partition count and replication factor it implies."""
    if replication_factor != -1:
        raise KafkaError(
            ErrorCode.invalid_request,
            "A manual partition assignment was specified, but replication factor was not "
            "set to -1.",
        )
    if num_partitions != -1:
        raise KafkaError(
            ErrorCode.invalid_request,
            "A manual partition assignment was specified, but numPartitions was not set to -1.",
        )
    seen: set[int] = set()
    factor: int | None = None
    for index, replicas in assignments:
        if index in seen:
            raise _invalid(f"Found multiple manual partition assignments for partition {index}")
        check_replicas(replicas, live_brokers, factor)
        factor = len(replicas)
        seen.add(index)
    if seen != set(range(len(seen))):
        raise _invalid("partitions should be a consecutive 0-based integer sequence")
    return len(seen), factor or 0


def added_partitions_assignment(
    assignments: Sequence[Sequence[int]],
    added: int,
    replication_factor: int,
    live_brokers: Collection[int],
) -> None:
    """A CreatePartitions assignment for ``added`` new partitions of a topic whose partitions
    have ``replication_factor`` replicas, checked as Kafka checks it."""
    if len(assignments) != added:
        raise _invalid(
            f"Attempted to add {added} additional partition(s), but only "
            f"{len(assignments)} assignment(s) were specified."
        )
    for replicas in assignments:
        check_replicas(replicas, live_brokers, replication_factor)
