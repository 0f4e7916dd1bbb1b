"""The in-memory partition engine (``memory:``): the file engine's semantics without files.

``MemoryLog`` is a ``LogStore`` keeping the batches as bytes in a list, with offsets
assigned by the same helper as the file log (``oncelog.records.validate.assign_offsets``),
LogAppendTime stamping, "segments" that roll at ``segment.bytes`` (retention deletes whole
segments, never the active one, by ``retention.ms`` and ``retention.bytes``, and
DeleteRecords moves the log start) and the aborted-transaction entries in a list. The append
order, producer state, high watermark, LSO and truncation are ``UnifiedLog``'s, the same code
as the file engine's. There are no producer-state snapshots: truncation replays the
producer state from the log start. Everything is lost when the process stops; for tests and
scenarios.
"""

from __future__ import annotations

import logging
from bisect import bisect_left, bisect_right
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from oncelog.clock import Clock
from oncelog.config import LogConfig
from oncelog.errors import ErrorCode, KafkaError
from oncelog.records.batch import LOG_OVERHEAD, BatchHeader
from oncelog.records.codec import decode_batch
from oncelog.records.validate import assign_offsets
from oncelog.storage.log import AppendResult, ReadResult
from oncelog.storage.producer_state import ProducerStateManager
from oncelog.storage.retention import segments_below, segments_to_delete
from oncelog.storage.txn_index import AbortedTxn
from oncelog.storage.unified_log import DEFAULT_PRODUCER_ID_EXPIRATION_MS, UnifiedLog

