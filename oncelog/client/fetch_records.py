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
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from dataclasses import dataclass

from oncelog.client.errors import CorruptRecordError
from oncelog.client.types import Message
from oncelog.errors import KafkaError
from oncelog.records.codec import iter_records
from oncelog.records.control import ControlType, decode_control

__all__ = ["FetchedRecords", "decode_fetched"]


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
) -> FetchedRecords:
    """``aborted_transactions`` holds (producer_id, first_offset) pairs."""
    messages: list[Message] = []
    position = fetch_offset
    if not data:
        return FetchedRecords(messages, position)
    pending = [(first, pid) for pid, first in (aborted_transactions or ())]
    heapq.heapify(pending)
    aborting: set[int] = set()
    batch_pos = 0  # where the batch being decoded starts in ``data``
    batches = iter_records(data, verify_crc=verify_crc)
    while True:
        try:
            header, records = next(batches)
            if read_committed and header.is_control and header.is_transactional and records:
                marker: ControlType | None = decode_control(records[0])[0]
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
        ts_type = int(header.timestamp_type)
        for record in records:
            if record.offset < fetch_offset:
                continue
            messages.append(
                Message(
                    topic=topic,
                    partition=partition,
                    offset=record.offset,
                    timestamp=record.timestamp,
                    key=record.key,
                    value=record.value,
                    headers=record.headers,
                    timestamp_type=ts_type,
                )
            )
    return FetchedRecords(messages, position)


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
