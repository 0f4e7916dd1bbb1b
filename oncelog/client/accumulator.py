"""Producer batching, sans-IO: records are collected per partition into batches.

A partition's head batch is *ready* to send when it is full (``batch.size``), when it has
waited ``linger.ms``, when more batches queue behind it, or while the producer flushes or
closes. The sender drains at most one batch per partition per request, and keeps order:
a retried batch goes back to the head of its queue. Times are monotonic milliseconds passed
in by the caller; nothing here sleeps or does I/O.

Each record carries an opaque ``handle`` (the I/O layer's delivery future) that comes back
with its batch, so the accumulator knows nothing about futures or event loops.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any

from oncelog.client.types import TopicPartition
from oncelog.records.batch import HEADER_SIZE
from oncelog.records.codec import RecordInput, encode_batch

__all__ = ["ProducerBatch", "RecordAccumulator", "estimate_record_size"]

_RECORD_OVERHEAD = 21  # attributes, deltas and length varints, generously


def estimate_record_size(
    key: bytes | None, value: bytes | None, headers: Iterable[tuple[str, bytes | None]]
) -> int:
    size = _RECORD_OVERHEAD + (len(key) if key else 0) + (len(value) if value else 0)
    for h_key, h_value in headers:
        size += 10 + len(h_key) + (len(h_value) if h_value else 0)
    return size


@dataclass(eq=False)
class ProducerBatch:
    """Records for one partition, sent (and possibly retried) as one RecordBatch."""

    tp: TopicPartition
    created_ms: int
    records: list[RecordInput] = field(default_factory=list)
    handles: list[Any] = field(default_factory=list)
    size: int = HEADER_SIZE
    attempts: int = 0
    # Set when the batch is first drained; kept for retries so the broker can dedupe.
    producer_id: int = -1
    producer_epoch: int = -1
    base_sequence: int = -1
    transactional: bool = False
    last_attempt_ms: int = 0
    closed: bool = False

    @property
    def record_count(self) -> int:
        return len(self.records)

    @property
    def has_sequence(self) -> bool:
        return self.base_sequence >= 0

    def encode(self, compression: int) -> bytes:
        return encode_batch(
            self.records,
            compression=compression,
            producer_id=self.producer_id,
            producer_epoch=self.producer_epoch,
            base_sequence=self.base_sequence,
            transactional=self.transactional,
        )


class RecordAccumulator:
    def __init__(self, *, batch_size: int, linger_ms: int) -> None:
        self.batch_size = batch_size
        self.linger_ms = linger_ms
        self._queues: dict[TopicPartition, deque[ProducerBatch]] = {}
        self._flushing = 0
        self._closing = False

    # ------------------------------------------------------------------ appending

    def append(
        self,
        tp: TopicPartition,
        record: RecordInput,
        handle: Any,
        now_ms: int,
    ) -> tuple[ProducerBatch, bool]:
        """Add one record; returns its batch and whether that batch is now full.

        A record larger than ``batch.size`` gets a batch of its own.
        """
        size = estimate_record_size(record.key, record.value, record.headers)
        queue = self._queues.setdefault(tp, deque())
        batch = queue[-1] if queue else None
        if (
            batch is None
            or batch.closed
            or batch.has_sequence
            or (batch.size + size > self.batch_size and batch.records)
        ):
            if batch is not None:
                batch.closed = True
            batch = ProducerBatch(tp, created_ms=now_ms)
            queue.append(batch)
        batch.records.append(record)
        batch.handles.append(handle)
        batch.size += size
        full = batch.size >= self.batch_size
        if full:
            batch.closed = True
        return batch, full

    # ------------------------------------------------------------------ readiness

    def begin_flush(self) -> None:
        self._flushing += 1

    def end_flush(self) -> None:
        self._flushing = max(0, self._flushing - 1)

    def close(self) -> None:
        """From now on every batch is ready at once (the producer is shutting down)."""
        self._closing = True

    def _batch_ready(self, batch: ProducerBatch, queued: int, now_ms: int) -> bool:
        return (
            batch.closed
            or queued > 1
            or self._flushing > 0
            or self._closing
            or now_ms - batch.created_ms >= self.linger_ms
        )

    def ready(
        self, now_ms: int, muted: frozenset[TopicPartition] = frozenset()
    ) -> list[TopicPartition]:
        """Partitions whose head batch may be sent now (``muted`` ones are skipped)."""
        return [
            tp
            for tp, queue in self._queues.items()
            if queue and tp not in muted and self._batch_ready(queue[0], len(queue), now_ms)
        ]

    def next_ready_delay_ms(self, now_ms: int) -> int | None:
        """Milliseconds until some batch becomes ready by lingering; None if none queued."""
        delay: int | None = None
        for queue in self._queues.values():
            if not queue:
                continue
            head = queue[0]
            if self._batch_ready(head, len(queue), now_ms):
                return 0
            wait = head.created_ms + self.linger_ms - now_ms
            delay = wait if delay is None else min(delay, wait)
        return delay

    # ------------------------------------------------------------------ draining

    def drain(self, tps: Iterable[TopicPartition], max_bytes: int) -> list[ProducerBatch]:
        """Pop the head batch of each partition in ``tps``, up to about ``max_bytes``
        together (at least one batch is always returned if any is queued). Never two
        batches of one partition: a Produce request (v3+) carries one batch per partition."""
        out: list[ProducerBatch] = []
        total = 0
        for tp in dict.fromkeys(tps):
            queue = self._queues.get(tp)
            if not queue:
                continue
            batch = queue[0]
            if out and total + batch.size > max_bytes:
                break
            queue.popleft()
            batch.closed = True
            out.append(batch)
            total += batch.size
        return out

    def reenqueue(self, batch: ProducerBatch) -> None:
        """Put a batch back at the head of its partition (to be retried, in order)."""
        self._queues.setdefault(batch.tp, deque()).appendleft(batch)

    def remove(self, batch: ProducerBatch) -> None:
        """Take one queued batch out (e.g. when its delivery timeout expired)."""
        queue = self._queues.get(batch.tp)
        if queue is not None and batch in queue:
            queue.remove(batch)

    def remove_all(self) -> list[ProducerBatch]:
        """Take every queued batch out (to fail them, e.g. on abort or fatal error)."""
        out = [batch for queue in self._queues.values() for batch in queue]
        self._queues.clear()
        return out

    def pop_expired(
        self, now_ms: int, timeout_ms: int, skip: AbstractSet[TopicPartition]
    ) -> list[ProducerBatch]:
        """Take out the batches queued for ``timeout_ms`` or longer. A queue's head is its
        oldest batch (retries go back to the head), so only heads are looked at."""
        out: list[ProducerBatch] = []
        for tp, queue in self._queues.items():
            if tp in skip:
                continue
            while queue and now_ms - queue[0].created_ms >= timeout_ms:
                out.append(queue.popleft())
        return out

    def batches(self) -> Iterator[ProducerBatch]:
        for queue in self._queues.values():
            yield from queue

    def has_queued(self) -> bool:
        return any(self._queues.values())

    def queued_partitions(self) -> list[TopicPartition]:
        return [tp for tp, queue in self._queues.items() if queue]
