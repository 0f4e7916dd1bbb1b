"""Where the group coordinator keeps its records: the ``__consumer_offsets`` partitions.

The coordinator only needs a durable append and a replay. The broker implements
``OffsetsStore`` over the real partition logs; ``MemoryOffsetsStore`` serves tests and a
purely in-memory broker.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from oncelog.errors import ErrorCode, KafkaError

Record = tuple[bytes, bytes | None]


class OffsetsStore(Protocol):
    @property
    def num_partitions(self) -> int:
        """Partitions of ``__consumer_offsets`` (offsets.topic.num.partitions)."""
        ...

    def append(self, partition: int, records: list[Record]) -> None:
        """Durably append key/value records (value None = tombstone) as one batch.

        Returns only once the records are as durable as acks=all makes a produce;
        raises KafkaError otherwise (nothing of the batch is then visible).
        """
        ...

    def read(self, partition: int) -> Iterable[Record]:
        """Every record of the partition in offset order, for loading at start-up."""
        ...


class MemoryOffsetsStore:
    """An OffsetsStore in a list per partition; ``fail_with`` makes the next appends fail."""

    def __init__(self, num_partitions: int = 50) -> None:
        if num_partitions < 1:
            raise ValueError("num_partitions must be positive")
        self.num_partitions = num_partitions
        self.partitions: list[list[Record]] = [[] for _ in range(num_partitions)]
        self.fail_with: ErrorCode | None = None

    def append(self, partition: int, records: list[Record]) -> None:
        if not 0 <= partition < self.num_partitions:
            raise KafkaError(ErrorCode.unknown_topic_or_partition, f"partition {partition}")
        if self.fail_with is not None:
            raise KafkaError(self.fail_with, "injected append failure")
        self.partitions[partition].extend(records)

    def read(self, partition: int) -> Iterable[Record]:
        return list(self.partitions[partition])

    def record_count(self) -> int:
        return sum(len(p) for p in self.partitions)
