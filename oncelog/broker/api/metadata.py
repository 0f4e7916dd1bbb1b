"""Metadata (key 3): brokers, topics and partition leaders; auto-creates topics."""

from __future__ import annotations

import uuid
from typing import Any

from oncelog.broker.api import RequestContext, handles
from oncelog.broker.api.authorized import OMITTED, cluster_operations, topic_operations
from oncelog.broker.partitions import PartitionRegistry, TopicInfo
from oncelog.errors import ErrorCode, KafkaError
from oncelog.protocol import versions
from oncelog.protocol.build import make, response_module

ZERO_UUID = uuid.UUID(int=0)


@handles(versions.METADATA, 0, 12)
async def handle_metadata(ctx: RequestContext, request: Any) -> Any:
    node = ctx.services.node
    registry = ctx.services.partitions
    mod = response_module(versions.METADATA, ctx.api_version)
    allow_auto_create = getattr(request, "allow_auto_topic_creation", True)
    topic_ops = topic_operations(bool(getattr(request, "include_topic_authorized_operations",
                                              False)))

    requested = request.topics
    if requested is None or (ctx.api_version == 0 and not requested):
        names: list[str | None] = list(registry.topics)
        auto_create = False
    else:
        names = []
        for entry in requested:
            name = entry.name
            if name is None and getattr(entry, "topic_id", None) not in (None, ZERO_UUID):
                info = registry.topic_by_id(entry.topic_id)
                name = info.name if info else None
            names.append(name)
        auto_create = bool(allow_auto_create)

    topics = []
    for name in names:
        if name is None:
            topics.append(_topic_error(mod, None, ErrorCode.unknown_topic_id))
            continue
        try:
            info = registry.maybe_auto_create(name) if auto_create else registry.topics.get(name)
            if info is None:
                raise KafkaError(ErrorCode.unknown_topic_or_partition, name)
        except KafkaError as exc:
            topics.append(_topic_error(mod, name, exc.code))
            continue
        topics.append(_topic(mod, info, node.node_id, topic_ops, registry))

    brokers = (
        make(
            mod.MetadataResponseBroker,
            node_id=node.node_id,
            host=node.host,
            port=node.port,
            rack=None,
        ),
    )
    return make(
        mod.MetadataResponse,
        throttle_time=0,
        brokers=brokers,
        cluster_id=node.cluster_id,
        controller_id=node.node_id,
        topics=tuple(topics),
        cluster_authorized_operations=cluster_operations(
            bool(getattr(request, "include_cluster_authorized_operations", False))
        ),
    )


def _topic(
    mod: Any, info: TopicInfo, node_id: int, authorized_operations: int,
    registry: PartitionRegistry,
) -> Any:
    partitions = tuple(
        make(
            mod.MetadataResponsePartition,
            error_code=ErrorCode.none,
            partition_index=index,
            leader_id=node_id,
            leader_epoch=_leader_epoch(registry, info.name, index),
            replica_nodes=(node_id,),
            isr_nodes=(node_id,),
            offline_replicas=(),
        )
        for index in range(info.partitions)
    )
    return make(
        mod.MetadataResponseTopic,
        error_code=ErrorCode.none,
        name=info.name,
        topic_id=info.topic_id,
        is_internal=info.internal,
        partitions=partitions,
        topic_authorized_operations=authorized_operations,
    )


def _leader_epoch(registry: PartitionRegistry, topic: str, index: int) -> int:
    """The partition's leader epoch (0 on a single node; -1 if the partition is unknown)."""
    partition = registry.find(topic, index)
    return -1 if partition is None else partition.leader_epoch


def _topic_error(mod: Any, name: str | None, code: ErrorCode) -> Any:
    return make(
        mod.MetadataResponseTopic,
        error_code=code,
        name=name,
        topic_id=ZERO_UUID,
        is_internal=False,
        partitions=(),
        topic_authorized_operations=OMITTED,
    )
