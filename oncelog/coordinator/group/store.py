"""Where the group coordinator keeps its records: the ``__consumer_offsets`` partitions.

The coordinator needs a durable append (plain, and transactional for TxnOffsetCommit) and a
replay that shows, for every record, whether it belongs to a transaction and whether it is a
transaction marker. The broker implements ``OffsetsStore`` over the real partition logs;
``MemoryOffsetsStore`` serves tests and a purely in-memory broker.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple, Protocol

from oncelog.errors import ErrorCode, KafkaError
from oncelog.records.control import ControlType, marker_key, marker_value
from oncelog.storage.verification import SENTINEL, VerificationGuard

Record = tuple[bytes, bytes | None]

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1


class StoredRecord(NamedTuple):
    """One record of an offsets partition as replay sees it.

    ``producer_id``/``producer_epoch`` are those of the record's batch (-1 for the
    coordinator's plain appends); ``transactional`` is the batch's transactional flag;
    ``control`` is None for a data record, else the marker type of a control batch's record
    (0 = ABORT, 1 = COMMIT, as ``oncelog.records.control.ControlType``).
    """

    key: bytes | None
    value: bytes | None
    producer_id: int = NO_PRODUCER_ID
    transactional: bool = False
    control: int | None = None
    producer_epoch: int = NO_PRODUCER_EPOCH


class OffsetsStore(Protocol):
    @property
    def num_partitions(self) -> int:
        """Partitions of ``__consumer_offsets`` (offsets.topic.num.partitions)."""
        ...

    def append(self, partition: int, records: list[Record]) -> int:
        """Durably append key/value records (value None = tombstone) as one batch to the
        local log; returns the offset the in-sync replicas must reach (the end of the
        batch). Raises KafkaError otherwise (nothing of the batch is then visible).
        """
        ...

    def append_transactional(
        self,
        partition: int,
        records: list[Record],
        producer_id: int,
        producer_epoch: int,
        verification_guard: VerificationGuard = SENTINEL,
    ) -> int:
        """Durably append the records as one TRANSACTIONAL batch of ``producer_id`` at
        ``producer_epoch`` (base sequence -1), as a TxnOffsetCommit's records are written.

        The batch belongs to that producer's open transaction on this partition, which its
        COMMIT/ABORT marker ends. Same durability and failure rules as ``append``; a fenced
        epoch may be refused with KafkaError(INVALID_PRODUCER_EPOCH), and a batch opening
        the transaction without the producer's current ``verification_guard`` with
        KafkaError(INVALID_TXN_STATE) (KIP-890: a marker was written since the guard was
        taken).
        """
        ...

    def maybe_start_transaction_verification(
        self, partition: int, producer_id: int, producer_epoch: int
    ) -> VerificationGuard:
        """The guard the producer's next TxnOffsetCommit append to ``partition`` presents,
        taken before its transaction coordinator is asked (SENTINEL if its transaction is
        already open there at that epoch); KafkaError(INVALID_PRODUCER_EPOCH) for an epoch
        older than the partition's."""
        ...

    async def wait_for_isr(
        self, partition: int, required_offset: int, timeout_ms: int
    ) -> ErrorCode:
        """Wait until the in-sync replicas hold ``required_offset`` (cluster mode; Kafka
        appends offset commits with acks=-1): NONE, or the error of an acks=all produce.
        Returns at once, without suspending, on a single node."""
        ...

    def read(self, partition: int) -> Iterable[Record]:
        """Every data record (not markers) of the partition in offset order."""
        ...

    def read_records(self, partition: int) -> Iterable[StoredRecord]:
        """Every record of the partition in offset order, markers included, each with its
        batch's producer id/epoch and transactional flag (see ``StoredRecord``)."""
        ...


class MemoryOffsetsStore:
    """An OffsetsStore in a list per partition; ``fail_with`` makes the next appends fail.

    ``append_marker`` stands in for the broker writing a transaction marker (a control
    batch) to an offsets partition.
    """

    def __init__(self, num_partitions: int = 50) -> None:
        if num_partitions < 1:
            raise ValueError("num_partitions must be positive")
        self.num_partitions = num_partitions
        self.partitions: list[list[StoredRecord]] = [[] for _ in range(num_partitions)]
        self.fail_with: ErrorCode | None = None
        self.fail_acks: list[ErrorCode] = []  # the next ISR waits answer these

    def _check(self, partition: int) -> None:
        if not 0 <= partition < self.num_partitions:
            raise KafkaError(ErrorCode.unknown_topic_or_partition, f"partition {partition}")
        if self.fail_with is not None:
            raise KafkaError(self.fail_with, "injected append failure")

    def append(self, partition: int, records: list[Record]) -> int:
        self._check(partition)
        self.partitions[partition].extend(StoredRecord(k, v) for k, v in records)
        return len(self.partitions[partition])

    def append_transactional(
        self,
        partition: int,
        records: list[Record],
        producer_id: int,
        producer_epoch: int,
        verification_guard: VerificationGuard = SENTINEL,
    ) -> int:
        self._check(partition)
        self.partitions[partition].extend(
            StoredRecord(k, v, producer_id, True, None, producer_epoch) for k, v in records
        )
        return len(self.partitions[partition])

    def maybe_start_transaction_verification(
        self, partition: int, producer_id: int, producer_epoch: int
    ) -> VerificationGuard:
        """No producer state here: guards are neither taken nor checked."""
        self._check(partition)
        return SENTINEL

    async def wait_for_isr(
        self, partition: int, required_offset: int, timeout_ms: int
    ) -> ErrorCode:
        return self.fail_acks.pop(0) if self.fail_acks else ErrorCode.none

    def append_marker(
        self,
        partition: int,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        coordinator_epoch: int = 0,
    ) -> None:
        self._check(partition)
        control = ControlType.COMMIT if commit else ControlType.ABORT
        self.partitions[partition].append(
            StoredRecord(
                marker_key(control),
                marker_value(coordinator_epoch),
                producer_id,
                True,
                int(control),
                producer_epoch,
            )
        )

    def read(self, partition: int) -> Iterable[Record]:
        return [(r.key, r.value) for r in self.partitions[partition]
                if r.control is None and r.key is not None]

    def read_records(self, partition: int) -> Iterable[StoredRecord]:
        return list(self.partitions[partition])

    def record_count(self) -> int:
        return sum(len(p) for p in self.partitions)
