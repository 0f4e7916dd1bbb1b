"""The file engine's files besides the segments: opening a partition directory (the segments
through ``PartitionLog.open``: the checkpoint, the recovery scan from the recovery point; and
the producer state to replay from) and the producer-state snapshots taken at each roll.

Recovery only replays: delete producer-state snapshots above the recovered log end (a power
loss may have cut the log below them), load the newest remaining one, drop index entries
whose marker is at or above it, then apply every batch from there to the end (data batches
and markers), rebuilding those entries. Entries below the snapshot are trusted because the
transaction indexes are fsynced before a snapshot is written. A rejected ``.txnindex`` moves
the replay start down to its segment (and its snapshots above are deleted first, so a crash
during the rebuild still rebuilds it on the next start). This module does the file part (up
to loading the snapshot); ``UnifiedLog.open`` then replays (``UnifiedLog._rebuild_from``,
which ``truncate_to`` shares, as Kafka's truncateAndReload).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from oncelog.clock import Clock
from oncelog.config import LogConfig
from oncelog.storage import snapshot
from oncelog.storage.log import PartitionLog
from oncelog.storage.log_store import LogStore
from oncelog.storage.producer_state import ProducerStateManager

__all__ = [
    "SNAPSHOTS_KEPT",
    "OpenedFiles",
    "RollSnapshots",
    "SnapshotJob",
    "SnapshotWriter",
    "open_partition_files",
    "write_now",
]

logger = logging.getLogger(__name__)

SNAPSHOTS_KEPT = 2

SnapshotJob = Callable[[], None]
SnapshotWriter = Callable[[SnapshotJob], None]
"""Runs a snapshot job (which does blocking file I/O), now or later, in submission order."""


def write_now(job: SnapshotJob) -> None:
    """The default snapshot writer: write synchronously, inside the append."""
    job()


@dataclass(frozen=True, slots=True)
class OpenedFiles:
    """A recovered log, the producer state loaded from its newest usable snapshot, and the
    offset the replay starts from."""

    log: PartitionLog
    producer_state: ProducerStateManager
    replay_from: int


def open_partition_files(
    directory: Path, config: LogConfig, clock: Clock, producer_id_expiration_ms: int
) -> OpenedFiles:
    """Open (or create) the partition in ``directory``, recover its segments and load the
    producer-state snapshot that the replay continues from."""
    log = PartitionLog.open(directory, config, clock)
    state = ProducerStateManager(directory.name, clock, producer_id_expiration_ms)
    # Kafka's removeStraySnapshots / truncateAndReload: nothing above the log end (nor
    # above an untrusted transaction index) may be loaded, now or after a later crash.
    keep_below = log.log_end_offset
    rebuild_from = log.txn_index_rebuild_from
    if rebuild_from is not None and rebuild_from < keep_below:
        keep_below = rebuild_from
    if snapshot.delete_snapshots_after(directory, keep_below):
        logger.warning(
            "%s: deleted producer snapshots above offset %d (log end %d)",
            directory, keep_below, log.log_end_offset,
        )
    # Only recovery after an unclean stop is worth a line per partition at INFO.
    start = snapshot.load_state(
        state, directory, max_offset=keep_below,
        log_level=logging.INFO if log.opened_how == "recovered" else logging.DEBUG,
    )
    return OpenedFiles(log, state, start)


class RollSnapshots:
    """The producer-state snapshot files of one partition directory (none without one).

    At a roll the state is encoded at once and the write is handed, as a job, to the
    ``writer`` (which may run it in a worker thread); a job writes under the lock and only if
    no truncation or close (``invalidate``) happened since it was made, so a snapshot file
    only ever appears with the content for its offset."""

    def __init__(self, directory: Path | None, writer: SnapshotWriter) -> None:
        self._directory = directory
        self._writer = writer
        self._lock = threading.Lock()
        self._generation = 0  # bumped by truncation and close: stale jobs skip

    def on_roll(self, log: LogStore, state: ProducerStateManager) -> None:
        """Capture the producer state at the log end now; write it through the writer."""
        directory = self._directory
        if directory is None:
            return
        try:
            log.flush_txn_indexes()  # recovery trusts every entry below a snapshot
        except OSError as exc:
            logger.warning("%s: producer state snapshot skipped: %s", directory, exc)
            return
        offset = log.log_end_offset
        data = snapshot.encode_state(state, offset)
        generation = self._generation

        def job() -> None:
            with self._lock:
                if generation != self._generation:
                    return  # truncated or closed since: the offset may not exist any more
                try:
                    snapshot.write_encoded(directory, offset, data)
                    snapshot.keep_latest(directory, SNAPSHOTS_KEPT)
                except OSError as exc:
                    logger.warning("%s: producer state snapshot at %d failed: %s",
                                   directory, offset, exc)

        state.on_snapshot_written(offset)
        self._writer(job)

    def invalidate(self) -> None:
        """Pending jobs write nothing (the log was truncated or closed)."""
        with self._lock:
            self._generation += 1

    def take_now(self, log: LogStore, state: ProducerStateManager) -> None:
        """Snapshot the producer state at the log end, synchronously, after fsyncing the
        transaction indexes. Nothing is written when the log end is where the last snapshot
        was taken or loaded (Kafka's takeSnapshot rule: no new offset, no new copy) or the
        log is empty (there is no producer state to keep): a broker that stops with its
        internal topics untouched writes no snapshot for them."""
        directory = self._directory
        if directory is None or log.log_end_offset in (0, state.last_snapshot_offset):
            return
        try:
            log.flush_txn_indexes()
            with self._lock:
                snapshot.take_snapshot(
                    state, directory, log.log_end_offset, keep=SNAPSHOTS_KEPT
                )
        except OSError as exc:
            logger.warning("%s: producer state snapshot failed: %s", directory, exc)
