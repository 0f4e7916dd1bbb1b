"""``oncelog txn`` against real brokers, run as a subprocess the way an operator runs it:
list/describe (normal and prepared 2PC transactions), find-hanging, abort, force-terminate,
error exits; and WriteTxnMarkers from clients (ABORT written, COMMIT refused)."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import pytest

from oncelog.client import Admin, Consumer, Producer, TopicPartition
from oncelog.client.aio.client import KafkaClient
from oncelog.client.config import ClientConfig
from oncelog.client.errors import UnknownTopicOrPartitionError
from oncelog.client.types import Message
from oncelog.client.wire import nested, request
from oncelog.errors import ErrorCode
from oncelog.harness.broker import REPO_ROOT, BrokerProcess
from oncelog.harness.net import free_port
from oncelog.protocol import versions as api
from tests.support.names import unique_name, unique_topic

BrokerFactory = Callable[..., BrokerProcess]
TWO_PC = {"transaction.two.phase.commit.enable": True}


def run_cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [sys.executable, "-m", "oncelog.cli.main", *args],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=timeout, check=False,
    )
    assert "Traceback" not in result.stderr, result.stderr
    return result


def txn_cli(broker: BrokerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli("txn", *args, "--bootstrap-server", broker.bootstrap)


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, (result.stdout, result.stderr)
    return result.stdout


def table(stdout: str) -> list[dict[str, str]]:
    """Rows of the table that opens ``stdout`` (header line first, blank line ends it)."""
    lines = stdout.splitlines()
    headers = lines[0].split()
    rows = []
    for line in lines[1:]:
        if not line.strip():
            break
        cells = line.split()
        assert len(cells) == len(headers), line
        rows.append(dict(zip(headers, cells, strict=True)))
    return rows


def make_topic(bootstrap: str, partitions: int = 1) -> str:
    topic = unique_topic("cli")
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topic(topic, partitions)
    return topic


def open_transaction(
    bootstrap: str, topic: str, txn_id: str, values: list[bytes], **extra: object
) -> Producer:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id, **extra})
    producer.init_transactions()
    producer.begin_transaction()
    for value in values:
        producer.send(topic, value, partition=0)
    producer.flush()
    return producer


def read_committed(bootstrap: str, topic: str, settle: float = 1.0) -> list[Message]:
    got: list[Message] = []
    config = {"bootstrap.servers": bootstrap, "auto.offset.reset": "earliest",
              "isolation.level": "read_committed"}
    with Consumer(config) as consumer:
        consumer.assign([TopicPartition(topic, 0)])
        quiet_until = time.monotonic() + settle
        while time.monotonic() < quiet_until:
            batch = consumer.poll(0.2)
            if batch:
                got.extend(batch)
                quiet_until = time.monotonic() + settle
    return got


def producers_on(bootstrap: str, topic: str) -> list[Any]:
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        tp = TopicPartition(topic, 0)
        return admin.describe_producers([tp])[tp]


# ------------------------------------------------------------------ list / describe / 2PC


def test_list_describe_and_force_terminate_normal_and_2pc(broker_factory: BrokerFactory) -> None:
    broker = broker_factory(configs=TWO_PC)
    topic = make_topic(broker.bootstrap)
    plain_id, tpc_id = unique_name("plain"), unique_name("tpc")
    plain = open_transaction(broker.bootstrap, topic, plain_id, [b"p1"])
    tpc = open_transaction(broker.bootstrap, topic, tpc_id, [b"t1"], **TWO_PC)
    try:
        tpc.prepare_transaction()
        time.sleep(0.05)

        rows = {r["TransactionalId"]: r for r in table(ok(txn_cli(broker, "list")))}
        assert rows[plain_id]["TransactionState"] == "Ongoing"
        assert rows[plain_id]["TwoPhaseCommit"] == "false"
        assert rows[tpc_id]["TransactionState"] == "Ongoing"
        assert rows[tpc_id]["TwoPhaseCommit"] == "true"
        assert rows[plain_id]["Coordinator"] == "1"
        # Filters are the broker's (ListTransactions).
        plain_pid = rows[plain_id]["ProducerId"]
        only = table(ok(txn_cli(broker, "list", "--producer-id", plain_pid)))
        assert [r["TransactionalId"] for r in only] == [plain_id]
        assert table(ok(txn_cli(broker, "list", "--state", "CompleteCommit"))) == []
        assert table(ok(txn_cli(broker, "list", "--duration-filter-ms", "3600000"))) == []

        described = table(ok(txn_cli(broker, "describe", plain_id)))[0]
        assert described["TransactionalId"] == plain_id
        assert described["CoordinatorId"] == "1"
        assert described["TransactionState"] == "Ongoing"
        assert described["TopicPartitions"] == f"{topic}-0"
        assert described["TransactionTimeoutMs"] == "60000"
        assert described["TwoPhaseCommit"] == "false"
        assert int(described["TransactionDurationMs"]) >= 0
        assert int(described["CurrentTransactionStartTimeMs"]) > 0

        out = ok(txn_cli(broker, "describe", "--transactional-id", tpc_id))
        described = table(out)[0]
        assert described["TransactionTimeoutMs"] == str(2**31 - 1)
        assert described["TwoPhaseCommit"] == "true"
        assert "two-phase-commit" in out and "force-terminate" in out

        # A normal open transaction is not hanging: its coordinator will write the marker,
        # even though DescribeProducers shows it open (and older than 0 minutes).
        assert any(p.current_txn_start_offset >= 0 for p in producers_on(broker.bootstrap, topic))
        hanging = ok(txn_cli(broker, "find-hanging", "--topic", topic,
                             "--max-transaction-timeout", "0"))
        assert table(hanging) == []

        out = ok(txn_cli(broker, "force-terminate", tpc_id))
        assert "two-phase-commit" in out
        deadline = time.monotonic() + 15
        while table(ok(txn_cli(broker, "describe", tpc_id)))[0]["TransactionState"] not in (
            "CompleteAbort", "Empty",
        ):
            assert time.monotonic() < deadline, "force-terminate did not abort"
            time.sleep(0.2)
        plain.commit_transaction()
        assert [m.value for m in read_committed(broker.bootstrap, topic)] == [b"p1"]
    finally:
        plain.close()
        tpc.close()


# ------------------------------------------------------------------ hanging transactions


def test_find_hanging_then_abort_lets_read_committed_readers_proceed(
    broker_factory: BrokerFactory,
) -> None:
    """A real hanging transaction: records of an open transaction on a partition whose
    coordinator has lost it (its ``__transaction_state`` is gone), so no marker will come."""
    broker = broker_factory()
    topic = make_topic(broker.bootstrap)
    group = unique_name("lostgroup")
    producer = open_transaction(broker.bootstrap, topic, unique_name("lost"), [b"a", b"b"])
    producer.send_offsets_to_transaction({TopicPartition(topic, 0): 2}, group)
    producer.close()
    broker.stop()
    for directory in broker.data_dir.glob("__transaction_state-*"):
        shutil.rmtree(directory)
    broker.start()

    with Producer({"bootstrap.servers": broker.bootstrap}) as plain:
        plain.send(topic, b"after", partition=0).result(10)
    assert read_committed(broker.bootstrap, topic, settle=0.5) == []  # held at the LSO
    time.sleep(0.05)

    for scope in (["--topic", topic], ["--topic", topic, "--partition", "0"],
                  ["--broker-id", "1"]):
        rows = table(ok(txn_cli(broker, "find-hanging", *scope,
                                "--max-transaction-timeout", "0")))
        mine = [r for r in rows if r["Topic"] == topic]
        assert len(mine) == 1, (scope, rows)
    hanging = mine[0]
    assert hanging["Partition"] == "0" and hanging["StartOffset"] == "0"
    # With Kafka's default limit (15 minutes) a fresh transaction is not a candidate.
    assert table(ok(txn_cli(broker, "find-hanging", "--topic", topic))) == []

    out = ok(txn_cli(broker, "abort", "--topic", topic, "--partition", "0",
                     "--start-offset", hanging["StartOffset"]))
    assert "ABORT marker written" in out
    # The transaction's offset commit hangs too, on its __consumer_offsets partition.
    rows = table(ok(txn_cli(broker, "find-hanging", "--broker-id", "1",
                            "--max-transaction-timeout", "0")))
    (offsets_row,) = [r for r in rows if r["Topic"] == "__consumer_offsets"]
    ok(txn_cli(broker, "abort", "--topic", "__consumer_offsets",
               "--partition", offsets_row["Partition"],
               "--producer-id", offsets_row["ProducerId"],
               "--producer-epoch", offsets_row["ProducerEpoch"],
               "--coordinator-epoch", offsets_row["CoordinatorEpoch"]))
    # The group coordinator dropped the pending offsets: nothing committed, nothing unstable.
    with Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                   "default.api.timeout.ms": 5000}) as consumer:
        assert consumer.committed([TopicPartition(topic, 0)]) == {TopicPartition(topic, 0): None}
    assert [m.value for m in read_committed(broker.bootstrap, topic)] == [b"after"]
    assert table(ok(txn_cli(broker, "find-hanging", "--topic", topic,
                            "--max-transaction-timeout", "0"))) == []
    assert all(p.current_txn_start_offset == -1 for p in producers_on(broker.bootstrap, topic))
    # Nothing is left open at that offset any more.
    again = txn_cli(broker, "abort", "--topic", topic, "--partition", "0", "--start-offset", "0")
    assert again.returncode == 1 and "no open transaction starts at offset 0" in again.stderr


def test_abort_by_producer_id_checks_the_epoch(broker_factory: BrokerFactory) -> None:
    broker = broker_factory()
    topic = make_topic(broker.bootstrap)
    txn_id = unique_name("epoch")
    first = open_transaction(broker.bootstrap, topic, txn_id, [b"x"])
    first.abort_transaction()
    first.close()
    producer = open_transaction(broker.bootstrap, topic, txn_id, [b"y"])  # a bumped epoch
    try:
        state = next(p for p in producers_on(broker.bootstrap, topic)
                     if p.current_txn_start_offset >= 0)
        assert state.producer_epoch >= 1
        stale = txn_cli(broker, "abort", "--topic", topic, "--partition", "0",
                        "--producer-id", str(state.producer_id),
                        "--producer-epoch", str(state.producer_epoch - 1),
                        "--coordinator-epoch", "0")
        assert stale.returncode == 1 and "INVALID_PRODUCER_EPOCH" in stale.stderr
        missing = txn_cli(broker, "abort", "--topic", topic, "--partition", "0",
                          "--producer-id", str(state.producer_id))
        assert missing.returncode == 2 and "--producer-epoch" in missing.stderr
        ok(txn_cli(broker, "abort", "--topic", topic, "--partition", "0",
                   "--producer-id", str(state.producer_id),
                   "--producer-epoch", str(state.producer_epoch),
                   "--coordinator-epoch", str(state.coordinator_epoch)))
        assert all(p.current_txn_start_offset == -1
                   for p in producers_on(broker.bootstrap, topic))
    finally:
        producer.close()


def _write_markers(bootstrap: str, topic: str, producer_id: int, epoch: int,
                   commit: bool) -> ErrorCode:
    async def body() -> ErrorCode:
        client = KafkaClient(ClientConfig({"bootstrap.servers": bootstrap,
                                           "allow.auto.create.topics": False}))
        try:
            await client.refresh_metadata([topic])
            leader = client.leader_for(topic, 0)
            conn = await client.connection(leader if leader >= 0 else -1)  # -1: bootstrap
            v = 1
            marker = nested(
                api.WRITE_TXN_MARKERS, v, "WritableTxnMarker", producer_id=producer_id,
                producer_epoch=epoch, transaction_result=commit, coordinator_epoch=0,
                topics=(nested(api.WRITE_TXN_MARKERS, v, "WritableTxnMarkerTopic",
                               name=topic, partition_indexes=(0,)),),
            )
            response = await conn.send(request(api.WRITE_TXN_MARKERS, v, markers=(marker,)))
            return ErrorCode(response.markers[0].topics[0].partitions[0].error_code)
        finally:
            await client.close()

    return asyncio.run(body())


def test_commit_markers_from_clients_are_refused(broker: BrokerProcess) -> None:
    topic = make_topic(broker.bootstrap)
    producer = open_transaction(broker.bootstrap, topic, unique_name("nocommit"), [b"z"])
    try:
        state = next(p for p in producers_on(broker.bootstrap, topic)
                     if p.current_txn_start_offset >= 0)
        code = _write_markers(broker.bootstrap, topic, state.producer_id, state.producer_epoch,
                              commit=True)
        assert code is ErrorCode.cluster_authorization_failed
        assert read_committed(broker.bootstrap, topic, settle=0.3) == []
        still = next(p for p in producers_on(broker.bootstrap, topic)
                     if p.producer_id == state.producer_id)
        assert still.current_txn_start_offset == state.current_txn_start_offset
        # Unknown partitions get their own error.
        assert _write_markers(broker.bootstrap, unique_topic("absent"), 1, 0,
                              commit=False) is ErrorCode.unknown_topic_or_partition
    finally:
        producer.close()


# ------------------------------------------------------------------ errors


def test_error_exits(broker: BrokerProcess) -> None:
    dead = f"127.0.0.1:{free_port()}"
    for args in (["txn", "list"], ["txn", "describe", "x"], ["topics", "list"]):
        result = run_cli(*args, "--bootstrap-server", dead)
        assert result.returncode == 1, result
        assert "cannot reach" in result.stderr
    bad = run_cli("txn", "list", "--bootstrap-server", "no-port-here")
    assert bad.returncode == 2 and "expected HOST:PORT" in bad.stderr

    unknown = unique_name("unknown")
    for command in ("describe", "force-terminate"):
        result = txn_cli(broker, command, unknown)
        assert result.returncode == 1 and "not known" in result.stderr, result
    # force-terminate of an unknown id did not create it.
    assert table(ok(txn_cli(broker, "list"))) == []

    usage = txn_cli(broker, "find-hanging")
    assert usage.returncode == 2 and "--topic or --broker-id" in usage.stderr
    missing = txn_cli(broker, "find-hanging", "--topic", unique_topic("absent"))
    assert missing.returncode == 1 and "does not exist" in missing.stderr
    no_txn = txn_cli(broker, "abort", "--topic", unique_topic("absent"), "--partition", "0",
                     "--producer-id", "1", "--producer-epoch", "0", "--coordinator-epoch", "0")
    assert no_txn.returncode == 1 and "UNKNOWN_TOPIC_OR_PARTITION" in no_txn.stderr
    neither = txn_cli(broker, "abort", "--topic", "t", "--partition", "0")
    assert neither.returncode == 2

    # Admin.abort_transaction with the client's defaults (auto-creation allowed) neither
    # creates a missing topic nor writes anything.
    absent = unique_topic("absent")
    with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
        with pytest.raises(UnknownTopicOrPartitionError):
            admin.abort_transaction(TopicPartition(absent, 0), 1, 0, 0)
        with pytest.raises(UnknownTopicOrPartitionError):
            admin.describe_topics([absent])
        assert absent not in admin.list_topics()


@pytest.mark.parametrize("command", [["txn"], ["txn", "describe", "--help"]])
def test_usage(command: list[str]) -> None:
    result = run_cli(*command)
    assert result.returncode in (0, 2)
    assert "usage:" in (result.stdout + result.stderr)
