"""Retention: which of a partition log's oldest segments may go (Kafka's
``UnifiedLog.deleteOldSegments`` rules).

Whole segments are deleted, oldest first and never the active one: those entirely below the
log start offset (moved up by DeleteRecords or by earlier deletions), then, when
``cleanup.policy`` includes ``delete``, those whose largest timestamp is older than
``retention.ms``, then while the log exceeds ``retention.bytes`` by at least the segment's
size (-1 disables either). This module decides, for the file log and the memory log alike;
``PartitionLog`` deletes the files and moves its log start offset (``apply_retention``,
``delete_records_before``), ``MemoryLog`` drops its batches.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence

from oncelog.clock import Clock
from oncelog.config import LogConfig
from oncelog.storage.segment import LogSegment

__all__ = ["segment_timestamp", "segments_below", "segments_to_delete"]


def segments_to_delete(
    bases: Sequence[int],
    size: Callable[[int], int],
    timestamp: Callable[[int], int],
    log_start_offset: int,
    config: LogConfig,
    clock: Clock,
) -> tuple[int, str]:
    """How many of the segments (``bases``: their base offsets, oldest first, the last one
    active) retention deletes, and why (the rules that applied, comma-separated; empty when
    none did). ``size(i)`` and ``timestamp(i)`` tell segment ``i``'s bytes and the time
    retention.ms compares; both engines (file and memory) decide through this one function."""
    limit = len(bases) - 1
    reasons: list[str] = []
    count = segments_below(bases, log_start_offset)
    if count:
        reasons.append("log start offset")
    if "delete" in config.cleanup_policy:
        before = count
        if config.retention_ms >= 0:
            now = clock.now_ms()
            while count < limit and now - timestamp(count) > config.retention_ms:
                count += 1
            if count > before:
                reasons.append(f"retention.ms={config.retention_ms}")
        before = count
        if config.retention_bytes >= 0:
            excess = sum(size(i) for i in range(count, len(bases))) - config.retention_bytes
            while count < limit and excess - size(count) >= 0:
                excess -= size(count)
                count += 1
            if count > before:
                reasons.append(f"retention.bytes={config.retention_bytes}")
    return count, ", ".join(reasons)


def segments_below(bases: Sequence[int], offset: int) -> int:
    """How many of the oldest segments (by base offset, the last one active) lie entirely
    below ``offset`` (DeleteRecords moved the log start offset there)."""
    count = 0
    while count < len(bases) - 1 and bases[count + 1] <= offset:
        count += 1
    return count


def segment_timestamp(segment: LogSegment) -> int:
    """What retention.ms compares: the largest timestamp, or the file's mtime without one."""
    if segment.max_timestamp >= 0:
        return segment.max_timestamp
    return os.fstat(segment.fd).st_mtime_ns // 1_000_000
