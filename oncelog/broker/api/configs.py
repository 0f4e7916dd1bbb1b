"""Configs: DescribeConfigs, AlterConfigs and IncrementalAlterConfigs on topics and on this
broker (its dynamic configs, per-broker ``"<node id>"`` or cluster-wide default ``""``).

Topic changes go through the partition registry (catalog + ``update_config`` of each
partition); broker changes replace a dynamic layer of the BrokerConfig, are written to the
data dir (oncelog.broker.dynamic_config) and re-resolve every topic's settings. Errors use
Kafka's codes and messages: INVALID_CONFIG for topics, INVALID_REQUEST for brokers.

Authorization per resource, before anything else (Kafka's ``ConfigHelper`` and
``ControllerApis.authorizeAlterResource``): describing needs DescribeConfigs, altering
AlterConfigs, on the topic (else TOPIC_AUTHORIZATION_FAILED) or, for a broker, on the
Cluster (else CLUSTER_AUTHORIZATION_FAILED); the other resources are still answered.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from oncelog.broker.api import RequestContext, handles
from oncelog.broker.authz import allowed, cluster_allowed
from oncelog.broker.context import BrokerContext
from oncelog.broker.dynamic_config import (
    broker_level,
    save_dynamic_configs,
    validate_broker_layer,
)
from oncelog.config import (
    BROKER_KEYS,
    TOPIC_CONFIGS,
    ConfigKey,
    ConfigSource,
    ConfigType,
    Dynamic,
    Synonym,
)
from oncelog.config_registry import broker_key
from oncelog.errors import ErrorCode, KafkaError
from oncelog.protocol import versions
from oncelog.protocol.build import make, response_module
from oncelog.security.acl import AclOperation, ResourceType

ALTER_CONFIGS: Final = 33
INCREMENTAL_ALTER_CONFIGS: Final = 44
RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
RESOURCE_BROKER_LOGGER = 8
OP_SET, OP_DELETE, OP_APPEND, OP_SUBTRACT = 0, 1, 2, 3
_OP_NAMES = {OP_APPEND: "APPEND", OP_SUBTRACT: "SUBTRACT"}


def check_authorized(ctx: RequestContext, resource: Any, operation: AclOperation) -> None:
    """KafkaError with Kafka's code and message when the principal may not do
    ``operation`` (DescribeConfigs / AlterConfigs) on this config resource."""
    if resource.resource_type == RESOURCE_TOPIC:
        if not allowed(ctx, operation, ResourceType.TOPIC, resource.resource_name):
            raise KafkaError(ErrorCode.topic_authorization_failed, "Topic authorization failed.")
    elif resource.resource_type in (RESOURCE_BROKER, RESOURCE_BROKER_LOGGER):
        if not cluster_allowed(ctx, operation):
            raise KafkaError(ErrorCode.cluster_authorization_failed,
                             "Cluster authorization failed.")


# -- describing ---------------------------------------------------------------------------
Entry = tuple[ConfigKey, str | None, ConfigSource, list[Synonym]]


def topic_entries(services: BrokerContext, topic: str) -> list[Entry]:
    """Every topic config: value, source and synonyms, as Kafka answers them."""
    info = services.partitions.topics.get(topic)
    if info is None:
        raise KafkaError(ErrorCode.unknown_topic_or_partition, topic)
    config = services.config
    entries: list[Entry] = []
    for name, key in TOPIC_CONFIGS.items():
        synonyms = config.synonyms(key.synonyms, key.synonyms[0]) if key.synonyms else []
        if name in info.configs:
            value = key.format(key.parse(info.configs[name]))
            synonyms.insert(0, (name, value, ConfigSource.DYNAMIC_TOPIC_CONFIG))
        else:
            value = key.format(config.topic_default(key)[0])
        source = synonyms[0][2] if synonyms else ConfigSource.DEFAULT_CONFIG
        entries.append((key, value, source, synonyms))
    return entries


def broker_entries(services: BrokerContext, resource_name: str) -> list[Entry]:
    """This broker's configs (``"<id>"``), or its cluster-wide dynamic defaults (``""``)."""
    config = services.config
    level = broker_level(resource_name, services.node.node_id)
    entries: list[Entry] = []
    if level is ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG:
        for name, value in sorted(config.dynamic(level).items()):
            key = BROKER_KEYS[name]
            text = key.format(value)
            entries.append((key, text, level, [(name, text, level)]))
        return entries
    for name, key in BROKER_KEYS.items():
        value, source = config.value_and_source(name)
        synonyms = config.synonyms(config.broker_synonym_names(name), name)
        entries.append((key, key.format(value), source, synonyms))
    for name in config.listener_overrides():
        override = broker_key(name)
        assert override is not None  # BrokerConfig accepts only known names
        value, source = config.value_and_source(name)
        text = override.format(value)
        entries.append((override, text, source, [(name, text, source)]))
    return entries


