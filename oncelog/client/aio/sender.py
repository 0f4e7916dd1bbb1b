"""The producer's sender: batches from the accumulator to the brokers, and their outcome.

The drain side of the Java client's RecordAccumulator plus its Sender. One sender task
drains ready batches, groups them by leader and sends one Produce request per leader:
written at once on an open connection, its response handled by a callback (a task only
when the connection must be made first). A partition has up to
``max.in.flight.requests.per.connection`` batches in flight, one per request (the
connection pipelines them and the broker answers in order). Each batch gets the producer
id, epoch and next sequence of its partition when first drained, and again after an epoch
bump (``_prepare_batch``). A retried batch keeps its sequence number, so with idempotence
the broker appends it at most once, and goes back into its queue in sequence order; while a
partition has a retry outstanding only one batch of it is in flight (as Java does). A later
batch that the broker refuses as out of order because an earlier one is being retried is
retried too. Retriable errors re-enqueue a batch until ``retries`` or
``delivery.timeout.ms`` run out; queued batches older than ``delivery.timeout.ms`` expire.
A batch's outcome (``oncelog.client.aio.batch_outcomes``) settles its ``ProduceResult``
(its records' futures) and the records' ``on_delivery`` callbacks; an error is classified
(fatal, unresolved sequence, abortable) for the ``TransactionManager``, which also holds
back partitions not yet added to the transaction. An unexpected error in the
sender or in a produce task fails the records it was handling instead of leaving them
pending forever.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from oncelog.client.accumulator import ProducerBatch, RecordAccumulator
from oncelog.client.aio.batch_outcomes import BatchOutcomes, DeliveryCallback, mono_ms
from oncelog.client.aio.client import KafkaClient
from oncelog.client.aio.idempotence import unexpected
from oncelog.client.aio.transaction_manager import TransactionManager
from oncelog.client.config import ClientConfig
from oncelog.client.errors import (
    FatalError,
    KafkaClientError,
    KafkaTimeoutError,
    RetriableError,
    error_for,
)
from oncelog.client.types import TopicPartition
from oncelog.client.wire import Buffer, produce_request
from oncelog.errors import ErrorCode
from oncelog.protocol import versions as api

logger = logging.getLogger(__name__)

__all__ = ["DeliveryCallback", "Sender", "mono_ms"]

# The broker refuses a batch's sequence: possibly because an earlier batch is missing.
_SEQUENCE_ERRORS = (ErrorCode.out_of_order_sequence_number, ErrorCode.unknown_producer_id)


def _reraise(exc: BaseException) -> None:
    raise exc


class Sender(BatchOutcomes):
    def __init__(
        self,
        config: ClientConfig,
        client: KafkaClient,
        accumulator: RecordAccumulator,
        transactions: TransactionManager,
        *,
        acks: int,
        compression: int,
    ) -> None:
        self.config = config
        self.client = client
        self.accumulator = accumulator
        self.transactions = transactions
        self.acks = acks
        self.compression = compression
        # Batches appended and not yet acknowledged or failed.
        self.pending: set[ProducerBatch] = set()
        # Per partition, its batches in flight in the order they were sent.
        self._in_flight: dict[TopicPartition, list[ProducerBatch]] = {}
        self._max_in_flight = max(1, int(config["max.in.flight.requests.per.connection"]))
        self._wakeup = asyncio.Event()
        self._sender: asyncio.Task[None] | None = None
        self._request_tasks: set[asyncio.Task[None]] = set()
        # Batches the sender drained and has not yet handed to a produce task.
        self._sender_batches: list[ProducerBatch] = []
        self.closed = False
        transactions.attach(self)

    # ------------------------------------------------------------------ RecordQueue

    async def start(self) -> None:
        if self._sender is None:
            self._sender = asyncio.get_running_loop().create_task(
                self._run_sender(), name="oncelog-producer-sender"
            )

    def has_pending(self) -> bool:
        return bool(self.pending)

    def fail_queued(self, error: KafkaClientError) -> None:
        for batch in self.accumulator.remove_all():
            self._fail_batch(batch, error)

    def wakeup(self) -> None:
        self._wakeup.set()

    def add_pending(self, batch: ProducerBatch) -> None:
        """Track ``batch`` (just created) until it is done."""
        self.pending.add(batch)

    async def close(self, timeout: float | None = None) -> None:
        """Send what is queued (within ``timeout`` seconds), fail the rest, stop the tasks."""
        self.accumulator.close()
        self._wakeup.set()
        if self.transactions.fatal is None and self.pending:
            with contextlib.suppress(Exception):
                await self.flush(timeout)
        self.closed = True
        for batch in self.accumulator.remove_all():
            self._fail_batch(batch, KafkaClientError("producer closed before the record was sent"))
        self._wakeup.set()
        if self._sender is not None:
            self._sender.cancel()
            with contextlib.suppress(BaseException):
                await self._sender
        for task in list(self._request_tasks):
            task.cancel()
        for task in list(self._request_tasks):
            with contextlib.suppress(BaseException):
                await task

    async def flush(self, timeout: float | None = None) -> int:
        """Send everything queued and wait for the acknowledgements. Returns how many
        records are still undelivered (0 unless ``timeout`` seconds ran out)."""
        pending = list(self.pending)
        if not pending:
            return 0
        self.accumulator.begin_flush()
        self._wakeup.set()
        try:
            await asyncio.wait([b.result.waiter() for b in pending], timeout=timeout)
        finally:
            self.accumulator.end_flush()
        return sum(b.record_count for b in pending if not b.result.done)

    # ------------------------------------------------------------------ sender

    async def _run_sender(self) -> None:
        try:
            while not self.closed:
                try:
                    await self._sender_iteration()
                except asyncio.CancelledError:
                    raise
                except FatalError as exc:
                    self.transactions.enter_fatal(exc)
                except KafkaClientError as exc:
                    logger.warning("producer sender: %s", exc)
                    await asyncio.sleep(self.client.backoff_s(0))
                except Exception as exc:  # a bug or an unexpected response
                    self._on_sender_error(unexpected("producer sender", exc))
                    await asyncio.sleep(self.client.backoff_s(3))
        except asyncio.CancelledError:
            pass

    def _on_sender_error(self, error: KafkaClientError) -> None:
        """The sender loop failed unexpectedly: fail the batches it held and those queued
        (it would only meet the same failure again), so that their futures, callbacks and
        ``flush`` learn of it instead of waiting forever. Batches in flight finish on
        their own. The loop then goes on with the records sent after this."""
        held, self._sender_batches = self._sender_batches, []
        for batch in held:
            self._landed(batch)
        self._fail_unexpectedly(held + self.accumulator.remove_all(), error)
        self._wakeup.set()

    async def _sender_iteration(self) -> None:
        now = mono_ms()
        self._expire_batches(now)
        if self.accumulator.has_queued() and self.transactions.fatal is None:
            if (
                self.transactions.idempotent
                and self.transactions.transactional_id is None
                and (self.transactions.producer_id < 0 or self.transactions.need_epoch_bump)
            ):
                await self.transactions.init_idempotent_producer_id()
            if (
                self.transactions.transactional_id is not None
                and self.transactions.pending_partitions
            ):
                self.transactions.maybe_add_partitions()
            if self.transactions.producer_id >= 0 or not self.transactions.idempotent:
                # Drain until every partition is muted (its in-flight limit reached) or idle.
                while ready := self.accumulator.ready(now, self._muted()):
                    if not await self._send_ready(ready):
                        break
        delay = self.accumulator.next_ready_delay_ms(mono_ms())
        self._wakeup.clear()
        if delay is not None and delay <= 0 and not self._ready_sendable():
            delay = None  # everything ready is muted; wait for a response
        timeout = None if delay is None else max(delay, 1) / 1000
        if self.accumulator.has_queued() and timeout is None:
            timeout = 0.05
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await self._wakeup.wait()

    def _ready_sendable(self) -> bool:
        return bool(self.accumulator.ready(mono_ms(), self._muted()))

    def _muted(self) -> frozenset[TopicPartition]:
        """Partitions that may not send now: not yet in the transaction, at the in-flight
        limit, or retrying with a batch in flight (retries go one at a time)."""
        muted = set(self.transactions.pending_partitions)
        for tp, batches in self._in_flight.items():
            if not batches:
                continue
            head = self.accumulator.head(tp)
            if (
                len(batches) >= self._max_in_flight
                or batches[-1].attempts > 1
                or (head is not None and head.attempts > 0)
            ):
                muted.add(tp)
        return frozenset(muted)

    def _expire_batches(self, now: int) -> None:
        timeout = self.config["delivery.timeout.ms"]
        for batch in self.accumulator.pop_expired(now, timeout, self._in_flight.keys()):
            age = now - batch.created_ms
            exc = KafkaTimeoutError(
                f"{batch.record_count} record(s) for {batch.tp} expired after {age} ms"
            )
            if batch.has_sequence:
                self.transactions.on_unresolved_sequence(exc)
            self._fail_batch(batch, exc)

    async def _send_ready(self, ready: list[TopicPartition]) -> bool:
        """One Produce request per leader of ``ready``; False if none could be sent."""
        sent = False
        by_leader: dict[int, list[TopicPartition]] = defaultdict(list)
        for tp in ready:
            leader = self.client.leader_for(tp.topic, tp.partition)
            if leader < 0:
                with contextlib.suppress(KafkaClientError):
                    await self.client.refresh_metadata([tp.topic])
                continue
            by_leader[leader].append(tp)
        for leader, tps in by_leader.items():
            batches = self.accumulator.drain(tps, self.config["max.request.size"])
            if not batches:
                continue
            self._sender_batches = batches
            for batch in batches:
                self._prepare_batch(batch)
                self._in_flight.setdefault(batch.tp, []).append(batch)
            if not self._produce_nowait(leader, batches):
                task = asyncio.get_running_loop().create_task(self._produce(leader, batches))
                self._request_tasks.add(task)
                task.add_done_callback(self._request_tasks.discard)
            self._sender_batches = []  # the request owns them now
            sent = True
        return sent

    def _prepare_batch(self, batch: ProducerBatch) -> None:
        batch.attempts += 1
        batch.last_attempt_ms = mono_ms()
        if self.transactions.idempotent and (
            not batch.has_sequence
            or batch.producer_epoch != self.transactions.producer_epoch
            or batch.producer_id != self.transactions.producer_id
        ):
            batch.producer_id = self.transactions.producer_id
            batch.producer_epoch = self.transactions.producer_epoch
            batch.base_sequence = self.transactions.sequences[batch.tp]
            self.transactions.sequences[batch.tp] = (
                batch.base_sequence + batch.record_count
            ) & 0x7FFFFFFF
            batch.transactional = self.transactions.transactional_id is not None

    def _produce_request(self, version: int, batches: list[ProducerBatch]) -> Any:
        topics: dict[str, list[tuple[int, Buffer]]] = defaultdict(list)
        for b in batches:
            topics[b.tp.topic].append((b.tp.partition, b.encode(self.compression)))
        return produce_request(
            version,
            self.transactions.transactional_id,
            self.acks,
            self.config["request.timeout.ms"],
            topics,
        )

    def _produce_nowait(self, leader: int, batches: list[ProducerBatch]) -> bool:
        """Send the request on the leader's open connection at once, its response handled
        by a callback (no task per request); False if the connection is not ready for
        it (``_produce`` then connects and sends)."""
        conn = self.client.open_connection(leader)
        if conn is None or self.acks == 0:
            return False
        future = conn.send_nowait(self._produce_request(conn.version(api.PRODUCE), batches))
        if future is None:
            return False
        future.add_done_callback(functools.partial(self._on_produce_done, leader, batches))
        return True

    def _on_produce_done(
        self, leader: int, batches: list[ProducerBatch], future: asyncio.Future[Any]
    ) -> None:
        self._settle_request(leader, batches, future.result)

    def _settle_request(
        self, leader: int, batches: list[ProducerBatch], outcome: Callable[[], Any]
    ) -> None:
        """Settle or retry ``batches`` after their request: ``outcome()`` is its response
        (None with acks=0) or raises its error."""
        try:
            try:
                response = outcome()
            except KafkaClientError as exc:
                if self._on_request_error(batches, exc):
                    self._refresh_metadata_soon()
                return
            if response is None:  # acks=0
                for b in batches:
                    self._complete_ok(b, -1, -1)
            elif self._on_produce_response(batches, response):
                self._refresh_metadata_soon()
        except Exception as exc:  # a bug or an unexpected response: fail the records, loudly
            self._fail_unexpectedly(batches, unexpected(f"produce to node {leader}", exc))
        finally:
            for b in batches:
                self._landed(b)
            self._wakeup.set()

    def _refresh_metadata_soon(self) -> None:
        async def refresh() -> None:
            with contextlib.suppress(KafkaClientError):
                await self.client.refresh_metadata()

        task = asyncio.get_running_loop().create_task(refresh())
        self._request_tasks.add(task)
        task.add_done_callback(self._request_tasks.discard)

    async def _produce(self, leader: int, batches: list[ProducerBatch]) -> None:
        """The request of ``batches`` when the connection must be made first (or acks=0)."""
        try:
            conn = await self.client.connection(leader)
            body = self._produce_request(conn.version(api.PRODUCE), batches)
            response = await conn.send(body, expect_response=self.acks != 0)
        except asyncio.CancelledError:
            for b in batches:
                self._landed(b)
            raise
        except Exception as exc:  # settled (or failed, if unexpected) as the outcome
            self._settle_request(leader, batches, functools.partial(_reraise, exc))
            return
        self._settle_request(leader, batches, lambda: response)

    def _on_request_error(self, batches: list[ProducerBatch], exc: KafkaClientError) -> bool:
        """The request failed as a whole; True if the metadata should be refreshed."""
        if isinstance(exc, RetriableError):
            for b in batches:
                self._retry_or_fail(b, exc)
            return True
        for b in batches:
            self._complete_failed(b, exc)
        return False

    def _on_produce_response(self, batches: list[ProducerBatch], response: Any) -> bool:
        """Settle or retry each batch; True if the metadata should be refreshed."""
        results: dict[TopicPartition, Any] = {}
        for topic_resp in response.responses:
            for part in topic_resp.partition_responses:
                results[TopicPartition(topic_resp.name, int(part.index))] = part
        refresh = False
        for b in batches:
            part = results.get(b.tp)
            if part is None:
                self._retry_or_fail(
                    b,
                    KafkaClientError(f"no response for {b.tp}", ErrorCode.unknown_server_error),
                )
                continue
            code = ErrorCode(part.error_code)
            if code in (ErrorCode.none, ErrorCode.duplicate_sequence_number):
                append_time = part.log_append_time
                ts = -1 if append_time is None else int(append_time.timestamp() * 1000)
                self._complete_ok(b, int(part.base_offset), ts)
                continue
            message = getattr(part, "error_message", None) or ""
            err = error_for(code, f"produce to {b.tp}: {message}".rstrip(": "))
            if isinstance(err, RetriableError) or (
                code in _SEQUENCE_ERRORS and self._earlier_unresolved(b)
            ):
                refresh = refresh or code in (
                    ErrorCode.not_leader_or_follower,
                    ErrorCode.unknown_topic_or_partition,
                    ErrorCode.leader_not_available,
                )
                self._retry_or_fail(b, err)
            else:
                self._complete_failed(b, err)
        return refresh

    def _earlier_unresolved(self, batch: ProducerBatch) -> bool:
        """Whether the broker's refusal of ``batch``'s sequence may come from an earlier
        batch instead: one of its partition and producer epoch is still in flight or to be
        retried, or (without transactions) the epoch is being bumped, after which the batch
        gets a new sequence. Then the batch is retried; otherwise its sequence is
        unresolved."""
        if not batch.has_sequence:
            return False
        txns = self.transactions
        if txns.transactional_id is None and (
            txns.need_epoch_bump
            or (batch.producer_id, batch.producer_epoch) != (txns.producer_id, txns.producer_epoch)
        ):
            return True
        for other in (*self._in_flight.get(batch.tp, ()), *self.accumulator.queued(batch.tp)):
            if (
                other is not batch
                and other.has_sequence
                and other.producer_id == batch.producer_id
                and other.producer_epoch == batch.producer_epoch
                and other.base_sequence < batch.base_sequence
            ):
                return True
        return False
