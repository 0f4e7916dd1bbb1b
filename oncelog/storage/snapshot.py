"""Producer state snapshots (KIP-98 "PID Snapshots"): files in the partition directory.

A snapshot named ``<offset, 20 digits>.snapshot`` holds the producer state of the partition
covering every batch below ``offset``; recovery loads the newest valid one and replays the
log from ``offset``. Several are kept so that, if the log tail is lost (power failure before
a flush), an older one that is still inside the log can be used.

File layout (big-endian), this project's own format:

  version int16 (=1) | crc uint32: CRC32C of everything after this field
  offset int64 (must match the name) | producer count int32
  per producer: producer_id int64 | epoch int16 | coordinator_epoch int32 |
                last_timestamp int64 | current_txn_first_offset int64 (-1: none) |
                batch count uint8 (<= 5)
    per batch:  first_seq int32 | last_seq int32 | first_offset int64 | last_offset int64 |
                timestamp int64

Unlike Kafka, which keeps only the last batch per producer in its snapshots, all retained
batches (up to 5) are written, so duplicate detection survives a restart unchanged.

Files are written atomically: a temporary file, fsync, rename, fsync of the directory. A file
that fails to parse (partial, flipped byte, wrong version) is logged, deleted, and the next
older one is tried.

This module owns the files; the manager (``producer_state``) owns the state and does no
I/O. The engine calls ``take_snapshot``, ``load_state`` and ``truncate_state_after``, which
move entries between the two.
"""

from __future__ import annotations

import logging
import os
import struct
from collections import deque
from collections.abc import Callable, Iterable
from pathlib import Path

import crc32c

from oncelog.storage import producer_entry as ps
from oncelog.storage.files import atomic_write, fsync_directory
from oncelog.storage.producer_state import ProducerStateManager

logger = logging.getLogger(__name__)

SUFFIX = ".snapshot"
TEMP_SUFFIX = ".snapshot.tmp"  # what atomic_write stages a snapshot as
VERSION = 1

_PREFIX = struct.Struct(">hI")
_BODY_HEAD = struct.Struct(">qi")
_ENTRY = struct.Struct(">qhiqqB")
_BATCH = struct.Struct(">iiqqq")


class CorruptSnapshotError(ValueError):
    """A snapshot file that cannot be trusted."""


def snapshot_path(directory: Path, offset: int) -> Path:
    return directory / f"{offset:020d}{SUFFIX}"


def list_snapshots(directory: Path) -> list[tuple[int, Path]]:
    """(offset, path) of every snapshot file, oldest first (temporary files excluded)."""
    found = []
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    for name in names:
        if not name.endswith(SUFFIX):
            continue
        stem = name[: -len(SUFFIX)]
        if len(stem) == 20 and stem.isdigit():
            found.append((int(stem), directory / name))
    found.sort()
    return found


def encode(offset: int, entries: Iterable[ps.ProducerStateEntry]) -> bytes:
    parts: list[bytes] = []
    count = 0
    for e in entries:
        count += 1
        txn = -1 if e.current_txn_first_offset is None else e.current_txn_first_offset
        parts.append(
            _ENTRY.pack(
                e.producer_id,
                e.producer_epoch,
                e.coordinator_epoch,
                e.last_timestamp,
                txn,
                len(e.batches),
            )
        )
        for b in e.batches:
            parts.append(
                _BATCH.pack(b.first_seq, b.last_seq, b.first_offset, b.last_offset, b.timestamp)
            )
    body = _BODY_HEAD.pack(offset, count) + b"".join(parts)
    return _PREFIX.pack(VERSION, crc32c.crc32c(body)) + body


def decode(data: bytes) -> tuple[int, list[ps.ProducerStateEntry]]:
    """Parse a snapshot; raises CorruptSnapshotError on anything unexpected."""
    if len(data) < _PREFIX.size + _BODY_HEAD.size:
        raise CorruptSnapshotError(f"too short ({len(data)} bytes)")
    version, crc = _PREFIX.unpack_from(data, 0)
    if version != VERSION:
        raise CorruptSnapshotError(f"unknown version {version}")
    body = memoryview(data)[_PREFIX.size :]
    actual = crc32c.crc32c(body)
    if actual != crc:
        raise CorruptSnapshotError(f"crc mismatch: stored {crc:#010x}, computed {actual:#010x}")
    offset, count = _BODY_HEAD.unpack_from(body, 0)
    pos = _BODY_HEAD.size
    entries: list[ps.ProducerStateEntry] = []
    try:
        for _ in range(count):
            pid, epoch, coord_epoch, last_ts, txn, n = _ENTRY.unpack_from(body, pos)
            pos += _ENTRY.size
            if n > ps.NUM_BATCHES_TO_RETAIN:
                raise CorruptSnapshotError(f"producer {pid} has {n} batches")
            batches: deque[ps.BatchMetadata] = deque(maxlen=ps.NUM_BATCHES_TO_RETAIN)
            for _ in range(n):
                batches.append(ps.BatchMetadata(*_BATCH.unpack_from(body, pos)))
                pos += _BATCH.size
            entries.append(
                ps.ProducerStateEntry(
                    pid, epoch, batches, last_ts, coord_epoch, None if txn < 0 else txn
                )
            )
    except struct.error as exc:
        raise CorruptSnapshotError(f"truncated entries: {exc}") from exc
    if pos != len(body):
        raise CorruptSnapshotError(f"{len(body) - pos} trailing bytes")
    return offset, entries


