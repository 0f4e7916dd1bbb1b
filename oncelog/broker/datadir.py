"""The data directory's own files: the ``.lock`` that keeps it to one broker, and
``meta.properties`` (cluster id and node id).

A second broker on the same directory would acknowledge offsets twice to different records
and lose acknowledged records at the next restart, so the broker takes an exclusive
``flock`` on ``<data-dir>/.lock`` before it reads anything there, as Kafka's LogManager
locks every log directory, and holds it until the process ends (the kernel drops it even
after ``kill -9``).

``meta.properties`` is written once, when a directory is first used; a damaged one, or one
whose node id is not this broker's, refuses the start with a message that says how to
recover, as Kafka does, rather than a traceback or a silently new identity.
"""

from __future__ import annotations

import fcntl
import logging
import os
import uuid
from dataclasses import dataclass
from pathlib import Path

from oncelog.storage.files import atomic_write

log = logging.getLogger(__name__)

LOCK_FILE = ".lock"
META_FILE = "meta.properties"


class DataDirError(Exception):
    """The data directory cannot be used; the message says why and what to do."""


class DataDirLock:
    """An exclusive lock on a data directory, held while the object is open."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / LOCK_FILE
        self._fd: int | None = None

    def acquire(self) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise DataDirError(f"cannot use data directory {self.path.parent}: {exc}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise DataDirError(
                f"failed to acquire lock on {self.path}: another oncelog broker is using the "
                f"data directory {self.path.parent}; stop it first, or give this one its own "
                "--data-dir"
            ) from None
        self._fd = fd
        log.info("locked data directory %s", self.path.parent)

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor drops the flock
            self._fd = None


@dataclass(frozen=True, slots=True)
class MetaProperties:
    cluster_id: str
    node_id: int


def load_meta(directory: Path, node_id: int, cluster_id: str | None = None) -> MetaProperties:
    """Read ``meta.properties`` (writing it on first use); DataDirError when damaged. In
    cluster mode ``cluster_id`` is the metadata store's: a directory of another cluster is
    refused (Kafka's "Invalid cluster.id" at start-up)."""
    path = directory / META_FILE
    if not path.exists():
        meta = MetaProperties(cluster_id or uuid.uuid4().hex[:22], node_id)
        has_data = any(p.is_dir() for p in directory.iterdir())
        if has_data:
            log.warning(
                "%s is missing in a data directory that holds data; writing a new one "
                "(cluster id %s, node id %d)", path, meta.cluster_id, node_id,
            )
        atomic_write(path, f"cluster.id={meta.cluster_id}\nnode.id={node_id}\n".encode())
        return meta
    recover = (
        f"restore it from a backup, or write it again with two lines, cluster.id=<any id> "
        f"and node.id={node_id} (the partition data does not depend on them)"
    )
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        raise DataDirError(f"{path} is damaged (not text); {recover}") from None
    values: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        key, sep, value = stripped.partition("=")
        if not sep:
            raise DataDirError(f"{path} is damaged (line {number}: {line[:60]!r}); {recover}")
        values[key.strip()] = value.strip()
    expected, cluster_id = cluster_id, values.get("cluster.id", "")
    stored_node = values.get("node.id", "")
    if not cluster_id or not stored_node.lstrip("-").isdigit():
        raise DataDirError(f"{path} is damaged (no cluster.id or node.id); {recover}")
    if int(stored_node) != node_id:
        raise DataDirError(
            f"{path} says node.id={stored_node} but this broker is node.id={node_id}: the "
            f"directory belongs to another node; start with --node-id {stored_node} or use "
            "another --data-dir"
        )
    if expected is not None and cluster_id != expected:
        raise DataDirError(
            f"{path} says cluster.id={cluster_id} but the metadata store's cluster is "
            f"{expected}: this data directory belongs to another cluster; use another "
            "--data-dir (or another metadata.etcd.prefix for the other cluster)"
        )
    return MetaProperties(cluster_id, node_id)
