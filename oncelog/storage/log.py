"""The durable log of one partition: a directory of segments, Kafka-style.

Directory layout (``<data>/<topic>-<partition>/``)::

    00000000000000000000.log / .index / .timeindex / .txnindex   one segment per base offset
    00000000000000052817.log / .index / .timeindex / .txnindex   the last one is active
    log.checkpoint                                    recovery point + log start offset
    .clean-shutdown                                   present only while cleanly closed

(``*.snapshot`` files of the producer state live in the same directory but are not this
module's.) See ``segment`` for the files of a segment and ``index`` for the index layouts.

Callers validate batches first (``oncelog.records.validate``); ``append`` assigns offsets,
rolls segments, writes the whole request buffer with one ``pwrite`` and indexes it. ``read``
returns raw bytes of whole batches, found by bisecting the sparse offset index and walking
batch headers. Neither touches individual records.

Durability and the flush policy
-------------------------------
``append`` returns once the bytes are in the OS page cache. They are fsynced when
``flush.messages`` records have accumulated since the last flush (checked on append), when
``maybe_flush(now_ms)`` finds ``flush.ms`` elapsed since the last flush, on ``flush()`` and on
``close()``; ``maybe_flush`` also fsyncs segments that were rolled since the last flush.
Kafka's defaults (and oncelog's) set both to Long.MAX, leaving write-back to the OS:

- a process crash or ``kill -9`` loses nothing that ``append`` returned: the page cache
  belongs to the kernel and reaches the disk anyway;
- a power loss or kernel crash can lose appended-but-unflushed data (the tail after the
  recovery point), including writes already acknowledged to producers. Kafka relies on
  replication for that case; a single node does not have it, so set ``flush.messages=1``
  (fsync per append, much slower) where that matters.

Opening and recovery
--------------------
``open`` is ``log_loader``'s: after an unclean stop it validates the batches past the
recovery point and cuts the log at the first torn or corrupt one. ``txn_index_rebuild_from``
tells the owner (UnifiedLog) from which offset to replay the log to rebuild the
``.txnindex`` files it rejected.

Not thread-safe: a PartitionLog belongs to one thread (the broker's event loop); run blocking
calls such as ``flush`` elsewhere only if nothing else touches the log meanwhile.
"""

from __future__ import annotations

import logging
import shutil
from bisect import bisect_right
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from oncelog.clock import Clock
from oncelog.config import LogConfig
from oncelog.errors import ErrorCode, KafkaError
from oncelog.records.batch import LOG_OVERHEAD, BatchHeader
from oncelog.records.validate import assign_offsets
from oncelog.storage.checkpoint import LogCheckpoint, write_checkpoint, write_clean_shutdown
from oncelog.storage.files import fsync_directory
from oncelog.storage.log_loader import load_log
from oncelog.storage.log_search import max_timestamp_offset, offset_for_timestamp, read_batches
from oncelog.storage.retention import segment_timestamp, segments_below, segments_to_delete
from oncelog.storage.segment import INT32_MAX, LogSegment
from oncelog.storage.txn_index import AbortedTxn

__all__ = ["AppendResult", "PartitionLog", "ReadResult"]

logger = logging.getLogger(__name__)

@dataclass(frozen=True, slots=True)
class AppendResult:
    """Offsets a successful append assigned. ``log_append_time`` is -1 unless the batches
    were stamped with LogAppendTime; ``max_timestamp`` is the largest batch max timestamp
    (the append time under LogAppendTime); ``headers`` are the batches as written."""

    base_offset: int
    last_offset: int
    log_append_time: int
    max_timestamp: int
    headers: list[BatchHeader]


@dataclass(frozen=True, slots=True)
class ReadResult:
    """Whole batches from a read. ``first_offset`` is the base offset of the first batch (it
    can be below the requested offset: a batch is never split); ``next_offset`` is the offset
    after the last batch returned. With no data both equal the requested offset.
    ``log_start_offset``/``log_end_offset`` are the log's at the time of the read."""

    data: bytes
    first_offset: int
    next_offset: int
    log_start_offset: int
    log_end_offset: int


def _out_of_range(directory: Path, offset: int, start: int, end: int) -> KafkaError:
    return KafkaError(
        ErrorCode.offset_out_of_range,
        f"{directory.name}: offset {offset} is outside [{start}, {end}]",
    )


