"""PeerConnections (broker-to-broker connections of a cluster broker) against a real broker:
tasks asking for the same peer at once share one connection, and a request that failed on
an old connection does not close the newer one. Before, two markers sent to the same
remote leader together closed each other's half-open connection on every retry, so the
transactions stayed in PrepareCommit for ever (found by bench/cluster_faults.py
--mode transactions after a leader restarted)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import cast

from oncelog.broker.cluster.peers import PeerConnections
from oncelog.broker.cluster.view import EtcdClusterView
from oncelog.broker.cluster_view import BrokerEndpoint
from oncelog.harness.broker import BrokerProcess
from oncelog.protocol import versions
from oncelog.protocol.build import make, request_module

PEER = 7


@dataclass
class OnePeerView:
    host: str
    port: int
    node_id: int = 1

    def broker(self, node_id: int) -> BrokerEndpoint | None:
        return BrokerEndpoint(node_id, self.host, self.port) if node_id == PEER else None


def peers_of(broker: BrokerProcess) -> PeerConnections:
    return PeerConnections(cast(EtcdClusterView, OnePeerView(broker.host, broker.port)), 5000)


def test_concurrent_requests_to_one_peer_share_its_connection(shared_broker: BrokerProcess
                                                              ) -> None:
    async def scenario() -> None:
        peers = peers_of(shared_broker)
        mod = request_module(versions.API_VERSIONS, 3)
        try:
            conns = await asyncio.gather(*(peers.get(PEER) for _ in range(4)))
            assert all(c is conns[0] for c in conns) and conns[0].connected
            answers = await asyncio.gather(*(c.send(make(
                mod.ApiVersionsRequest, client_software_name="t",
                client_software_version="1")) for c in conns))
            assert [a.error_code for a in answers] == [0] * 4
        finally:
            await peers.close()

    asyncio.run(scenario())


def test_a_failed_request_drops_only_the_connection_it_used(shared_broker: BrokerProcess
                                                            ) -> None:
    async def scenario() -> None:
        peers = peers_of(shared_broker)
        try:
            old = await peers.get(PEER)
            await old.close("connection lost")  # the peer restarted under a request
            new = await peers.get(PEER)
            assert new is not old and new.connected
            await peers.drop(PEER, "the request on the old connection failed", old)
            assert new.connected
            assert await peers.get(PEER) is new
        finally:
            await peers.close()

    asyncio.run(scenario())
