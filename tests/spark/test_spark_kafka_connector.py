"""Spark's own Kafka connector (``format("kafka")``, spark-sql-kafka-0-10 from Maven Central,
fetched by `make reference` into .cache/spark-kafka-<version>/) against a real ``oncelog
serve``: batch and streaming reads of transactional input under
``kafka.isolation.level=read_committed`` (a committed and an aborted transaction: only the
committed values), and a ``format("kafka")`` write read back. The session is the shared one
of tests/spark/conftest.py, which puts the connector's jars on its classpath."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from examples.payments.verify import read_topic
from oncelog.client import Admin, Producer
from oncelog.harness.broker import BrokerProcess
from tests.spark.conftest import SPARK_KAFKA_VERSION, spark_kafka_jars
from tests.support.names import unique_name, unique_topic


@pytest.fixture(scope="module")
def kafka_spark(spark: Any) -> Any:
    """The shared session, checked to have Spark's ``kafka`` format (fails, not skips)."""
    assert spark_kafka_jars(), (
        f"spark-sql-kafka-0-10 {SPARK_KAFKA_VERSION} is not in the cache: run `make reference`"
    )
    jars = spark.sparkContext.getConf().get("spark.jars", "")
    assert "spark-sql-kafka-0-10" in jars, (
        f"the Spark session started without the connector: {jars!r}"
    )
    return spark


def transactional_input(bootstrap: str) -> tuple[str, list[str]]:
    """A 2-partition topic with one committed and one aborted transaction (aborted last, so
    read_uncommitted would see it); returns the topic and the committed values."""
    topic = unique_topic("sparkkafka")
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topic(topic, 2)
    committed = [f"committed-{i}" for i in range(10)]
    with Producer({"bootstrap.servers": bootstrap, "transactional.id": unique_name("sk")}) as p:
        p.init_transactions()
        p.begin_transaction()
        for i, value in enumerate(committed):
            p.send(topic, value.encode(), key=str(i).encode())
        p.commit_transaction()
        p.begin_transaction()
        for i in range(10):
            p.send(topic, f"aborted-{i}".encode(), key=str(i).encode())
        p.flush(30)
        p.abort_transaction()
    return topic, committed


def kafka_source(reader: Any, bootstrap: str, topic: str) -> Any:
    return (
        reader.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("kafka.isolation.level", "read_committed")
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .load()
    )


def test_batch_read_committed_sees_only_committed(
    kafka_spark: Any, tpc_broker: BrokerProcess
) -> None:
    topic, committed = transactional_input(tpc_broker.bootstrap)
    df = kafka_source(kafka_spark.read, tpc_broker.bootstrap, topic)
    rows = df.selectExpr("CAST(value AS STRING) AS v", "topic", "partition").collect()
    assert sorted(r.v for r in rows) == sorted(committed)
    assert {r.topic for r in rows} == {topic}
    assert {r.partition for r in rows} == {0, 1}


def test_streaming_read_committed_sees_only_committed(
    kafka_spark: Any, tpc_broker: BrokerProcess, tmp_path: Path
) -> None:
    topic, committed = transactional_input(tpc_broker.bootstrap)
    table = unique_name("sk_stream").replace("-", "_")
    query = (
        kafka_source(kafka_spark.readStream, tpc_broker.bootstrap, topic)
        .selectExpr("CAST(value AS STRING) AS v")
        .writeStream.format("memory")
        .queryName(table)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert not query.isActive, "the availableNow query did not finish in 120 s"
    assert query.exception() is None
    rows = kafka_spark.table(table).collect()
    assert sorted(r.v for r in rows) == sorted(committed)


def test_write_with_kafka_format_reads_back(kafka_spark: Any, tpc_broker: BrokerProcess) -> None:
    topic = unique_topic("sparkkafka-out")
    with Admin({"bootstrap.servers": tpc_broker.bootstrap}) as admin:
        admin.create_topic(topic, 2)
    values = [f"row-{i}" for i in range(50)]
    (
        kafka_spark.createDataFrame(
            [(str(i), v) for i, v in enumerate(values)], "key string, value string"
        )
        .write.format("kafka")
        .option("kafka.bootstrap.servers", tpc_broker.bootstrap)
        .option("topic", topic)
        .save()
    )
    got = read_topic(tpc_broker.bootstrap, topic)
    assert len(got) == len(values)
    assert {m.key: m.value for m in got} == {
        str(i).encode(): v.encode() for i, v in enumerate(values)
    }
