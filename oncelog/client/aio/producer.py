"""The asyncio producer: batching, idempotence, transactions and two-phase commit.

Data path: ``send`` picks the partition (murmur2 for keys, sticky otherwise) and appends to
the ``RecordAccumulator``; one sender task drains ready batches, groups them by leader and
sends one Produce request per leader (several leaders in parallel). A partition has at most
one batch in flight, so a retried batch keeps its place and its sequence number: with
idempotence (on by default) the broker appends it at most once.

Idempotence: InitProducerId gives (producer id, epoch); each partition's batches carry
consecutive sequence numbers. OUT_OF_ORDER_SEQUENCE_NUMBER or UNKNOWN_PRODUCER_ID fail the
batch; a plain idempotent producer then bumps its epoch (InitProducerId with its current id
and epoch, KIP-360) and restarts sequences at 0, a transactional one makes the transaction
abortable and bumps the epoch when it is aborted.

Transactions follow the Java client: partitions join the transaction with
AddPartitionsToTxn before their first batch is sent; offsets join with AddOffsetsToTxn and
TxnOffsetCommit; EndTxn commits or aborts. KIP-939: ``init_transactions(keep_prepared_txn)``
sends InitProducerId v6 (Enable2Pc, KeepPreparedTxn); ``prepare_transaction`` flushes and
returns the (producer id, epoch) that ``complete_transaction`` compares against. The states
and the calls each allows are in ``oncelog.client.txn_state``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from oncelog.client.accumulator import ProducerBatch, RecordAccumulator
from oncelog.client.aio.client import COORDINATOR_GROUP, COORDINATOR_TRANSACTION, KafkaClient
from oncelog.client.config import ClientConfig
from oncelog.client.errors import (
    AbortableError,
    ConfigError,
    FatalError,
    IllegalStateError,
    InvalidTxnStateError,
    KafkaClientError,
    KafkaTimeoutError,
    MessageSizeTooLargeError,
    OutOfOrderSequenceError,
    ProducerFencedError,
    RetriableError,
    TransactionAbortableError,
    UnknownProducerIdError,
    UnsupportedVersionError,
    error_for,
    unexpected_error,
)
from oncelog.client.partitioner import StickyPartitioner
from oncelog.client.txn_state import TxnEvent, TxnState, TxnStateMachine
from oncelog.client.types import (
    ConsumerGroupMetadata,
    OffsetAndMetadata,
    PreparedTxnState,
    RecordMetadata,
    TopicPartition,
)
from oncelog.client.wire import nested, request
from oncelog.errors import ErrorCode
from oncelog.protocol import versions as api
from oncelog.records.codec import RecordInput

logger = logging.getLogger(__name__)

__all__ = ["AIOProducer"]

HeadersArg = Mapping[str, bytes | str | None] | Sequence[tuple[str, bytes | str | None]] | None
DeliveryCallback = Callable[[KafkaClientError | None, RecordMetadata | None], None]

# Errors of transactional coordinator requests, as the Java TransactionManager sorts them.
_TXN_FATAL = frozenset(
    {
        ErrorCode.producer_fenced,
        ErrorCode.invalid_producer_epoch,
        ErrorCode.transactional_id_authorization_failed,
        ErrorCode.cluster_authorization_failed,
        ErrorCode.invalid_txn_state,
        ErrorCode.invalid_producer_id_mapping,
        ErrorCode.unsupported_version,
        ErrorCode.unsupported_for_message_format,
        ErrorCode.invalid_transaction_timeout,
        ErrorCode.transaction_coordinator_fenced,
    }
)
_COORDINATOR_MOVED = frozenset({ErrorCode.not_coordinator, ErrorCode.coordinator_not_available})
_FENCING = frozenset({ErrorCode.producer_fenced, ErrorCode.invalid_producer_epoch})


def _mono_ms() -> int:
    return time.monotonic_ns() // 1_000_000


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


def _to_bytes(value: bytes | str | None) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    return bytes(value)


def _headers(headers: HeadersArg) -> tuple[tuple[str, bytes | None], ...]:
    if not headers:
        return ()
    items = headers.items() if isinstance(headers, Mapping) else headers
    return tuple((str(k), _to_bytes(v)) for k, v in items)


class _Delivery:
    """The per-record handle the accumulator carries: future plus callback."""

    __slots__ = ("callback", "future", "timestamp")

    def __init__(
        self,
        future: asyncio.Future[RecordMetadata],
        callback: DeliveryCallback | None,
        timestamp: int,
    ) -> None:
        self.future = future
        self.callback = callback
        self.timestamp = timestamp


def _unexpected(what: str, exc: Exception) -> KafkaClientError:
    """A bug or an unexpected response in ``what``: logged with its traceback, and turned
    into the client error that reports it (``exc`` is its cause)."""
    logger.error("%s failed unexpectedly", what, exc_info=exc)
    return unexpected_error(what, exc)


def _txn_error(code: ErrorCode, what: str) -> KafkaClientError:
    """A transactional coordinator error, classified."""
    if code in _FENCING:
        return ProducerFencedError(
            f"{what}: fenced by a newer producer with the same transactional.id", code
        )
    if code in _TXN_FATAL:
        exc = error_for(code, what)
        return exc if isinstance(exc, FatalError) else FatalError(what, code)
    exc = error_for(code, what)
    if isinstance(exc, RetriableError | AbortableError):
        return exc
    return AbortableError(what, code)


class AIOProducer:
    def __init__(self, config: Mapping[str, Any] | ClientConfig) -> None:
        self.config = config if isinstance(config, ClientConfig) else ClientConfig(config)
        cfg = self.config
        self.transactional_id: str | None = cfg["transactional.id"]
        self.idempotent: bool = bool(cfg["enable.idempotence"]) or self.transactional_id is not None
        if (
            self.transactional_id is not None
            and not cfg["enable.idempotence"]
            and cfg.is_set("enable.idempotence")
        ):
            raise ConfigError("a transactional producer needs enable.idempotence=true")
        self.acks: int = cfg["acks"]
        if self.idempotent and self.acks != -1:
            if cfg.is_set("enable.idempotence") or self.transactional_id is not None:
                raise ConfigError("idempotence needs acks=all")
            self.idempotent = False  # acks set explicitly to 0/1: idempotence off, as Java does
        self.two_phase_commit: bool = bool(cfg["transaction.two.phase.commit.enable"])
        self.compression: int = cfg["compression.type"]
        self.client = KafkaClient(cfg)
        self.accumulator = RecordAccumulator(
            batch_size=cfg["batch.size"], linger_ms=cfg["linger.ms"]
        )
        self.partitioner = StickyPartitioner(
            cfg["batch.size"], ignore_keys=cfg["partitioner.ignore.keys"]
        )
        self.txn = TxnStateMachine()
        self.producer_id = -1
        self.producer_epoch = -1
        self._sequences: dict[TopicPartition, int] = defaultdict(int)
        self._in_flight: set[TopicPartition] = set()
        self._pending: set[asyncio.Future[RecordMetadata]] = set()
        self._wakeup = asyncio.Event()
        self._sender: asyncio.Task[None] | None = None
        self._request_tasks: set[asyncio.Task[None]] = set()
        # Batches the sender drained and has not yet handed to a produce task.
        self._sender_batches: list[ProducerBatch] = []
        self._closed = False
        self._pid_lock = asyncio.Lock()
        self._send_lock = asyncio.Lock()
        self._need_epoch_bump = False
        self._fatal: KafkaClientError | None = None
        # transaction bookkeeping
        self._txn_partitions: set[TopicPartition] = set()
        self._txn_pending_partitions: set[TopicPartition] = set()
        self._txn_offsets_added = False
        self._txn_failure: KafkaClientError | None = None
        self._prepared: PreparedTxnState | None = None
        # A transaction kept open across a restart (KIP-939 keep_prepared_txn): the broker
        # has it ongoing even though this instance added no partitions to it.
        self._kept_prepared = False
        self._noop_complete = False
        self._add_partitions_task: asyncio.Task[None] | None = None

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        if self._sender is None:
            self._sender = asyncio.get_running_loop().create_task(
                self._run_sender(), name="oncelog-producer-sender"
            )

    async def close(self, timeout: float | None = None) -> None:
        """Send what is queued (within ``timeout`` seconds), then close connections."""
        if self._closed:
            return
        self.accumulator.close()
        self._wakeup.set()
        if self._fatal is None and self._pending:
            with contextlib.suppress(Exception):
                await self.flush(timeout)
        self._closed = True
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
        await self.client.close()

    def _check_usable(self) -> None:
        if self._fatal is not None:
            raise self._fatal
        if self._closed:
            raise IllegalStateError("producer is closed")

    # ------------------------------------------------------------------ send

    async def send(
        self,
        topic: str,
        value: bytes | str | None = None,
        key: bytes | str | None = None,
        partition: int | None = None,
        headers: HeadersArg = None,
        timestamp: int | None = None,
        on_delivery: DeliveryCallback | None = None,
    ) -> asyncio.Future[RecordMetadata]:
        """Queue one record; the returned future resolves when the broker acknowledges it."""
        self._check_usable()
        if self.transactional_id is not None:
            self.txn.check_call("send")
        await self.start()
        info = self.client.cached_topic_info(topic)
        if info is None:
            async with self._send_lock:  # FIFO: later sends wait behind this one
                info = await self.client.topic_info(topic, timeout_ms=self.config["max.block.ms"])
        key_b, value_b = _to_bytes(key), _to_bytes(value)
        if partition is None:
            partition = self.partitioner.partition(topic, key_b, info.num_partitions)
        elif not 0 <= partition < info.num_partitions:
            raise KafkaClientError(
                f"{topic} has no partition {partition} ({info.num_partitions} partitions)",
                ErrorCode.unknown_topic_or_partition,
            )
        tp = TopicPartition(topic, partition)
        record = RecordInput(
            key=key_b,
            value=value_b,
            headers=_headers(headers),
            timestamp=_wall_ms() if timestamp is None else int(timestamp),
        )
        size = len(key_b or b"") + len(value_b or b"")
        limit = self.config["max.request.size"]
        if size > limit:
            raise MessageSizeTooLargeError(f"record of {size} bytes > max.request.size={limit}")
        future: asyncio.Future[RecordMetadata] = asyncio.get_running_loop().create_future()
        delivery = _Delivery(future, on_delivery, record.timestamp or -1)
        if self.transactional_id is not None and tp not in self._txn_partitions:
            self._txn_pending_partitions.add(tp)
        _, full = self.accumulator.append(tp, record, delivery, _mono_ms())
        self.partitioner.on_append(topic, partition, size, info.num_partitions)
        self._pending.add(future)
        future.add_done_callback(self._pending.discard)
        if full or self.accumulator.linger_ms == 0:
            self._wakeup.set()
        elif len(self._pending) == 1:
            self._wakeup.set()  # let the sender schedule the linger timer
        return future

    async def flush(self, timeout: float | None = None) -> int:
        """Send everything queued and wait for the acknowledgements. Returns how many
        records are still undelivered (0 unless ``timeout`` seconds ran out)."""
        pending = list(self._pending)
        if not pending:
            return 0
        self.accumulator.begin_flush()
        self._wakeup.set()
        try:
            _, not_done = await asyncio.wait(pending, timeout=timeout)
        finally:
            self.accumulator.end_flush()
        return len(not_done)

    # ------------------------------------------------------------------ sender

    async def _run_sender(self) -> None:
        try:
            while not self._closed:
                try:
                    await self._sender_iteration()
                except asyncio.CancelledError:
                    raise
                except FatalError as exc:
                    self._enter_fatal(exc)
                except KafkaClientError as exc:
                    logger.warning("producer sender: %s", exc)
                    await asyncio.sleep(self.client.backoff_s(0))
                except Exception as exc:  # a bug or an unexpected response
                    self._on_sender_error(_unexpected("producer sender", exc))
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
            self._in_flight.discard(batch.tp)
        self._fail_unexpectedly(held + self.accumulator.remove_all(), error)
        self._wakeup.set()

    async def _sender_iteration(self) -> None:
        now = _mono_ms()
        self._expire_batches(now)
        if self.accumulator.has_queued() and self._fatal is None:
            if (
                self.idempotent
                and self.transactional_id is None
                and (self.producer_id < 0 or self._need_epoch_bump)
            ):
                await self._init_idempotent_producer_id()
            if self.transactional_id is not None and self._txn_pending_partitions:
                self._maybe_add_partitions()
            muted = frozenset(self._in_flight | self._txn_pending_partitions)
            ready = self.accumulator.ready(now, muted)
            if ready and (self.producer_id >= 0 or not self.idempotent):
                await self._send_ready(ready)
        delay = self.accumulator.next_ready_delay_ms(_mono_ms())
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
        muted = frozenset(self._in_flight | self._txn_pending_partitions)
        return bool(self.accumulator.ready(_mono_ms(), muted))

    def _expire_batches(self, now: int) -> None:
        timeout = self.config["delivery.timeout.ms"]
        for batch in self.accumulator.pop_expired(now, timeout, self._in_flight):
            age = now - batch.created_ms
            exc = KafkaTimeoutError(
                f"{batch.record_count} record(s) for {batch.tp} expired after {age} ms"
            )
            if batch.has_sequence:
                self._on_unresolved_sequence(exc)
            self._fail_batch(batch, exc)

    async def _send_ready(self, ready: list[TopicPartition]) -> None:
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
                self._in_flight.add(batch.tp)
            task = asyncio.get_running_loop().create_task(self._produce(leader, batches))
            self._sender_batches = []  # the produce task owns them now
            self._request_tasks.add(task)
            task.add_done_callback(self._request_tasks.discard)

    def _prepare_batch(self, batch: ProducerBatch) -> None:
        batch.attempts += 1
        batch.last_attempt_ms = _mono_ms()
        if self.idempotent and (
            not batch.has_sequence
            or batch.producer_epoch != self.producer_epoch
            or batch.producer_id != self.producer_id
        ):
            batch.producer_id = self.producer_id
            batch.producer_epoch = self.producer_epoch
            batch.base_sequence = self._sequences[batch.tp]
            self._sequences[batch.tp] = (batch.base_sequence + batch.record_count) & 0x7FFFFFFF
            batch.transactional = self.transactional_id is not None

    async def _produce(self, leader: int, batches: list[ProducerBatch]) -> None:
        try:
            await self._produce_batches(leader, batches)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug or an unexpected response: fail the records, loudly
            self._fail_unexpectedly(batches, _unexpected(f"produce to node {leader}", exc))
        finally:
            for b in batches:
                self._in_flight.discard(b.tp)
            self._wakeup.set()

    async def _produce_batches(self, leader: int, batches: list[ProducerBatch]) -> None:
        encoded = {id(b): b.encode(self.compression) for b in batches}
        by_topic: dict[str, list[ProducerBatch]] = defaultdict(list)
        for b in batches:
            by_topic[b.tp.topic].append(b)

        def build(version: int) -> Any:
            return request(
                api.PRODUCE,
                version,
                transactional_id=self.transactional_id,
                acks=self.acks,
                timeout=self.config["request.timeout.ms"],
                topic_data=tuple(
                    nested(
                        api.PRODUCE,
                        version,
                        "TopicProduceData",
                        name=topic,
                        partition_data=tuple(
                            nested(
                                api.PRODUCE,
                                version,
                                "PartitionProduceData",
                                index=b.tp.partition,
                                records=encoded[id(b)],
                            )
                            for b in items
                        ),
                    )
                    for topic, items in by_topic.items()
                ),
            )

        try:
            conn = await self.client.connection(leader)
            body = build(conn.version(api.PRODUCE))
            response = await conn.send(body, expect_response=self.acks != 0)
        except RetriableError as exc:
            for b in batches:
                self._retry_or_fail(b, exc)
            with contextlib.suppress(KafkaClientError):
                await self.client.refresh_metadata()
            return
        except KafkaClientError as exc:
            for b in batches:
                self._complete_failed(b, exc)
            return
        if response is None:  # acks=0
            for b in batches:
                self._complete_ok(b, -1, -1)
            return
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
            if isinstance(err, RetriableError):
                refresh = refresh or code in (
                    ErrorCode.not_leader_or_follower,
                    ErrorCode.unknown_topic_or_partition,
                    ErrorCode.leader_not_available,
                )
                self._retry_or_fail(b, err)
            else:
                self._complete_failed(b, err)
        if refresh:
            with contextlib.suppress(KafkaClientError):
                await self.client.refresh_metadata()

    def _retry_or_fail(self, batch: ProducerBatch, exc: KafkaClientError) -> None:
        age = _mono_ms() - batch.created_ms
        if (
            age >= self.config["delivery.timeout.ms"]
            or batch.attempts > self.config["retries"]
            or self._closed
        ):
            if batch.has_sequence:
                self._on_unresolved_sequence(exc)
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
        for i, delivery in enumerate(batch.handles):
            offset = base_offset + i if base_offset >= 0 else -1
            ts = log_append_time if log_append_time >= 0 else delivery.timestamp
            meta = RecordMetadata(batch.tp.topic, batch.tp.partition, offset, ts)
            if not delivery.future.done():
                delivery.future.set_result(meta)
            if delivery.callback is not None:
                self._run_callback(delivery.callback, None, meta)

    def _complete_failed(self, batch: ProducerBatch, exc: KafkaClientError) -> None:
        """A non-retriable error for this batch: classify, then fail its records."""
        code = exc.code
        if code in _FENCING or isinstance(exc, FatalError):
            fatal = exc if isinstance(exc, FatalError) else ProducerFencedError(str(exc), code)
            self._fail_batch(batch, fatal)
            self._enter_fatal(fatal)
            return
        if isinstance(exc, OutOfOrderSequenceError | UnknownProducerIdError):
            self._on_unresolved_sequence(exc)
        elif self.transactional_id is not None:
            self._enter_abortable(exc)
        self._fail_batch(batch, exc)

    def _fail_unexpectedly(self, batches: list[ProducerBatch], error: KafkaClientError) -> None:
        """Fail the records of ``batches`` not yet completed after an unexpected error; one
        that was sent may or may not have been written, so its sequence is unresolved."""
        for b in batches:
            if all(d.future.done() for d in b.handles):
                continue  # completed before the failure
            if b.has_sequence:
                self._on_unresolved_sequence(error)
            elif self.transactional_id is not None:
                self._enter_abortable(error)  # the transaction has lost records
            self._fail_batch(b, error)

    def _on_unresolved_sequence(self, exc: KafkaClientError) -> None:
        """The broker's view of our sequences is unknown or broken: bump the epoch."""
        if not self.idempotent:
            return
        self._need_epoch_bump = True
        if self.transactional_id is not None:
            self._enter_abortable(exc)
        logger.warning("producer %s: %s; the epoch will be bumped", self.producer_id, exc)

    def _fail_batch(self, batch: ProducerBatch, exc: KafkaClientError) -> None:
        if self.transactional_id is not None and self._txn_failure is None:
            self._txn_failure = exc
        for delivery in batch.handles:
            if not delivery.future.done():
                delivery.future.set_exception(exc)
                delivery.future.exception()  # mark retrieved: the caller may not look
            if delivery.callback is not None:
                self._run_callback(delivery.callback, exc, None)

    @staticmethod
    def _run_callback(
        callback: DeliveryCallback, exc: KafkaClientError | None, meta: RecordMetadata | None
    ) -> None:
        try:
            callback(exc, meta)
        except Exception:
            logger.exception("on_delivery callback raised")

    def _enter_fatal(self, exc: KafkaClientError) -> None:
        if self._fatal is None:
            logger.error("producer %r: fatal error: %s", self.transactional_id, exc)
        self._fatal = self._fatal or exc
        if self.transactional_id is not None and self.txn.can(TxnEvent.FATAL_ERROR):
            self.txn.fire(TxnEvent.FATAL_ERROR, self._fatal)
        for batch in self.accumulator.remove_all():
            self._fail_batch(batch, self._fatal)

    def _enter_abortable(self, exc: KafkaClientError) -> None:
        if self.txn.can(TxnEvent.ABORTABLE_ERROR):
            error = exc
            if not isinstance(exc, AbortableError):
                error = TransactionAbortableError(str(exc), exc.code)
                error.__cause__ = exc
            self.txn.fire(TxnEvent.ABORTABLE_ERROR, error)

    # ------------------------------------------------------------------ producer ids

    async def _init_idempotent_producer_id(self) -> None:
        async with self._pid_lock:
            if self.producer_id >= 0 and not self._need_epoch_bump:
                return
            bump = self.producer_id >= 0 and self._need_epoch_bump

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
            self._need_epoch_bump = False

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
        self._sequences.clear()
        # Batches queued but not yet sent get new sequences when drained.
        for batch in self.accumulator.batches():
            batch.base_sequence = -1

    # ------------------------------------------------------------------ transactions

    def _require_transactional(self, call: str) -> None:
        self._check_usable()
        if self.transactional_id is None:
            raise IllegalStateError(f"{call} needs transactional.id")
        self.txn.check_call(call)

    async def _txn_coordinator_call(
        self, api_key: int, build: Callable[[int], Any], what: str, check: Callable[[Any], None]
    ) -> Any:
        """Send a request to the transaction coordinator, retrying retriable errors and
        rediscovering the coordinator when it moved. ``check`` raises on error codes."""
        assert self.transactional_id is not None
        txn_id = self.transactional_id

        async def attempt() -> Any:
            node = await self.client.find_coordinator(COORDINATOR_TRANSACTION, txn_id)
            try:
                response = await self.client.call(node, api_key, build)
                check(response)
            except RetriableError as exc:
                if (
                    exc.code in _COORDINATOR_MOVED
                    or exc.code == ErrorCode.network_exception
                    or exc.code == ErrorCode.request_timed_out
                ):
                    self.client.invalidate_coordinator(COORDINATOR_TRANSACTION, txn_id)
                raise
            return response

        try:
            return await self.client.retrying(
                attempt, timeout_ms=self.config["max.block.ms"], what=what
            )
        except FatalError as exc:
            self._enter_fatal(exc)
            raise

    async def init_transactions(
        self, keep_prepared_txn: bool = False, timeout: float | None = None
    ) -> None:
        self._require_transactional("init_transactions")
        await self.start()
        assert self.transactional_id is not None
        two_pc = self.two_phase_commit
        self.txn.fire(TxnEvent.INIT)
        needs_v6 = two_pc or keep_prepared_txn

        def build(version: int) -> Any:
            if needs_v6 and version < 6:
                raise UnsupportedVersionError(
                    f"two-phase commit needs InitProducerId v6; the broker offers up to v{version}"
                )
            return request(
                api.INIT_PRODUCER_ID,
                version,
                transactional_id=self.transactional_id,
                transaction_timeout=self.config["transaction.timeout.ms"],
                producer_id=self.producer_id if version >= 3 else -1,
                producer_epoch=self.producer_epoch if version >= 3 else -1,
                enable2_pc=two_pc,
                keep_prepared_txn=keep_prepared_txn,
            )

        def check(response: Any) -> None:
            if response.error_code != ErrorCode.none:
                raise _txn_error(ErrorCode(response.error_code), "InitProducerId")

        try:
            response = await self._txn_coordinator_call(
                api.INIT_PRODUCER_ID, build, "InitProducerId", check
            )
        except FatalError:
            raise
        except KafkaClientError:
            self.txn.fire(TxnEvent.INIT_FAILED)
            raise
        self._set_producer_id(int(response.producer_id), int(response.producer_epoch))
        ongoing_pid = int(getattr(response, "ongoing_txn_producer_id", -1))
        ongoing_epoch = int(getattr(response, "ongoing_txn_producer_epoch", -1))
        self._noop_complete = False
        if keep_prepared_txn and ongoing_pid >= 0:
            self._prepared = PreparedTxnState(producer_id=ongoing_pid, epoch=ongoing_epoch)
            self._kept_prepared = True
            self.txn.fire(TxnEvent.INIT_DONE_PREPARED)
            logger.info(
                "producer %r: kept prepared transaction %s", self.transactional_id, self._prepared
            )
        else:
            self._prepared = None
            self._noop_complete = keep_prepared_txn
            self.txn.fire(TxnEvent.INIT_DONE)
        self._reset_txn()

    def _reset_txn(self) -> None:
        self._txn_partitions.clear()
        self._txn_pending_partitions.clear()
        self._txn_offsets_added = False
        self._txn_failure = None

    async def begin_transaction(self) -> None:
        self._require_transactional("begin_transaction")
        self.txn.fire(TxnEvent.BEGIN)
        self._reset_txn()
        self._prepared = None
        self._kept_prepared = False
        self._noop_complete = False

    def _maybe_add_partitions(self) -> None:
        if self._add_partitions_task is not None and not self._add_partitions_task.done():
            return
        if (
            self.txn.state is not TxnState.IN_TRANSACTION
            and self.txn.state is not TxnState.COMMITTING_TRANSACTION
        ):
            return
        self._add_partitions_task = asyncio.get_running_loop().create_task(self._add_partitions())

    async def _add_partitions(self) -> None:
        tps = sorted(self._txn_pending_partitions)
        if not tps:
            return
        by_topic: dict[str, list[int]] = defaultdict(list)
        for tp in tps:
            by_topic[tp.topic].append(tp.partition)

        def build(version: int) -> Any:
            topics = tuple(
                nested(
                    api.ADD_PARTITIONS_TO_TXN,
                    version,
                    "AddPartitionsToTxnTopic",
                    name=t,
                    partitions=tuple(ps),
                )
                for t, ps in by_topic.items()
            )
            return request(
                api.ADD_PARTITIONS_TO_TXN,
                version,
                v3_and_below_transactional_id=self.transactional_id,
                v3_and_below_producer_id=self.producer_id,
                v3_and_below_producer_epoch=self.producer_epoch,
                v3_and_below_topics=topics,
            )

        def check(response: Any) -> None:
            errors: dict[TopicPartition, ErrorCode] = {}
            for topic in response.results_by_topic_v3_and_below:
                for part in topic.results_by_partition:
                    code = ErrorCode(part.partition_error_code)
                    if code != ErrorCode.none:
                        errors[TopicPartition(topic.name, int(part.partition_index))] = code
            if not errors:
                return
            codes = set(errors.values()) - {ErrorCode.operation_not_attempted}
            for code in codes:
                exc = _txn_error(code, f"AddPartitionsToTxn {sorted(errors)}")
                if isinstance(exc, FatalError):
                    raise exc
            for code in codes:
                exc = _txn_error(code, f"AddPartitionsToTxn {sorted(errors)}")
                if isinstance(exc, RetriableError):
                    raise exc
            code = next(iter(codes or {ErrorCode.operation_not_attempted}))
            raise _txn_error(code, f"AddPartitionsToTxn {sorted(errors)}")

        try:
            await self._txn_coordinator_call(
                api.ADD_PARTITIONS_TO_TXN, build, "AddPartitionsToTxn", check
            )
        except FatalError:
            return
        except Exception as exc:
            # An error code, or a bug / unexpected response (unknown whether the partitions
            # joined): as Java's AddPartitionsToTxnHandler, the transaction becomes abortable.
            error = (
                exc if isinstance(exc, KafkaClientError) else _unexpected("AddPartitionsToTxn", exc)
            )
            self._enter_abortable(error)
            for tp in tps:
                self._txn_pending_partitions.discard(tp)
            for batch in self.accumulator.remove_all():
                self._fail_batch(batch, self.txn.error or error)
            return
        finally:
            self._wakeup.set()
        for tp in tps:
            self._txn_pending_partitions.discard(tp)
            self._txn_partitions.add(tp)
        logger.debug("producer %r: added %s to the transaction", self.transactional_id, tps)

    async def send_offsets_to_transaction(
        self,
        offsets: Mapping[TopicPartition, OffsetAndMetadata | int],
        group_metadata: ConsumerGroupMetadata | str,
    ) -> None:
        self._require_transactional("send_offsets_to_transaction")
        group = (
            group_metadata
            if isinstance(group_metadata, ConsumerGroupMetadata)
            else ConsumerGroupMetadata(group_metadata)
        )

        def check_add(response: Any) -> None:
            if response.error_code != ErrorCode.none:
                raise _txn_error(
                    ErrorCode(response.error_code), f"AddOffsetsToTxn {group.group_id}"
                )

        try:
            if not self._txn_offsets_added:
                await self._txn_coordinator_call(
                    api.ADD_OFFSETS_TO_TXN,
                    lambda v: request(
                        api.ADD_OFFSETS_TO_TXN,
                        v,
                        transactional_id=self.transactional_id,
                        producer_id=self.producer_id,
                        producer_epoch=self.producer_epoch,
                        group_id=group.group_id,
                    ),
                    "AddOffsetsToTxn",
                    check_add,
                )
                self._txn_offsets_added = True
            await self._txn_offset_commit(offsets, group)
        except FatalError:
            raise
        except KafkaClientError as exc:
            self._enter_abortable(exc)
            raise self.txn.error or exc from None

    async def _txn_offset_commit(
        self,
        offsets: Mapping[TopicPartition, OffsetAndMetadata | int],
        group: ConsumerGroupMetadata,
    ) -> None:
        by_topic: dict[str, list[tuple[int, OffsetAndMetadata]]] = defaultdict(list)
        for tp, om in offsets.items():
            meta = om if isinstance(om, OffsetAndMetadata) else OffsetAndMetadata(int(om))
            by_topic[tp.topic].append((tp.partition, meta))

        def build(version: int) -> Any:
            return request(
                api.TXN_OFFSET_COMMIT,
                version,
                transactional_id=self.transactional_id,
                group_id=group.group_id,
                producer_id=self.producer_id,
                producer_epoch=self.producer_epoch,
                generation_id=group.generation_id,
                member_id=group.member_id,
                group_instance_id=group.group_instance_id,
                topics=tuple(
                    nested(
                        api.TXN_OFFSET_COMMIT,
                        version,
                        "TxnOffsetCommitRequestTopic",
                        name=t,
                        partitions=tuple(
                            nested(
                                api.TXN_OFFSET_COMMIT,
                                version,
                                "TxnOffsetCommitRequestPartition",
                                partition_index=p,
                                committed_offset=m.offset,
                                committed_leader_epoch=m.leader_epoch,
                                committed_metadata=m.metadata,
                            )
                            for p, m in parts
                        ),
                    )
                    for t, parts in by_topic.items()
                ),
            )

        async def attempt() -> None:
            node = await self.client.find_coordinator(COORDINATOR_GROUP, group.group_id)
            try:
                response = await self.client.call(node, api.TXN_OFFSET_COMMIT, build)
            except RetriableError:
                self.client.invalidate_coordinator(COORDINATOR_GROUP, group.group_id)
                raise
            for topic in response.topics:
                for part in topic.partitions:
                    code = ErrorCode(part.error_code)
                    if code == ErrorCode.none:
                        continue
                    if code in _COORDINATOR_MOVED:
                        self.client.invalidate_coordinator(COORDINATOR_GROUP, group.group_id)
                    if code in (
                        ErrorCode.unknown_member_id,
                        ErrorCode.illegal_generation,
                        ErrorCode.fenced_instance_id,
                    ):
                        raise AbortableError(
                            f"TxnOffsetCommit: consumer group {group.group_id} rebalanced", code
                        )
                    raise _txn_error(code, f"TxnOffsetCommit {topic.name}-{part.partition_index}")

        try:
            await self.client.retrying(
                attempt, timeout_ms=self.config["max.block.ms"], what="TxnOffsetCommit"
            )
        except FatalError as exc:
            self._enter_fatal(exc)
            raise

    async def _flush_transaction(self) -> None:
        """Wait until every record of the transaction is acknowledged; raise the first failure."""
        while self._pending or self._txn_pending_partitions:
            remaining = await self.flush(self.config["max.block.ms"] / 1000)
            if remaining:
                raise KafkaTimeoutError(f"{remaining} records not acknowledged within max.block.ms")
            if self._fatal is not None:
                raise self._fatal
        if self._fatal is not None:
            raise self._fatal
        if self._txn_failure is not None or self.txn.state is TxnState.ABORTABLE_ERROR:
            exc = self.txn.error or self._txn_failure
            assert exc is not None
            self._enter_abortable(exc)
            raise self.txn.error or exc

    async def prepare_transaction(self) -> PreparedTxnState:
        """KIP-939 prepare: flush, then hold the transaction open for an external decision."""
        self._require_transactional("prepare_transaction")
        if not self.two_phase_commit:
            raise InvalidTxnStateError(
                "prepare_transaction needs transaction.two.phase.commit.enable=true"
            )
        await self._flush_transaction()
        self.txn.fire(TxnEvent.PREPARE)
        self._prepared = PreparedTxnState(producer_id=self.producer_id, epoch=self.producer_epoch)
        logger.info("producer %r: prepared transaction %s", self.transactional_id, self._prepared)
        return self._prepared

    async def commit_transaction(self) -> None:
        self._require_transactional("commit_transaction")
        if self.txn.state is TxnState.IN_TRANSACTION:
            await self._flush_transaction()
        self.txn.fire(TxnEvent.COMMIT)
        await self._end_transaction(commit=True)

    async def abort_transaction(self) -> None:
        self._require_transactional("abort_transaction")
        self.txn.fire(TxnEvent.ABORT)
        # Unsent records of an aborted transaction are dropped; sent ones are awaited.
        aborted = TransactionAbortableError("transaction aborted before the record was sent")
        for batch in self.accumulator.remove_all():
            self._fail_batch(batch, aborted)
        self._txn_pending_partitions.clear()
        if self._pending:
            await self.flush(self.config["request.timeout.ms"] / 1000)
        await self._end_transaction(commit=False)
        if self._need_epoch_bump:
            await self._bump_transactional_epoch()

    async def complete_transaction(self, state: PreparedTxnState | str) -> None:
        """Commit if ``state`` is the prepared transaction, abort otherwise (KIP-939)."""
        self._check_usable()
        if self.transactional_id is None:
            raise IllegalStateError("complete_transaction needs transactional.id")
        given = state if isinstance(state, PreparedTxnState) else PreparedTxnState(state)
        if self.txn.state is TxnState.READY and self._noop_complete:
            logger.info(
                "producer %r: no ongoing transaction, complete(%s) is a no-op",
                self.transactional_id,
                given,
            )
            return
        self.txn.check_call("complete_transaction")
        if self.txn.state is TxnState.COMMITTING_TRANSACTION:
            await self.commit_transaction()
        elif self.txn.state is TxnState.ABORTING_TRANSACTION:
            await self.abort_transaction()
        elif self._prepared is not None and given == self._prepared:
            logger.info("producer %r: completing %s by commit", self.transactional_id, given)
            await self.commit_transaction()
        else:
            logger.info(
                "producer %r: state %s does not match prepared %s; aborting",
                self.transactional_id,
                given,
                self._prepared,
            )
            await self.abort_transaction()

    @property
    def prepared_state(self) -> PreparedTxnState | None:
        return self._prepared

    async def _end_transaction(self, *, commit: bool) -> None:
        needs_end = bool(self._txn_partitions or self._txn_offsets_added or self._kept_prepared)
        what = "EndTxn(commit)" if commit else "EndTxn(abort)"
        if needs_end:

            def check(response: Any) -> None:
                code = ErrorCode(response.error_code)
                if code == ErrorCode.none:
                    return
                exc = _txn_error(code, what)
                if not commit and isinstance(exc, AbortableError):
                    raise FatalError(f"{what}: {exc}", code)
                raise exc

            try:
                await self._txn_coordinator_call(
                    api.END_TXN,
                    lambda v: request(
                        api.END_TXN,
                        v,
                        transactional_id=self.transactional_id,
                        producer_id=self.producer_id,
                        producer_epoch=self.producer_epoch,
                        committed=commit,
                    ),
                    what,
                    check,
                )
            except AbortableError as exc:
                self._enter_abortable(exc)
                raise
        self.txn.fire(TxnEvent.END_DONE)
        logger.info(
            "producer %r: transaction %s",
            self.transactional_id,
            "committed" if commit else "aborted",
        )
        self._reset_txn()
        self._prepared = None
        self._kept_prepared = False

    async def _bump_transactional_epoch(self) -> None:
        def build(version: int) -> Any:
            return request(
                api.INIT_PRODUCER_ID,
                version,
                transactional_id=self.transactional_id,
                transaction_timeout=self.config["transaction.timeout.ms"],
                producer_id=self.producer_id if version >= 3 else -1,
                producer_epoch=self.producer_epoch if version >= 3 else -1,
                enable2_pc=self.two_phase_commit,
                keep_prepared_txn=False,
            )

        def check(response: Any) -> None:
            if response.error_code != ErrorCode.none:
                raise _txn_error(ErrorCode(response.error_code), "InitProducerId (epoch bump)")

        response = await self._txn_coordinator_call(
            api.INIT_PRODUCER_ID, build, "InitProducerId", check
        )
        self._set_producer_id(int(response.producer_id), int(response.producer_epoch))
        self._need_epoch_bump = False

    # ------------------------------------------------------------------ misc

    async def partitions_for(self, topic: str) -> list[int]:
        info = await self.client.topic_info(topic)
        return sorted(info.leaders)
