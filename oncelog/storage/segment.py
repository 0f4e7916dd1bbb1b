"""One log segment: a ``.log`` file of record batches and its sparse indexes.

Files, named by the segment's base offset zero-padded to 20 digits (Kafka's layout)::

    00000000000000001234.log        record batches (RecordBatch v2) back to back
    00000000000000001234.index      relative last offset -> batch position (see ``index``)
    00000000000000001234.timeindex  largest timestamp so far -> relative offset
    00000000000000001234.txnindex   aborted transactions whose ABORT marker is here

The ``.log`` fd stays open for the segment's life; reads use ``os.pread`` and writes
``os.pwrite`` at the segment's tracked size, so the file position never matters and a failed
write is simply overwritten by the next one.

Hot paths work on batch headers only: ``find_batch`` bisects the offset index and then walks
headers (one ``pread`` of a chunk, ``struct.unpack_from`` per batch); no record is decoded
except by the timestamp lookups, which decode exactly one batch.

The aborted-transaction index (``txn_index``, see ``txn_index``) is the third sidecar: the
UnifiedLog appends to it after an ABORT marker, and the segment fsyncs it in ``flush``,
truncates it in ``truncate_to``, closes it with the segment and deletes it in ``delete``. It is
loaded by ``load_txn_index`` once ``next_offset`` is known (after ``recover`` if there is one).
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from pathlib import Path

from oncelog.records.batch import HEADER_SIZE, HEADER_STRUCT, LOG_OVERHEAD, BatchHeader
from oncelog.storage.index import CorruptIndexError, OffsetIndex, TimeIndex
from oncelog.storage.segment_scan import (
    INT32_MAX,
    CorruptSegmentError,
    RecoveryOutcome,
    read_prefix,
    scan_for_recovery,
    walk_headers,
    walk_prefixes,
)
from oncelog.storage.txn_index import AbortedTxn, TransactionIndex

__all__ = [
    "INT32_MAX",
    "SUFFIXES",
    "CorruptSegmentError",
    "LogSegment",
    "RecoveryOutcome",
    "segment_file_name",
]

logger = logging.getLogger(__name__)

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
TXN_INDEX_SUFFIX = ".txnindex"
SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)

def segment_file_name(base_offset: int, suffix: str) -> str:
    return f"{base_offset:020d}{suffix}"


class LogSegment:
    """A segment's files and the in-memory facts about them.

    ``next_offset`` is one past the last offset in the segment (``base_offset`` when empty);
    ``max_timestamp``/``offset_of_max_timestamp`` are the largest batch max timestamp and the
    last offset of the first batch holding it (-1/-1 when none); ``rolling_timestamp`` is the
    first batch's max timestamp, which ``segment.ms`` is measured from (as Kafka does).
    """

    def __init__(
        self,
        directory: Path,
        base_offset: int,
        fd: int,
        size: int,
        offset_index: OffsetIndex,
        time_index: TimeIndex,
        created_ms: int,
    ) -> None:
        self.directory = directory
        self.base_offset = base_offset
        self.fd = fd
        self.size = size
        self.offset_index = offset_index
        self.time_index = time_index
        self.created_ms = created_ms
        self.next_offset = base_offset
        self.max_timestamp = -1
        self.offset_of_max_timestamp = -1
        self.rolling_timestamp = -1
        self.bytes_since_index_entry = 0
        self.unflushed = False
        self.walk_chunk = 8192  # bytes per pread when walking headers
        self.txn_index = TransactionIndex(self.path(TXN_INDEX_SUFFIX), base_offset)

    # ------------------------------------------------------------------ lifecycle

    def path(self, suffix: str) -> Path:
        return self.directory / segment_file_name(self.base_offset, suffix)

    @property
    def log_path(self) -> Path:
        return self.path(LOG_SUFFIX)

    @classmethod
    def create(cls, directory: Path, base_offset: int, created_ms: int) -> LogSegment:
        """A new, empty segment (any stale files with its name are replaced)."""
        log_path = directory / segment_file_name(base_offset, LOG_SUFFIX)
        (directory / segment_file_name(base_offset, TXN_INDEX_SUFFIX)).unlink(missing_ok=True)
        for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX):  # empty, but present (as in Kafka)
            os.close(
                os.open(
                    directory / segment_file_name(base_offset, suffix),
                    os.O_WRONLY | os.O_CREAT | os.O_TRUNC,
                    0o644,
                )
            )
        fd = os.open(log_path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        segment = cls(
            directory,
            base_offset,
            fd,
            0,
            OffsetIndex(directory / segment_file_name(base_offset, INDEX_SUFFIX)),
            TimeIndex(directory / segment_file_name(base_offset, TIME_INDEX_SUFFIX)),
            created_ms,
        )
        segment.unflushed = True
        return segment

    @classmethod
    def open(
        cls, directory: Path, base_offset: int, created_ms: int, *, load_indexes: bool = True
    ) -> tuple[LogSegment, bool]:
        """Open an existing segment. Returns it and whether its indexes were loaded intact
        (False: the caller must ``recover`` it, which rebuilds them; always False without
        ``load_indexes``, for segments the caller is going to recover anyway).

        With intact indexes the tail is walked (headers only, from the last index entry) to
        learn ``next_offset`` and the largest timestamp.
        """
        log_path = directory / segment_file_name(base_offset, LOG_SUFFIX)
        fd = os.open(log_path, os.O_RDWR)
        size = os.fstat(fd).st_size
        index_path = directory / segment_file_name(base_offset, INDEX_SUFFIX)
        time_path = directory / segment_file_name(base_offset, TIME_INDEX_SUFFIX)
        if not load_indexes:
            segment = cls(
                directory, base_offset, fd, size, OffsetIndex(index_path),
                TimeIndex(time_path), created_ms,
            )
            return segment, False
        try:
            offset_index = OffsetIndex.load(index_path)
            time_index = TimeIndex.load(time_path)
        except (CorruptIndexError, OSError) as exc:
            logger.warning("%s: %s; rebuilding %s and %s from the log", directory, exc,
                           index_path.name, time_path.name)
            segment = cls(
                directory, base_offset, fd, size, OffsetIndex(index_path),
                TimeIndex(time_path), created_ms,
            )
            return segment, False
        segment = cls(directory, base_offset, fd, size, offset_index, time_index, created_ms)
        try:
            segment._check_indexes()
            segment._load_tail()
        except (CorruptIndexError, CorruptSegmentError, OSError) as exc:
            # Whatever the bytes of a damaged index are, the log is the truth: rebuild.
            logger.warning("%s: %s/%s: %s; rebuilding both from the log", directory,
                           index_path.name, time_path.name, exc)
            segment.offset_index.reset()
            segment.time_index.reset()
            return segment, False
        return segment, True

    def _check_indexes(self) -> None:
        """Reject index contents that no append could have written (zero-filled or garbage
        tails after a power loss, random bytes): the entries must be sorted and inside the
        segment. Raises CorruptIndexError naming the file."""
        index = self.offset_index
        offsets, positions = index.offsets, index.positions
        if offsets and (offsets[0] < 0 or positions[0] < 0 or positions[-1] >= self.size):
            raise CorruptIndexError(f"{index.path.name}: entries outside the segment")
        for i in range(1, len(offsets)):
            if offsets[i] <= offsets[i - 1] or positions[i] <= positions[i - 1]:
                raise CorruptIndexError(f"{index.path.name}: entry {i} is out of order")
        times = self.time_index
        timestamps, relative = times.timestamps, times.offsets
        if relative and (relative[0] < 0 or timestamps[0] < 0):
            raise CorruptIndexError(f"{times.path.name}: negative first entry")
        for i in range(1, len(relative)):
            if timestamps[i] <= timestamps[i - 1] or relative[i] < relative[i - 1]:
                raise CorruptIndexError(f"{times.path.name}: entry {i} is out of order")

    def _load_tail(self) -> None:
        """Check the loaded indexes against the log and learn the tail state from them."""
        index = self.offset_index
        start = 0
        last = index.last()
        if last is not None:
            rel, position = last
            if index.offsets[0] < 0 or not 0 <= position < self.size:
                raise CorruptIndexError(
                    f"{index.path.name}: entry ({rel}, {position}) is past the log end"
                )
            prefix = self._read_prefix(position)
            if prefix is None or prefix[0] + prefix[6] != self.base_offset + rel:
                raise CorruptIndexError(
                    f"{index.path.name}: entry ({rel}, {position}) does not match the log"
                )
            start = position
        time_last = self.time_index.last()
        if time_last is not None:
            self.max_timestamp = time_last[0]
            self.offset_of_max_timestamp = self.base_offset + time_last[1]
        next_offset = self.base_offset
        end = start
        for _pos, base, size, delta, max_ts in self.walk(start, self.size):
            next_offset = base + delta + 1
            end = _pos + size
            if max_ts > self.max_timestamp:
                self.max_timestamp = max_ts
                self.offset_of_max_timestamp = base + delta
        if end != self.size and self.size > 0:
            raise CorruptSegmentError(f"last batch ends at byte {end}, file has {self.size}")
        if time_last is not None and self.base_offset + time_last[1] >= next_offset:
            raise CorruptIndexError(f"{self.time_index.path.name} points past the last offset")
        if next_offset == self.base_offset and self.size > 0 and last is None:
            raise CorruptSegmentError("no batch found in a non-empty segment")
        self.next_offset = next_offset
        if time_last is not None:
            # Every time entry is (max timestamp, last offset) of one batch: check the last
            # one, which is what a torn or zero-filled tail would have written.
            found = self.find_batch(self.base_offset + time_last[1])
            prefix = None if found is None else self._read_prefix(found[0])
            if (
                prefix is None
                or prefix[0] + prefix[6] != self.base_offset + time_last[1]
                or prefix[8] != time_last[0]
            ):
                raise CorruptIndexError(
                    f"{self.time_index.path.name}: last entry {time_last} does not match the log"
                )
        self.bytes_since_index_entry = self.size - start
        first = self._read_prefix(0)
        self.rolling_timestamp = first[8] if first is not None else -1

    def seal(self) -> None:
        """The segment stops being active: record its largest timestamp in the time index
        (so a later load finds it without a walk) and release the index fds."""
        if self.max_timestamp >= 0:
            entries = len(self.time_index)
            self.time_index.maybe_append(
                self.max_timestamp, self.offset_of_max_timestamp - self.base_offset
            )
            if len(self.time_index) != entries:
                self.unflushed = True
        self.offset_index.close()
        self.time_index.close()

    def flush(self) -> None:
        """fsync the log and the three indexes."""
        os.fsync(self.fd)
        self.offset_index.fsync()
        self.time_index.fsync()
        self.txn_index.fsync()
        self.unflushed = False

    def load_txn_index(self) -> bool:
        """Load ``.txnindex`` against ``next_offset``. False when the file cannot be
        trusted: it is logged (by name), left on disk and the in-memory index is empty; the
        caller rebuilds it from the log and then ``truncate_txn_index``es it."""
        try:
            self.txn_index = TransactionIndex.load(
                self.path(TXN_INDEX_SUFFIX), self.base_offset, self.next_offset
            )
        except (CorruptIndexError, OSError) as exc:
            logger.warning("%s: %s; rebuilding the transaction index from the log",
                           self.directory, exc)
            self.txn_index = TransactionIndex(self.path(TXN_INDEX_SUFFIX), self.base_offset)
            self.txn_index.mark_untrusted()
            return False
        return True

    def append_aborted_txn(self, entry: AbortedTxn) -> None:
        self.txn_index.append(entry)
        self.unflushed = True

    def close(self) -> None:
        try:
            self.offset_index.close()
            self.time_index.close()
            self.txn_index.close()
        finally:
            if self.fd >= 0:
                os.close(self.fd)
                self.fd = -1

    def release(self) -> None:
        """Close every fd without writing anything (the files are about to go)."""
        self.offset_index.discard()
        self.time_index.discard()
        self.txn_index.close()
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def delete(self) -> None:
        """Close and remove every file of this segment."""
        self.release()
        for suffix in SUFFIXES:
            self.path(suffix).unlink(missing_ok=True)

    # ------------------------------------------------------------------ append

    def append(
        self, buf: bytes | bytearray, headers: list[BatchHeader], index_interval: int
    ) -> None:
        """Write ``buf`` (the batches ``headers`` describe, offsets already assigned) at the
        end of the log in one ``pwrite``, then index it. On an OSError nothing in memory
        changes and the bytes past ``size`` are garbage the next append overwrites."""
        position = self.size
        written = 0
        total = len(buf)
        try:
            with memoryview(buf) as view:  # released even on error: the caller owns buf
                while written < total:
                    written += os.pwrite(self.fd, view[written:], position + written)
        except OSError:
            with contextlib.suppress(OSError):  # best effort: drop any partial write
                os.ftruncate(self.fd, position)
            raise
        base = self.base_offset
        if position == 0:
            self.rolling_timestamp = headers[0].max_timestamp
        max_ts = self.max_timestamp
        max_ts_offset = self.offset_of_max_timestamp
        since = self.bytes_since_index_entry
        offset_index = self.offset_index
        time_index = self.time_index
        last_offset = base
        for h in headers:
            last_offset = h.base_offset + h.last_offset_delta
            if h.max_timestamp > max_ts:
                max_ts = h.max_timestamp
                max_ts_offset = last_offset
            if since > index_interval:
                offset_index.append(last_offset - base, position)
                time_index.maybe_append(max_ts, max_ts_offset - base)
                since = 0
            size = h.batch_length + LOG_OVERHEAD
            position += size
            since += size
        self.size = position
        self.next_offset = last_offset + 1
        self.max_timestamp = max_ts
        self.offset_of_max_timestamp = max_ts_offset
        self.bytes_since_index_entry = since
        self.unflushed = True
        try:
            offset_index.write_pending()
            time_index.write_pending()
        except OSError as exc:
            # The batches are in the log (the append succeeded); the entries stay pending in
            # memory and are written by the next append or flush, and a restart rebuilds a
            # short index file.
            logger.error("%s: segment %d: index write failed: %s", self.directory,
                         self.base_offset, exc)

    # ------------------------------------------------------------------ reads

    def read(self, start: int, end: int) -> bytes:
        return os.pread(self.fd, end - start, start)

    def _read_prefix(self, position: int) -> tuple[int, ...] | None:
        return read_prefix(self.fd, position)

    def walk(self, start: int, end: int) -> Iterator[tuple[int, int, int, int, int]]:
        """Yield ``(position, base_offset, size, last_offset_delta, max_timestamp)`` for the
        batches from byte ``start`` (a batch boundary) to ``end`` (``walk_prefixes``)."""
        return walk_prefixes(self.fd, self.base_offset, start, end, self.walk_chunk)

    def headers(self, start: int, end: int) -> Iterator[BatchHeader]:
        """Full headers of the batches from byte ``start`` (a batch boundary) to ``end``."""
        return walk_headers(self.fd, self.base_offset, start, end, self.walk_chunk)

    def find_batch(self, offset: int) -> tuple[int, int, int, int] | None:
        """``(position, base_offset, size, last_offset_delta)`` of the first batch whose last
        offset is >= ``offset``, or None when every batch here is below it."""
        if offset >= self.next_offset:
            return None
        start = self.offset_index.lookup(offset - self.base_offset)
        for pos, base, size, delta, _ts in self.walk(start, self.size):
            if base + delta >= offset:
                return pos, base, size, delta
        return None

    def batches_end(
        self, start: int, max_bytes: int, max_offset: int, force_first: bool
    ) -> tuple[int, int]:
        """Where a read of whole batches from byte ``start`` (a batch boundary) stops:
        ``(end_position, next_offset)``. Batches with base offset >= ``max_offset`` are left
        out, and so is the first batch that would take the total past ``max_bytes`` -- unless
        it is the first one and ``force_first``. ``end == start`` means nothing to read."""
        end = self.size
        next_offset = self.next_offset
        if max_offset < next_offset:
            found = self.find_batch(max_offset)
            if found is not None:
                pos, base, size, delta = found
                if base >= max_offset:
                    end, next_offset = pos, base
                else:
                    end, next_offset = pos + size, base + delta + 1
        if end <= start:
            return start, next_offset
        byte_limit = start + max_bytes
        if end <= byte_limit:
            return end, next_offset
        # Walk from the last indexed batch at or before the byte limit.
        walk_from = max(start, self.offset_index.floor_position(byte_limit))
        cut = walk_from
        cut_offset = -1
        for pos, base, size, delta, _ts in self.walk(walk_from, end):
            if pos + size > byte_limit:
                cut = pos
                cut_offset = base
                if pos == start and force_first:
                    cut = pos + size
                    cut_offset = base + delta + 1
                break
        if cut_offset < 0:  # cannot happen: end > byte_limit means some batch crosses it
            raise CorruptSegmentError(f"segment {self.base_offset}: no batch crosses the limit")
        return cut, cut_offset

    # ------------------------------------------------------------------ recovery, truncation

    def recover(self, index_interval: int) -> RecoveryOutcome:
        """Validate every batch (sizes, magic, offsets, CRC32C), cut the file at the first bad
        one, and rebuild both indexes and the in-memory state from what is valid
        (``segment_scan.scan_for_recovery``)."""
        scan = scan_for_recovery(
            self.fd, self.base_offset, self.offset_index, self.time_index, index_interval
        )
        outcome = scan.outcome
        self.size = outcome.valid_bytes
        self.next_offset = outcome.next_offset
        self.max_timestamp = scan.max_timestamp
        self.offset_of_max_timestamp = scan.offset_of_max_timestamp
        self.rolling_timestamp = scan.rolling_timestamp
        self.bytes_since_index_entry = scan.bytes_since_index_entry
        self.unflushed = True
        return outcome

    def truncate_to(self, offset: int) -> int:
        """Remove the batch holding ``offset`` and everything after it; return the bytes
        removed. ``next_offset`` becomes that batch's base offset (which is ``offset`` when
        ``offset`` is a batch boundary, as truncation points always are in practice)."""
        found = self.find_batch(offset)
        if found is None:
            return 0
        cut, base, _size, _delta = found
        removed = self.size - cut
        os.ftruncate(self.fd, cut)
        self.offset_index.truncate_to_position(cut)
        self.time_index.truncate_to_offset(base - self.base_offset)
        self.txn_index.truncate_from(base)
        self.size = cut
        self.next_offset = base
        # Largest timestamp of what is left: the last kept time entry covers everything up to
        # the last kept offset-index entry; walk the few batches after that.
        last_time = self.time_index.last()
        if last_time is not None:
            self.max_timestamp = last_time[0]
            self.offset_of_max_timestamp = self.base_offset + last_time[1]
        else:
            self.max_timestamp = -1
            self.offset_of_max_timestamp = -1
        last_index = self.offset_index.last()
        start = last_index[1] if last_index is not None else 0
        since_start = start
        for _pos, b, _s, delta, max_ts in self.walk(start, cut):
            if max_ts > self.max_timestamp:
                self.max_timestamp = max_ts
                self.offset_of_max_timestamp = b + delta
        self.bytes_since_index_entry = cut - since_start
        if cut == 0:
            self.rolling_timestamp = -1
        self.unflushed = True
        return removed

    def header_at(self, position: int) -> BatchHeader:
        data = os.pread(self.fd, HEADER_SIZE, position)
        if len(data) < HEADER_SIZE:
            raise CorruptSegmentError(f"segment {self.base_offset}: short header at {position}")
        return BatchHeader(*HEADER_STRUCT.unpack(data))

    def __repr__(self) -> str:
        return (
            f"LogSegment(base={self.base_offset}, next={self.next_offset}, size={self.size}, "
            f"max_ts={self.max_timestamp})"
        )
