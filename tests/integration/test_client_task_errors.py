"""oncelog.client background tasks against a real ``oncelog serve``: an unexpected exception
inside one fails the records it carried (send futures, on_delivery, flush) instead of dying
as "Task exception was never retrieved" with the futures left pending forever."""

from __future__ import annotations

import pytest

from oncelog.client import Admin, Producer
from oncelog.client.accumulator import ProducerBatch
from oncelog.client.errors import KafkaClientError
from tests.support.broker import BrokerProcess
from tests.support.names import unique_topic


def test_unexpected_error_in_a_produce_task_fails_its_records(
    shared_broker: BrokerProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    topic = unique_topic("produce-bug")
    with Admin({"bootstrap.servers": shared_broker.bootstrap}) as admin:
        admin.create_topic(topic, 1)

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
    topic = unique_topic("callback-bug")
    with Admin({"bootstrap.servers": shared_broker.bootstrap}) as admin:
        admin.create_topic(topic, 1)
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
