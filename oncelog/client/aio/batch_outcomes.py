"""How a producer batch ends: acknowledged, retried, or failed (the sender's base).

``BatchOutcomes`` settles a batch's ``ProduceResult`` (its records' futures) and runs the
records' ``on_delivery`` callbacks, puts a batch back into its queue to be retried while
``retries`` and ``delivery.timeout.ms`` allow, and classifies an error for the
``TransactionManager`` (fatal, unresolved sequence, abortable). ``Sender`` builds on it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from oncelog.client.accumulator import ProducerBatch, RecordAccumulator
from oncelog.client.aio.transaction_manager import TransactionManager
from oncelog.client.config import ClientConfig
from oncelog.client.errors import (
    FatalError,
    KafkaClientError,
    KafkaTimeoutError,
    OutOfOrderSequenceError,
    ProducerFencedError,
    UnknownProducerIdError,
)
from oncelog.client.txn_requests import FENCING
from oncelog.client.types import RecordMetadata, TopicPartition
from oncelog.errors import ErrorCode

logger = logging.getLogger(__name__)

__all__ = ["BatchOutcomes", "DeliveryCallback", "mono_ms"]

DeliveryCallback = Callable[[KafkaClientError | None, RecordMetadata | None], None]


def mono_ms() -> int:
    return time.monotonic_ns() // 1_000_000


class BatchOutcomes:
    config: ClientConfig
    accumulator: RecordAccumulator
    transactions: TransactionManager
    closed: bool
    # Batches appended and not yet acknowledged or failed.
    pending: set[ProducerBatch]
    # Per partition, its batches in flight in the order they were sent.
    _in_flight: dict[TopicPartition, list[ProducerBatch]]

    def _landed(self, batch: ProducerBatch) -> None:
        """``batch`` is no longer in flight."""
        batches = self._in_flight.get(batch.tp)
        if batches is not None and batch in batches:
            batches.remove(batch)
            if not batches:
                del self._in_flight[batch.tp]

    def _retry_or_fail(self, batch: ProducerBatch, exc: KafkaClientError) -> None:
        self._landed(batch)
        age = mono_ms() - batch.created_ms
        if (
            age >= self.config["delivery.timeout.ms"]
            or batch.attempts > self.config["retries"]
            or self.closed
        ):
            if batch.has_sequence:
                self.transactions.on_unresolved_sequence(exc)
            self._fail_batch(
                batch,
                KafkaTimeoutError(f"{batch.tp}: giving up after {batch.attempts} attempts: {exc}")
                if not isinstance(exc, KafkaTimeoutError)
                else exc,
            )
            return
        logger.debug("retrying batch for %s (attempt %d): %s", batch.tp, batch.attempts, exc)
        self.accumulator.reenqueue(batch)

    def _complete_ok(self, batch: ProducerBatch, base_offset: int, log_append_time: int) -> None:
        self._landed(batch)
        self.pending.discard(batch)
        if batch.result.done:
            return
        batch.result.complete(base_offset, log_append_time, None)
        topic, partition = batch.tp
        for index, timestamp, callback in batch.handles:
            offset = base_offset + index if base_offset >= 0 else -1
            ts = log_append_time if log_append_time >= 0 else timestamp
            self._run_callback(callback, None, RecordMetadata(topic, partition, offset, ts))

    def _complete_failed(self, batch: ProducerBatch, exc: KafkaClientError) -> None:
        """A non-retriable error for this batch: classify, then fail its records."""
        code = exc.code
        if code == ErrorCode.invalid_txn_state and self.transactions.transactional_id:
            # The broker refused the batch as part of no ongoing transaction (KIP-890: the
            # transaction ended while the partition was being verified). The Java producer
            # (4.x) makes the transaction abortable, not the producer fatal.
            self.transactions.enter_abortable(exc)
            self._fail_batch(batch, exc)
            return
        if code in FENCING or isinstance(exc, FatalError):
            fatal = exc if isinstance(exc, FatalError) else ProducerFencedError(str(exc), code)
            self._fail_batch(batch, fatal)
            self.transactions.enter_fatal(fatal)
            return
        if isinstance(exc, OutOfOrderSequenceError | UnknownProducerIdError):
            self.transactions.on_unresolved_sequence(exc)
        elif self.transactions.transactional_id is not None:
            self.transactions.enter_abortable(exc)
        self._fail_batch(batch, exc)

    def _fail_unexpectedly(self, batches: list[ProducerBatch], error: KafkaClientError) -> None:
        """Fail the records of ``batches`` not yet completed after an unexpected error; one
        that was sent may or may not have been written, so its sequence is unresolved."""
        for b in batches:
            if b.result.done:
                continue  # completed before the failure
            if b.has_sequence:
                self.transactions.on_unresolved_sequence(error)
            elif self.transactions.transactional_id is not None:
                self.transactions.enter_abortable(error)  # the transaction has lost records
            self._fail_batch(b, error)

    def _fail_batch(self, batch: ProducerBatch, exc: KafkaClientError) -> None:
        self._landed(batch)
        self.pending.discard(batch)
        self.transactions.on_failure(exc)
        if batch.result.done:
            return
        batch.result.complete(-1, -1, exc)
        for _, _, callback in batch.handles:
            self._run_callback(callback, exc, None)

    @staticmethod
    def _run_callback(
        callback: DeliveryCallback, exc: KafkaClientError | None, meta: RecordMetadata | None
    ) -> None:
        try:
            callback(exc, meta)
        except Exception:
            logger.exception("on_delivery callback raised")
