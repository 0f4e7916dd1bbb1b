"""The asyncio admin client's topics and configs: CreateTopics, DeleteTopics and
CreatePartitions at the controller, Metadata for listing and describing topics,
DescribeConfigs / AlterConfigs / IncrementalAlterConfigs at the broker that serves each
resource (a broker's own configs at that broker, the rest at any).
"""

from __future__ import annotations

import functools
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from oncelog.client.aio.admin_types import (
    AdminBase,
    NewPartitions,
    NewTopic,
    TopicDescription,
    _error_or_none,
)
from oncelog.client.errors import KafkaClientError, UnknownTopicOrPartitionError, error_for
from oncelog.client.types import (
    AlterConfigOp,
    ConfigEntry,
    ConfigResource,
    ConfigResourceType,
    ConfigSource,
    ConfigSynonym,
    ConfigType,
)
from oncelog.client.wire import nested, request
from oncelog.errors import ErrorCode
from oncelog.protocol import versions as api


def _config_node(resource: ConfigResource) -> int | None:
    """Where a config resource is served: a broker's own configs by that broker, the rest
    (topics, the cluster-wide broker default) by any broker."""
    if resource.type == ConfigResourceType.BROKER and resource.name.isdigit():
        return int(resource.name)
    return None


def _by_config_node(resources: Iterable[ConfigResource]) -> dict[int | None, list[Any]]:
    out: dict[int | None, list[Any]] = defaultdict(list)
    for resource in resources:
        resource = ConfigResource(ConfigResourceType(resource[0]), str(resource[1]))
        out[_config_node(resource)].append(resource)
    return dict(out)


def _config_entry(entry: Any, version: int) -> ConfigEntry:
    if version == 0:  # before config_source: only "is it the default"
        source = ConfigSource.DEFAULT_CONFIG if entry.is_default else ConfigSource.UNKNOWN
    else:
        source = ConfigSource(int(entry.config_source))
    return ConfigEntry(
        name=entry.name,
        value=entry.value,
        source=source,
        is_read_only=bool(entry.read_only),
        is_sensitive=bool(entry.is_sensitive),
        synonyms=tuple(
            ConfigSynonym(s.name, s.value, ConfigSource(int(s.source)))
            for s in getattr(entry, "synonyms", ())
        ),
        type=ConfigType(int(getattr(entry, "config_type", 0))),
        documentation=getattr(entry, "documentation", None),
    )



