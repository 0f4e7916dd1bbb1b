"""Reading a segment's ``.log`` file batch header by batch header, without decoding records:
the header walks the read path uses (``walk_prefixes``, ``walk_headers``) and the recovery
scan (``scan_for_recovery``: validate every batch, cut the file at the first bad one, rebuild
the sparse indexes). ``LogSegment`` owns the file and its in-memory facts and calls these.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass

from crc32c import crc32c

from oncelog.records.batch import (
    ATTRIBUTES_OFFSET,
    HEADER_SIZE,
    HEADER_STRUCT,
    LOG_OVERHEAD,
    BatchHeader,
)
from oncelog.records.validate import MIN_BATCH_LENGTH
from oncelog.storage.index import OffsetIndex, TimeIndex

__all__ = [
    "INT32_MAX",
    "CorruptSegmentError",
    "RecoveryOutcome",
    "RecoveryScan",
    "scan_for_recovery",
    "walk_headers",
    "walk_prefixes",
]

INT32_MAX = 2**31 - 1

# The first 43 header bytes: baseOffset, batchLength, leaderEpoch, magic, crc, attributes,
# lastOffsetDelta, baseTimestamp, maxTimestamp -- all a header walk needs.
_PREFIX = struct.Struct(">qiibIhiqq")
_PREFIX_SIZE = _PREFIX.size
_RECOVERY_CHUNK = 1 << 20


class CorruptSegmentError(Exception):
    """The bytes of a segment that should be valid are not (found while walking headers)."""


@dataclass(frozen=True, slots=True)
class RecoveryOutcome:
    """What ``LogSegment.recover`` found: ``truncated_bytes`` > 0 means a torn or corrupt
    batch at ``valid_bytes`` (offset ``next_offset``) and everything after it was cut."""

    valid_bytes: int
    truncated_bytes: int
    next_offset: int
    reason: str


@dataclass(frozen=True, slots=True)
class RecoveryScan:
    """The outcome plus the in-memory facts of what is valid (see ``LogSegment``)."""

    outcome: RecoveryOutcome
    max_timestamp: int
    offset_of_max_timestamp: int
    rolling_timestamp: int
    bytes_since_index_entry: int


def read_prefix(fd: int, position: int) -> tuple[int, ...] | None:
    """The first header bytes of the batch at ``position`` (None past the end)."""
    data = os.pread(fd, _PREFIX_SIZE, position)
    if len(data) < _PREFIX_SIZE:
        return None
    return _PREFIX.unpack(data)


def walk_prefixes(
    fd: int, base_offset: int, start: int, end: int, chunk: int
) -> Iterator[tuple[int, int, int, int, int]]:
    """Yield ``(position, base_offset, size, last_offset_delta, max_timestamp)`` for the
    batches from byte ``start`` (a batch boundary) to ``end``, reading chunks of headers."""
    unpack_from = _PREFIX.unpack_from
    pos = start
    while end - pos >= HEADER_SIZE:
        data = os.pread(fd, min(chunk, end - pos), pos)
        n = len(data)
        off = 0
        while n - off >= _PREFIX_SIZE:
            base, length, _e, _m, _c, _a, delta, _bt, max_ts = unpack_from(data, off)
            if length < MIN_BATCH_LENGTH:
                raise CorruptSegmentError(
                    f"segment {base_offset}: batch length {length} at byte {pos + off}"
                )
            size = length + LOG_OVERHEAD
            yield pos + off, base, size, delta, max_ts
            off += size
        if off == 0:
            raise CorruptSegmentError(
                f"segment {base_offset}: file ends inside a header at byte {pos}"
            )
        pos += off


def walk_headers(
    fd: int, base_offset: int, start: int, end: int, chunk: int
) -> Iterator[BatchHeader]:
    """Full headers of the batches from byte ``start`` (a batch boundary) to ``end``."""
    unpack_from = HEADER_STRUCT.unpack_from
    pos = start
    while end - pos >= HEADER_SIZE:
        data = os.pread(fd, min(chunk, end - pos), pos)
        n = len(data)
        off = 0
        while n - off >= HEADER_SIZE:
            header = BatchHeader(*unpack_from(data, off))
            if header.batch_length < MIN_BATCH_LENGTH:
                raise CorruptSegmentError(
                    f"segment {base_offset}: batch length {header.batch_length} "
                    f"at byte {pos + off}"
                )
            yield header
            off += header.batch_length + LOG_OVERHEAD
        if off == 0:
            raise CorruptSegmentError(
                f"segment {base_offset}: file ends inside a header at byte {pos}"
            )
        pos += off


def scan_for_recovery(
    fd: int,
    base_offset: int,
    offset_index: OffsetIndex,
    time_index: TimeIndex,
    index_interval: int,
) -> RecoveryScan:
    """Validate every batch (sizes, magic, offsets, CRC32C), cut the file at the first bad
    one, and rebuild both indexes from what is valid."""
    file_size = os.fstat(fd).st_size
    offset_index.reset()
    time_index.reset()
    unpack_from = HEADER_STRUCT.unpack_from
    expected = base_offset
    max_ts = -1
    max_ts_offset = -1
    rolling_ts = -1
    since = 0
    pos = 0
    buf = b""
    view = memoryview(buf)
    buf_start = 0
    reason = ""
    while pos < file_size:
        remaining = file_size - pos
        if remaining < HEADER_SIZE:
            reason = f"torn batch header ({remaining} bytes)"
            break
        off = pos - buf_start
        if off + HEADER_SIZE > len(buf):
            buf = os.pread(fd, _RECOVERY_CHUNK, pos)
            view = memoryview(buf)
            buf_start = pos
            off = 0
        (first, length, _epoch, magic, crc, _attrs, delta, _base_ts, batch_max_ts,
         _pid, _pepoch, _seq, _count) = unpack_from(buf, off)
        size = length + LOG_OVERHEAD
        if magic != 2:
            reason = f"magic {magic}"
            break
        if length < MIN_BATCH_LENGTH:
            reason = f"batch length {length}"
            break
        if size > remaining:
            reason = f"torn batch ({size} bytes declared, {remaining} present)"
            break
        if first != expected or delta < 0 or first + delta - base_offset > INT32_MAX:
            reason = f"offsets {first}+{delta} after {expected - 1}"
            break
        if off + size > len(buf):
            buf = os.pread(fd, max(size, _RECOVERY_CHUNK), pos)
            view = memoryview(buf)
            buf_start = pos
            off = 0
        if crc32c(view[off + ATTRIBUTES_OFFSET : off + size]) != crc:
            reason = "crc mismatch"
            break
        last = first + delta
        if pos == 0:
            rolling_ts = batch_max_ts
        if batch_max_ts > max_ts:
            max_ts = batch_max_ts
            max_ts_offset = last
        if since > index_interval:
            offset_index.append(last - base_offset, pos)
            time_index.maybe_append(max_ts, max_ts_offset - base_offset)
            since = 0
        since += size
        pos += size
        expected = last + 1
    view.release()
    truncated = file_size - pos
    if truncated:
        os.ftruncate(fd, pos)
    offset_index.rewrite()
    time_index.rewrite()
    return RecoveryScan(
        RecoveryOutcome(pos, truncated, expected, reason), max_ts, max_ts_offset, rolling_ts,
        since,
    )
