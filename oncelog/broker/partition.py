"""One partition as the broker serves it: its engine behind the I/O-error boundary, the
offline state that boundary sets, and the fetches waiting for new data.

An OSError from the partition's files takes it offline (Kafka's log-directory failure
handling) and every later call answers KAFKA_STORAGE_ERROR; waiting fetches are woken only
when what they may read moved (the high watermark for read_uncommitted, the LSO for
read_committed). On a single node the high watermark is the log end offset once an append
has returned. The registry of every partition is oncelog.broker.partitions.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

from oncelog.config import LogConfig
from oncelog.errors import ErrorCode, KafkaError
from oncelog.faults import IO_ERRORS, io_fault
from oncelog.records.batch import BatchHeader
from oncelog.storage.engine import AppendOrigin, FetchResult, IsolationLevel
from oncelog.storage.log import AppendResult
from oncelog.storage.producer_state import ProducerInfo
from oncelog.storage.unified_log import UnifiedLog
from oncelog.storage.verification import SENTINEL, VerificationGuard

log = logging.getLogger(__name__)


class _GuardedLog:
    """A partition's log seen through its I/O-error boundary.

    Every method call of the wrapped UnifiedLog that raises OSError (disk full, permission,
    EIO) takes the partition offline, as Kafka's log-directory failure handling does
    (``LogDirFailureChannel``, ``ReplicaManager.handleLogDirFailure``), and becomes
    KafkaError(KAFKA_STORAGE_ERROR); once offline, every method call raises it without
    touching the files. Attribute reads (offsets, config, producer state) stay available:
    they are in memory, and they let handlers answer the error per partition.
    """

    __slots__ = ("_log", "_methods", "_partition")

    def __init__(self, log: UnifiedLog, partition: Partition) -> None:
        self._log = log
        self._partition = partition
        # The guarded form of each method, made on its first call: a partition's log takes
        # the same few calls per request.
        self._methods: dict[str, Callable[..., Any]] = {}

    def __getattr__(self, name: str) -> Any:
        known = self._methods.get(name)
        if known is not None:
            return known
        value = getattr(self._log, name)
        if not callable(value):
            return value
        partition = self._partition
        target = self._log

        def guarded(*args: Any, **kwargs: Any) -> Any:
            if partition.offline is not None:
                raise partition.storage_error()
            try:
                if IO_ERRORS:  # (the partition's name is built only when faults are set)
                    io_fault(name, partition.name)
                # Looked up per call: the log's method as it is now.
                return getattr(target, name)(*args, **kwargs)
            except OSError as exc:
                partition.take_offline(name, exc)
                raise partition.storage_error() from exc

        self._methods[name] = guarded
        return guarded


class Partition:
    """One partition: its log plus the futures of fetches waiting for new data.

    ``log`` is the partition's UnifiedLog behind its I/O-error boundary (``_GuardedLog``);
    ``offline`` says why the partition was taken offline, None while it is healthy.
    """

    __slots__ = ("_waiters", "append_listener", "index", "log", "log_dir", "offline", "raw_log",
                 "topic")

    def __init__(
        self, topic: str, index: int, log: UnifiedLog, log_dir: Path | None = None
    ) -> None:
        self.topic = topic
        self.index = index
        # The log directory (of log.dirs) holding this partition.
        self.log_dir = log_dir if log_dir is not None else log.directory.parent
        self.raw_log = log
        self.log: UnifiedLog = cast(UnifiedLog, _GuardedLog(log, self))
        self.offline: str | None = None
        # Fetches waiting for data, by isolation level; None: followers' fetches, which
        # read up to the log end (see _maybe_wake).
        self._waiters: dict[IsolationLevel | None, set[asyncio.Future[None]]] = {
            level: set() for level in [*IsolationLevel, None]
        }
        # Replication (cluster mode, while this replica leads): told after every local
        # append that is not a follower's, so the high watermark follows the ISR.
        self.append_listener: Callable[[Partition], None] | None = None

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.index}"

    def replace_log(self, log: UnifiedLog, log_dir: Path) -> None:
        """Continue on ``log`` (the same partition reopened in ``log_dir`` after a move)."""
        self.raw_log = log
        self.log = cast(UnifiedLog, _GuardedLog(log, self))
        self.log_dir = log_dir

    def take_offline(self, operation: str, exc: OSError) -> None:
        """Stop using this partition's files after an I/O error (until a restart)."""
        if self.offline is None:
            self.offline = f"{operation} failed: {exc}"
            log.error(
                "partition %s is offline: I/O error during %s in %s: %s; answering "
                "KAFKA_STORAGE_ERROR for it until the broker is restarted with the disk fixed",
                self.name, operation, self.raw_log.directory, exc,
            )
        self.wake_waiters()

    def storage_error(self) -> KafkaError:
        return KafkaError(
            ErrorCode.kafka_storage_error,
            f"partition {self.name} is offline ({self.offline}) in {self.raw_log.directory}",
        )

    # -- offsets and configuration -----------------------------------------------------
    @property
    def config(self) -> LogConfig:
        return self.raw_log.config

    @property
    def log_start_offset(self) -> int:
        return self.raw_log.log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self.raw_log.log_end_offset

    @property
    def high_watermark(self) -> int:
        return self.raw_log.high_watermark

    def maybe_increment_high_watermark(self, offset: int) -> bool:
        """Replication moved the high watermark (a leader: what the ISR holds; a follower:
        the leader's, bounded by its own log end); waiting fetches are woken if it moved."""
        before = self._offsets_if_waited()
        moved = self.log.maybe_increment_high_watermark(offset)
        self._maybe_wake(before)
        return moved

    @property
    def last_stable_offset(self) -> int:
        """Offsets below it are decided: no open transaction has records there."""
        return self.raw_log.last_stable_offset

    # -- leader epochs (KIP-101, KIP-320) -----------------------------------------------
    @property
    def leader_epoch(self) -> int:
        """The partition's leader epoch as this broker knows it (0 on a single node)."""
        return self.raw_log.leader_epoch

    def check_leader_epoch(self, current_leader_epoch: int, *, require_leader: bool = True
                           ) -> None:
        """KIP-320, Kafka's Partition.localLogWithEpochOrThrow: a request's
        ``current_leader_epoch`` (-1: no check) older than the partition's is
        FENCED_LEADER_EPOCH, newer UNKNOWN_LEADER_EPOCH (this broker has not heard of it
        yet); then NOT_LEADER_OR_FOLLOWER when a leader is required and this is not it."""
        epoch = self.log.leader_epoch
        if current_leader_epoch != -1 and current_leader_epoch != epoch:
            code = (ErrorCode.fenced_leader_epoch if current_leader_epoch < epoch
                    else ErrorCode.unknown_leader_epoch)
            raise KafkaError(code, f"{self.name}: request leader epoch {current_leader_epoch}"
                                   f", partition leader epoch {epoch}")
        if require_leader and not self.log.is_leader:
            raise KafkaError(ErrorCode.not_leader_or_follower,
                             f"{self.name}: this broker is not its leader")

    def end_offset_for_leader_epoch(self, epoch: int) -> tuple[int, int]:
        """OffsetForLeaderEpoch: ``(epoch, end offset)``, (-1, -1) when undefined."""
        return self.log.end_offset_for_leader_epoch(epoch)

    def epoch_for_offset(self, offset: int) -> int:
        """The leader epoch that wrote ``offset`` (-1 when unknown), for ListOffsets."""
        found = self.log.epochs.epoch_for_offset(offset)
        return -1 if found is None else found

    def last_fetchable_offset(self, isolation: IsolationLevel) -> int:
        """Where a reader of ``isolation`` stops: the LSO (read_committed) or the HW."""
        return self.log.last_fetchable_offset(isolation)

    # -- writes ---------------------------------------------------------------------------
    def append(
        self,
        buf: bytearray,
        headers: list[BatchHeader],
        *,
        origin: AppendOrigin = AppendOrigin.CLIENT,
        log_append_time_ms: int | None = None,
        verification_guard: VerificationGuard = SENTINEL,
    ) -> AppendResult:
        before = self._offsets_if_waited()
        result = self.log.append(
            buf, headers, origin=origin, log_append_time_ms=log_append_time_ms,
            verification_guard=verification_guard,
        )
        self._maybe_wake(before)
        if self.append_listener is not None and origin is not AppendOrigin.REPLICATION:
            self.append_listener(self)
        return result

    def append_marker(
        self, producer_id: int, producer_epoch: int, coordinator_epoch: int, commit: bool
    ) -> int:
        before = self._offsets_if_waited()
        offset = self.log.append_marker(producer_id, producer_epoch, coordinator_epoch, commit)
        self._maybe_wake(before)
        if self.append_listener is not None:
            self.append_listener(self)
        return offset

    def truncate_to(self, offset: int) -> None:
        """A follower cuts its log at ``offset`` (where it diverged from its leader)."""
        before = self._offsets_if_waited()
        self.log.truncate_to(offset)
        self._maybe_wake(before)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """A follower behind its leader's log start empties its log and starts at
        ``offset``."""
        before = self._offsets_if_waited()
        self.log.truncate_fully_and_start_at(offset)
        self._maybe_wake(before)

    # -- reads ----------------------------------------------------------------------------
    def read(
        self,
        offset: int,
        max_bytes: int,
        isolation: IsolationLevel = IsolationLevel.READ_UNCOMMITTED,
        *,
        min_one_batch: bool = True,
        upto_log_end: bool = False,
    ) -> FetchResult:
        """Whole batches from ``offset`` below the HW (read_uncommitted) or the LSO
        (read_committed, with the aborted transactions overlapping what is returned);
        ``upto_log_end``: below the log end (a follower's fetch)."""
        return self.log.read(
            offset, max_bytes, isolation, min_one_batch=min_one_batch, upto_log_end=upto_log_end
        )

    def producers(self) -> list[ProducerInfo]:
        """The producers this partition knows (DescribeProducers), by producer id."""
        return self.log.producers()

    def open_transactions(self) -> int:
        """Transactions with records here and no marker yet."""
        return self.log.open_transactions()

    def has_open_transaction(self, producer_id: int) -> bool:
        return self.log.has_open_transaction(producer_id)

    def maybe_start_transaction_verification(
        self, producer_id: int, producer_epoch: int
    ) -> VerificationGuard:
        """The guard the producer's first transactional append here must present, taken
        before its transaction coordinator is asked (KIP-890 part 1; SENTINEL if its
        transaction is already open here at that epoch)."""
        return self.raw_log.maybe_start_transaction_verification(producer_id, producer_epoch)

    def offset_for_timestamp(
        self, timestamp_ms: int, isolation: IsolationLevel = IsolationLevel.READ_UNCOMMITTED
    ) -> tuple[int, int] | None:
        return self.log.offset_for_timestamp(timestamp_ms, isolation)

    def max_timestamp_offset(
        self, isolation: IsolationLevel = IsolationLevel.READ_UNCOMMITTED
    ) -> tuple[int, int] | None:
        return self.log.max_timestamp_offset(isolation)

    def flush(self) -> None:
        self.log.flush()

    def delete_records_before(self, offset: int) -> int:
        """Move the log start offset up to ``offset`` (DeleteRecords), durably; the new
        log start. Waiting read_committed fetches are woken: the LSO may have moved."""
        before = self._offsets_if_waited()
        start = self.log.delete_records_before(offset)
        self._maybe_wake(before)
        return start

    # -- fetch waiters ----------------------------------------------------------------------
    def _offsets(self) -> tuple[int, int, int]:
        # In-memory attributes: read past the I/O boundary (it only guards calls).
        log = self.raw_log
        return log.high_watermark, log.last_stable_offset, log.log_end_offset

    def _offsets_if_waited(self) -> tuple[int, int, int] | None:
        """The offsets waiting fetches watch, None when no fetch waits (most appends: the
        three offsets are not free to compute)."""
        waiters = self._waiters
        if (waiters[IsolationLevel.READ_UNCOMMITTED] or waiters[IsolationLevel.READ_COMMITTED]
                or waiters[None]):
            return self._offsets()
        return None

    def _maybe_wake(self, before: tuple[int, int, int] | None) -> None:
        """Wake read_uncommitted waiters when the HW moved, read_committed ones only when the
        LSO moved (an append inside an open transaction gives them nothing to read), and
        followers' fetches when the log end moved."""
        if before is None:
            return
        high_watermark, stable, log_end = self._offsets()
        if high_watermark != before[0]:
            self._wake(self._waiters[IsolationLevel.READ_UNCOMMITTED])
        if stable != before[1]:
            self._wake(self._waiters[IsolationLevel.READ_COMMITTED])
        if log_end != before[2]:
            self._wake(self._waiters[None])

    @staticmethod
    def _wake(waiters: set[asyncio.Future[None]]) -> None:
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)
        waiters.clear()

    def wake_waiters(self) -> None:
        """Wake every waiting fetch (the partition went offline, was deleted or closed)."""
        for waiters in self._waiters.values():
            self._wake(waiters)

    def add_waiter(
        self,
        fut: asyncio.Future[None],
        isolation: IsolationLevel | None = IsolationLevel.READ_UNCOMMITTED,
    ) -> None:
        """Wake ``fut`` when what a reader of ``isolation`` may read grows (None: a
        follower, reading up to the log end)."""
        self._waiters[isolation].add(fut)

    def remove_waiter(self, fut: asyncio.Future[None]) -> None:
        for waiters in self._waiters.values():
            waiters.discard(fut)

