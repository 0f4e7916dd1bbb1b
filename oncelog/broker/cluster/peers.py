"""Connections from this broker to the other brokers of the cluster (broker-to-broker
requests: WriteTxnMarkers, AddPartitionsToTxn verification), one per peer, reopened when
the peer's registered endpoint changes or the connection dropped. Brokers tell the
receiving side who they are with the client id ``oncelog-broker-<id>``.

Several tasks ask for the same peer at once (the markers of every transaction completing
together, verifications): opening a connection is serialised per peer so they share one,
and a caller whose request failed drops only the connection it used, never a newer one
another caller opened meanwhile (else concurrent callers close each other's connections
forever)."""

from __future__ import annotations

import asyncio
import ssl
from collections import defaultdict
from collections.abc import Iterable
from typing import TYPE_CHECKING

from oncelog.broker.markers import broker_client_id
from oncelog.client.errors import CONNECTION_FAILURES

# A single node imports this module (request handlers name PEER_REQUEST_FAILURES) but never
# connects to a peer: the connection and the cluster view are imported where they are used.
if TYPE_CHECKING:
    from oncelog.broker.cluster.view import EtcdClusterView
    from oncelog.client.aio.connection import BrokerConnection
    from oncelog.client.sasl import SaslCredentials

__all__ = ["PeerConnections", "indexes_by_topic"]


# What a request to another broker can fail with short of an answer: the connection's
# failures, or LookupError for a broker the metadata no longer has (retried after it moves).
PEER_REQUEST_FAILURES: tuple[type[Exception], ...] = (*CONNECTION_FAILURES, LookupError)


class PeerConnections:
    """One BrokerConnection per live peer of the image."""

    def __init__(self, view: EtcdClusterView, request_timeout_ms: int,
                 tls: ssl.SSLContext | None = None,
                 sasl: SaslCredentials | None = None) -> None:
        self.view = view
        self.tls = tls  # the inter-broker listener's TLS (None: PLAINTEXT)
        self.sasl = sasl  # this broker's SASL login on it (None: no SASL)
        self.request_timeout_ms = request_timeout_ms
        self._connections: dict[int, BrokerConnection] = {}
        self._opening: dict[int, asyncio.Lock] = defaultdict(asyncio.Lock)

    async def get(self, node_id: int) -> BrokerConnection:
        """The connection to ``node_id``; LookupError if it is not a live broker."""
        async with self._opening[node_id]:
            return await self._get(node_id)

    async def _get(self, node_id: int) -> BrokerConnection:
        endpoint = self.view.broker(node_id)
        if endpoint is None:
            raise LookupError(f"broker {node_id} is not registered")
        conn = self._connections.get(node_id)
        if conn is not None and conn.connected and (conn.host, conn.port) == (
            endpoint.host, endpoint.port
        ):
            return conn
        if conn is not None:
            await conn.close("reconnecting")
        from oncelog.client.aio.connection import BrokerConnection

        conn = BrokerConnection(endpoint.host, endpoint.port, node_id=node_id,
                                client_id=broker_client_id(self.view.node_id),
                                request_timeout_ms=self.request_timeout_ms, tls=self.tls,
                                sasl=self.sasl)
        self._connections[node_id] = conn
        try:
            await conn.connect()
        except BaseException:
            del self._connections[node_id]
            await conn.close("connecting failed")
            raise
        return conn

    async def drop(self, node_id: int, reason: str, conn: BrokerConnection) -> None:
        """Close ``conn``, the connection to ``node_id`` a failed request used, unless
        another caller has replaced it already."""
        current = self._connections.get(node_id)
        if current is not conn:
            return
        del self._connections[node_id]
        await current.close(reason)

    async def close(self) -> None:
        for node_id, conn in list(self._connections.items()):
            await self.drop(node_id, "broker stopping", conn)


def indexes_by_topic(partitions: Iterable[tuple[str, int]]) -> list[tuple[str, tuple[int, ...]]]:
    """(topic, partition indexes) for a request's topic list, topics sorted."""
    by_topic: dict[str, list[int]] = defaultdict(list)
    for topic, index in partitions:
        by_topic[topic].append(index)
    return [(topic, tuple(indexes)) for topic, indexes in sorted(by_topic.items())]