class PartitionLog:
    """A partition's segmented log. Create with ``PartitionLog.open``."""

    def __init__(
        self,
        directory: Path,
        config: LogConfig,
        clock: Clock,
        segments: list[LogSegment],
        log_start_offset: int,
        recovery_point: int,
    ) -> None:
        self._directory = directory
        self._config = config
        self._clock = clock
        self._segments = segments
        self._bases = [s.base_offset for s in segments]
        self._log_start_offset = log_start_offset
        self._recovery_point = recovery_point
        self._last_flush_ms = clock.now_ms()
        self._checkpointed: LogCheckpoint | None = None
        self._dir_dirty = False
        self._closed = False
        self._txn_rebuild_from: int | None = None
        # How ``open`` found the files: "new", "clean" or "recovered" (an unclean stop).
        self.opened_how = "new"

    # ------------------------------------------------------------------ opening

    @classmethod
    def open(cls, directory: Path, config: LogConfig, clock: Clock) -> PartitionLog:
        """Create the log in ``directory`` or load it, recovering after an unclean stop
        (see ``log_loader``)."""
        loaded = load_log(directory, config, clock)
        try:
            log = cls(
                directory, config, clock, loaded.segments, loaded.log_start_offset,
                loaded.recovery_point,
            )
            log._txn_rebuild_from = loaded.txn_rebuild_from
            log.opened_how = loaded.how
            log._dir_dirty = loaded.created
            log_start, log_end = loaded.log_start_offset, log.log_end_offset
            if log_start > log_end:
                logger.warning(
                    "%s: log start offset %d is past the recovered end %d; starting empty "
                    "at %d", directory, log_start, log_end, log_start,
                )
                log._truncate_fully(log_start)
            log._flush(force_checkpoint=True)
        except BaseException:
            for segment in loaded.segments:
                segment.close()
            raise
        # One line per partition only when it needed recovery; the broker logs a summary.
        logger.log(
            logging.INFO if loaded.how == "recovered" else logging.DEBUG,
            "%s: opened (%s), offsets [%d, %d), %d segments, %d bytes",
            directory, loaded.how, log.log_start_offset, log.log_end_offset,
            len(log._segments), log.size_bytes,
        )
        return log

    # ------------------------------------------------------------------ properties

    @property
    def directory(self) -> Path:
        return self._directory

    @property
    def config(self) -> LogConfig:
        return self._config

    def update_config(self, config: LogConfig) -> None:
        """New settings apply from the next append/flush/retention check."""
        self._config = config

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        """The offset the next appended record gets."""
        return self._segments[-1].next_offset

    @property
    def recovery_point(self) -> int:
        """Every offset below this is fsynced."""
        return self._recovery_point

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self._segments)

    def segment_base_offsets(self) -> list[int]:
        return list(self._bases)

    @property
    def segment_count(self) -> int:
        """How many segments there are (changes on a roll), without copying the list."""
        return len(self._bases)

    # ------------------------------------------------------------------ transaction index

    @property
    def txn_index_rebuild_from(self) -> int | None:
        """Base offset of the first segment whose ``.txnindex`` was rejected at load (its
        entries must be rebuilt by replaying the log from there), or None."""
        return self._txn_rebuild_from

    def append_aborted_txn(self, entry: AbortedTxn) -> None:
        """Index an aborted transaction in the segment holding its ABORT marker. Raises
        KafkaError(KAFKA_STORAGE_ERROR) when the write fails (nothing is indexed then)."""
        self._check_open()
        segment = self._segments[max(0, bisect_right(self._bases, entry.last_offset) - 1)]
        try:
            segment.append_aborted_txn(entry)
            if entry.last_offset < self._recovery_point:
                segment.txn_index.fsync()  # the marker is already durable (flush.messages)
        except OSError as exc:
            logger.error("%s: transaction index append %s failed: %s",
                         segment.txn_index.path, entry, exc)
            raise KafkaError(
                ErrorCode.kafka_storage_error, f"transaction index write failed: {exc}"
            ) from exc

    def aborted_txns(self, start_offset: int, upper_offset: int) -> list[AbortedTxn]:
        """Aborted transactions with data in [start_offset, upper_offset): their marker is
        at or after ``start_offset`` and they began before ``upper_offset``."""
        self._check_open()
        i = max(0, bisect_right(self._bases, start_offset) - 1)
        return [e for s in self._segments[i:] for e in s.txn_index.collect(start_offset,
                                                                              upper_offset)]

    def truncate_txn_indexes_from(self, offset: int) -> None:
        """Drop index entries whose marker is at or above ``offset`` (their markers are
        going to be replayed), rewriting the files that change."""
        for segment in self._segments:
            segment.txn_index.truncate_from(offset)
        self._txn_rebuild_from = None

    def flush_txn_indexes(self) -> None:
        """fsync the transaction indexes (before a producer-state snapshot that claims to
        cover their entries is written)."""
        for segment in self._segments:
            segment.txn_index.fsync()

    def __repr__(self) -> str:
        return (
            f"PartitionLog({self._directory}, [{self._log_start_offset}, "
            f"{self.log_end_offset}), {len(self._segments)} segments)"
        )

    # ------------------------------------------------------------------ append

    def append(
        self,
        buf: bytearray,
        headers: list[BatchHeader],
        *,
        log_append_time_ms: int | None = None,
        partition_leader_epoch: int | None = None,
    ) -> AppendResult:
        """Append validated batches (``buf`` holds exactly the batches ``headers`` describe,
        back to back). Offsets are assigned from ``log_end_offset`` by rewriting ``buf`` in
        place. With ``log_append_time_ms`` -- or, when it is None, with a topic configured
        for LogAppendTime, the clock's time -- the batches are stamped with LogAppendTime.
        Raises KafkaError(KAFKA_STORAGE_ERROR) when the write fails."""
        self._check_open()
        if not headers:
            raise ValueError("append needs at least one batch")
        config = self._config
        if log_append_time_ms is None and config.log_append_time:
            log_append_time_ms = self._clock.now_ms()
        total = 0
        count = 0
        max_timestamp = -1
        for h in headers:
            total += h.batch_length + LOG_OVERHEAD
            count += h.last_offset_delta + 1
            if h.max_timestamp > max_timestamp:
                max_timestamp = h.max_timestamp
        if total != len(buf):
            raise ValueError(f"headers describe {total} bytes, buffer has {len(buf)}")
        if log_append_time_ms is not None:
            max_timestamp = log_append_time_ms
        active = self._segments[-1]
        base_offset = active.next_offset
        last_offset = base_offset + count - 1
        if self._should_roll(active, total, max_timestamp, last_offset):
            active = self._roll()
        written = assign_offsets(
            buf, headers, base_offset, log_append_time_ms,
            partition_leader_epoch=partition_leader_epoch,
        )
        try:
            active.append(buf, written, config.index_interval_bytes)
        except OSError as exc:
            logger.error(
                "%s: append of %d bytes at offset %d failed: %s",
                self._directory, total, base_offset, exc,
            )
            raise KafkaError(ErrorCode.kafka_storage_error, f"write failed: {exc}") from exc
        if last_offset + 1 - self._recovery_point >= config.flush_messages:
            self._flush()
        return AppendResult(
            base_offset,
            last_offset,
            -1 if log_append_time_ms is None else log_append_time_ms,
            max_timestamp,
            written,
        )

    def _should_roll(
        self, active: LogSegment, size: int, max_timestamp: int, last_offset: int
    ) -> bool:
        if active.size == 0:
            return False
        config = self._config
        if active.size + size > config.segment_bytes or active.size + size > INT32_MAX:
            return True
        if (
            len(active.offset_index) >= config.segment_index_bytes // 8
            or len(active.time_index) >= config.segment_index_bytes // 12
        ):
            return True
        if last_offset - active.base_offset > INT32_MAX:
            return True
        # segment.ms counts from the first batch's timestamp when it has one (so a log
        # replayed with old timestamps rolls as it originally did), else from creation.
        if active.rolling_timestamp >= 0:
            waited = max_timestamp - active.rolling_timestamp
        else:
            waited = self._clock.now_ms() - active.created_ms
        return waited > config.segment_ms

    def _roll(self) -> LogSegment:
        old = self._segments[-1]
        old.seal()
        segment = LogSegment.create(self._directory, old.next_offset, self._clock.now_ms())
        self._segments.append(segment)
        self._bases.append(segment.base_offset)
        self._dir_dirty = True
        logger.info(
            "%s: rolled segment %d (%d bytes) -> new segment %d",
            self._directory, old.base_offset, old.size, segment.base_offset,
        )
        return segment

    # ------------------------------------------------------------------ read

    def read(
        self,
        offset: int,
        max_bytes: int,
        *,
        max_offset: int | None = None,
        min_one_batch: bool = True,
    ) -> ReadResult:
        """Raw bytes of whole batches, starting with the batch that holds ``offset``, up to
        ``max_bytes`` (but at least one batch when ``min_one_batch``), never a batch whose
        base offset is >= ``max_offset``. May span segments.
        Raises KafkaError(OFFSET_OUT_OF_RANGE) outside [log_start_offset, log_end_offset]."""
        self._check_open()
        start_offset = self._log_start_offset
        end_offset = self._segments[-1].next_offset
        if offset < start_offset or offset > end_offset:
            raise _out_of_range(self._directory, offset, start_offset, end_offset)
        limit = end_offset if max_offset is None or max_offset > end_offset else max_offset
        if offset >= limit:
            return ReadResult(b"", offset, offset, start_offset, end_offset)
        found = read_batches(self._segments, self._bases, offset, max_bytes, limit, min_one_batch)
        if found is None:
            return ReadResult(b"", offset, offset, start_offset, end_offset)
        data, first_offset, next_offset = found
        return ReadResult(data, first_offset, next_offset, start_offset, end_offset)

    def batch_headers(self, start_offset: int = 0) -> Iterator[BatchHeader]:
        """Headers of the batches from the one holding ``start_offset`` to the end (e.g. to
        rebuild producer state from the log tail). Do not append while iterating."""
        self._check_open()
        i = max(0, bisect_right(self._bases, start_offset) - 1)
        for segment in self._segments[i:]:
            found = segment.find_batch(start_offset)
            if found is not None:
                yield from segment.headers(found[0], segment.size)

    # ------------------------------------------------------------------ timestamps

    def offset_for_timestamp(self, timestamp_ms: int) -> tuple[int, int] | None:
        """``(offset, timestamp)`` of the first record (in offset order, at or after the log
        start offset) whose timestamp is >= ``timestamp_ms``; None when there is none."""
        self._check_open()
        return offset_for_timestamp(self._segments, self._log_start_offset, timestamp_ms)

    def max_timestamp_offset(self) -> tuple[int, int] | None:
        """``(offset, timestamp)`` of the (first) record with the largest timestamp; None
        when the log holds no record with a timestamp."""
        self._check_open()
        return max_timestamp_offset(self._segments)

    # ------------------------------------------------------------------ flushing

    def flush(self) -> None:
        """fsync every unflushed segment and index, advance the recovery point to the log end
        offset and write the checkpoint."""
        self._check_open()
        self._flush()

    def _flush(self, *, force_checkpoint: bool = False) -> None:
        self._fsync(self._segments)
        self._recovery_point = self._segments[-1].next_offset
        self._last_flush_ms = self._clock.now_ms()
        self._write_checkpoint(force=force_checkpoint)

    def maybe_flush(self, now_ms: int) -> bool:
        """Call periodically with ``Clock.now_ms()``: flushes everything when ``flush.ms``
        has passed since the last flush, else only segments rolled since then. Returns
        whether anything was fsynced."""
        self._check_open()
        if (
            self._segments[-1].next_offset > self._recovery_point
            and now_ms - self._last_flush_ms >= self._config.flush_ms
        ):
            self._flush()
            return True
        active = self._segments[-1]
        if self._recovery_point >= active.base_offset:
            return False
        self._fsync(self._segments[:-1])
        self._recovery_point = active.base_offset
        self._write_checkpoint()
        return True

    def _fsync(self, segments: list[LogSegment]) -> None:
        """fsync the unflushed ones of ``segments``, then the directory if files came or
        went since its last fsync."""
        for segment in segments:
            if segment.unflushed:
                segment.flush()
        if self._dir_dirty:
            fsync_directory(self._directory)
            self._dir_dirty = False

    def _write_checkpoint(self, *, force: bool = False) -> None:
        checkpoint = LogCheckpoint(self._recovery_point, self._log_start_offset)
        if force or checkpoint != self._checkpointed:
            write_checkpoint(self._directory, checkpoint)
            self._checkpointed = checkpoint

    # ------------------------------------------------------------------ deletion

    def apply_retention(self) -> int:
        """Delete whole segments, oldest first and never the active one, as
        ``retention.segments_to_delete`` decides (below the log start offset, then by
        retention.ms, then by retention.bytes). Returns segments deleted."""
        self._check_open()
        segments = self._segments
        count, reason = segments_to_delete(
            self._bases,
            lambda i: segments[i].size,
            lambda i: segment_timestamp(segments[i]),
            self._log_start_offset,
            self._config,
            self._clock,
        )
        if count:
            self._delete_oldest(count, reason)
        return count

    def delete_records_before(self, offset: int) -> int:
        """DeleteRecords: move the log start offset up to ``offset`` (at most the log end
        offset, else OFFSET_OUT_OF_RANGE) and delete the segments entirely below it.
        Returns the log start offset."""
        self._check_open()
        end_offset = self._segments[-1].next_offset
        if offset > end_offset or offset < 0:
            raise _out_of_range(self._directory, offset, self._log_start_offset, end_offset)
        if offset <= self._log_start_offset:
            return self._log_start_offset
        self._log_start_offset = offset
        count = segments_below(self._bases, offset)
        if count:
            self._delete_oldest(count, "delete records")
        else:
            self._write_checkpoint()
        return self._log_start_offset

    def _delete_oldest(self, count: int, reason: str) -> None:
        doomed = self._segments[:count]
        del self._segments[:count]
        del self._bases[:count]
        self._log_start_offset = max(self._log_start_offset, self._bases[0])
        for segment in doomed:
            segment.delete()
        self._write_checkpoint()
        logger.info(
            "%s: deleted %d segments [%d, %d) of %d bytes (%s); log start offset %d",
            self._directory, count, doomed[0].base_offset, self._bases[0],
            sum(s.size for s in doomed), reason, self._log_start_offset,
        )

    def truncate_to(self, offset: int) -> None:
        """Remove every batch from the one holding ``offset`` on (a no-op at or past the log
        end). The log end offset becomes ``offset`` when that is a batch boundary. Below the
        first segment the log is emptied and restarts at ``offset``."""
        self._check_open()
        if offset < 0:
            raise ValueError(f"negative truncation offset {offset}")
        old_end = self._segments[-1].next_offset
        if offset >= old_end:
            return
        if offset < self._bases[0]:
            self._truncate_fully(offset)
        else:
            i = bisect_right(self._bases, offset) - 1
            later = self._segments[i + 1 :]
            del self._segments[i + 1 :]
            del self._bases[i + 1 :]
            for segment in later:
                segment.delete()
            self._segments[i].truncate_to(offset)
        new_end = self._segments[-1].next_offset
        self._log_start_offset = min(self._log_start_offset, new_end)
        self._recovery_point = min(self._recovery_point, new_end)
        self._write_checkpoint()
        logger.info(
            "%s: truncated from end offset %d to %d", self._directory, old_end, new_end
        )

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete every segment and start again, empty, at ``offset`` (Kafka's
        truncateFullyAndStartAt: a follower behind its leader's log start)."""
        self._check_open()
        old = (self._log_start_offset, self._segments[-1].next_offset)
        self._truncate_fully(offset)
        logger.info("%s: emptied [%d, %d), starting again at %d", self._directory, *old,
                    offset)

    def _truncate_fully(self, offset: int) -> None:
        for segment in self._segments:
            segment.delete()
        self._segments[:] = [LogSegment.create(self._directory, offset, self._clock.now_ms())]
        self._bases[:] = [offset]
        self._log_start_offset = offset
        self._recovery_point = offset
        self._dir_dirty = True
        self._write_checkpoint()

    def segments_snapshot(self) -> list[LogSegment]:
        """The segments now, oldest first (the log cleaner plans over them)."""
        return list(self._segments)

    def replace_segments(self, old: list[LogSegment], new: LogSegment) -> None:
        """Put ``new`` (a cleaned segment, already swapped in on disk by
        ``cleaner_files.swap_in``) where the consecutive segments ``old`` were."""
        self._check_open()
        i = self._segments.index(old[0])
        if self._segments[i : i + len(old)] != old or i + len(old) >= len(self._segments):
            raise ValueError(f"{self._directory}: segments to replace are not in the log")
        self._segments[i : i + len(old)] = [new]
        self._bases[i : i + len(old)] = [new.base_offset]

    # ------------------------------------------------------------------ closing

    def close(self) -> None:
        """Flush everything, write the checkpoint and the clean-shutdown marker, release the
        files. Idempotent."""
        if self._closed:
            return
        try:
            self._segments[-1].seal()
            self._flush()
            write_clean_shutdown(self._directory)
        finally:
            self._closed = True
            for segment in self._segments:
                segment.close()

    def delete(self) -> None:
        """Close without flushing and remove the whole partition directory."""
        if not self._closed:
            self._closed = True
            for segment in self._segments:
                segment.release()
        try:
            shutil.rmtree(self._directory)
        except FileNotFoundError:
            pass
        logger.info("%s: deleted", self._directory)

    def _check_open(self) -> None:
        if self._closed:
            raise KafkaError(ErrorCode.kafka_storage_error, f"{self._directory} is closed")
