"""Transaction verification against a coordinator on another broker (Kafka's
AddPartitionsToTxnManager): a partition leader that receives transactional data asks the
coordinator of the transactional id, the leader of its ``__transaction_state`` partition,
with an AddPartitionsToTxn v4+ request (``verify_only`` for Produce below v12, adding the
partition for Produce v12). One request per produce batch (Kafka batches them per
coordinator; not done here). A coordinator that cannot be reached answers
NETWORK_EXCEPTION for every partition: the produce path turns it into a retriable error."""

from __future__ import annotations

import logging
from typing import Any

from oncelog.broker.cluster.peers import PEER_REQUEST_FAILURES, PeerConnections, indexes_by_topic
from oncelog.client.aio.connection import BrokerConnection
from oncelog.errors import ErrorCode
from oncelog.protocol import versions
from oncelog.protocol.build import make, request_module

__all__ = ["RemoteTxnVerifier"]

log = logging.getLogger(__name__)

ADD_PARTITIONS_TO_TXN_VERSION = 4  # the first broker-to-broker (batched, verify_only) form

TopicPartition = tuple[str, int]


class RemoteTxnVerifier:
    """Sends AddPartitionsToTxn v4 to the coordinator broker (see the module docstring)."""

    def __init__(self, peers: PeerConnections) -> None:
        self.peers = peers
        self.requests = 0  # AddPartitionsToTxn requests sent (statistics, tests)

    async def add_or_verify(
        self,
        coordinator: int,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: list[TopicPartition],
        *,
        verify_only: bool,
    ) -> dict[TopicPartition, ErrorCode]:
        conn: BrokerConnection | None = None
        try:
            conn = await self.peers.get(coordinator)
            self.requests += 1
            response = await conn.send(
                _request(transactional_id, producer_id, producer_epoch, partitions, verify_only),
                timeout_ms=self.peers.request_timeout_ms,
            )
        except PEER_REQUEST_FAILURES as exc:
            if conn is not None:
                await self.peers.drop(coordinator, str(exc), conn)
            log.info("transaction verification of %r (producer %d) at coordinator %d failed: "
                     "%s", transactional_id, producer_id, coordinator, exc)
            return dict.fromkeys(partitions, ErrorCode.network_exception)
        if response.error_code != ErrorCode.none:
            code = ErrorCode(response.error_code)
            log.info("transaction verification of %r at coordinator %d answered %s",
                     transactional_id, coordinator, code.name)
            return dict.fromkeys(partitions, code)
        answers = {
            (str(t.name), int(p.partition_index)): ErrorCode(p.partition_error_code)
            for r in response.results_by_transaction
            if r.transactional_id == transactional_id
            for t in r.topic_results
            for p in t.results_by_partition
        }
        return {tp: answers.get(tp, ErrorCode.unknown_server_error) for tp in partitions}

    async def close(self) -> None:
        await self.peers.close()


def _request(
    transactional_id: str,
    producer_id: int,
    producer_epoch: int,
    partitions: list[TopicPartition],
    verify_only: bool,
) -> Any:
    mod = request_module(versions.ADD_PARTITIONS_TO_TXN, ADD_PARTITIONS_TO_TXN_VERSION)
    return make(
        mod.AddPartitionsToTxnRequest,
        transactions=(
            make(
                mod.AddPartitionsToTxnTransaction,
                transactional_id=transactional_id,
                producer_id=producer_id,
                producer_epoch=producer_epoch,
                verify_only=verify_only,
                topics=tuple(
                    make(mod.AddPartitionsToTxnTopic, name=topic, partitions=indexes)
                    for topic, indexes in indexes_by_topic(partitions)
                ),
            ),
        ),
    )
