"""A partition's log with its producer state and aborted-transaction index (Kafka's
UnifiedLog): the one place where the append order is written down. The ``.txnindex`` files
belong to the segments (``PartitionLog.append_aborted_txn``/``aborted_txns``).

Append order for data batches (see ../shared/STYLE.md):
  1. validate producer state for every batch with a producer id, changing nothing;
  2. a retried batch (same producer, epoch and sequences as one of its last 5) is answered
     with the original offsets and nothing is appended;
  3. append to the segment log;
  4. apply the appended batches to the producer state (sequences, open transactions);
  5. advance the first unstable offset if a transaction began.
Transaction markers: check the marker against the producer state, append the control batch,
write an aborted-transaction index entry for an abort, and only then complete the producer's
transaction and advance the first unstable offset. If the index write fails nothing in memory
changes: the LSO stays, and the coordinator's retried marker completes the transaction and
writes the entry.

The LSO is ``max(first unstable offset, log start offset)`` (retention may delete the start
of an open transaction), or the log end offset when no transaction is open.

Recovery only replays: delete producer-state snapshots above the recovered log end (a power
loss may have cut the log below them), load the newest remaining one, drop index entries
whose marker is at or above it, then apply every batch from there to the end (data batches
and markers), rebuilding those entries. Entries below the snapshot are trusted because the
transaction indexes are fsynced before a snapshot is written. A rejected ``.txnindex`` moves
the replay start down to its segment (and its snapshots above are deleted first, so a crash
during the rebuild still rebuilds it on the next start).
"""

from __future__ import annotations

import logging
from pathlib import Path

from oncelog.clock import Clock
from oncelog.config import LogConfig
from oncelog.errors import KafkaError
from oncelog.records.batch import BatchHeader
from oncelog.records.codec import decode_batch
from oncelog.records.control import ControlType, decode_control, encode_marker_batch
from oncelog.records.validate import validate_batches
from oncelog.storage import snapshot
from oncelog.storage.log import AppendResult, PartitionLog, ReadResult
from oncelog.storage.producer_state import ProducerStateManager
from oncelog.storage.txn_index import AbortedTxn

logger = logging.getLogger(__name__)

DEFAULT_PRODUCER_ID_EXPIRATION_MS = 86_400_000


