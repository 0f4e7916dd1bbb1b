"""OffsetForLeaderEpoch (key 23, KIP-101 / KIP-279 / KIP-320): the end offset of a leader
epoch on this partition's leader, from its leader-epoch cache.

A follower asks it after a leader change to find where its log diverged from the new
leader's (and truncates there); a consumer (replica_id -1) asks it to validate its position
after a leader change (KIP-320). Per partition, as Kafka's Partition.lastOffsetForLeaderEpoch:
unknown partition → UNKNOWN_TOPIC_OR_PARTITION; ``current_leader_epoch`` older / newer than
the partition's → FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH; not the leader →
NOT_LEADER_OR_FOLLOWER (only the debugging replica id -2 may ask a follower); otherwise
``(epoch, end offset)``, which is (-1, -1) with no error when the epoch is undefined (an
empty cache, epoch -1 or an epoch above every known one). Kafka 4.4 serves versions 2-4.

Authorization (``KafkaApis.handleOffsetForLeaderEpochRequest``): ClusterAction on the
Cluster (a broker) allows every topic; otherwise (KIP-320, a consumer) Describe on each
topic, TOPIC_AUTHORIZATION_FAILED for the partitions of the others.
"""

from __future__ import annotations

from typing import Any

from oncelog.broker.api import RequestContext, handles
from oncelog.broker.authz import allowed_names, cluster_allowed
from oncelog.errors import ErrorCode, KafkaError
from oncelog.protocol import versions
from oncelog.protocol.build import make, response_module
from oncelog.security.acl import AclOperation, ResourceType

DEBUGGING_REPLICA_ID = -2


@handles(versions.OFFSET_FOR_LEADER_EPOCH, 2, 4)
async def handle_offset_for_leader_epoch(ctx: RequestContext, request: Any) -> Any:
    mod = response_module(versions.OFFSET_FOR_LEADER_EPOCH, ctx.api_version)
    registry = ctx.services.partitions
    require_leader = int(getattr(request, "replica_id", -1)) != DEBUGGING_REPLICA_ID
    names = [topic.topic for topic in request.topics]
    if cluster_allowed(ctx, AclOperation.CLUSTER_ACTION, audit=False):
        described = frozenset(names)
    else:
        described = allowed_names(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, names)
    topics = []
    for topic in request.topics:
        parts = []
        for p in topic.partitions:
            code, epoch, end_offset = ErrorCode.none, -1, -1
            try:
                if topic.topic not in described:
                    raise KafkaError(ErrorCode.topic_authorization_failed, topic.topic)
                partition = registry.get(topic.topic, p.partition)
                partition.check_leader_epoch(
                    int(p.current_leader_epoch), require_leader=require_leader
                )
                epoch, end_offset = partition.end_offset_for_leader_epoch(int(p.leader_epoch))
            except KafkaError as exc:
                code = exc.code
            parts.append(make(
                mod.EpochEndOffset, error_code=code, partition=p.partition,
                leader_epoch=epoch, end_offset=end_offset,
            ))
        topics.append(make(mod.OffsetForLeaderTopicResult, topic=topic.topic,
                           partitions=tuple(parts)))
    return make(mod.OffsetForLeaderEpochResponse, throttle_time=0, topics=tuple(topics))
