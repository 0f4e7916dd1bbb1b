"""Where the transaction coordinator keeps its records: the ``__transaction_state`` partitions.

The broker implements ``TxnLogStore`` over the real partition logs (an append is durable when
it returns); ``InMemoryTxnLogStore`` serves tests and tools.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from oncelog.errors import ErrorCode, KafkaError

Record = tuple[bytes, bytes | None]


class TxnLogStore(Protocol):
    @property
    def num_partitions(self) -> int:
        """Partitions of ``__transaction_state`` (transaction.state.log.num.partitions)."""
        ...

    def append(self, partition: int, records: list[Record]) -> None:
        """Append durably, all or nothing; raise KafkaError on failure."""
        ...

    def read(self, partition: int) -> Iterable[Record]:
        """Every record of the partition, oldest first (key, value; value None = tombstone)."""
        ...


class InMemoryTxnLogStore:
    """A TxnLogStore in memory; ``fail_next`` makes the next appends raise (for tests)."""

    def __init__(self, num_partitions: int = 50) -> None:
        if num_partitions < 1:
            raise ValueError("num_partitions must be positive")
        self._num_partitions = num_partitions
        self.partitions: list[list[Record]] = [[] for _ in range(num_partitions)]
        self.fail_next: list[ErrorCode] = []
        self.appends = 0

    @property
    def num_partitions(self) -> int:
        return self._num_partitions

    def append(self, partition: int, records: list[Record]) -> None:
        if not 0 <= partition < self._num_partitions:
            raise KafkaError(ErrorCode.unknown_topic_or_partition, f"partition {partition}")
        if self.fail_next:
            raise KafkaError(self.fail_next.pop(0), "injected append failure")
        self.partitions[partition].extend(records)
        self.appends += 1

    def read(self, partition: int) -> Iterable[Record]:
        return list(self.partitions[partition])
