"""Where the transaction coordinator keeps its records: the ``__transaction_state`` partitions.

The broker implements ``TxnLogStore`` over the real partition logs; ``InMemoryTxnLogStore``
serves tests and tools. A write has two halves, as Kafka's appendRecords with
``requiredAcks=-1`` (TransactionLog.EnforcedRequiredAcks): ``append`` writes the records to
the local log (durable when it returns; it raises NOT_ENOUGH_REPLICAS when the in-sync
replicas are already fewer than the topic's ``min.insync.replicas``), and
``wait_for_isr`` waits until the in-sync replicas have them too (the high watermark passed
them). On a single node there is nothing to wait for and ``wait_for_isr`` returns at once,
without suspending. ``high_watermark`` and ``log_end_offset`` tell a coordinator that loads
a partition whether all it read is held by the in-sync replicas (a leader's log may end
with records that only it has, which a new leader may not have).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Protocol

from oncelog.errors import ErrorCode, KafkaError

Record = tuple[bytes, bytes | None]


class TxnLogStore(Protocol):
    @property
    def num_partitions(self) -> int:
        """Partitions of ``__transaction_state`` (transaction.state.log.num.partitions)."""
        ...

    def append(self, partition: int, records: list[Record]) -> int:
        """Append durably to the local log, all or nothing; raise KafkaError on failure.
        Returns the offset the in-sync replicas must reach (the end of these records)."""
        ...

    async def wait_for_isr(
        self, partition: int, required_offset: int, timeout_ms: int
    ) -> ErrorCode:
        """Wait until the in-sync replicas hold ``required_offset``: NONE, or the error of
        an acks=all produce (NOT_ENOUGH_REPLICAS_AFTER_APPEND, REQUEST_TIMED_OUT,
        NOT_LEADER_OR_FOLLOWER)."""
        ...

    def read(self, partition: int) -> Iterable[Record]:
        """Every record of the partition, oldest first (key, value; value None = tombstone)."""
        ...

    def log_end_offset(self, partition: int) -> int:
        """The offset after the last record of the local log."""
        ...

    def high_watermark(self, partition: int) -> int:
        """The records below it are held by the in-sync replicas."""
        ...


class InMemoryTxnLogStore:
    """A TxnLogStore in memory. For tests: ``fail_next`` makes the next appends raise,
    ``fail_acks`` makes the next ISR waits answer those errors, ``hold_acks`` (an
    unset event) keeps every ISR wait pending until it is set, and ``high_watermarks``
    holds a partition's high watermark back (everything is in sync otherwise; an ISR wait
    that succeeds moves it to the offset waited for)."""

    def __init__(self, num_partitions: int = 50) -> None:
        if num_partitions < 1:
            raise ValueError("num_partitions must be positive")
        self._num_partitions = num_partitions
        self.partitions: list[list[Record]] = [[] for _ in range(num_partitions)]
        self.fail_next: list[ErrorCode] = []
        self.fail_acks: list[ErrorCode] = []
        self.hold_acks: asyncio.Event | None = None
        self.high_watermarks: dict[int, int] = {}
        self.appends = 0
        self.acks_waiting = 0

    @property
    def num_partitions(self) -> int:
        return self._num_partitions

    def append(self, partition: int, records: list[Record]) -> int:
        if not 0 <= partition < self._num_partitions:
            raise KafkaError(ErrorCode.unknown_topic_or_partition, f"partition {partition}")
        if self.fail_next:
            raise KafkaError(self.fail_next.pop(0), "injected append failure")
        self.partitions[partition].extend(records)
        self.appends += 1
        return len(self.partitions[partition])

    async def wait_for_isr(
        self, partition: int, required_offset: int, timeout_ms: int
    ) -> ErrorCode:
        if self.hold_acks is not None:
            self.acks_waiting += 1
            try:
                await self.hold_acks.wait()
            finally:
                self.acks_waiting -= 1
        if self.fail_acks:
            return self.fail_acks.pop(0)
        held = self.high_watermarks.get(partition)
        if held is not None:
            reached = min(required_offset, len(self.partitions[partition]))
            self.high_watermarks[partition] = max(held, reached)
        return ErrorCode.none

    def read(self, partition: int) -> Iterable[Record]:
        return list(self.partitions[partition])

    def log_end_offset(self, partition: int) -> int:
        return len(self.partitions[partition])

    def high_watermark(self, partition: int) -> int:
        end = len(self.partitions[partition])
        return min(self.high_watermarks.get(partition, end), end)
