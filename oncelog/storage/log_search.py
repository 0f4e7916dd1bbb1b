"""Finding batches and records in a partition log's segments, oldest first: whole batches
from an offset for Fetch (``read_batches``, behind ``PartitionLog.read``), and records by
timestamp for ListOffsets (Kafka's ``UnifiedLog.fetchOffsetByTimestamp`` and
``LogSegment.findOffsetByTimestamp``). Read-only: the log owns the segments.

Each segment knows its largest timestamp and keeps a sparse time index (largest timestamp
so far -> relative offset); the index narrows the scan to the batches that can hold the
first record at or after a timestamp, and only those batches are decoded.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence

from oncelog.records.codec import decode_batch
from oncelog.storage.segment import LogSegment

__all__ = ["max_timestamp_offset", "offset_for_timestamp", "read_batches"]


def read_batches(
    segments: Sequence[LogSegment],
    bases: Sequence[int],
    offset: int,
    max_bytes: int,
    limit: int,
    min_one_batch: bool,
) -> tuple[bytes, int, int] | None:
    """``(data, first_offset, next_offset)``: whole batches from the one holding ``offset``
    (which the caller checked is in the log), up to ``max_bytes`` (but at least one batch
    when ``min_one_batch``), none with a base offset at or above ``limit``; ``bases`` are
    the segments' base offsets. None when no batch qualifies."""
    i = bisect_right(bases, offset) - 1
    parts: list[bytes] = []
    first_offset = -1
    first_base = -1
    next_offset = offset
    budget = max_bytes
    force = min_one_batch
    while i < len(segments):
        segment = segments[i]
        i += 1
        if segment.base_offset >= limit:
            break
        if first_offset < 0:
            found = segment.find_batch(offset)
            if found is None:
                continue
            start, first_base = found[0], found[1]
        elif segment.size == 0:
            continue
        else:
            start = 0
        end, after = segment.batches_end(start, budget, limit, force)
        if end == start:
            break
        parts.append(segment.read(start, end))
        if first_offset < 0:
            first_offset = first_base
        next_offset = after
        budget -= end - start
        force = False
        if end < segment.size or budget <= 0:
            break
    if not parts:
        return None
    data = parts[0] if len(parts) == 1 else b"".join(parts)
    return data, first_offset, next_offset


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
