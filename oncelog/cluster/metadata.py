"""The cluster's metadata as values: broker registrations, topic assignments and partition
states, the image a broker keeps of them, and the store that holds them.

Sans-IO. The authoritative copy lives in the consensus service (etcd; the store is
``oncelog.cluster.metadata_store.EtcdMetadataStore``); every broker keeps a
``MetadataImage`` of it, updated from the store's watch, and decides from the image (who
leads which partition, at which leader epoch, with which ISR). Writes go to the store only,
never to the image directly: the image changes when the write comes back through the watch,
so every broker sees the same order of changes.

Partition states are changed with compare-and-swap on the version the store gives each
partition's key (as Kafka's controller and leaders updated ``/brokers/topics/.../state`` in
ZooKeeper with its znode version): a write based on a stale read is refused and the writer
re-reads. The leader epoch grows with every leader change; the partition epoch with every
change of the state (leader or ISR), as Kafka's KRaft PartitionRegistration does.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Protocol

__all__ = [
    "NO_LEADER",
    "BrokerIdInUse",
    "BrokerRegistration",
    "MetadataEvent",
    "MetadataImage",
    "MetadataStore",
    "MetadataStoreError",
    "PartitionState",
    "SessionLost",
    "TopicAssignment",
    "VersionedPartitionState",
]

NO_LEADER = -1


@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    """A live broker, as it registered itself (attached to its lease: it disappears when
    the broker stops renewing it). ``epoch`` is the broker epoch: the store's revision of
    the registration, new for every registration, so a restarted broker is told apart from
    its previous life. ``shutting_down`` is set by a broker asking for a controlled
    shutdown: the controller moves leadership away from it. ``host``/``port`` are its
    inter-broker listener's advertised endpoint (what other brokers connect to);
    ``listeners`` every advertised listener as (name, host, port), which clients are told
    per the listener their request came in on."""

    node_id: int
    host: str
    port: int
    rack: str | None = None
    epoch: int = -1
    shutting_down: bool = False
    listeners: tuple[tuple[str, str, int], ...] = ()


@dataclass(frozen=True, slots=True)
class TopicAssignment:
    """A topic: its id, the replicas of each partition (index = partition; the first
    replica is the preferred leader) and its topic-level configs."""

    name: str
    topic_id: uuid.UUID
    replicas: tuple[tuple[int, ...], ...]
    configs: Mapping[str, str] = field(default_factory=dict)

    @property
    def partition_count(self) -> int:
        return len(self.replicas)


@dataclass(frozen=True, slots=True)
class PartitionState:
    """Who leads one partition and who is in sync: Kafka's LeaderAndIsr.

    ``leader`` is NO_LEADER (-1) while no eligible replica is alive. ``leader_epoch`` grows
    with every leader change (and every controlled move); ``partition_epoch`` with every
    change of this state. ``controller_epoch`` is the epoch of the controller that last
    changed the leader. ``leader_broker_epoch`` is the broker epoch of the leader's
    registration when it was made leader (-1: not recorded): a leader registered with
    another one has restarted since, and the controller elects again with a new leader
    epoch (a leader epoch never spans two lives of its leader)."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    partition_epoch: int = 0
    controller_epoch: int = 0
    leader_broker_epoch: int = -1

    def with_isr(self, isr: tuple[int, ...]) -> PartitionState:
        """The same leader with another ISR (a leader's shrink or expand)."""
        return replace(self, isr=isr, partition_epoch=self.partition_epoch + 1)

    def with_leader(
        self, leader: int, isr: tuple[int, ...], controller_epoch: int,
        leader_broker_epoch: int = -1,
    ) -> PartitionState:
        """A new leader (or none): the leader epoch moves on."""
        return PartitionState(
            leader=leader,
            leader_epoch=self.leader_epoch + 1,
            isr=isr,
            partition_epoch=self.partition_epoch + 1,
            controller_epoch=controller_epoch,
            leader_broker_epoch=leader_broker_epoch,
        )


@dataclass(frozen=True, slots=True)
class VersionedPartitionState:
    """A partition state with the store's version of it (the compare-and-swap token)."""

    state: PartitionState
    version: int


@dataclass(frozen=True, slots=True)
class MetadataEvent:
    """One change seen through the store's watch, in the store's order. Exactly one of the
    payload fields is set unless ``deleted`` (then the key alone says what went away):
    ``kind`` is "broker", "topic", "partition", "controller" or "acls"."""

    kind: str
    revision: int
    deleted: bool = False
    broker: BrokerRegistration | None = None
    node_id: int | None = None
    topic: TopicAssignment | None = None
    topic_name: str | None = None
    partition: tuple[str, int] | None = None
    partition_state: VersionedPartitionState | None = None
    controller: tuple[int, int] | None = None  # (node id, controller epoch)
    acls: bytes | None = None  # the ACL document (oncelog.broker.cluster.acls)