def write_snapshot(directory: Path, offset: int, entries: Iterable[ps.ProducerStateEntry]) -> Path:
    """Write atomically the snapshot covering the log below ``offset``; returns its path."""
    return write_encoded(directory, offset, encode(offset, entries))


def write_encoded(directory: Path, offset: int, data: bytes) -> Path:
    """Write already encoded snapshot bytes atomically (temporary file, fsync, rename, fsync
    of the directory). Safe to run in a worker thread: it touches no shared state."""
    path = snapshot_path(directory, offset)
    atomic_write(path, data)
    logger.debug("wrote producer snapshot path=%s bytes=%d", path, len(data))
    return path


def read_snapshot(path: Path) -> tuple[int, list[ps.ProducerStateEntry]]:
    offset, entries = decode(path.read_bytes())
    expected = int(path.name[: -len(SUFFIX)])
    if offset != expected:
        raise CorruptSnapshotError(f"offset {offset} inside, {expected} in the name")
    return offset, entries


def load_latest(
    directory: Path, max_offset: int | None = None
) -> tuple[int, list[ps.ProducerStateEntry]] | None:
    """The newest valid snapshot (at or below ``max_offset`` if given), or None.

    Corrupt or partial files met on the way are logged and deleted; leftover temporary
    files are deleted too. Snapshots above ``max_offset`` are left alone.
    """
    for name in os.listdir(directory) if directory.is_dir() else ():
        if name.endswith(TEMP_SUFFIX):
            logger.warning("deleting unfinished producer snapshot %s", directory / name)
            (directory / name).unlink(missing_ok=True)
    for offset, path in reversed(list_snapshots(directory)):
        if max_offset is not None and offset > max_offset:
            continue
        try:
            return read_snapshot(path)
        except (CorruptSnapshotError, OSError) as exc:
            logger.warning("deleting unreadable producer snapshot path=%s error=%s", path, exc)
            path.unlink(missing_ok=True)
    return None


def delete_snapshots_after(directory: Path, offset: int) -> list[int]:
    """Delete snapshots above ``offset`` (the log was truncated to end there)."""
    return _delete(directory, lambda o: o > offset)


def delete_snapshots_before(directory: Path, offset: int) -> list[int]:
    """Delete snapshots below ``offset`` (e.g. the log start moved past them)."""
    return _delete(directory, lambda o: o < offset)


def keep_latest(directory: Path, count: int = 2) -> list[int]:
    """Delete all but the ``count`` newest snapshots."""
    snapshots = list_snapshots(directory)
    if len(snapshots) <= count:
        return []
    cutoff = snapshots[-count][0] if count > 0 else snapshots[-1][0] + 1
    return delete_snapshots_before(directory, cutoff)


def _delete(directory: Path, doomed: Callable[[int], bool]) -> list[int]:
    deleted = []
    for offset, path in list_snapshots(directory):
        if doomed(offset):
            path.unlink(missing_ok=True)
            deleted.append(offset)
    if deleted:
        fsync_directory(directory)  # a deleted stale snapshot must not come back
        logger.info("deleted producer snapshots directory=%s offsets=%s", directory, deleted)
    return deleted


# ---------------------------------------------------------------------- the manager's files


def encode_state(state: ProducerStateManager, offset: int) -> bytes:
    """The snapshot bytes for ``state``, which must cover the log up to ``offset``."""
    return encode(offset, state.snapshot_entries(offset))


def take_snapshot(
    state: ProducerStateManager, directory: Path, offset: int, keep: int | None = 2
) -> Path:
    """Write ``state``, which must cover the log up to ``offset`` (normally the log end
    offset), to ``directory``; then keep only the ``keep`` newest snapshots.

    This blocks on fsync. To write from a worker thread instead: ``data =
    encode_state(state, offset)`` on the owner's thread, ``write_encoded(directory, offset,
    data)`` in the worker, then ``state.on_snapshot_written(offset)`` back on the owner's."""
    path = write_encoded(directory, offset, encode_state(state, offset))
    state.on_snapshot_written(offset)
    if keep is not None:
        keep_latest(directory, keep)
    return path


def load_state(
    state: ProducerStateManager, directory: Path, max_offset: int | None = None,
    *, log_level: int = logging.INFO,
) -> int:
    """Replace ``state`` with the newest valid snapshot in ``directory`` (at or below
    ``max_offset`` if given), dropping producers already expired. Returns the offset from
    which the caller must replay the log tail through ``update`` (0 when there is no valid
    snapshot, i.e. a full scan from the log start)."""
    loaded = load_latest(directory, max_offset=max_offset)
    if loaded is None:
        state.clear()
        logger.log(log_level, "no producer snapshot partition=%s: full scan", state.partition)
        return 0
    return state.restore(*loaded, log_level=log_level)


def truncate_state_after(state: ProducerStateManager, offset: int, directory: Path) -> int:
    """The log now ends at ``offset`` (everything at or above it is gone).

    Drops snapshots above ``offset`` from ``directory``, resets ``state`` to the newest valid
    snapshot at or below it (or to empty), and returns the offset from which the caller must
    replay the log, up to its new end, through ``update``. Nothing is reset (and ``offset``
    is returned) when no applied batch reaches ``offset``."""
    delete_snapshots_after(directory, offset)
    if offset >= state.map_end_offset:
        return offset
    return load_state(state, directory, max_offset=offset)
