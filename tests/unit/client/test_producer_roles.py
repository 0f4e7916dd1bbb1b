"""The producer's roles without a broker: the sender's per-batch sequences and failures, the
transaction manager's bookkeeping, and the sans-IO transaction request helpers."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from oncelog.client.accumulator import ProducerBatch
from oncelog.client.aio.producer import AIOProducer
from oncelog.client.aio.sender import mono_ms
from oncelog.client.delivery import RecordFuture
from oncelog.client.errors import (
    AbortableError,
    KafkaClientError,
    KafkaTimeoutError,
    OutOfOrderSequenceError,
    ProducerFencedError,
    error_for,
)
from oncelog.client.txn_requests import check_add_partitions, txn_error, txn_offset_commit_error
from oncelog.client.txn_state import TxnEvent, TxnState
from oncelog.client.types import TopicPartition
from oncelog.errors import ErrorCode

TP0 = TopicPartition("t", 0)
TP1 = TopicPartition("t", 1)


def producer(**extra: Any) -> AIOProducer:
    return AIOProducer({"bootstrap.servers": "127.0.0.1:1", **extra})


def queue_record(p: AIOProducer, tp: TopicPartition, value: bytes = b"v") -> RecordFuture:
    future = RecordFuture(p.accumulator.cond, 1)
    p.transactions.on_append(tp)
    batch, index, _ = p.accumulator.append(tp, None, value, (), 1, mono_ms())
    future.bind(batch.result, index)
    if index == 0:
        p.sender.add_pending(batch)
    return future


def test_sender_numbers_batches_per_partition_and_renumbers_after_an_epoch_bump() -> None:
    async def scenario() -> None:
        p = producer()
        p.transactions.producer_id, p.transactions.producer_epoch = 7, 0
        for tp in (TP0, TP0, TP1):
            queue_record(p, tp)
        (b0,) = p.accumulator.drain([TP0], 1 << 20)
        (b1,) = p.accumulator.drain([TP1], 1 << 20)
        p.sender._prepare_batch(b0)
        p.sender._prepare_batch(b1)
        assert (b0.producer_id, b0.producer_epoch, b0.base_sequence) == (7, 0, 0)
        assert b1.base_sequence == 0 and p.transactions.sequences[TP0] == 2
        p.sender._prepare_batch(b0)  # a retry keeps its sequence
        assert b0.base_sequence == 0 and p.transactions.sequences[TP0] == 2
        p.transactions._set_producer_id(7, 1)  # epoch bumped: sequences restart
        p.sender._prepare_batch(b0)
        assert (b0.producer_epoch, b0.base_sequence) == (1, 0)
        assert b0.attempts == 3

    asyncio.run(scenario())


def test_a_batch_out_of_retries_fails_its_records_and_asks_for_an_epoch_bump() -> None:
    async def scenario() -> None:
        p = producer(retries=0)
        p.transactions.producer_id, p.transactions.producer_epoch = 7, 0
        future = queue_record(p, TP0)
        (batch,) = p.accumulator.drain([TP0], 1 << 20)
        p.sender._prepare_batch(batch)
        p.sender._retry_or_fail(batch, KafkaClientError("lost", ErrorCode.network_exception))
        with pytest.raises(KafkaTimeoutError, match="giving up after 1 attempts"):
            future.result()
        assert p.transactions.need_epoch_bump
        assert not p.accumulator.has_queued()

    asyncio.run(scenario())


def test_out_of_order_sequence_fails_the_batch_and_a_fencing_error_is_fatal() -> None:
    async def scenario() -> None:
        p = producer()
        p.transactions.producer_id, p.transactions.producer_epoch = 7, 0
        first, second = queue_record(p, TP0), queue_record(p, TP1)
        (b0,) = p.accumulator.drain([TP0], 1 << 20)
        (b1,) = p.accumulator.drain([TP1], 1 << 20)
        p.sender._complete_failed(b0, OutOfOrderSequenceError("oos", ErrorCode(45)))
        assert isinstance(first.exception(), OutOfOrderSequenceError)
        assert p.transactions.need_epoch_bump and p.transactions.fatal is None
        queued = queue_record(p, TP0)
        p.sender._complete_failed(b1, KafkaClientError("fenced", ErrorCode.producer_fenced))
        assert isinstance(second.exception(), ProducerFencedError)
        assert p.transactions.fatal is second.exception()
        assert queued.exception() is p.transactions.fatal  # queued records fail with it
        with pytest.raises(ProducerFencedError):
            await p.send("t", b"x")

    asyncio.run(scenario())


def test_a_transactional_batch_refused_as_outside_a_transaction_is_abortable() -> None:
    """INVALID_TXN_STATE on Produce (KIP-890: the transaction ended while the partition was
    being verified) makes the transaction abortable, as the Java producer 4.x does; the
    producer stays usable once it aborts."""

    async def scenario() -> None:
        p = ready_transactional()
        p.transactions.txn.fire(TxnEvent.BEGIN)
        future = queue_record(p, TP0)
        (batch,) = p.accumulator.drain([TP0], 1 << 20)
        refused = error_for(ErrorCode.invalid_txn_state, "not part of an ongoing transaction")
        p.sender._complete_failed(batch, refused)
        assert future.exception() is refused
        assert p.transactions.fatal is None
        assert p.transactions.txn.state is TxnState.ABORTABLE_ERROR
        assert isinstance(p.transactions.txn.error, AbortableError)

    asyncio.run(scenario())


def test_batches_in_flight_per_partition_up_to_the_limit_and_retries_one_at_a_time() -> None:
    async def scenario() -> None:
        p = producer(**{"max.in.flight.requests.per.connection": 2, "batch.size": 100})
        p.transactions.producer_id, p.transactions.producer_epoch = 7, 0
        futures = [queue_record(p, TP0, b"x" * 70) for _ in range(4)]  # a batch each
        sender = p.sender

        def send_one() -> ProducerBatch:
            (batch,) = p.accumulator.drain([TP0], 1 << 20)
            sender._prepare_batch(batch)
            sender._in_flight.setdefault(TP0, []).append(batch)
            return batch

        b0 = send_one()
        assert TP0 not in sender._muted()
        b1 = send_one()
        assert TP0 in sender._muted() and (b0.base_sequence, b1.base_sequence) == (0, 1)
        # b0 is lost: it goes back to the head, and nothing new goes while b1 is in flight
        sender._retry_or_fail(b0, KafkaClientError("lost", ErrorCode.network_exception))
        assert p.accumulator.head(TP0) is b0 and TP0 in sender._muted()
        # b1 is refused as out of order because b0 is missing: it is retried, after b0
        assert sender._earlier_unresolved(b1)
        sender._retry_or_fail(b1, OutOfOrderSequenceError("oos", ErrorCode(45)))
        assert list(p.accumulator.queued(TP0))[:2] == [b0, b1]
        assert TP0 not in sender._muted()
        assert send_one() is b0 and b0.base_sequence == 0  # same sequence: deduplicated
        assert TP0 in sender._muted()  # a retry in flight: one at a time
        sender._complete_ok(b0, 0, -1)
        assert send_one() is b1
        sender._complete_ok(b1, 1, -1)
        b2 = send_one()
        assert b2.base_sequence == 2 and not sender._earlier_unresolved(b2)
        assert [f.result().offset for f in futures[:2]] == [0, 1] and not futures[2].done()

    asyncio.run(scenario())


def ready_transactional() -> AIOProducer:
    p = producer(**{"transactional.id": "tx"})
    p.transactions.txn.fire(TxnEvent.INIT)
    p.transactions.txn.fire(TxnEvent.INIT_DONE)
    p.transactions.producer_id, p.transactions.producer_epoch = 3, 0
    return p


def test_committing_a_transaction_that_sent_nothing_sends_no_end_txn() -> None:
    calls: list[str] = []

    async def coordinator_call(api_key: int, build: Any, what: str, check: Any) -> Any:
        calls.append(what)
        return SimpleNamespace(error_code=0)

    async def scenario() -> None:
        p = ready_transactional()
        p.transactions._txn_coordinator_call = coordinator_call  # type: ignore[method-assign]
        await p.begin_transaction()
        await p.commit_transaction()
        assert p.txn.state is TxnState.READY
        assert calls == []
        await p.begin_transaction()
        p.transactions._txn_partitions.add(TP0)
        await p.abort_transaction()
        assert calls == ["EndTxn(abort)"] and p.txn.state is TxnState.READY

    asyncio.run(scenario())


def test_add_partitions_failure_makes_the_transaction_abortable_and_fails_queued_records() -> None:
    async def coordinator_call(api_key: int, build: Any, what: str, check: Any) -> Any:
        raise AbortableError("AddPartitionsToTxn refused", ErrorCode.unknown_server_error)

    async def transactions_v1() -> bool:
        return False  # the AddPartitionsToTxn path (without it: a 60 s FindCoordinator)

    async def scenario() -> None:
        p = ready_transactional()
        p.transactions._txn_coordinator_call = coordinator_call  # type: ignore[method-assign]
        p.transactions._transactions_v2 = transactions_v1  # type: ignore[method-assign]
        await p.begin_transaction()
        future = queue_record(p, TP0)
        assert p.transactions.pending_partitions == {TP0}
        await p.transactions._add_partitions()
        assert p.txn.state is TxnState.ABORTABLE_ERROR
        assert p.transactions.pending_partitions == set()
        assert isinstance(future.exception(), AbortableError)
        with pytest.raises(AbortableError):
            await p.commit_transaction()

    asyncio.run(scenario())


def response(topic: str, results: dict[int, ErrorCode]) -> SimpleNamespace:
    parts = [
        SimpleNamespace(partition_index=p, partition_error_code=int(c)) for p, c in results.items()
    ]
    return SimpleNamespace(
        results_by_topic_v3_and_below=[SimpleNamespace(name=topic, results_by_partition=parts)]
    )


def test_add_partitions_response_raises_the_fatal_error_before_the_others() -> None:
    check_add_partitions(response("t", {0: ErrorCode.none}))
    with pytest.raises(ProducerFencedError):
        check_add_partitions(
            response(
                "t",
                {
                    0: ErrorCode.operation_not_attempted,
                    1: ErrorCode.concurrent_transactions,
                    2: ErrorCode.producer_fenced,
                },
            )
        )


def test_txn_offset_commit_rebalance_is_abortable_and_errors_are_classified() -> None:
    part = SimpleNamespace(partition_index=0, error_code=int(ErrorCode.illegal_generation))
    resp = SimpleNamespace(topics=[SimpleNamespace(name="t", partitions=[part])])
    error = txn_offset_commit_error(resp, "g")
    assert isinstance(error, AbortableError) and "rebalanced" in str(error)
    assert isinstance(txn_error(ErrorCode.invalid_producer_epoch, "x"), ProducerFencedError)
    assert isinstance(txn_error(ErrorCode.unknown_server_error, "x"), AbortableError)
