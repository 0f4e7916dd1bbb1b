"""Log compaction, one pass over one partition of the file engine, in three calls so that the
slow part runs off the event loop (Kafka's Cleaner.clean / doClean):

* ``plan_clean`` (owner's thread, quick): decides the cleanable range (``cleaner``) and
  captures what the pass needs: the segments, the aborted transactions, each producer's
  last data offset, the LSO bound;
* ``prepare_clean`` (any thread; reads only the planned, inactive segments): builds the offset
  map over the dirty segments, walks every planned batch through ``cleaner_txn.BatchFilter``
  and writes each group's cleaned segment into its staging directory (``cleaner_files``).
  Groups are Kafka's groupSegmentsBySize, with the log-size bound applied to what the group's
  cleaned segment holds so far plus the next old segment's size, so a pass over many dirty
  segments that clean down to a few bytes leaves one segment, not one per old segment;
* ``swap_cleaned`` (owner's thread, holds the partition only for renames): checks the log
  still has the planned segments, swaps each group in atomically, opens the new segments and
  writes the cleaner checkpoint (``cleaner-offset.checkpoint`` in the partition directory:
  the first dirty offset of the next pass).

Only segments below the recovery point are cleaned, so recovery after an unclean stop never
re-validates a cleaned segment (whose next offset may stop short of the next segment's base:
compaction leaves gaps). The memory engine is not compacted (``plan_clean`` returns None).
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from oncelog.records.batch import LOG_OVERHEAD
from oncelog.records.codec import decode_batch
from oncelog.storage.cleaner import (
    CleanableRange,
    OffsetMap,
    SegmentInfo,
    cleanable_range,
    should_clean,
)
from oncelog.storage.cleaner_files import SwapStep, staging_dir, swap_in, write_cleaned
from oncelog.storage.cleaner_txn import BatchFilter, LastRecord, TxnWalk, control_type
from oncelog.storage.files import atomic_write
from oncelog.storage.log import PartitionLog
from oncelog.storage.segment import INT32_MAX, LogSegment
from oncelog.storage.txn_index import AbortedTxn
from oncelog.storage.unified_log import UnifiedLog

__all__ = [
    "CHECKPOINT_NAME",
    "CleanAborted",
    "CleanPlan",
    "CleanResult",
    "PreparedClean",
    "clean_now",
    "discard_prepared",
    "find_cleanable",
    "plan_clean",
    "prepare_clean",
    "read_cleaner_checkpoint",
    "swap_cleaned",
]

logger = logging.getLogger(__name__)

CHECKPOINT_NAME = "cleaner-offset.checkpoint"


def read_cleaner_checkpoint(directory: Path) -> int:
    """The first dirty offset recorded by the last pass (0 when never cleaned)."""
    try:
        return int((directory / CHECKPOINT_NAME).read_text().strip())
    except (FileNotFoundError, ValueError):
        return 0


@dataclass(frozen=True, slots=True)
class CleanPlan:
    """A pass decided on the owner's thread. ``fds`` are the pass's own duplicates of the
    planned segments' fds (with their sizes and index bytes then): the worker reads only
    through them, so a log closed, truncated or deleted meanwhile (its fds closed, maybe
    reused) never makes it read a wrong file. ``close()`` releases them; ``prepare_clean``
    always does."""

    log: PartitionLog
    found: CleanableRange
    segments: list[LogSegment]  # the planned ones, [0, found.end)
    aborted: list[AbortedTxn]
    last_records: dict[int, LastRecord]
    now_ms: int
    map_capacity: int
    fds: list[int] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)
    index_bytes: list[tuple[int, int]] = field(default_factory=list)  # (offset, time)
    abort: threading.Event = field(default_factory=threading.Event)  # set: stop, discard
    done: threading.Event = field(default_factory=threading.Event)  # set by prepare_clean

    def close(self) -> None:
        for i, fd in enumerate(self.fds):
            if fd >= 0:
                os.close(fd)
                self.fds[i] = -1


@dataclass(slots=True)
class _Group:
    base: int
    end: int
    old: list[LogSegment]
    bytes_out: int = 0
    offset_index_bytes: int = 0  # the old segments' (Kafka's sizeInBytes of their indexes)
    time_index_bytes: int = 0


@dataclass(slots=True)
class PreparedClean:
    plan: CleanPlan
    map_end: int  # the next pass's first dirty offset
    groups: list[_Group] = field(default_factory=list)
    bytes_read: int = 0


@dataclass(frozen=True, slots=True)
class CleanResult:
    """What a pass did: bytes of the segments it rewrote before and after, segments before
    and after, the new cleaner checkpoint and the dirty ratio that started it."""

    bytes_before: int
    bytes_after: int
    segments_before: int
    segments_after: int
    checkpoint: int
    dirty_ratio: float


class CleanAborted(Exception):
    """``prepare_clean`` stopped because ``CleanPlan.abort`` was set."""


def find_cleanable(engine: UnifiedLog, *, now_ms: int) -> CleanableRange | None:
    """The log's cleanable range now (its dirty ratio), or None when it is not compacted
    (or not a file log)."""
    log = engine.log
    if not isinstance(log, PartitionLog) or not log.config.compact:
        return None
    segments = log.segments_snapshot()
    infos = [SegmentInfo(s.base_offset, s.next_offset, s.size, s.rolling_timestamp,
                         s.max_timestamp) for s in segments]
    first_dirty = read_cleaner_checkpoint(log.directory)
    if first_dirty < log.log_start_offset or first_dirty > log.log_end_offset:
        # Kafka's cleanableOffsets: a checkpoint below the log start (retention) or past
        # the log end (truncation) is invalid; the whole log is dirty again.
        first_dirty = log.log_start_offset
    return cleanable_range(
        infos, first_dirty=first_dirty,
        last_stable_offset=min(engine.last_stable_offset, log.recovery_point),
        now_ms=now_ms, config=log.config,
    )


def plan_clean(
    engine: UnifiedLog, *, now_ms: int, map_capacity: int, found: CleanableRange | None = None
) -> CleanPlan | None:
    """A pass worth doing now, or None (not compacted, nothing cleanable, ratio too low).
    ``found``: the range ``find_cleanable`` just returned, if the caller has it."""
    if found is None:
        found = find_cleanable(engine, now_ms=now_ms)
    log = engine.log
    if found is None or not isinstance(log, PartitionLog) or not should_clean(found, log.config):
        return None
    planned = log.segments_snapshot()[: found.end]
    aborted = log.aborted_txns(planned[0].base_offset, planned[-1].next_offset)
    last_records = {
        pid: LastRecord(e.last_offset if e.last_offset >= 0 else None, e.producer_epoch)
        for pid, e in engine.producer_state.entries().items()
    }
    fds: list[int] = []
    try:
        for segment in planned:
            fds.append(os.dup(segment.fd))
    except OSError:
        for fd in fds:
            os.close(fd)
        raise
    return CleanPlan(log, found, planned, aborted, last_records, now_ms, map_capacity,
                     fds, [segment.size for segment in planned],
                     [(len(s.offset_index) * s.offset_index.entry_size,
                       len(s.time_index) * s.time_index.entry_size) for s in planned])


def _batches(plan: CleanPlan, index: int) -> Iterator[bytes]:
    """The raw batches of planned segment ``index``, one at a time (memory bounded by the
    largest batch), read through the plan's own fd."""
    fd, size = plan.fds[index], plan.sizes[index]
    if fd < 0:
        raise ValueError(f"{plan.log.directory}: the cleaning plan was closed")
    pos = 0
    while pos < size:
        if plan.abort.is_set():
            raise CleanAborted(str(plan.log.directory))
        prefix = os.pread(fd, LOG_OVERHEAD, pos)
        if len(prefix) < LOG_OVERHEAD:
            raise ValueError(f"{plan.log.directory}: segment {plan.segments[index].base_offset}"
                             f" ends inside a batch at {pos}")
        batch_size = LOG_OVERHEAD + int.from_bytes(prefix[8:12], "big")
        raw = os.pread(fd, batch_size, pos)
        if len(raw) < batch_size:
            raise ValueError(f"{plan.log.directory}: segment {plan.segments[index].base_offset}"
                             f" ends inside a batch at {pos}")
        yield raw
        pos += batch_size


