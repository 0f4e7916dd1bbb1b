"""Turn one partition of a Fetch response into messages, sans-IO.

Under read_committed this is where aborted transactions are dropped, following the KIP-98
design ("Consumer" section) and the Java client's CompletedFetch: the response lists the
aborted transactions (producer id, first offset) that overlap the fetched range. Walking the
batches in offset order, every aborted transaction whose first offset is at or below the
current batch's last offset makes its producer id "aborting"; a transactional data batch of
an aborting producer is skipped; that producer's ABORT marker ends it. Control batches are
never returned, under either isolation level. Records below the fetch offset (a batch may
start before it) are skipped too.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from dataclasses import dataclass

from oncelog.client.types import Message
from oncelog.records.codec import iter_records
from oncelog.records.control import ControlType, decode_control

__all__ = ["FetchedRecords", "decode_fetched"]


@dataclass(frozen=True, slots=True)
class FetchedRecords:
    messages: list[Message]
    next_offset: int  # the position after everything consumed from this data


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
    for header, records in iter_records(data, verify_crc=verify_crc):
        if header.last_offset < fetch_offset:
            continue
        position = max(position, header.next_offset)
        if read_committed:
            while pending and pending[0][0] <= header.last_offset:
                aborting.add(heapq.heappop(pending)[1])
        if header.is_control:
            if read_committed and header.is_transactional and records:
                marker, _ = decode_control(records[0])
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
