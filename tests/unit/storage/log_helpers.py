"""Helpers for the PartitionLog tests: batch builders, a crash simulator, read checks."""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from oncelog.clock import FakeClock
from oncelog.config import LogConfig
from oncelog.records.batch import LOG_OVERHEAD, BatchHeader, parse_header
from oncelog.records.codec import RecordInput, encode_batch, iter_records
from oncelog.storage.log import AppendResult, PartitionLog

T0 = 1_700_000_000_000


def batch(
    records: int = 1,
    *,
    timestamps: Sequence[int] | None = None,
    value_size: int = 20,
    producer_id: int = -1,
) -> bytes:
    """One valid RecordBatch v2 (offsets from 0) of ``records`` records."""
    if timestamps is None:
        timestamps = [T0 + i for i in range(records)]
    assert len(timestamps) == records
    return encode_batch(
        [RecordInput(value=bytes([65 + i % 26]) * value_size, timestamp=ts)
         for i, ts in enumerate(timestamps)],
        producer_id=producer_id,
        producer_epoch=0 if producer_id >= 0 else -1,
        base_sequence=0 if producer_id >= 0 else -1,
    )


def headers_of(buf: bytes | bytearray) -> list[BatchHeader]:
    """Headers of the concatenated batches in ``buf`` (header-only walk)."""
    out: list[BatchHeader] = []
    pos = 0
    while pos < len(buf):
        h = parse_header(buf, pos)
        out.append(h)
        pos += h.batch_length + LOG_OVERHEAD
    assert pos == len(buf)
    return out


def append(log: PartitionLog, *batches: bytes, **kwargs: int) -> AppendResult:
    buf = bytearray(b"".join(batches))
    return log.append(buf, headers_of(buf), **kwargs)


def open_log(directory: Path, clock: FakeClock | None = None, **config: Any) -> PartitionLog:
    return PartitionLog.open(directory, LogConfig(**config), clock or FakeClock(T0))


def crash_copy(log: PartitionLog, dest: Path) -> Path:
    """The partition directory as a ``kill -9`` right now would leave it: every write done so
    far is in the files (the page cache survives a process crash), nothing else happens."""
    shutil.copytree(log.directory, dest)
    return dest


def batch_ranges(data: bytes) -> list[tuple[int, int]]:
    """(base offset, last offset) of each whole batch in ``data``."""
    return [(h.base_offset, h.last_offset) for h in headers_of(data)]


def record_offsets(data: bytes) -> list[int]:
    """Offsets of every record in ``data`` (decodes, verifying CRCs)."""
    return [r.offset for _h, records in iter_records(data) for r in records]


def all_offsets(log: PartitionLog) -> list[int]:
    """Every record offset readable from the log start, one large read."""
    if log.log_start_offset == log.log_end_offset:
        return []
    return record_offsets(log.read(log.log_start_offset, 1 << 30).data)


def check_every_offset(log: PartitionLog) -> None:
    """A read at each offset returns the batch holding it first."""
    for offset in range(log.log_start_offset, log.log_end_offset):
        result = log.read(offset, 1)
        (first, last), *_ = batch_ranges(result.data)
        assert first <= offset <= last, (offset, first, last)
        assert result.first_offset == first
