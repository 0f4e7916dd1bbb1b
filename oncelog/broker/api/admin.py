"""Topic administration: CreateTopics, DeleteTopics, CreatePartitions (configs: configs.py),
through the cluster view's TopicAdmin (``ctx.services.cluster.admin``).

Authorization as Kafka's controller (``ControllerApis``): CreateTopics needs Create on the
Cluster or on the topic (TOPIC_AUTHORIZATION_FAILED, "Authorization failed."), and returns
a created topic's configs, partitions and replication factor only with DescribeConfigs on it
(else its ``topic_config_error_code`` is TOPIC_AUTHORIZATION_FAILED); DeleteTopics needs
Delete on the Cluster or Describe and Delete on the topic (a topic asked by id that may not
be described is answered without its name); CreatePartitions needs Alter on the topic.
"""

from __future__ import annotations

import uuid
from typing import Any

from oncelog.broker.api import RequestContext, handles
from oncelog.broker.authz import allowed, allowed_names, cluster_allowed
from oncelog.broker.partitions import PartitionRegistry
from oncelog.errors import ErrorCode, KafkaError
from oncelog.protocol import versions
from oncelog.protocol.build import make, response_module
from oncelog.security.acl import AclOperation, ResourceType

ZERO_UUID = uuid.UUID(int=0)
SOURCE_DYNAMIC_TOPIC = 1
SOURCE_DEFAULT = 5


@handles(versions.CREATE_TOPICS, 2, 7)
async def handle_create_topics(ctx: RequestContext, request: Any) -> Any:
    mod = response_module(versions.CREATE_TOPICS, ctx.api_version)
    admin = ctx.services.cluster.admin
    names = [topic.name for topic in request.topics]
    creatable = (frozenset(names) if cluster_allowed(ctx, AclOperation.CREATE, audit=False)
                 else allowed_names(ctx, AclOperation.CREATE, ResourceType.TOPIC, names))
    describable = allowed_names(ctx, AclOperation.DESCRIBE_CONFIGS, ResourceType.TOPIC, names,
                                audit=False)
    results = []
    seen: set[str] = set()
    for topic in request.topics:
        code, message = ErrorCode.none, None
        topic_id, partitions, replication, configs_out = ZERO_UUID, -1, -1, ()
        config_code = ErrorCode.none
        try:
            if topic.name in seen:
                raise KafkaError(ErrorCode.invalid_request, "topic listed twice in one request")
            seen.add(topic.name)
            if topic.name not in creatable:
                raise KafkaError(ErrorCode.topic_authorization_failed, "Authorization failed.")
            configs = {}
            for c in topic.configs:
                if c.value is None:
                    raise KafkaError(ErrorCode.invalid_config, f"null value for {c.name}")
                configs[c.name] = c.value
            info = await admin.create_topic(
                topic.name,
                int(topic.num_partitions),
                configs,
                replication_factor=int(topic.replication_factor),
                assignments=[(int(a.partition_index), a.broker_ids) for a in topic.assignments],
                validate_only=bool(request.validate_only),
            )
            topic_id, partitions = info.topic_id, info.partitions
            replication = info.replication_factor
            configs_out = () if not hasattr(mod, "CreatableTopicConfigs") else tuple(
                make(
                    mod.CreatableTopicConfigs,
                    name=name,
                    value=value,
                    read_only=False,
                    config_source=SOURCE_DYNAMIC_TOPIC if name in configs else SOURCE_DEFAULT,
                    is_sensitive=False,
                )
                for name, value in _topic_config_values(ctx, configs).items()
            )
            if topic.name not in describable:
                config_code, partitions, replication, configs_out = (
                    ErrorCode.topic_authorization_failed, -1, -1, ())
        except KafkaError as exc:
            code, message = exc.code, exc.message
        results.append(
            make(
                mod.CreatableTopicResult,
                name=topic.name,
                topic_id=topic_id,
                error_code=code,
                error_message=message,
                topic_config_error_code=config_code,
                num_partitions=partitions,
                replication_factor=replication if code == ErrorCode.none else -1,
                configs=configs_out if code == ErrorCode.none else None,
            )
        )
    return make(mod.CreateTopicsResponse, throttle_time=0, topics=tuple(results))


