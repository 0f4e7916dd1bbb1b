"""The partition engine: the one seam every handler and coordinator goes through to reach a
partition's data.

An engine owns a partition's log together with everything derived from it -- producer state
(sequences, epochs, open transactions), the aborted-transaction index, the high watermark and
the last stable offset -- and keeps them consistent: the append order (validate producer
state, answer duplicates, append, update producer state, index aborts, advance the first
unstable offset) and recovery live inside it, never in a handler.

Engines are chosen by a URL-like setting (``storage.engine``): ``file:`` (the default:
Kafka's segment layout on local disk, durable across restarts) or ``memory:`` (everything in
memory; for tests and scenarios, lost on stop). Scenario tests are written once against this
interface and run against every engine.

On one node the high watermark is the log end offset once an append has returned; it is
still the engine's own value, separate from the log end, so that replication can hold it
back to what the in-sync replicas have (open the engine with ``auto_high_watermark=False``
and ``leader_epoch=None``, then ``become_leader`` / ``become_follower``).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Protocol

from oncelog.config import LogConfig
from oncelog.records.batch import BatchHeader
from oncelog.storage.log import AppendResult
from oncelog.storage.producer_state import ProducerInfo
from oncelog.storage.txn_index import AbortedTxn
from oncelog.storage.verification import SENTINEL, VerificationGuard

__all__ = [
    "AppendOrigin",
    "AppendResult",
    "FetchResult",
    "IsolationLevel",
    "PartitionEngine",
]


class AppendOrigin(enum.Enum):
    """Who is appending, which decides what is checked (Kafka's AppendOrigin).

    CLIENT: a producer's batches; producer state is fully validated (epochs and sequences).
    COORDINATOR: batches a coordinator of this broker encoded itself (transaction-log records,
    offset commits, markers); only the producer epoch is checked, and the batches are trusted
    (no re-validation or re-CRC of what the broker built).
    REPLICATION: batches copied from a leader, already assigned offsets; applied as they are.
    """

    CLIENT = "client"
    COORDINATOR = "coordinator"
    REPLICATION = "replication"


class IsolationLevel(enum.IntEnum):
    """Fetch and ListOffsets isolation levels, with Kafka's wire values."""

    READ_UNCOMMITTED = 0
    READ_COMMITTED = 1


@dataclass(frozen=True, slots=True)
class FetchResult:
    """Whole batches read from ``first_offset`` (a batch is never split, so it can be below
    the requested offset) up to ``next_offset``; with no data both equal the requested
    offset. The partition's offsets are the ones in force at the time of the read. Under
    read_committed, ``aborted`` lists the aborted transactions overlapping the returned range
    (empty when no data was returned); it is None under read_uncommitted."""

    data: bytes
    first_offset: int
    next_offset: int
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    aborted: list[AbortedTxn] | None


class PartitionEngine(Protocol):
    """One partition's data and the state derived from it. Sans-IO towards the network:
    no asyncio; the file engine does blocking file I/O, raising OSError on I/O failure."""

    # -- offsets ---------------------------------------------------------------------------
    @property
    def log_start_offset(self) -> int: ...

    @property
    def log_end_offset(self) -> int: ...

    @property
    def high_watermark(self) -> int:
        """Offsets below it are replicated as the partition requires; consumers read below it."""
        ...

    @property
    def last_stable_offset(self) -> int:
        """``max(first unstable offset, log start)``, bounded by the high watermark:
        read_committed readers stop there."""
        ...

    def maybe_increment_high_watermark(self, offset: int) -> bool:
        """Move the high watermark up to ``offset`` (at most the log end); whether it moved.
        Replication calls it; an engine opened with ``auto_high_watermark`` (one node) moves
        it to the log end itself after each append."""
        ...

    @property
    def first_unstable_offset(self) -> int | None: ...

    # -- leadership and leader epochs (oncelog.storage.leader_epoch) ------------------------
    @property
    def leader_epoch(self) -> int:
        """The partition's leader epoch as this replica knows it (-1: none yet). A leader
        stamps it on every CLIENT/COORDINATOR batch and marker; one node leads epoch 0."""
        ...

    @property
    def is_leader(self) -> bool: ...

    def become_leader(self, epoch: int) -> None:
        """Lead ``epoch`` from the log end (the epoch cache starts it there)."""
        ...

    def become_follower(self, epoch: int) -> None:
        """Follow the leader of ``epoch``: appends other than REPLICATION are refused with
        NOT_LEADER_OR_FOLLOWER."""
        ...

    @property
    def latest_epoch(self) -> int | None:
        """The newest epoch in the log's epoch cache; None when it has none."""
        ...

    def end_offset_for_leader_epoch(self, epoch: int) -> tuple[int, int]:
        """``(epoch, end offset)`` for OffsetForLeaderEpoch; (-1, -1) when undefined."""
        ...

    @property
    def config(self) -> LogConfig: ...

    @property
    def size_bytes(self) -> int: ...

    # -- writes ----------------------------------------------------------------------------
    def append(
        self,
        buf: bytearray,
        headers: list[BatchHeader],
        *,
        origin: AppendOrigin = AppendOrigin.CLIENT,
        log_append_time_ms: int | None = None,
        verification_guard: VerificationGuard = SENTINEL,
    ) -> AppendResult:
        """Append validated batches in the fixed order; a duplicate retry returns the
        original offsets and appends nothing. KafkaError for producer-state refusals, among
        them INVALID_TXN_STATE for a transaction's first batch without the producer's
        current ``verification_guard`` (when verification is on)."""
        ...

    def maybe_start_transaction_verification(
        self, producer_id: int, producer_epoch: int
    ) -> VerificationGuard:
        """Record (or return) the producer's verification guard before its transaction
        coordinator is asked about this partition; SENTINEL if its transaction is already
        open here at that epoch (``oncelog.storage.verification``)."""
        ...

    def append_marker(
        self, producer_id: int, producer_epoch: int, coordinator_epoch: int, commit: bool
    ) -> int:
        """Write a COMMIT/ABORT marker ending the producer's transaction; its offset. The
        LSO moves only after the abort is indexed."""
        ...

    def truncate_to(self, offset: int) -> None:
        """Remove everything at or above ``offset``: log, producer state, aborted index and
        snapshots above it together, so the engine equals one rebuilt from the shorter log."""
        ...

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Empty the partition and start it again at ``offset`` (a follower whose log ends
        below its leader's log start): no batch, producer or leader epoch is left."""
        ...

    # -- reads -----------------------------------------------------------------------------
    def read(
        self,
        offset: int,
        max_bytes: int,
        isolation: IsolationLevel = IsolationLevel.READ_UNCOMMITTED,
        *,
        min_one_batch: bool = True,
        upto_log_end: bool = False,
    ) -> FetchResult:
        """Batches from ``offset`` below the high watermark (read_uncommitted) or the LSO
        (read_committed); with ``upto_log_end`` below the log end (a follower's fetch,
        Kafka's FetchIsolation.LOG_END). OFFSET_OUT_OF_RANGE outside [log start, log end]."""
        ...

    def producers(self) -> list[ProducerInfo]:
        """The producers this partition knows (DescribeProducers)."""
        ...

    def open_transactions(self) -> int:
        """How many transactions have records here and no marker yet."""
        ...

    def has_open_transaction(self, producer_id: int) -> bool:
        """Whether the producer has a transaction open on this partition."""
        ...

    def offset_for_timestamp(
        self, timestamp_ms: int, isolation: IsolationLevel = IsolationLevel.READ_UNCOMMITTED
    ) -> tuple[int, int] | None:
        """``(offset, timestamp)`` of the first record at or after ``timestamp_ms`` that is
        fetchable under ``isolation``; None otherwise (ListOffsets answers -1)."""
        ...

    def max_timestamp_offset(
        self, isolation: IsolationLevel = IsolationLevel.READ_UNCOMMITTED
    ) -> tuple[int, int] | None: ...

    # -- maintenance -----------------------------------------------------------------------
    def update_config(self, config: LogConfig) -> None: ...

    def maybe_flush(self, now_ms: int) -> bool: ...

    def flush(self) -> None: ...

    def apply_retention(self) -> int:
        """Delete what retention allows; the number of segments (or chunks) removed."""
        ...

    def delete_records_before(self, offset: int) -> int:
        """Advance the log start offset to ``offset`` (DeleteRecords); the new log start."""
        ...

    def remove_expired_producers(self, now_ms: int) -> list[int]: ...

    def take_snapshot(self) -> None: ...

    def close(self) -> None: ...

    def delete(self) -> None: ...
