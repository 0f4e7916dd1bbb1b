"""The aborted-transaction index: one ``.txnindex`` file per segment, Kafka's layout.

Each entry (34 bytes, big-endian) is version int16 (0), producer id int64, first offset
int64, last offset int64 (the ABORT marker's offset) and last stable offset int64 (the LSO
right after the abort was completed). An entry lives in the file of the segment that holds
its ABORT marker. Read-committed fetches list the aborted transactions overlapping the
range they return, so that consumers can drop those records.
"""

from __future__ import annotations

import logging
import struct
from bisect import bisect_left
from dataclasses import dataclass
from pathlib import Path

from oncelog.storage.files import atomic_write

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


def index_path(directory: Path, segment_base: int) -> Path:
    return directory / f"{segment_base:020d}{SUFFIX}"


class AbortedTxnIndex:
    """All aborted transactions of a partition, in memory, backed by per-segment files."""

    def __init__(self, directory: Path) -> None:
        self._directory = directory
        self._by_segment: dict[int, list[AbortedTxn]] = {}
        self._all: list[AbortedTxn] = []  # sorted by last_offset
        self._last_offsets: list[int] = []

    def load(self, segment_bases: list[int], below: int) -> None:
        """Read the files of ``segment_bases``, keeping entries whose marker is below
        ``below`` (the rest will be rebuilt by replaying the log from there)."""
        self._by_segment.clear()
        for base in segment_bases:
            path = index_path(self._directory, base)
            entries: list[AbortedTxn] = []
            if path.exists():
                data = path.read_bytes()
                usable = len(data) - len(data) % ENTRY_SIZE
                for pos in range(0, usable, ENTRY_SIZE):
                    version, pid, first, last, lso = _ENTRY.unpack_from(data, pos)
                    if version != 0 or last < first:
                        logger.warning("%s: bad entry at byte %d; dropping the rest", path, pos)
                        break
                    if last < below:
                        entries.append(AbortedTxn(pid, first, last, lso))
                if len(entries) * ENTRY_SIZE != len(data):
                    self._rewrite(base, entries)
            if entries:
                self._by_segment[base] = entries
        self._reindex()

    def _reindex(self) -> None:
        self._all = sorted(
            (e for entries in self._by_segment.values() for e in entries),
            key=lambda e: e.last_offset,
        )
        self._last_offsets = [e.last_offset for e in self._all]

    def _rewrite(self, base: int, entries: list[AbortedTxn]) -> None:
        path = index_path(self._directory, base)
        atomic_write(path, b"".join(_pack(e) for e in entries))

    def add(self, segment_base: int, entry: AbortedTxn) -> None:
        if any(
            e.producer_id == entry.producer_id and e.first_offset == entry.first_offset
            for e in self._by_segment.get(segment_base, ())
        ):
            return
        with open(index_path(self._directory, segment_base), "ab") as f:
            f.write(_pack(entry))
        self._by_segment.setdefault(segment_base, []).append(entry)
        self._all.append(entry)
        self._all.sort(key=lambda e: e.last_offset)
        self._last_offsets = [e.last_offset for e in self._all]

    def retain_segments(self, segment_bases: list[int]) -> None:
        """Forget entries of segments that were deleted (their files went with them)."""
        keep = set(segment_bases)
        if any(base not in keep for base in self._by_segment):
            self._by_segment = {b: e for b, e in self._by_segment.items() if b in keep}
            self._reindex()

    def truncate_from(self, offset: int) -> None:
        """Drop entries whose marker is at or above ``offset``."""
        changed = False
        for base, entries in list(self._by_segment.items()):
            kept = [e for e in entries if e.last_offset < offset]
            if len(kept) != len(entries):
                changed = True
                self._rewrite(base, kept)
                if kept:
                    self._by_segment[base] = kept
                else:
                    del self._by_segment[base]
        if changed:
            self._reindex()

    def collect(self, start_offset: int, upper_offset: int) -> list[AbortedTxn]:
        """Aborted transactions with data in [start_offset, upper_offset): their marker is
        at or after ``start_offset`` and they began before ``upper_offset``."""
        if not self._all:
            return []
        i = bisect_left(self._last_offsets, start_offset)
        return [e for e in self._all[i:] if e.first_offset < upper_offset]

    def __len__(self) -> int:
        return len(self._all)


def _pack(entry: AbortedTxn) -> bytes:
    return _ENTRY.pack(
        0, entry.producer_id, entry.first_offset, entry.last_offset, entry.last_stable_offset
    )
