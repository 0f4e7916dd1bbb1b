"""The value classes of producer state: one producer's entry and what is derived from it.

A leaf module (it imports nothing else of ``oncelog.storage``): the manager
(``producer_state``), the snapshot codec (``snapshot``) and the partition engines all use
these classes. Kafka's ``ProducerStateEntry``, ``BatchMetadata`` and ``CompletedTxn`` (in
storage/src/main/java/org/apache/kafka/storage/internals/log/), plus the answers the manager
gives: ``DuplicateBatch`` and ``ProducerInfo`` (DescribeProducers).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from oncelog.records.batch import NO_PRODUCER_EPOCH, NO_SEQUENCE

__all__ = [
    "MAX_SEQUENCE",
    "NO_COORDINATOR_EPOCH",
    "NUM_BATCHES_TO_RETAIN",
    "BatchMetadata",
    "CompletedTxn",
    "DuplicateBatch",
    "ProducerInfo",
    "ProducerStateEntry",
    "next_sequence",
]

NUM_BATCHES_TO_RETAIN = 5
"""How many recent batches per producer are kept for duplicate detection (Kafka: 5, which is
also the most in-flight requests an idempotent producer may have)."""

MAX_SEQUENCE = 2**31 - 1
NO_COORDINATOR_EPOCH = -1


def next_sequence(seq: int) -> int:
    """The sequence after ``seq``: int32 wraps to 0 after 2147483647."""
    return 0 if seq == MAX_SEQUENCE else seq + 1


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    """What is remembered of one appended batch."""

    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int


@dataclass(frozen=True, slots=True)
class DuplicateBatch:
    """A retried batch that is already in the log: answer success with these offsets."""

    base_offset: int
    last_offset: int
    timestamp: int


@dataclass(frozen=True, slots=True)
class CompletedTxn:
    """A transaction ended by a COMMIT/ABORT marker (for the aborted-txn index and the LSO)."""

    producer_id: int
    first_offset: int
    last_offset: int  # the marker's offset
    is_aborted: bool


@dataclass(frozen=True, slots=True)
class ProducerInfo:
    """An immutable view of one producer for DescribeProducers."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int
    current_txn_start_offset: int  # -1 when no transaction is open


@dataclass(slots=True)
class ProducerStateEntry:
    """The state of one producer id on this partition. Owned and mutated by the manager."""

    producer_id: int
    producer_epoch: int = NO_PRODUCER_EPOCH
    batches: deque[BatchMetadata] = field(
        default_factory=lambda: deque(maxlen=NUM_BATCHES_TO_RETAIN)
    )
    last_timestamp: int = -1
    coordinator_epoch: int = NO_COORDINATOR_EPOCH
    current_txn_first_offset: int | None = None

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    @property
    def last_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1

    def find_duplicate(self, epoch: int, first_seq: int, last_seq: int) -> BatchMetadata | None:
        if epoch != self.producer_epoch:
            return None
        for b in self.batches:
            if b.first_seq == first_seq and b.last_seq == last_seq:
                return b
        return None

    def add_batch(self, epoch: int, batch: BatchMetadata) -> None:
        if epoch != self.producer_epoch:
            # A new epoch restarts sequences: older batches can no longer be duplicates.
            self.batches.clear()
            self.producer_epoch = epoch
        self.batches.append(batch)  # maxlen drops the oldest
        self.last_timestamp = batch.timestamp

    def copy(self) -> ProducerStateEntry:
        return ProducerStateEntry(
            self.producer_id,
            self.producer_epoch,
            deque(self.batches, maxlen=NUM_BATCHES_TO_RETAIN),
            self.last_timestamp,
            self.coordinator_epoch,
            self.current_txn_first_offset,
        )
