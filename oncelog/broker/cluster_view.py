"""The handlers' view of the cluster: who the brokers are, who leads which partition and
which coordinator, and how topics are created and deleted.

Handlers never decide leadership themselves: Metadata, DescribeCluster,
DescribeTopicPartitions, FindCoordinator and ElectLeaders answer from a ``ClusterView``;
the data path (Produce, Fetch, ListOffsets, DeleteRecords, DescribeProducers,
WriteTxnMarkers) refuses a partition this broker does not lead with NOT_LEADER_OR_FOLLOWER
(``check_leader``), and the coordinator APIs refuse a key whose coordinator partition it
does not lead with NOT_COORDINATOR (``coordinator_error``). Topic administration goes
through the view's ``admin`` (``TopicAdmin``; async, since a cluster writes it to the
metadata store).

``LocalClusterView`` is the single node: one live broker, itself the controller, leading
every partition it holds (Kafka's answers for a one-broker KRaft cluster). The cluster
implementation answers from the broker's ``MetadataImage`` (oncelog.cluster.metadata).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from oncelog.cluster.replica_assignment import added_partitions_assignment, topic_assignment
from oncelog.coordinator.group.codec import partition_for
from oncelog.errors import ErrorCode, KafkaError
from oncelog.internal_topics import OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC

if TYPE_CHECKING:
    from oncelog.broker.partitions import PartitionRegistry, TopicInfo

log = logging.getLogger(__name__)

NO_LEADER = -1
# FindCoordinator's key types.
GROUP_KEY = 0
TRANSACTION_KEY = 1


@dataclass(frozen=True, slots=True)
class BrokerEndpoint:
    """A live broker as clients reach it (Metadata, DescribeCluster, KIP-951 endpoints)."""

    node_id: int
    host: str
    port: int
    rack: str | None = None
    # Every advertised listener (name, host, port); empty: one endpoint for all listeners.
    listeners: tuple[tuple[str, str, int], ...] = ()

    def on(self, listener: str) -> BrokerEndpoint | None:
        """This broker as reached on ``listener`` (Kafka's Node of that listener); None if
        the broker does not advertise it."""
        if not self.listeners:
            return self
        for name, host, port in self.listeners:
            if name == listener:
                return BrokerEndpoint(self.node_id, host, port, self.rack, self.listeners)
        return None


def brokers_on(view: ClusterView, listener: str) -> list[BrokerEndpoint]:
    """The live brokers that advertise ``listener``, at its endpoints (Kafka's
    getAliveBrokerNodes(listenerName)): Metadata and DescribeCluster list these."""
    return [e for b in view.brokers() if (e := b.on(listener)) is not None]


def broker_on(view: ClusterView, node_id: int, listener: str) -> BrokerEndpoint | None:
    """Live broker ``node_id`` at its ``listener`` endpoint; None if it is not alive or
    lacks that listener (Kafka's getAliveBrokerNode(id, listenerName))."""
    broker = view.broker(node_id)
    return None if broker is None else broker.on(listener)


@dataclass(frozen=True, slots=True)
class PartitionLeadership:
    """One partition as Metadata describes it: ``leader`` is NO_LEADER while none is
    available; ``offline_replicas`` are replicas whose log cannot be served."""

    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline_replicas: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class CoordinatorLocation:
    """Where a group or transactional id is coordinated: the internal topic's partition
    holding it and that partition's leader (NO_LEADER if none)."""

    topic: str
    partition: int
    leader: int


class TopicAdmin(Protocol):
    """CreateTopics, DeleteTopics and CreatePartitions, with Kafka's checks. Errors are
    KafkaError with Kafka's codes and messages."""

    async def create_topic(
        self,
        name: str,
        partitions: int,
        configs: Mapping[str, str],
        *,
        replication_factor: int,
        assignments: Sequence[tuple[int, Sequence[int]]] | None,
        validate_only: bool,
    ) -> TopicInfo:
        """Create a topic: ``partitions``/``replication_factor`` -1 mean the broker
        defaults; ``assignments`` (partition index, replicas) is a manual assignment (then
        both must be -1)."""
        ...

    async def delete_topic(self, name: str) -> None: ...

    async def create_partitions(
        self,
        name: str,
        count: int,
        *,
        assignments: Sequence[Sequence[int]] | None,
        validate_only: bool,
    ) -> None:
        """Grow a topic to ``count`` partitions; ``assignments`` are the new partitions'
        replicas (one list per added partition)."""
        ...


class ClusterView(Protocol):
    """What request handlers ask about the cluster (see the module docstring)."""

    @property
    def node_id(self) -> int:
        """This broker."""
        ...

    @property
    def admin(self) -> TopicAdmin: ...

    def brokers(self) -> Sequence[BrokerEndpoint]:
        """The live brokers, by node id."""
        ...

    def broker(self, node_id: int) -> BrokerEndpoint | None:
        """A live broker; None if ``node_id`` is not one."""
        ...

    def controller_id(self) -> int:
        """The active controller; NO_LEADER while there is none."""
        ...

    def partition(self, topic: str, index: int) -> PartitionLeadership | None:
        """A partition's leadership; None if the topic or partition does not exist."""
        ...

    def leads(self, topic: str, index: int) -> bool:
        """Whether this broker is the leader of ``topic``-``index``."""
        ...

    def coordinator(self, key_type: int, key: str) -> CoordinatorLocation:
        """The coordinator partition of a group (GROUP_KEY) or transactional id
        (TRANSACTION_KEY), and its leader."""
        ...


def coordinator_partition(num_partitions: int, key: str) -> int:
    """The internal-topic partition of a group id or transactional id: Kafka's
    ``Utils.abs(key.hashCode) % partitions`` for both coordinators."""
    return partition_for(key, num_partitions)


def check_leader(view: ClusterView, topic: str, index: int) -> None:
    """Raise UNKNOWN_TOPIC_OR_PARTITION for a partition that does not exist and
    NOT_LEADER_OR_FOLLOWER for one this broker does not lead (Kafka's
    ``ReplicaManager.getPartitionOrError`` for the data path)."""
    if view.partition(topic, index) is None:
        raise KafkaError(ErrorCode.unknown_topic_or_partition, f"{topic}-{index}")
    if not view.leads(topic, index):
        raise KafkaError(
            ErrorCode.not_leader_or_follower,
            f"broker {view.node_id} is not the leader of {topic}-{index}",
        )


def coordinator_error(view: ClusterView, key_type: int, key: str) -> ErrorCode:
    """NOT_COORDINATOR when this broker does not lead the coordinator partition of
    ``key``; NONE when it does."""
    if view.coordinator(key_type, key).leader == view.node_id:
        return ErrorCode.none
    return ErrorCode.not_coordinator


class LocalTopicAdmin:
    """Topic administration on one node: the partition registry, with the manual
    assignment checks of ``oncelog.cluster.replica_assignment`` (the only live broker is
    this one)."""

    def __init__(self, registry: PartitionRegistry, node_id: int) -> None:
        self._registry = registry
        self._live = frozenset((node_id,))

    async def create_topic(
        self,
        name: str,
        partitions: int,
        configs: Mapping[str, str],
        *,
        replication_factor: int,
        assignments: Sequence[tuple[int, Sequence[int]]] | None,
        validate_only: bool,
    ) -> TopicInfo:
        if assignments:
            partitions, _ = topic_assignment(
                assignments, partitions, replication_factor, self._live
            )
            replication_factor = -1
        return self._registry.create_topic(
            name, partitions, configs,
            replication_factor=replication_factor, validate_only=validate_only,
        )

    async def delete_topic(self, name: str) -> None:
        self._registry.delete_topic(name)

    async def create_partitions(
        self,
        name: str,
        count: int,
        *,
        assignments: Sequence[Sequence[int]] | None,
        validate_only: bool,
    ) -> None:
        if assignments is not None:
            self._registry.create_partitions(name, count, validate_only=True)
            added_partitions_assignment(
                assignments,
                count - self._registry.topics[name].partitions,
                1,  # every partition has this node as its one replica
                self._live,
            )
        self._registry.create_partitions(name, count, validate_only=validate_only)


class LocalClusterView:
    """One node: the only live broker, the controller, and the leader of every partition
    it holds. A partition whose log is offline has no leader (its replica is offline), as
    DescribeTopicPartitions always said; the data path still reaches it, and answers
    KAFKA_STORAGE_ERROR."""

    def __init__(self, node: BrokerEndpoint, registry: PartitionRegistry) -> None:
        self._node = node
        self._registry = registry
        self._admin = LocalTopicAdmin(registry, node.node_id)

    @property
    def node_id(self) -> int:
        return self._node.node_id

    @property
    def admin(self) -> TopicAdmin:
        return self._admin

    def brokers(self) -> Sequence[BrokerEndpoint]:
        return (self._node,)

    def broker(self, node_id: int) -> BrokerEndpoint | None:
        return self._node if node_id == self._node.node_id else None

    def controller_id(self) -> int:
        return self._node.node_id

    def partition(self, topic: str, index: int) -> PartitionLeadership | None:
        info = self._registry.topics.get(topic)
        if info is None or not 0 <= index < info.partitions:
            return None
        me = self._node.node_id
        held = self._registry.find(topic, index)
        if held is None or held.offline is not None:
            return PartitionLeadership(NO_LEADER, self.leader_epoch(topic, index), (me,), (),
                                       (me,))
        return PartitionLeadership(me, self.leader_epoch(topic, index), (me,), (me,))

    def leader_epoch(self, topic: str, index: int) -> int:
        """The partition engine's leader epoch (0 on one node: it never changes leader)."""
        held = self._registry.find(topic, index)
        return -1 if held is None else held.leader_epoch

    def leads(self, topic: str, index: int) -> bool:
        return self.partition(topic, index) is not None

    def coordinator(self, key_type: int, key: str) -> CoordinatorLocation:
        config = self._registry.config
        if key_type == TRANSACTION_KEY:
            topic = TRANSACTION_STATE_TOPIC
            count = int(config["transaction.state.log.num.partitions"])
        else:
            topic = OFFSETS_TOPIC
            count = int(config["offsets.topic.num.partitions"])
        return CoordinatorLocation(topic, coordinator_partition(count, key), self._node.node_id)
