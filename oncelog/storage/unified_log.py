"""The partition engine (Kafka's UnifiedLog): a log store plus its producer state, aborted
index, high watermark and LSO, kept consistent. The one place where the append order is
written down, for every store: ``UnifiedLog.open`` is the file engine (segments on disk,
``oncelog.storage.log``), ``oncelog.storage.memory_engine`` the in-memory one.

Append order for data batches (docs/architecture.md; Kafka's UnifiedLog.append):
  1. validate producer state for every batch with a producer id, changing nothing
     (clients: epochs and sequences; coordinators: the epoch only; replication: nothing);
  2. a retried batch (same producer, epoch and sequences as one of its last 5) is answered
     with the original offsets and nothing is appended;
  3. append to the log store;
  4. apply the appended batches to the producer state (sequences, open transactions);
  5. advance the first unstable offset if a transaction began;
  6. advance the high watermark (on one node: to the log end).
Transaction markers: check the marker against the producer state, append the control batch,
write an aborted-transaction index entry for an abort, and only then complete the producer's
transaction and advance the first unstable offset. If the index write fails nothing in memory
changes: the LSO stays, and the coordinator's retried marker completes the transaction and
writes the entry.

The high watermark is the engine's own value, separate from the log end: offsets below it
are readable. On one node the engine advances it to the log end after each append
(``auto_high_watermark``); with replication the partition calls
``maybe_increment_high_watermark`` instead. The LSO is ``max(first unstable offset, log start
offset)`` (retention may delete the start of an open transaction), or the high watermark when
no transaction is open, and never above the high watermark.

Recovery only replays (``oncelog.storage.file_engine`` opens the files and loads the newest
usable producer-state snapshot; ``_rebuild_from`` applies every batch after it, and
``truncate_to`` is the same reload, Kafka's truncateAndReload, after cutting the log).

Leader epochs (KIP-101, KIP-279): every batch carries the epoch of the leader that wrote it
(header bytes 12..15, outside the CRC). CLIENT and COORDINATOR appends and markers are
stamped with the engine's ``leader_epoch`` (``become_leader``; a single node is the leader of
epoch 0 from the start, as a single-node Kafka); REPLICATION appends keep the leader's epochs.
The ``LeaderEpochCache`` (``oncelog.storage.leader_epoch``, persisted in
``leader-epoch-checkpoint``) follows the log: assigned when an epoch writes its first batch
(before the append, so the checkpoint never misses a batch that reached the log), cut with
the log by ``truncate_to``, moved with the log start by retention and DeleteRecords, checked
against the log when opened (entries past the log end are dropped, the replayed tail is
assigned again) and rebuilt from the batches when the checkpoint is missing or damaged. A
follower (``become_follower``) refuses every append but REPLICATION.

Producer-state snapshots are taken when the store rolls. The bytes are encoded at the roll
and handed, as a job, to the injected ``snapshot_writer`` (default: run at once), so the
broker can write them off the event loop; a job writes under a lock and only if no
truncation or close happened since it was made, so a snapshot file only ever appears with
the content for its offset (``file_engine.RollSnapshots``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from pathlib import Path

from oncelog.clock import Clock
from oncelog.config import LogConfig
from oncelog.errors import ErrorCode, KafkaError
from oncelog.records.batch import BatchHeader, parse_header
from oncelog.records.codec import decode_batch
from oncelog.records.control import ControlType, decode_control, encode_marker_batch
from oncelog.storage import snapshot
from oncelog.storage.engine import AppendOrigin, FetchResult, IsolationLevel
from oncelog.storage.file_engine import (
    RollSnapshots,
    SnapshotJob,
    SnapshotWriter,
    open_partition_files,
    write_now,
)
from oncelog.storage.leader_epoch import (
    UNDEFINED_EPOCH,
    EpochEntry,
    LeaderEpochCache,
    read_checkpoint,
    write_checkpoint,
)
from oncelog.storage.log import AppendResult
from oncelog.storage.log_store import LogStore
from oncelog.storage.producer_state import ProducerInfo, ProducerStateManager
from oncelog.storage.segment_scan import CorruptSegmentError
from oncelog.storage.txn_index import AbortedTxn
from oncelog.storage.verification import SENTINEL, VerificationGuard

__all__ = [
    "DEFAULT_PRODUCER_ID_EXPIRATION_MS",
    "SnapshotJob",
    "SnapshotWriter",
    "UnifiedLog",
    "write_now",
]

logger = logging.getLogger(__name__)

DEFAULT_PRODUCER_ID_EXPIRATION_MS = 86_400_000


def _until_damage(log: LogStore, start: int, what: str) -> Iterator[BatchHeader]:
    """``log.batch_headers(start)`` up to a damaged one. Segments below the recovery point
    are trusted without a CRC scan (as in Kafka: after a clean shutdown, every segment), so
    a damaged length there is met only by these walks; they stop at it with an error line
    rather than failing the open (reads of the damage fail their CRC check)."""
    try:
        yield from log.batch_headers(start)
    except CorruptSegmentError as exc:
        logger.error("%s: %s rebuilt only up to damage in a trusted segment: %s",
                     log.directory, what, exc)


def _load_epochs(directory: Path, log: LogStore) -> LeaderEpochCache:
    """The partition's leader-epoch cache from its checkpoint, cut to the recovered log; when
    the checkpoint is missing or damaged, rebuilt from the batches' leader epochs (logged)
    and written again."""

    def persist(entries: list[EpochEntry]) -> None:
        write_checkpoint(directory, entries)

    entries = read_checkpoint(directory)
    cache = LeaderEpochCache(directory.name, entries, persist)
    if entries is not None:
        cache.truncate_from_end(log.log_end_offset)
        cache.truncate_from_start(log.log_start_offset)
        return cache
    if log.log_end_offset == log.log_start_offset:
        return cache  # nothing to rebuild from; the first epoch assigned writes the file
    batches = 0
    for header in _until_damage(log, log.log_start_offset, "leader-epoch cache"):
        batches += 1
        cache.assign_if_newer(header.partition_leader_epoch, header.base_offset)
    persist(cache.entries)
    logger.info("%s: leader-epoch cache rebuilt from %d batches: %s", directory, batches,
                " ".join(f"{e.epoch}@{e.start_offset}" for e in cache.entries) or "empty")
    return cache


class UnifiedLog:
    """One partition's engine (``oncelog.storage.engine.PartitionEngine``)."""

    def __init__(
        self,
        log: LogStore,
        producer_state: ProducerStateManager,
        clock: Clock,
        *,
        snapshot_dir: Path | None = None,
        snapshot_writer: SnapshotWriter = write_now,
        auto_high_watermark: bool = True,
        epochs: LeaderEpochCache | None = None,
    ) -> None:
        self.log = log
        self.producer_state = producer_state
        self._clock = clock
        self._first_unstable: int | None = None
        # Transactions a marker at or above the high watermark completed (Kafka's
        # ProducerStateManager.unreplicatedTxns), marker offset -> first offset: they hold
        # the first unstable offset, hence the LSO, until the high watermark passes their
        # marker, so read_committed never sees a transaction a new leader might lack the
        # marker of. Never used with an automatic high watermark (one node).
        self._unreplicated: dict[int, int] = {}
        self._segment_count = log.segment_count
        self._high_watermark = log.log_end_offset
        self._auto_high_watermark = auto_high_watermark
        self._snapshot_dir = snapshot_dir
        self._snapshots = RollSnapshots(snapshot_dir, snapshot_writer)
        # Batches replayed into the producer state when opened (recovery work done).
        self.replayed_batches = 0
        self.epochs = epochs if epochs is not None else LeaderEpochCache(str(log.directory))
        # The partition's leader epoch as this replica knows it (-1: none yet), and whether
        # this replica leads it (only a leader takes CLIENT and COORDINATOR appends).
        self._leader_epoch = UNDEFINED_EPOCH
        self._is_leader = False

    @classmethod
    def open(
        cls,
        directory: Path,
        config: LogConfig,
        clock: Clock,
        *,
        producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS,
        snapshot_writer: SnapshotWriter = write_now,
        auto_high_watermark: bool = True,
        leader_epoch: int | None = 0,
        high_watermark: int | None = None,
    ) -> UnifiedLog:
        """The file engine: open (or create) the partition in ``directory`` and recover.
        With ``leader_epoch`` (default 0: one node) it leads that epoch at once; with None
        it waits for ``become_leader`` or ``become_follower``. Without
        ``auto_high_watermark`` (replication) the high watermark starts from the
        checkpointed ``high_watermark`` (Kafka's replication-offset-checkpoint), bounded by
        the recovered log; None (no checkpoint) starts it at the log start: a restarted
        replica never takes its log end for what the ISR had."""
        files = open_partition_files(directory, config, clock, producer_id_expiration_ms)
        log, state, start = files.log, files.producer_state, files.replay_from
        unified = cls(
            log, state, clock, snapshot_dir=directory, snapshot_writer=snapshot_writer,
            auto_high_watermark=auto_high_watermark,
            epochs=_load_epochs(directory, log),
        )
        if not auto_high_watermark:
            hw = min(max(high_watermark or 0, log.log_start_offset), log.log_end_offset)
            unified._high_watermark = hw
            if hw < start:
                # Markers above the high watermark may be missing from other replicas: they
                # are replayed from a snapshot at or below it, so that the transactions they
                # completed hold the LSO until the high watermark passes them.
                start = snapshot.load_state(state, directory, max_offset=hw,
                                            log_level=logging.DEBUG)
        replayed = unified._rebuild_from(start)
        unified.replayed_batches = replayed
        if replayed:
            logger.info(
                "%s: producer state rebuilt from offset %d (%d batches), %d producers, "
                "%d open transactions, LSO %d",
                directory, start, replayed, len(state),
                len(state.ongoing_txn_first_offsets()), unified.last_stable_offset,
            )
        if leader_epoch is not None:
            unified.become_leader(leader_epoch)
        return unified

    def _rebuild_from(self, start: int) -> int:
        """Replay the log from ``start`` (the log start if below it) into the producer state
        and the aborted index, whose entries from there on are dropped first; the number of
        batches replayed."""
        if start < self.log.log_start_offset:
            # The log between the snapshot and the log start is not readable: the snapshot
            # cannot be brought up to date (a marker there would be missed), so the state is
            # rebuilt from the log start alone.
            self.producer_state.clear()
            start = self.log.log_start_offset
        self.log.truncate_txn_indexes_from(start)
        replayed = self._apply(_until_damage(self.log, start, "producer state"), start)
        self._update_first_unstable()
        return replayed

    def _apply(self, headers: Iterable[BatchHeader], start: int = 0) -> int:
        """Apply batches already in the log, without validation (recovery, replication)."""
        count = 0
        for header in headers:
            if header.last_offset < start:
                continue
            self._assign_epoch_of(header)
            if header.producer_id < 0:
                continue
            if header.next_offset > self.log.log_end_offset:  # a damaged trusted header
                logger.error("%s: batch header at offset %d claims offsets past the log end "
                             "%d; skipped", self.log.directory, header.base_offset,
                             self.log.log_end_offset)
                continue
            count += 1
            if header.is_control:
                control, coordinator_epoch = self._read_marker(header)
                if control is None:
                    continue
                self._complete_txn(
                    header.producer_id, header.producer_epoch, coordinator_epoch,
                    header.base_offset, header.max_timestamp, control == ControlType.ABORT,
                )
            else:
                self.producer_state.update(header)
        return count

    def _assign_epoch_of(self, header: BatchHeader) -> None:
        """A batch already in the log (replayed or replicated, in the leader's order)."""
        self.epochs.assign_if_newer(header.partition_leader_epoch, header.base_offset)

    def _read_marker(self, header: BatchHeader) -> tuple[ControlType | None, int]:
        try:
            result = self.log.read(
                header.base_offset, header.size, max_offset=header.next_offset
            )
            _, records = decode_batch(result.data)
        except KafkaError as exc:  # a trusted segment damaged on disk: never stop the open
            logger.error("%s: control batch at offset %d is unreadable (%s); skipped",
                         self.log.directory, header.base_offset, exc)
            return None, 0
        if not records:
            return None, 0
        try:
            return decode_control(records[0])
        except KafkaError:
            return None, 0

    # -- leadership and leader epochs -------------------------------------------------------
    @property
    def leader_epoch(self) -> int:
        """The partition's leader epoch as this replica knows it; -1 before it knows one."""
        return self._leader_epoch

    @property
    def is_leader(self) -> bool:
        return self._is_leader

    def become_leader(self, epoch: int) -> None:
        """Lead ``epoch`` from the log end on: later CLIENT and COORDINATOR batches and
        markers carry it, and the cache says the epoch starts at the log end (Kafka's
        makeLeader: maybeAssignEpochStartOffset(epoch, logEndOffset))."""
        if epoch < 0:
            raise ValueError(f"negative leader epoch {epoch}")
        self._leader_epoch = epoch
        self._is_leader = True
        self.epochs.assign(epoch, self.log.log_end_offset)
        logger.info("%s: leader of epoch %d from offset %d", self.log.directory, epoch,
                    self.log.log_end_offset)

    def become_follower(self, epoch: int) -> None:
        """Follow the leader of ``epoch``: only REPLICATION appends are taken from now on.
        The cache is left alone (the follower truncates, then fetches, Kafka's makeFollower)."""
        self._leader_epoch = epoch
        self._is_leader = False
        logger.info("%s: follower in leader epoch %d", self.log.directory, epoch)

    @property
    def latest_epoch(self) -> int | None:
        """The newest epoch in the log's epoch cache (None: none recorded)."""
        return self.epochs.latest_epoch

    def end_offset_for_leader_epoch(self, epoch: int) -> tuple[int, int]:
        """OffsetForLeaderEpoch: ``(epoch, end offset)`` -- the largest epoch <= ``epoch``
        known here and the offset where the next epoch starts (the log end for the latest);
        (-1, -1) when undefined (Kafka's LeaderEpochFileCache.endOffsetFor)."""
        return self.epochs.end_offset_for(epoch, self.log.log_end_offset)

    def _stamp_epoch(self) -> int:
        """The epoch a leader's own append carries; NOT_LEADER_OR_FOLLOWER on a follower.
        The cache learns the epoch's start before the bytes reach the log."""
        if not self._is_leader:
            raise KafkaError(
                ErrorCode.not_leader_or_follower,
                f"{self.log.directory.name}: not the leader (epoch {self._leader_epoch})",
            )
        self.epochs.assign(self._leader_epoch, self.log.log_end_offset)
        return self._leader_epoch

    # -- offsets --------------------------------------------------------------------------
    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    @property
    def high_watermark(self) -> int:
        """Offsets below it are readable; on one node the log end once an append returned."""
        return max(self._high_watermark, self.log.log_start_offset)

    def maybe_increment_high_watermark(self, offset: int) -> bool:
        """Move the high watermark up to ``offset`` (at most the log end); whether it moved."""
        offset = min(offset, self.log.log_end_offset)
        if offset <= self._high_watermark:
            return False
        self._high_watermark = offset
        if self._unreplicated:
            self._unreplicated = {m: f for m, f in self._unreplicated.items() if m >= offset}
            self._update_first_unstable()
        return True

    @property
    def first_unstable_offset(self) -> int | None:
        return self._first_unstable

    @property
    def last_stable_offset(self) -> int:
        """Below it every transaction is decided; read_committed readers stop there. Never
        below the log start offset (Kafka: max(first unstable offset, log start offset)), never
        above the high watermark."""
        high_watermark = self.high_watermark
        first = self._first_unstable
        if first is None:
            return high_watermark
        return min(max(first, self.log.log_start_offset), high_watermark)

    def last_fetchable_offset(self, isolation: IsolationLevel) -> int:
        """Kafka's lastFetchableOffset: the LSO for read_committed, else the high watermark."""
        if isolation is IsolationLevel.READ_COMMITTED:
            return self.last_stable_offset
        return self.high_watermark

    def _update_first_unstable(self) -> None:
        offsets = self.producer_state.ongoing_txn_first_offsets()
        first = offsets[0] if offsets else None
        if self._unreplicated:
            held = min(self._unreplicated.values())
            first = held if first is None else min(first, held)
        self._first_unstable = first

    @property
    def size_bytes(self) -> int:
        return self.log.size_bytes

    # -- appends ---------------------------------------------------------------------------
    def append(
        self,
        buf: bytearray,
        headers: list[BatchHeader],
        *,
        origin: AppendOrigin = AppendOrigin.CLIENT,
        log_append_time_ms: int | None = None,
        verification_guard: VerificationGuard = SENTINEL,
    ) -> AppendResult:
        """Append validated batches; a duplicate retry returns the original offsets.

        ``origin`` COORDINATOR is a coordinator's own write (e.g. transactional offset
        commits): only the producer epoch is checked, not sequences. REPLICATION applies the
        batches as they are, markers included. A CLIENT or COORDINATOR batch opening a
        transaction must present ``verification_guard`` (KIP-890, see
        ``oncelog.storage.verification``)."""
        if origin is AppendOrigin.REPLICATION:
            self._check_replicated_offsets(headers)
            result = self.log.append(buf, headers, log_append_time_ms=log_append_time_ms)
            self._apply(result.headers)
            self._update_first_unstable()
            self._after_append()
            return result
        state = self.producer_state
        with_pid = [h for h in headers if h.producer_id >= 0]
        if with_pid:
            is_from_client = origin is AppendOrigin.CLIENT
            duplicate = (
                state.check(with_pid[0], is_from_client=is_from_client,
                            verification_guard=verification_guard)
                if len(headers) == 1
                else state.check_batches(headers, is_from_client=is_from_client,
                                         verification_guard=verification_guard)
            )
            if duplicate is not None:
                return AppendResult(
                    duplicate.base_offset, duplicate.last_offset, -1, duplicate.timestamp, []
                )
        epoch = self._stamp_epoch()
        result = self.log.append(
            buf, headers, log_append_time_ms=log_append_time_ms, partition_leader_epoch=epoch
        )
        if with_pid:
            transactional = False
            for header in result.headers:
                if header.producer_id >= 0:
                    state.update(header)
                    transactional = transactional or header.is_transactional
            if transactional and self._first_unstable is None:
                self._update_first_unstable()
        self._after_append()
        return result

    def _check_replicated_offsets(self, headers: list[BatchHeader]) -> None:
        """A follower's batches keep the leader's offsets: the log store numbers appended
        batches from its log end, so they must start there and follow each other without a
        gap, or the follower's offsets would silently differ from the leader's (Kafka's
        UnexpectedAppendOffsetException)."""
        expected = self.log.log_end_offset
        for header in headers:
            if header.base_offset != expected:
                raise KafkaError(
                    ErrorCode.unknown_server_error,
                    f"{self.log.directory.name}: replicated batch at offset "
                    f"{header.base_offset}, the log ends at {expected}",
                )
            expected = header.next_offset

    def append_marker(
        self,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        commit: bool,
    ) -> int:
        """Write a COMMIT or ABORT marker for the producer's transaction; its offset. The
        broker built the batch: its header is read back, not re-validated."""
        self.producer_state.check_end_txn_marker(producer_id, producer_epoch, coordinator_epoch)
        epoch = self._stamp_epoch()
        now = self._clock.now_ms()
        control = ControlType.COMMIT if commit else ControlType.ABORT
        batch = bytearray(
            encode_marker_batch(control, producer_id, producer_epoch, coordinator_epoch, now)
        )
        result = self.log.append(batch, [parse_header(batch)], partition_leader_epoch=epoch)
        self._complete_txn(
            producer_id, producer_epoch, coordinator_epoch, result.base_offset, now, not commit
        )
        self._after_append()
        return result.base_offset

    def _complete_txn(
        self,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        offset: int,
        timestamp: int,
        is_abort: bool,
    ) -> None:
        """The marker at ``offset`` is in the log: index an abort, then complete the
        transaction in the producer state and move the first unstable offset (Kafka's order:
        updateTxnIndex, completeTxn, maybeIncrementFirstUnstableOffset)."""
        entry = self.producer_state.last_entry(producer_id)
        first = None if entry is None else entry.current_txn_first_offset
        if is_abort and first is not None:
            others = [o for o in self.producer_state.ongoing_txn_first_offsets() if o != first]
            stable = others[0] if others else offset + 1
            self.log.append_aborted_txn(AbortedTxn(producer_id, first, offset, stable))
        completed = self.producer_state.update_end_txn_marker(
            producer_id, producer_epoch, coordinator_epoch, offset, timestamp, is_abort
        )
        if completed is not None:
            if (first is not None and not self._auto_high_watermark
                    and offset >= self._high_watermark):
                self._unreplicated[offset] = first
            self._update_first_unstable()

    def _after_append(self) -> None:
        if self._auto_high_watermark:
            self._high_watermark = self.log.log_end_offset
        count = self.log.segment_count
        if count != self._segment_count:
            self._segment_count = count
            self._snapshot_on_roll()

    # -- producer-state snapshots -----------------------------------------------------------
    def _snapshot_on_roll(self) -> None:
        """Capture the producer state at the log end now; write it through the writer."""
        self._snapshots.on_roll(self.log, self.producer_state)

    def _invalidate_pending_snapshots(self) -> None:
        self._snapshots.invalidate()

    def take_snapshot(self) -> None:
        """Snapshot the producer state at the log end, synchronously. The transaction
        indexes are fsynced first: recovery trusts every entry below a snapshot."""
        self._snapshots.take_now(self.log, self.producer_state)

    # -- truncation -------------------------------------------------------------------------
    def truncate_to(self, offset: int) -> None:
        """Remove the batch holding ``offset`` and everything after it, with the producer
        state, aborted index, snapshots above the new end and the LSO (Kafka's
        truncateTo + truncateAndReload): the engine then equals one opened on the shorter
        log. A no-op at or past the log end."""
        if offset >= self.log.log_end_offset:
            return
        self._invalidate_pending_snapshots()
        old_end = self.log.log_end_offset
        self.log.truncate_to(offset)
        new_end = self.log.log_end_offset
        self._unreplicated = {m: f for m, f in self._unreplicated.items() if m < new_end}
        self.epochs.truncate_from_end(new_end)
        self.epochs.truncate_from_start(self.log.log_start_offset)
        start = (
            self.producer_state.truncate_after(new_end)
            if self._snapshot_dir is None
            else snapshot.truncate_state_after(self.producer_state, new_end, self._snapshot_dir)
        )
        replayed = self._rebuild_from(start)
        self._high_watermark = min(self._high_watermark, new_end)
        self._segment_count = self.log.segment_count
        logger.info(
            "%s: truncated from %d to %d; producer state replayed from %d (%d batches), LSO %d",
            self.log.directory, old_end, new_end, start, replayed, self.last_stable_offset,
        )

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Kafka's truncateFullyAndStartAt: a follower whose log ends below its leader's log
        start (it was away while the leader deleted what it lacks) drops its whole log,
        producer state, snapshots and epochs, and starts again, empty, at ``offset``."""
        self._invalidate_pending_snapshots()
        self.log.truncate_fully_and_start_at(offset)
        self._unreplicated.clear()
        self.epochs.clear()
        self.producer_state.clear()
        self._update_first_unstable()
        if self._snapshot_dir is not None:
            snapshot.delete_snapshots_after(self._snapshot_dir, -1)
        self._high_watermark = offset
        self._segment_count = self.log.segment_count

    # -- reads ------------------------------------------------------------------------------
    def read(
        self,
        offset: int,
        max_bytes: int,
        isolation: IsolationLevel = IsolationLevel.READ_UNCOMMITTED,
        *,
        min_one_batch: bool = True,
        upto_log_end: bool = False,
    ) -> FetchResult:
        """Whole batches from ``offset`` below the high watermark (read_uncommitted) or the
        LSO (read_committed, with the aborted transactions overlapping what is returned);
        ``upto_log_end`` reads up to the log end whatever the isolation (a follower's fetch:
        Kafka's FetchIsolation.LOG_END), without aborted transactions.
        OFFSET_OUT_OF_RANGE outside [log start, log end]."""
        high_watermark, stable = self.high_watermark, self.last_stable_offset
        committed = isolation is IsolationLevel.READ_COMMITTED and not upto_log_end
        if upto_log_end:
            upper = self.log.log_end_offset
        else:
            upper = stable if committed else high_watermark
        result = self.log.read(offset, max_bytes, max_offset=upper, min_one_batch=min_one_batch)
        aborted: list[AbortedTxn] | None = None
        if committed:
            aborted = self.log.aborted_txns(offset, result.next_offset) if result.data else []
        return FetchResult(
            data=result.data, first_offset=result.first_offset, next_offset=result.next_offset,
            high_watermark=high_watermark, last_stable_offset=stable,
            log_start_offset=result.log_start_offset, aborted=aborted,
        )

    def aborted_transactions(self, start_offset: int, upper_offset: int) -> list[AbortedTxn]:
        return self.log.aborted_txns(start_offset, upper_offset)

    def producers(self) -> list[ProducerInfo]:
        """The producers this partition knows (DescribeProducers), by producer id."""
        return self.producer_state.active_producers()

    def open_transactions(self) -> int:
        """Transactions with records here and no marker yet."""
        return len(self.producer_state.ongoing_txn_first_offsets())

    def has_open_transaction(self, producer_id: int) -> bool:
        entry = self.producer_state.last_entry(producer_id)
        return entry is not None and entry.current_txn_first_offset is not None

    def maybe_start_transaction_verification(
        self, producer_id: int, producer_epoch: int
    ) -> VerificationGuard:
        """The guard a transaction's first append must present (KIP-890 part 1)."""
        return self.producer_state.maybe_start_verification(producer_id, producer_epoch)

    def offset_for_timestamp(
        self,
        timestamp_ms: int,
        isolation: IsolationLevel = IsolationLevel.READ_UNCOMMITTED,
    ) -> tuple[int, int] | None:
        """``(offset, timestamp)`` of the first record with a timestamp >= ``timestamp_ms``,
        or None -- also when that offset is not fetchable yet (at or above the LSO under
        read_committed, the high watermark otherwise), as Kafka answers -1 then."""
        return self._fetchable(self.log.offset_for_timestamp(timestamp_ms), isolation)

    def max_timestamp_offset(
        self,
        isolation: IsolationLevel = IsolationLevel.READ_UNCOMMITTED,
    ) -> tuple[int, int] | None:
        """The record with the largest timestamp, None when there is none or it is not
        fetchable yet (as ``offset_for_timestamp``)."""
        return self._fetchable(self.log.max_timestamp_offset(), isolation)

    def _fetchable(
        self, found: tuple[int, int] | None, isolation: IsolationLevel
    ) -> tuple[int, int] | None:
        if found is None or found[0] >= self.last_fetchable_offset(isolation):
            return None
        return found

    # -- maintenance ------------------------------------------------------------------------
    @property
    def config(self) -> LogConfig:
        return self.log.config

    @property
    def directory(self) -> Path:
        return self.log.directory

    def update_config(self, config: LogConfig) -> None:
        self.log.update_config(config)

    def maybe_flush(self, now_ms: int) -> bool:
        return self.log.maybe_flush(now_ms)

    def flush(self) -> None:
        self.log.flush()

    def apply_retention(self) -> int:
        deleted = self.log.apply_retention()
        self._segment_count = self.log.segment_count
        if deleted:
            self.epochs.truncate_from_start(self.log.log_start_offset)
        return deleted

    def delete_records_before(self, offset: int) -> int:
        start = self.log.delete_records_before(offset)
        self._segment_count = self.log.segment_count
        self.epochs.truncate_from_start(start)
        return start

    def remove_expired_producers(self, now_ms: int) -> list[int]:
        return self.producer_state.remove_expired(now_ms)

    def close(self) -> None:
        """Snapshot the producer state at the log end, then close the log cleanly."""
        self._invalidate_pending_snapshots()
        self.take_snapshot()
        self.log.close()

    def delete(self) -> None:
        self._invalidate_pending_snapshots()
        self.log.delete()

