"""Metadata (key 3): brokers, topics and partition leaders (from the cluster view);
auto-creates topics. A partition without a leader answers LEADER_NOT_AVAILABLE with
leader -1, as Kafka's metadata cache does. Brokers are described at their endpoint for the
listener the request came in on; a broker without that listener is left out, and a
partition it leads answers LISTENER_NOT_FOUND (v6+; LEADER_NOT_AVAILABLE before) with
leader -1 (Kafka's KRaftMetadataCache.getPartitionMetadata)."""

from __future__ import annotations

import uuid
from typing import Any

from oncelog.broker.api import RequestContext, handles
from oncelog.broker.api.authorized import OMITTED, cluster_operations, topic_operations
from oncelog.broker.cluster_view import NO_LEADER, ClusterView, broker_on, brokers_on
from oncelog.broker.partitions import TopicInfo
from oncelog.errors import ErrorCode, KafkaError
from oncelog.protocol import versions
from oncelog.protocol.build import make, response_module

ZERO_UUID = uuid.UUID(int=0)


@handles(versions.METADATA, 0, 12)
async def handle_metadata(ctx: RequestContext, request: Any) -> Any:
    node = ctx.services.node
    view = ctx.services.cluster
    registry = ctx.services.partitions
    mod = response_module(versions.METADATA, ctx.api_version)
    allow_auto_create = getattr(request, "allow_auto_topic_creation", True)
    wants_topic_ops = bool(getattr(request, "include_topic_authorized_operations", False))

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
        topics.append(_topic(mod, info, view, topic_operations(wants_topic_ops, ctx, name), ctx))

    brokers = tuple(
        make(mod.MetadataResponseBroker, node_id=b.node_id, host=b.host, port=b.port,
             rack=b.rack)
        for b in brokers_on(view, ctx.session.listener)
    )
    return make(
        mod.MetadataResponse,
        throttle_time=0,
        brokers=brokers,
        cluster_id=node.cluster_id,
        controller_id=view.controller_id(),
        topics=tuple(topics),
        cluster_authorized_operations=cluster_operations(
            bool(getattr(request, "include_cluster_authorized_operations", False)), ctx
        ),
    )


def _topic(
    mod: Any, info: TopicInfo, view: ClusterView, authorized_operations: int,
    ctx: RequestContext,
) -> Any:
    partitions = []
    for index in range(info.partitions):
        state = view.partition(info.name, index)
        if state is None:  # the view does not know it (yet): no leader
            continue
        leader, error = state.leader, ErrorCode.none
        if leader == NO_LEADER:
            error = ErrorCode.leader_not_available
        elif (view.broker(leader) is not None
              and broker_on(view, leader, ctx.session.listener) is None):
            leader = NO_LEADER
            error = (ErrorCode.listener_not_found if ctx.api_version >= 6
                     else ErrorCode.leader_not_available)
        partitions.append(
            make(
                mod.MetadataResponsePartition,
                error_code=error,
                partition_index=index,
                leader_id=leader,
                leader_epoch=state.leader_epoch,
                replica_nodes=state.replicas,
                isr_nodes=state.isr,
                offline_replicas=state.offline_replicas,
            )
        )
    return make(
        mod.MetadataResponseTopic,
        error_code=ErrorCode.none,
        name=info.name,
        topic_id=info.topic_id,
        is_internal=info.internal,
        partitions=tuple(partitions),
        topic_authorized_operations=authorized_operations,
    )


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