def _build_map(plan: CleanPlan) -> tuple[OffsetMap, int]:
    """The offset map over the dirty segments, whole segments while they fit; the index of
    the first planned segment not mapped."""
    found = plan.found
    offset_map = OffsetMap(plan.map_capacity)
    walk = TxnWalk(t for t in plan.aborted if t.last_offset >= found.first_dirty)
    index = found.first_dirty_index
    while index < found.end:
        if len(offset_map) and not offset_map.fits(_new_keys(plan, index, offset_map)):
            break
        for raw in _batches(plan, index):
            header, records = decode_batch(raw)
            if header.is_control:
                walk.on_marker(header, control_type(records))
            elif not walk.on_data(header):
                offset_map.put_batch(header, records)
            offset_map.cover(header.last_offset)
        index += 1
    return offset_map, index


def _new_keys(plan: CleanPlan, index: int, offset_map: OffsetMap) -> int:
    """How many keys of planned segment ``index`` the map lacks, counted up to one past
    what it still has room for (a segment is mapped whole or not at all)."""
    room = offset_map.capacity - len(offset_map)
    mapped = offset_map.offsets
    new: set[bytes] = set()
    for raw in _batches(plan, index):
        header, records = decode_batch(raw)
        if header.is_control:
            continue
        new.update(r.key for r in records if r.key is not None and r.key not in mapped)
        if len(new) > room:
            break
    return len(new)