@handles(versions.DESCRIBE_CONFIGS, 1, 4)
async def handle_describe_configs(ctx: RequestContext, request: Any) -> Any:
    mod = response_module(versions.DESCRIBE_CONFIGS, ctx.api_version)
    with_synonyms = bool(getattr(request, "include_synonyms", False))
    with_docs = bool(getattr(request, "include_documentation", False))
    results = []
    for resource in request.resources:
        code, message = ErrorCode.none, None
        configs: list[Any] = []
        try:
            check_authorized(ctx, resource, AclOperation.DESCRIBE_CONFIGS)
            if resource.resource_type == RESOURCE_TOPIC:
                entries = topic_entries(ctx.services, resource.resource_name)
            elif resource.resource_type == RESOURCE_BROKER:
                entries = broker_entries(ctx.services, resource.resource_name)
            else:
                raise KafkaError(ErrorCode.invalid_request, "unsupported resource type")
            wanted = resource.configuration_keys
            for key, value, source, synonyms in entries:
                if wanted is not None and key.name not in wanted:
                    continue
                is_topic = resource.resource_type == RESOURCE_TOPIC
                configs.append(make(
                    mod.DescribeConfigsResourceResult,
                    name=key.name,
                    value=None if key.sensitive else value,
                    read_only=not is_topic and key.dynamic is Dynamic.READ_ONLY,
                    config_source=source,
                    is_default=source == ConfigSource.DEFAULT_CONFIG,
                    is_sensitive=key.sensitive,
                    synonyms=tuple(
                        make(mod.DescribeConfigsSynonym, name=n,
                             value=None if key.sensitive else v, source=s)
                        for n, v, s in synonyms
                    ) if with_synonyms else (),
                    config_type=key.type,
                    documentation=key.doc if with_docs else None,
                ))
        except KafkaError as exc:
            code, message = exc.code, exc.message
        results.append(make(
            mod.DescribeConfigsResult,
            error_code=code,
            error_message=message,
            resource_type=resource.resource_type,
            resource_name=resource.resource_name,
            configs=tuple(configs),
        ))
    return make(mod.DescribeConfigsResponse, throttle_time=0, results=tuple(results))


# -- altering -----------------------------------------------------------------------------
def _list_items(text: str | None) -> list[str]:
    return [item.strip() for item in (text or "").split(",") if item.strip()]


def apply_incremental(
    current: Mapping[str, str], ops: list[tuple[str, int, str | None]],
    keys: Mapping[str, ConfigKey], bad_value: ErrorCode,
) -> dict[str, str]:
    """The overrides after IncrementalAlterConfigs' SET / DELETE / APPEND / SUBTRACT."""
    names = [name for name, _, _ in ops]
    if len(set(names)) != len(names):
        raise KafkaError(ErrorCode.invalid_request, "Error due to duplicate config keys")
    result = dict(current)
    for name, op, value in ops:
        if op == OP_DELETE:
            result.pop(name, None)
            continue
        if op not in (OP_SET, OP_APPEND, OP_SUBTRACT):
            raise KafkaError(ErrorCode.invalid_request, f"Unknown config operation {op}")
        if value is None:
            raise KafkaError(ErrorCode.invalid_request, f"Null value not supported for : {name}")
        key = keys.get(name)
        if op == OP_SET or key is None:
            result[name] = value  # an unknown name is refused by the validation
            continue
        if key.type is not ConfigType.LIST:
            raise KafkaError(
                bad_value, f"Can't {_OP_NAMES[op]} to key {name} because its type is not LIST."
            )
        old = _list_items(result[name] if name in result else key.format(key.default))
        if op == OP_APPEND:
            items = old + [i for i in _list_items(value) if i not in old]
        else:
            items = [i for i in old if i not in _list_items(value)]
        result[name] = ",".join(items)
    return result


