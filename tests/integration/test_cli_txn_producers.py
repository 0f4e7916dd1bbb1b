"""``oncelog txn producers`` (kafka-transactions.sh describe-producers) against a real broker:
an idempotent producer and one with an open transaction on the same partition."""

from __future__ import annotations

from oncelog.client import Admin, Producer
from oncelog.harness.broker import BrokerProcess
from tests.support.cli import oncelog_cli as cli
from tests.support.names import unique_name, unique_topic


def test_txn_producers_lists_each_producer_and_its_open_transaction(
    shared_broker: BrokerProcess,
) -> None:
    topic = unique_topic("producers")
    bootstrap = shared_broker.bootstrap
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topic(topic, 1)
    with Producer({"bootstrap.servers": bootstrap}) as plain:
        for value in (b"a", b"b"):
            plain.send(topic, value, partition=0)
        plain.flush()
        plain_id = plain.producer_id
    txn = Producer({"bootstrap.servers": bootstrap, "transactional.id": unique_name("prod")})
    try:
        txn.init_transactions()
        txn.begin_transaction()
        txn.send(topic, b"open", partition=0)
        txn.flush()
        result = cli("txn", "producers", "--bootstrap-server", bootstrap, "--topic", topic,
                     "--partition", "0")
        assert result.returncode == 0, result.stderr
        lines = [line.split() for line in result.stdout.splitlines()]
        assert lines[0] == ["ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch",
                            "LastSequence", "LastTimestamp", "CurrentTransactionStartOffset"]
        rows = {int(row[0]): row for row in lines[1:]}
        assert set(rows) == {plain_id, txn.producer_id}
        assert rows[plain_id][3] == "1" and rows[plain_id][5] == "-1"
        assert rows[txn.producer_id][3] == "0" and rows[txn.producer_id][5] == "2"
        # Kafka's name for the command works too.
        again = cli("txn", "describe-producers", "--bootstrap-server", bootstrap,
                    "--topic", topic, "--partition", "0")
        assert again.returncode == 0 and again.stdout == result.stdout
    finally:
        txn.abort_transaction()
        txn.close()
    missing = cli("txn", "producers", "--bootstrap-server", bootstrap, "--topic", topic,
                  "--partition", "7")
    assert missing.returncode == 1 and missing.stdout == ""
    assert f"partition {topic}-7 does not exist" in missing.stderr