class TopicsAdmin(AdminBase):
    """Topics, partitions and configs; mixed into ``AIOAdmin``."""

    # ---------------------------------------------------------------- topics

    async def create_topics(
        self, topics: Sequence[NewTopic], *, timeout_ms: int = 30000, validate_only: bool = False
    ) -> dict[str, KafkaClientError | None]:
        """Create topics; returns each topic's error (None on success)."""
        node = await self._controller()

        def build(version: int) -> Any:
            return request(
                api.CREATE_TOPICS,
                version,
                timeout=timeout_ms,
                validate_only=validate_only,
                topics=tuple(
                    nested(
                        api.CREATE_TOPICS,
                        version,
                        "CreatableTopic",
                        name=t.name,
                        num_partitions=t.num_partitions,
                        replication_factor=t.replication_factor,
                        assignments=tuple(
                            nested(
                                api.CREATE_TOPICS,
                                version,
                                "CreatableReplicaAssignment",
                                partition_index=index,
                                broker_ids=tuple(replicas),
                            )
                            for index, replicas in sorted(t.replica_assignment.items())
                        ),
                        configs=tuple(
                            nested(
                                api.CREATE_TOPICS,
                                version,
                                "CreatableTopicConfig",
                                name=k,
                                value=str(v),
                            )
                            for k, v in t.config.items()
                        ),
                    )
                    for t in topics
                ),
            )

        response = await self.client.call(
            node, api.CREATE_TOPICS, build, timeout_ms=timeout_ms + self.client.request_timeout_ms
        )
        out: dict[str, KafkaClientError | None] = {}
        for result in response.topics:
            code = ErrorCode(result.error_code)
            out[result.name] = (
                None
                if code == ErrorCode.none
                else error_for(code, getattr(result, "error_message", None) or result.name)
            )
        return out

    async def delete_topics(
        self, names: Sequence[str], *, timeout_ms: int = 30000
    ) -> dict[str, KafkaClientError | None]:
        node = await self._controller()

        def build(version: int) -> Any:
            if version >= 6:
                return request(
                    api.DELETE_TOPICS,
                    version,
                    timeout=timeout_ms,
                    topics=tuple(
                        nested(
                            api.DELETE_TOPICS, version, "DeleteTopicState", name=n, topic_id=None
                        )
                        for n in names
                    ),
                )
            return request(api.DELETE_TOPICS, version, timeout=timeout_ms, topic_names=tuple(names))

        response = await self.client.call(
            node, api.DELETE_TOPICS, build, timeout_ms=timeout_ms + self.client.request_timeout_ms
        )
        out: dict[str, KafkaClientError | None] = {}
        for result in response.responses:
            code = ErrorCode(result.error_code)
            out[str(result.name)] = (
                None
                if code == ErrorCode.none
                else error_for(code, getattr(result, "error_message", None) or str(result.name))
            )
        return out

    async def list_topics(self, *, internal: bool = False) -> dict[str, int]:
        """Topic name -> partition count (internal topics only when asked)."""
        meta = await self.client.refresh_metadata(all_topics=True)
        return {
            name: info.num_partitions
            for name, info in meta.topics.items()
            if info.error == ErrorCode.none and (internal or not info.internal)
        }

    async def describe_topics(
        self, names: Iterable[str] | None = None
    ) -> dict[str, TopicDescription]:
        """Partitions and leaders of ``names`` (None: every topic, internal ones included).
        A topic that does not exist raises UnknownTopicOrPartitionError."""
        wanted = None if names is None else list(names)
        # A full listing: a metadata request naming a topic may create it.
        meta = await self.client.refresh_metadata(all_topics=True)
        out: dict[str, TopicDescription] = {}
        for name in wanted if wanted is not None else sorted(meta.topics):
            info = meta.topics.get(name)
            if info is None:
                raise UnknownTopicOrPartitionError(f"topic {name} does not exist")
            if info.error != ErrorCode.none:
                raise error_for(info.error, f"topic {name}")
            out[name] = TopicDescription(name, info.internal, dict(sorted(info.leaders.items())),
                                         dict(info.replicas), dict(info.isr))
        return out

    async def create_partitions(
        self,
        new_partitions: Mapping[str, NewPartitions],
        *,
        timeout_ms: int = 30000,
        validate_only: bool = False,
    ) -> dict[str, KafkaClientError | None]:
        """Grow topics (CreatePartitions to the controller); each topic's error or None."""
        node = await self._controller()

        def build(version: int) -> Any:
            return request(
                api.CREATE_PARTITIONS,
                version,
                timeout=timeout_ms,
                validate_only=validate_only,
                topics=tuple(
                    nested(
                        api.CREATE_PARTITIONS,
                        version,
                        "CreatePartitionsTopic",
                        name=name,
                        count=spec.total_count,
                        assignments=None
                        if spec.assignments is None
                        else tuple(
                            nested(
                                api.CREATE_PARTITIONS,
                                version,
                                "CreatePartitionsAssignment",
                                broker_ids=tuple(replicas),
                            )
                            for replicas in spec.assignments
                        ),
                    )
                    for name, spec in new_partitions.items()
                ),
            )

        response = await self.client.call(
            node,
            api.CREATE_PARTITIONS,
            build,
            timeout_ms=timeout_ms + self.client.request_timeout_ms,
        )
        return {
            str(r.name): _error_or_none(r.error_code, r.error_message, str(r.name))
            for r in response.results
        }

    # ---------------------------------------------------------------- configs

    async def describe_configs(
        self,
        resources: Iterable[ConfigResource],
        *,
        include_synonyms: bool = False,
        include_documentation: bool = False,
    ) -> dict[ConfigResource, dict[str, ConfigEntry]]:
        """Every config of each resource (DescribeConfigs): name -> entry. A resource's
        error (an unknown topic, another broker's id...) is raised."""
        out: dict[ConfigResource, dict[str, ConfigEntry]] = {}
        for node, items in _by_config_node(resources).items():

            def build(version: int, items: list[ConfigResource] = items) -> Any:
                return request(
                    api.DESCRIBE_CONFIGS,
                    version,
                    include_synonyms=include_synonyms,
                    include_documentation=include_documentation,
                    resources=tuple(
                        nested(api.DESCRIBE_CONFIGS, version, "DescribeConfigsResource",
                               resource_type=r.type, resource_name=r.name,
                               configuration_keys=None)
                        for r in items
                    ),
                )

            response = await self.client.call(node, api.DESCRIBE_CONFIGS, build)
            version = int(response.__version__)
            for result in response.results:
                resource = ConfigResource(
                    ConfigResourceType(int(result.resource_type)), result.resource_name
                )
                code = ErrorCode(result.error_code)
                if code != ErrorCode.none:
                    raise error_for(
                        code, result.error_message or f"DescribeConfigs {resource.name!r}"
                    )
                out[resource] = {
                    c.name: _config_entry(c, version) for c in result.configs
                }
        return out

    async def alter_configs(
        self, configs: Mapping[ConfigResource, Mapping[str, str]], *, validate_only: bool = False
    ) -> dict[ConfigResource, KafkaClientError | None]:
        """Replace each resource's whole set of overrides (the legacy AlterConfigs: a
        config left out goes back to its default); each resource's error or None."""

        def entry(version: int, name: str, value: str) -> Any:
            return nested(api.ALTER_CONFIGS, version, "AlterableConfig", name=name,
                          value=str(value))

        return await self._alter_configs(
            api.ALTER_CONFIGS,
            {r: [functools.partial(entry, name=k, value=v) for k, v in c.items()]
             for r, c in configs.items()},
            validate_only,
        )

    async def incremental_alter_configs(
        self, ops: Mapping[ConfigResource, Sequence[AlterConfigOp]], *,
        validate_only: bool = False,
    ) -> dict[ConfigResource, KafkaClientError | None]:
        """Change single configs (IncrementalAlterConfigs: SET, DELETE back to the default,
        APPEND to / SUBTRACT from a list); each resource's error or None."""

        def entry(version: int, op: AlterConfigOp) -> Any:
            return nested(api.INCREMENTAL_ALTER_CONFIGS, version, "AlterableConfig",
                          name=op.name, config_operation=int(op.op), value=op.value)

        return await self._alter_configs(
            api.INCREMENTAL_ALTER_CONFIGS,
            {r: [functools.partial(entry, op=op) for op in items] for r, items in ops.items()},
            validate_only,
        )

    async def _alter_configs(
        self, api_key: int, entries: Mapping[ConfigResource, list[Any]], validate_only: bool
    ) -> dict[ConfigResource, KafkaClientError | None]:
        """Send each resource's entries (builders of AlterableConfig by version) to the
        broker that serves the resource."""
        out: dict[ConfigResource, KafkaClientError | None] = {}
        for node, items in _by_config_node(entries).items():

            def build(version: int, items: list[ConfigResource] = items) -> Any:
                return request(
                    api_key,
                    version,
                    validate_only=validate_only,
                    resources=tuple(
                        nested(api_key, version, "AlterConfigsResource",
                               resource_type=r.type, resource_name=r.name,
                               configs=tuple(make_entry(version) for make_entry in entries[r]))
                        for r in items
                    ),
                )

            response = await self.client.call(node, api_key, build)
            for result in response.responses:
                resource = ConfigResource(
                    ConfigResourceType(int(result.resource_type)), result.resource_name
                )
                out[resource] = _error_or_none(
                    result.error_code, result.error_message, f"alter configs of {resource.name!r}"
                )
        return out
