"""ListOffsets (key 2): earliest, latest (LSO under read_committed), by timestamp, max.

``current_leader_epoch`` (v4+, KIP-320) is checked first (FENCED_LEADER_EPOCH /
UNKNOWN_LEADER_EPOCH); the answer carries the leader epoch of the offset found, from the
partition's epoch cache (Kafka: the latest epoch for LATEST, the epoch holding the offset
otherwise). A topic the principal may not Describe answers TOPIC_AUTHORIZATION_FAILED for
each of its partitions, before anything else (Kafka's ``handleListOffsetRequest``).

A request with a replica id (a follower's fetcher resetting after OFFSET_OUT_OF_RANGE) is
answered as Kafka answers a follower: LATEST is the leader's log end offset, not its high
watermark (``Partition.fetchOffsetForTimestamp`` with no isolation level)."""

from __future__ import annotations

from typing import Any

from oncelog.broker.api import RequestContext, handles
from oncelog.broker.authz import allowed_names
from oncelog.broker.cluster_view import check_leader
from oncelog.broker.partitions import Partition
from oncelog.errors import ErrorCode, KafkaError
from oncelog.protocol import versions
from oncelog.protocol.build import make, response_module
from oncelog.security.acl import AclOperation, ResourceType
from oncelog.storage.engine import IsolationLevel

LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL = -4


@handles(versions.LIST_OFFSETS, 1, 8)
async def handle_list_offsets(ctx: RequestContext, request: Any) -> Any:
    mod = response_module(versions.LIST_OFFSETS, ctx.api_version)
    registry = ctx.services.partitions
    view = ctx.services.cluster
    isolation: IsolationLevel | None = IsolationLevel(int(getattr(request, "isolation_level", 0)))
    if int(getattr(request, "replica_id", -1)) >= 0:
        isolation = None  # a follower: LATEST is the log end
    described = allowed_names(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC,
                              (topic.name for topic in request.topics))
    topics = []
    for topic in request.topics:
        parts = []
        for p in topic.partitions:
            code = ErrorCode.none
            offset, timestamp, epoch = -1, -1, -1
            try:
                if topic.name not in described:
                    raise KafkaError(ErrorCode.topic_authorization_failed, topic.name)
                check_leader(view, topic.name, p.partition_index)
                partition = registry.get(topic.name, p.partition_index)
                partition.check_leader_epoch(int(getattr(p, "current_leader_epoch", -1)))
                offset, timestamp = _lookup(partition, int(p.timestamp), isolation)
                epoch = _epoch_of(partition, int(p.timestamp), offset)
            except KafkaError as exc:
                code = exc.code
            parts.append(
                make(
                    mod.ListOffsetsPartitionResponse,
                    partition_index=p.partition_index,
                    error_code=code,
                    timestamp=timestamp,
                    offset=offset,
                    leader_epoch=epoch,
                    old_style_offsets=(),
                )
            )
        topics.append(make(mod.ListOffsetsTopicResponse, name=topic.name, partitions=tuple(parts)))
    return make(mod.ListOffsetsResponse, throttle_time=0, topics=tuple(topics))


def _epoch_of(partition: Partition, target: int, offset: int) -> int:
    """The leader epoch reported with ``offset``: the latest epoch for LATEST (Kafka's
    latestEpoch), else the epoch whose leader wrote it; -1 when no offset was found."""
    if offset < 0:
        return -1
    if target == LATEST:
        latest = partition.log.latest_epoch
        return -1 if latest is None else latest
    return partition.epoch_for_offset(offset)


def _lookup(
    partition: Partition, target: int, isolation: IsolationLevel | None
) -> tuple[int, int]:
    """Kafka's Partition.fetchOffsetForTimestamp: every answer but the earliest is bounded by
    the last fetchable offset (the LSO under read_committed, else the high watermark; the
    log end for a follower, ``isolation`` None)."""
    if isolation is None:
        if target == LATEST:
            return partition.log_end_offset, -1
        isolation = IsolationLevel.READ_UNCOMMITTED
    if target == LATEST:
        return partition.last_fetchable_offset(isolation), -1
    if target in (EARLIEST, EARLIEST_LOCAL):
        return partition.log_start_offset, -1
    if target == MAX_TIMESTAMP:
        found = partition.max_timestamp_offset(isolation)
        return found if found is not None else (-1, -1)
    if target < 0:
        raise KafkaError(ErrorCode.invalid_request, f"unknown special timestamp {target}")
    found = partition.offset_for_timestamp(target, isolation)
    return found if found is not None else (-1, -1)
