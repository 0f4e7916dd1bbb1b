"""Producer id allocation: ids unique forever on this broker, across restarts and crashes.

Ids are handed out from blocks. Before the first id of a new block is handed out, the start
of the block after it is written to a small file (temporary file, fsync, rename, fsync of the
directory). After a restart the manager continues from the recorded value, skipping what was
left of the last block, so no id is ever handed out twice (KIP-98 "InitPidRequest" /
Kafka's ProducerIdManager, which does the same with blocks recorded in the cluster metadata).

File content (one line, ASCII): ``<version> <next block start> <crc32c hex of the first two>``.
A file that does not parse is an error, never a reason to start again from 0.

The only I/O is that file write, once per ``block_size`` ids.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Protocol

import crc32c

from oncelog.storage.files import atomic_write, tmp_path

logger = logging.getLogger(__name__)

FILE_VERSION = 1
MAX_PRODUCER_ID = 2**63 - 1


class ProducerIdFileError(RuntimeError):
    """The producer id file exists but cannot be trusted: refuse to hand out ids."""


def _encode(next_block_start: int) -> bytes:
    payload = f"{FILE_VERSION} {next_block_start}"
    return f"{payload} {crc32c.crc32c(payload.encode()):08x}\n".encode()


def _decode(data: bytes, path: Path) -> int:
    try:
        version_s, value_s, crc_s = data.decode("ascii").split()
        payload = f"{version_s} {value_s}"
        if int(crc_s, 16) != crc32c.crc32c(payload.encode()):
            raise ValueError("crc mismatch")
        if int(version_s) != FILE_VERSION:
            raise ValueError(f"unknown version {version_s}")
        value = int(value_s)
        if value < 0:
            raise ValueError(f"negative value {value}")
        return value
    except (UnicodeDecodeError, ValueError) as exc:
        raise ProducerIdFileError(f"{path}: unreadable producer id block file: {exc}") from exc


class ProducerIdSource(Protocol):
    """What the transaction coordinator needs: ``next_id()``, synchronous. Implemented by
    ``ProducerIdManager`` (one node, a file) and, in cluster mode, by
    ``oncelog.broker.cluster.producer_ids.ClusterProducerIdManager`` (blocks from the
    metadata store; raises a retriable KafkaError while it has none)."""

    def next_id(self) -> int: ...


class ProducerIdManager:
    """Hands out producer ids, ``block_size`` at a time durably reserved in ``path``."""

    def __init__(self, path: Path, block_size: int = 1000) -> None:
        if block_size < 1:
            raise ValueError("block_size must be positive")
        self.path = Path(path)
        self.block_size = block_size
        self._next = self._read()  # the next id to hand out
        self._block_end = self._next  # nothing reserved yet: the first call reserves a block
        tmp = tmp_path(self.path)
        if tmp.exists():
            # A crash during a write: the rename never happened, the old file stands.
            tmp.unlink()

    def _read(self) -> int:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return 0
        return _decode(data, self.path)

    def _write(self, next_block_start: int) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(self.path, _encode(next_block_start))

    def next_id(self) -> int:
        """A producer id never handed out before by this broker."""
        if self._next >= self._block_end:
            start = self._next
            end = start + self.block_size
            if end - 1 > MAX_PRODUCER_ID:
                raise ProducerIdFileError("producer ids exhausted")
            self._write(end)  # durable before any id of [start, end) leaves this object
            self._block_end = end
            logger.info("reserved producer id block start=%d end=%d path=%s", start, end, self.path)
        pid = self._next
        self._next += 1
        return pid

    @property
    def current_block(self) -> tuple[int, int]:
        """[start, end) of what is reserved and not yet handed out (empty before first use)."""
        return self._next, self._block_end
