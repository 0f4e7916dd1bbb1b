"""The exactly-once sink's protocol against a real broker, without a JVM: tasks are played by
calling ``write`` with a fake task context, the driver by ``commit`` / ``abort`` and by a
"planning" writer. Every scenario of a crash is a sequence of these calls."""

from __future__ import annotations

import time
import uuid

import pyarrow as pa
import pytest
from pyspark.sql.types import BinaryType, StringType, StructField, StructType

from oncelog.client import Admin
from oncelog.harness.broker import BrokerProcess
from oncelog.spark import writer as writer_mod
from oncelog.spark.options import SinkOptions
from oncelog.spark.progress import transactional_id
from oncelog.spark.sink import TxnClients
from oncelog.spark.writer import OncelogStreamWriter, SinkCommitError, SinkCommitMessage
from tests.support.names import unique_topic

SCHEMA = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
PREFIX = "sinktest"


class Sink:
    """One streaming query's sink: make writers as Spark would, run tasks by hand."""

    def __init__(self, bootstrap: str, topic: str, monkeypatch: pytest.MonkeyPatch) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.query_id = uuid.uuid4().hex
        self.options = SinkOptions.parse(
            {
                "kafka.bootstrap.servers": bootstrap,
                "topic": topic,
                "oncelog.query.id": self.query_id,
                "oncelog.transactional.id.prefix": PREFIX,
            }
        )
        self.monkeypatch = monkeypatch

    def writer(self, *, planning: bool = False) -> OncelogStreamWriter:
        return OncelogStreamWriter(self.options, SCHEMA, planning=planning)

    def task(
        self, partition: int, batch: int, values: list[str], attempt: int = 0
    ) -> SinkCommitMessage:
        """Run partition ``partition`` of micro-batch ``batch`` on a fresh writer."""
        self.monkeypatch.setattr(
            writer_mod, "_task_context", lambda: (partition, attempt, batch, self.query_id)
        )
        rows = pa.record_batch(
            [pa.array([f"k{partition}" for _ in values]), pa.array([v.encode() for v in values])],
            names=["key", "value"],
        )
        return self.writer().write(iter([rows]))

    def txn_id(self, partition: int) -> str:
        return transactional_id(PREFIX, self.query_id, partition)


@pytest.fixture
def sink(tpc_broker: BrokerProcess, monkeypatch: pytest.MonkeyPatch) -> Sink:
    topic = unique_topic("sink")
    with Admin({"bootstrap.servers": tpc_broker.bootstrap}) as admin:
        admin.create_topic(topic, 2)
    return Sink(tpc_broker.bootstrap, topic, monkeypatch)


def committed_values(bootstrap: str, topic: str) -> list[str]:
    from examples.payments.verify import read_topic

    return sorted((m.value or b"").decode() for m in read_topic(bootstrap, topic, timeout=30))


def open_transactions(bootstrap: str, prefix: str) -> list[str]:
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        return sorted(
            t.transactional_id
            for t in admin.list_transactions()
            if t.state == "Ongoing" and t.transactional_id.startswith(prefix)
        )


def test_batch_commits_once_and_a_replay_skips_every_partition(sink: Sink) -> None:
    messages = [sink.task(0, 0, ["a", "b"]), sink.task(1, 0, ["c"])]
    assert all(m.state and not m.skipped for m in messages)
    # Prepared, not committed: nothing visible yet.
    assert committed_values(sink.bootstrap, sink.topic) == []
    sink.writer().commit(messages, 0)
    assert committed_values(sink.bootstrap, sink.topic) == ["a", "b", "c"]
    # The driver died after the sink's commit, before Spark's commit log: batch 0 again.
    replay = [sink.task(0, 0, ["a", "b"]), sink.task(1, 0, ["c"])]
    assert [m.skipped for m in replay] == [True, True]
    sink.writer().commit(replay, 0)
    # ...and the same commit messages again (commit itself replayed) change nothing either.
    sink.writer().commit(messages, 0)
    assert committed_values(sink.bootstrap, sink.topic) == ["a", "b", "c"]
    # The next batch is written.
    sink.writer().commit([sink.task(0, 1, ["d"]), sink.task(1, 1, [])], 1)
    assert committed_values(sink.bootstrap, sink.topic) == ["a", "b", "c", "d"]


def test_empty_partition_writes_no_transaction(sink: Sink) -> None:
    message = sink.task(0, 0, [])
    assert message == SinkCommitMessage(0, 0, None, "", 0)
    assert open_transactions(sink.bootstrap, sink.txn_id(0)) == []


