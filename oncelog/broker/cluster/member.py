"""``ClusterMember``: one broker's part in a cluster (``metadata.etcd.endpoints`` set).

It owns the broker's connection to the metadata store and everything that follows from it:
the cluster id (meta.properties must agree), the registration (lease), the MetadataCache,
the replicas' roles (``ReplicaRoles``), the controller shell campaigning, cluster producer
ids, the handlers' ``EtcdClusterView``, and controlled shutdown. ``Broker`` calls, in order:
``connect()`` → (the registry loads the partition directories found on disk) →
``join()`` → ``run(tasks)`` inside its TaskGroup → on SIGTERM ``controlled_shutdown()`` →
``close()``.

Registering at start-up waits while the node id is still registered -- after a kill -9,
the previous life's lease lives on for up to ``broker.session.timeout.ms`` -- trying again
every ``broker.heartbeat.interval.ms`` with a log line saying why and when that lease
expires, as Kafka's broker keeps retrying its registration; the start goes on once the old
lease is gone.

Controlled shutdown (``controlled.shutdown.enable``, Kafka's default true): the broker
rewrites its registration with ``shutting_down`` (as a KRaft broker's heartbeat asks
``wantShutDown``); the controller moves every leadership it holds to another ISR member;
the broker waits until the image shows it leads nothing (each attempt bounded by
``controlled.shutdown.retry.backoff.ms``, at most ``controlled.shutdown.max.retries``
attempts, Kafka's ZooKeeper-era names and defaults), then stops. A partition with no other
ISR member keeps it as leader until the lease goes (as in Kafka). kill -9 leaves the move to
the session timeout (``broker.session.timeout.ms``).

A lost session (the store's ``session_lost``: the broker was paused with SIGSTOP or cut off
from etcd past ``broker.session.timeout.ms``, or etcd dropped its lease) fences the broker
until it is registered again (``_keep_session``): its replicas stop leading
(``ReplicaRoles.fenced``; produce answers NOT_LEADER_OR_FOLLOWER, and the transaction and
group coordinators unload their partitions) and its controller resigns, since the
controller is moving its leaderships away meanwhile; then it registers again every
``broker.heartbeat.interval.ms`` until etcd takes it (a new broker epoch, as a
ZooKeeper-era Kafka broker re-created its ``/brokers/ids`` znode on a new session), waits
until its image shows that registration (the watch is live again) and takes the image's
roles back: a follower of the new leaders, it truncates what it appended alone and rejoins
the ISR once it has caught up.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable
from pathlib import Path

from oncelog.broker.cluster import cluster_mode
from oncelog.broker.cluster.controller import Controller, ControllerSettings
from oncelog.broker.cluster.metadata_cache import MetadataCache
from oncelog.broker.cluster.producer_ids import ClusterProducerIdManager
from oncelog.broker.cluster.replication import ClusterReplication
from oncelog.broker.cluster.roles import ReplicaRoles, ReplicationHooks
from oncelog.broker.cluster.view import EtcdClusterView, StoreTopicAdmin
from oncelog.broker.datadir import load_meta
from oncelog.broker.partitions import PartitionRegistry
from oncelog.clock import Clock, SystemClock
from oncelog.cluster.metadata import (
    BrokerIdInUse,
    BrokerRegistration,
    MetadataImage,
    MetadataStoreError,
)
from oncelog.cluster.metadata_store import EtcdMetadataStore
from oncelog.config import BrokerConfig
from oncelog.errors import KafkaError
from oncelog.faults import pause_point

__all__ = ["ClusterMember", "cluster_mode"]

log = logging.getLogger(__name__)

_NOBODY = BrokerRegistration(-1, "", 0)


class ClusterMember:
    """The cluster side of one broker (see the module docstring)."""

    def __init__(
        self,
        config: BrokerConfig,
        registry: PartitionRegistry,
        hooks: ReplicationHooks | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.config = config
        self.node_id = int(config["node.id"])
        self.registry = registry
        self.store = EtcdMetadataStore.from_config(config)
        self.cache = MetadataCache(self.store)
        self.replication = ClusterReplication(config, local_id=self.node_id,
                                              clock=clock or SystemClock(), store=self.store)
        self.roles = ReplicaRoles(self.node_id, registry, hooks or self.replication)
        self.controller = Controller(self.store, self.node_id,
                                     ControllerSettings.from_config(config))
        self.producer_ids = ClusterProducerIdManager(self.store)
        self.view = EtcdClusterView(self.node_id, self.cache,
                                    StoreTopicAdmin(self.store, self.cache, config), config,
                                    fenced=lambda: self.roles.fenced)
        self.registration: BrokerRegistration | None = None
        self._tasks: asyncio.TaskGroup | None = None
        self._creating: set[str] = set()

    async def connect(self, data_dir: Path) -> str:
        """The cluster id from the store, checked against (or written to) meta.properties."""
        cluster_id = await self.store.cluster_id()
        load_meta(data_dir, self.node_id, cluster_id)
        self.registry.hosted_only = True
        log.info("broker %d joins cluster %s through %r", self.node_id, cluster_id,
                 self.store)
        return cluster_id

    async def join(
        self, host: str, port: int, listeners: tuple[tuple[str, str, int], ...] = ()
    ) -> None:
        """Register at the inter-broker endpoint ``host:port`` with every advertised
        ``listeners`` (name, host, port) -- waiting while this node id is still registered,
        see ``_register`` --, load the image and apply this broker's roles from it."""
        registration = BrokerRegistration(self.node_id, host, port, listeners=listeners)
        epoch = await self._register(registration, retried=BrokerIdInUse)
        log.info("broker %d registered at %s:%d, broker epoch %d", self.node_id, host, port,
                 epoch)
        pause_point("broker.registered")
        image = await self.cache.load()
        self.replication.load(image)
        self.roles.reconcile(image)
        self.cache.subscribe(self.roles.on_metadata)
        self.cache.subscribe(self.replication.on_metadata)

    def start(self, tasks: asyncio.TaskGroup) -> None:
        """The cluster's background work, in the broker's TaskGroup."""
        self._tasks = tasks
        self.registry.auto_creator = self._auto_create
        tasks.create_task(self.cache.follow(), name="metadata-cache")
        tasks.create_task(self.controller.run(), name="controller")
        tasks.create_task(self.producer_ids.run(), name="producer-id-blocks")
        tasks.create_task(self._keep_session(), name="broker-session")
        self.replication.start(tasks)

    async def _keep_session(self) -> None:
        """Fence this broker whenever its session is lost and lift the fence once it is
        registered again (module docstring)."""
        while True:
            await self.store.session_lost.wait()
            led = self.roles.led()
            self.roles.fenced = True
            self.controller.on_session_lost()
            self.cache.renotify()
            log.warning("broker %d: session lost; fenced (stopped leading %d partitions) "
                        "until registered again", self.node_id, len(led))
            assert self.registration is not None
            epoch = await self._register(dataclasses.replace(self.registration, epoch=-1),
                                         retried=MetadataStoreError)
            await self.cache.wait_for(self._registered_at(epoch))
            self.roles.fenced = False
            self.cache.renotify()
            log.info("broker %d: registered again at broker epoch %d; fence lifted",
                     self.node_id, epoch)
            await self.controller.on_registered()

    def _registered_at(self, epoch: int) -> Callable[[MetadataImage], bool]:
        return lambda image: image.brokers.get(self.node_id, _NOBODY).epoch == epoch

    async def _register(
        self, registration: BrokerRegistration, *, retried: type[MetadataStoreError]
    ) -> int:
        """Register (a new broker epoch), trying again every ``broker.heartbeat.interval.ms``
        while the store refuses with ``retried``, one log line per attempt; the epoch.

        At start-up that is ``BrokerIdInUse``: this node id is still registered, usually by
        this broker's previous life, killed less than ``broker.session.timeout.ms`` ago, until
        its lease expires (the message says when), as Kafka's broker keeps retrying its
        registration while the controller still holds the old one; another error stops the
        start. After a lost session it is any store error (etcd unreachable, the lost lease
        not expired yet)."""
        backoff_s = int(self.config["broker.heartbeat.interval.ms"]) / 1000
        while True:
            try:
                epoch = await self.store.register_broker(registration)
            except retried as exc:
                if isinstance(exc, BrokerIdInUse):
                    expiry = ("at an unknown time" if exc.expires_in_s is None
                              else f"in {exc.expires_in_s} s")
                    log.warning("broker %d: node id %d is still registered, at %s (its lease "
                                "expires %s unless renewed), by a previous life of this "
                                "broker killed less than broker.session.timeout.ms ago or by "
                                "another running broker with this node.id; trying again in "
                                "%.1f s", self.node_id, self.node_id, exc.holder, expiry,
                                backoff_s)
                else:
                    log.warning("broker %d: registering failed (%s); trying again in %.1f s",
                                self.node_id, exc, backoff_s)
                await asyncio.sleep(backoff_s)
                continue
            self.registration = dataclasses.replace(registration, epoch=epoch)
            return epoch

    def _auto_create(self, name: str) -> None:
        """auto.create.topics.enable: create ``name`` with the broker defaults, once."""
        if self._tasks is None or name in self._creating:
            return
        self._creating.add(name)
        self._tasks.create_task(self._create(name), name=f"auto-create-{name}")

    async def _create(self, name: str) -> None:
        try:
            await self.view.admin.create_topic(name, -1, {}, replication_factor=-1,
                                               assignments=None, validate_only=False)
        except KafkaError as exc:
            log.info("auto-creation of topic %s: %s", name, exc)
        except (MetadataStoreError, TimeoutError) as exc:
            log.warning("auto-creation of topic %s failed: %s", name, exc)
        finally:
            self._creating.discard(name)

    async def controlled_shutdown(self) -> bool:
        """Ask the controller to move this broker's leaderships away and wait until they
        are gone (bounded); True if it leads nothing any more."""
        if not self.config["controlled.shutdown.enable"] or self.registration is None:
            return False
        retries = int(self.config["controlled.shutdown.max.retries"])
        backoff_s = int(self.config["controlled.shutdown.retry.backoff.ms"]) / 1000
        self.registration = dataclasses.replace(self.registration, shutting_down=True)
        await self.store.update_registration(self.registration)
        log.info("controlled shutdown: asked to move the leadership of %d partitions away",
                 len(self.roles.led()))
        for attempt in range(1, retries + 1):
            try:
                await self.cache.wait_for(lambda _: not self.roles.led(), backoff_s)
            except TimeoutError:
                log.info("controlled shutdown attempt %d/%d: still leading %s", attempt,
                         retries, [f"{t}-{p}" for t, p in self.roles.led()])
                continue
            log.info("controlled shutdown: this broker leads no partition")
            return True
        log.warning("controlled shutdown incomplete after %d attempts: still leading %s",
                    retries, [f"{t}-{p}" for t, p in self.roles.led()])
        return False

    async def close(self) -> None:
        """Revoke the lease (registration and controller role go at once)."""
        await self.store.close()
