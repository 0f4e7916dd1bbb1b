"""Metadata (key 3): brokers, topics and partition leaders (from the cluster view);
auto-creates topics. A partition without a leader answers LEADER_NOT_AVAILABLE with
leader -1, as Kafka's metadata cache does. Brokers are described at their endpoint for the
listener the request came in on; a broker without that listener is left out, and a
partition it leads answers LISTENER_NOT_FOUND (v6+; LEADER_NOT_AVAILABLE before) with
leader -1 (Kafka's KRaftMetadataCache.getPartitionMetadata).

Authorization as Kafka's ``handleTopicMetadataRequest``: a listing of every topic leaves out
those the principal may not Describe; a topic named (or asked by id) without Describe
answers TOPIC_AUTHORIZATION_FAILED (by id: without its name), whether it exists or not;
auto-creating a missing topic needs Create on the Cluster or on the topic, else
TOPIC_AUTHORIZATION_FAILED. The cluster's authorized operations (v8-10) are 0 without
Describe on the Cluster."""

from __future__ import annotations

import uuid
from typing import Any

from oncelog.broker.api import RequestContext, handles
from oncelog.broker.api.authorized import OMITTED, cluster_operations, topic_operations
from oncelog.broker.authz import allowed_names, cluster_allowed
from oncelog.broker.cluster_view import NO_LEADER, ClusterView, broker_on, brokers_on
from oncelog.broker.partitions import TopicInfo
from oncelog.errors import ErrorCode, KafkaError
from oncelog.internal_topics import INTERNAL_TOPICS
from oncelog.protocol import versions
from oncelog.protocol.build import make, response_module
from oncelog.security.acl import AclOperation, ResourceType

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
    list_all = requested is None or (ctx.api_version == 0 and not requested)
    wanted: list[tuple[str | None, uuid.UUID | None]] = []  # (name, the id it was asked by)
    if list_all:
        wanted = [(name, None) for name in registry.topics]
    else:
        for entry in requested:
            name, topic_id = entry.name, getattr(entry, "topic_id", None)
            if topic_id in (None, ZERO_UUID):
                topic_id = None
            elif name is None:
                info = registry.topic_by_id(topic_id)
                name = info.name if info else None
            wanted.append((name, topic_id))
    auto_create = not list_all and bool(allow_auto_create)
    # Kafka hides the topics a listing may not Describe, and refuses those named.
    described = allowed_names(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC,
                              (name for name, _ in wanted if name is not None),
                              audit=not list_all)
    creatable = _creatable(ctx, [name for name, _ in wanted if name in described], auto_create)

    topics = []
    for name, topic_id in wanted:
        if name is None:
            topics.append(_topic_error(mod, None, ErrorCode.unknown_topic_id))
        elif name not in described:
            if not list_all:
                topics.append(_topic_error(mod, None if topic_id else name,
                                           ErrorCode.topic_authorization_failed,
                                           topic_id or ZERO_UUID))
        elif name not in creatable:
            topics.append(_topic_error(mod, name, ErrorCode.topic_authorization_failed,
                                       internal=name in INTERNAL_TOPICS))
        else:
            try:
                info = (registry.maybe_auto_create(name) if auto_create
                        else registry.topics.get(name))
                if info is None:
                    raise KafkaError(ErrorCode.unknown_topic_or_partition, name)
            except KafkaError as exc:
                topics.append(_topic_error(mod, name, exc.code))
                continue
            topics.append(_topic(mod, info, view, topic_operations(wants_topic_ops, ctx, name),
                                 ctx))

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
        cluster_authorized_operations=_cluster_operations(ctx, request),
    )


def _creatable(ctx: RequestContext, names: list[str], auto_create: bool) -> frozenset[str]:
    """``names`` less the missing topics this request would auto-create but may not: Create
    on the Cluster allows every one, else Create on the topic (Kafka's order)."""
    registry = ctx.services.partitions
    missing = [name for name in names if name not in registry.topics]
    if (not missing or not auto_create or not registry.config["auto.create.topics.enable"]
            or cluster_allowed(ctx, AclOperation.CREATE, audit=False)):
        return frozenset(names)
    refused = set(missing) - allowed_names(ctx, AclOperation.CREATE, ResourceType.TOPIC, missing)
    return frozenset(name for name in names if name not in refused)


def _cluster_operations(ctx: RequestContext, request: Any) -> int:
    """v8-10 only; 0 without Describe on the Cluster (Kafka's handleTopicMetadataRequest)."""
    wanted = bool(getattr(request, "include_cluster_authorized_operations", False))
    if wanted and not cluster_allowed(ctx, AclOperation.DESCRIBE):
        return 0
    return cluster_operations(wanted, ctx)


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


def _topic_error(mod: Any, name: str | None, code: ErrorCode,
                 topic_id: uuid.UUID = ZERO_UUID, *, internal: bool = False) -> Any:
    return make(
        mod.MetadataResponseTopic,
        error_code=code,
        name=name,
        topic_id=topic_id,
        is_internal=internal,
        partitions=(),
        topic_authorized_operations=OMITTED,
    )
