"""Views an operator needs that take several admin requests to build.

``find_hanging_transactions`` is what ``kafka-transactions.sh find-hanging`` does (and
``oncelog txn find-hanging`` and the transactions console show): a transaction is *hanging*
on a partition when the partition's producer state has it open (DescribeProducers), it has
been idle longer than any transaction may run (``transaction.max.timeout.ms``), and its
coordinator no longer expects to write that partition's marker (ListTransactions by producer
id, then DescribeTransactions: an ongoing or Prepare* transaction lists the partitions it
will still finish). Nothing but ``WriteTxnMarkers`` (``Admin.abort_transaction``) will
release the partition's LSO.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from oncelog.client.aio.admin import AIOAdmin, ProducerState
from oncelog.client.errors import KafkaClientError
from oncelog.client.types import TopicPartition
from oncelog.errors import ErrorCode

__all__ = [
    "DESCRIBE_PRODUCERS_BATCH",
    "HangingTransaction",
    "find_hanging_transactions",
    "hanging_among",
]

DESCRIBE_PRODUCERS_BATCH = 500


@dataclass(frozen=True)
class HangingTransaction:
    partition: TopicPartition
    producer: ProducerState

    def idle_ms(self, now_ms: int) -> int:
        return max(0, now_ms - self.producer.last_timestamp)


async def find_hanging_transactions(
    admin: AIOAdmin, partitions: Sequence[TopicPartition], *, max_timeout_ms: int, now_ms: int
) -> list[HangingTransaction]:
    """The hanging transactions on ``partitions`` (see the module docstring), in partition
    then producer id order."""
    producers: dict[TopicPartition, list[ProducerState]] = {}
    for start in range(0, len(partitions), DESCRIBE_PRODUCERS_BATCH):
        producers.update(
            await admin.describe_producers(partitions[start:start + DESCRIBE_PRODUCERS_BATCH])
        )
    return await hanging_among(admin, producers, max_timeout_ms=max_timeout_ms, now_ms=now_ms)


async def hanging_among(
    admin: AIOAdmin,
    producers: Mapping[TopicPartition, Sequence[ProducerState]],
    *,
    max_timeout_ms: int,
    now_ms: int,
) -> list[HangingTransaction]:
    """The hanging transactions among partitions' already described producers."""
    candidates = [
        HangingTransaction(tp, p)
        for tp, states in sorted(producers.items())
        for p in states
        if p.current_txn_start_offset >= 0 and now_ms - p.last_timestamp > max_timeout_ms
    ]
    if not candidates:
        return []
    return await _not_expected_by_coordinator(admin, candidates)


async def _not_expected_by_coordinator(
    admin: AIOAdmin, candidates: Sequence[HangingTransaction]
) -> list[HangingTransaction]:
    by_producer: dict[int, list[HangingTransaction]] = defaultdict(list)
    for c in candidates:
        by_producer[c.producer.producer_id].append(c)
    ids: Mapping[int, str] = {
        t.producer_id: t.transactional_id
        for t in await admin.list_transactions(producer_ids=sorted(by_producer))
        if t.producer_id in by_producer
    }
    hanging: list[HangingTransaction] = []
    for producer_id, open_txns in sorted(by_producer.items()):
        txn_id = ids.get(producer_id)
        expected: tuple[TopicPartition, ...] = ()
        if txn_id is not None:
            try:
                expected = (await admin.describe_transactions([txn_id]))[txn_id].partitions
            except KafkaClientError as exc:
                if exc.code is not ErrorCode.transactional_id_not_found:
                    raise
        # DescribeTransactions lists the partitions of an ongoing transaction, and those
        # still waiting for their marker while PrepareCommit/PrepareAbort: the coordinator
        # will finish those. Anything else is hanging.
        hanging.extend(c for c in open_txns if c.partition not in expected)
    return hanging
