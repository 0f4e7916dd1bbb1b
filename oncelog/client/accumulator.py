"""Producer batching, sans-IO: records are collected per partition into batches.

A partition's head batch is *ready* to send when it is full (``batch.size``), when it has
waited ``linger.ms``, when more batches queue behind it, or while the producer flushes or
closes. The sender drains at most one batch per partition per request, and keeps order:
a retried batch goes back into its queue in sequence order. Times are monotonic
milliseconds passed in by the caller; nothing here sleeps or does I/O.

Records are encoded into their batch's buffer as they are appended (as Java's
MemoryRecordsBuilder does), after room kept for the header; sending writes the header and
CRC there (its producer id, epoch and sequence may change between attempts), so an
uncompressed batch is never copied to be sealed. Each batch has one ``ProduceResult`` that its
records' futures share; a record's optional ``handle`` (its delivery callback) comes back
with its batch, with the record's index and timestamp.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any

from oncelog.client.delivery import ProduceResult
from oncelog.client.types import TopicPartition
from oncelog.records.batch import HEADER_SIZE, NO_TIMESTAMP
from oncelog.records.codec import append_record, seal_batch, seal_in_place

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
    result: ProduceResult
    # HEADER_SIZE bytes for the header, then the records
    buf: bytearray = field(default_factory=lambda: bytearray(HEADER_SIZE))
    record_count: int = 0
    base_timestamp: int = NO_TIMESTAMP  # the first record's
    max_timestamp: int = NO_TIMESTAMP
    # (index, timestamp, handle) of the records appended with a handle
    handles: list[tuple[int, int, Any]] = field(default_factory=list)
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
    def has_sequence(self) -> bool:
        return self.base_sequence >= 0

    def encode(self, compression: int) -> bytes | bytearray:
        """The sealed batch. Uncompressed, that is the batch's own buffer (valid until
        the batch is sealed again, for a retry)."""
        if compression:
            return seal_batch(
                memoryview(self.buf)[HEADER_SIZE:],
                record_count=self.record_count,
                base_timestamp=self.base_timestamp,
                max_timestamp=self.max_timestamp,
                compression=compression,
                producer_id=self.producer_id,
                producer_epoch=self.producer_epoch,
                base_sequence=self.base_sequence,
                transactional=self.transactional,
            )
        seal_in_place(
            self.buf,
            record_count=self.record_count,
            base_timestamp=self.base_timestamp,
            max_timestamp=self.max_timestamp,
            producer_id=self.producer_id,
            producer_epoch=self.producer_epoch,
            base_sequence=self.base_sequence,
            transactional=self.transactional,
        )
        return self.buf


class RecordAccumulator:
    def __init__(self, *, batch_size: int, linger_ms: int) -> None:
        self.batch_size = batch_size
        self.linger_ms = linger_ms
        # What the batches' results and their records' futures wait on (any thread).
        self.cond = threading.Condition()
        self._queues: dict[TopicPartition, deque[ProducerBatch]] = {}
        self._flushing = 0
        self._closing = False

    # ------------------------------------------------------------------ appending

    def append(
        self,
        tp: TopicPartition,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[tuple[str, bytes | None]],
        timestamp: int,
        now_ms: int,
        handle: Any = None,
    ) -> tuple[ProducerBatch, int, bool]:
        """Add one record; returns its batch, its index there, and whether that batch is
        now full. A record larger than ``batch.size`` gets a batch of its own; a new batch
        is one whose index is 0.
        """
        size = _RECORD_OVERHEAD + (len(key) if key else 0) + (len(value) if value else 0)
        if headers:
            size = estimate_record_size(key, value, headers)
        queue = self._queues.get(tp)
        if queue is None:
            queue = self._queues[tp] = deque()
        batch = queue[-1] if queue else None
        if (
            batch is None
            or batch.closed
            or batch.has_sequence  # sent once already
            or (batch.size + size > self.batch_size and batch.record_count)
        ):
            if batch is not None:
                batch.closed = True
            batch = ProducerBatch(tp, now_ms, ProduceResult(tp, self.cond))
            queue.append(batch)
        # encoded into the batch here, not in a method: this runs once per record
        index = batch.record_count
        if index == 0:
            batch.base_timestamp = timestamp
        if timestamp > batch.max_timestamp:
            batch.max_timestamp = timestamp
        append_record(batch.buf, index, timestamp - batch.base_timestamp, key, value, headers)
        batch.record_count = index + 1
        if handle is not None:
            batch.handles.append((index, timestamp, handle))
        batch.size += size
        full = batch.size >= self.batch_size
        if full:
            batch.closed = True
        return batch, index, full

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
        """Put a batch back into its partition's queue to be retried: ahead of every batch
        not sent yet and of every later sequence of its producer epoch (Java's
        insertInSequenceOrder), so that retries go out in their first order."""
        queue = self._queues.setdefault(batch.tp, deque())
        for i, queued in enumerate(queue):
            if queued.attempts == 0 or (
                batch.has_sequence
                and queued.producer_id == batch.producer_id
                and queued.producer_epoch == batch.producer_epoch
                and queued.base_sequence > batch.base_sequence
            ):
                queue.insert(i, batch)
                return
        queue.append(batch)

    def head(self, tp: TopicPartition) -> ProducerBatch | None:
        queue = self._queues.get(tp)
        return queue[0] if queue else None

    def queued(self, tp: TopicPartition) -> Sequence[ProducerBatch]:
        return self._queues.get(tp) or ()

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
