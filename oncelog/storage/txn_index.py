"""The aborted-transaction index: one ``.txnindex`` file per segment, Kafka's layout.

Each entry (34 bytes, big-endian) is version int16 (0), producer id int64, first offset
int64, last offset int64 (the ABORT marker's offset) and last stable offset int64 (the LSO
right after the abort was completed). An entry lives in the file of the segment that holds
its ABORT marker, so the segment owns the file: it is fsynced by the segment's ``flush``,
truncated with it and deleted with it (Kafka's ``LogSegment.txnIndex``). Read-committed
fetches list the aborted transactions overlapping the range they return, so that consumers
can drop those records.

A file is only ever appended to (or rewritten atomically when entries are dropped), so after
a crash its entries are a prefix of what was written plus, after a power loss, possibly a
tail of zeros or garbage. ``load`` accepts only entries that can be real: version 0, a
producer id >= 0, ``0 <= first_offset < last_offset`` (a transaction's data comes before its
marker), a marker inside the segment and marker offsets strictly increasing. Anything else
makes the whole file untrusted (``CorruptIndexError``) and the caller rebuilds it from the
log.
"""

from __future__ import annotations

import logging
import os
import struct
from bisect import bisect_left
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from oncelog.storage.files import atomic_write
from oncelog.storage.index import CorruptIndexError

logger = logging.getLogger(__name__)

_ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = _ENTRY.size
SUFFIX = ".txnindex"


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


class TransactionIndex:
    """One segment's ``.txnindex``: its entries in memory (by marker offset) and the file.

    The file is opened lazily on the first append and kept open until ``close``; ``fsync``
    makes the appended entries durable (the segment calls it from ``flush``)."""

    def __init__(self, path: Path, base_offset: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self.entries: list[AbortedTxn] = []
        self._last_offsets: list[int] = []
        self._fd: int | None = None
        self.unflushed = False
        self._file_differs = False  # the file holds entries that are not in memory

    @classmethod
    def load(cls, path: Path, base_offset: int, next_offset: int) -> TransactionIndex:
        """Read and check the file (a missing file is an empty index). Well-formed entries
        whose marker is at or past ``next_offset`` (the log lost its tail) are left out and
        the file is rewritten by the next ``truncate_from``. Raises CorruptIndexError,
        naming the file, when an entry cannot be real."""
        index = cls(path, base_offset)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return index
        if len(data) % ENTRY_SIZE:
            raise CorruptIndexError(
                f"{path.name} has {len(data)} bytes, not a multiple of {ENTRY_SIZE}"
            )
        previous = base_offset - 1
        for pos, (version, pid, first, last, lso) in enumerate(_ENTRY.iter_unpack(data)):
            if (
                version != 0
                or pid < 0
                or not 0 <= first < last
                or last <= previous
                or lso < 0
            ):
                raise CorruptIndexError(
                    f"{path.name}: entry {pos} (version {version}, producer {pid}, offsets "
                    f"{first}..{last}) cannot be real in segment {base_offset}"
                )
            previous = last
            if last < next_offset:
                index._add_in_memory(AbortedTxn(pid, first, last, lso))
            else:
                index._file_differs = True
        return index

    def mark_untrusted(self) -> None:
        """The file's entries were rejected: the next ``truncate_from`` rewrites it."""
        self._file_differs = True

    def _add_in_memory(self, entry: AbortedTxn) -> None:
        self.entries.append(entry)
        self._last_offsets.append(entry.last_offset)

    def append(self, entry: AbortedTxn) -> None:
        """Write the entry to the file, then remember it; an OSError leaves the index as it
        was (a partly written entry is cut again by the next append)."""
        if self.entries and entry.last_offset <= self.entries[-1].last_offset:
            raise ValueError(
                f"{self.path.name}: marker offset {entry.last_offset} is not after "
                f"{self.entries[-1].last_offset}"
            )
        if self._fd is None:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o644)
        data = _pack(entry)
        position = len(self.entries) * ENTRY_SIZE
        written = 0
        try:
            while written < len(data):
                written += os.pwrite(self._fd, data[written:], position + written)
        except OSError:
            self.close()
            raise
        self._add_in_memory(entry)
        self.unflushed = True

    def fsync(self) -> None:
        if not self.unflushed:
            return
        if self._fd is not None:
            os.fsync(self._fd)
        elif self.path.exists():
            fd = os.open(self.path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        self.unflushed = False

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def truncate_from(self, offset: int) -> None:
        """Drop entries whose marker is at or above ``offset`` (rewriting the file
        atomically, so a crash leaves the old or the new entries)."""
        keep = bisect_left(self._last_offsets, offset)
        if keep == len(self.entries) and not self._file_differs:
            return
        self.reset(self.entries[:keep])

    def reset(self, entries: list[AbortedTxn] | None = None) -> None:
        """Replace the entries (default: none) and the file with them."""
        self.close()
        self.entries = []
        self._last_offsets = []
        for entry in entries or ():
            self._add_in_memory(entry)
        if self.entries or self.path.exists():
            atomic_write(self.path, b"".join(_pack(e) for e in self.entries))
        self.unflushed = False
        self._file_differs = False

    def collect(self, start_offset: int, upper_offset: int) -> Iterator[AbortedTxn]:
        """Entries with a marker at or after ``start_offset`` that began before
        ``upper_offset``."""
        for entry in self.entries[bisect_left(self._last_offsets, start_offset) :]:
            if entry.first_offset < upper_offset:
                yield entry

    def __len__(self) -> int:
        return len(self.entries)


def _pack(entry: AbortedTxn) -> bytes:
    return _ENTRY.pack(
        0, entry.producer_id, entry.first_offset, entry.last_offset, entry.last_stable_offset
    )
