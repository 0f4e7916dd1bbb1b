"""The sink's building blocks, below its Spark callbacks: what it sends and whom it asks.

The task-to-driver message (``SinkCommitMessage``) and the error that makes a micro-batch run
again; the checks of the sink's schema and the query id kept in the checkpoint; rows out of
Arrow batches and their sending as Spark's Kafka sink does (``RowSender``); and a query's
transactional clients (``TxnClients``): its transactional ids, producers with two-phase
commit, progress reads, fencing aborts and the listing of its open transactions. The
protocol that uses them (who prepares, who completes, when to abort) is in ``writer.py``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from pyspark.sql.datasource import WriterCommitMessage
from pyspark.sql.types import StructType

from oncelog.client import Admin, Consumer, Producer, TopicPartition
from oncelog.client.errors import KafkaClientError
from oncelog.spark.options import OptionError, SinkOptions
from oncelog.spark.progress import (
    PROGRESS_TOPIC,
    Progress,
    progress_group,
    query_id_from_metadata,
    transactional_id,
    txn_id_partition,
)

__all__ = [
    "RowSender",
    "SinkCommitError",
    "SinkCommitMessage",
    "TxnClients",
    "arrow_rows",
    "check_sink_schema",
    "query_id_of_checkpoint",
]


class SinkCommitError(RuntimeError):
    """A prepared transaction could not be committed; the micro-batch must run again."""


@dataclass(frozen=True)
class SinkCommitMessage(WriterCommitMessage):
    """What a task tells the driver. ``state`` is the prepared transaction's
    ``PreparedTxnState`` text, empty when there is nothing to complete (no rows, at-least-once,
    or ``skipped`` because the progress shows this batch committed)."""

    partition: int
    batch_id: int
    transactional_id: str | None
    state: str
    records: int
    skipped: bool = False


def check_sink_schema(schema: StructType, options: SinkOptions) -> None:
    """The columns Spark's Kafka sink takes: value (required), key, topic, partition,
    headers; a topic column or the ``topic`` option."""
    names = {f.name.lower(): f for f in schema.fields}
    if "value" not in names:
        raise OptionError("the sink needs a 'value' column (string or binary)")
    for name in ("key", "value"):
        if name in names and names[name].dataType.typeName() not in ("string", "binary"):
            raise OptionError(
                f"column {name!r} must be string or binary, "
                f"not {names[name].dataType.simpleString()}"
            )
    if "topic" not in names and not options.topic:
        raise OptionError("the sink needs the 'topic' option or a 'topic' column")
    if "partition" in names and names["partition"].dataType.typeName() not in (
        "integer",
        "long",
        "short",
        "byte",
    ):
        raise OptionError("column 'partition' must be an integer")


def query_id_of_checkpoint(location: str) -> str:
    """The query id kept in ``<checkpoint>/metadata`` (a local path or file: URI)."""
    parsed = urlparse(location)
    if parsed.scheme not in ("", "file"):
        raise OptionError(
            f"cannot read the query id from checkpoint {location!r} (not a local file "
            "system); set the option oncelog.query.id to a stable id for this query"
        )
    path = Path(parsed.path if parsed.scheme else location) / "metadata"
    return query_id_from_metadata(path.read_text(encoding="utf-8"))


def arrow_rows(batches: Iterator[Any]) -> Iterator[dict[str, Any]]:
    """Rows of Arrow record batches as dicts with lower-case column names."""
    for batch in batches:
        names = [n.lower() for n in batch.schema.names]
        columns = [column.to_pylist() for column in batch.columns]
        for i in range(batch.num_rows):
            yield {name: column[i] for name, column in zip(names, columns, strict=True)}


class RowSender:
    """Sends rows as Spark's Kafka sink does; remembers the first delivery error."""

    def __init__(self, producer: Producer, topic: str | None) -> None:
        self.producer = producer
        self.topic = topic
        self.count = 0
        self.error: KafkaClientError | None = None

    def _on_delivery(self, error: KafkaClientError | None, _: Any) -> None:
        if error is not None and self.error is None:
            self.error = error

    def send(self, row: dict[str, Any]) -> None:
        topic = self.topic or row.get("topic")
        if not topic:
            raise ValueError("a row has no topic (set the 'topic' option or column)")
        headers = row.get("headers")
        self.producer.send(
            topic,
            row.get("value"),
            key=row.get("key"),
            partition=row.get("partition"),
            headers=[(h["key"], h["value"]) for h in headers] if headers else None,
            on_delivery=self._on_delivery,
        )
        self.count += 1

    def check(self) -> None:
        if self.error is not None:
            raise self.error


class TxnClients:
    """Producers and progress reads of one query's transactional ids."""

    def __init__(self, options: SinkOptions, query_id: str) -> None:
        self.options = options
        self.query_id = query_id

    def txn_id(self, partition: int) -> str:
        return transactional_id(self.options.txn_id_prefix, self.query_id, partition)

    def producer(self, txn_id: str) -> Producer:
        config: dict[str, Any] = dict(self.options.kafka)
        config["transactional.id"] = txn_id
        config["transaction.two.phase.commit.enable"] = True
        return Producer(config)

    def progress(self, partition: int) -> Progress | None:
        """The partition's committed progress (waits while its own transaction is open)."""
        config: dict[str, Any] = {
            **self.options.kafka,
            "group.id": progress_group(self.options.txn_id_prefix, self.query_id),
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
        key = TopicPartition(PROGRESS_TOPIC, partition)
        with Consumer(config) as consumer:
            committed = consumer.committed([key]).get(key)
        if committed is None:
            return None
        return Progress.parse(
            committed.offset, committed.metadata, query_id=self.query_id, partition=partition
        )

    def abort_open(self, txn_id: str) -> None:
        """InitProducerId without keep_prepared_txn: fences the id and aborts its open
        (even prepared) transaction."""
        producer = self.producer(txn_id)
        try:
            producer.init_transactions()
        finally:
            producer.close()

    def open_transactions(self) -> list[str]:
        """This query's transactional ids whose transaction is open."""
        with Admin(dict(self.options.kafka)) as admin:
            listed = admin.list_transactions()
        return sorted(
            t.transactional_id
            for t in listed
            if t.state == "Ongoing"
            and txn_id_partition(self.options.txn_id_prefix, self.query_id, t.transactional_id)
            is not None
        )
