"""Turn one partition of a Fetch response into messages, sans-IO.

Under read_committed this is where aborted transactions are dropped, following the KIP-98
design ("Consumer" section) and the Java client's CompletedFetch: the response lists the
aborted transactions (producer id, first offset) that overlap the fetched range. Walking the
batches in offset order, every aborted transaction whose first offset is at or below the
current batch's last offset makes its producer id "aborting"; a transactional data batch of
an aborting producer is skipped; that producer's ABORT marker ends it. Control batches are
never returned, under either isolation level. Records below the fetch offset (a batch may
start before it) are skipped too.

A batch that does not decode (CRC mismatch, bad framing or body) ends the data: the records
before it are returned, with ``error`` set to a ``CorruptRecordError`` that names the
partition and the batch's offsets, and ``next_offset`` stays at the bad batch, as the Java
client's CompletedFetch does (it returns what precedes the corrupt batch, then raises).

Records are decoded straight into ``Message`` tuples. Uncompressed batches go through
aiokafka's native (Cython) RecordBatch decoder when it is installed with its extensions,
about three times faster than the codec's Python loop; everything else (compressed
batches, and every batch without it) goes through ``oncelog.records.codec``. Both give the
same messages; a batch either refuses is corrupt.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from oncelog.client.errors import CorruptRecordError
from oncelog.client.types import Headers, Message
from oncelog.errors import ErrorCode, KafkaError
from oncelog.records.batch import BatchHeader, parse_header
from oncelog.records.codec import Record, RecordMaker, batch_positions, decode_batch
from oncelog.records.control import ControlType, decode_control
from oncelog.records.validate import MIN_BATCH_LENGTH, batch_crc

__all__ = ["NATIVE_BATCH", "FetchedRecords", "decode_fetched"]


def _native_batch() -> Any:
    try:
        from aiokafka.record.default_records import DefaultRecordBatch
    except ImportError:
        return None
    # Without its extensions aiokafka falls back to Python, slower than the codec's loop.
    return DefaultRecordBatch if "_crecords" in DefaultRecordBatch.__module__ else None


NATIVE_BATCH: Any = _native_batch()


@dataclass(frozen=True, slots=True)
class FetchedRecords:
    messages: list[Message]
    next_offset: int  # the position after everything consumed from this data
    error: CorruptRecordError | None = None  # a batch after ``messages`` did not decode


def decode_fetched(
    topic: str,
    partition: int,
    data: bytes | memoryview | None,
    fetch_offset: int,
    *,
    read_committed: bool,
    aborted_transactions: Iterable[tuple[int, int]] | None = None,
    verify_crc: bool = True,
    native: bool = True,
) -> FetchedRecords:
    """``aborted_transactions`` holds (producer_id, first_offset) pairs; ``native=False``
    decodes with the codec only."""
    messages: list[Message] = []
    position = fetch_offset
    if not data:
        return FetchedRecords(messages, position)
    pending = [(first, pid) for pid, first in (aborted_transactions or ())]
    heapq.heapify(pending)
    aborting: set[int] = set()
    batch_pos = 0  # where the batch being decoded starts in ``data``
    batches = _batches(data, topic, partition, verify_crc, NATIVE_BATCH if native else None)
    while True:
        try:
            header, records = next(batches)
            if read_committed and header.is_control and header.is_transactional and records:
                first = records[0]
                marker: ControlType | None = decode_control(
                    Record(first.offset, first.timestamp, first.key, first.value)
                )[0]
            else:
                marker = None
        except StopIteration:
            break
        except KafkaError as exc:  # the codec's CORRUPT_MESSAGE (and unknown codec)
            error = _corrupt_batch_error(topic, partition, data, batch_pos, position, exc)
            return FetchedRecords(messages, position, error)
        batch_pos += header.size
        if header.last_offset < fetch_offset:
            continue
        position = max(position, header.next_offset)
        if read_committed:
            while pending and pending[0][0] <= header.last_offset:
                aborting.add(heapq.heappop(pending)[1])
        if header.is_control:
            if marker is ControlType.ABORT:
                aborting.discard(header.producer_id)
            continue
        if read_committed and header.is_transactional and header.producer_id in aborting:
            continue
        if not records:
            continue
        if records[0].timestamp_type != header.timestamp_type:  # made before the header was
            kind = int(header.timestamp_type)  # known: LogAppendTime batches are rare
            records = [m._replace(timestamp_type=kind) for m in records]
        if records[0].offset < fetch_offset:
            records = [m for m in records if m.offset >= fetch_offset]
        messages += records
    return FetchedRecords(messages, position)


def _batches(
    data: bytes | memoryview, topic: str, partition: int, verify_crc: bool, native: Any
) -> Iterator[tuple[BatchHeader, list[Message]]]:
    """``codec.iter_records`` into messages, uncompressed batches through ``native``."""
    make = _message_maker(topic, partition)
    new = tuple.__new__
    for pos in batch_positions(data):
        header = parse_header(data, pos)
        if (
            native is None
            or header.compression
            or header.magic != 2
            or header.batch_length < MIN_BATCH_LENGTH
        ):
            header, records = decode_batch(data, pos, verify_crc=verify_crc, make=make)
        else:
            size = header.size
            # The CRC by the crc32c package (hardware CRC32C): aiokafka's validate_crc is
            # a software one, several times slower than decoding the records themselves.
            if verify_crc and batch_crc(data, pos, size) != header.crc:
                raise KafkaError(ErrorCode.corrupt_message, "crc mismatch")
            batch = native(memoryview(data)[pos : pos + size])
            try:
                records = [
                    new(Message, (topic, partition, r.offset, r.timestamp, r.key, r.value,
                                  tuple(r.headers) if r.headers else (), 0))
                    for r in batch
                ]  # fmt: skip
            except Exception as exc:  # aiokafka's CorruptRecordException and friends
                raise KafkaError(ErrorCode.corrupt_message, str(exc)) from exc
        yield header, records


def _message_maker(topic: str, partition: int) -> RecordMaker[Message]:
    """Messages straight from the decoder (CreateTime; LogAppendTime is set afterwards)."""
    new = tuple.__new__

    def make(
        offset: int, timestamp: int, key: bytes | None, value: bytes | None, headers: Headers
    ) -> Message:
        return new(Message, (topic, partition, offset, timestamp, key, value, headers, 0))

    return make


def _corrupt_batch_error(
    topic: str,
    partition: int,
    data: bytes | memoryview,
    pos: int,
    position: int,
    cause: KafkaError,
) -> CorruptRecordError:
    """The error for the undecodable batch at ``pos``. Its base offset sits outside the
    CRC-covered part of the header; its last offset (base + lastOffsetDelta) is inside it,
    so it is only reported, not trusted."""
    offset = position
    where = f"offset {position}"
    if len(data) - pos >= 27:
        base = int.from_bytes(data[pos : pos + 8], "big", signed=True)
        last = base + int.from_bytes(data[pos + 23 : pos + 27], "big", signed=True)
        offset = max(base, position)
        where = f"offset {offset} (batch header says offsets {base}..{last})"
    return CorruptRecordError(
        f"Received exception when fetching the next record from {topic}-{partition}: corrupt "
        f"record batch at {where}: {cause.message or cause}. If needed, please seek past the "
        f"record to continue consumption.",
        topic=topic,
        partition=partition,
        offset=offset,
    )