def _fits(plan: CleanPlan, group: _Group, index: int) -> bool:
    """Whether planned segment ``index`` may join ``group``: Kafka's groupSegmentsBySize
    rules (log bytes within ``segment.bytes``, each index's bytes within
    ``segment.index.bytes``, offsets within an int32 of the base unless the segment is
    empty), with the log bytes counted as what the group's cleaned segment already holds
    plus the candidate's size (an upper bound of what it keeps) rather than the sizes of the
    old segments, so segments cleaned to a few bytes merge in the pass that cleans them."""
    config = plan.log.config
    offset_index, time_index = plan.index_bytes[index]
    return (
        group.bytes_out + plan.sizes[index] <= config.segment_bytes
        and group.offset_index_bytes + offset_index <= config.segment_index_bytes
        and group.time_index_bytes + time_index <= config.segment_index_bytes
        and (plan.sizes[index] == 0
             or plan.segments[index].next_offset - 1 - group.base <= INT32_MAX)
    )


def prepare_clean(plan: CleanPlan) -> PreparedClean:
    """Build the offset map and write the cleaned segments into their staging directories.
    Reads only the planned segments, through the plan's own fds (closed here, whatever
    happens): safe off the owner's thread even if the log is closed meanwhile (the swap
    then finds it changed). On an error the staging directories written are removed."""
    try:
        return _prepare(plan)
    finally:
        plan.close()
        plan.done.set()


def _prepare(plan: CleanPlan) -> PreparedClean:
    offset_map, mapped_to = _build_map(plan)
    config = plan.log.config
    covered = plan.segments[:mapped_to]
    prepared = PreparedClean(plan, covered[-1].next_offset if covered else plan.found.first_dirty)
    if not covered:
        return prepared
    txns = TxnWalk(plan.aborted)
    batch_filter = BatchFilter(
        offset_map, txns, plan.last_records, now_ms=plan.now_ms,
        delete_retention_ms=config.delete_retention_ms,
        upper_bound=plan.found.first_uncleanable,
    )
    start = 0
    try:
        while start < len(covered):
            group = _Group(covered[start].base_offset, covered[start].next_offset, [])
            prepared.groups.append(group)
            write_cleaned(plan.log.directory, group.base,
                          _cleaned_group(plan, len(covered), start, batch_filter, prepared,
                                         group),
                          partial(_retained_aborted, txns, group),
                          index_interval=config.index_interval_bytes, now_ms=plan.now_ms)
            start += len(group.old)
    except BaseException:
        discard_prepared(prepared)
        raise
    return prepared


