"""The ``oncelog`` format over SASL_SSL: Spark's Kafka-source-style ``kafka.security.protocol``,
``kafka.sasl.mechanism``, ``kafka.sasl.jaas.config`` and ``kafka.ssl.truststore.*`` options
reach oncelog.client in the streaming reader, the exactly-once sink (its transactional
producers and progress reads) and the batch reader."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from oncelog.client import Admin, Producer
from tests.conftest import BrokerFactory
from tests.spark.conftest import TPC_CONFIGS
from tests.support.names import unique_name, unique_topic
from tests.support.sasl_ssl import start_sasl_ssl_broker
from tests.support.tls import TlsMaterial


def test_stream_into_the_exactly_once_sink_and_batch_read_over_sasl_ssl(
    spark: Any, broker_factory: BrokerFactory, tls_material: TlsMaterial, tmp_path: Path
) -> None:
    broker = start_sasl_ssl_broker(broker_factory, tls_material, **TPC_CONFIGS)
    broker.add_scram_user("spark", "spark-secret")
    client = {"bootstrap.servers": broker.bootstrap,
              **broker.java_configs("spark", "spark-secret")}
    source_topic, sink_topic = unique_topic("sec-in"), unique_topic("sec-out")
    with Admin(client) as admin:
        admin.create_topic(source_topic, 2)
        admin.create_topic(sink_topic, 2)
    values = [f"v{i}" for i in range(20)]
    with Producer({**client, "transactional.id": unique_name("sec-fill")}) as producer:
        producer.init_transactions()
        producer.begin_transaction()
        for value in values:
            producer.send(source_topic, value.encode())
        producer.commit_transaction()

    options = {f"kafka.{k}": v for k, v in client.items()}
    query = (spark.readStream.format("oncelog").options(**options)
             .option("subscribe", source_topic).option("startingOffsets", "earliest").load()
             .selectExpr("value").writeStream.format("oncelog").options(**options)
             .option("topic", sink_topic)
             .option("checkpointLocation", str(tmp_path / "ckpt"))
             .trigger(availableNow=True).start())
    query.awaitTermination(180)
    assert query.exception() is None
    rows = (spark.read.format("oncelog").options(**options)
            .option("subscribe", sink_topic).load().collect())
    assert sorted(bytes(r.value).decode() for r in rows) == sorted(values)
    log = broker.process.log_path.read_text()
    assert "on SASL_SSL authenticated as User:spark (SCRAM-SHA-512)" in log
