"""Log compaction, the files: writing a cleaned segment and swapping it in atomically
(Kafka's ``.cleaned`` -> ``.swap`` -> rename protocol, LogCleaner.cleanSegments and
UnifiedLog.replaceSegments), and finishing or discarding a swap when a log is opened
(Kafka's LogLoader.removeTempFilesAndCollectSwapFiles).

One cleaned segment replaces a group of old ones, ``[base, end)``, and takes the base
offset of the first. The steps, each durable before the next:

1. **cleaned**: the new segment is written into ``<base>.cleaned/`` (a directory beside the
   segments: its ``.log``, ``.index``, ``.timeindex`` and ``.txnindex``, always all four)
   and fsynced. A crash leaves the old segments; the directory is removed at open.
2. **swap**: ``<base>.swaprange`` (the group's ``end``) is written, then the sidecars are
   renamed to ``<base>.index.swap`` etc., then the log to ``<base>.log.swap``. The log's
   rename is the commit point: from then on the swap is finished whatever happens. Before
   it, open removes the ``.swap`` sidecars and the range file (the old files are intact).
3. **delete**: the old segments of the group other than ``base`` are deleted.
4. **rename**: every ``.swap`` is renamed over its final name (``<base>.log`` last), then the
   range file is removed.

At open, a ``<base>.log.swap`` means step 3 and 4 are redone: segments with a base offset in
``(base, end)`` are deleted, the ``.swap`` files renamed. So a crash at any point leaves
either the old segments or the new one, never a mix, never neither. The directory is
fsynced after every step that creates, renames or removes entries.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
from collections.abc import Callable, Iterable
from pathlib import Path

from oncelog.records.batch import parse_header
from oncelog.storage.files import atomic_write, fsync_directory
from oncelog.storage.segment import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    SUFFIXES,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    LogSegment,
    segment_file_name,
)
from oncelog.storage.txn_index import AbortedTxn

__all__ = ["SwapStep", "complete_swaps", "staging_dir", "swap_in", "write_cleaned"]

logger = logging.getLogger(__name__)

CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
RANGE_SUFFIX = ".swaprange"
_SIDECARS = (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)

SwapStep = Callable[[str], None]
"""Called with each step's name (``swap.range``, ``swap.sidecars``, ``swap.log``,
``swap.delete``, ``swap.rename``) just before it: fault tests raise or kill there."""


def _no_step(_name: str) -> None:
    return None


def staging_dir(directory: Path, base_offset: int) -> Path:
    return directory / segment_file_name(base_offset, CLEANED_SUFFIX)


def write_cleaned(
    directory: Path,
    base_offset: int,
    batches: Iterable[bytes],
    aborted: Callable[[], list[AbortedTxn]],
    *,
    index_interval: int,
    now_ms: int,
) -> Path:
    """Step 1: write the cleaned segment (``batches``, whole RecordBatches with their final
    offsets, in order, maybe streamed; ``aborted``: its aborted-transaction index entries,
asked for once the batches are written) into its staging
    directory, indexes built as appends build them, everything fsynced. Returns the
    staging directory."""
    staging = staging_dir(directory, base_offset)
    if staging.exists():
        shutil.rmtree(staging)
    staging.mkdir()
    segment = LogSegment.create(staging, base_offset, now_ms)
    try:
        for data in batches:
            segment.append(data, [parse_header(data)], index_interval)
        for entry in aborted():  # known once every batch was walked
            segment.append_aborted_txn(entry)
        segment.seal()
        segment.flush()
    finally:
        segment.close()
    txn_path = staging / segment_file_name(base_offset, TXN_INDEX_SUFFIX)
    if not txn_path.exists():  # always four files: the rename must replace the old index
        os.close(os.open(txn_path, os.O_WRONLY | os.O_CREAT, 0o644))
    fsync_directory(staging)
    fsync_directory(directory)
    return staging


def swap_in(
    directory: Path,
    base_offset: int,
    end_offset: int,
    old_segments: list[LogSegment],
    *,
    step: SwapStep = _no_step,
) -> None:
    """Steps 2-4 for the staged segment ``base_offset`` replacing ``old_segments`` (the
    group ``[base_offset, end_offset)``; their fds are released here). The caller opens the
    new segment afterwards."""
    staging = staging_dir(directory, base_offset)
    step("swap.range")
    atomic_write(directory / segment_file_name(base_offset, RANGE_SUFFIX),
                 f"{end_offset}\n".encode())
    step("swap.sidecars")
    for suffix in _SIDECARS:
        name = segment_file_name(base_offset, suffix)
        os.replace(staging / name, directory / (name + SWAP_SUFFIX))
    fsync_directory(directory)
    step("swap.log")
    name = segment_file_name(base_offset, LOG_SUFFIX)
    os.replace(staging / name, directory / (name + SWAP_SUFFIX))
    fsync_directory(directory)
    shutil.rmtree(staging, ignore_errors=True)
    step("swap.delete")
    for old in old_segments:
        if old.base_offset == base_offset:
            old.release()
        else:
            old.delete()
    fsync_directory(directory)
    step("swap.rename")
    _finish_renames(directory, base_offset)


def _finish_renames(directory: Path, base_offset: int) -> None:
    for suffix in (*_SIDECARS, LOG_SUFFIX):
        name = segment_file_name(base_offset, suffix)
        swap = directory / (name + SWAP_SUFFIX)
        if swap.exists():
            os.replace(swap, directory / name)
    fsync_directory(directory)
    (directory / segment_file_name(base_offset, RANGE_SUFFIX)).unlink(missing_ok=True)
    fsync_directory(directory)


_RANGE_NAME = re.compile(r"^(\d{20})" + re.escape(RANGE_SUFFIX) + "$")
_CLEANED_NAME = re.compile(r"^(\d{20})" + re.escape(CLEANED_SUFFIX) + "$")


def complete_swaps(directory: Path) -> None:
    """At open, before the segments are listed: remove staging directories, finish every
    swap that passed its commit point and discard every one that did not."""
    if not directory.is_dir():
        return
    changed = False
    for entry in sorted(directory.iterdir()):
        if _CLEANED_NAME.match(entry.name):
            logger.warning("%s: removing the unfinished cleaned segment %s", directory,
                           entry.name)
            shutil.rmtree(entry, ignore_errors=True)
            changed = True
    for entry in sorted(directory.iterdir()):
        match = _RANGE_NAME.match(entry.name)
        if match is None:
            continue
        base = int(match.group(1))
        log_swap = directory / (segment_file_name(base, LOG_SUFFIX) + SWAP_SUFFIX)
        changed = True
        if not log_swap.exists():
            # Before the commit point (or after the last rename): the old files stand.
            for suffix in _SIDECARS:
                (directory / (segment_file_name(base, suffix) + SWAP_SUFFIX)).unlink(
                    missing_ok=True)
            entry.unlink()
            logger.warning("%s: discarded the unfinished swap of segment %d", directory, base)
            continue
        end = int(entry.read_text().strip())
        doomed = sorted({
            int(m.group(1))
            for m in (re.match(r"^(\d{20})(\.[a-z]+)$", p.name) for p in directory.iterdir())
            if m is not None and m.group(2) in SUFFIXES and base < int(m.group(1)) < end
        })
        for old_base in doomed:
            for suffix in SUFFIXES:
                (directory / segment_file_name(old_base, suffix)).unlink(missing_ok=True)
        fsync_directory(directory)
        _finish_renames(directory, base)
        logger.warning("%s: finished the swap of cleaned segment [%d, %d) (%d old segments "
                       "removed)", directory, base, end, len(doomed))
    if changed:
        fsync_directory(directory)
