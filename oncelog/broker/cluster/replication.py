"""Replication wired into a running cluster broker: the ``ReplicationHooks`` that
``ReplicaRoles`` calls on every role change, plus the metadata feed of the leader's side.

``ClusterReplication`` owns this broker's ``ReplicaManager`` (the partitions it leads, their
followers, the high watermark, acks=all and ISR writes) and its ``ReplicaFetcher``s (the
partitions it follows, one fetcher per source broker and fetcher index, Kafka's
``AbstractFetcherManager``: ``num.replica.fetchers`` fetchers per source broker, a partition
going to fetcher ``hash(topic, partition) % num.replica.fetchers``). A fetcher is created
when a partition first needs it (with the leader's registered address) and stopped when
its last partition leaves.

- become leader: the engine already leads (``ReplicaRoles`` did it); the partition leaves
  its fetcher and the ``ReplicaManager`` starts tracking its followers. Every local
  non-replication append (produce, coordinator writes, markers) is reported to the tracker
  (``Partition.append_listener``), so the high watermark follows the ISR, including an ISR
  of the leader alone.
- become follower: leader tracking stops; the partition is added to the fetcher of its
  leader at the new leader epoch (truncation first). A leader not registered (yet) is
  waited for: the partition is fetched once the leader's registration is seen.
- stop replica: removed from both.

The metadata feed (``on_metadata``, a ``MetadataCache`` listener): partition states reach
the tracker (an ISR write came back), broker registrations reach the tracker (a restarted
follower's new broker epoch) and pending followers.
"""

from __future__ import annotations

import asyncio
import logging
import zlib
from dataclasses import dataclass

from oncelog.broker.cluster.replica_fetcher import FetcherConfig, LeaderEndpoint, ReplicaFetcher
from oncelog.broker.cluster.replica_manager import ReplicaManager
from oncelog.broker.partition import Partition
from oncelog.clock import Clock
from oncelog.cluster.metadata import (
    NO_LEADER,
    BrokerRegistration,
    MetadataEvent,
    MetadataImage,
    MetadataStore,
    VersionedPartitionState,
)
from oncelog.config import BrokerConfig

__all__ = ["ClusterReplication"]

log = logging.getLogger(__name__)

_FetcherKey = tuple[LeaderEndpoint, int]  # the source broker's endpoint, fetcher index


@dataclass(slots=True)
class _Following:
    partition: Partition
    leader_epoch: int
    leader_id: int
    fetcher: _FetcherKey | None  # None: waiting for the leader's registration


