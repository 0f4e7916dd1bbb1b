"""oncelog.client.Producer: the synchronous producer over ``oncelog.client.aio``'s core
(idempotent by default, transactional with ``transactional.id``, KIP-939 two-phase commit);
its core runs on the producer's own event loop thread."""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Mapping
from typing import Any

from oncelog.client._loop import LoopThread
from oncelog.client.aio.client import TopicInfo
from oncelog.client.aio.producer import AIOProducer, DeliveryCallback, HeadersArg
from oncelog.client.aio.sender import mono_ms
from oncelog.client.config import ClientConfig
from oncelog.client.delivery import RecordFuture, bound
from oncelog.client.errors import IllegalStateError, KafkaClientError
from oncelog.client.txn_state import TxnState
from oncelog.client.types import (
    ConsumerGroupMetadata,
    OffsetAndMetadata,
    PreparedTxnState,
    TopicPartition,
)

__all__ = ["Producer"]

_SendArgs = tuple[str, Any, Any, int | None, HeadersArg, int | None, DeliveryCallback | None]


class Producer:
    """Kafka producer: idempotent by default, transactional with ``transactional.id``."""

    def __init__(self, config: Mapping[str, Any]) -> None:
        self._config = ClientConfig(config)
        self._loop = LoopThread(f"oncelog-producer-{self._config['client.id']}")
        self._core = AIOProducer(self._config)
        # Records from ``send`` to the loop thread: appended there, popped here (deque's
        # append and popleft are atomic). ``_scheduled``: a processor task runs or is due.
        self._queue: deque[tuple[_SendArgs, RecordFuture]] = deque()
        self._scheduled = False
        self._processor: asyncio.Task[None] | None = None
        self._cond = self._core.accumulator.cond
        self._closed = False

    # ------------------------------------------------------------------ sending

    def send(
        self,
        topic: str,
        value: bytes | str | None = None,
        key: bytes | str | None = None,
        partition: int | None = None,
        headers: HeadersArg = None,
        timestamp: int | None = None,
        on_delivery: DeliveryCallback | None = None,
    ) -> RecordFuture:
        """Queue a record. The future resolves to its RecordMetadata once acknowledged, or
        fails with the error; ``on_delivery(error, metadata)`` is called either way."""
        if self._closed:
            raise IllegalStateError("producer is closed")
        self._core.check_send()
        if timestamp is None:
            timestamp = time.time_ns() // 1_000_000  # CreateTime is when send was called
        future = RecordFuture(self._cond, timestamp)
        args: _SendArgs = (topic, value, key, partition, headers, timestamp, on_delivery)
        self._queue.append((args, future))
        if not self._scheduled:
            self._scheduled = True
            self._loop.call_soon(self._kick)
        return future

    produce = send  # confluent-kafka's name

    def _kick(self) -> None:
        if self._processor is None or self._processor.done():
            self._processor = asyncio.get_running_loop().create_task(self._process())

    async def _process(self) -> None:
        # One task hands records to the core in submission order, many per loop turn.
        core = self._core
        await core.start()
        queue = self._queue
        while True:
            if not queue:
                self._scheduled = False
                if not queue:  # nothing came in before the flag went down: a send sets it
                    return
                self._scheduled = True
            items = [queue.popleft() for _ in range(len(queue))]
            now_ms = mono_ms()
            futures = []
            infos: dict[str, TopicInfo] = {}  # looked up once a round
            checked = False  # check_send passed since the last await
            append = core.append
            for args, future in items:
                topic, value, key, partition, headers, timestamp, on_delivery = args
                try:
                    info = infos.get(topic) or core.client.cached_topic_info(topic)
                    if info is None:
                        checked = False
                        info = await core.wait_topic_info(topic)
                    infos[topic] = info
                    if not checked:
                        core.check_send()
                        checked = True
                    append(
                        info, future, topic, value, key, partition, headers, timestamp,
                        on_delivery, now_ms, True,
                    )  # fmt: skip
                    futures.append(future)
                except Exception as exc:  # delivered to the caller through the future
                    future.fail(exc)
                    if on_delivery is not None and isinstance(exc, KafkaClientError):
                        AIOProducer._run_callback(on_delivery, exc, None)  # raising: logged
            bound(futures, self._cond)
            # Let the sender send what is ready and responses be read while more records
            # come in (a caller sending without pause would otherwise keep the loop here).
            await asyncio.sleep(0)

    async def _settled(self) -> None:
        """Wait until every record handed to ``send`` so far is in the core."""
        while True:
            processor = self._processor
            if processor is not None and not processor.done():
                await asyncio.shield(processor)
                continue
            if not self._queue:
                return
            self._kick()

    async def _settled_then(self, coro: Any) -> Any:
        await self._settled()
        return await coro

    def _run(self, coro: Any, timeout: float | None = None) -> Any:
        return self._loop.run(self._settled_then(coro), timeout)

    def flush(self, timeout: float | None = None) -> int:
        """Wait for every queued record's acknowledgement; returns how many are still
        outstanding (0 unless ``timeout`` seconds ran out)."""
        return int(self._run(self._core.flush(timeout)))

    def partitions_for(self, topic: str) -> list[int]:
        return list(self._run(self._core.partitions_for(topic)))

    def close(self, timeout: float | None = None) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._run(self._core.close(timeout))
        finally:
            self._loop.stop()

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ transactions

    @property
    def transaction_state(self) -> TxnState:
        return self._core.txn.state

    @property
    def producer_id(self) -> int:
        return self._core.producer_id

    @property
    def producer_epoch(self) -> int:
        return self._core.producer_epoch

    def init_transactions(
        self, keep_prepared_txn: bool = False, timeout: float | None = None
    ) -> None:
        """InitProducerId for ``transactional.id``: fences older instances and aborts their
        open transaction — unless ``keep_prepared_txn`` (KIP-939), which keeps a prepared
        transaction so that ``complete_transaction`` can finish it."""
        self._run(self._core.init_transactions(keep_prepared_txn), timeout)

    def begin_transaction(self) -> None:
        self._run(self._core.begin_transaction())

    def send_offsets_to_transaction(
        self,
        offsets: Mapping[TopicPartition, OffsetAndMetadata | int],
        group_metadata: ConsumerGroupMetadata | str,
        timeout: float | None = None,
    ) -> None:
        self._run(self._core.send_offsets_to_transaction(offsets, group_metadata), timeout)

    def commit_transaction(self, timeout: float | None = None) -> None:
        self._run(self._core.commit_transaction(), timeout)

    def abort_transaction(self, timeout: float | None = None) -> None:
        self._run(self._core.abort_transaction(), timeout)

    def prepare_transaction(self, timeout: float | None = None) -> PreparedTxnState:
        """KIP-939 prepare: flush everything, keep the transaction open, return its state."""
        result = self._run(self._core.prepare_transaction(), timeout)
        assert isinstance(result, PreparedTxnState)
        return result

    def complete_transaction(
        self, state: PreparedTxnState | str, timeout: float | None = None
    ) -> None:
        """Commit the prepared transaction if ``state`` matches it, abort it otherwise."""
        self._run(self._core.complete_transaction(state), timeout)

    @property
    def prepared_state(self) -> PreparedTxnState | None:
        return self._core.prepared_state