def live_brokers(ctx: RequestContext) -> frozenset[int]:
    """The brokers a replica assignment may name: the live ones."""
    return frozenset(b.node_id for b in ctx.services.cluster.brokers())


def _topic_config_values(ctx: RequestContext, overrides: dict[str, str]) -> dict[str, str]:
    values = ctx.services.config.topic_defaults()
    values.update(overrides)
    return values


@handles(versions.DELETE_TOPICS, 1, 6)
async def handle_delete_topics(ctx: RequestContext, request: Any) -> Any:
    mod = response_module(versions.DELETE_TOPICS, ctx.api_version)
    registry = ctx.services.partitions
    if hasattr(request, "topic_names"):
        entries = [(name, None) for name in request.topic_names]
    else:
        entries = [(t.name, t.topic_id) for t in request.topics]
    results = []
    everything = cluster_allowed(ctx, AclOperation.DELETE, audit=False)
    for name, topic_id in entries:
        code, message = ErrorCode.none, None
        resolved_id = ZERO_UUID
        try:
            by_id = False
            if name is None and topic_id is not None and topic_id != ZERO_UUID:
                by_id, resolved_id = True, topic_id
                info = registry.topic_by_id(topic_id)
                if info is None:
                    raise KafkaError(ErrorCode.unknown_topic_id, str(topic_id))
                name = info.name
            if name is None:
                raise KafkaError(ErrorCode.invalid_request, "no topic name or id")
            if not everything:
                name = _check_deletable(ctx, registry, name, by_id)
            info = registry.topics.get(name)
            if info is not None:
                resolved_id = info.topic_id
            await ctx.services.cluster.admin.delete_topic(name)
        except _Refused as exc:
            code, name = exc.code, exc.name
        except KafkaError as exc:
            code, message = exc.code, exc.message
        results.append(
            make(
                mod.DeletableTopicResult,
                name=name,
                topic_id=resolved_id,
                error_code=code,
                error_message=message,
            )
        )
    return make(mod.DeleteTopicsResponse, throttle_time=0, responses=tuple(results))


def _check_deletable(ctx: RequestContext, registry: PartitionRegistry, name: str,
                     by_id: bool) -> str:
    """Kafka's order for a principal without Delete on the Cluster: a name that may not be
    described is refused before its existence is told; a topic asked by id keeps its name
    in the refusal only when it may be described."""
    describable = allowed(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, name)
    deletable = allowed(ctx, AclOperation.DELETE, ResourceType.TOPIC, name)
    if by_id and not deletable:
        raise _Refused(name if describable else None)
    if not describable:
        raise _Refused(name)
    if name in registry.topics and not deletable:
        raise _Refused(name)
    return name


class _Refused(KafkaError):
    """TOPIC_AUTHORIZATION_FAILED for DeleteTopics, with the name the answer may carry."""

    def __init__(self, name: str | None) -> None:
        super().__init__(ErrorCode.topic_authorization_failed)
        self.name = name


@handles(versions.CREATE_PARTITIONS, 0, 3)
async def handle_create_partitions(ctx: RequestContext, request: Any) -> Any:
    mod = response_module(versions.CREATE_PARTITIONS, ctx.api_version)
    admin = ctx.services.cluster.admin
    alterable = allowed_names(ctx, AclOperation.ALTER, ResourceType.TOPIC,
                              (topic.name for topic in request.topics))
    results = []
    for topic in request.topics:
        code, message = ErrorCode.none, None
        try:
            if topic.name not in alterable:
                raise KafkaError(ErrorCode.topic_authorization_failed)
            await admin.create_partitions(
                topic.name,
                int(topic.count),
                assignments=None
                if topic.assignments is None
                else [a.broker_ids for a in topic.assignments],
                validate_only=bool(request.validate_only),
            )
        except KafkaError as exc:
            code, message = exc.code, exc.message
        results.append(
            make(
                mod.CreatePartitionsTopicResult,
                name=topic.name,
                error_code=code,
                error_message=message,
            )
        )
    return make(mod.CreatePartitionsResponse, throttle_time=0, results=tuple(results))
