"""The producer's identity and error state: producer id, epoch, sequences, fatal errors.

``IdempotenceManager`` is the part of the Java client's TransactionManager that every
idempotent producer has, transactional or not: the producer id and epoch from InitProducerId
(bumped per KIP-360, InitProducerId with the current id and epoch, when a sequence is
unresolved: OUT_OF_ORDER_SEQUENCE_NUMBER, UNKNOWN_PRODUCER_ID, an expired or failed batch
that had a sequence), the next sequence number of each partition (the sender assigns them
per batch), the fatal error that ends the producer, and the error transitions of the
transaction state machine. ``oncelog.client.aio.transaction_manager`` adds the
transactions on top.

It reaches the sender only through ``RecordQueue`` (flush, fail what is queued, wake up),
so it does not import the sender.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from typing import Any, Protocol

from oncelog.client.accumulator import RecordAccumulator
from oncelog.client.aio.client import KafkaClient
from oncelog.client.config import ClientConfig
from oncelog.client.errors import (
    AbortableError,
    IllegalStateError,
    KafkaClientError,
    TransactionAbortableError,
    error_for,
    unexpected_error,
)
from oncelog.client.txn_state import TxnEvent, TxnStateMachine
from oncelog.client.types import TopicPartition
from oncelog.client.wire import request
from oncelog.errors import ErrorCode
from oncelog.protocol import versions as api

logger = logging.getLogger(__name__)

__all__ = ["IdempotenceManager", "RecordQueue", "unexpected"]


def unexpected(what: str, exc: Exception) -> KafkaClientError:
    """A bug or an unexpected response in ``what``: logged with its traceback, and turned
    into the client error that reports it (``exc`` is its cause)."""
    logger.error("%s failed unexpectedly", what, exc_info=exc)
    return unexpected_error(what, exc)


class RecordQueue(Protocol):
    """What the transaction manager needs of the sender."""

    @property
    def closed(self) -> bool: ...

    async def start(self) -> None: ...

    def has_pending(self) -> bool:
        """Records sent (queued or in flight) and not yet acknowledged or failed."""
        ...

    async def flush(self, timeout: float | None = None) -> int: ...

    def fail_queued(self, error: KafkaClientError) -> None:
        """Fail every batch still queued (not in flight) with ``error``."""
        ...

    def wakeup(self) -> None: ...


class IdempotenceManager:
    def __init__(
        self,
        config: ClientConfig,
        client: KafkaClient,
        accumulator: RecordAccumulator,
        *,
        transactional_id: str | None,
        idempotent: bool,
    ) -> None:
        self.config = config
        self.client = client
        self.accumulator = accumulator
        self.transactional_id = transactional_id
        self.idempotent = idempotent
        self.txn = TxnStateMachine()
        self.producer_id = -1
        self.producer_epoch = -1
        self.sequences: dict[TopicPartition, int] = defaultdict(int)
        self.need_epoch_bump = False
        self.fatal: KafkaClientError | None = None
        self._pid_lock = asyncio.Lock()
        self._queue: RecordQueue | None = None

    @property
    def queue(self) -> RecordQueue:
        assert self._queue is not None, "no sender attached"
        return self._queue

    def attach(self, queue: RecordQueue) -> None:
        """Called by the sender that sends this producer's records."""
        self._queue = queue

    def check_usable(self) -> None:
        if self.fatal is not None:
            raise self.fatal
        if self.queue.closed:
            raise IllegalStateError("producer is closed")

    def on_unresolved_sequence(self, exc: KafkaClientError) -> None:
        """The broker's view of our sequences is unknown or broken: bump the epoch."""
        if not self.idempotent:
            return
        self.need_epoch_bump = True
        if self.transactional_id is not None:
            self.enter_abortable(exc)
        logger.warning("producer %s: %s; the epoch will be bumped", self.producer_id, exc)

    def enter_fatal(self, exc: KafkaClientError) -> None:
        if self.fatal is None:
            logger.error("producer %r: fatal error: %s", self.transactional_id, exc)
        self.fatal = self.fatal or exc
        if self.transactional_id is not None and self.txn.can(TxnEvent.FATAL_ERROR):
            self.txn.fire(TxnEvent.FATAL_ERROR, self.fatal)
        self.queue.fail_queued(self.fatal)

    def enter_abortable(self, exc: KafkaClientError) -> None:
        if self.txn.can(TxnEvent.ABORTABLE_ERROR):
            error = exc
            if not isinstance(exc, AbortableError):
                error = TransactionAbortableError(str(exc), exc.code)
                error.__cause__ = exc
            self.txn.fire(TxnEvent.ABORTABLE_ERROR, error)

    # ------------------------------------------------------------------ producer ids

    async def init_idempotent_producer_id(self) -> None:
        async with self._pid_lock:
            if self.producer_id >= 0 and not self.need_epoch_bump:
                return
            bump = self.producer_id >= 0 and self.need_epoch_bump

            async def attempt() -> Any:
                def build(version: int) -> Any:
                    pid, epoch = (
                        (self.producer_id, self.producer_epoch)
                        if bump and version >= 3
                        else (-1, -1)
                    )
                    return request(
                        api.INIT_PRODUCER_ID,
                        version,
                        transactional_id=None,
                        transaction_timeout=self.config["transaction.timeout.ms"],
                        producer_id=pid,
                        producer_epoch=epoch,
                    )

                response = await self.client.call(None, api.INIT_PRODUCER_ID, build)
                if response.error_code != ErrorCode.none:
                    raise error_for(response.error_code, "InitProducerId")
                return response

            response = await self.client.retrying(
                attempt, timeout_ms=self.config["max.block.ms"], what="InitProducerId"
            )
            self._set_producer_id(int(response.producer_id), int(response.producer_epoch))
            self.need_epoch_bump = False

    def _set_producer_id(self, producer_id: int, epoch: int) -> None:
        logger.info(
            "producer %r: producer id %d epoch %d (was %d/%d)",
            self.transactional_id,
            producer_id,
            epoch,
            self.producer_id,
            self.producer_epoch,
        )
        self.producer_id = producer_id
        self.producer_epoch = epoch
        self.sequences.clear()
        # Batches queued but not yet sent get new sequences when drained.
        for batch in self.accumulator.batches():
            batch.base_sequence = -1
