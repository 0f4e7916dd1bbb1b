"""Finding records by timestamp in a partition log's segments (ListOffsets by timestamp and
MAX_TIMESTAMP; Kafka's ``UnifiedLog.fetchOffsetByTimestamp`` and
``LogSegment.findOffsetByTimestamp``).

Each segment knows its largest timestamp and keeps a sparse time index (largest timestamp
so far -> relative offset); the index narrows the scan to the batches that can hold the
first record at or after a timestamp, and only those batches are decoded.
"""

from __future__ import annotations

from collections.abc import Sequence

from oncelog.records.codec import decode_batch
from oncelog.storage.segment import LogSegment

__all__ = ["max_timestamp_offset", "offset_for_timestamp"]


def offset_for_timestamp(
    segments: Sequence[LogSegment], log_start_offset: int, timestamp_ms: int
) -> tuple[int, int] | None:
    """``(offset, timestamp)`` of the first record (in offset order, at or after
    ``log_start_offset``) whose timestamp is >= ``timestamp_ms``; None when there is none."""
    for segment in segments:
        if segment.max_timestamp < timestamp_ms:
            continue
        found = _search_segment_by_time(segment, log_start_offset, timestamp_ms)
        if found is not None:
            return found
    return None


def _search_segment_by_time(
    segment: LogSegment, log_start_offset: int, target: int
) -> tuple[int, int] | None:
    lowest = max(log_start_offset, segment.base_offset)
    below = segment.time_index.last_offset_below(target)
    if below is not None:
        lowest_unknown = segment.base_offset + below + 1  # all before it are older
        lowest_scan = max(lowest, lowest_unknown)
    else:
        lowest_scan = lowest
    found = segment.find_batch(lowest_scan)
    if found is None:
        return None
    for pos, base, size, delta, max_ts in segment.walk(found[0], segment.size):
        if max_ts < target or base + delta < lowest:
            continue
        _header, records = decode_batch(segment.read(pos, pos + size))
        for record in records:
            if record.timestamp >= target and record.offset >= lowest:
                return record.offset, record.timestamp
    return None


def max_timestamp_offset(segments: Sequence[LogSegment]) -> tuple[int, int] | None:
    """``(offset, timestamp)`` of the (first) record with the largest timestamp; None when
    the segments hold no record with a timestamp."""
    best: LogSegment | None = None
    for segment in segments:
        if segment.max_timestamp >= 0 and (
            best is None or segment.max_timestamp > best.max_timestamp
        ):
            best = segment
    if best is None:
        return None
    found = best.find_batch(best.offset_of_max_timestamp)
    if found is not None:
        pos, _base, size, _delta = found
        _header, records = decode_batch(best.read(pos, pos + size))
        for record in records:
            if record.timestamp == best.max_timestamp:
                return record.offset, record.timestamp
    return best.offset_of_max_timestamp, best.max_timestamp
