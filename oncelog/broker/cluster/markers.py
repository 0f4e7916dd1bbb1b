"""Transaction markers in a cluster: WriteTxnMarkers to each partition's leader.

The marker channel's writer for a cluster broker (Kafka's TransactionMarkerChannelManager
sending side). One round of ``write_markers`` groups the transaction's partitions by their
leader in the metadata image: the partitions this broker leads are written by the
``LocalMarkerWriter`` (a direct call), and every other leader gets ONE WriteTxnMarkers
request carrying the coordinator epoch (the leader epoch of the ``__transaction_state``
partition). A partition without a leader, or whose leader cannot be reached, is answered
NOT_LEADER_OR_FOLLOWER: the channel retries it after its backoff, against the leader the
image shows then. A leader that answers TRANSACTION_COORDINATOR_FENCED has seen a newer
coordinator for that producer: the channel stops (this coordinator is a zombie).

Brokers tell the receiving side who they are with the client id ``oncelog-broker-<id>``
(``oncelog.broker.markers.broker_client_id``): its WriteTxnMarkers handler accepts COMMIT
markers only from a live broker of the image (a client may only abort a hanging transaction).
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from typing import Any

from oncelog.broker.cluster.peers import PEER_REQUEST_FAILURES, PeerConnections, indexes_by_topic
from oncelog.broker.cluster.view import EtcdClusterView
from oncelog.broker.markers import LocalMarkerWriter
from oncelog.client.aio.connection import BrokerConnection
from oncelog.cluster.metadata import NO_LEADER
from oncelog.errors import ErrorCode
from oncelog.protocol import versions
from oncelog.protocol.build import make, request_module

__all__ = ["ClusterMarkerWriter"]

log = logging.getLogger(__name__)

WRITE_TXN_MARKERS_VERSION = 1
MARKER_REQUEST_TIMEOUT_MS = 30_000

TopicPartition = tuple[str, int]


class ClusterMarkerWriter:
    """A MarkerWriter for a cluster broker (see the module docstring)."""

    def __init__(self, view: EtcdClusterView, local: LocalMarkerWriter,
                 request_timeout_ms: int = MARKER_REQUEST_TIMEOUT_MS,
                 peers: PeerConnections | None = None) -> None:
        self.view = view
        self.local = local
        self.request_timeout_ms = request_timeout_ms
        self.peers = peers or PeerConnections(view, request_timeout_ms)
        self.requests = 0  # WriteTxnMarkers requests sent (statistics, tests)

    async def write_markers(
        self,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        commit: bool,
        partitions: list[TopicPartition],
    ) -> dict[TopicPartition, ErrorCode]:
        answers: dict[TopicPartition, ErrorCode] = {}
        by_leader: dict[int, list[TopicPartition]] = defaultdict(list)
        for tp in partitions:
            leadership = self.view.partition(*tp)
            if leadership is None:
                answers[tp] = ErrorCode.unknown_topic_or_partition  # the topic is gone
            elif leadership.leader == NO_LEADER:
                answers[tp] = ErrorCode.not_leader_or_follower
            else:
                by_leader[leadership.leader].append(tp)
        local = by_leader.pop(self.view.node_id, [])
        remote = [
            self._send(leader, tps, producer_id, producer_epoch, coordinator_epoch, commit)
            for leader, tps in sorted(by_leader.items())
        ]
        for result in await asyncio.gather(*remote):
            answers.update(result)
        if local:
            answers.update(await self.local.write_markers(
                producer_id, producer_epoch, coordinator_epoch, commit, local))
        return answers

    async def _send(
        self,
        leader: int,
        partitions: list[TopicPartition],
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        commit: bool,
    ) -> dict[TopicPartition, ErrorCode]:
        what = "COMMIT" if commit else "ABORT"
        conn: BrokerConnection | None = None
        try:
            conn = await self.peers.get(leader)
            self.requests += 1
            response = await conn.send(
                _request(producer_id, producer_epoch, coordinator_epoch, commit, partitions),
                timeout_ms=self.request_timeout_ms,
            )
        except PEER_REQUEST_FAILURES as exc:
            if conn is not None:
                await self.peers.drop(leader, str(exc), conn)
            log.info("%s markers for producer %d to broker %d (%d partitions) failed: %s; "
                     "retried after the metadata moves", what, producer_id, leader,
                     len(partitions), exc)
            return dict.fromkeys(partitions, ErrorCode.not_leader_or_follower)
        answers = {
            (str(t.name), int(p.partition_index)): ErrorCode(p.error_code)
            for m in response.markers
            for t in m.topics
            for p in t.partitions
        }
        refused = {tp: code for tp, code in answers.items() if code is not ErrorCode.none}
        log.debug("%s markers for producer %d epoch %d to broker %d at coordinator epoch %d: "
                  "%d partitions, refused %s", what, producer_id, producer_epoch, leader,
                  coordinator_epoch, len(partitions), refused or "none")
        return {tp: answers.get(tp, ErrorCode.unknown_server_error) for tp in partitions}

    async def close(self) -> None:
        await self.peers.close()


def _request(
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
    commit: bool,
    partitions: list[TopicPartition],
) -> Any:
    mod = request_module(versions.WRITE_TXN_MARKERS, WRITE_TXN_MARKERS_VERSION)
    return make(
        mod.WriteTxnMarkersRequest,
        markers=(
            make(
                mod.WritableTxnMarker,
                producer_id=producer_id,
                producer_epoch=producer_epoch,
                transaction_result=commit,
                coordinator_epoch=coordinator_epoch,
                topics=tuple(
                    make(mod.WritableTxnMarkerTopic, name=topic, partition_indexes=indexes)
                    for topic, indexes in indexes_by_topic(partitions)
                ),
            ),
        ),
    )
