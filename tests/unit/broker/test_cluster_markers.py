"""ClusterMarkerWriter: one WriteTxnMarkers per remote leader per round, carrying the
coordinator epoch; partitions led here go to the local writer; leaderless or unreachable
partitions answer NOT_LEADER_OR_FOLLOWER (the channel retries them)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, cast

from oncelog.broker.cluster.markers import ClusterMarkerWriter
from oncelog.broker.cluster.view import EtcdClusterView
from oncelog.broker.cluster_view import BrokerEndpoint, PartitionLeadership
from oncelog.broker.markers import LocalMarkerWriter, broker_client_id, sender_broker
from oncelog.client.aio.connection import BrokerConnection
from oncelog.client.errors import BrokerConnectionError
from oncelog.cluster.metadata import NO_LEADER
from oncelog.errors import ErrorCode
from oncelog.protocol import versions
from oncelog.protocol.build import make, response_module

TP = tuple[str, int]


@dataclass
class FakeView:
    node_id: int
    leaders: dict[TP, int]
    brokers: set[int]

    def partition(self, topic: str, index: int) -> PartitionLeadership | None:
        leader = self.leaders.get((topic, index))
        return None if leader is None else PartitionLeadership(leader, 3, (1, 2, 3), (1, 2, 3))

    def broker(self, node_id: int) -> BrokerEndpoint | None:
        return BrokerEndpoint(node_id, "127.0.0.1", 9000 + node_id) if (
            node_id in self.brokers) else None


@dataclass
class FakeLocal:
    calls: list[tuple[int, list[TP]]] = field(default_factory=list)

    async def write_markers(self, producer_id: int, producer_epoch: int, coordinator_epoch: int,
                            commit: bool, partitions: list[TP]) -> dict[TP, ErrorCode]:
        self.calls.append((coordinator_epoch, partitions))
        return dict.fromkeys(partitions, ErrorCode.none)


@dataclass
class FakeConnection:
    node_id: int
    answer: ErrorCode = ErrorCode.none
    fail: bool = False
    sent: list[Any] = field(default_factory=list)

    async def send(self, body: Any, **_: Any) -> Any:
        if self.fail:
            raise BrokerConnectionError("connection refused")
        self.sent.append(body)
        mod = response_module(versions.WRITE_TXN_MARKERS, 1)
        return make(mod.WriteTxnMarkersResponse, markers=tuple(
            make(mod.WritableTxnMarkerResult, producer_id=m.producer_id, topics=tuple(
                make(mod.WritableTxnMarkerTopicResult, name=t.name, partitions=tuple(
                    make(mod.WritableTxnMarkerPartitionResult, partition_index=i,
                         error_code=self.answer)
                    for i in t.partition_indexes))
                for t in m.topics))
            for m in body.markers))


def writer_with(view: FakeView, conns: dict[int, FakeConnection]
                ) -> tuple[ClusterMarkerWriter, FakeLocal]:
    local = FakeLocal()
    writer = ClusterMarkerWriter(cast(EtcdClusterView, view), cast(LocalMarkerWriter, local))

    async def connection(node_id: int) -> BrokerConnection:
        return cast(BrokerConnection, conns[node_id])

    writer.peers.get = connection  # type: ignore[method-assign]
    return writer, local


def test_one_request_per_remote_leader_with_the_coordinator_epoch() -> None:
    view = FakeView(1, {("a", 0): 1, ("a", 1): 2, ("b", 0): 2, ("b", 1): 3, ("c", 0): NO_LEADER},
                    {1, 2, 3})
    conns = {2: FakeConnection(2), 3: FakeConnection(3, answer=ErrorCode.not_leader_or_follower)}
    writer, local = writer_with(view, conns)
    answers = asyncio.run(writer.write_markers(
        42, 5, 7, True, [("a", 0), ("a", 1), ("b", 0), ("b", 1), ("c", 0), ("gone", 0)]))
    assert answers == {
        ("a", 0): ErrorCode.none, ("a", 1): ErrorCode.none, ("b", 0): ErrorCode.none,
        ("b", 1): ErrorCode.not_leader_or_follower, ("c", 0): ErrorCode.not_leader_or_follower,
        ("gone", 0): ErrorCode.unknown_topic_or_partition,
    }
    assert local.calls == [(7, [("a", 0)])]
    assert len(conns[2].sent) == 1 and len(conns[3].sent) == 1 and writer.requests == 2
    (marker,) = conns[2].sent[0].markers
    assert (marker.producer_id, marker.producer_epoch, marker.coordinator_epoch,
            marker.transaction_result) == (42, 5, 7, True)
    assert {(t.name, tuple(t.partition_indexes)) for t in marker.topics} == {
        ("a", (1,)), ("b", (0,))}


def test_an_unreachable_leader_is_retried() -> None:
    view = FakeView(1, {("a", 0): 2}, {1, 2})
    writer, _ = writer_with(view, {2: FakeConnection(2, fail=True)})
    answers = asyncio.run(writer.write_markers(42, 5, 7, False, [("a", 0)]))
    assert answers == {("a", 0): ErrorCode.not_leader_or_follower}


def test_broker_client_ids_name_their_broker() -> None:
    assert sender_broker(broker_client_id(3)) == 3
    assert sender_broker("rdkafka") is None and sender_broker("oncelog-broker-x") is None
    assert sender_broker(None) is None
