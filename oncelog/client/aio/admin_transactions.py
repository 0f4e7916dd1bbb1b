"""The asyncio admin client's transactions and producers.

Transaction operations go to the transaction coordinator of each id (DescribeTransactions,
InitProducerId for force-termination) or to every broker (ListTransactions);
DescribeProducers goes to each partition's leader.

``force_terminate_transaction(id)`` is KIP-939's forceTerminateTransaction: an
InitProducerId for that transactional id *without* KeepPreparedTxn, which aborts whatever is
ongoing (prepared 2PC transactions included) and fences the current producer.
``abort_transaction`` is Java's Admin.abortTransaction for a *hanging* transaction (open on
a partition, unknown to or forgotten by its coordinator): a WriteTxnMarkers request with an
ABORT marker sent to the partition's leader. Brokers accept ABORT markers from clients (as
Kafka does without an authorizer) and refuse COMMIT markers.
"""

from __future__ import annotations

import functools
import logging
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from oncelog.client.aio.admin_types import (
    _WRITE_TXN_MARKERS_VERSIONS,
    FORCE_TERMINATE_TIMEOUT_MS,
    AdminBase,
    ProducerState,
    TransactionDescription,
    TransactionListing,
    _ms,
)
from oncelog.client.aio.client import COORDINATOR_TRANSACTION
from oncelog.client.errors import (
    RetriableError,
    UnknownTopicOrPartitionError,
    UnsupportedVersionError,
    error_for,
)
from oncelog.client.types import TopicPartition
from oncelog.client.wire import nested, request
from oncelog.errors import ErrorCode
from oncelog.protocol import versions as api

logger = logging.getLogger(__name__)


def _describe_producers_request(by_topic: Mapping[str, list[int]], version: int) -> Any:
    return request(
        api.DESCRIBE_PRODUCERS,
        version,
        topics=tuple(
            nested(
                api.DESCRIBE_PRODUCERS, version, "TopicRequest", name=t, partition_indexes=tuple(ps)
            )
            for t, ps in by_topic.items()
        ),
    )



