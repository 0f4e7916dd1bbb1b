"""The broker: wires storage, coordinators and the server, and owns every background task.

Start-up order: bind every listener (the metrics endpoint and the transactions console
(``--ui``) included), so that a busy port
fails before the data directory is touched; lock the data directory (one broker per
directory); read meta.properties; load topics (recovering logs), create internal topics,
load the group coordinator from ``__consumer_offsets``; start accepting; then announce
readiness.

In cluster mode (``metadata.etcd.endpoints`` set; oncelog.broker.cluster.member): bind;
lock the data directory; connect to the metadata store; take the cluster id from it
(meta.properties must agree: a directory of another cluster is refused); load the local
partition directories; register the broker (while the node id is still registered, e.g. by
this broker's previous life killed within the session timeout, it waits for that lease to
expire, logging why at each attempt; SIGTERM meanwhile stops it cleanly); load the
MetadataCache and apply this broker's replica roles from it; then in the TaskGroup the
cache follows the store's watch, the controller shell campaigns, the producer-id blocks
are fetched, and the transaction and group coordinators each load the
``__transaction_state`` / ``__consumer_offsets`` partitions this broker leads (at their
leader epochs) and unload those it stops leading; start accepting; announce readiness. On
SIGTERM a controlled shutdown moves this broker's leaderships away first; the lease is
revoked last. The services that request handlers, the server and the metrics endpoint use
are handed to them as one frozen ``BrokerContext``, built once storage is loaded. All
background work (flush scheduler, retention, the group coordinator's timers) runs as tasks
in one TaskGroup that is cancelled when the broker stops; each loop sleeps between runs, so
a sweep never overlaps the next.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING

from oncelog.broker import api
from oncelog.broker.cluster import cluster_mode
from oncelog.broker.cluster_view import BrokerEndpoint, ClusterView, LocalClusterView
from oncelog.broker.context import BrokerContext, NodeIdentity
from oncelog.broker.datadir import DataDirLock, load_meta
from oncelog.broker.dynamic_config import describe_listeners, load_dynamic_configs
from oncelog.broker.internal_topic_store import InternalTopicStore
from oncelog.broker.listeners import EndPoint, inter_broker_client_tls, plan_listeners
from oncelog.broker.log_cleaner import LogCleaner
from oncelog.broker.markers import LocalMarkerWriter
from oncelog.broker.metrics import bind_metrics, scraper, serve_metrics
from oncelog.broker.partitions import PartitionRegistry
from oncelog.broker.sasl import inter_broker_client_sasl
from oncelog.broker.server import Server
from oncelog.clock import Clock, SystemClock
from oncelog.config import BrokerConfig
from oncelog.coordinator.group.coordinator import GroupCoordinator
from oncelog.coordinator.producer_ids import ProducerIdManager, ProducerIdSource
from oncelog.coordinator.transaction.coordinator import TransactionCoordinator
from oncelog.internal_topics import OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC, internal_topic_specs
from oncelog.security.acl import AclAuthorizer, parse_super_users
from oncelog.security.acl_store import AclStore, FileAclStore
from oncelog.security.credentials import CredentialStore, FileCredentialStore

# The cluster's machinery (etcd's client, replication, the controller, peer connections)
# and the transactions console (an admin client) are imported where a broker in cluster
# mode, or with --ui, builds them: a single node starts without loading them.
if TYPE_CHECKING:
    from oncelog.broker.cluster.elections import ClusterElections
    from oncelog.broker.cluster.member import ClusterMember
    from oncelog.broker.cluster.peers import PeerConnections
    from oncelog.broker.cluster.txn_verifier import RemoteTxnVerifier
    from oncelog.coordinator.transaction.coordinator import MarkerWriter
    from oncelog.ui.server import Console

log = logging.getLogger(__name__)


class Broker:
    def __init__(
        self,
        config: BrokerConfig,
        *,
        data_dir: Path,
        listen: tuple[str, int] | None = None,
        advertised: tuple[str, int] | None = None,
        clock: Clock | None = None,
        metrics_listen: tuple[str, int] | None = None,
        ui_listen: tuple[str, int] | None = None,
    ) -> None:
        self.config = config
        self.metrics_listen = metrics_listen  # HOST, PORT of GET /metrics; None: off
        self.ui_listen = ui_listen  # HOST, PORT of the transactions console; None: off
        self.clock: Clock = clock or SystemClock()
        self.data_dir = data_dir
        self.node_id = int(config["node.id"])
        # Every listener, validated (ConfigError naming the key) before anything is bound.
        self.listeners = plan_listeners(config, listen, advertised)
        self.peer_tls = inter_broker_client_tls(config) if cluster_mode(config) else None
        self.peer_sasl = inter_broker_client_sasl(config) if cluster_mode(config) else None
        first = self.listeners.listeners[0].endpoint
        self.listen_host, self.listen_port = first.host, first.port
        self.advertised: tuple[EndPoint, ...] = ()  # with the bound ports, once bound
        self.cluster_id = ""
        self.partitions = PartitionRegistry(data_dir, config, self.clock)
        self.cleaner = LogCleaner(self.partitions, config, self.clock)
        self.partitions.before_log_change = self.cleaner.abort_and_wait
        self.groups: GroupCoordinator
        self.transactions: TransactionCoordinator
        self.producer_ids: ProducerIdSource
        # Cluster mode (metadata.etcd.endpoints set); None: the single node.
        self.member: ClusterMember | None = None
        if cluster_mode(config):
            from oncelog.broker.cluster.member import ClusterMember

            self.member = ClusterMember(config, self.partitions, clock=self.clock)
        self.services: BrokerContext | None = None  # built once storage is loaded
        self.server = Server(config, listeners=self.listeners.listeners)
        self._lock = DataDirLock(data_dir)
        self._stop = asyncio.Event()

    @property
    def inter_broker_endpoint(self) -> EndPoint:
        """The inter-broker listener's advertised endpoint (what other brokers dial)."""
        if not self.advertised:
            self.advertised = self.listeners.advertised_for(self.server.bound)
        return next(e for e in self.advertised if e.name == self.listeners.inter_broker)

    @property
    def advertised_host(self) -> str:
        return self.inter_broker_endpoint.host

    @property
    def advertised_port(self) -> int:
        return self.inter_broker_endpoint.port

    def _advertised_listeners(self) -> tuple[tuple[str, str, int], ...]:
        self.inter_broker_endpoint  # noqa: B018 - fills self.advertised once bound
        return tuple((e.name, e.host, e.port) for e in self.advertised)

    def _start_storage(self) -> None:
        api.load_all()
        if self.member is None:
            self.cluster_id = load_meta(self.data_dir, self.node_id).cluster_id
        describe_listeners(self.config, self.server.bound, self.listeners.advertised_for(
            self.server.bound), self.listeners.inter_broker)
        load_dynamic_configs(self.data_dir, self.config)
        internal = {
            name: (spec.partitions, spec.configs)
            for name, spec in internal_topic_specs(self.config).items()
        }
        self.partitions.load({name: configs for name, (_, configs) in internal.items()})
        if self.member is None:
            for name, (count, configs) in internal.items():
                self.partitions.ensure_internal_topic(name, count, configs)
            self.producer_ids = ProducerIdManager(self.data_dir / "producer-id-block")
        else:  # the controller creates the internal topics; the store hands out ids
            self.producer_ids = self.member.producer_ids
        replication = None if self.member is None else self.member.replication.manager
        store = InternalTopicStore(self.partitions, OFFSETS_TOPIC, self.clock, replication)
        self.groups = GroupCoordinator(self.config, store, self.clock)
        if self.member is None:
            started = time.monotonic()
            self.groups.load()
            _log_load_time(OFFSETS_TOPIC, started)
        else:  # each partition loads when this broker comes to lead it
            self.groups.start_partitioned()
        local_markers = LocalMarkerWriter(self.partitions, self.groups, replication)
        markers: MarkerWriter = local_markers
        if self.member is not None:
            from oncelog.broker.cluster.markers import ClusterMarkerWriter

            markers = ClusterMarkerWriter(self.member.view, local_markers, peers=self._peers())
        self.transactions = TransactionCoordinator(
            self.config,
            InternalTopicStore(self.partitions, TRANSACTION_STATE_TOPIC, self.clock,
                               replication),
            self.producer_ids,  # the one source of producer ids, idempotent ones included
            markers,
            self.clock,
        )
        if self.member is None:
            started = time.monotonic()
            self.transactions.load()
            _log_load_time(TRANSACTION_STATE_TOPIC, started)
        else:  # each partition loads when this broker comes to lead it
            self.transactions.start_partitioned()
        node = NodeIdentity(
            self.node_id, self.cluster_id, self.advertised_host, self.advertised_port
        )
        acls, authorizer = self._build_authorizer()
        credentials: CredentialStore
        txn_verifier: RemoteTxnVerifier | None = None
        elections: ClusterElections | None = None
        if self.member is None:
            credentials = FileCredentialStore(self.data_dir)
        else:
            from oncelog.broker.cluster.credentials import ClusterCredentialStore
            from oncelog.broker.cluster.elections import ClusterElections
            from oncelog.broker.cluster.txn_verifier import RemoteTxnVerifier

            credentials = ClusterCredentialStore(self.member.store)
            txn_verifier = RemoteTxnVerifier(self._peers())
            elections = ClusterElections(self.member.controller, self.member.cache,
                                         self._peers())
        self.services = BrokerContext(
            config=self.config,
            clock=self.clock,
            node=node,
            partitions=self.partitions,
            groups=self.groups,
            transactions=self.transactions,
            producer_ids=self.producer_ids,
            cluster=self._cluster_view(node),
            replication=None if self.member is None else self.member.replication.manager,
            cleaner=self.cleaner,
            credentials=credentials,
            authorizer=authorizer,
            acls=acls,
            txn_verifier=txn_verifier,
            elections=elections,
        )

    def _peers(self) -> PeerConnections:
        """Cluster mode: a new set of connections to the other brokers."""
        from oncelog.broker.cluster.markers import MARKER_REQUEST_TIMEOUT_MS
        from oncelog.broker.cluster.peers import PeerConnections

        assert self.member is not None
        return PeerConnections(self.member.view, MARKER_REQUEST_TIMEOUT_MS, self.peer_tls,
                               self.peer_sasl)

    def _build_authorizer(self) -> tuple[AclStore | None, AclAuthorizer | None]:
        """``authorizer.class.name`` set: the ACL store (a file here, the metadata store in
        a cluster) and the authorizer deciding from it; else neither (all allowed)."""
        if not self.config["authorizer.class.name"]:
            return None, None
        store: AclStore
        if self.member is None:
            store = FileAclStore(self.data_dir)
        else:
            from oncelog.broker.cluster.acls import ClusterAclStore

            store = ClusterAclStore(self.member.store, self.member.cache)
        super_users = parse_super_users(self.config["super.users"])
        everyone = bool(self.config["allow.everyone.if.no.acl.found"])
        log.info("authorizer %s: %d super users, allow.everyone.if.no.acl.found=%s",
                    self.config["authorizer.class.name"], len(super_users), everyone)
        return store, AclAuthorizer(store.current, super_users=super_users,
                                    allow_everyone_if_no_acl_found=everyone)

    def _cluster_view(self, node: NodeIdentity) -> ClusterView:
        if self.member is None:
            return LocalClusterView(BrokerEndpoint(node.node_id, node.host, node.port,
                                                   listeners=self._advertised_listeners()),
                                    self.partitions)
        return self.member.view

    def _follow_coordinator_partitions(self) -> None:
        """Cluster mode: each coordinator follows the leadership of its internal topic
        (``CoordinatorRoles``): it loads a partition when this broker comes to lead it (at
        the leader epoch) and unloads one it stops leading."""
        from oncelog.broker.cluster.coordinator_roles import (
            GroupCoordinatorRoles,
            TxnCoordinatorRoles,
        )

        assert self.member is not None
        for follower in (TxnCoordinatorRoles(self.member.roles, self.transactions),
                         GroupCoordinatorRoles(self.member.roles, self.groups)):
            self.member.cache.subscribe(follower.on_metadata)
            follower.apply()

    def request_stop(self) -> None:
        self._stop.set()

    async def run(self, on_ready: Callable[[str, int], None] | None = None) -> None:
        """Serve until request_stop(); then drain, flush and write checkpoints."""
        await self.server.bind()
        metrics_server = None
        if self.metrics_listen is not None:
            metrics_server = await bind_metrics(*self.metrics_listen, self._scrape)
        console = await self._bind_console()
        self._lock.acquire()
        try:
            if self.member is not None:
                self.cluster_id = await self.member.connect(self.data_dir)
            self._start_storage()
            if self.member is not None and not await self._join_unless_stopped():
                self.partitions.close()
                log.info("stopped cleanly before registering")
                return
            await self._serve(on_ready, metrics_server, console)
        finally:
            if self.member is not None:
                if self.services is not None and self.services.txn_verifier is not None:
                    await self.services.txn_verifier.close()
                await self.member.close()
            self._lock.release()

    async def _join_unless_stopped(self) -> bool:
        """``ClusterMember.join``, unless a stop is requested first (SIGTERM while the
        registration waits for this node id's previous lease to expire): then False."""
        assert self.member is not None
        join = asyncio.ensure_future(self.member.join(
            self.advertised_host, self.advertised_port, self._advertised_listeners()))
        stop = asyncio.ensure_future(self._stop.wait())
        try:
            await asyncio.wait((join, stop), return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
            if not join.done():
                join.cancel()
        try:
            await join  # its error, if it failed
        except asyncio.CancelledError:
            if not self._stop.is_set():
                raise
            return False
        return True

    async def _bind_console(self) -> tuple[asyncio.Server, Console] | None:
        """Bind the transactions console (oncelog.ui), a Kafka client of our own listener."""
        if self.ui_listen is None:
            return None
        from oncelog.ui.server import Console, bind_console

        host = self.listen_host if self.listen_host not in ("0.0.0.0", "::", "") else "127.0.0.1"
        console = Console(f"{host}:{self.server.port}",
                          max_timeout_ms=int(self.config["transaction.max.timeout.ms"]))
        try:
            return await bind_console(*self.ui_listen, console), console
        except OSError as exc:
            raise OSError(exc.errno, f"the console address {self.ui_listen[0]}:"
                                     f"{self.ui_listen[1]} cannot be bound: {exc.strerror}"
                          ) from exc

    def _scrape(self) -> str:
        if self.services is None:
            raise RuntimeError("metrics scraped before the broker loaded its storage")
        controller = None if self.member is None else self.member.controller.stats
        return scraper(self.services, controller)()

    async def _serve(
        self,
        on_ready: Callable[[str, int], None] | None,
        metrics_server: asyncio.Server | None,
        console: tuple[asyncio.Server, Console] | None = None,
    ) -> None:
        assert self.services is not None
        await self.server.start(self.services)
        try:
            async with asyncio.TaskGroup() as tasks:
                if self.member is not None:
                    self.member.start(tasks)
                    self._follow_coordinator_partitions()
                    tasks.create_task(
                        self._every(
                            int(self.config["replica.high.watermark.checkpoint.interval.ms"]),
                            self._checkpoint_tick),
                        name="high-watermark-checkpoint",
                    )
                tasks.create_task(self.groups.run(), name="group-coordinator")
                tasks.create_task(self.transactions.run(), name="transaction-coordinator")
                tasks.create_task(
                    self._every(int(self.config["producer.id.expiration.check.interval.ms"]),
                                self._expire_producers_tick),
                    name="producer-id-expiration",
                )
                tasks.create_task(self._every(self._flush_interval_ms(), self._flush_tick),
                                  name="log-flusher")
                tasks.create_task(
                    self._every(int(self.config["log.retention.check.interval.ms"]),
                                self._retention_tick),
                    name="log-retention",
                )
                # One worker whatever log.cleaner.threads says (>= 1): a 2-core machine.
                if self.config["log.cleaner.enable"] and int(
                    self.config["log.cleaner.threads"]
                ) > 0:
                    tasks.create_task(
                        self._every(int(self.config["log.cleaner.backoff.ms"]),
                                    self.cleaner.tick),
                        name="log-cleaner",
                    )
                if metrics_server is not None:
                    tasks.create_task(serve_metrics(metrics_server), name="metrics")
                if console is not None:
                    from oncelog.ui.server import serve_console

                    tasks.create_task(serve_console(*console), name="console")
                if on_ready is not None:
                    on_ready(self.listen_host, self.server.port)
                log.info("broker %d serving on %s:%d (advertised %s:%d), cluster %s",
                         self.node_id, self.listen_host, self.server.port,
                         self.advertised_host, self.advertised_port, self.cluster_id)
                await self._stop.wait()
                if self.member is not None:
                    await self.member.controlled_shutdown()
                log.info("stopping: draining in-flight requests")
                self.groups.close()
                await self.server.stop()
                raise _Stopped()
        except* _Stopped:
            pass
        finally:
            self.partitions.close()
            log.info("stopped cleanly")

    def _flush_interval_ms(self) -> int:
        # Kafka fsyncs a segment (asynchronously) as soon as it rolls, so it is soon below
        # the recovery point, which is what makes it cleanable (compaction). The scheduler
        # stands in for that: it checks at least every second, and a check with no flush.ms
        # due only fsyncs segments rolled since the last one (cheap when there are none).
        interval = self.config.log_flush_ms
        return max(100, min(interval, 1_000))

    async def _every(self, interval_ms: int, tick: Callable[[], Awaitable[None] | None]) -> None:
        while True:
            await asyncio.sleep(interval_ms / 1000)
            try:
                result = tick()
                if result is not None:
                    await result
            except Exception:
                log.exception("background task %s failed; will retry", tick.__name__)

    async def _checkpoint_tick(self) -> None:
        """The high watermarks taken now, written to the log directories off the loop."""
        by_dir = self.partitions.high_watermarks()
        await asyncio.to_thread(self.partitions.write_high_watermarks, by_dir)

    def _flush_tick(self) -> None:
        self.partitions.maybe_flush_all()

    def _expire_producers_tick(self) -> None:
        expired = self.partitions.remove_expired_producers()
        if expired:
            log.info("expired %d idle producer ids", expired)

    def _retention_tick(self) -> None:
        if self.cleaner.cleaning:  # a pass could be reading segments retention would delete
            return
        deleted = self.partitions.apply_retention()
        if deleted:
            log.info("retention deleted %d segments", deleted)


def _log_load_time(topic: str, started: float) -> None:
    """How long a coordinator took to load its internal topic (what compaction bounds)."""
    log.info("loaded %s in %.0f ms", topic, (time.monotonic() - started) * 1000)


class _Stopped(Exception):
    pass