def test_driver_death_after_prepare_planning_aborts_in_doubt_then_replay_writes(
    sink: Sink,
) -> None:
    sink.task(0, 0, ["lost-a"])
    sink.task(1, 0, ["lost-b"])
    # The driver died: both transactions are prepared and hold the topic's LSO.
    assert open_transactions(sink.bootstrap, f"{PREFIX}-{sink.query_id}") == [
        sink.txn_id(0),
        sink.txn_id(1),
    ]
    # The restarted query plans batch 0 again: the planning writer resolves them first.
    resolved = sink.writer().resolve_in_doubt()
    assert resolved == [sink.txn_id(0), sink.txn_id(1)]
    assert open_transactions(sink.bootstrap, f"{PREFIX}-{sink.query_id}") == []
    messages = [sink.task(0, 0, ["a"]), sink.task(1, 0, ["b"])]
    sink.writer().commit(messages, 0)
    assert committed_values(sink.bootstrap, sink.topic) == ["a", "b"]


def test_driver_death_inside_commit_replay_skips_the_committed_partition(sink: Sink) -> None:
    messages = [sink.task(0, 0, ["a"]), sink.task(1, 0, ["b"])]
    sink.writer()._complete(messages[0], 0)  # then the driver died
    sink.writer(planning=True)  # restart: aborts partition 1's prepared transaction
    assert open_transactions(sink.bootstrap, f"{PREFIX}-{sink.query_id}") == []
    assert committed_values(sink.bootstrap, sink.topic) == ["a"]
    replay = [sink.task(0, 0, ["a"]), sink.task(1, 0, ["b"])]
    assert [m.skipped for m in replay] == [True, False]
    sink.writer().commit(replay, 0)
    assert committed_values(sink.bootstrap, sink.topic) == ["a", "b"]


def test_task_retry_fences_the_failed_attempt(sink: Sink) -> None:
    first = sink.task(0, 0, ["attempt-0"], attempt=0)  # prepared, then the task "failed"
    second = sink.task(0, 0, ["attempt-1"], attempt=1)
    assert first.state != second.state
    sink.writer().commit([second], 0)
    assert committed_values(sink.bootstrap, sink.topic) == ["attempt-1"]


def test_a_stale_commit_message_never_commits_and_is_reported(sink: Sink) -> None:
    stale = sink.task(0, 0, ["old"], attempt=0)
    sink.task(0, 0, ["new"], attempt=1)  # a zombie attempt prepared after Spark's choice
    with pytest.raises(SinkCommitError, match="is gone"):
        sink.writer().commit([stale], 0)
    assert committed_values(sink.bootstrap, sink.topic) == []
    assert open_transactions(sink.bootstrap, sink.txn_id(0)) == []


def test_abort_by_deterministic_ids_with_none_messages(sink: Sink) -> None:
    sink.task(0, 3, ["x"])
    sink.task(1, 3, ["y"])
    sink.writer().abort([None, None], 3)
    assert open_transactions(sink.bootstrap, f"{PREFIX}-{sink.query_id}") == []
    assert committed_values(sink.bootstrap, sink.topic) == []


def test_a_task_does_not_wait_for_another_partitions_in_doubt_transaction(sink: Sink) -> None:
    sink.writer().commit([sink.task(0, 0, ["a"]), sink.task(1, 0, ["b"])], 0)
    sink.task(1, 1, ["in-doubt"])  # prepared and left in doubt
    started = time.monotonic()
    message = sink.task(0, 1, ["c"])  # reads its own progress, writes, prepares
    assert time.monotonic() - started < 10
    assert message.state and not message.skipped
    sink.writer().abort([message, None], 1)


def test_progress_is_invisible_until_commit(sink: Sink) -> None:
    clients = TxnClients(sink.options, sink.query_id)
    message = sink.task(0, 5, ["a"])
    # Partition 0's own transaction is in doubt: its progress read waits, so do it after.
    sink.writer().abort([message], 5)
    assert clients.progress(0) is None
    sink.writer().commit([sink.task(0, 5, ["a"])], 5)
    progress = clients.progress(0)
    assert progress is not None and progress.batch_id == 5


def test_at_least_once_mode_writes_without_transactions(
    tpc_broker: BrokerProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    topic = unique_topic("alo")
    options = SinkOptions.parse(
        {
            "kafka.bootstrap.servers": tpc_broker.bootstrap,
            "topic": topic,
            "oncelog.delivery": "at_least_once",
        }
    )
    writer = OncelogStreamWriter(options, SCHEMA, planning=True)  # needs no query id
    monkeypatch.setattr(writer_mod, "_task_context", lambda: (0, 0, 0, None))
    rows = pa.record_batch([pa.array(["k"]), pa.array([b"v"])], names=["key", "value"])
    message = writer.write(iter([rows]))
    assert message.records == 1 and not message.state
    writer.commit([message], 0)
    assert committed_values(tpc_broker.bootstrap, topic) == ["v"]
