"""The cluster as a client sees it: connections per broker, metadata, coordinators, retries.

``KafkaClient`` owns one ``BrokerConnection`` per broker (plus the bootstrap connection it
starts from), a metadata cache refreshed on demand or after ``metadata.max.age.ms``, and a
cache of group/transaction coordinators from FindCoordinator. ``call`` sends one request to
one node with the version negotiated on that connection; ``retrying`` wraps an operation so
retriable errors are retried with exponential backoff (``retry.backoff.ms`` up to
``retry.backoff.max.ms``, with jitter) until a deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from oncelog.client.aio.connection import BrokerConnection
from oncelog.client.config import ClientConfig
from oncelog.client.errors import (
    AuthenticationError,
    BrokerConnectionError,
    CoordinatorNotAvailableError,
    KafkaClientError,
    KafkaTimeoutError,
    RetriableError,
    UnknownTopicOrPartitionError,
    error_for,
)
from oncelog.client.sasl import sasl_credentials
from oncelog.client.wire import nested, request
from oncelog.errors import ErrorCode
from oncelog.protocol import versions as api

logger = logging.getLogger(__name__)

__all__ = ["COORDINATOR_GROUP", "COORDINATOR_TRANSACTION", "ClusterMetadata", "KafkaClient"]

T = TypeVar("T")

COORDINATOR_GROUP = 0
COORDINATOR_TRANSACTION = 1
BOOTSTRAP_NODE = -1


@dataclass
class TopicInfo:
    name: str
    error: ErrorCode
    leaders: dict[int, int] = field(default_factory=dict)  # partition -> leader node (-1: none)
    internal: bool = False
    replicas: dict[int, tuple[int, ...]] = field(default_factory=dict)  # partition -> replicas
    isr: dict[int, tuple[int, ...]] = field(default_factory=dict)  # partition -> in-sync ones

    @property
    def num_partitions(self) -> int:
        return len(self.leaders)


@dataclass
class ClusterMetadata:
    brokers: dict[int, tuple[str, int]] = field(default_factory=dict)
    topics: dict[str, TopicInfo] = field(default_factory=dict)
    controller_id: int = -1
    cluster_id: str | None = None
    updated_ms: float = 0.0


def _now() -> float:
    return time.monotonic()


class KafkaClient:
    def __init__(self, config: ClientConfig) -> None:
        self.config = config
        self._sasl = sasl_credentials(config)
        self.client_id: str = config["client.id"]
        self.request_timeout_ms: int = config["request.timeout.ms"]
        self.metadata = ClusterMetadata()
        self._conns: dict[int, BrokerConnection] = {}
        self._conn_locks: dict[int, asyncio.Lock] = {}
        self._metadata_lock = asyncio.Lock()
        self._coordinators: dict[tuple[int, str], int] = {}
        self._closed = False
        self._wanted_topics: set[str] = set()
        self._tls = config.tls_context()  # security.protocol=SSL; None: PLAINTEXT

    # ---------------------------------------------------------------- connections

    def _new_connection(self, host: str, port: int, node_id: int) -> BrokerConnection:
        return BrokerConnection(
            host,
            port,
            node_id=node_id,
            client_id=self.client_id,
            request_timeout_ms=self.request_timeout_ms,
            connect_timeout_ms=self.config["socket.connection.setup.timeout.ms"],
            tls=self._tls,
            sasl=self._sasl,
        )

    def open_connection(self, node_id: int) -> BrokerConnection | None:
        """The connection to ``node_id`` if it is open (None: use ``connection``)."""
        conn = self._conns.get(node_id)
        return conn if conn is not None and conn.connected and not self._closed else None

    async def connection(self, node_id: int) -> BrokerConnection:
        """An open connection to ``node_id`` (BOOTSTRAP_NODE: any reachable broker)."""
        if self._closed:
            raise BrokerConnectionError("client is closed")
        conn = self._conns.get(node_id)
        if conn is not None and conn.connected:
            return conn
        lock = self._conn_locks.setdefault(node_id, asyncio.Lock())
        async with lock:
            conn = self._conns.get(node_id)
            if conn is not None and conn.connected:
                return conn
            if node_id == BOOTSTRAP_NODE:
                conn = await self._connect_any()
            else:
                address = self.metadata.brokers.get(node_id)
                if address is None:
                    await self.refresh_metadata()
                    address = self.metadata.brokers.get(node_id)
                if address is None:
                    raise BrokerConnectionError(f"broker {node_id} is not in the metadata")
                conn = self._new_connection(address[0], address[1], node_id)
                await conn.connect()
            self._conns[node_id] = conn
            return conn

    async def _connect_any(self) -> BrokerConnection:
        candidates = [(h, p) for h, p in self.metadata.brokers.values()] + self.config.bootstrap
        errors: list[str] = []
        for host, port in candidates:
            conn = self._new_connection(host, port, BOOTSTRAP_NODE)
            try:
                await conn.connect()
                return conn
            except AuthenticationError:
                raise  # refused credentials: another broker would refuse them too
            except KafkaClientError as exc:
                errors.append(str(exc))
        raise BrokerConnectionError("no broker reachable: " + "; ".join(errors))

    async def any_connection(self) -> BrokerConnection:
        for node_id, conn in self._conns.items():
            if conn.connected and node_id != BOOTSTRAP_NODE:
                return conn
        if self.metadata.brokers:
            node_id = random.choice(list(self.metadata.brokers))
            with contextlib.suppress(KafkaClientError):
                return await self.connection(node_id)
        return await self.connection(BOOTSTRAP_NODE)

    async def call(
        self,
        node_id: int | None,
        api_key: int,
        build: Callable[[int], Any],
        *,
        timeout_ms: int | None = None,
    ) -> Any:
        """Build the request for the negotiated version and send it to ``node_id``
        (None: any broker). Connection failures come out as BrokerConnectionError."""
        conn = await (self.any_connection() if node_id is None else self.connection(node_id))
        body = build(conn.version(api_key))
        return await conn.send(body, timeout_ms=timeout_ms)

    async def close(self) -> None:
        self._closed = True
        conns, self._conns = list(self._conns.values()), {}
        for conn in conns:
            await conn.close("client closed")

    # ---------------------------------------------------------------- retries

    def backoff_s(self, attempt: int) -> float:
        base = self.config["retry.backoff.ms"]
        cap = self.config["retry.backoff.max.ms"]
        delay = min(cap, base * (2 ** max(0, attempt)))
        return float(delay * random.uniform(0.8, 1.2)) / 1000

    async def retrying(
        self,
        op: Callable[[], Awaitable[T]],
        *,
        timeout_ms: int | None = None,
        what: str = "request",
        on_retry: Callable[[KafkaClientError], Awaitable[None]] | None = None,
    ) -> T:
        """Run ``op`` until it does not raise a RetriableError or the time is up."""
        budget = timeout_ms if timeout_ms is not None else self.config["default.api.timeout.ms"]
        deadline = _now() + budget / 1000
        attempt = 0
        while True:
            try:
                return await op()
            except RetriableError as exc:
                if _now() >= deadline:
                    raise KafkaTimeoutError(
                        f"{what} did not succeed within {budget} ms; last error: {exc}"
                    ) from exc
                logger.debug("%s: retriable error %s (attempt %d)", what, exc, attempt + 1)
                if on_retry is not None:
                    await on_retry(exc)
                await asyncio.sleep(min(self.backoff_s(attempt), max(0.0, deadline - _now())))
                attempt += 1

    # ---------------------------------------------------------------- metadata

    def want_topics(self, topics: Iterable[str]) -> None:
        self._wanted_topics.update(topics)

    async def refresh_metadata(
        self, topics: Iterable[str] | None = None, *, all_topics: bool = False
    ) -> ClusterMetadata:
        """Fetch metadata for ``topics`` (plus those already wanted), or all topics."""
        names = None if all_topics else sorted(set(topics or ()) | self._wanted_topics)
        auto_create = bool(self.config["allow.auto.create.topics"])

        def build(version: int) -> Any:
            if names is None:
                listed = None
            else:
                listed = tuple(
                    nested(api.METADATA, version, "MetadataRequestTopic", name=n, topic_id=None)
                    for n in names
                )
            return request(
                api.METADATA,
                version,
                topics=listed,
                allow_auto_topic_creation=auto_create,
                include_cluster_authorized_operations=False,
                include_topic_authorized_operations=False,
            )

        async with self._metadata_lock:
            response = await self.call(None, api.METADATA, build)
            meta = self.metadata
            meta.brokers = {int(b.node_id): (b.host, int(b.port)) for b in response.brokers}
            meta.controller_id = int(getattr(response, "controller_id", -1))
            meta.cluster_id = getattr(response, "cluster_id", None)
            if names is None:
                meta.topics = {}  # a full listing: topics that are gone disappear
            for topic in response.topics:
                if topic.name is None:
                    continue
                info = TopicInfo(
                    topic.name, ErrorCode(topic.error_code), internal=bool(topic.is_internal)
                )
                for part in topic.partitions:
                    index = int(part.partition_index)
                    info.leaders[index] = int(part.leader_id)
                    info.replicas[index] = tuple(int(r) for r in part.replica_nodes)
                    info.isr[index] = tuple(int(r) for r in part.isr_nodes)
                meta.topics[topic.name] = info
            meta.updated_ms = _now() * 1000
            # Connections to brokers that left the cluster are closed.
            for node_id in [n for n in self._conns if n >= 0 and n not in meta.brokers]:
                await self._conns.pop(node_id).close("broker left the cluster")
            return meta

    def metadata_stale(self) -> bool:
        return _now() * 1000 - self.metadata.updated_ms > self.config["metadata.max.age.ms"]

    def cached_topic_info(self, topic: str) -> TopicInfo | None:
        """The topic's metadata if known, usable and fresh (no I/O)."""
        info = self.metadata.topics.get(topic)
        if (
            info is None
            or info.error != ErrorCode.none
            or not info.leaders
            or self.metadata_stale()
        ):
            return None
        return info

    async def topic_info(self, topic: str, *, timeout_ms: int | None = None) -> TopicInfo:
        """Partitions and leaders of ``topic``, waiting (with retries) until it exists."""
        self.want_topics([topic])
        info = self.metadata.topics.get(topic)
        if (
            info is not None
            and info.error == ErrorCode.none
            and info.leaders
            and not self.metadata_stale()
        ):
            return info

        async def attempt() -> TopicInfo:
            await self.refresh_metadata([topic])
            found = self.metadata.topics.get(topic)
            if found is None:
                raise UnknownTopicOrPartitionError(f"topic {topic} not in metadata")
            if found.error != ErrorCode.none:
                raise error_for(found.error, f"metadata for topic {topic}")
            if not found.leaders:
                raise UnknownTopicOrPartitionError(f"topic {topic} has no partitions yet")
            return found

        budget = timeout_ms if timeout_ms is not None else self.config["max.block.ms"]
        return await self.retrying(attempt, timeout_ms=budget, what=f"metadata for {topic}")

    def leader_for(self, topic: str, partition: int) -> int:
        info = self.metadata.topics.get(topic)
        if info is None:
            return -1
        return info.leaders.get(partition, -1)

    # ---------------------------------------------------------------- coordinators

    async def find_coordinator(
        self, key_type: int, key: str, *, timeout_ms: int | None = None
    ) -> int:
        """Node id of the group (key_type 0) or transaction (1) coordinator for ``key``."""
        cached = self._coordinators.get((key_type, key))
        if cached is not None:
            return cached

        async def attempt() -> int:
            response = await self.call(
                None,
                api.FIND_COORDINATOR,
                lambda v: request(
                    api.FIND_COORDINATOR, v, key=key, key_type=key_type, coordinator_keys=(key,)
                ),
            )
            if hasattr(response, "coordinators"):
                entries = [c for c in response.coordinators if c.key == key] or list(
                    response.coordinators
                )
                if not entries:
                    raise CoordinatorNotAvailableError(f"no coordinator in response for {key}")
                entry = entries[0]
            else:
                entry = response
            if entry.error_code != ErrorCode.none:
                detail = getattr(entry, "error_message", "") or ""
                raise error_for(entry.error_code, f"FindCoordinator({key_type}, {key}): {detail}")
            node_id = int(entry.node_id)
            self.metadata.brokers.setdefault(node_id, (entry.host, int(entry.port)))
            return node_id

        node_id = await self.retrying(attempt, timeout_ms=timeout_ms, what=f"FindCoordinator {key}")
        self._coordinators[(key_type, key)] = node_id
        logger.debug(
            "coordinator for %s %r is node %d", "group" if key_type == 0 else "txn", key, node_id
        )
        return node_id

    def invalidate_coordinator(self, key_type: int, key: str) -> None:
        self._coordinators.pop((key_type, key), None)
