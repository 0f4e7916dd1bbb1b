"""Sparse per-segment indexes: ``.index`` (offset -> file position) and ``.timeindex``.

On-disk layouts are Kafka's, big-endian, entries back to back, no header:

- ``.index``: ``relativeOffset int32 | position int32`` (8 bytes). The relative offset is a
  batch's *last* offset minus the segment's base offset; the position is the byte where that
  batch starts in the ``.log`` file. One entry per ``index.interval.bytes`` of log.
- ``.timeindex``: ``timestamp int64 | relativeOffset int32`` (12 bytes). ``timestamp`` is the
  largest timestamp in the segment up to (and including) the batch whose last offset is
  ``relativeOffset``. Appended at the same moments as ``.index`` entries, when the largest
  timestamp has grown since the last entry, and once more when a segment stops being active.

Both are kept in memory as ``array`` columns so lookups are a ``bisect``; the files are only
appended to (Kafka preallocates and mmaps them; oncelog writes exactly the valid entries, so a
file size that is not a multiple of the entry size means a torn write and the index is rebuilt
from the log). Entries appended in memory are written to the file in one ``write`` per log
append (``write_pending``).

Nothing here is thread-safe; a ``PartitionLog`` and its segments belong to one thread.
"""

from __future__ import annotations

import os
import struct
import sys
from array import array
from bisect import bisect_left, bisect_right
from pathlib import Path

__all__ = ["CorruptIndexError", "OffsetIndex", "TimeIndex"]

_OFFSET_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")
_LITTLE = sys.byteorder == "little"


class CorruptIndexError(Exception):
    """An index file cannot be trusted; the caller rebuilds it from the log."""


def _open_append(path: Path) -> int:
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)


