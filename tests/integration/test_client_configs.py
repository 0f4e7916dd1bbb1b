"""oncelog.client Admin's configs API against ``oncelog serve``: describe_configs with
types, sources, synonyms and documentation; alter_configs (legacy, whole set) and
incremental_alter_configs (SET / DELETE / APPEND / SUBTRACT) on topics and brokers, with
Kafka's errors for bad input."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from oncelog.client import (
    Admin,
    AlterConfigOp,
    AlterConfigOpType,
    ConfigResource,
    ConfigResourceType,
    ConfigSource,
    ConfigType,
    NewTopic,
)
from oncelog.client.errors import KafkaClientError, UnknownTopicOrPartitionError
from oncelog.errors import ErrorCode
from oncelog.harness.broker import BrokerProcess

SET, DELETE, APPEND, SUBTRACT = (
    AlterConfigOpType.SET, AlterConfigOpType.DELETE, AlterConfigOpType.APPEND,
    AlterConfigOpType.SUBTRACT,
)


@pytest.fixture
def admin(broker: BrokerProcess) -> Iterator[Admin]:
    with Admin({"bootstrap.servers": broker.bootstrap}) as client:
        yield client


def make_topic(admin: Admin, name: str, config: dict[str, str] | None = None) -> ConfigResource:
    errors = admin.create_topics([NewTopic(name, 1, 1, config=config or {})])
    assert errors == {name: None}
    return ConfigResource.topic(name)


def topic_values(admin: Admin, resource: ConfigResource) -> dict[str, tuple[str | None, int]]:
    configs = admin.describe_configs([resource])[resource]
    return {name: (entry.value, int(entry.source)) for name, entry in configs.items()}


def test_describe_configs_answers_types_sources_synonyms_and_documentation(
    admin: Admin, broker: BrokerProcess
) -> None:
    topic = make_topic(admin, "described", {"retention.ms": "12345"})
    node = admin.describe_cluster().controller_id
    described = admin.describe_configs(
        [topic, ConfigResource.broker(node)], include_synonyms=True, include_documentation=True
    )
    retention = described[topic]["retention.ms"]
    assert (retention.value, retention.source, retention.type) == (
        "12345", ConfigSource.DYNAMIC_TOPIC_CONFIG, ConfigType.LONG
    )
    assert retention.synonyms[0].name == "retention.ms"
    assert retention.synonyms[0].source == ConfigSource.DYNAMIC_TOPIC_CONFIG
    assert retention.documentation
    assert not retention.is_default and not retention.is_read_only
    segment = described[topic]["segment.bytes"]
    assert segment.source != ConfigSource.DYNAMIC_TOPIC_CONFIG and segment.type == ConfigType.INT
    broker_configs = described[ConfigResource.broker(node)]
    assert broker_configs["node.id"].is_read_only
    assert broker_configs["node.id"].value == str(node)
    assert broker_configs["log.retention.ms"].type == ConfigType.LONG
    # Without synonyms and documentation, neither is answered.
    plain = admin.describe_configs([topic])[topic]["retention.ms"]
    assert plain.synonyms == () and plain.documentation is None
    assert plain.value == "12345"


def test_describe_configs_of_an_unknown_topic_raises(admin: Admin) -> None:
    with pytest.raises(UnknownTopicOrPartitionError):
        admin.describe_configs([ConfigResource.topic("no-such-topic")])


def test_incremental_alter_configs_set_delete_append_subtract(admin: Admin) -> None:
    topic = make_topic(admin, "altered")
    assert admin.incremental_alter_configs({topic: [
        AlterConfigOp("retention.ms", "60000", SET),
        AlterConfigOp("cleanup.policy", "compact", APPEND),
    ]}) == {topic: None}
    values = topic_values(admin, topic)
    assert values["retention.ms"] == ("60000", ConfigSource.DYNAMIC_TOPIC_CONFIG)
    assert values["cleanup.policy"] == ("delete,compact", ConfigSource.DYNAMIC_TOPIC_CONFIG)
    assert admin.incremental_alter_configs({topic: [
        AlterConfigOp("retention.ms", None, DELETE),
        AlterConfigOp("cleanup.policy", "delete", SUBTRACT),
    ]}) == {topic: None}
    values = topic_values(admin, topic)
    assert values["retention.ms"][1] != ConfigSource.DYNAMIC_TOPIC_CONFIG
    assert values["cleanup.policy"] == ("compact", ConfigSource.DYNAMIC_TOPIC_CONFIG)


def test_incremental_alter_configs_validate_only_changes_nothing(admin: Admin) -> None:
    topic = make_topic(admin, "validated")
    ops = {topic: [AlterConfigOp("retention.ms", "60000")]}
    assert admin.incremental_alter_configs(ops, validate_only=True) == {topic: None}
    assert topic_values(admin, topic)["retention.ms"][1] != ConfigSource.DYNAMIC_TOPIC_CONFIG


def test_alter_configs_replaces_the_whole_set_of_overrides(admin: Admin) -> None:
    topic = make_topic(admin, "replaced", {"retention.ms": "12345"})
    assert admin.alter_configs({topic: {"segment.bytes": "1048576"}}) == {topic: None}
    values = topic_values(admin, topic)
    assert values["segment.bytes"] == ("1048576", ConfigSource.DYNAMIC_TOPIC_CONFIG)
    assert values["retention.ms"][1] != ConfigSource.DYNAMIC_TOPIC_CONFIG


def test_alterations_answer_kafka_errors_per_resource(admin: Admin) -> None:
    topic = make_topic(admin, "refused")
    missing = ConfigResource.topic("no-such-topic")
    results = admin.incremental_alter_configs({
        topic: [AlterConfigOp("no.such.config", "1")],
        missing: [AlterConfigOp("retention.ms", "1")],
    })
    error = results[topic]
    assert isinstance(error, KafkaClientError) and error.code == ErrorCode.invalid_config
    missing_error = results[missing]
    assert isinstance(missing_error, KafkaClientError)
    assert missing_error.code == ErrorCode.unknown_topic_or_partition
    wrong_type = admin.alter_configs({topic: {"retention.ms": "abc"}})[topic]
    assert isinstance(wrong_type, KafkaClientError) and wrong_type.code == ErrorCode.invalid_config
    not_list = admin.incremental_alter_configs(
        {topic: [AlterConfigOp("retention.ms", "1", APPEND)]})[topic]
    assert isinstance(not_list, KafkaClientError) and not_list.code == ErrorCode.invalid_config


def test_broker_configs_per_broker_and_cluster_default(admin: Admin) -> None:
    node = admin.describe_cluster().controller_id
    default = ConfigResource.broker()
    assert default == ConfigResource(ConfigResourceType.BROKER, "")
    assert admin.incremental_alter_configs(
        {default: [AlterConfigOp("log.retention.ms", "7200000")]}
    ) == {default: None}
    assert admin.describe_configs([default])[default]["log.retention.ms"].source == (
        ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG
    )
    mine = ConfigResource.broker(node)
    assert admin.incremental_alter_configs(
        {mine: [AlterConfigOp("log.retention.ms", "3600000")]}
    ) == {mine: None}
    entry = admin.describe_configs([mine], include_synonyms=True)[mine]["log.retention.ms"]
    assert (entry.value, entry.source) == ("3600000", ConfigSource.DYNAMIC_BROKER_CONFIG)
    assert [(s.value, s.source) for s in entry.synonyms[:2]] == [
        ("3600000", ConfigSource.DYNAMIC_BROKER_CONFIG),
        ("7200000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
    ]
    read_only = admin.incremental_alter_configs({mine: [AlterConfigOp("node.id", "7")]})[mine]
    assert isinstance(read_only, KafkaClientError)
    assert read_only.code == ErrorCode.invalid_request