def _retained_aborted(txns: TxnWalk, group: _Group) -> list[AbortedTxn]:
    """The aborted-transaction index entries of ``group`` (once its batches were walked)."""
    return [t for t in txns.retained_aborted if group.base <= t.last_offset < group.end]


def _cleaned_group(
    plan: CleanPlan, covered: int, start: int, batch_filter: BatchFilter,
    prepared: PreparedClean, group: _Group,
) -> Iterator[bytes]:
    """What the filter keeps of the group's segments, batch by batch: planned segments from
    ``start`` (below ``covered``) join the group while they fit (``_fits``, decided once the
    segments before them are cleaned). Sets ``group.end`` when the group is complete: it owns
    the offsets up to the next group's base (an old segment's base offset, not its last
    batch, bounds what the swap replaces), or the last segment's next offset."""
    index = start
    while index < covered and (index == start or _fits(plan, group, index)):
        group.old.append(plan.segments[index])
        group.offset_index_bytes += plan.index_bytes[index][0]
        group.time_index_bytes += plan.index_bytes[index][1]
        for raw in _batches(plan, index):
            prepared.bytes_read += len(raw)
            header, records = decode_batch(raw)
            decision = batch_filter.decide(header, records)
            if decision.drop:
                continue
            out = decision.encode(header) if decision.rewrite else raw
            group.bytes_out += len(out)
            yield out
        index += 1
    group.end = (plan.segments[index].base_offset if index < covered
                 else group.old[-1].next_offset)


def discard_prepared(prepared: PreparedClean) -> None:
    """Remove the staging directories of a pass that will not be swapped in."""
    for group in prepared.groups:
        shutil.rmtree(staging_dir(prepared.plan.log.directory, group.base), ignore_errors=True)


def swap_cleaned(
    prepared: PreparedClean, *, step: SwapStep | None = None
) -> CleanResult | None:
    """Swap the prepared segments in (owner's thread); None, with the staging removed, when
    the log changed meanwhile (retention, truncation, close)."""
    plan = prepared.plan
    log = plan.log
    current = log.segments_snapshot()
    n = len(plan.segments)
    if len(current) <= n or any(a is not b for a, b in zip(current[:n], plan.segments,
                                                              strict=False)):
        logger.info("%s: log changed during cleaning; pass discarded", log.directory)
        discard_prepared(prepared)
        return None
    directory = log.directory
    before = sum(s.size for g in prepared.groups for s in g.old)
    for group in prepared.groups:
        if step is None:
            swap_in(directory, group.base, group.end, group.old)
        else:
            swap_in(directory, group.base, group.end, group.old, step=step)
        new, _intact = LogSegment.open(directory, group.base, plan.now_ms)
        new.load_txn_index()
        log.replace_segments(group.old, new)
    atomic_write(directory / CHECKPOINT_NAME, f"{prepared.map_end}\n".encode())
    after = sum(g.bytes_out for g in prepared.groups)
    result = CleanResult(before, after, n, n - sum(len(g.old) - 1 for g in prepared.groups),
                         prepared.map_end, plan.found.dirty_ratio)
    logger.info("%s: cleaned [%d, %d): %d -> %d bytes, %d -> %d segments, dirty ratio %.2f",
                directory, plan.segments[0].base_offset, prepared.map_end, before, after,
                result.segments_before, result.segments_after, result.dirty_ratio)
    return result


def clean_now(
    engine: UnifiedLog, *, now_ms: int, map_capacity: int = 1 << 20,
    step: SwapStep | None = None,
) -> CleanResult | None:
    """One whole pass on the caller's thread (tests, tools)."""
    plan = plan_clean(engine, now_ms=now_ms, map_capacity=map_capacity)
    if plan is None:
        return None
    return swap_cleaned(prepare_clean(plan), step=step)
