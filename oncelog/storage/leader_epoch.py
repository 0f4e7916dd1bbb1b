"""The leader-epoch cache of one partition (Kafka's LeaderEpochFileCache) and its
``leader-epoch-checkpoint`` file (Kafka's LeaderEpochCheckpointFile).

Each entry says that the partition's leader of ``epoch`` wrote its first batch at
``start_offset``; entries rise strictly in both. The cache answers OffsetForLeaderEpoch
(KIP-101, KIP-279): the end offset of an epoch is the start offset of the next known epoch,
or the log end for the latest one, which is how a follower finds where its log diverged from
its new leader's and truncates there.

Kafka's rules, kept here:
- ``assign(epoch, start)`` does nothing when ``epoch`` is the latest epoch and ``start`` is
  not below its start; otherwise every entry with an epoch >= ``epoch`` or a start offset >=
  ``start`` is removed (an epoch reused or moved back: the log was truncated or rewritten) and
  the entry is added. Negative epochs or offsets are refused (batches written without a
  leader epoch carry -1 and are never assigned).
- ``end_offset_for(epoch, log_end)``: UNDEFINED (-1, -1) for epoch -1, for an epoch above
  every known one and for an empty cache; ``(epoch, log_end)`` for the latest epoch; for an
  older epoch the largest known epoch <= it with the start offset of the first epoch above it
  (or the requested epoch itself when no known epoch is <= it: the log start was removed).
- ``truncate_from_end(offset)`` removes entries starting at or after ``offset`` (the log
  was truncated there); ``truncate_from_start(offset)`` (the log start moved) removes entries
  starting at or below it but keeps the last of them, moved to start at ``offset``.

The checkpoint file is text: a version line ``0``, the entry count, then ``epoch offset`` per
line. It is rewritten atomically (``files.atomic_write``) whenever the entries change; a
missing or damaged file is the owner's to rebuild from the batches' partition leader epochs.
This module does no other I/O and keeps no clock.
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from oncelog.storage.files import atomic_write

__all__ = [
    "CHECKPOINT_FILE",
    "UNDEFINED_EPOCH",
    "UNDEFINED_EPOCH_OFFSET",
    "EpochEntry",
    "LeaderEpochCache",
    "end_offset_for",
    "read_checkpoint",
    "write_checkpoint",
]

logger = logging.getLogger(__name__)

CHECKPOINT_FILE = "leader-epoch-checkpoint"
CHECKPOINT_VERSION = 0
UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


@dataclass(frozen=True, slots=True)
class EpochEntry:
    """The leader of ``epoch`` wrote its first offset at ``start_offset``."""

    epoch: int
    start_offset: int

    def __post_init__(self) -> None:
        if self.epoch < 0 or self.start_offset < 0:
            raise ValueError(f"invalid leader epoch entry {self.epoch} at {self.start_offset}")


def encode_checkpoint(entries: list[EpochEntry]) -> bytes:
    lines = [str(CHECKPOINT_VERSION), str(len(entries))]
    lines += [f"{e.epoch} {e.start_offset}" for e in entries]
    return ("\n".join(lines) + "\n").encode("ascii")


def decode_checkpoint(data: bytes) -> list[EpochEntry]:
    """The entries of a checkpoint file; ValueError when it is malformed (wrong version,
    count not matching, non-increasing entries, garbage)."""
    lines = data.decode("ascii").splitlines()
    if len(lines) < 2 or int(lines[0]) != CHECKPOINT_VERSION:
        raise ValueError("unrecognized leader-epoch checkpoint version or header")
    count = int(lines[1])
    body = lines[2:]
    if count != len(body):
        raise ValueError(f"expected {count} entries but found {len(body)}")
    entries: list[EpochEntry] = []
    for line in body:
        fields = line.split()
        if len(fields) != 2:
            raise ValueError(f"malformed line {line!r}")
        entry = EpochEntry(int(fields[0]), int(fields[1]))
        if entries and (
            entry.epoch <= entries[-1].epoch or entry.start_offset < entries[-1].start_offset
        ):
            raise ValueError(f"entry {line!r} does not follow {entries[-1]}")
        entries.append(entry)
    return entries


def read_checkpoint(directory: Path) -> list[EpochEntry] | None:
    """The entries in ``directory``'s checkpoint; None when the file is missing or damaged
    (logged), so the owner rebuilds them from the log. OSError other than absence raises."""
    path = directory / CHECKPOINT_FILE
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    try:
        return decode_checkpoint(data)
    except (ValueError, UnicodeDecodeError) as exc:
        logger.warning("%s: damaged leader-epoch checkpoint (%s); rebuilding it from the log",
                       path, exc)
        return None


def write_checkpoint(directory: Path, entries: list[EpochEntry]) -> None:
    atomic_write(directory / CHECKPOINT_FILE, encode_checkpoint(entries))


def end_offset_for(
    entries: Sequence[tuple[int, int]], requested_epoch: int, log_end_offset: int
) -> tuple[int, int]:
    """The OffsetForLeaderEpoch rule over ``(epoch, start_offset)`` entries, ascending in
    both (Kafka's ``LeaderEpochFileCache.endOffsetFor``): ``(epoch, end offset)`` -- the
    latest epoch ends at the log end; an older one at the start of the next known epoch,
    reported under the largest known epoch <= the requested one (or the requested epoch
    itself when none is <= it); UNDEFINED (-1, -1) for epoch -1, an empty cache and an
    epoch above every known one. The one copy of the rule: the cache and the follower's
    truncation (``oncelog.cluster.follower``) both call it."""
    if requested_epoch == UNDEFINED_EPOCH or not entries:
        return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
    if entries[-1][0] == requested_epoch:
        return requested_epoch, log_end_offset
    higher = bisect.bisect_right([epoch for epoch, _ in entries], requested_epoch)
    if higher == len(entries):
        return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
    if higher == 0:
        return requested_epoch, entries[0][1]
    return entries[higher - 1][0], entries[higher][1]


Persist = Callable[[list[EpochEntry]], None]


def _no_persist(entries: list[EpochEntry]) -> None:
    pass


class LeaderEpochCache:
    """The epochs of one partition's log, oldest first. ``persist`` is called with the
    entries after every change (the file engine writes the checkpoint; memory: nothing)."""

    def __init__(
        self, name: str, entries: list[EpochEntry] | None = None, persist: Persist = _no_persist
    ) -> None:
        self._name = name
        self._entries: list[EpochEntry] = list(entries or [])
        self._persist = persist

    @property
    def entries(self) -> list[EpochEntry]:
        return list(self._entries)

    @property
    def latest_epoch(self) -> int | None:
        return self._entries[-1].epoch if self._entries else None

    @property
    def earliest_entry(self) -> EpochEntry | None:
        return self._entries[0] if self._entries else None

    def epoch_for_offset(self, offset: int) -> int | None:
        """The epoch whose leader wrote ``offset`` (the last entry starting at or below it)."""
        found: int | None = None
        for entry in self._entries:
            if entry.start_offset > offset:
                break
            found = entry.epoch
        return found

    def _needs_update(self, entry: EpochEntry) -> bool:
        if not self._entries:
            return True
        latest = self._entries[-1]
        return entry.epoch != latest.epoch or entry.start_offset < latest.start_offset

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that the leader of ``epoch`` starts writing at ``start_offset``; whether
        the entries changed."""
        entry = EpochEntry(epoch, start_offset)
        if not self._needs_update(entry):
            return False
        kept = [
            e for e in self._entries
            if e.epoch < entry.epoch and e.start_offset < entry.start_offset
        ]
        removed = self._entries[len(kept):]
        if len(removed) > 1 or (removed and removed[0].start_offset != start_offset):
            logger.warning("%s: leader epoch %d at offset %d replaces entries %s",
                           self._name, epoch, start_offset, removed)
        self._entries = [*kept, entry]
        self._changed()
        return True

    def assign_if_newer(self, epoch: int, start_offset: int) -> bool:
        """Assign a batch's epoch found in the log (recovery, replication): only an epoch
        above the latest one starts an entry; -1 (no epoch) never does (Kafka's
        LogSegment.recover rule)."""
        latest = self.latest_epoch
        if epoch < 0 or (latest is not None and epoch <= latest):
            return False
        return self.assign(epoch, start_offset)

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """``(epoch, end offset)`` as OffsetForLeaderEpoch answers (see the module text)."""
        return end_offset_for(
            [(e.epoch, e.start_offset) for e in self._entries], requested_epoch, log_end_offset
        )

    def truncate_from_end(self, end_offset: int) -> None:
        """The log now ends at ``end_offset``: entries starting at or after it go."""
        if end_offset < 0 or not self._entries or self._entries[-1].start_offset < end_offset:
            return
        self._entries = [e for e in self._entries if e.start_offset < end_offset]
        self._changed()

    def truncate_from_start(self, start_offset: int) -> None:
        """The log now starts at ``start_offset``: entries starting at or below it go,
        except the last of them, which then starts at ``start_offset``."""
        below = [e for e in self._entries if e.start_offset <= start_offset]
        if not below or (len(below) == 1 and below[0].start_offset == start_offset):
            return
        self._entries = [
            EpochEntry(below[-1].epoch, start_offset), *self._entries[len(below):]
        ]
        self._changed()

    def clear(self) -> None:
        if self._entries:
            self._entries = []
            self._changed()

    def _changed(self) -> None:
        self._persist(self._entries)