class _IndexFile:
    """What both index kinds share: the path, a lazily opened append fd, pending bytes."""

    entry_size: int

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None
        self._pending = bytearray()

    def write_pending(self) -> None:
        """Append the entries added since the last call to the file (one ``write``)."""
        if not self._pending:
            return
        if self._fd is None:
            self._fd = _open_append(self.path)
        data = bytes(self._pending)
        written = 0
        try:
            while written < len(data):
                written += os.write(self._fd, data[written:] if written else data)
        finally:
            del self._pending[:written]  # what reached the file is never written twice

    def fsync(self) -> None:
        self.write_pending()
        if self._fd is not None:
            os.fsync(self._fd)
            return
        if not self.path.exists():
            return
        fd = os.open(self.path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def close(self) -> None:
        """Write what is pending and release the fd (a later append reopens it)."""
        try:
            self.write_pending()
        finally:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    def discard(self) -> None:
        """Close without writing (the file is about to be deleted or rewritten)."""
        self._pending.clear()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _rewrite(self, data: bytes) -> None:
        self.discard()
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            written = 0
            while written < len(data):
                written += os.write(fd, data[written:] if written else data)
        finally:
            os.close(fd)

    def _truncate_file(self, entries: int) -> None:
        self.write_pending()
        if self.path.exists():
            os.truncate(self.path, entries * self.entry_size)

    def _read_file(self) -> bytes:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            raise CorruptIndexError(f"{self.path.name} is missing") from None
        if len(data) % self.entry_size:
            raise CorruptIndexError(
                f"{self.path.name} has {len(data)} bytes, not a multiple of {self.entry_size}"
            )
        return data


class OffsetIndex(_IndexFile):
    """``.index``: relative last offset of a batch -> position of the batch in the log."""

    entry_size = 8

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.offsets = array("i")  # relative last offsets, strictly increasing
        self.positions = array("i")  # batch start positions, strictly increasing

    @classmethod
    def load(cls, path: Path) -> OffsetIndex:
        """Read an index file; raises CorruptIndexError when missing or torn."""
        index = cls(path)
        raw = array("i")
        raw.frombytes(index._read_file())
        if _LITTLE:
            raw.byteswap()
        index.offsets = raw[0::2]
        index.positions = raw[1::2]
        return index

    def __len__(self) -> int:
        return len(self.offsets)

    def last(self) -> tuple[int, int] | None:
        if not self.offsets:
            return None
        return self.offsets[-1], self.positions[-1]

    def append(self, relative_offset: int, position: int) -> None:
        self.offsets.append(relative_offset)
        self.positions.append(position)
        self._pending += _OFFSET_ENTRY.pack(relative_offset, position)

    def lookup(self, relative_offset: int) -> int:
        """Position of the last indexed batch whose last offset is <= ``relative_offset``
        (0 when there is none): a batch holding that offset starts at or after it."""
        i = bisect_right(self.offsets, relative_offset) - 1
        return self.positions[i] if i >= 0 else 0

    def floor_position(self, position: int) -> int:
        """The largest indexed batch start <= ``position`` (0 when there is none)."""
        i = bisect_right(self.positions, position) - 1
        return self.positions[i] if i >= 0 else 0

    def truncate_to_position(self, position: int) -> None:
        """Forget entries of batches starting at or after ``position``."""
        keep = bisect_left(self.positions, position)
        if keep == len(self.positions):
            return
        self._truncate_file(keep)
        del self.offsets[keep:]
        del self.positions[keep:]

    def reset(self) -> None:
        """Empty the index in memory (``rewrite`` then puts the rebuilt one on disk)."""
        self.discard()
        self.offsets = array("i")
        self.positions = array("i")

    def rewrite(self) -> None:
        """Write every in-memory entry to a fresh file."""
        raw = array("i", bytes(8 * len(self.offsets)))
        raw[0::2] = self.offsets
        raw[1::2] = self.positions
        if _LITTLE:
            raw.byteswap()
        self._rewrite(raw.tobytes())


class TimeIndex(_IndexFile):
    """``.timeindex``: largest timestamp so far -> relative offset of the batch holding it."""

    entry_size = 12

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.timestamps = array("q")  # strictly increasing
        self.offsets = array("i")  # relative offsets, non-decreasing

    @classmethod
    def load(cls, path: Path) -> TimeIndex:
        index = cls(path)
        data = index._read_file()
        timestamps = index.timestamps
        offsets = index.offsets
        for ts, rel in _TIME_ENTRY.iter_unpack(data):
            timestamps.append(ts)
            offsets.append(rel)
        return index

    def __len__(self) -> int:
        return len(self.timestamps)

    def last(self) -> tuple[int, int] | None:
        if not self.timestamps:
            return None
        return self.timestamps[-1], self.offsets[-1]

    def maybe_append(self, timestamp: int, relative_offset: int) -> None:
        """Append when ``timestamp`` is larger than the last entry's."""
        if self.timestamps and timestamp <= self.timestamps[-1]:
            return
        if timestamp < 0:
            return
        self.timestamps.append(timestamp)
        self.offsets.append(relative_offset)
        self._pending += _TIME_ENTRY.pack(timestamp, relative_offset)

    def last_offset_below(self, timestamp: int) -> int | None:
        """Relative offset of the last entry with a timestamp < ``timestamp``: every record
        at or before that offset is older than ``timestamp``. None when there is none."""
        i = bisect_left(self.timestamps, timestamp) - 1
        return self.offsets[i] if i >= 0 else None

    def truncate_to_offset(self, relative_offset: int) -> None:
        """Forget entries at or after ``relative_offset``."""
        keep = bisect_left(self.offsets, relative_offset)
        if keep == len(self.offsets):
            return
        self._truncate_file(keep)
        del self.timestamps[keep:]
        del self.offsets[keep:]

    def reset(self) -> None:
        self.discard()
        self.timestamps = array("q")
        self.offsets = array("i")

    def rewrite(self) -> None:
        pack = _TIME_ENTRY.pack
        self._rewrite(
            b"".join(pack(ts, rel) for ts, rel in zip(self.timestamps, self.offsets, strict=True))
        )
