"""Log compaction, the decisions: which part of a log the cleaner may clean, and the offset
map of the latest offset per key (Kafka's LogCleanerManager and Cleaner.buildOffsetMap).
No I/O: the caller walks the segments and feeds batches in (``oncelog.storage.cleaner_run``
does, for the file engine); what to keep of each batch is ``cleaner_txn``'s.

The cleanable range
-------------------
A log is split at the cleaner checkpoint (``first_dirty``): below it the log was already
cleaned, above it is dirty. The cleaner may only touch what lies below the first uncleanable
offset, the smallest of

* the last stable offset (which is never above the high watermark): every transaction below
  it is decided, so an aborted record is known to be aborted;
* the active segment's base offset: the active segment is never cleaned;
* the base offset of the first dirty segment holding a record newer than
  ``min.compaction.lag.ms``.

oncelog cleans whole segments only: a segment that reaches past the first uncleanable offset
waits for the next pass (``segment.ms`` and ``segment.bytes`` roll it). Kafka also cleans
the prefix of such a segment; the difference is only when a record goes, never whether.

The log is worth cleaning when its dirty ratio, dirty bytes over clean plus dirty bytes of
the cleanable segments, is above ``min.cleanable.dirty.ratio``, or when the earliest first
batch of its inactive dirty segments is older than ``max.compaction.lag.ms`` (Kafka's
LogCleanerManager.grabFilthiestCompactedLog and maxCompactionDelay).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from oncelog.config import LogConfig
from oncelog.records.batch import BatchHeader
from oncelog.records.codec import Record

__all__ = [
    "DEDUPE_ENTRY_BYTES",
    "CleanableRange",
    "OffsetMap",
    "SegmentInfo",
    "cleanable_range",
    "map_capacity",
]

DEDUPE_ENTRY_BYTES = 24
"""What one offset-map entry costs in ``log.cleaner.dedupe.buffer.size``: Kafka's
SkimpyOffsetMap stores a 16-byte MD5 of the key and an 8-byte offset."""

_LOAD_FACTOR = 0.9  # Kafka's log.cleaner.io.buffer.load.factor


def map_capacity(dedupe_buffer_bytes: int, threads: int = 1) -> int:
    """Keys the offset map of one cleaner thread may hold (Kafka divides the buffer among
    the threads and fills it to the load factor)."""
    return max(1, int(dedupe_buffer_bytes // max(1, threads) // DEDUPE_ENTRY_BYTES
                      * _LOAD_FACTOR))


@dataclass(frozen=True, slots=True)
class SegmentInfo:
    """What the decisions need of a segment: its offsets, its size, its first batch's max
    timestamp (``first_timestamp``, -1 when none; Kafka's earliest timestamp of a segment)
    and its largest timestamp (-1 when none)."""

    base_offset: int
    next_offset: int
    size: int
    first_timestamp: int
    max_timestamp: int


@dataclass(frozen=True, slots=True)
class CleanableRange:
    """What a pass may clean: segments ``[0, end)`` of the list it was decided over (index
    ``end`` is the first one not cleaned), the dirty ones from index ``first_dirty_index``.
    ``first_dirty`` is the checkpoint it started from, ``first_uncleanable`` the offset it
    may not reach; ``forced`` says ``max.compaction.lag.ms`` made it due whatever the
    ratio."""

    first_dirty: int
    first_uncleanable: int
    first_dirty_index: int
    end: int
    clean_bytes: int
    dirty_bytes: int
    forced: bool

    @property
    def dirty_ratio(self) -> float:
        total = self.clean_bytes + self.dirty_bytes
        return self.dirty_bytes / total if total else 0.0


def cleanable_range(
    segments: Sequence[SegmentInfo],
    *,
    first_dirty: int,
    last_stable_offset: int,
    now_ms: int,
    config: LogConfig,
) -> CleanableRange:
    """Split ``segments`` (oldest first, the last one active) for a pass: see the module
    docstring. ``first_dirty`` is the cleaner checkpoint (the log start offset when the log
    was never cleaned); ``last_stable_offset`` the partition's LSO (at most its high
    watermark). Never includes the active segment."""
    if not segments:
        return CleanableRange(first_dirty, first_dirty, 0, 0, 0, 0, False)
    first_dirty = max(first_dirty, segments[0].base_offset)
    uncleanable = min(last_stable_offset, segments[-1].base_offset)
    lag_horizon = now_ms - config.min_compaction_lag_ms
    first_dirty_index = len(segments) - 1
    for i, segment in enumerate(segments[:-1]):
        if segment.next_offset > first_dirty:
            first_dirty_index = i
            break
    if config.min_compaction_lag_ms > 0:
        for segment in segments[first_dirty_index:-1]:
            if segment.max_timestamp > lag_horizon:
                uncleanable = min(uncleanable, segment.base_offset)
                break
    end = first_dirty_index
    while end < len(segments) - 1 and segments[end].next_offset <= uncleanable:
        end += 1
    clean_bytes = sum(s.size for s in segments[:first_dirty_index])
    dirty_bytes = sum(s.size for s in segments[first_dirty_index:end])
    # Kafka's maxCompactionDelay: the earliest first-batch timestamp (> 0) of the dirty
    # inactive segments, whether or not they are cleanable yet.
    first_timestamps = [s.first_timestamp for s in segments[first_dirty_index:-1]
                        if s.first_timestamp > 0]
    forced = bool(first_timestamps) and (
        min(first_timestamps) < now_ms - max(config.max_compaction_lag_ms, 0)
    )
    return CleanableRange(
        first_dirty, uncleanable, first_dirty_index, end, clean_bytes, dirty_bytes, forced
    )


def should_clean(found: CleanableRange, config: LogConfig) -> bool:
    """Whether the range is worth a pass: dirty bytes, and a dirty ratio above
    ``min.cleanable.dirty.ratio`` (strictly, as Kafka's grabFilthiestCompactedLog) or a
    forced (``max.compaction.lag.ms``) clean."""
    if found.dirty_bytes == 0:
        return False
    return found.forced or found.dirty_ratio > config.min_cleanable_dirty_ratio


class OffsetMap:
    """The latest offset of each key over the dirty section (Kafka's SkimpyOffsetMap, with
    the keys themselves rather than their MD5), bounded to ``capacity`` keys.

    Records of aborted transactions are not mapped (a committed value must not lose to an
    aborted one); keyless records are not either (compaction needs a key). ``latest_offset``
    is the last offset the map covers: records above it are kept whatever their key."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.offsets: dict[bytes, int] = {}
        self.latest_offset = -1

    def __len__(self) -> int:
        return len(self.offsets)

    def get(self, key: bytes) -> int:
        return self.offsets.get(key, -1)

    def fits(self, keys: int) -> bool:
        """Whether ``keys`` more new keys still fit (a segment is mapped whole or not)."""
        return len(self.offsets) + keys <= self.capacity

    def put_batch(self, header: BatchHeader, records: Iterable[Record]) -> None:
        """Map the records of a data batch that is not aborted."""
        offsets = self.offsets
        for record in records:
            if record.key is not None:
                offsets[record.key] = record.offset
        self.latest_offset = max(self.latest_offset, header.last_offset)

    def cover(self, offset: int) -> None:
        """Everything up to ``offset`` has been mapped (control and aborted batches too)."""
        self.latest_offset = max(self.latest_offset, offset)