class ClusterReplication:
    """This broker's replication: implements ``ReplicationHooks`` (module docstring)."""

    def __init__(
        self, config: BrokerConfig, *, local_id: int, clock: Clock, store: MetadataStore
    ) -> None:
        self.local_id = local_id
        self.manager = ReplicaManager(
            local_id=local_id, clock=clock, store=store,
            replica_lag_time_max_ms=int(config["replica.lag.time.max.ms"]),
        )
        self.fetcher_config = FetcherConfig.from_broker(config)
        self.num_fetchers = int(config["num.replica.fetchers"])
        self.fetchers: dict[_FetcherKey, ReplicaFetcher] = {}
        self._runs: dict[_FetcherKey, asyncio.Task[None]] = {}
        self._following: dict[tuple[str, int], _Following] = {}
        self._brokers: dict[int, BrokerRegistration] = {}
        self._tasks: asyncio.TaskGroup | None = None

    def start(self, tasks: asyncio.TaskGroup) -> None:
        """The ISR expiration loop and every fetcher created so far, in the broker's
        TaskGroup (fetchers created later start there at once)."""
        self._tasks = tasks
        tasks.create_task(self.manager.run(), name="isr-expiration")
        for key in self.fetchers:
            self._start_fetcher(key)

    # -- ReplicationHooks -----------------------------------------------------------------
    def on_become_leader(
        self, partition: Partition, state: VersionedPartitionState, replicas: tuple[int, ...]
    ) -> None:
        self._unfollow(partition.topic, partition.index)
        self.manager.become_leader(partition, state, replicas)
        partition.append_listener = self.manager.on_leader_append
        log.info("%s: leading at leader epoch %d, replicas %s, isr %s", partition.name,
                 state.state.leader_epoch, list(replicas), list(state.state.isr))

    def on_become_follower(
        self, partition: Partition, state: VersionedPartitionState, leader_id: int
    ) -> None:
        self._stop_leading(partition)
        key = (partition.topic, partition.index)
        current = self._following.get(key)
        if (current is not None and current.leader_id == leader_id
                and current.partition is partition and current.fetcher is not None):
            current.leader_epoch = state.state.leader_epoch  # same leader, newer epoch
            self.fetchers[current.fetcher].add_partition(partition, current.leader_epoch)
            return
        self._unfollow(*key)
        if leader_id == NO_LEADER:
            return
        self._following[key] = _Following(partition, state.state.leader_epoch, leader_id, None)
        self._attach(self._following[key])

    def on_stop_replica(self, partition: Partition, deleted: bool) -> None:
        self._stop_leading(partition)
        self._unfollow(partition.topic, partition.index)
        log.info("%s: replica stopped (deleted: %s)", partition.name, deleted)

    # -- metadata ---------------------------------------------------------------------------
    def on_metadata(self, event: MetadataEvent | None, image: MetadataImage) -> None:
        """A MetadataCache listener (subscribed after ``ReplicaRoles``)."""
        if event is None or event.kind == "broker":
            self._brokers = dict(image.brokers)
            self.manager.on_brokers(image.brokers)
            for following in self._following.values():
                if following.fetcher is None:
                    self._attach(following)
        if event is None:
            for (topic, index), versioned in image.partitions.items():
                self.manager.on_partition_state(topic, index, versioned)
        elif event.kind == "partition" and event.partition_state is not None:
            assert event.partition is not None
            self.manager.on_partition_state(*event.partition, event.partition_state)

    def load(self, image: MetadataImage) -> None:
        """The image as loaded at join, before any event (the broker registrations)."""
        self._brokers = dict(image.brokers)
        self.manager.on_brokers(image.brokers)

    # -- followers ----------------------------------------------------------------------------
    def _attach(self, following: _Following) -> None:
        registration = self._brokers.get(following.leader_id)
        partition = following.partition
        if registration is None:
            log.info("%s: leader %d is not registered yet; fetching once it is",
                     partition.name, following.leader_id)
            return
        endpoint = LeaderEndpoint(registration.node_id, registration.host, registration.port)
        index = zlib.crc32(partition.topic.encode()) + partition.index
        key = (endpoint, index % self.num_fetchers)
        fetcher = self.fetchers.get(key)
        if fetcher is None:
            fetcher = ReplicaFetcher(local_id=self.local_id, leader=endpoint,
                                     config=self.fetcher_config)
            self.fetchers[key] = fetcher
            if self._tasks is not None:
                self._start_fetcher(key)
        following.fetcher = key
        fetcher.add_partition(partition, following.leader_epoch)
        log.info("%s: following broker %d at %s:%d, leader epoch %d", partition.name,
                 endpoint.node_id, endpoint.host, endpoint.port, following.leader_epoch)

    def _unfollow(self, topic: str, index: int) -> None:
        following = self._following.pop((topic, index), None)
        if following is None or following.fetcher is None:
            return
        fetcher = self.fetchers.get(following.fetcher)
        if fetcher is None:
            return
        fetcher.remove_partition(topic, index)
        if not fetcher.partitions:
            del self.fetchers[following.fetcher]
            run = self._runs.pop(following.fetcher, None)
            if run is not None:
                run.cancel()
            log.info("replica fetcher from broker %d stopped: no partition left",
                     fetcher.leader.node_id)

    def _start_fetcher(self, key: _FetcherKey) -> None:
        assert self._tasks is not None
        endpoint, index = key
        self._runs[key] = self._tasks.create_task(
            self.fetchers[key].run(), name=f"replica-fetcher-{endpoint.node_id}-{index}")

    def _stop_leading(self, partition: Partition) -> None:
        partition.append_listener = None
        self.manager.stop_leading(partition.topic, partition.index)
