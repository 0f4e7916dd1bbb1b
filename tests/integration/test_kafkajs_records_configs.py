"""KafkaJS's admin client on the records and configs APIs (issue 11): DeleteRecords, then a
consumer reading from the beginning sees only what follows the new start, also after a
kill -9; a topic config altered with KafkaJS is in force (described back) after a restart."""

from __future__ import annotations

from typing import Any

from confluent_kafka import Consumer, Producer

from oncelog.harness.broker import BrokerProcess
from tests.support.kafkajs import KafkaJSAdmin, result_of
from tests.support.names import unique_topic

TOPIC_RESOURCE = 2  # KafkaJS's ConfigResourceTypes.TOPIC


def _consume_all(bootstrap: str, topic: str, expected: int) -> list[tuple[int, bytes]]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": unique_topic("g"),
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    got: list[tuple[int, bytes]] = []
    try:
        consumer.subscribe([topic])
        for _ in range(200):
            msg = consumer.poll(0.2)
            if msg is None:
                if len(got) >= expected:
                    break
                continue
            assert msg.error() is None, msg.error()
            offset, value = msg.offset(), msg.value()
            assert offset is not None and value is not None
            got.append((offset, value))
    finally:
        consumer.close()
    return got


def _describe(kafkajs_admin: KafkaJSAdmin, bootstrap: str, topic: str) -> dict[str, Any]:
    (outcome,) = kafkajs_admin(bootstrap, [
        {"op": "describeConfigs", "args": [{"resources": [
            {"type": TOPIC_RESOURCE, "name": topic, "configNames": ["retention.ms"]}],
            "includeSynonyms": False}]},
    ])
    (resource,) = result_of(outcome)["resources"]
    assert resource["errorCode"] == 0, resource
    (entry,) = resource["configEntries"]
    return dict(entry)


def test_kafkajs_delete_records_and_alter_configs(
    broker: BrokerProcess, kafkajs_admin: KafkaJSAdmin
) -> None:
    bootstrap = broker.bootstrap
    topic = unique_topic("js-records")
    result_of(kafkajs_admin(bootstrap, [
        {"op": "createTopics", "args": [{"topics": [{"topic": topic, "numPartitions": 1}]}]},
    ])[0])
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for i in range(10):
        producer.produce(topic, b"v%d" % i, partition=0)
        producer.flush(10)

    del producer
    # KafkaJS finds partition leaders from metadata it has loaded in this admin session.
    _, deleted, offsets, altered = kafkajs_admin(bootstrap, [
        {"op": "fetchTopicMetadata", "args": [{"topics": [topic]}]},
        {"op": "deleteTopicRecords",
         "args": [{"topic": topic, "partitions": [{"partition": 0, "offset": "4"}]}]},
        {"op": "fetchTopicOffsets", "args": [topic]},
        {"op": "alterConfigs", "args": [{"validateOnly": False, "resources": [
            {"type": TOPIC_RESOURCE, "name": topic,
             "configEntries": [{"name": "retention.ms", "value": "7200000"}]}]}]},
    ])
    result_of(deleted)
    assert [(o["partition"], o["low"], o["high"]) for o in result_of(offsets)] == [
        (0, "4", "10")
    ]
    result_of(altered)
    assert _describe(kafkajs_admin, bootstrap, topic)["configValue"] == "7200000"
    assert _consume_all(bootstrap, topic, 6) == [(i, b"v%d" % i) for i in range(4, 10)]

    broker.restart(kill=True)
    assert _consume_all(broker.bootstrap, topic, 6) == [(i, b"v%d" % i) for i in range(4, 10)]
    after = _describe(kafkajs_admin, broker.bootstrap, topic)
    assert (after["configValue"], after["isDefault"]) == ("7200000", False)
