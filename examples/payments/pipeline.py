"""The payments pipeline on Spark: payment events in, running balances and per-minute totals
out, exactly once through oncelog.

    python -m examples.payments.pipeline --bootstrap localhost:9092 --checkpoint /tmp/payments

Two streaming queries read ``payments`` read_committed:

- ``balances``: a ledger: for every payment, the account's event count and balance after
  it (state per account, ``applyInPandasWithState``), to ``balances`` keyed by account;
- ``minutes``: per event-time minute, the number of events and their total (append mode,
  watermark two minutes), to ``minute-totals`` keyed by the minute.

Each has its own checkpoint under ``--checkpoint``; run the command again after a crash and
each query goes on from its checkpoint. With ``--available-now`` (the default) each query
reads what is in the input now, in micro-batches of at most ``--max-offsets`` offsets, and
stops; ``--continuous`` keeps them running.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from examples.payments.model import WATERMARK_DELAY_MS

log = logging.getLogger(__name__)

__all__ = ["QUERIES", "build_spark", "main", "start_query"]

QUERIES = ("balances", "minutes")
EVENT_SCHEMA = "id string, account string, amount_cents long, ts_ms long"


LEDGER_SCHEMA = "id string, account string, events long, balance_cents long"


def running_balances(key: tuple[Any, ...], frames: Iterator[Any], state: Any) -> Iterator[Any]:
    """One account's new events of a micro-batch -> a ledger row per event. They come from
    one input partition (events are keyed by account), so offset order is input order."""
    import pandas as pd

    (account,) = key
    events, balance = state.get if state.exists else (0, 0)
    batch = pd.concat(list(frames)).sort_values(["partition", "offset"])
    counts = events + pd.RangeIndex(1, len(batch) + 1)
    balances = balance + batch["amount_cents"].cumsum()
    state.update((int(counts[-1]), int(balances.iloc[-1])))
    yield pd.DataFrame(
        {
            "id": batch["id"].to_numpy(),
            "account": account,
            "events": counts.to_numpy(),
            "balance_cents": balances.to_numpy(),
        }
    )


def build_spark(master: str = "local[2]", shuffle_partitions: int = 4) -> Any:
    """A local SparkSession with the ``oncelog`` format registered."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    from oncelog.spark import register

    spark = (
        SparkSession.builder.master(master)
        .appName("oncelog-payments")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.python.worker.reuse", "true")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("WARN")
    register(spark)
    return spark


def _events(spark: Any, bootstrap: str, topic: str, max_offsets: int | None) -> Any:
    from pyspark.sql import functions as F

    reader = (
        spark.readStream.format("oncelog")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
    )
    if max_offsets:
        reader = reader.option("maxOffsetsPerTrigger", str(max_offsets))
    return (
        reader.load()
        .select(
            F.from_json(F.col("value").cast("string"), EVENT_SCHEMA).alias("e"),
            "partition",
            "offset",
        )
        .select("e.*", "partition", "offset")
    )


def start_query(
    spark: Any,
    name: str,
    *,
    bootstrap: str,
    input_topic: str,
    output_topic: str,
    checkpoint: Path,
    available_now: bool = True,
    max_offsets: int | None = None,
    delivery: str = "exactly_once",
) -> Any:
    """Start query ``name`` (``balances`` or ``minutes``); returns the StreamingQuery."""
    from pyspark.sql import functions as F

    events = _events(spark, bootstrap, input_topic, max_offsets)
    if name == "balances":
        from pyspark.sql.streaming.state import GroupStateTimeout

        result = (
            events.groupBy("account")
            .applyInPandasWithState(
                running_balances,
                outputStructType=LEDGER_SCHEMA,
                stateStructType="events long, balance_cents long",
                outputMode="append",
                timeoutConf=GroupStateTimeout.NoTimeout,
            )
            .select(
                F.col("account").alias("key"),
                F.to_json(F.struct("id", "account", "events", "balance_cents")).alias("value"),
            )
        )
        mode = "append"
    elif name == "minutes":
        result = (
            events.withColumn("event_time", F.timestamp_millis("ts_ms"))
            .withWatermark("event_time", f"{WATERMARK_DELAY_MS // 1000} seconds")
            .groupBy(F.window("event_time", "1 minute"))
            .agg(F.count("*").alias("events"), F.sum("amount_cents").alias("total_cents"))
            .select(
                F.unix_millis(F.col("window.start")).alias("minute_ms"), "events", "total_cents"
            )
            .select(
                F.col("minute_ms").cast("string").alias("key"),
                F.to_json(F.struct("minute_ms", "events", "total_cents")).alias("value"),
            )
        )
        mode = "append"
    else:
        raise ValueError(f"unknown query {name!r}; choose from {QUERIES}")
    writer = (
        result.writeStream.queryName(name)
        .format("oncelog")
        .outputMode(mode)
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", output_topic)
        .option("checkpointLocation", str(checkpoint / name))
        .option("oncelog.delivery", delivery)
        .option("oncelog.transactional.id.prefix", f"payments-{name}")
    )
    writer = (
        writer.trigger(availableNow=True)
        if available_now
        else writer.trigger(processingTime="1 second")
    )
    return writer.start()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", default="localhost:9092")
    parser.add_argument("--input", default="payments")
    parser.add_argument("--balances-topic", default="balances")
    parser.add_argument("--minutes-topic", default="minute-totals")
    parser.add_argument("--checkpoint", type=Path, default=Path("/tmp/oncelog-payments"))
    parser.add_argument("--queries", default=",".join(QUERIES))
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--shuffle-partitions", type=int, default=4)
    parser.add_argument(
        "--max-offsets", type=int, default=500, help="maxOffsetsPerTrigger (0: no limit)"
    )
    parser.add_argument(
        "--delivery", default="exactly_once", choices=["exactly_once", "at_least_once"]
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--available-now", dest="available_now", action="store_true", default=True)
    mode.add_argument("--continuous", dest="available_now", action="store_false")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    spark = build_spark(args.master, args.shuffle_partitions)
    outputs = {"balances": args.balances_topic, "minutes": args.minutes_topic}
    names = [n.strip() for n in args.queries.split(",") if n.strip()]
    started = time.monotonic()
    queries = []
    for name in names:
        query = start_query(
            spark,
            name,
            bootstrap=args.bootstrap,
            input_topic=args.input,
            output_topic=outputs[name],
            checkpoint=args.checkpoint,
            available_now=args.available_now,
            max_offsets=args.max_offsets or None,
            delivery=args.delivery,
        )
        if args.available_now:
            query.awaitTermination()  # one query at a time: two cores
            progress = query.recentProgress
            log.info(
                "query %s done: %d micro-batches, %d rows in %.1f s",
                name,
                len(progress),
                sum(int(p["numInputRows"]) for p in progress),
                time.monotonic() - started,
            )
        queries.append(query)
    if not args.available_now:
        spark.streams.awaitAnyTermination()
    spark.stop()


if __name__ == "__main__":
    main()
