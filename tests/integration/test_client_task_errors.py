"""oncelog.client background tasks against a real ``oncelog serve``: an unexpected exception
inside one fails the records it carried (send futures, on_delivery, flush) instead of dying
as "Task exception was never retrieved" with the futures left pending forever."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from oncelog.client import Admin, Consumer, Message, Producer, TopicPartition, TxnState
from oncelog.client.accumulator import ProducerBatch, RecordAccumulator
from oncelog.client.aio import group as group_module
from oncelog.client.aio.sender import Sender
from oncelog.client.aio.transaction_manager import TransactionManager
from oncelog.client.errors import KafkaClientError, TransactionAbortableError
from oncelog.harness.broker import BrokerProcess
from tests.conftest import BrokerFactory
from tests.support.names import unique_group, unique_name, unique_topic


def _new_topic(broker: BrokerProcess, prefix: str) -> str:
    """A fresh one-partition topic."""
    topic = unique_topic(prefix)
    with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
        admin.create_topic(topic, 1)
    return topic


def test_unexpected_error_in_a_produce_task_fails_its_records(
    shared_broker: BrokerProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    topic = _new_topic(shared_broker, "produce-bug")

    def broken(self: ProducerBatch, compression: int) -> bytes:
        raise RuntimeError("encoder bug")

    reports: list[tuple[KafkaClientError | None, object]] = []
    producer = Producer({"bootstrap.servers": shared_broker.bootstrap})
    try:
        producer.send(topic, b"before").result(30)  # the producer id is known
        monkeypatch.setattr(ProducerBatch, "encode", broken)
        future = producer.send(
            topic, b"lost", on_delivery=lambda err, meta: reports.append((err, meta))
        )
        assert producer.flush(10) == 0  # settled, not left pending
        with pytest.raises(KafkaClientError, match="RuntimeError: encoder bug"):
            future.result(0)
        assert len(reports) == 1 and reports[0][1] is None
        monkeypatch.undo()
        # The producer goes on (with a bumped epoch: the failed batch had a sequence).
        meta = producer.send(topic, b"after").result(30)
        assert meta.offset == 1
    finally:
        producer.close(5)  # bounded: without the fix the lost batch would block close


def test_raising_on_delivery_for_a_refused_send_does_not_stop_the_producer(
    shared_broker: BrokerProcess, caplog: pytest.LogCaptureFixture
) -> None:
    topic = _new_topic(shared_broker, "callback-bug")
    reports: list[KafkaClientError | None] = []

    def raising(err: KafkaClientError | None, meta: object) -> None:
        reports.append(err)
        raise ValueError("user callback bug")

    producer = Producer({"bootstrap.servers": shared_broker.bootstrap})
    try:
        refused = producer.send(topic, b"x", partition=5, on_delivery=raising)
        with pytest.raises(KafkaClientError, match="no partition 5"):
            refused.result(10)
        # The callback raised on the facade's processing task: later sends still go out.
        assert producer.send(topic, b"after").result(10).offset == 0
        assert producer.flush(10) == 0
    finally:
        producer.close(5)
    assert len(reports) == 1 and reports[0] is not None
    assert "on_delivery callback raised" in caplog.text


def test_unexpected_error_adding_partitions_makes_the_transaction_abortable(
    broker_factory: BrokerFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    # AddPartitionsToTxn is sent only with transactions v1 (v2 adds partitions in Produce).
    broker = broker_factory(configs={"transaction.version": 1})
    topic = _new_topic(broker, "add-partitions-bug")
    original = TransactionManager._txn_coordinator_call
    attempts: list[str] = []

    async def broken(
        self: TransactionManager, api_key: int, build: Callable[[int], Any], what: str, check: Any
    ) -> Any:
        if what == "AddPartitionsToTxn":
            attempts.append(what)
            raise RuntimeError("add-partitions bug")
        return await original(self, api_key, build, what, check)

    producer = Producer(
        {"bootstrap.servers": broker.bootstrap, "transactional.id": unique_name("txn")}
    )
    try:
        producer.init_transactions()
        producer.begin_transaction()
        monkeypatch.setattr(TransactionManager, "_txn_coordinator_call", broken)
        future = producer.send(topic, b"lost")
        with pytest.raises(TransactionAbortableError, match="RuntimeError: add-partitions bug"):
            future.result(10)
        with pytest.raises(TransactionAbortableError, match="add-partitions bug"):
            producer.commit_transaction(10)
        assert producer.transaction_state is TxnState.ABORTABLE_ERROR
        assert attempts == ["AddPartitionsToTxn"]  # not started again on every sender loop
        monkeypatch.undo()
        producer.abort_transaction(10)
        producer.begin_transaction()
        assert producer.send(topic, b"after").result(10).offset == 0
        producer.commit_transaction(10)
    finally:
        producer.close(5)


@pytest.mark.parametrize(
    ("owner", "method"),
    [(Sender, "_prepare_batch"), (RecordAccumulator, "ready")],
    ids=["drained-batch", "queued-batch"],
)
def test_unexpected_error_in_the_sender_fails_the_records_it_was_handling(
    shared_broker: BrokerProcess, monkeypatch: pytest.MonkeyPatch, owner: type, method: str
) -> None:
    topic = _new_topic(shared_broker, "sender-bug")

    def broken(*args: object, **kwargs: object) -> Any:
        raise RuntimeError("sender bug")

    reports: list[KafkaClientError | None] = []
    producer = Producer({"bootstrap.servers": shared_broker.bootstrap})
    try:
        producer.send(topic, b"before").result(30)
        monkeypatch.setattr(owner, method, broken)
        future = producer.send(topic, b"lost", on_delivery=lambda err, meta: reports.append(err))
        assert producer.flush(10) == 0  # settled, not left pending
        with pytest.raises(KafkaClientError, match="RuntimeError: sender bug") as info:
            future.result(0)
        assert isinstance(info.value.__cause__, RuntimeError)
        assert len(reports) == 1 and reports[0] is not None
        monkeypatch.undo()
        assert producer.send(topic, b"after").result(30).offset == 1
    finally:
        producer.close(5)


def test_unexpected_error_in_the_group_task_reaches_poll_once_and_the_member_rejoins(
    shared_broker: BrokerProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    topic = _new_topic(shared_broker, "group-bug")
    with Producer({"bootstrap.servers": shared_broker.bootstrap}) as producer:
        producer.send(topic, b"v").result(30)
    original = group_module.decode_assignment
    decoded: list[bytes] = []

    def fails_once(data: bytes) -> list[TopicPartition]:
        decoded.append(data)
        if len(decoded) == 1:
            raise RuntimeError("assignment bug")
        return original(data)

    monkeypatch.setattr(group_module, "decode_assignment", fails_once)
    consumer = Consumer(
        {
            "bootstrap.servers": shared_broker.bootstrap,
            "group.id": unique_group(),
            "auto.offset.reset": "earliest",
        }
    )
    errors: list[KafkaClientError] = []
    records: list[Message] = []
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 30
        while not records and time.monotonic() < deadline:
            try:
                records = consumer.poll(1.0)
            except KafkaClientError as exc:
                errors.append(exc)
    finally:
        consumer.close(5)
    assert [r.value for r in records] == [b"v"]
    assert len(errors) == 1, errors
    assert "RuntimeError: assignment bug" in str(errors[0])
    assert isinstance(errors[0].__cause__, RuntimeError)
