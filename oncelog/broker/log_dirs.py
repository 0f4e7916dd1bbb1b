"""The broker's log directories (``log.dirs``): which partition directories each holds
(``<log-dir>/<topic>-<partition>/``), discovery at start with the clean-up of what a
partition move cut short left behind, placement of a new partition in the directory holding
the fewest, and the durable move of a partition's files from one directory to another
(AlterReplicaLogDirs). The directories themselves are listed by
oncelog.config.log_dir_paths; the registry that uses them is oncelog.broker.partitions.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
from collections.abc import Iterable
from pathlib import Path

from oncelog.faults import io_fault
from oncelog.storage.files import fsync_directory

log = logging.getLogger(__name__)

_PARTITION_DIR = re.compile(r"^(?P<topic>[a-zA-Z0-9._-]+)-(?P<index>[0-9]+)$")
# A partition being moved in (copied, not yet renamed) or out (renamed, not yet removed):
# '~' cannot appear in a topic name, so these never look like a partition directory.
MOVING_SUFFIX = "~moving"
REMOVING_SUFFIX = "~removing"


def partition_dirs(log_dirs: list[Path]) -> dict[str, int]:
    """Topic name -> partition count, from the ``<topic>-<partition>`` directories."""
    counts: dict[str, int] = {}
    for log_dir in log_dirs:
        for topic, index in partitions_in(log_dir):
            counts[topic] = max(counts.get(topic, 0), index + 1)
    return counts


def partitions_in(log_dir: Path) -> list[tuple[str, int]]:
    found = []
    for entry in log_dir.iterdir():
        match = _PARTITION_DIR.match(entry.name)
        if match and entry.is_dir():
            found.append((match["topic"], int(match["index"])))
    return found


def log_size(directory: Path) -> int:
    """Bytes of a partition's segment files (``*.log``), what Kafka calls the log's size."""
    total = 0
    with contextlib.suppress(FileNotFoundError):
        for entry in os.scandir(directory):
            with contextlib.suppress(FileNotFoundError):
                if entry.name.endswith(".log") and entry.is_file(follow_symlinks=False):
                    total += entry.stat(follow_symlinks=False).st_size
    return total



def recover_locations(log_dirs: list[Path]) -> dict[tuple[str, int], Path]:
    """Where each partition directory is, after finishing what a crash cut short.

    A move copies into ``<target>/<name>~moving``, renames that to ``<name>``, renames
    the source to ``<name>~removing`` and removes it. Leftover ``~moving`` copies are
    incomplete (the source is intact): removed. ``~removing`` ones are finished moves:
    removed. A partition found in two directories (a crash between the two renames) has
    two identical copies (its log was closed before the copy): the first is kept."""
    locations: dict[tuple[str, int], Path] = {}
    for log_dir in log_dirs:
        for entry in log_dir.iterdir():
            if entry.name.endswith((MOVING_SUFFIX, REMOVING_SUFFIX)) and entry.is_dir():
                log.warning("removing %s, left by a partition move cut short", entry)
                shutil.rmtree(entry)
        for key in partitions_in(log_dir):
            if key in locations:
                duplicate = log_dir / f"{key[0]}-{key[1]}"
                log.warning(
                    "partition %s-%d is in both %s and %s (a move cut short after its "
                    "copy was complete): keeping %s, removing %s",
                    key[0], key[1], locations[key], log_dir, locations[key], duplicate,
                )
                shutil.rmtree(duplicate)
                continue
            locations[key] = log_dir
    return locations


def next_log_dir(log_dirs: list[Path], in_use: Iterable[Path]) -> Path:
    """The log directory holding the fewest partitions (the first of those tied);
    ``in_use`` has the log directory of every open partition."""
    counts = dict.fromkeys(log_dirs, 0)
    for log_dir in in_use:
        counts[log_dir] = counts.get(log_dir, 0) + 1
    return min(log_dirs, key=lambda d: counts[d])


def log_dir_named(log_dirs: list[Path], path: str) -> Path | None:
    """The log directory whose absolute path is ``path``; None if none is."""
    if not os.path.isabs(path):
        return None
    wanted = Path(os.path.normpath(path))
    return next((d for d in log_dirs if d == wanted), None)


def move_partition_dir(name: str, source_dir: Path, target: Path) -> None:
    """Move the closed partition ``name``'s files from the log directory ``source_dir`` to
    ``target``: copied durably to ``<name>~moving``, renamed into place, then the source
    renamed to ``<name>~removing`` and removed (``recover_locations`` finishes any step a
    crash cut short). OSError if the files cannot be moved."""
    source = source_dir / name
    final = target / name
    staging = target / (name + MOVING_SUFFIX)
    removing = source_dir / (name + REMOVING_SUFFIX)
    io_fault("move_partition", name)
    _copy_durably(source, staging)
    staging.rename(final)
    fsync_directory(target)
    source.rename(removing)
    fsync_directory(source_dir)
    shutil.rmtree(removing)


def _copy_durably(source: Path, staging: Path) -> None:
    """Copy a partition directory's files to ``staging`` and fsync them and it."""
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    for entry in sorted(source.iterdir()):
        if not entry.is_file():
            continue
        copied = staging / entry.name
        shutil.copyfile(entry, copied)
        with open(copied, "rb+") as handle:
            os.fsync(handle.fileno())
    fsync_directory(staging)
