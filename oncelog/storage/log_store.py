"""The byte storage under a partition engine (``LogStore``): what ``UnifiedLog`` needs from a
log of RecordBatches, whatever keeps the bytes.

``oncelog.storage.log.PartitionLog`` (segments on disk) and
``oncelog.storage.memory_engine.MemoryLog`` (batches in memory) implement it. A store only
keeps batches, their offsets and timestamps, and the aborted-transaction index entries it is
given; the append order, producer state, high watermark and LSO belong to the engine
(``oncelog.storage.unified_log``), written once for every store.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

from oncelog.config import LogConfig
from oncelog.records.batch import BatchHeader
from oncelog.storage.log import AppendResult, ReadResult
from oncelog.storage.txn_index import AbortedTxn

__all__ = ["LogStore"]


class LogStore(Protocol):
    """Batches of one partition, by offset. ``segment_count`` changes when the store rolls
    (the engine snapshots its producer state then)."""

    @property
    def directory(self) -> Path: ...

    @property
    def config(self) -> LogConfig: ...

    @property
    def log_start_offset(self) -> int: ...

    @property
    def log_end_offset(self) -> int: ...

    @property
    def size_bytes(self) -> int: ...

    @property
    def segment_count(self) -> int: ...

    def update_config(self, config: LogConfig) -> None: ...

    def append(
        self, buf: bytearray, headers: list[BatchHeader], *, log_append_time_ms: int | None = None,
        partition_leader_epoch: int | None = None,
    ) -> AppendResult:
        """``partition_leader_epoch``, when given, is written into every batch."""
        ...

    def read(
        self, offset: int, max_bytes: int, *, max_offset: int | None = None,
        min_one_batch: bool = True,
    ) -> ReadResult: ...

    def batch_headers(self, start_offset: int = 0) -> Iterator[BatchHeader]: ...

    def append_aborted_txn(self, entry: AbortedTxn) -> None: ...

    def aborted_txns(self, start_offset: int, upper_offset: int) -> list[AbortedTxn]: ...

    def truncate_txn_indexes_from(self, offset: int) -> None: ...

    def flush_txn_indexes(self) -> None: ...

    def offset_for_timestamp(self, timestamp_ms: int) -> tuple[int, int] | None: ...

    def max_timestamp_offset(self) -> tuple[int, int] | None: ...

    def maybe_flush(self, now_ms: int) -> bool: ...

    def flush(self) -> None: ...

    def apply_retention(self) -> int: ...

    def delete_records_before(self, offset: int) -> int: ...

    def truncate_to(self, offset: int) -> None: ...

    def truncate_fully_and_start_at(self, offset: int) -> None: ...

    def close(self) -> None: ...

    def delete(self) -> None: ...