def _alter_resource(
    services: BrokerContext, resource: Any, ops: list[tuple[str, int, str | None]] | None,
    full: dict[str, str | None] | None, validate_only: bool,
) -> None:
    """Apply one resource's change: ``ops`` (incremental) or ``full`` (AlterConfigs)."""
    if resource.resource_type == RESOURCE_TOPIC:
        registry = services.partitions
        info = registry.topics.get(resource.resource_name)
        if info is None:
            raise KafkaError(
                ErrorCode.unknown_topic_or_partition,
                f"The topic '{resource.resource_name}' does not exist.",
            )
        if ops is not None:
            new = apply_incremental(info.configs, ops, TOPIC_CONFIGS, ErrorCode.invalid_config)
        else:
            assert full is not None
            nulls = [name for name, value in full.items() if value is None]
            if nulls:
                raise KafkaError(
                    ErrorCode.invalid_request, f"Null value not supported for : {nulls[0]}"
                )
            new = {name: str(value) for name, value in full.items()}
        registry.set_topic_configs(resource.resource_name, new, validate_only=validate_only)
    elif resource.resource_type == RESOURCE_BROKER:
        config = services.config
        level = broker_level(resource.resource_name, services.node.node_id)
        current = {
            name: BROKER_KEYS[name].format(value) or ""
            for name, value in config.dynamic(level).items()
        }
        if ops is not None:
            new_text = apply_incremental(current, ops, BROKER_KEYS, ErrorCode.invalid_request)
        else:
            assert full is not None
            new_text = {name: str(value) for name, value in full.items() if value is not None}
        parsed = validate_broker_layer(level, new_text)
        if validate_only:
            return
        previous = config.dynamic(level)
        config.set_dynamic(level, parsed)
        try:
            save_dynamic_configs(services.partitions.data_dir, config)
        except OSError:
            config.set_dynamic(level, previous)
            raise
        services.partitions.refresh_log_configs()
    else:
        raise KafkaError(ErrorCode.invalid_request, "unsupported resource type")


def _alter_all(ctx: RequestContext, request: Any, api_key: int, incremental: bool) -> Any:
    """Apply each resource's change in turn; one resource's error does not stop the rest."""
    mod = response_module(api_key, ctx.api_version)
    responses = []
    for resource in request.resources:
        code, message = ErrorCode.none, None
        try:
            check_authorized(ctx, resource, AclOperation.ALTER_CONFIGS)
            if incremental:
                ops = [(c.name, int(c.config_operation), c.value) for c in resource.configs]
                _alter_resource(ctx.services, resource, ops, None, bool(request.validate_only))
            else:
                full = {c.name: c.value for c in resource.configs}
                _alter_resource(ctx.services, resource, None, full, bool(request.validate_only))
        except KafkaError as exc:
            code, message = exc.code, exc.message
        responses.append(make(
            mod.AlterConfigsResourceResponse,
            error_code=code,
            error_message=message,
            resource_type=resource.resource_type,
            resource_name=resource.resource_name,
        ))
    response_cls = (
        mod.IncrementalAlterConfigsResponse if incremental else mod.AlterConfigsResponse
    )
    return make(response_cls, throttle_time=0, responses=tuple(responses))


@handles(ALTER_CONFIGS, 0, 2)
async def handle_alter_configs(ctx: RequestContext, request: Any) -> Any:
    return _alter_all(ctx, request, ALTER_CONFIGS, incremental=False)


@handles(INCREMENTAL_ALTER_CONFIGS, 0, 1)
async def handle_incremental_alter_configs(ctx: RequestContext, request: Any) -> Any:
    return _alter_all(ctx, request, INCREMENTAL_ALTER_CONFIGS, incremental=True)
