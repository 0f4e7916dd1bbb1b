"""Per-partition checkpoint file and clean-shutdown marker.

``log.checkpoint`` in the partition directory holds, as text::

    version=0
    recovery.point=<offset>
    log.start.offset=<offset>

It is replaced atomically: written to ``log.checkpoint.tmp``, fsynced, renamed over the old
file, then the directory is fsynced, so a reader sees either the old or the new content.
A file that cannot be parsed is treated as absent (the log then recovers from offset 0 and
takes its start offset from the first segment).

``.clean-shutdown`` exists only between a ``PartitionLog.close`` (which writes it after
everything is fsynced) and the next ``open`` (which removes it before any write): its presence
means every segment and index on disk is complete, so recovery can skip the CRC scan.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from oncelog.storage.files import atomic_write, fsync_directory, read_atomic_text

__all__ = [
    "CHECKPOINT_FILE",
    "CLEAN_SHUTDOWN_FILE",
    "LogCheckpoint",
    "read_checkpoint",
    "remove_clean_shutdown",
    "write_checkpoint",
    "write_clean_shutdown",
]

logger = logging.getLogger(__name__)

CHECKPOINT_FILE = "log.checkpoint"
CLEAN_SHUTDOWN_FILE = ".clean-shutdown"
_VERSION = 0


@dataclass(frozen=True, slots=True)
class LogCheckpoint:
    recovery_point: int
    log_start_offset: int

    def __post_init__(self) -> None:
        if self.recovery_point < 0 or self.log_start_offset < 0:
            raise ValueError(f"negative offset in {self}")


def write_checkpoint(directory: Path, checkpoint: LogCheckpoint) -> None:
    text = (
        f"version={_VERSION}\n"
        f"recovery.point={checkpoint.recovery_point}\n"
        f"log.start.offset={checkpoint.log_start_offset}\n"
    )
    atomic_write(directory / CHECKPOINT_FILE, text.encode("ascii"))


def read_checkpoint(directory: Path) -> LogCheckpoint | None:
    """The checkpoint, or None when it is missing or unreadable (logged)."""
    path = directory / CHECKPOINT_FILE
    try:
        text = read_atomic_text(path)
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        logger.warning("unreadable checkpoint %s: %s; recovering from scratch", path, exc)
        return None
    try:
        values = dict(line.split("=", 1) for line in text.splitlines() if line)
        if int(values["version"]) != _VERSION:
            raise ValueError(f"unknown version {values['version']}")
        return LogCheckpoint(int(values["recovery.point"]), int(values["log.start.offset"]))
    except (ValueError, KeyError) as exc:
        logger.warning("corrupt checkpoint %s (%r); recovering from scratch", path, exc)
        return None


def write_clean_shutdown(directory: Path) -> None:
    atomic_write(directory / CLEAN_SHUTDOWN_FILE, b"")


def remove_clean_shutdown(directory: Path) -> bool:
    """Remove the marker durably; return whether it was there."""
    path = directory / CLEAN_SHUTDOWN_FILE
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    fsync_directory(directory)
    return True