__all__ = ["MemoryLog", "open_memory_engine"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class _Batch:
    header: BatchHeader
    data: bytes
    appended_ms: int


class MemoryLog:
    """A partition's batches in memory (a ``LogStore``)."""

    def __init__(self, name: str, config: LogConfig, clock: Clock) -> None:
        self._directory = Path(f"memory:{name}")
        self._config = config
        self._clock = clock
        self._batches: list[_Batch] = []
        self._bases: list[int] = []  # base offset of each batch
        self._segment_bases: list[int] = [0]  # first offset of each segment
        self._active_size = 0
        self._size = 0
        self._log_start_offset = 0
        self._log_end_offset = 0
        self._aborted: list[AbortedTxn] = []  # by marker offset

    # -- offsets and configuration ----------------------------------------------------------
    @property
    def directory(self) -> Path:
        return self._directory

    @property
    def config(self) -> LogConfig:
        return self._config

    def update_config(self, config: LogConfig) -> None:
        self._config = config

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self._log_end_offset

    @property
    def size_bytes(self) -> int:
        return self._size

    @property
    def segment_count(self) -> int:
        return len(self._segment_bases)

    # -- append and read ---------------------------------------------------------------------
    def append(
        self, buf: bytearray, headers: list[BatchHeader], *, log_append_time_ms: int | None = None,
        partition_leader_epoch: int | None = None,
    ) -> AppendResult:
        if not headers:
            raise ValueError("append needs at least one batch")
        if log_append_time_ms is None and self._config.log_append_time:
            log_append_time_ms = self._clock.now_ms()
        base_offset = self._log_end_offset
        if self._active_size and self._active_size + len(buf) > self._config.segment_bytes:
            self._segment_bases.append(base_offset)
            self._active_size = 0
        written = assign_offsets(
            buf, headers, base_offset, log_append_time_ms,
            partition_leader_epoch=partition_leader_epoch,
        )
        now = self._clock.now_ms()
        pos = 0
        for header in written:
            size = header.batch_length + LOG_OVERHEAD
            self._batches.append(_Batch(header, bytes(buf[pos : pos + size]), now))
            self._bases.append(header.base_offset)
            pos += size
        self._active_size += len(buf)
        self._size += len(buf)
        self._log_end_offset = written[-1].next_offset
        max_timestamp = max(h.max_timestamp for h in written)
        return AppendResult(
            base_offset, written[-1].last_offset,
            -1 if log_append_time_ms is None else log_append_time_ms, max_timestamp, written,
        )

    def _out_of_range(self, offset: int) -> KafkaError:
        return KafkaError(
            ErrorCode.offset_out_of_range,
            f"{self._directory.name}: offset {offset} is outside "
            f"[{self._log_start_offset}, {self._log_end_offset}]",
        )

    def _index_of(self, offset: int) -> int:
        """Index of the batch holding ``offset`` (or the first after it)."""
        i = bisect_right(self._bases, offset) - 1
        if i < 0 or self._batches[i].header.last_offset < offset:
            i += 1
        return i

    def read(
        self, offset: int, max_bytes: int, *, max_offset: int | None = None,
        min_one_batch: bool = True,
    ) -> ReadResult:
        start, end = self._log_start_offset, self._log_end_offset
        if offset < start or offset > end:
            raise self._out_of_range(offset)
        limit = end if max_offset is None or max_offset > end else max_offset
        parts: list[bytes] = []
        budget = max_bytes
        i = self._index_of(offset)
        while i < len(self._batches) and self._batches[i].header.base_offset < limit:
            data = self._batches[i].data
            if len(data) > budget and not (min_one_batch and not parts):
                break
            parts.append(data)
            budget -= len(data)
            i += 1
        if not parts:
            return ReadResult(b"", offset, offset, start, end)
        first = self._batches[i - len(parts)].header.base_offset
        return ReadResult(
            b"".join(parts), first, self._batches[i - 1].header.next_offset, start, end
        )

    def batch_headers(self, start_offset: int = 0) -> Iterator[BatchHeader]:
        for batch in self._batches[self._index_of(start_offset) :]:
            yield batch.header

    # -- aborted transactions ----------------------------------------------------------------
    def append_aborted_txn(self, entry: AbortedTxn) -> None:
        self._aborted.append(entry)

    def aborted_txns(self, start_offset: int, upper_offset: int) -> list[AbortedTxn]:
        lasts = [e.last_offset for e in self._aborted]
        return [
            e for e in self._aborted[bisect_left(lasts, start_offset) :]
            if e.first_offset < upper_offset
        ]

    def truncate_txn_indexes_from(self, offset: int) -> None:
        self._aborted = [e for e in self._aborted if e.last_offset < offset]

    def flush_txn_indexes(self) -> None:
        pass

    # -- timestamps ---------------------------------------------------------------------------
    def offset_for_timestamp(self, timestamp_ms: int) -> tuple[int, int] | None:
        for batch in self._batches:
            if batch.header.max_timestamp < timestamp_ms:
                continue
            for record in decode_batch(batch.data)[1]:
                if record.timestamp >= timestamp_ms and record.offset >= self._log_start_offset:
                    return record.offset, record.timestamp
        return None

    def max_timestamp_offset(self) -> tuple[int, int] | None:
        best: _Batch | None = None
        for batch in self._batches:
            if batch.header.max_timestamp >= 0 and (
                best is None or batch.header.max_timestamp > best.header.max_timestamp
            ):
                best = batch
        if best is None:
            return None
        for record in decode_batch(best.data)[1]:
            if record.timestamp == best.header.max_timestamp:
                return record.offset, record.timestamp
        return best.header.last_offset, best.header.max_timestamp

    # -- maintenance ---------------------------------------------------------------------------
    def maybe_flush(self, now_ms: int) -> bool:
        return False

    def flush(self) -> None:
        pass

    def apply_retention(self) -> int:
        """Delete whole segments, oldest first and never the active one, by the file log's
        rules (``retention.segments_to_delete``)."""
        bases = self._segment_bases
        count, reason = segments_to_delete(
            bases,
            lambda i: self._segment_size(i, i + 1),
            self._segment_time,
            self._log_start_offset,
            self._config,
            self._clock,
        )
        if count:
            self._drop_below(bases[count])
            del bases[:count]
            logger.info(
                "%s: deleted %d segments (%s); log start offset %d",
                self._directory, count, reason, self._log_start_offset,
            )
        return count

    def _segment_range(self, first: int, last: int) -> range:
        """Batch indexes of segments [first, last)."""
        bases = self._segment_bases
        upper = self._log_end_offset if last >= len(bases) else bases[last]
        return range(bisect_left(self._bases, bases[first]), bisect_left(self._bases, upper))

    def _segment_size(self, first: int, last: int) -> int:
        return sum(len(self._batches[i].data) for i in self._segment_range(first, last))

    def _segment_time(self, index: int) -> int:
        """The segment's largest timestamp, or when it was last appended to without one."""
        batches = [self._batches[i] for i in self._segment_range(index, index + 1)]
        stamps = [b.header.max_timestamp for b in batches if b.header.max_timestamp >= 0]
        if stamps:
            return max(stamps)
        return max((b.appended_ms for b in batches), default=self._clock.now_ms())

    def _drop_below(self, offset: int) -> None:
        cut = bisect_left(self._bases, offset)
        self._size -= sum(len(b.data) for b in self._batches[:cut])
        del self._batches[:cut]
        del self._bases[:cut]
        self._log_start_offset = max(self._log_start_offset, offset)

    def delete_records_before(self, offset: int) -> int:
        if offset > self._log_end_offset or offset < 0:
            raise self._out_of_range(offset)
        if offset <= self._log_start_offset:
            return self._log_start_offset
        self._log_start_offset = offset
        count = segments_below(self._segment_bases, self._log_start_offset)
        if count:
            self._drop_below(self._segment_bases[count])
            del self._segment_bases[:count]
        return self._log_start_offset

    def truncate_fully_and_start_at(self, offset: int) -> None:
        self._batches.clear()
        self._bases.clear()
        self._segment_bases[:] = [offset]
        self._aborted.clear()
        self._size = self._active_size = 0
        self._log_start_offset = self._log_end_offset = offset

    def truncate_to(self, offset: int) -> None:
        if offset < 0:
            raise ValueError(f"negative truncation offset {offset}")
        if offset >= self._log_end_offset:
            return
        if not self._batches or offset < self._bases[0]:
            self.truncate_fully_and_start_at(offset)
            return
        cut = self._index_of(offset)
        new_end = self._batches[cut].header.base_offset if cut < len(self._batches) else offset
        self._size -= sum(len(b.data) for b in self._batches[cut:])
        del self._batches[cut:]
        del self._bases[cut:]
        self._log_end_offset = new_end
        self._segment_bases[:] = [b for b in self._segment_bases if b < new_end] or [new_end]
        last = len(self._segment_bases) - 1
        self._active_size = self._segment_size(last, last + 1)
        self._aborted = [e for e in self._aborted if e.last_offset < new_end]
        self._log_start_offset = min(self._log_start_offset, new_end)

    def close(self) -> None:
        pass

    def delete(self) -> None:
        self._batches.clear()
        self._bases.clear()
        self._aborted.clear()


def open_memory_engine(
    name: str,
    config: LogConfig,
    clock: Clock,
    *,
    producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS,
    auto_high_watermark: bool = True,
    leader_epoch: int | None = 0,
) -> UnifiedLog:
    """A new, empty in-memory partition engine named ``name`` (e.g. ``topic-0``), leading
    ``leader_epoch`` at once unless it is None (as ``UnifiedLog.open``)."""
    state = ProducerStateManager(name, clock, producer_id_expiration_ms)
    engine = UnifiedLog(
        MemoryLog(name, config, clock), state, clock, auto_high_watermark=auto_high_watermark
    )
    if leader_epoch is not None:
        engine.become_leader(leader_epoch)
    return engine
