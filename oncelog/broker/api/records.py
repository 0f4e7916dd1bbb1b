"""DeleteRecords (21) and OffsetDelete (47, KIP-496): deleting data and committed offsets.

DeleteRecords moves a partition's log start offset up (Kafka's
``Partition.deleteRecordsOnLeader``): ``-1`` means the high watermark; an offset above the
high watermark, or negative, is OFFSET_OUT_OF_RANGE; a topic whose ``cleanup.policy`` lacks
``delete`` is POLICY_VIOLATION; internal topics are INVALID_TOPIC_EXCEPTION. An offset
below the current start changes nothing and answers the current start. The engine writes
the log-start checkpoint before it returns, so the answer is durable. Deleting past the
first offset of an open transaction is allowed, as in Kafka: the LSO stays held by that
transaction (never below the new log start), so read_committed readers see nothing past
it until the transaction ends. Readers positioned below the new start get
OFFSET_OUT_OF_RANGE and reset per their ``auto.offset.reset``.

OffsetDelete deletes a group's committed offsets (rules in
``OffsetManager.delete_offsets``); partitions of unknown topics answer
UNKNOWN_TOPIC_OR_PARTITION and are not passed on.

Authorization (Kafka's KafkaApis): DeleteRecords needs Delete on each topic
(TOPIC_AUTHORIZATION_FAILED for its partitions); OffsetDelete needs Delete on the group
(GROUP_AUTHORIZATION_FAILED for the whole request), then Read on each topic
(TOPIC_AUTHORIZATION_FAILED for its partitions, which are not passed on).
"""

from __future__ import annotations

import logging
from typing import Any

from oncelog.broker.api import RequestContext, handles
from oncelog.broker.authz import allowed, allowed_names
from oncelog.broker.cluster_view import check_leader
from oncelog.errors import ErrorCode, KafkaError
from oncelog.protocol import versions
from oncelog.protocol.build import make, response_module
from oncelog.security.acl import AclOperation, ResourceType

log = logging.getLogger(__name__)

# DeleteRecords' "up to the high watermark" offset.
HIGH_WATERMARK = -1


@handles(versions.DELETE_RECORDS, 0, 2)
async def handle_delete_records(ctx: RequestContext, request: Any) -> Any:
    mod = response_module(versions.DELETE_RECORDS, ctx.api_version)
    deletable = allowed_names(ctx, AclOperation.DELETE, ResourceType.TOPIC,
                              (topic.name for topic in request.topics))
    topics = []
    for topic in request.topics:
        results = []
        for p in topic.partitions:
            index = int(p.partition_index)
            low_watermark, error = -1, ErrorCode.none
            if topic.name not in deletable:
                results.append(make(mod.DeleteRecordsPartitionResult, partition_index=index,
                                    low_watermark=-1,
                                    error_code=ErrorCode.topic_authorization_failed))
                continue
            try:
                low_watermark = delete_records(ctx, topic.name, index, int(p.offset))
            except KafkaError as exc:
                error = exc.code
                log.info("delete records of %s-%d before %d from client %s refused: %s",
                         topic.name, index, int(p.offset), ctx.client_id, exc)
            results.append(
                make(
                    mod.DeleteRecordsPartitionResult,
                    partition_index=index,
                    low_watermark=low_watermark,
                    error_code=error,
                )
            )
        topics.append(
            make(mod.DeleteRecordsTopicResult, name=topic.name, partitions=tuple(results))
        )
    return make(mod.DeleteRecordsResponse, throttle_time=0, topics=tuple(topics))


def delete_records(ctx: RequestContext, topic: str, index: int, offset: int) -> int:
    """Delete the records of ``topic``-``index`` below ``offset``; the new log start."""
    registry = ctx.services.partitions
    info = registry.topics.get(topic)
    if info is None or not 0 <= index < info.partitions:
        raise KafkaError(ErrorCode.unknown_topic_or_partition, f"{topic}-{index}")
    if info.internal:
        raise KafkaError(
            ErrorCode.invalid_topic_exception, f"cannot delete records of internal topic {topic}"
        )
    check_leader(ctx.services.cluster, topic, index)
    partition = registry.get(topic, index)
    if "delete" not in partition.config.cleanup_policy.split(","):
        raise KafkaError(
            ErrorCode.policy_violation,
            f"records of {topic}-{index} cannot be deleted: cleanup.policy is "
            f"{partition.config.cleanup_policy}",
        )
    high_watermark = partition.high_watermark
    target = high_watermark if offset == HIGH_WATERMARK else offset
    if target < 0 or target > high_watermark:
        raise KafkaError(
            ErrorCode.offset_out_of_range,
            f"offset {offset} of {topic}-{index} is outside [0, high watermark "
            f"{high_watermark}]",
        )
    before = partition.log_start_offset
    start = partition.delete_records_before(target)
    if start != before:
        log.info("%s-%d: records below %d deleted (log start offset was %d)",
                 topic, index, start, before)
    return start


@handles(versions.OFFSET_DELETE, 0, 0)
async def handle_offset_delete(ctx: RequestContext, request: Any) -> Any:
    mod = response_module(versions.OFFSET_DELETE, ctx.api_version)
    if not allowed(ctx, AclOperation.DELETE, ResourceType.GROUP, request.group_id):
        return make(mod.OffsetDeleteResponse, error_code=ErrorCode.group_authorization_failed,
                    throttle_time=0, topics=())
    registry = ctx.services.partitions
    readable = allowed_names(ctx, AclOperation.READ, ResourceType.TOPIC,
                             (topic.name for topic in request.topics))
    known: list[tuple[str, int]] = []
    refused: dict[tuple[str, int], ErrorCode] = {}
    order: list[tuple[str, int]] = []
    for topic in request.topics:
        info = registry.topics.get(topic.name)
        for p in topic.partitions:
            tp = (topic.name, int(p.partition_index))
            order.append(tp)
            if topic.name not in readable:
                refused[tp] = ErrorCode.topic_authorization_failed
            elif info is None or not 0 <= tp[1] < info.partitions:
                refused[tp] = ErrorCode.unknown_topic_or_partition
            else:
                known.append(tp)
    error, per_partition = ctx.services.groups.delete_offsets(request.group_id, known)
    if error is not ErrorCode.none:
        return make(mod.OffsetDeleteResponse, error_code=error, throttle_time=0, topics=())
    by_topic: dict[str, list[Any]] = {}
    for tp in order:
        code = refused[tp] if tp in refused else per_partition[tp]
        by_topic.setdefault(tp[0], []).append(
            make(mod.OffsetDeleteResponsePartition, partition_index=tp[1], error_code=code)
        )
    topics = tuple(
        make(mod.OffsetDeleteResponseTopic, name=name, partitions=tuple(parts))
        for name, parts in by_topic.items()
    )
    return make(mod.OffsetDeleteResponse, error_code=ErrorCode.none, throttle_time=0,
                topics=topics)
