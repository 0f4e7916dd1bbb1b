"""The ``oncelog`` format in a real ``local[2]`` SparkSession against a real broker: batch
reads (read_committed vs read_uncommitted, headers, assign, offset specs), the streaming
reader with read limits and Trigger.AvailableNow into the exactly-once sink, and df.write."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from examples.payments.verify import read_topic
from oncelog.client import Admin, Producer
from oncelog.harness.broker import BrokerProcess
from tests.support.names import unique_name, unique_topic


def make_topic(bootstrap: str, partitions: int = 3, prefix: str = "io") -> str:
    topic = unique_topic(prefix)
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topic(topic, partitions)
    return topic


def fill(bootstrap: str, topic: str, txns: int = 6, per_txn: int = 10) -> list[bytes]:
    """Transactions of ``per_txn`` records over all partitions, every third aborted; returns
    the committed values."""
    committed: list[bytes] = []
    with Producer({"bootstrap.servers": bootstrap, "transactional.id": unique_name("fill")}) as p:
        p.init_transactions()
        for t in range(txns):
            p.begin_transaction()
            values = [f"t{t}-{i}".encode() for i in range(per_txn)]
            for i, value in enumerate(values):
                p.send(topic, value, key=str(i).encode(), headers=[("n", str(i).encode())])
            if t % 3 == 2:
                p.flush(30)
                p.abort_transaction()
            else:
                p.commit_transaction()
                committed.extend(values)
    return sorted(committed)


def source(spark: Any, bootstrap: str, **options: str) -> Any:
    reader = spark.read.format("oncelog").option("kafka.bootstrap.servers", bootstrap)
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load()


def test_batch_read_is_read_committed_by_default(spark: Any, tpc_broker: BrokerProcess) -> None:
    topic = make_topic(tpc_broker.bootstrap)
    committed = fill(tpc_broker.bootstrap, topic)
    rows = source(spark, tpc_broker.bootstrap, subscribe=topic).collect()
    assert sorted(r.value for r in rows) == committed
    assert {r.topic for r in rows} == {topic}
    assert {r.partition for r in rows} <= {0, 1, 2}
    assert all(r.timestampType == 0 and r.timestamp is not None for r in rows)
    # Offsets are positions in the log: aborted records and markers leave gaps.
    assert max(r.offset for r in rows) >= len(rows) // 3
    uncommitted = source(
        spark,
        tpc_broker.bootstrap,
        subscribe=topic,
        **{"kafka.isolation.level": "read_uncommitted"},
    ).collect()
    assert len(uncommitted) == 60 and len(rows) == 40


def test_headers_assign_and_offset_ranges(spark: Any, tpc_broker: BrokerProcess) -> None:
    topic = make_topic(tpc_broker.bootstrap)
    fill(tpc_broker.bootstrap, topic, txns=2)
    df = source(
        spark,
        tpc_broker.bootstrap,
        assign=json.dumps({topic: [0, 2]}),
        includeHeaders="true",
    )
    assert "headers" in df.columns
    rows = df.collect()
    assert rows and {r.partition for r in rows} <= {0, 2}
    assert all(dict((h.key, h.value) for h in r.headers) == {"n": r.key} for r in rows)
    everything = source(spark, tpc_broker.bootstrap, assign=json.dumps({topic: [0]})).collect()
    offsets = sorted(r.offset for r in everything)
    middle = source(
        spark,
        tpc_broker.bootstrap,
        assign=json.dumps({topic: [0]}),
        startingOffsets=json.dumps({topic: {"0": offsets[1]}}),
        endingOffsets=json.dumps({topic: {"0": offsets[-1]}}),
    ).collect()
    assert sorted(r.offset for r in middle) == offsets[1:-1]


def test_stream_with_read_limit_into_the_exactly_once_sink(
    spark: Any, tpc_broker: BrokerProcess, tmp_path: Path
) -> None:
    source_topic = make_topic(tpc_broker.bootstrap, prefix="in")
    sink_topic = make_topic(tpc_broker.bootstrap, partitions=2, prefix="out")
    committed = fill(tpc_broker.bootstrap, source_topic, txns=9)
    query = (
        spark.readStream.format("oncelog")
        .option("kafka.bootstrap.servers", tpc_broker.bootstrap)
        .option("subscribe", source_topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "30")
        .option("includeHeaders", "true")
        .load()
        .selectExpr("key", "value", "headers")
        .writeStream.format("oncelog")
        .option("kafka.bootstrap.servers", tpc_broker.bootstrap)
        .option("topic", sink_topic)
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(180)
    assert query.exception() is None
    progress = query.recentProgress
    # 90 records + 9 markers per partition-group: 99 offsets in batches of at most 30.
    assert len(progress) >= 4
    assert all(p["numInputRows"] <= 30 for p in progress)
    out = read_topic(tpc_broker.bootstrap, sink_topic)
    assert sorted(m.value or b"" for m in out) == committed
    assert all(m.headers == (("n", m.key),) for m in out)


def test_df_write_one_transaction_per_task(spark: Any, tpc_broker: BrokerProcess) -> None:
    topic_a = make_topic(tpc_broker.bootstrap, prefix="wa")
    topic_b = make_topic(tpc_broker.bootstrap, prefix="wb")
    rows = [(f"k{i}", f"v{i}", topic_a if i % 2 else topic_b, i % 3) for i in range(20)]
    df = spark.createDataFrame(rows, "key string, value string, topic string, partition int")
    df.repartition(3).write.format("oncelog").option(
        "kafka.bootstrap.servers", tpc_broker.bootstrap
    ).mode("append").save()
    got_a = read_topic(tpc_broker.bootstrap, topic_a)
    got_b = read_topic(tpc_broker.bootstrap, topic_b)
    assert sorted((m.value or b"").decode() for m in got_a) == sorted(
        f"v{i}" for i in range(20) if i % 2
    )
    assert len(got_b) == 10
    assert all(m.partition == int((m.key or b"k0")[1:]) % 3 for m in got_a + got_b)


def test_sink_refuses_a_query_without_value_or_topic(spark: Any, tpc_broker: BrokerProcess) -> None:
    df = spark.createDataFrame([("k",)], "key string")
    with pytest.raises(Exception, match="value"):
        df.write.format("oncelog").option("kafka.bootstrap.servers", tpc_broker.bootstrap).option(
            "topic", "t"
        ).mode("append").save()


def test_stream_stops_at_the_lso_of_an_open_transaction(
    spark: Any, tpc_broker: BrokerProcess, tmp_path: Path
) -> None:
    name = unique_name("lso")
    source_topic = make_topic(tpc_broker.bootstrap, partitions=1, prefix=f"{name}-in")
    sink_topic = make_topic(tpc_broker.bootstrap, partitions=1, prefix=f"{name}-out")
    fill(tpc_broker.bootstrap, source_topic, txns=2)  # 20 committed records
    open_txn = Producer(
        {"bootstrap.servers": tpc_broker.bootstrap, "transactional.id": unique_name("open")}
    )
    after = Producer({"bootstrap.servers": tpc_broker.bootstrap})

    def run() -> list[bytes]:
        query = (
            spark.readStream.format("oncelog")
            .option("kafka.bootstrap.servers", tpc_broker.bootstrap)
            .option("subscribePattern", f"{name}-in.*")
            .option("startingOffsets", "earliest")
            .load()
            .select("value")
            .writeStream.format("oncelog")
            .option("kafka.bootstrap.servers", tpc_broker.bootstrap)
            .option("topic", sink_topic)
            .option("checkpointLocation", str(tmp_path / "ckpt"))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(120)
        assert query.exception() is None
        return sorted(m.value or b"" for m in read_topic(tpc_broker.bootstrap, sink_topic))

    try:
        open_txn.init_transactions()
        open_txn.begin_transaction()
        open_txn.send(source_topic, b"open")
        open_txn.flush(30)
        after.send(source_topic, b"after the open one").result(30)  # above the LSO
        first = run()
        assert len(first) == 20 and b"open" not in first
        assert b"after the open one" not in first
        open_txn.commit_transaction()
        second = run()  # the same query, from its checkpoint
        assert second == sorted([*first, b"open", b"after the open one"])
    finally:
        open_txn.close()
        after.close()
