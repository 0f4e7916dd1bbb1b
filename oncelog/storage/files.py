"""The one way small state files are written: atomically and durably.

``atomic_write`` writes ``<name>.tmp``, fsyncs it, renames it over ``<name>`` and fsyncs the
directory, so after a crash or a power loss a reader finds either the old or the new content,
never a mix, and never a file whose rename was lost. Every small state file of the broker
(meta.properties, topics.json, log.checkpoint, producer-state snapshots, the producer-id
block, rewritten transaction indexes) goes through it.
"""

from __future__ import annotations

import os
from pathlib import Path

TMP_SUFFIX = ".tmp"


def tmp_path(path: Path) -> Path:
    """Where ``atomic_write`` stages the new content of ``path``."""
    return path.with_name(path.name + TMP_SUFFIX)


def fsync_directory(directory: Path) -> None:
    """Make the directory's entries (creations, renames, deletions) durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` so that a crash leaves the old or the new content."""
    tmp = tmp_path(path)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_directory(path.parent)


def read_atomic_text(path: Path) -> str:
    """The text of a file written with ``atomic_write``, first removing a temporary file
    left by a write that never reached its rename. FileNotFoundError when there is none;
    OSError or UnicodeDecodeError when it cannot be read (callers log and ignore it)."""
    tmp = tmp_path(path)
    if tmp.exists():
        tmp.unlink()
    return path.read_text("ascii")
