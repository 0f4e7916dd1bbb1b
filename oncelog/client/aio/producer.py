"""The asyncio producer's facade: the user API, delegating to the sender and the
transaction manager.

``send`` picks the partition (murmur2 for keys, sticky otherwise) and appends to the
``RecordAccumulator``; ``oncelog.client.aio.sender`` drains it to the brokers (batches in
flight, retries, expiry, sequences per batch). ``oncelog.client.aio.transaction_manager``
(on ``oncelog.client.aio.idempotence``) owns the producer id and epoch, the fatal error and
every transaction call: init_transactions, begin/commit/abort, send_offsets_to_transaction,
KIP-939 prepare/complete and keep_prepared_txn. The states and the calls each allows are in
``oncelog.client.txn_state``.

Idempotence is on by default; acks set explicitly to 0 or 1 turns it off (as in Java), and a
transactional producer needs it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

from oncelog.client.accumulator import RecordAccumulator
from oncelog.client.aio.client import KafkaClient, TopicInfo
from oncelog.client.aio.sender import DeliveryCallback, Sender, mono_ms
from oncelog.client.aio.transaction_manager import TransactionManager
from oncelog.client.config import ClientConfig
from oncelog.client.delivery import RecordFuture, bound
from oncelog.client.errors import (
    ConfigError,
    KafkaClientError,
    MessageSizeTooLargeError,
)
from oncelog.client.partitioner import StickyPartitioner
from oncelog.client.txn_state import TxnStateMachine
from oncelog.client.types import (
    ConsumerGroupMetadata,
    OffsetAndMetadata,
    PreparedTxnState,
    TopicPartition,
)
from oncelog.errors import ErrorCode

logger = logging.getLogger(__name__)

__all__ = ["AIOProducer", "DeliveryCallback", "HeadersArg"]

HeadersArg = Mapping[str, bytes | str | None] | Sequence[tuple[str, bytes | str | None]] | None


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
        self.transactions = TransactionManager(
            cfg,
            self.client,
            self.accumulator,
            transactional_id=self.transactional_id,
            idempotent=self.idempotent,
            two_phase_commit=self.two_phase_commit,
        )
        self.sender = Sender(
            cfg,
            self.client,
            self.accumulator,
            self.transactions,
            acks=self.acks,
            compression=self.compression,
        )
        self._send_lock = asyncio.Lock()
        self._max_request_size: int = cfg["max.request.size"]
        self._tps: dict[str, list[TopicPartition]] = {}  # made once, not per record

    @property
    def txn(self) -> TxnStateMachine:
        return self.transactions.txn

    @property
    def producer_id(self) -> int:
        return self.transactions.producer_id

    @property
    def producer_epoch(self) -> int:
        return self.transactions.producer_epoch

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        await self.sender.start()

    async def close(self, timeout: float | None = None) -> None:
        """Send what is queued (within ``timeout`` seconds), then close connections."""
        if self.sender.closed:
            return
        await self.sender.close(timeout)
        await self.client.close()

    def _check_usable(self) -> None:
        self.transactions.check_usable()

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
    ) -> RecordFuture:
        """Queue one record; the returned future resolves when the broker acknowledges it."""
        self.check_send()
        await self.start()
        info = await self.wait_topic_info(topic)
        future = RecordFuture(self.accumulator.cond)
        self.append(info, future, topic, value, key, partition, headers, timestamp, on_delivery)
        bound([future], self.accumulator.cond)
        return future

    def check_send(self) -> None:
        self._check_usable()
        if self.transactional_id is not None:
            self.txn.check_call("send")

    async def wait_topic_info(self, topic: str) -> TopicInfo:
        """The topic's metadata, fetched (within ``max.block.ms``) unless it is cached."""
        info = self.client.cached_topic_info(topic)
        if info is None:
            async with self._send_lock:  # FIFO: later sends wait behind this one
                info = await self.client.topic_info(topic, timeout_ms=self.config["max.block.ms"])
        return info

    def append(
        self,
        info: TopicInfo,
        future: RecordFuture,
        topic: str,
        value: bytes | str | None,
        key: bytes | str | None = None,
        partition: int | None = None,
        headers: HeadersArg = None,
        timestamp: int | None = None,
        on_delivery: DeliveryCallback | None = None,
        now_ms: int | None = None,
        checked: bool = False,
    ) -> None:
        """Append one record of ``topic`` (whose metadata is ``info``) and bind ``future``
        to it; the caller then calls ``delivery.bound`` for the futures it bound. Raises
        what stops the record (the future is then left alone). ``checked``: the caller
        called ``check_send`` since the event loop last ran anything else."""
        if not checked:
            self.check_send()
        key_b = key if key is None or type(key) is bytes else _to_bytes(key)
        value_b = value if value is None or type(value) is bytes else _to_bytes(value)
        num_partitions = info.num_partitions
        if partition is None:
            partition = 0
            if num_partitions != 1:  # (one partition: no partitioner work per record)
                partition = self.partitioner.partition(topic, key_b, num_partitions)
        elif not 0 <= partition < num_partitions:
            raise KafkaClientError(
                f"{topic} has no partition {partition} ({num_partitions} partitions)",
                ErrorCode.unknown_topic_or_partition,
            )
        size = (len(key_b) if key_b else 0) + (len(value_b) if value_b else 0)
        if size > self._max_request_size:
            raise MessageSizeTooLargeError(
                f"record of {size} bytes > max.request.size={self._max_request_size}"
            )
        tps = self._tps.get(topic)
        if tps is None or len(tps) < num_partitions:
            tps = self._tps[topic] = [TopicPartition(topic, p) for p in range(num_partitions)]
        tp = tps[partition]
        if timestamp is None:
            timestamp = _wall_ms()
        elif type(timestamp) is not int:
            timestamp = int(timestamp)
        future.timestamp = timestamp
        if self.transactional_id is not None:
            self.transactions.on_append(tp)
        batch, index, full = self.accumulator.append(
            tp,
            key_b,
            value_b,
            _headers(headers) if headers else (),
            timestamp,
            mono_ms() if now_ms is None else now_ms,
            on_delivery,
        )
        future.bind(batch.result, index)
        if num_partitions > 1:
            self.partitioner.on_append(topic, partition, size, num_partitions)
        if index == 0:
            self.sender.add_pending(batch)
            self.sender.wakeup()  # to send it, or to schedule its linger timer
        elif full or self.accumulator.linger_ms == 0:
            self.sender.wakeup()

    async def flush(self, timeout: float | None = None) -> int:
        """Send everything queued and wait for the acknowledgements. Returns how many
        records are still undelivered (0 unless ``timeout`` seconds ran out)."""
        return await self.sender.flush(timeout)

    _run_callback = staticmethod(Sender._run_callback)

    # ------------------------------------------------------------------ transactions

    async def init_transactions(
        self, keep_prepared_txn: bool = False, timeout: float | None = None
    ) -> None:
        await self.transactions.init_transactions(keep_prepared_txn, timeout)

    async def begin_transaction(self) -> None:
        await self.transactions.begin_transaction()

    async def send_offsets_to_transaction(
        self,
        offsets: Mapping[TopicPartition, OffsetAndMetadata | int],
        group_metadata: ConsumerGroupMetadata | str,
    ) -> None:
        await self.transactions.send_offsets_to_transaction(offsets, group_metadata)

    async def prepare_transaction(self) -> PreparedTxnState:
        """KIP-939 prepare: flush, then hold the transaction open for an external decision."""
        return await self.transactions.prepare_transaction()

    async def commit_transaction(self) -> None:
        await self.transactions.commit_transaction()

    async def abort_transaction(self) -> None:
        await self.transactions.abort_transaction()

    async def complete_transaction(self, state: PreparedTxnState | str) -> None:
        """Commit if ``state`` is the prepared transaction, abort otherwise (KIP-939)."""
        await self.transactions.complete_transaction(state)

    @property
    def prepared_state(self) -> PreparedTxnState | None:
        return self.transactions.prepared_state

    # ------------------------------------------------------------------ misc

    async def partitions_for(self, topic: str) -> list[int]:
        info = await self.client.topic_info(topic)
        return sorted(info.leaders)
