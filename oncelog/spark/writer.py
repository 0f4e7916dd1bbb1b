"""The sink: an exactly-once streaming writer (KIP-939 two-phase commit) and a batch writer.

Streaming, exactly once per (query, micro-batch), for a query with a checkpoint:

1. Planning a micro-batch (driver, before its tasks run): every transaction of this query
   still open — left in doubt by a run that died, or by a zombie task — is aborted
   (``resolve_in_doubt``), so that the output's LSO moves on and no task meets it.
2. Each task (executor), for Spark partition ``p`` of micro-batch ``b``: opens a producer
   with transactional id ``{prefix}-{query id}-{p}`` and calls InitProducerId, which fences
   every earlier attempt of that partition and aborts its open transaction; reads ``p``'s
   progress (see ``progress.py``) and, if batch ``b`` is already committed there, returns a
   "skipped" message without writing; otherwise produces its rows, records ``b`` as its
   progress in the same transaction, prepares it (KIP-939) and returns the
   ``PreparedTxnState`` in its commit message. A task with no rows writes nothing.
3. ``commit(messages, b)`` (driver): for each prepared transaction, a producer with the same
   id calls InitProducerId with keep_prepared_txn and ``complete_transaction(state)``. When
   the transaction is no longer prepared, the progress tells whether it was committed before
   (a replay: nothing to do) or lost (an error: the batch fails and is run again).
4. ``abort(messages, b)`` aborts the open transactions of partitions ``0..len(messages)-1``
   and any other of the query's, by id (Spark may pass None for failed tasks).

Replays: when the driver dies after the sink's commit but before Spark's commit log, Spark
runs the batch again with the same offsets: every task finds its progress at ``b`` and
skips, and ``commit`` has nothing left to complete. When it dies in the middle of ``commit``,
the replay skips the partitions completed before and writes the others again.

Limits: exactly-once needs the same rows in the same Spark partition when a batch is run
again (true for Spark's shuffle partitions and a deterministic query; not for a query that
repartitions randomly or reads a non-deterministic source); consumers of the output must
read read_committed (read_uncommitted sees aborted attempts); the broker must allow
two-phase commit (``transaction.two.phase.commit.enable=true``); the query id comes from the
checkpoint's ``metadata`` file on a local file system (or ``oncelog.query.id``).

Batch (``df.write``): one transaction per task, committed by the task; a task retry fences
and aborts the failed attempt. A failed job can leave the committed output of its tasks
that succeeded, as Spark's Kafka sink does.

This module owns the protocol above: Spark's writer callbacks (``write`` on executors,
``commit`` / ``abort`` on the driver) and the decisions in them. The pieces they use — the
commit message, row sending, a query's transactional clients and progress reads — are in
``sink.py``.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from oncelog.client import OffsetAndMetadata, PreparedTxnState, Producer, TopicPartition
from oncelog.client.errors import KafkaClientError
from oncelog.spark.faults import crash_point, fail_point
from oncelog.spark.options import DELIVERY_EXACTLY_ONCE, OptionError, SinkOptions
from oncelog.spark.progress import PROGRESS_TOPIC, Progress, progress_group
from oncelog.spark.sink import (
    RowSender,
    SinkCommitError,
    SinkCommitMessage,
    TxnClients,
    arrow_rows,
    check_sink_schema,
    query_id_of_checkpoint,
)

log = logging.getLogger(__name__)

__all__ = [
    "OncelogBatchWriter",
    "OncelogStreamWriter",
    "SinkCommitError",
    "SinkCommitMessage",
    "check_sink_schema",
    "query_id_of_checkpoint",
]

_COMPLETE_THREADS = 8


def _task_context() -> tuple[int, int, int | None, str | None]:
    """(partition id, attempt number, micro-batch id, query id) of the running task."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    if ctx is None:
        raise RuntimeError("the oncelog sink's write() must run in a Spark task")
    batch = ctx.getLocalProperty("streaming.sql.batchId")
    return (
        ctx.partitionId(),
        ctx.attemptNumber(),
        int(batch) if batch is not None else None,
        ctx.getLocalProperty("sql.streaming.queryId"),
    )