@dataclass(slots=True)
class MetadataImage:
    """A broker's view of the cluster metadata, as of ``revision`` of the store."""

    cluster_id: str = ""
    revision: int = 0
    brokers: dict[int, BrokerRegistration] = field(default_factory=dict)
    topics: dict[str, TopicAssignment] = field(default_factory=dict)
    partitions: dict[tuple[str, int], VersionedPartitionState] = field(default_factory=dict)
    controller: tuple[int, int] | None = None  # (node id, controller epoch)
    acls: bytes | None = None  # the ACL document as stored (oncelog.security.acl JSON)

    def apply(self, event: MetadataEvent) -> None:
        """Apply one watched change (events arrive in revision order)."""
        self.revision = max(self.revision, event.revision)
        if event.kind == "broker":
            if event.deleted:
                assert event.node_id is not None
                self.brokers.pop(event.node_id, None)
            else:
                assert event.broker is not None
                self.brokers[event.broker.node_id] = event.broker
        elif event.kind == "topic":
            if event.deleted:
                assert event.topic_name is not None
                self.topics.pop(event.topic_name, None)
                for key in [k for k in self.partitions if k[0] == event.topic_name]:
                    del self.partitions[key]
            else:
                assert event.topic is not None
                self.topics[event.topic.name] = event.topic
        elif event.kind == "partition":
            assert event.partition is not None
            if event.deleted:
                self.partitions.pop(event.partition, None)
            else:
                assert event.partition_state is not None
                self.partitions[event.partition] = event.partition_state
        elif event.kind == "controller":
            self.controller = None if event.deleted else event.controller
        elif event.kind == "acls":
            self.acls = None if event.deleted else event.acls
        else:
            raise ValueError(f"unknown metadata event kind {event.kind!r}")

    # -- queries -----------------------------------------------------------------------------
    def live_brokers(self) -> list[int]:
        return sorted(self.brokers)

    def replicas(self, topic: str, partition: int) -> tuple[int, ...]:
        assignment = self.topics.get(topic)
        if assignment is None or not 0 <= partition < assignment.partition_count:
            return ()
        return assignment.replicas[partition]

    def state(self, topic: str, partition: int) -> PartitionState | None:
        versioned = self.partitions.get((topic, partition))
        return None if versioned is None else versioned.state

    def leader(self, topic: str, partition: int) -> int:
        state = self.state(topic, partition)
        return NO_LEADER if state is None else state.leader

    def partitions_of(self, node_id: int) -> list[tuple[str, int]]:
        """The partitions ``node_id`` holds a replica of, sorted."""
        return sorted(
            (name, index)
            for name, assignment in self.topics.items()
            for index, replicas in enumerate(assignment.replicas)
            if node_id in replicas
        )


class MetadataStore(Protocol):
    """The consensus service as the brokers use it. Every method is a round trip to the
    service; errors of the service itself raise ``MetadataStoreError``."""

    async def cluster_id(self) -> str:
        """The cluster's id, created by the first broker to ask (compare-and-swap)."""
        ...

    async def register_broker(self, registration: BrokerRegistration) -> int:
        """Register this broker under a lease renewed every ``broker.heartbeat.interval.ms``
        and lost after ``broker.session.timeout.ms``; the broker epoch. Raises
        ``BrokerIdInUse`` when a live broker already holds the id. Called again after the
        session was lost, it registers under a new lease (a new broker epoch)."""
        ...

    async def update_registration(self, registration: BrokerRegistration) -> None:
        """Rewrite this broker's registration (same lease), e.g. ``shutting_down``."""
        ...

    async def campaign_controller(self, node_id: int) -> int | None:
        """Try to become the controller; the new controller epoch if this broker won,
        None if another live broker holds the role."""
        ...

    async def create_topic(
        self, topic: TopicAssignment, states: Mapping[int, PartitionState]
    ) -> bool:
        """Create a topic and the initial state of each partition atomically; False if a
        topic of that name exists."""
        ...

    async def delete_topic(self, name: str) -> bool: ...

    async def update_topic(self, topic: TopicAssignment) -> None:
        """Replace a topic's assignment or configs (CreatePartitions, AlterConfigs)."""
        ...

    async def compare_and_set_partition(
        self,
        topic: str,
        partition: int,
        state: PartitionState,
        expected_version: int,
        *,
        as_controller: tuple[int, int] | None = None,
    ) -> int | None:
        """Write ``state`` if the partition's version is still ``expected_version``; the
        new version, or None when another writer got there first. ``as_controller``
        ``(node id, controller epoch)``: the write also requires that this is still the
        live controller (a zombie controller's decisions are refused)."""
        ...

    async def allocate_producer_ids(self, count: int) -> int:
        """Reserve ``count`` producer ids for this broker; the first of them. No two calls,
        on any broker, ever get overlapping ranges."""
        ...

    async def load(self) -> MetadataImage:
        """Everything, as of one revision."""
        ...

    def watch(self, after_revision: int) -> AsyncIterator[MetadataEvent]:
        """Every change after ``after_revision``, in order, until the store is closed."""
        ...

    async def close(self) -> None:
        """Revoke this broker's lease (its registration and, if it holds them, the
        controller role disappear at once) and close the connection."""
        ...


class MetadataStoreError(RuntimeError):
    """The consensus service failed or could not be reached."""


class BrokerIdInUse(MetadataStoreError):
    """This node id is registered under a live lease (another broker, or this broker's
    previous life until its lease expires): ``expires_in_s`` is that lease's remaining
    time unless it is renewed (None if unknown), ``holder`` the address it registered."""

    def __init__(self, message: str, *, holder: str = "", expires_in_s: int | None = None
                 ) -> None:
        super().__init__(message)
        self.holder = holder
        self.expires_in_s = expires_in_s


class SessionLost(MetadataStoreError):
    """This broker's lease is gone (it was paused or cut off past
    ``broker.session.timeout.ms``): its registration and any controller role went with it;
    it must register again (a new broker epoch) before acting on the cluster."""