class UnifiedLog:
    def __init__(
        self,
        log: PartitionLog,
        producer_state: ProducerStateManager,
        clock: Clock,
    ) -> None:
        self.log = log
        self.producer_state = producer_state
        self._clock = clock
        self._first_unstable: int | None = None
        self._segment_count = len(log.segment_base_offsets())

    @classmethod
    def open(
        cls,
        directory: Path,
        config: LogConfig,
        clock: Clock,
        *,
        producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS,
    ) -> UnifiedLog:
        log = PartitionLog.open(directory, config, clock)
        state = ProducerStateManager(directory.name, clock, producer_id_expiration_ms)
        # Kafka's removeStraySnapshots / truncateAndReload: nothing above the log end (nor
        # above an untrusted transaction index) may be loaded, now or after a later crash.
        keep_below = log.log_end_offset
        rebuild_from = log.txn_index_rebuild_from
        if rebuild_from is not None and rebuild_from < keep_below:
            keep_below = rebuild_from
        if snapshot.delete_snapshots_after(directory, keep_below):
            logger.warning(
                "%s: deleted producer snapshots above offset %d (log end %d)",
                directory, keep_below, log.log_end_offset,
            )
        start = snapshot.load_state(state, directory, max_offset=keep_below)
        if start < log.log_start_offset:
            # The log between the snapshot and the log start is not readable: the snapshot
            # cannot be brought up to date (a marker there would be missed), so the state is
            # rebuilt from the log start alone.
            state.clear()
            start = log.log_start_offset
        log.truncate_txn_indexes_from(start)
        unified = cls(log, state, clock)
        replayed = unified._replay(start)
        unified._update_first_unstable()
        if replayed:
            logger.info(
                "%s: producer state rebuilt from offset %d (%d batches), %d producers, "
                "%d open transactions, LSO %d",
                directory, start, replayed, len(state),
                len(state.ongoing_txn_first_offsets()), unified.last_stable_offset,
            )
        return unified

    def _replay(self, start: int) -> int:
        count = 0
        for header in self.log.batch_headers(start):
            if header.last_offset < start or header.producer_id < 0:
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

    # -- offsets --------------------------------------------------------------------------
    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    @property
    def high_watermark(self) -> int:
        """On one node every appended record is replicated everywhere it needs to be."""
        return self.log.log_end_offset

    @property
    def first_unstable_offset(self) -> int | None:
        return self._first_unstable

    @property
    def last_stable_offset(self) -> int:
        """Below it every transaction is decided; read_committed readers stop there. Never
        below the log start offset (Kafka: max(first unstable offset, log start offset))."""
        first = self._first_unstable
        if first is None:
            return self.log.log_end_offset
        return max(first, self.log.log_start_offset)

    def last_fetchable_offset(self, read_committed: bool) -> int:
        """Kafka's lastFetchableOffset: the LSO for read_committed, else the high watermark."""
        return self.last_stable_offset if read_committed else self.high_watermark

    def _update_first_unstable(self) -> None:
        offsets = self.producer_state.ongoing_txn_first_offsets()
        self._first_unstable = offsets[0] if offsets else None

    # -- appends ---------------------------------------------------------------------------
    def append(
        self,
        buf: bytearray,
        headers: list[BatchHeader],
        *,
        log_append_time_ms: int | None = None,
        from_client: bool = True,
    ) -> AppendResult:
        """Append validated batches; a duplicate retry returns the original offsets.

        ``from_client=False`` is a coordinator's own write (e.g. transactional offset
        commits): only the producer epoch is checked, not sequences."""
        state = self.producer_state
        with_pid = [h for h in headers if h.producer_id >= 0]
        if with_pid:
            duplicate = (
                state.check(with_pid[0], is_from_client=from_client)
                if len(headers) == 1
                else state.check_batches(headers, is_from_client=from_client)
            )
            if duplicate is not None:
                return AppendResult(
                    duplicate.base_offset, duplicate.last_offset, -1, duplicate.timestamp, []
                )
        result = self.log.append(buf, headers, log_append_time_ms=log_append_time_ms)
        if with_pid:
            transactional = False
            for header in result.headers:
                if header.producer_id >= 0:
                    state.update(header)
                    transactional = transactional or header.is_transactional
            if transactional and self._first_unstable is None:
                self._update_first_unstable()
        self._maybe_snapshot_on_roll()
        return result

    def append_marker(
        self,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        commit: bool,
    ) -> int:
        """Write a COMMIT or ABORT marker for the producer's transaction; its offset."""
        self.producer_state.check_end_txn_marker(producer_id, producer_epoch, coordinator_epoch)
        now = self._clock.now_ms()
        control = ControlType.COMMIT if commit else ControlType.ABORT
        batch = bytearray(
            encode_marker_batch(control, producer_id, producer_epoch, coordinator_epoch, now)
        )
        headers = validate_batches(batch, max_batch_bytes=2**31 - 1, allow_control=True)
        result = self.log.append(batch, headers)
        self._complete_txn(
            producer_id, producer_epoch, coordinator_epoch, result.base_offset, now, not commit
        )
        self._maybe_snapshot_on_roll()
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
            self._update_first_unstable()

    def _maybe_snapshot_on_roll(self) -> None:
        count = len(self.log.segment_base_offsets())
        if count != self._segment_count:
            self._segment_count = count
            self.take_snapshot()

    def take_snapshot(self) -> None:
        """Snapshot the producer state at the log end. The transaction indexes are fsynced
        first: recovery trusts every entry below a snapshot."""
        try:
            self.log.flush_txn_indexes()
            snapshot.take_snapshot(
                self.producer_state, self.log.directory, self.log.log_end_offset
            )
        except OSError as exc:
            logger.warning("%s: producer state snapshot failed: %s", self.log.directory, exc)

    # -- reads ------------------------------------------------------------------------------
    def read(
        self, offset: int, max_bytes: int, *, max_offset: int | None = None,
        min_one_batch: bool = True,
    ) -> ReadResult:
        return self.log.read(offset, max_bytes, max_offset=max_offset, min_one_batch=min_one_batch)

    def aborted_transactions(self, start_offset: int, upper_offset: int) -> list[AbortedTxn]:
        return self.log.aborted_txns(start_offset, upper_offset)

    def offset_for_timestamp(
        self, timestamp_ms: int, *, read_committed: bool = False
    ) -> tuple[int, int] | None:
        """``(offset, timestamp)`` of the first record with a timestamp >= ``timestamp_ms``,
        or None -- also when that offset is not fetchable yet (at or above the LSO under
        read_committed, the high watermark otherwise), as Kafka answers -1 then."""
        return self._fetchable(self.log.offset_for_timestamp(timestamp_ms), read_committed)

    def max_timestamp_offset(self, *, read_committed: bool = False) -> tuple[int, int] | None:
        """The record with the largest timestamp, None when there is none or it is not
        fetchable yet (as ``offset_for_timestamp``)."""
        return self._fetchable(self.log.max_timestamp_offset(), read_committed)

    def _fetchable(
        self, found: tuple[int, int] | None, read_committed: bool
    ) -> tuple[int, int] | None:
        if found is None or found[0] >= self.last_fetchable_offset(read_committed):
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
        if deleted:
            self._segment_count = len(self.log.segment_base_offsets())
        return deleted

    def delete_records_before(self, offset: int) -> int:
        start = self.log.delete_records_before(offset)
        self._segment_count = len(self.log.segment_base_offsets())
        return start

    def remove_expired_producers(self, now_ms: int) -> list[int]:
        return self.producer_state.remove_expired(now_ms)

    def close(self) -> None:
        """Snapshot the producer state at the log end, then close the log cleanly."""
        self.take_snapshot()
        self.log.close()

    def delete(self) -> None:
        self.log.delete()

