"""``EtcdMetadataStore``: the cluster metadata in etcd (v3 API, through the asyncio client
``aetcd``), implementing ``oncelog.cluster.metadata.MetadataStore``.

Why etcd, and the key layout: docs/architecture.md ("Cluster") and
``oncelog.cluster.metadata_codec``. How each operation maps onto etcd:

- A broker registration is a key attached to a lease of ``broker.session.timeout.ms``
  (rounded up to whole seconds, etcd's unit), created with a Txn that requires the key to be
  absent (create revision 0): a live broker with the same id -- or a killed one whose lease
  has not expired yet -- makes ``BrokerIdInUse``, whose message says when that lease
  expires unless renewed (etcd's LeaseTimeToLive). A
  keep-alive task refreshes the lease every ``broker.heartbeat.interval.ms``. The session
  is lost -- ``session_lost`` is set, the lease forgotten and the task stops -- when etcd
  says the lease is gone (a refresh, or a put on the lease: "lease not found"), or as soon
  as no refresh has been acknowledged for the lease's TTL, counted from the moment the last
  acknowledged refresh was *sent* (before etcd received it): etcd cannot have expired the
  lease earlier, so a broker cut from etcd knows it before the controller can move its
  leaderships away (Kafka's broker fencing, seen from the broker). Operations that need the
  lease then raise ``SessionLost`` until the broker registers again (``register_broker``
  once more: the lost lease is revoked first, in case etcd still holds it, then a new
  lease, a new epoch), as a ZooKeeper-era Kafka broker re-created its ephemeral
  registration on a new session. The broker epoch is the key's create revision.
- The controller is the ``controller`` key on the winner's lease (so it disappears with the
  winner's session, as Kafka's ephemeral ``/controller`` znode did); the epoch comes from
  ``controller_epoch``, incremented in the same Txn, which also requires that counter to be
  unchanged since it was read.
- Partition states change with a Txn comparing the key's mod revision with the expected
  version (the new version is the mod revision of the write). Topic creation writes the
  topic and every partition state in one Txn.
- Producer ids come in blocks: ``producer_id_block`` holds the next free id and is moved on
  by compare-and-swap on its mod revision, retried until this store wins.
- ``load()`` is one range read (one revision); ``watch(r)`` is an etcd watch on the prefix
  from revision r + 1, so a broker that loads and then watches misses nothing and sees
  every change once, in revision order.

Every etcd failure (unreachable, timeout, compacted revision, a value that does not decode)
is raised as ``MetadataStoreError`` with a message naming the endpoint and the operation.
The endpoints of ``metadata.etcd.endpoints`` are tried in order when connecting; the first
that answers is used for the life of the store (gRPC reconnects to it by itself).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import Any

import aetcd
import aetcd.exceptions
import grpc

from oncelog.cluster.metadata import (
    BrokerIdInUse,
    BrokerRegistration,
    MetadataEvent,
    MetadataImage,
    MetadataStoreError,
    PartitionState,
    SessionLost,
    TopicAssignment,
)
from oncelog.cluster.metadata_codec import (
    MetadataKeys,
    decode_broker,
    decode_event,
    decode_json,
    encode_broker,
    encode_controller,
    encode_json,
    encode_partition,
    encode_topic,
    new_cluster_id,
)

__all__ = ["EtcdMetadataStore", "parse_endpoints"]

logger = logging.getLogger(__name__)

_ETCD_ERRORS = (aetcd.exceptions.ClientError, grpc.RpcError, OSError, asyncio.TimeoutError)


def parse_endpoints(text: str) -> list[tuple[str, int]]:
    """``HOST:PORT[,HOST:PORT...]`` as (host, port) pairs; ValueError when malformed."""
    endpoints: list[tuple[str, int]] = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        host, colon, port = item.rpartition(":")
        if not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"bad etcd endpoint {item!r}: expected HOST:PORT")
        endpoints.append((host.strip("[]"), int(port)))
    return endpoints


class EtcdMetadataStore:
    """The cluster metadata in etcd, for one broker (one connection, at most one lease)."""

    def __init__(
        self,
        endpoints: Sequence[tuple[str, int]],
        *,
        prefix: str = "/oncelog",
        session_timeout_ms: int = 9000,
        heartbeat_interval_ms: int = 2000,
    ) -> None:
        if not endpoints:
            raise ValueError("no etcd endpoint given")
        self.endpoints = list(endpoints)
        self.keys = MetadataKeys(prefix)
        self.session_timeout_ms = session_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.endpoint = "{}:{}".format(*self.endpoints[0])  # the one in use, once connected
        self.session_lost = asyncio.Event()  # set when this broker's lease is (maybe) gone
        self._client: Any = None
        self._connect_lock = asyncio.Lock()
        self._lease_id: int | None = None
        self._lost_lease: int | None = None  # revoked when registering again
        self._lease_deadline = 0.0  # loop time after which etcd may have expired the lease
        self._registration_key: bytes | None = None
        self._keepalive: asyncio.Task[None] | None = None
        self._closed = False

    @classmethod
    def from_config(cls, config: Any) -> EtcdMetadataStore:
        """The store a broker configured with ``metadata.etcd.endpoints`` uses."""
        endpoints = parse_endpoints(config["metadata.etcd.endpoints"] or "")
        return cls(
            endpoints,
            prefix=config["metadata.etcd.prefix"],
            session_timeout_ms=config["broker.session.timeout.ms"],
            heartbeat_interval_ms=config["broker.heartbeat.interval.ms"],
        )

    @property
    def lease_ttl_s(self) -> int:
        """The lease TTL: ``broker.session.timeout.ms`` in whole seconds, rounded up."""
        return max(1, math.ceil(self.session_timeout_ms / 1000))

    def __repr__(self) -> str:
        return f"<EtcdMetadataStore {self.endpoint}{self.keys.prefix}>"

    # -- connection and errors ----------------------------------------------------------------
    @contextlib.contextmanager
    def _errors(self, operation: str) -> Iterator[None]:
        try:
            yield
        except MetadataStoreError:
            raise
        except _ETCD_ERRORS as exc:
            detail = str(exc) or type(exc).__name__
            raise MetadataStoreError(
                f"etcd at {self.endpoint}: {operation} failed: {detail}"
            ) from exc
        except ValueError as exc:  # a stored value that does not decode
            raise MetadataStoreError(
                f"etcd at {self.endpoint}{self.keys.prefix}: {operation}: {exc}"
            ) from exc

    async def _connected(self) -> Any:
        if self._closed:
            raise MetadataStoreError(f"etcd at {self.endpoint}: the store is closed")
        async with self._connect_lock:
            if self._client is not None:
                return self._client
            timeout = max(1, math.ceil(self.session_timeout_ms / 1000))
            failures: list[str] = []
            for host, port in self.endpoints:
                client = aetcd.Client(host=host, port=port, timeout=timeout)
                try:
                    await client.status()
                except _ETCD_ERRORS as exc:
                    failures.append(f"{host}:{port} ({str(exc) or type(exc).__name__})")
                    with contextlib.suppress(*_ETCD_ERRORS):
                        await client.close()
                    continue
                self.endpoint = f"{host}:{port}"
                self._client = client
                logger.info("connected to etcd at %s prefix=%s", self.endpoint, self.keys.prefix)
                return client
            raise MetadataStoreError(f"etcd unreachable: {', '.join(failures)}")

    async def _txn(
        self, operation: str, compare: list[Any], success: list[Any], failure: list[Any]
    ) -> tuple[bool, list[Any]]:
        client = await self._connected()
        try:
            with self._errors(operation):
                succeeded, responses = await client.transaction(compare, success, failure)
        except MetadataStoreError as exc:
            if "lease not found" in str(exc):  # a put on this broker's lease, now expired
                if self._lease_id is not None:
                    self._lose_session(self._lease_id, f"{operation}: lease not found")
                raise SessionLost(f"etcd at {self.endpoint}: {operation}: this broker's "
                                  "lease is gone") from exc
            raise
        return bool(succeeded), responses

    @staticmethod
    def _read_back(responses: list[Any]) -> Any:
        """The key-value of the Get that ends a Txn's operations (None if absent)."""
        found = responses[-1]
        return found[0][1] if found else None

    # -- cluster id ---------------------------------------------------------------------------
    async def cluster_id(self) -> str:
        client = await self._connected()
        t = client.transactions
        key = self.keys.cluster_id
        _, responses = await self._txn(
            "create cluster id",
            [t.create(key) == 0],
            [t.put(key, encode_json(new_cluster_id())), t.get(key)],
            [t.get(key)],
        )
        with self._errors("read cluster id"):
            value = decode_json(self._read_back(responses).value, "cluster_id")
            if not isinstance(value, str) or not value:
                raise ValueError(f"cluster_id: expected a string, got {value!r}")
        return value

    # -- brokers ------------------------------------------------------------------------------
    async def register_broker(self, registration: BrokerRegistration) -> int:
        client = await self._connected()
        if self._lease_id is not None:  # forgotten when the session is lost
            raise MetadataStoreError(
                f"etcd at {self.endpoint}: this store already registered a broker"
            )
        t = client.transactions
        key = self.keys.broker(registration.node_id)
        await self._revoke_lost_lease(client)
        loop = asyncio.get_running_loop()
        granted_at = loop.time()
        with self._errors("grant lease"):
            lease = await client.lease(self.lease_ttl_s)
        succeeded, responses = await self._txn(
            f"register broker {registration.node_id}",
            [t.create(key) == 0],
            [t.put(key, encode_broker(registration), lease=lease.id), t.get(key)],
            [t.get(key)],
        )
        if not succeeded:
            with contextlib.suppress(*_ETCD_ERRORS):
                await client.revoke_lease(lease.id)
            found = self._read_back(responses)
            with self._errors(f"read broker {registration.node_id}"):
                holder = decode_broker(found.value, int(found.create_revision))
            left = await self._lease_time_left(client, found.lease)
            raise BrokerIdInUse(
                f"etcd at {self.endpoint}: broker id {registration.node_id} is registered "
                f"by a live broker ({found.value.decode()}); its lease expires in "
                + ("an unknown time" if left is None else f"{left} s"),
                holder=f"{holder.host}:{holder.port}", expires_in_s=left,
            )
        epoch = int(self._read_back(responses).create_revision)
        if self._keepalive is not None:
            self._keepalive.cancel()  # the lost lease's (it may not have noticed yet)
        self._lease_id = lease.id
        self._lease_deadline = granted_at + self.lease_ttl_s
        self._registration_key = key
        self.session_lost.clear()
        self._keepalive = asyncio.create_task(
            self._keep_alive(lease.id), name=f"etcd-keepalive-{registration.node_id}"
        )
        logger.info(
            "registered broker %d epoch=%d lease=%x ttl=%ds at etcd %s",
            registration.node_id, epoch, lease.id, self.lease_ttl_s, self.endpoint,
        )
        return epoch

    async def _lease_time_left(self, client: Any, lease_id: int) -> int | None:
        """Whole seconds before etcd expires ``lease_id`` unless it is renewed (its
        LeaseTimeToLive); None if etcd does not say."""
        try:
            info = await client.get_lease_info(lease_id, keys=False)
        except _ETCD_ERRORS:
            return None
        return int(info.TTL) if info.TTL >= 0 else None

    async def _keep_alive(self, lease_id: int) -> None:
        """Refresh the lease every heartbeat until the session is lost (module docstring) or
        the store closes. A failed refresh is retried at the next heartbeat while the lease
        may still be alive."""
        client = self._client
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(min(self.heartbeat_interval_ms / 1000,
                                    max(self._lease_deadline - loop.time(), 0)))
            sent = loop.time()
            if sent >= self._lease_deadline:
                self._lose_session(lease_id, "no keep-alive acknowledged within its TTL")
                return
            try:
                async with asyncio.timeout(self._lease_deadline - sent):
                    reply = await client.refresh_lease(lease_id)
            except _ETCD_ERRORS as exc:
                if loop.time() >= self._lease_deadline:
                    self._lose_session(lease_id, "no keep-alive acknowledged within its TTL "
                                       f"(last error: {str(exc) or type(exc).__name__})")
                    return
                logger.warning(
                    "lease %x keep-alive to etcd %s failed: %s", lease_id, self.endpoint, exc
                )
                continue
            if reply is None or reply.TTL <= 0:
                self._lose_session(lease_id, "etcd says it expired")
                return
            self._lease_deadline = sent + int(reply.TTL)

    def _lose_session(self, lease_id: int, why: str) -> None:
        if lease_id != self._lease_id:
            return  # an older lease, or lost already
        logger.error("lease %x at etcd %s lost (%s): this broker's session is over until it "
                     "registers again", lease_id, self.endpoint, why)
        self._lease_id = None
        self._lost_lease = lease_id
        self.session_lost.set()

    async def _revoke_lost_lease(self, client: Any) -> None:
        """Registering again: the lost lease goes first, if etcd still has it (its keys --
        the old registration, maybe the controller key -- go with it)."""
        lease_id, self._lost_lease = self._lost_lease, None
        if lease_id is None:
            return
        try:
            await client.revoke_lease(lease_id)
        except _ETCD_ERRORS as exc:  # gone already, usually (etcd: lease not found)
            logger.info("revoking the lost lease %x at etcd %s: %s", lease_id, self.endpoint,
                        exc)

    def _lease(self, operation: str) -> int:
        if self.session_lost.is_set():
            raise SessionLost(
                f"etcd at {self.endpoint}: {operation}: this broker's lease is gone"
            )
        if self._lease_id is None:
            raise MetadataStoreError(
                f"etcd at {self.endpoint}: {operation} needs a registered broker"
            )
        return self._lease_id

    async def update_registration(self, registration: BrokerRegistration) -> None:
        lease_id = self._lease(f"update broker {registration.node_id}")
        key = self.keys.broker(registration.node_id)
        if key != self._registration_key:
            raise MetadataStoreError(
                f"etcd at {self.endpoint}: this store registered another broker id"
            )
        client = await self._connected()
        t = client.transactions
        succeeded, _ = await self._txn(
            f"update broker {registration.node_id}",
            [t.create(key) > 0],
            [t.put(key, encode_broker(registration), lease=lease_id)],
            [],
        )
        if not succeeded:
            raise MetadataStoreError(
                f"etcd at {self.endpoint}: broker {registration.node_id}'s registration "
                "is gone (its lease expired)"
            )

    # -- controller ---------------------------------------------------------------------------
    async def campaign_controller(self, node_id: int) -> int | None:
        lease_id = self._lease(f"controller campaign of broker {node_id}")
        client = await self._connected()
        t = client.transactions
        key, epoch_key = self.keys.controller, self.keys.controller_epoch
        while True:
            with self._errors("read controller epoch"):
                current = await client.get(epoch_key)
                previous = 0 if current is None else int(decode_json(current.value, "epoch"))
                version = 0 if current is None else current.mod_revision
            epoch = previous + 1
            succeeded, responses = await self._txn(
                f"controller campaign of broker {node_id}",
                [t.create(key) == 0, t.mod(epoch_key) == version],
                [
                    t.put(epoch_key, encode_json(epoch)),
                    t.put(key, encode_controller(node_id, epoch), lease=lease_id),
                ],
                [t.get(key)],
            )
            if succeeded:
                logger.info("broker %d became controller epoch=%d", node_id, epoch)
                return epoch
            if self._read_back(responses) is not None:
                return None  # a live controller holds the role
            # the epoch counter moved (a winner that is already gone): read it again

    # -- topics and partitions ----------------------------------------------------------------
    async def create_topic(
        self, topic: TopicAssignment, states: Mapping[int, PartitionState]
    ) -> bool:
        client = await self._connected()
        t = client.transactions
        key = self.keys.topic(topic.name)
        puts = [t.put(key, encode_topic(topic))] + [
            t.put(self.keys.partition(topic.name, index), encode_partition(state))
            for index, state in sorted(states.items())
        ]
        succeeded, _ = await self._txn(
            f"create topic {topic.name}", [t.create(key) == 0], puts, []
        )
        return succeeded

    async def delete_topic(self, name: str) -> bool:
        client = await self._connected()
        t = client.transactions
        key, partitions = self.keys.topic(name), self.keys.partitions_of(name)
        succeeded, _ = await self._txn(
            f"delete topic {name}",
            [t.create(key) > 0],
            [t.delete(key), t.delete(partitions, aetcd.utils.prefix_range_end(partitions))],
            [],
        )
        return succeeded

    async def update_topic(self, topic: TopicAssignment) -> None:
        client = await self._connected()
        t = client.transactions
        key = self.keys.topic(topic.name)
        succeeded, _ = await self._txn(
            f"update topic {topic.name}", [t.create(key) > 0], [t.put(key, encode_topic(topic))], []
        )
        if not succeeded:
            raise MetadataStoreError(f"etcd at {self.endpoint}: no topic {topic.name!r}")

    async def compare_and_set_partition(
        self,
        topic: str,
        partition: int,
        state: PartitionState,
        expected_version: int,
        *,
        as_controller: tuple[int, int] | None = None,
    ) -> int | None:
        client = await self._connected()
        t = client.transactions
        key = self.keys.partition(topic, partition)
        compare = [t.mod(key) == expected_version]
        if as_controller is not None:
            # A controller's write holds only while it still is the controller: a zombie
            # (paused past its lease) is refused even if nobody touched the partition since.
            compare.append(t.value(self.keys.controller) == encode_controller(*as_controller))
        succeeded, responses = await self._txn(
            f"update partition {topic}-{partition}",
            compare,
            [t.put(key, encode_partition(state)), t.get(key)],
            [],
        )
        if not succeeded:
            return None
        return int(self._read_back(responses).mod_revision)

    # -- producer ids -------------------------------------------------------------------------
    async def allocate_producer_ids(self, count: int) -> int:
        if count < 1:
            raise ValueError("count must be positive")
        client = await self._connected()
        t = client.transactions
        key = self.keys.producer_id_block
        while True:
            with self._errors("read producer id block"):
                current = await client.get(key)
                first = 0 if current is None else int(decode_json(current.value, "next")["next"])
                version = 0 if current is None else current.mod_revision
            succeeded, _ = await self._txn(
                "allocate producer ids",
                [t.mod(key) == version],
                [t.put(key, encode_json({"next": first + count}))],
                [],
            )
            if succeeded:
                logger.info("allocated producer ids [%d, %d) from etcd", first, first + count)
                return first

    # -- whole documents: SCRAM credentials, ACLs ----------------------------------------------
    async def _read_document(self, key: bytes, what: str) -> tuple[bytes | None, int]:
        """The document at ``key`` and its mod revision (None, 0 when there is none)."""
        client = await self._connected()
        with self._errors(f"read {what}"):
            found = await client.get(key)
        return (None, 0) if found is None else (bytes(found.value), int(found.mod_revision))

    async def _write_document(self, key: bytes, what: str, data: bytes,
                              expected_revision: int) -> bool:
        """Replace the document at ``key`` if it is still at ``expected_revision`` (0: it
        must not exist); False when another broker changed it first."""
        client = await self._connected()
        t = client.transactions
        succeeded, _ = await self._txn(f"write {what}",
                                       [t.mod(key) == expected_revision], [t.put(key, data)], [])
        return succeeded

    async def read_scram_credentials(self) -> tuple[bytes | None, int]:
        """The SCRAM credentials document (oncelog.broker.cluster.credentials)."""
        return await self._read_document(self.keys.scram_credentials, "SCRAM credentials")

    async def write_scram_credentials(self, data: bytes, expected_revision: int) -> bool:
        return await self._write_document(self.keys.scram_credentials, "SCRAM credentials",
                                          data, expected_revision)

    async def read_acls(self) -> tuple[bytes | None, int]:
        """The ACL document (oncelog.broker.cluster.acls)."""
        return await self._read_document(self.keys.acls, "ACLs")

    async def write_acls(self, data: bytes, expected_revision: int) -> bool:
        return await self._write_document(self.keys.acls, "ACLs", data, expected_revision)

    # -- reading ------------------------------------------------------------------------------
    async def load(self) -> MetadataImage:
        client = await self._connected()
        image = MetadataImage()
        with self._errors("load metadata"):
            found = await client.get_prefix(self.keys.root)
            for kv in found:
                if kv.key == self.keys.cluster_id:
                    image.cluster_id = decode_json(kv.value, "cluster_id")
                    continue
                event = decode_event(
                    self.keys, kv.key, kv.value, deleted=False,
                    create_revision=kv.create_revision, mod_revision=kv.mod_revision,
                )
                if event is not None:
                    image.apply(event)
        image.revision = found.header.revision
        return image

    async def watch(self, after_revision: int) -> AsyncIterator[MetadataEvent]:
        client = await self._connected()
        with self._errors(f"watch from revision {after_revision + 1}"):
            watch = await client.watch_prefix(self.keys.root, start_revision=after_revision + 1)
        try:
            with self._errors(f"watch from revision {after_revision + 1}"):
                async for change in watch:
                    kv = change.kv
                    event = decode_event(
                        self.keys, kv.key, kv.value,
                        deleted=change.kind == "DELETE",
                        create_revision=kv.create_revision, mod_revision=kv.mod_revision,
                    )
                    if event is not None:
                        yield event
            if not self._closed:
                raise MetadataStoreError(
                    f"etcd at {self.endpoint}: the watch from revision {after_revision + 1} "
                    "ended while the store is open"
                )
        finally:
            if not self._closed:
                with contextlib.suppress(*_ETCD_ERRORS):
                    await watch.cancel()

    # -- closing ------------------------------------------------------------------------------
    async def close(self) -> None:
        """Stop the keep-alive, revoke the lease (the registration and the controller key go
        at once) and close the connection. Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        if self._keepalive is not None:
            self._keepalive.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._keepalive
        client, self._client = self._client, None
        if client is None:
            return
        if self._lease_id is not None:
            try:
                await client.revoke_lease(self._lease_id)
            except _ETCD_ERRORS as exc:
                logger.warning(
                    "revoking lease %x at etcd %s failed (it expires by itself): %s",
                    self._lease_id, self.endpoint, exc,
                )
        with contextlib.suppress(*_ETCD_ERRORS):
            await client.close()
        logger.info("closed etcd connection to %s", self.endpoint)
