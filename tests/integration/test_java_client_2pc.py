"""KIP-939 and Apache Kafka's Java client 4.4 (kafka-clients 4.4.0) against a real
``oncelog serve`` with ``transaction.two.phase.commit.enable=true``.

kafka-clients 4.4.0 cannot run a two-phase-commit transaction on any broker: KafkaProducer
has no ``initTransactions(keepPreparedTxn)``, ``prepareTransaction()`` or
``completeTransaction(PreparedTxnState)``, and InitProducerId v6 (the version that carries
``enable2Pc`` and ``keepPreparedTxn``) is ``latestVersionUnstable`` in its message schema, so
the producer sends v5 even with ``transaction.two.phase.commit.enable=true``. What can be
checked is checked here: that such a producer opens an ordinary transaction on oncelog (so a
later client that does send v6 is the first to change it), and that Kafka's own
``PreparedTxnState`` parses and prints the strings oncelog.client stores exactly as
oncelog.client does ("producerId:epoch"), so a state stored by one is read by the other.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from java_txn import (
    NO_TIMEOUT_MS,
    TxnClientProcess,
    line_with,
    run_txn_client,
    two_pc_broker,
)

from oncelog.client import Admin, PreparedTxnState, Producer
from oncelog.harness.broker import BrokerProcess
from tests.support.names import unique_name, unique_topic

pytestmark = pytest.mark.integration

@pytest.fixture(scope="module")
def tpc_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    yield from two_pc_broker(tmp_path_factory, "java-2pc")


def test_java_4_4_with_two_phase_commit_config_opens_an_ordinary_transaction(
    tpc_broker: BrokerProcess,
) -> None:
    bootstrap = tpc_broker.bootstrap
    topic = unique_topic("java-2pc")
    txn_id = unique_name("java-2pc")
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topic(topic, 1)
        java = TxnClientProcess("open", bootstrap, {
            "transactionalId": txn_id, "twoPhaseCommit": True, "records": [[topic, 0, "a"]],
        })
        try:
            assert java.next_line()["open"] == txn_id
            described = admin.describe_transactions([txn_id])[txn_id]
        finally:
            assert java.kill() == -9
    assert described.state == "Ongoing"
    # Not a 2PC transaction: the producer's own transaction.timeout.ms (60 s), which the
    # coordinator will enforce, where a 2PC one is described with no timeout.
    assert described.timeout_ms == 60_000 != NO_TIMEOUT_MS


def test_prepared_txn_state_strings_are_the_same_in_both_clients(
    tpc_broker: BrokerProcess,
) -> None:
    bootstrap = tpc_broker.bootstrap
    topic = unique_topic("java-2pc")
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topic(topic, 1)
    producer = Producer({"bootstrap.servers": bootstrap,
                         "transactional.id": unique_name("oncelog-2pc"),
                         "transaction.two.phase.commit.enable": True})
    try:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(topic, b"x", partition=0)
        prepared = str(producer.prepare_transaction())
        producer.complete_transaction(prepared)
    finally:
        producer.close()

    texts = [prepared, "", "3:0", "42:32767", "9223372036854775807:7"]
    lines = run_txn_client("states", bootstrap, {"states": texts})
    java = {s["input"]: s for s in line_with(lines, "states")["states"]}
    for text in texts:
        mine = PreparedTxnState(text)
        theirs = java[text]
        assert "error" not in theirs, theirs
        assert theirs["string"] == str(mine) == text
        assert (theirs["producerId"], theirs["epoch"]) == (mine.producer_id, mine.epoch)
        assert theirs["hasTransaction"] == mine.has_transaction
