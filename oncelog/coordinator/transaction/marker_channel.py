"""The marker channel: drives every transaction in PREPARE_* to COMPLETE_*.

Once PrepareCommit/PrepareAbort is durable the transaction ends that way (KIP-98). The
channel (Kafka's TransactionMarkerChannelManager and its
TransactionMarkerRequestCompletionHandler) owns that promise: one task per prepared
transaction, in the coordinator's TaskGroup, hands the ``MarkerWriter`` the markers of the
partitions still without one, classifies each partition's answer (``classify_marker_error``),
retries the rest with exponential backoff, and logs CompleteCommit/CompleteAbort through the
state manager only when every partition is marked. It never gives up while this coordinator
owns the transaction; a client that disconnects never leaves a decided transaction
half-marked.

The writer appends a COMMIT/ABORT control batch to every data partition (the broker's is
``oncelog.broker.markers.LocalMarkerWriter``, which also tells the group coordinator for
``__consumer_offsets`` partitions) and answers an error code per partition. The classifier
follows Kafka's completion handler, adjusted to one broker: a partition that no longer exists
is done (its topic was deleted, as Kafka concludes when a partition has no leader).
"""

from __future__ import annotations

import asyncio
import enum
import logging
from typing import Protocol

from oncelog.clock import Clock
from oncelog.coordinator.transaction.metadata import TopicPartition
from oncelog.coordinator.transaction.state import TransactionState
from oncelog.coordinator.transaction.state_manager import Sleep, TransactionStateManager
from oncelog.errors import ErrorCode

logger = logging.getLogger(__name__)

class MarkerWriter(Protocol):
    async def write_markers(
        self,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        commit: bool,
        partitions: list[TopicPartition],
    ) -> dict[TopicPartition, ErrorCode]:
        """Write one marker per partition; a partition missing from the answer is retried."""
        ...


class MarkerOutcome(enum.Enum):
    DONE = "done"  # the partition has its marker (or can never need one)
    RETRY = "retry"  # try this partition again after a backoff
    STOP = "stop"  # this coordinator is fenced: stop sending markers for the transaction


_DONE = frozenset(
    {
        ErrorCode.none,
        # The topic is gone: nothing left to mark.
        ErrorCode.unknown_topic_or_partition,
        # The producer could not have written there either (Kafka drops the partition).
        ErrorCode.unsupported_for_message_format,
        ErrorCode.unsupported_version,
    }
)
# INVALID_PRODUCER_EPOCH / PRODUCER_FENCED (the partition knows a newer epoch of the
# producer) are retried, never done: if the partition still holds that producer's open
# transaction, it did not get its marker, and counting it complete would leave the LSO stuck
# with the transaction gone from the coordinator. Kafka's completion handler stops sending
# instead (a newer epoch can only come from a newer decision there). A writer that can see
# the partition holds nothing of the producer open answers NONE instead
# (``oncelog.broker.markers``).
_STOP = frozenset({ErrorCode.transaction_coordinator_fenced})


def classify_marker_error(code: ErrorCode) -> MarkerOutcome:
    """Everything not known to be done or fatal for this coordinator is retried: a
    transaction whose outcome is logged must reach every partition."""
    if code in _DONE:
        return MarkerOutcome.DONE
    if code in _STOP:
        return MarkerOutcome.STOP
    return MarkerOutcome.RETRY


