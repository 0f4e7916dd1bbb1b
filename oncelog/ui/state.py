"""The transactions console's snapshot: what a stuck read_committed reader needs explained,
built with the Kafka protocol only (so it works against any Kafka-compatible broker).

- **Topics**: per partition the log start (ListOffsets earliest), the high watermark (latest,
  read_uncommitted) and the LSO (latest, read_committed). A gap (HW - LSO > 0) means an open
  transaction holds read_committed readers back; DescribeProducers on that partition names
  the producer whose transaction starts at the LSO, and the open transactions name its
  transactional id.
- **Open transactions**: ListTransactions (Ongoing, PrepareCommit, PrepareAbort) on every
  broker, then DescribeTransactions per id: producer id/epoch, partitions, start time, age,
  timeout. Two-phase-commit ones (KIP-939, timeout 2147483647 ms) are flagged: they never
  time out, only their owner or a force-terminate ends them.
- **Hanging transactions**: ``oncelog.client.admin_views.hanging_among`` (find-hanging) over
  the producers of the partitions with a gap.
- **Groups**: ``list_consumer_groups`` (ListGroups on every broker), then
  ``list_consumer_group_offsets`` (OffsetFetch) per group; lag is the high watermark
  minus the committed offset, as kafka-consumer-groups.sh computes it.

``collect_state`` returns plain JSON-ready dicts; the page renders them.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from oncelog.client.admin_views import hanging_among
from oncelog.client.aio.admin import (
    AIOAdmin,
    OffsetSpec,
    ProducerState,
    TransactionDescription,
)
from oncelog.client.errors import KafkaClientError
from oncelog.client.types import TopicPartition

log = logging.getLogger(__name__)

OPEN_STATES = ("Ongoing", "PrepareCommit", "PrepareAbort")
JsonDict = dict[str, Any]


async def _open_transactions(admin: AIOAdmin) -> list[TransactionDescription]:
    listed = await admin.list_transactions(states=OPEN_STATES)
    out = []
    for t in sorted(listed, key=lambda t: t.transactional_id):
        try:
            d = (await admin.describe_transactions([t.transactional_id]))[t.transactional_id]
        except KafkaClientError as exc:  # ended or expired between the two requests
            log.debug("transaction %r vanished while described: %s", t.transactional_id, exc)
            continue
        if d.state in OPEN_STATES:
            out.append(d)
    return out


def _transaction_json(d: TransactionDescription, now_ms: int) -> JsonDict:
    age = max(0, now_ms - d.start_time_ms) if d.start_time_ms >= 0 else None
    return {
        "transactional_id": d.transactional_id,
        "producer_id": d.producer_id,
        "producer_epoch": d.producer_epoch,
        "state": d.state,
        "partitions": [f"{tp.topic}-{tp.partition}" for tp in d.partitions],
        "start_time_ms": d.start_time_ms,
        "age_ms": age,
        "timeout_ms": d.timeout_ms,
        "two_phase_commit": d.two_phase_commit,
        "coordinator_id": d.coordinator_id,
    }


async def _groups(
    admin: AIOAdmin, partitions: Sequence[TopicPartition], high: Mapping[TopicPartition, int]
) -> list[JsonDict]:
    out = []
    for listing in await admin.list_consumer_groups():
        group_id = listing.group_id
        entry: JsonDict = {"group_id": group_id, "state": listing.state, "partitions": [],
                           "lag": 0}
        try:
            committed = await admin.list_consumer_group_offsets(group_id, partitions)
        except KafkaClientError as exc:
            entry["error"] = str(exc)
            out.append(entry)
            continue
        for tp, om in sorted(committed.items()):
            hw = high.get(tp)
            lag = None if hw is None else max(0, hw - om.offset)
            entry["partitions"].append({"topic": tp.topic, "partition": tp.partition,
                                        "committed": om.offset, "high_watermark": hw,
                                        "lag": lag})
            entry["lag"] += lag or 0
        out.append(entry)
    return out


def _blocking(
    tp: TopicPartition, lso: int, producers: Iterable[ProducerState],
    by_producer_id: Mapping[int, TransactionDescription],
) -> JsonDict | None:
    """The open transaction that holds ``tp``'s LSO: the one starting at the LSO."""
    open_ones = [p for p in producers if p.current_txn_start_offset >= 0]
    if not open_ones:
        return None
    p = min(open_ones, key=lambda p: (p.current_txn_start_offset != lso,
                                      p.current_txn_start_offset))
    d = by_producer_id.get(p.producer_id)
    return {
        "transactional_id": d.transactional_id if d is not None else None,
        "producer_id": p.producer_id,
        "producer_epoch": p.producer_epoch,
        "start_offset": p.current_txn_start_offset,
        "two_phase_commit": d.two_phase_commit if d is not None else False,
    }


async def collect_state(admin: AIOAdmin, *, max_timeout_ms: int, now_ms: int) -> JsonDict:
    """One snapshot of topics, open/prepared/hanging transactions and groups."""
    topics = await admin.describe_topics(None)
    partitions = [
        TopicPartition(name, index)
        for name, d in sorted(topics.items()) if not d.internal
        for index in d.leaders
    ]
    start: dict[TopicPartition, int] = {}
    high: dict[TopicPartition, int] = {}
    lso: dict[TopicPartition, int] = {}
    if partitions:
        start = await admin.list_offsets(partitions, OffsetSpec.earliest())
        high = await admin.list_offsets(partitions, OffsetSpec.latest())
        lso = await admin.list_offsets(partitions, OffsetSpec.latest(),
                                       isolation_level="read_committed")
    transactions = await _open_transactions(admin)
    by_producer_id = {d.producer_id: d for d in transactions}
    gapped = [tp for tp in partitions if high.get(tp, 0) > lso.get(tp, 0)]
    producers = await admin.describe_producers(gapped) if gapped else {}
    hanging = await hanging_among(admin, producers, max_timeout_ms=max_timeout_ms,
                                  now_ms=now_ms)
    rows = []
    for tp in partitions:
        hw, stable = high.get(tp, -1), lso.get(tp, -1)
        rows.append({
            "topic": tp.topic, "partition": tp.partition, "log_start": start.get(tp, -1),
            "high_watermark": hw, "lso": stable, "gap": max(0, hw - stable),
            "blocking": _blocking(tp, stable, producers.get(tp, ()), by_producer_id),
        })
    return {
        "now_ms": now_ms,
        "max_transaction_timeout_ms": max_timeout_ms,
        "topics": rows,
        "transactions": [_transaction_json(d, now_ms) for d in transactions],
        "hanging": [
            {"topic": h.partition.topic, "partition": h.partition.partition,
             "producer_id": h.producer.producer_id, "producer_epoch": h.producer.producer_epoch,
             "coordinator_epoch": h.producer.coordinator_epoch,
             "start_offset": h.producer.current_txn_start_offset,
             "last_timestamp": h.producer.last_timestamp, "idle_ms": h.idle_ms(now_ms)}
            for h in hanging
        ],
        "groups": await _groups(admin, partitions, high),
    }


__all__ = ["OPEN_STATES", "collect_state"]
