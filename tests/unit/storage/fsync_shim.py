"""An fsync-tracking shim and a power-loss simulator for one partition directory.

``FsyncTracker`` wraps ``os.fsync``/``os.fdatasync`` (and ``os.unlink``/``os.replace``/
``os.rename``, to tell a reused inode number from the file that had it before) while the
storage code runs. It records what a power loss could not take away:

- for every file, its content at its last fsync (keyed by inode and a generation that moves
  on when the inode is freed, since ext4 reuses inode numbers at once);
- for the tracked directory, the names it held, and which file each named, at its last
  fsync (creations, renames and deletions are durable only from then on).

``power_loss`` then writes into another directory one state a power loss may leave, with
the choices drawn by hypothesis: each name keeps or loses its undurable creation, rename or
deletion; each file keeps its fsynced content, or any prefix of its current content at least
as long as what both share, optionally with a zero-filled tail (size extended, data blocks
never written).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

FileId = tuple[int, int]  # inode, generation
Draw = Callable[..., Any]  # hypothesis: data.draw


class FsyncTracker:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._generation: dict[int, int] = {}
        self.content: dict[FileId, bytes] = {}
        self.entries: dict[str, FileId] = {}  # the directory as of its last fsync
        self._real: dict[str, Callable[..., Any]] = {}

    def file_id(self, st_ino: int) -> FileId:
        return st_ino, self._generation.get(st_ino, 0)

    def current_id(self, path: Path) -> FileId | None:
        try:
            return self.file_id(os.lstat(path).st_ino)
        except FileNotFoundError:
            return None

    # -- the wrappers ----------------------------------------------------------------------
    def _fsync(self, fd: int) -> None:
        self._real["fsync"](fd)
        self._record(fd)

    def _fdatasync(self, fd: int) -> None:
        self._real["fdatasync"](fd)
        self._record(fd)

    def _record(self, fd: int) -> None:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            if os.path.samestat(st, os.stat(self.directory)):
                self.entries = {}
                for name in os.listdir(self.directory):
                    file_id = self.current_id(self.directory / name)
                    if file_id is not None:
                        self.entries[name] = file_id
            return
        with open(f"/proc/self/fd/{fd}", "rb") as f:  # also works for O_WRONLY fds
            self.content[self.file_id(st.st_ino)] = f.read()

    def _freed(self, path: Any) -> int | None:
        """The inode ``path`` names if removing that name frees it."""
        try:
            st = os.lstat(path)
        except (FileNotFoundError, TypeError):
            return None
        return st.st_ino if st.st_nlink == 1 and not stat.S_ISDIR(st.st_mode) else None

    def _bump(self, ino: int | None) -> None:
        if ino is not None:
            self._generation[ino] = self._generation.get(ino, 0) + 1

    def _unlink(self, path: Any, *args: Any, **kwargs: Any) -> None:
        ino = self._freed(path) if not args and not kwargs else None
        self._real["unlink"](path, *args, **kwargs)
        self._bump(ino)

    def _replace_with(self, name: str) -> Callable[..., None]:
        def replace(src: Any, dst: Any, *args: Any, **kwargs: Any) -> None:
            ino = self._freed(dst) if not args and not kwargs else None
            if ino is not None and ino == os.lstat(src).st_ino:
                ino = None
            self._real[name](src, dst, *args, **kwargs)
            self._bump(ino)

        return replace

    @contextmanager
    def installed(self) -> Iterator[FsyncTracker]:
        wrappers: dict[str, Callable[..., Any]] = {
            "fsync": self._fsync,
            "fdatasync": self._fdatasync,
            "unlink": self._unlink,
            "remove": self._unlink,
            "replace": self._replace_with("replace"),
            "rename": self._replace_with("rename"),
        }
        for name, wrapper in wrappers.items():
            self._real[name] = getattr(os, name)
            setattr(os, name, wrapper)
        try:
            yield self
        finally:
            for name, real in self._real.items():
                setattr(os, name, real)

    # -- what survives ---------------------------------------------------------------------
    def durable_file(self, name: str) -> bytes | None:
        """The content of ``name`` that no power loss can take away (None: no durable entry)."""
        file_id = self.entries.get(name)
        if file_id is None:
            return None
        return self.content.get(file_id, b"")


def _common_prefix(a: bytes, b: bytes) -> int:
    n = min(len(a), len(b))
    lo = 0
    step = 4096
    while lo < n and a[lo : lo + step] == b[lo : lo + step]:
        lo += step
    while lo < n and a[lo] == b[lo]:
        lo += 1
    return min(lo, n)


def damage(draw: Draw, durable: bytes, current: bytes) -> bytes:
    """One content a power loss may leave for a file fsynced as ``durable``, now ``current``."""
    if durable == current:
        return current
    mode = draw(st.sampled_from(["durable", "cut", "zero-filled"]))
    if mode == "durable":
        return durable
    common = _common_prefix(durable, current)
    cut = draw(st.integers(common, len(current)))
    if mode == "cut":
        return current[:cut]
    zeros_from = draw(st.integers(common, cut))
    return current[:zeros_from] + bytes(cut - zeros_from)


def power_loss(draw: Draw, tracker: FsyncTracker, dest: Path) -> dict[str, str]:
    """Write into ``dest`` one state ``tracker.directory`` may be in after a power loss now.
    Returns what was chosen per name (for failure reports)."""
    src = tracker.directory
    dest.mkdir(parents=True)
    chosen: dict[str, str] = {}
    for name in sorted(set(os.listdir(src)) | set(tracker.entries)):
        current_id = tracker.current_id(src / name)
        durable_id = tracker.entries.get(name)
        if current_id is not None and current_id == durable_id:
            option = "kept"
        else:
            options = []
            if durable_id is not None:
                options.append("old")
            if current_id is None or durable_id is None:
                options.append("absent")
            if current_id is not None:
                options.append("new")
            option = draw(st.sampled_from(options))
        chosen[name] = option
        if option == "absent":
            continue
        if option == "old":
            assert durable_id is not None
            data = tracker.content.get(durable_id, b"")
        else:
            assert current_id is not None
            data = damage(draw, tracker.content.get(current_id, b""), (src / name).read_bytes())
        (dest / name).write_bytes(data)
    return chosen
