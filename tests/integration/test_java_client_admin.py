"""Transaction admin through Apache Kafka's own code against a real ``oncelog serve``: the
Java AdminClient 4.4 (listTransactions, describeTransactions, describeProducers,
abortTransaction, fenceProducers, forceTerminateTransaction; oncelog.harness.AdminProbe) and
``kafka-transactions.sh``'s logic (org.apache.kafka.tools.TransactionsCommand, kafka-tools
4.3.1: list, describe, describe-producers, find-hanging, abort). The transactions are opened
by oncelog.client; the broker allows two-phase commit, so one of them is a 2PC one."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from java_txn import NO_TIMEOUT_MS, two_pc_broker

from oncelog.client import Admin, Producer
from oncelog.harness.broker import BrokerProcess
from tests.support.kafka import run_harness, run_kafka_tool
from tests.support.names import unique_name, unique_topic

pytestmark = pytest.mark.integration

@pytest.fixture(scope="module")
def txn_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    yield from two_pc_broker(tmp_path_factory, "java-admin")


def admin_probe(bootstrap: str, *operations: dict[str, Any]) -> list[dict[str, Any]]:
    done = run_harness("AdminProbe", bootstrap, input=json.dumps(list(operations)))
    assert done.returncode == 0, done.stderr
    outcomes: list[dict[str, Any]] = json.loads(done.stdout.strip().splitlines()[-1])
    return outcomes


def result(outcome: dict[str, Any]) -> Any:
    assert outcome["ok"], outcome
    return outcome["result"]


def open_transaction(bootstrap: str, topic: str, txn_id: str, *, two_pc: bool = False
                     ) -> Producer:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id,
                         "transaction.two.phase.commit.enable": two_pc})
    producer.init_transactions()
    producer.begin_transaction()
    producer.send(topic, b"open", partition=0).result(30)
    return producer


def transactions_command(bootstrap: str, *args: str) -> list[dict[str, str]]:
    """Run kafka-transactions.sh's logic; its table as one dict per row."""
    done = run_kafka_tool("TransactionsCommand", "--bootstrap-server", bootstrap, *args)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = [line.split() for line in done.stdout.splitlines() if line.strip()]
    if not rows:
        return []
    header, *body = rows
    return [dict(zip(header, row, strict=True)) for row in body]


@pytest.fixture
def topic(txn_broker: BrokerProcess) -> str:
    name = unique_topic("java-admin")
    with Admin({"bootstrap.servers": txn_broker.bootstrap}) as admin:
        admin.create_topic(name, 1)
    return name


def test_java_admin_client_transaction_apis(txn_broker: BrokerProcess, topic: str) -> None:
    bootstrap = txn_broker.bootstrap
    plain_id, tpc_id, hang_id = (unique_name(n) for n in ("plain", "tpc", "hang"))
    plain = open_transaction(bootstrap, topic, plain_id)
    tpc = open_transaction(bootstrap, topic, tpc_id, two_pc=True)
    hang = open_transaction(bootstrap, topic, hang_id)
    try:
        tpc.prepare_transaction()
        listed, only, described, producers = admin_probe(
            bootstrap,
            {"op": "listTransactions"},
            {"op": "listTransactions", "producerIds": [plain.producer_id]},
            {"op": "describeTransactions", "ids": [plain_id, tpc_id]},
            {"op": "describeProducers", "partitions": [[topic, 0]]},
        )
        rows = result(listed)
        assert rows[plain_id] == {"producerId": plain.producer_id, "state": "Ongoing"}
        assert rows[tpc_id] == {"producerId": tpc.producer_id, "state": "Ongoing"}
        assert list(result(only)) == [plain_id]
        d = result(described)
        assert d[plain_id]["ok"] and d[tpc_id]["ok"], d
        assert d[plain_id]["value"]["state"] == "Ongoing"
        assert d[plain_id]["value"]["partitions"] == [f"{topic}-0"]
        assert d[plain_id]["value"]["timeoutMs"] == 60_000
        assert d[plain_id]["value"]["coordinatorId"] == 1
        assert d[tpc_id]["value"]["timeoutMs"] == NO_TIMEOUT_MS
        active = result(producers)[f"{topic}-0"]["value"]
        by_pid = {p["producerId"]: p for p in active}
        assert set(by_pid) == {plain.producer_id, tpc.producer_id, hang.producer_id}
        assert by_pid[plain.producer_id]["currentTransactionStartOffset"] == 0
        hang_state = by_pid[hang.producer_id]

        fenced, terminated, aborted, after = admin_probe(
            bootstrap,
            {"op": "fenceProducers", "ids": [plain_id]},
            {"op": "forceTerminateTransaction", "id": tpc_id},
            {"op": "abortTransaction", "topic": topic, "partition": 0,
             "producerId": hang.producer_id, "producerEpoch": hang_state["producerEpoch"],
             "coordinatorEpoch": hang_state["coordinatorEpoch"] or 0},
            {"op": "describeTransactions", "ids": [plain_id, tpc_id]},
        )
        assert result(fenced)[plain_id]["ok"], fenced
        assert result(fenced)[plain_id]["producerId"] == plain.producer_id
        assert result(fenced)[plain_id]["epoch"] > plain.producer_epoch
        assert terminated["ok"], terminated
        assert aborted["ok"], aborted
        # Both are InitProducerId with a bumped epoch (force-terminate with enable2Pc): the
        # open transaction is aborted and the transactional id is left Empty, as in Kafka.
        states = {k: v["value"]["state"] for k, v in result(after).items()}
        assert states == {plain_id: "Empty", tpc_id: "Empty"}
    finally:
        for producer in (plain, tpc, hang):
            producer.close()


def test_kafka_transactions_command(txn_broker: BrokerProcess, topic: str) -> None:
    bootstrap = txn_broker.bootstrap
    txn_id = unique_name("tool")
    producer = open_transaction(bootstrap, topic, txn_id)
    try:
        listed = {r["TransactionalId"]: r for r in transactions_command(bootstrap, "list")}
        assert listed[txn_id]["TransactionState"] == "Ongoing"
        assert listed[txn_id]["ProducerId"] == str(producer.producer_id)
        assert listed[txn_id]["Coordinator"] == "1"

        (described,) = transactions_command(bootstrap, "describe", "--transactional-id", txn_id)
        assert described["TransactionState"] == "Ongoing"
        assert described["ProducerId"] == str(producer.producer_id)
        assert described["TopicPartitions"] == f"{topic}-0"
        assert described["TransactionTimeoutMs"] == "60000"

        (row,) = transactions_command(bootstrap, "describe-producers", "--topic", topic,
                                      "--partition", "0")
        assert row["ProducerId"] == str(producer.producer_id)
        assert row["CurrentTransactionStartOffset"] == "0"

        # Open, but its coordinator knows it: not hanging.
        assert transactions_command(bootstrap, "find-hanging", "--broker-id", "1",
                                    "--max-transaction-timeout", "0") == []

        done = run_kafka_tool("TransactionsCommand", "--bootstrap-server", bootstrap, "abort",
                              "--topic", topic, "--partition", "0", "--start-offset", "0")
        assert done.returncode == 0, done.stdout + done.stderr
        (row,) = transactions_command(bootstrap, "describe-producers", "--topic", topic,
                                      "--partition", "0")
        assert row["CurrentTransactionStartOffset"] == "None"
    finally:
        producer.close()
