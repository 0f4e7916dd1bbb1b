"""Configs through real clients and the raw protocol against ``oncelog serve``: describe with
types, sources and synonyms; AlterConfigs / IncrementalAlterConfigs on topics and brokers,
taking effect without a restart and surviving one; Kafka's errors for bad input; and the
same requests answered the same way by Apache Kafka 4.4 (differential, live)."""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
)
from kio.schema.create_topics.v7 import request as cq
from kio.schema.describe_configs.v4 import request as dq
from kio.schema.incremental_alter_configs.v1 import request as iq
from kio.schema.types import TopicName
from kio.static.primitive import i8, i16, i32, i32Timedelta
from rawkafka import request_once

TOPIC, BROKER = 2, 4
Op = tuple[str, int, str | None]


def create(bootstrap: str, name: str, configs: dict[str, str]) -> tuple[int, str | None]:
    topic = cq.CreatableTopic(
        name=TopicName(name), num_partitions=i32(1), replication_factor=i16(1), assignments=(),
        configs=tuple(cq.CreatableTopicConfig(name=k, value=v) for k, v in configs.items()),
    )
    request = cq.CreateTopicsRequest(
        topics=(topic,), timeout=i32Timedelta.parse(datetime.timedelta(seconds=10)),
        validate_only=False,
    )
    result = request_once(bootstrap, request).topics[0]
    return int(result.error_code), result.error_message


def incremental(
    bootstrap: str, rtype: int, name: str, ops: list[Op], validate_only: bool = False
) -> tuple[int, str | None]:
    configs = tuple(iq.AlterableConfig(name=n, config_operation=i8(o), value=v) for n, o, v in ops)
    resource = iq.AlterConfigsResource(resource_type=i8(rtype), resource_name=name, configs=configs)
    request = iq.IncrementalAlterConfigsRequest(resources=(resource,), validate_only=validate_only)
    result = request_once(bootstrap, request).responses[0]
    return int(result.error_code), result.error_message


def describe(
    bootstrap: str, rtype: int, name: str, keys: tuple[str, ...] | None = None
) -> tuple[int, dict[str, Any]]:
    resource = dq.DescribeConfigsResource(
        resource_type=i8(rtype), resource_name=name, configuration_keys=keys
    )
    request = dq.DescribeConfigsRequest(
        resources=(resource,), include_synonyms=True, include_documentation=True
    )
    result = request_once(bootstrap, request).results[0]
    return int(result.error_code), {c.name: c for c in result.configs}


def summary(entry: Any) -> tuple[Any, ...]:
    """What a config entry says, without the documentation text (our own words)."""
    synonyms = [(s.name, s.value, int(s.source)) for s in entry.synonyms]
    return (entry.value, int(entry.config_source), entry.read_only, int(entry.config_type),
            synonyms)


BAD_CREATES: list[dict[str, str]] = [
    {"nope": "1"},
    {"retention.ms": "abc"},
    {"cleanup.policy": "bogus"},
    {"compression.type": "brotli"},
    {"min.cleanable.dirty.ratio": "2"},
    {"compression.gzip.level": "12"},
    {"message.timestamp.type": "x"},
    {"preallocate": "maybe"},
]
BAD_TOPIC_ALTERS: list[list[Op]] = [
    [("nope", 0, "1")],
    [("retention.ms", 0, "abc")],
    [("retention.ms", 0, None)],
    [("retention.ms", 2, "5")],
    [("retention.ms", 0, "1"), ("retention.ms", 0, "2")],
]
BAD_BROKER_ALTERS: list[tuple[str, list[Op]]] = [
    ("1", [("log.dirs", 0, "/x")]),
    ("", [("num.partitions", 0, "3")]),
    ("1", [("message.max.bytes", 0, "abc")]),
    ("7", [("log.retention.ms", 0, "1000")]),
]


def broker_applied(bootstrap: str, name: str, value: str) -> bool:
    code, entries = describe(bootstrap, BROKER, "1", (name,))
    return code == 0 and entries[name].value == value


def conversation(bootstrap: str) -> list[Any]:
    """One fixed sequence of config requests; every answer, in order."""
    answers: list[Any] = [create(bootstrap, "cfg", {"retention.ms": "5000"})]
    answers += [create(bootstrap, "bad", c) for c in BAD_CREATES]
    answers += [incremental(bootstrap, TOPIC, "cfg", ops) for ops in BAD_TOPIC_ALTERS]
    answers.append(incremental(bootstrap, TOPIC, "missing", [("retention.ms", 0, "1")]))
    answers.append(incremental(bootstrap, TOPIC, "cfg", [("cleanup.policy", 2, "compact")]))
    answers += [incremental(bootstrap, BROKER, n, ops, True) for n, ops in BAD_BROKER_ALTERS]
    answers.append(incremental(bootstrap, BROKER, "", [("log.retention.ms", 0, "123456")]))
    answers.append(incremental(bootstrap, BROKER, "1", [("log.retention.ms", 0, "654321")]))
    # Kafka applies broker changes through its metadata log, a moment after answering.
    assert wait_until(lambda: broker_applied(bootstrap, "log.retention.ms", "654321"))
    keys = ("retention.ms", "cleanup.policy", "segment.ms", "max.message.bytes",
            "compression.type")
    code, entries = describe(bootstrap, TOPIC, "cfg", keys)
    answers.append((code, {name: summary(entry) for name, entry in sorted(entries.items())}))
    code, entries = describe(bootstrap, BROKER, "", ("log.retention.ms",))
    answers.append((code, {name: summary(entry) for name, entry in sorted(entries.items())}))
    answers.append(describe(bootstrap, TOPIC, "missing")[0])
    return answers