class TransactionsAdmin(AdminBase):
    """Transactions and producers; mixed into ``AIOAdmin``."""

    # ---------------------------------------------------------------- transactions

    async def list_transactions(
        self,
        *,
        states: Iterable[str] = (),
        producer_ids: Iterable[int] = (),
        duration_filter_ms: int = -1,
    ) -> list[TransactionListing]:
        await self.client.refresh_metadata()
        out: list[TransactionListing] = []
        for node in sorted(self.client.metadata.brokers):
            response = await self.client.call(
                node,
                api.LIST_TRANSACTIONS,
                lambda v: request(
                    api.LIST_TRANSACTIONS,
                    v,
                    state_filters=tuple(states),
                    producer_id_filters=tuple(producer_ids),
                    duration_filter=duration_filter_ms,
                ),
            )
            if response.error_code != ErrorCode.none:
                raise error_for(response.error_code, f"ListTransactions on broker {node}")
            out.extend(
                TransactionListing(
                    t.transactional_id, int(t.producer_id), t.transaction_state, node
                )
                for t in response.transaction_states
            )
        return out

    async def describe_transactions(
        self, transactional_ids: Iterable[str]
    ) -> dict[str, TransactionDescription]:
        out: dict[str, TransactionDescription] = {}
        for txn_id in transactional_ids:

            async def attempt(txn_id: str = txn_id) -> TransactionDescription:
                node = await self.client.find_coordinator(COORDINATOR_TRANSACTION, txn_id)
                try:
                    response = await self.client.call(
                        node,
                        api.DESCRIBE_TRANSACTIONS,
                        lambda v: request(
                            api.DESCRIBE_TRANSACTIONS, v, transactional_ids=(txn_id,)
                        ),
                    )
                except RetriableError:
                    self.client.invalidate_coordinator(COORDINATOR_TRANSACTION, txn_id)
                    raise
                state = response.transaction_states[0]
                code = ErrorCode(state.error_code)
                if code != ErrorCode.none:
                    if code in (ErrorCode.not_coordinator, ErrorCode.coordinator_not_available):
                        self.client.invalidate_coordinator(COORDINATOR_TRANSACTION, txn_id)
                    raise error_for(code, f"DescribeTransactions {txn_id}")
                return TransactionDescription(
                    transactional_id=state.transactional_id,
                    state=state.transaction_state,
                    producer_id=int(state.producer_id),
                    producer_epoch=int(state.producer_epoch),
                    timeout_ms=_ms(state.transaction_timeout),
                    start_time_ms=_ms(state.transaction_start_time)
                    if state.transaction_start_time is not None
                    else -1,
                    partitions=tuple(
                        TopicPartition(t.topic, int(p)) for t in state.topics for p in t.partitions
                    ),
                    coordinator_id=node,
                )

            out[txn_id] = await self.client.retrying(attempt, what=f"DescribeTransactions {txn_id}")
        return out

    async def describe_producers(
        self, partitions: Iterable[TopicPartition], *, broker_id: int | None = None
    ) -> dict[TopicPartition, list[ProducerState]]:
        """The producers each partition's leader (or, with ``broker_id``, that broker's
        replica) remembers (DescribeProducers)."""
        tps = [TopicPartition(*tp) for tp in partitions]
        by_leader: dict[int, list[TopicPartition]] = defaultdict(list)
        for tp in tps:
            await self.client.topic_info(tp.topic)
            node = (self.client.leader_for(tp.topic, tp.partition) if broker_id is None
                    else broker_id)
            by_leader[node].append(tp)
        out: dict[TopicPartition, list[ProducerState]] = {}
        for leader, items in by_leader.items():
            by_topic: dict[str, list[int]] = defaultdict(list)
            for tp in items:
                by_topic[tp.topic].append(tp.partition)
            response = await self.client.call(
                leader,
                api.DESCRIBE_PRODUCERS,
                functools.partial(_describe_producers_request, dict(by_topic)),
            )
            for topic in response.topics:
                for part in topic.partitions:
                    code = ErrorCode(part.error_code)
                    if code != ErrorCode.none:
                        raise error_for(
                            code, f"DescribeProducers {topic.name}-{part.partition_index}"
                        )
                    out[TopicPartition(topic.name, int(part.partition_index))] = [
                        ProducerState(
                            int(p.producer_id),
                            int(p.producer_epoch),
                            int(p.last_sequence),
                            int(p.last_timestamp),
                            int(p.coordinator_epoch),
                            int(p.current_txn_start_offset),
                        )
                        for p in part.active_producers
                    ]
        return out

    async def force_terminate_transaction(self, transactional_id: str) -> None:
        """Abort ``transactional_id``'s ongoing transaction, prepared or not (KIP-939):
        InitProducerId without KeepPreparedTxn, which also fences its current producer."""

        async def attempt() -> None:
            node = await self.client.find_coordinator(COORDINATOR_TRANSACTION, transactional_id)
            try:
                response = await self.client.call(
                    node,
                    api.INIT_PRODUCER_ID,
                    lambda v: request(
                        api.INIT_PRODUCER_ID,
                        v,
                        transactional_id=transactional_id,
                        # Any valid timeout will do: the terminated id keeps no transaction,
                        # and 1 ms is within every broker's transaction.max.timeout.ms.
                        transaction_timeout=FORCE_TERMINATE_TIMEOUT_MS,
                        producer_id=-1,
                        producer_epoch=-1,
                        enable2_pc=False,
                        keep_prepared_txn=False,
                    ),
                )
            except RetriableError:
                self.client.invalidate_coordinator(COORDINATOR_TRANSACTION, transactional_id)
                raise
            code = ErrorCode(response.error_code)
            if code in (ErrorCode.not_coordinator, ErrorCode.coordinator_not_available):
                self.client.invalidate_coordinator(COORDINATOR_TRANSACTION, transactional_id)
            if code != ErrorCode.none:
                raise error_for(code, f"force-terminate {transactional_id}")

        await self.client.retrying(attempt, what=f"force-terminate {transactional_id}")
        logger.info("force-terminated transaction %r", transactional_id)

    async def abort_transaction(
        self,
        topic_partition: TopicPartition,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
    ) -> None:
        """Java's Admin.abortTransaction: write an ABORT marker for ``producer_id``'s open
        transaction on one partition (a hanging transaction no coordinator will finish).
        Sent once to the partition's leader as WriteTxnMarkers; the partition's error (e.g.
        INVALID_PRODUCER_EPOCH, TRANSACTION_COORDINATOR_FENCED) is raised."""
        tp = TopicPartition(*topic_partition)
        meta = await self.client.refresh_metadata(all_topics=True)  # never creates topics
        info = meta.topics.get(tp.topic)
        if info is None or info.error != ErrorCode.none or tp.partition not in info.leaders:
            raise UnknownTopicOrPartitionError(f"{tp.topic}-{tp.partition} does not exist")
        leader = info.leaders[tp.partition]
        conn = await self.client.connection(leader)
        offered = conn.broker_versions.get(api.WRITE_TXN_MARKERS)
        low, high = _WRITE_TXN_MARKERS_VERSIONS
        if offered is None or offered[0] > high or offered[1] < low:
            raise UnsupportedVersionError(
                f"broker {leader} serves WriteTxnMarkers in versions {offered}, "
                f"abort_transaction needs {low}-{high}"
            )
        version = min(high, offered[1])
        body = request(
            api.WRITE_TXN_MARKERS,
            version,
            markers=(
                nested(
                    api.WRITE_TXN_MARKERS,
                    version,
                    "WritableTxnMarker",
                    producer_id=producer_id,
                    producer_epoch=producer_epoch,
                    transaction_result=False,
                    coordinator_epoch=coordinator_epoch,
                    topics=(
                        nested(
                            api.WRITE_TXN_MARKERS,
                            version,
                            "WritableTxnMarkerTopic",
                            name=tp.topic,
                            partition_indexes=(tp.partition,),
                        ),
                    ),
                ),
            ),
        )
        response = await conn.send(body)
        codes = [
            ErrorCode(p.error_code)
            for m in response.markers
            for t in m.topics
            for p in t.partitions
            if t.name == tp.topic and int(p.partition_index) == tp.partition
        ]
        if not codes:
            raise UnknownTopicOrPartitionError(f"no answer for {tp.topic}-{tp.partition}")
        if codes[0] != ErrorCode.none:
            raise error_for(
                codes[0],
                f"abort transaction of producer {producer_id} epoch {producer_epoch} "
                f"on {tp.topic}-{tp.partition}",
            )
        logger.info(
            "aborted the transaction of producer %d epoch %d on %s-%d",
            producer_id,
            producer_epoch,
            tp.topic,
            tp.partition,
        )