class TransactionMarkerChannel:
    def __init__(
        self,
        state: TransactionStateManager,
        writer: MarkerWriter,
        clock: Clock,
        *,
        sleep: Sleep = asyncio.sleep,
        end_txn_wait_ms: int = 5000,
        backoff_ms: int = 20,
        backoff_max_ms: int = 1000,
    ) -> None:
        self._state = state
        self._writer = writer
        self._clock = clock
        self._sleep = sleep
        self._end_txn_wait_s = end_txn_wait_ms / 1000
        self._backoff_ms = backoff_ms
        self._backoff_max_ms = backoff_max_ms
        self._tasks: asyncio.TaskGroup | None = None
        self._completions: dict[str, asyncio.Task[None]] = {}
        self._deferred: set[str] = set()  # completions waiting for a TaskGroup
        self.retries = 0

    @property
    def in_flight(self) -> int:
        """Transactions whose markers are being written."""
        return len(self._completions)

    def attach(self, tasks: asyncio.TaskGroup) -> None:
        """Start completing in ``tasks``, beginning with those deferred until now."""
        self._tasks = tasks
        for transactional_id in sorted(self._deferred):
            self.start(transactional_id)
        self._deferred.clear()

    def detach(self) -> None:
        self._tasks = None

    def start(self, transactional_id: str) -> None:
        """Complete the prepared transaction of ``transactional_id`` (a no-op while its
        completion is running; deferred until ``attach``)."""
        running = self._completions.get(transactional_id)
        if running is not None and not running.done():
            return
        if self._tasks is None:
            self._deferred.add(transactional_id)
            return
        task = self._tasks.create_task(
            self._complete_transaction(transactional_id),
            name=f"txn-markers-{transactional_id}",
        )
        self._completions[transactional_id] = task

        def forget(done: asyncio.Task[None]) -> None:
            if self._completions.get(transactional_id) is done:
                del self._completions[transactional_id]

        task.add_done_callback(forget)

    def stop(self, transactional_ids: list[str]) -> None:
        """Stop completing these transactions (their partition moved to another coordinator,
        which resumes them with its own epoch)."""
        for transactional_id in transactional_ids:
            self._deferred.discard(transactional_id)
            task = self._completions.pop(transactional_id, None)
            if task is not None and not task.done():
                task.cancel()
                logger.info("markers of %r stopped: its coordinator moved", transactional_id)

    async def wait(self, transactional_id: str) -> None:
        """Wait, at most ``end_txn_wait_ms``, for the completion of ``transactional_id``
        (which goes on if the waiter is cancelled: one future and one timer, not
        ``wait_for(shield(...))``, on every EndTxn's path)."""
        task = self._completions.get(transactional_id)
        if task is None or task.done():
            return
        loop = asyncio.get_running_loop()
        waiter = loop.create_future()

        def wake(_: object = None) -> None:
            if not waiter.done():
                waiter.set_result(None)

        task.add_done_callback(wake)
        timer = loop.call_later(self._end_txn_wait_s, wake)
        try:
            await waiter
        finally:
            timer.cancel()
            task.remove_done_callback(wake)
        if not task.done():
            logger.info("markers of %r still in flight; answering now", transactional_id)

    async def wait_all(self) -> None:
        """Wait until every transaction whose markers are being written has completed."""
        while True:
            tasks = [t for t in self._completions.values() if not t.done()]
            if not tasks:
                return
            await asyncio.gather(*(asyncio.shield(t) for t in tasks))

    async def _complete_transaction(self, transactional_id: str) -> None:
        """Write the markers of a prepared transaction until every partition has one, then
        log CompleteCommit/CompleteAbort. Never gives up while this coordinator owns it."""
        backoff = self._backoff_ms
        while True:
            md = self._state.get(transactional_id)
            epoch = self._state.coordinator_epoch_for(transactional_id)
            if md is None or epoch is None:
                logger.info("%r is no longer owned here: its markers stop", transactional_id)
                return
            if not md.state.is_prepared or md.pending_transition:
                logger.error("%r has nothing to complete", transactional_id)
                return
            commit = md.state is TransactionState.PREPARE_COMMIT
            pending = sorted(md.partitions)
            if pending:
                try:
                    answers = await self._writer.write_markers(
                        md.producer_id, md.producer_epoch, epoch, commit, pending,
                    )
                except Exception as exc:  # an error of the writer: retry, never give up
                    logger.warning(
                        "writing markers for %r failed: %r; retrying", transactional_id, exc
                    )
                    answers = {}
                if self._state.get(transactional_id) is not md:
                    return
                for tp in pending:
                    code = answers.get(tp, ErrorCode.unknown_server_error)
                    outcome = classify_marker_error(code)
                    if outcome is MarkerOutcome.DONE:
                        if code is not ErrorCode.none:
                            logger.warning(
                                "marker for %r on %s-%d answered %s: partition done",
                                transactional_id, tp[0], tp[1], code.name,
                            )
                        md.remove_partition(tp)
                    elif outcome is MarkerOutcome.STOP:
                        logger.error(
                            "marker for %r on %s-%d: %s; this coordinator stops",
                            transactional_id, tp[0], tp[1], code.name,
                        )
                        return
                    else:
                        logger.info(
                            "marker for %r on %s-%d failed with %s; will retry",
                            transactional_id, tp[0], tp[1], code.name,
                        )
            if not md.partitions:
                transit = md.prepare_complete(self._clock.now_ms())
                if await self._state.apply(md, transit) is ErrorCode.none:
                    logger.debug(
                        "%r %s (producer id %d epoch %d)",
                        transactional_id, md.state.wire_name, md.producer_id, md.producer_epoch,
                    )
                    return
            self.retries += 1
            await self._sleep(backoff / 1000)
            backoff = min(backoff * 2, self._backoff_max_ms)
