"""Opening a partition's log directory: Kafka's LogLoader.

Reads the checkpoint and the clean-shutdown marker, lists the segment files (removing index
files whose log is gone), opens every segment and recovers those that need it. What it
returns (``LoadedLog``) is what ``PartitionLog.open`` builds the log from; this module knows
the files, the log object knows nothing of how they were found.

Recovery
--------
Opening after an unclean stop (no ``.clean-shutdown``) validates every batch from the segment
holding the recovery point to the end -- sizes, magic, offset order, CRC32C -- cuts the log at
the first torn or corrupt batch (deleting any later segments), rebuilds the indexes of the
scanned segments and fsyncs them. After a clean stop it trusts the files and only walks the
headers after each segment's last index entry. Missing or inconsistent index files are rebuilt
either way (the file is named in the log). A ``.txnindex`` cannot be rebuilt from the log
alone (it needs the producer state): ``txn_index_rebuild_from`` tells the owner (UnifiedLog)
from which offset to replay the log to rebuild the untrusted ones.

The recovery point covers the transaction indexes too: every ``.txnindex`` entry whose
marker is below it is fsynced (an entry appended for a marker that is already below it is
fsynced at once, as with ``flush.messages=1``).
"""

from __future__ import annotations

import logging
import re
from bisect import bisect_right
from dataclasses import dataclass
from pathlib import Path

from oncelog.clock import Clock
from oncelog.config import LogConfig
from oncelog.storage.checkpoint import LogCheckpoint, read_checkpoint, remove_clean_shutdown
from oncelog.storage.cleaner_files import complete_swaps
from oncelog.storage.segment import LOG_SUFFIX, SUFFIXES, LogSegment

__all__ = ["LoadedLog", "load_log"]

logger = logging.getLogger(__name__)

_SEGMENT_NAME = re.compile(r"^(\d{20})(\.[a-z]+)$")


@dataclass(slots=True)
class LoadedLog:
    """The segments found (or created) in a partition directory, oldest first, and the
    offsets to start from. ``log_start_offset`` may be past the log end (the checkpoint says
    so): the log then starts empty there. ``txn_rebuild_from`` is the base offset of the
    first segment whose ``.txnindex`` was rejected, or None; ``how`` is "new", "clean" or
    "recovered"; ``created`` says a segment file was created (fsync the directory)."""

    segments: list[LogSegment]
    log_start_offset: int
    recovery_point: int
    txn_rebuild_from: int | None
    how: str
    created: bool


def load_log(directory: Path, config: LogConfig, clock: Clock) -> LoadedLog:
    """Create the log's directory and first segment, or load its segments, recovering after
    an unclean stop. The segments are closed again if anything fails."""
    directory.mkdir(parents=True, exist_ok=True)
    complete_swaps(directory)  # a log cleaner's swap cut short (cleaner_files)
    clean = remove_clean_shutdown(directory)
    checkpoint = read_checkpoint(directory)
    start_checkpoint = checkpoint.log_start_offset if checkpoint is not None else 0
    bases = _scan_directory(directory)
    if not bases:
        segment = LogSegment.create(directory, start_checkpoint, clock.now_ms())
        return LoadedLog([segment], start_checkpoint, start_checkpoint, None, "new", True)
    return _load(directory, config, clock, bases, clean, checkpoint)


def _load(
    directory: Path,
    config: LogConfig,
    clock: Clock,
    bases: list[int],
    clean: bool,
    checkpoint: LogCheckpoint | None,
) -> LoadedLog:
    now = clock.now_ms()
    # After an unclean stop everything from the segment holding the recovery point on is
    # validated; after a clean one nothing is (beyond index sanity checks).
    if clean:
        scan_from = len(bases)
    else:
        recovery_point = checkpoint.recovery_point if checkpoint is not None else 0
        scan_from = max(0, bisect_right(bases, recovery_point) - 1)
    segments: list[LogSegment] = []
    try:
        needs_recovery: list[bool] = []
        for i, base in enumerate(bases):
            segment, intact = LogSegment.open(
                directory, base, now, load_indexes=i < scan_from
            )
            segments.append(segment)
            needs_recovery.append(not intact)
        interval = config.index_interval_bytes
        i = 0
        while i < len(segments):
            segment = segments[i]
            if needs_recovery[i]:
                outcome = segment.recover(interval)
                later = segments[i + 1 :]
                # Past the recovery point a corrupt batch ends the log, and so does a
                # segment that stops short of the next one's base (a power loss can empty
                # its unflushed tail, leaving no torn bytes to cut); below it (an index
                # had to be rebuilt) only that segment is cut.
                ends_log = bool(i >= scan_from and later and (
                    outcome.truncated_bytes or segment.next_offset != later[0].base_offset
                ))
                if ends_log:
                    del segments[i + 1 :]
                    for doomed in later:
                        doomed.delete()
                if outcome.truncated_bytes or ends_log:
                    logger.warning(
                        "%s: recovery truncated segment %d at byte %d (offset %d): %s; "
                        "%d bytes cut%s",
                        directory, segment.base_offset, outcome.valid_bytes,
                        outcome.next_offset,
                        outcome.reason or f"the next segment starts at {later[0].base_offset}",
                        outcome.truncated_bytes,
                        f", {len(later)} later segments deleted (from offset "
                        f"{later[0].base_offset})" if ends_log else "",
                    )
            i += 1
    except BaseException:
        for segment in segments:
            segment.close()
        raise
    for segment in segments[:-1]:
        segment.seal()  # a rebuilt inactive segment gets its closing time-index entry
    untrusted = [s.base_offset for s in segments if not s.load_txn_index()]
    log_end = segments[-1].next_offset
    log_start = max(checkpoint.log_start_offset if checkpoint else 0, segments[0].base_offset)
    return LoadedLog(
        segments,
        log_start,
        log_end,
        untrusted[0] if untrusted else None,
        "clean" if clean else "recovered",
        False,
    )


def _scan_directory(directory: Path) -> list[int]:
    """Base offsets of the segments in ``directory``; index files whose log is gone are
    removed."""
    bases: set[int] = set()
    sidecars: list[tuple[int, Path]] = []
    for entry in directory.iterdir():
        match = _SEGMENT_NAME.match(entry.name)
        if match is None or match.group(2) not in SUFFIXES:
            continue
        base = int(match.group(1))
        if match.group(2) == LOG_SUFFIX:
            bases.add(base)
        else:
            sidecars.append((base, entry))
    for base, path in sidecars:
        if base not in bases:
            logger.warning("%s: removing %s, which has no log file", directory, path.name)
            path.unlink(missing_ok=True)
    return sorted(bases)