def test_same_answers_as_kafka(
    broker_factory: Callable[..., Any], kafka_broker: Any
) -> None:
    ours = broker_factory(node_id=1)
    assert conversation(ours.bootstrap) == conversation(kafka_broker.bootstrap)


def test_topic_config_names_and_types_match_kafka(broker: Any, kafka_broker: Any) -> None:
    """The list cannot drift: every topic config of a live Kafka 4.4, with its type and
    default, is ours too, and we have none it lacks (sources: test_same_answers_as_kafka;
    the reference broker stores min.insync.replicas as a cluster default when formatted)."""
    def table(bootstrap: str) -> dict[str, tuple[int, str | None]]:
        assert create(bootstrap, "names", {})[0] == 0
        code, entries = describe(bootstrap, TOPIC, "names")
        assert code == 0
        return {n: (int(e.config_type), e.value) for n, e in entries.items()}

    assert table(broker.bootstrap) == table(kafka_broker.bootstrap)


def test_describe_has_types_sources_synonyms_and_docs(broker: Any) -> None:
    assert create(broker.bootstrap, "d", {"retention.ms": "5000"}) == (0, None)
    code, entries = describe(broker.bootstrap, TOPIC, "d")
    assert code == 0
    assert all(e.config_type != 0 and e.documentation for e in entries.values())
    assert summary(entries["retention.ms"]) == ("5000", 1, False, 5, [("retention.ms", "5000", 1)])
    code, brokers = describe(broker.bootstrap, BROKER, "1")
    assert code == 0
    assert brokers["log.dirs"].read_only and not brokers["log.retention.ms"].read_only
    assert brokers["listeners"].value == f"PLAINTEXT://{broker.bootstrap}"
    assert brokers["advertised.listeners"].value == f"PLAINTEXT://{broker.bootstrap}"
    assert brokers["inter.broker.listener.name"].value == "PLAINTEXT"


def segment_files(data_dir: Path, topic: str) -> list[Path]:
    return sorted((data_dir / f"{topic}-0").glob("*.log"))


def produce(bootstrap: str, topic: str, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for i in range(count):
        producer.produce(topic, value=b"x" * 200, key=str(i).encode())
        producer.flush(10)
    assert producer.flush(10) == 0


def wait_until(condition: Callable[[], bool], timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


def set_topic_config(admin: AdminClient, topic: str, name: str, value: str) -> None:
    """IncrementalAlterConfigs SET through librdkafka's admin API."""
    entry = ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[entry])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(10)


def test_alter_takes_effect_without_restart_and_survives_one(
    broker_factory: Callable[..., Any],
) -> None:
    broker = broker_factory(configs={"log.retention.check.interval.ms": "100"})
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    assert create(broker.bootstrap, "live", {}) == (0, None)
    produce(broker.bootstrap, "live", 3)
    assert len(segment_files(broker.data_dir, "live")) == 1
    set_topic_config(admin, "live", "segment.bytes", "300")
    produce(broker.bootstrap, "live", 6)
    rolled = len(segment_files(broker.data_dir, "live"))
    assert rolled > 2
    set_topic_config(admin, "live", "retention.ms", "1")
    assert wait_until(lambda: len(segment_files(broker.data_dir, "live")) < rolled)
    broker.stop()
    broker.start()
    code, entries = describe(broker.bootstrap, TOPIC, "live", ("segment.bytes", "retention.ms"))
    assert code == 0
    assert entries["segment.bytes"].value == "300" and entries["retention.ms"].value == "1"
    assert incremental(broker.bootstrap, BROKER, "", [("log.retention.bytes", 0, "777")]) == (
        0, None)
    broker.stop()
    broker.start()
    code, entries = describe(broker.bootstrap, BROKER, "1", ("log.retention.bytes",))
    assert (entries["log.retention.bytes"].value, entries["log.retention.bytes"].config_source) \
        == ("777", 3)


def test_kafka_python_and_aiokafka_admins(broker: Any) -> None:
    from kafka.admin import ConfigResource as KPResource
    from kafka.admin import ConfigResourceType, KafkaAdminClient

    assert create(broker.bootstrap, "kp", {}) == (0, None)
    kp = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        kp.alter_configs([KPResource(ConfigResourceType.TOPIC, "kp",
                                     configs={"retention.ms": "12345"})])
        described = kp.describe_configs([KPResource(ConfigResourceType.TOPIC, "kp")])
        text = repr(described)
        assert "12345" in text
    finally:
        kp.close()

    import asyncio

    from aiokafka.admin import AIOKafkaAdminClient
    from aiokafka.admin.config_resource import ConfigResource as AIOResource
    from aiokafka.admin.config_resource import ConfigResourceType as AIOType

    async def run() -> str:
        client = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
        await client.start()
        try:
            await client.alter_configs([AIOResource(AIOType.TOPIC, "kp",
                                                    configs={"retention.ms": "54321"})])
            return repr(await client.describe_configs([AIOResource(AIOType.TOPIC, "kp")]))
        finally:
            await client.close()

    assert "54321" in asyncio.run(run())
    _code, entries = describe(broker.bootstrap, TOPIC, "kp", ("retention.ms",))
    assert entries["retention.ms"].value == "54321"
