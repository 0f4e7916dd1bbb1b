"""A log directory's offset checkpoint file (Kafka's ``OffsetCheckpointFile``), used for the
high watermarks of the partitions in it (``replication-offset-checkpoint``)::

    0
    <number of entries>
    <topic> <partition> <offset>
    ...

Written whole and atomically (``files.atomic_write``: temporary file, fsync, rename, directory
fsync), so a reader sees the old or the new content. A file that is missing or cannot be
parsed reads as empty (logged): every partition then starts from its log start offset, which
is always safe for a high watermark (it only moves forward from there, as replication
confirms offsets).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path

from oncelog.storage.files import atomic_write, read_atomic_text

__all__ = ["HIGH_WATERMARK_FILE", "read_offsets", "write_offsets"]

log = logging.getLogger(__name__)

HIGH_WATERMARK_FILE = "replication-offset-checkpoint"
_VERSION = 0

Offsets = Mapping[tuple[str, int], int]


def write_offsets(path: Path, offsets: Offsets) -> None:
    lines = [str(_VERSION), str(len(offsets))]
    lines += [f"{topic} {index} {offset}" for (topic, index), offset in sorted(offsets.items())]
    atomic_write(path, ("\n".join(lines) + "\n").encode())


def read_offsets(path: Path) -> dict[tuple[str, int], int]:
    """The entries of the file at ``path``; empty when it is missing or damaged."""
    try:
        text = read_atomic_text(path)
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError) as exc:
        log.warning("unreadable offset checkpoint %s: %s; ignoring it", path, exc)
        return {}
    try:
        version, count, *entries = text.split("\n")
        if int(version) != _VERSION:
            raise ValueError(f"unknown version {version}")
        found: dict[tuple[str, int], int] = {}
        for line in entries:
            if not line:
                continue
            topic, index, offset = line.split(" ")
            if int(offset) < 0:
                raise ValueError(f"negative offset in {line!r}")
            found[(topic, int(index))] = int(offset)
        if len(found) != int(count):
            raise ValueError(f"{len(found)} entries, the header says {count}")
        return found
    except ValueError as exc:
        log.warning("damaged offset checkpoint %s (%s); ignoring it", path, exc)
        return {}