class OncelogStreamWriter(DataSourceStreamArrowWriter):
    """The streaming sink; exactly once unless ``oncelog.delivery=at_least_once``."""

    def __init__(self, options: SinkOptions, schema: StructType, *, planning: bool) -> None:
        check_sink_schema(schema, options)
        self.options = options
        self.exactly_once = options.delivery == DELIVERY_EXACTLY_ONCE
        self.query_id: str | None = None
        if self.exactly_once:
            self.query_id = self._resolve_query_id()
            if planning:
                self.resolve_in_doubt()

    def _resolve_query_id(self) -> str:
        if self.options.query_id:
            return self.options.query_id
        if not self.options.checkpoint_location:
            raise OptionError(
                "the exactly-once oncelog sink needs the checkpointLocation option of "
                "writeStream (or the option oncelog.query.id)"
            )
        return query_id_of_checkpoint(self.options.checkpoint_location)

    def _clients(self) -> TxnClients:
        assert self.query_id is not None
        return TxnClients(self.options, self.query_id)

    # ------------------------------------------------------------------ driver: planning

    def resolve_in_doubt(self) -> list[str]:
        """Abort this query's open transactions (before a micro-batch's tasks run)."""
        clients = self._clients()
        found = clients.open_transactions()
        for txn_id in found:
            log.warning(
                "query %s: aborting in-doubt transaction %s left by an earlier run",
                self.query_id,
                txn_id,
            )
            clients.abort_open(txn_id)
        return found

    # ------------------------------------------------------------------ executors

    def write(self, iterator: Iterator[Any]) -> SinkCommitMessage:
        partition, attempt, batch_id, task_query_id = _task_context()
        if batch_id is None:
            raise RuntimeError("no micro-batch id in the task's properties")
        if not self.exactly_once:
            return self._write_at_least_once(iterator, partition, batch_id)
        assert self.query_id is not None
        if task_query_id and not self.options.query_id and task_query_id != self.query_id:
            raise RuntimeError(
                f"the task runs query {task_query_id}, the checkpoint says {self.query_id}"
            )
        rows = arrow_rows(iterator)
        first = next(rows, None)
        if first is None:
            return SinkCommitMessage(partition, batch_id, None, "", 0)
        clients = self._clients()
        txn_id = clients.txn_id(partition)
        producer = clients.producer(txn_id)
        try:
            producer.init_transactions()  # fences earlier attempts, aborts their transaction
            progress = clients.progress(partition)
            if progress is not None and progress.covers(batch_id):
                log.info(
                    "%s: batch %d already committed (progress %d): skipping",
                    txn_id,
                    batch_id,
                    progress.batch_id,
                )
                return SinkCommitMessage(partition, batch_id, txn_id, "", 0, skipped=True)
            producer.begin_transaction()
            sender = RowSender(producer, self.options.topic)
            sender.send(first)
            if _faults_wanted():
                producer.flush(30)
                crash_point("task.write", batch_id, partition)
                fail_point("task.write", batch_id, partition, attempt)
            for row in rows:
                sender.send(row)
            mark = Progress(batch_id, self.query_id, partition)
            producer.send_offsets_to_transaction(
                {
                    TopicPartition(PROGRESS_TOPIC, partition): OffsetAndMetadata(
                        mark.offset(), mark.metadata()
                    )
                },
                progress_group(self.options.txn_id_prefix, self.query_id),
            )
            state = producer.prepare_transaction()
            sender.check()
            crash_point("task.prepared", batch_id, partition)
            fail_point("task.prepared", batch_id, partition, attempt)
            log.info(
                "%s: batch %d prepared %d records as %s", txn_id, batch_id, sender.count, state
            )
            return SinkCommitMessage(partition, batch_id, txn_id, str(state), sender.count)
        finally:
            producer.close()

    def _write_at_least_once(
        self, iterator: Iterator[Any], partition: int, batch_id: int
    ) -> SinkCommitMessage:
        producer = Producer(dict(self.options.kafka))
        try:
            sender = RowSender(producer, self.options.topic)
            for row in arrow_rows(iterator):
                sender.send(row)
            if producer.flush(120):
                raise RuntimeError("records not acknowledged within 120 s")
            sender.check()
            return SinkCommitMessage(partition, batch_id, None, "", sender.count)
        finally:
            producer.close()

    # ------------------------------------------------------------------ driver: commit

    def commit(self, messages: Sequence[WriterCommitMessage | None], batchId: int) -> None:
        if not self.exactly_once:
            return
        crash_point("commit.start", batchId)
        todo = [m for m in messages if isinstance(m, SinkCommitMessage) and m.state]
        skipped = sum(1 for m in messages if isinstance(m, SinkCommitMessage) and m.skipped)
        if todo:
            self._complete(todo[0], batchId)
            if len(todo) > 1:
                crash_point("commit.after_first", batchId)
                with ThreadPoolExecutor(min(_COMPLETE_THREADS, len(todo) - 1)) as pool:
                    for future in [pool.submit(self._complete, m, batchId) for m in todo[1:]]:
                        future.result()
        log.info(
            "query %s batch %d: committed %d transactions (%d records), %d partitions "
            "skipped as already committed",
            self.query_id,
            batchId,
            len(todo),
            sum(m.records for m in todo),
            skipped,
        )
        crash_point("commit.done", batchId)

    def _complete(self, message: SinkCommitMessage, batch_id: int) -> None:
        assert message.transactional_id is not None
        clients = self._clients()
        state = PreparedTxnState(message.state)
        producer = clients.producer(message.transactional_id)
        try:
            producer.init_transactions(keep_prepared_txn=True)
            if producer.prepared_state == state:
                producer.complete_transaction(state)
                return
            if producer.prepared_state is not None and producer.prepared_state.has_transaction:
                # Somebody else's prepared transaction (a zombie attempt): not ours to commit.
                producer.complete_transaction(state)  # a mismatch aborts it
        finally:
            producer.close()
        progress = clients.progress(message.partition)
        if progress is not None and progress.covers(batch_id):
            log.info(
                "%s: batch %d was committed before (replay)", message.transactional_id, batch_id
            )
            return
        raise SinkCommitError(
            f"{message.transactional_id}: prepared transaction {state} of batch {batch_id} is "
            f"gone and its progress is {progress}; the batch must run again"
        )

    def abort(self, messages: Sequence[WriterCommitMessage | None], batchId: int) -> None:
        if not self.exactly_once:
            return
        clients = self._clients()
        ids = {clients.txn_id(p) for p in range(len(messages))}
        ids.update(clients.open_transactions())
        log.warning(
            "query %s batch %d failed: aborting the open transactions of %d ids",
            self.query_id,
            batchId,
            len(ids),
        )
        with ThreadPoolExecutor(_COMPLETE_THREADS) as pool:
            for future in [pool.submit(clients.abort_open, t) for t in sorted(ids)]:
                future.result()


def _faults_wanted() -> bool:
    import os

    return bool(os.environ.get("ONCELOG_SPARK_CRASH_AT") or os.environ.get("ONCELOG_SPARK_FAIL_AT"))


class OncelogBatchWriter(DataSourceArrowWriter):
    """``df.write``: one transaction per task (or plain at-least-once sends)."""

    def __init__(self, options: SinkOptions, schema: StructType) -> None:
        check_sink_schema(schema, options)
        self.options = options
        self.write_id = uuid.uuid4().hex
        self.transactional = options.delivery == DELIVERY_EXACTLY_ONCE

    def _txn_id(self, partition: int) -> str:
        return f"{self.options.txn_id_prefix}-write-{self.write_id}-{partition}"

    def write(self, iterator: Iterator[Any]) -> SinkCommitMessage:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        partition = ctx.partitionId() if ctx is not None else 0
        config: dict[str, Any] = dict(self.options.kafka)
        txn_id = self._txn_id(partition) if self.transactional else None
        if txn_id is not None:
            config["transactional.id"] = txn_id
        producer = Producer(config)
        try:
            sender = RowSender(producer, self.options.topic)
            if txn_id is not None:
                producer.init_transactions()
                producer.begin_transaction()
            for row in arrow_rows(iterator):
                sender.send(row)
            if txn_id is not None:
                producer.commit_transaction()
            elif producer.flush(120):
                raise RuntimeError("records not acknowledged within 120 s")
            sender.check()
            return SinkCommitMessage(partition, -1, txn_id, "", sender.count)
        finally:
            producer.close()

    def commit(self, messages: Sequence[WriterCommitMessage | None]) -> None:
        total = sum(m.records for m in messages if isinstance(m, SinkCommitMessage))
        log.info("write %s: %d records in %d tasks", self.write_id, total, len(messages))

    def abort(self, messages: Sequence[WriterCommitMessage | None]) -> None:
        if not self.transactional:
            return
        for partition in range(len(messages)):
            producer = Producer({**self.options.kafka, "transactional.id": self._txn_id(partition)})
            try:
                producer.init_transactions()  # aborts what a failed task left open
            except KafkaClientError:
                log.exception("write %s: aborting partition %d", self.write_id, partition)
            finally:
                producer.close()
