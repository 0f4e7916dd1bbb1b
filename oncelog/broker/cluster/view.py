"""``EtcdClusterView``: the handlers' ClusterView in cluster mode, answering from this
broker's MetadataImage, and ``StoreTopicAdmin``: CreateTopics, DeleteTopics and
CreatePartitions written to the metadata store.

Every answer is read from the image (oncelog.cluster.metadata), which the store's watch
keeps up to date; nothing here decides leadership. Topic administration places replicas with
the controller's rules (oncelog.cluster.controller_decisions: Kafka's rack-unaware striped
placement over the registered brokers that are not shutting down), writes the topic and its
partitions' first states to the store in one transaction, and returns once this broker's
image shows the change, so a Metadata request that follows on this broker finds it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence

from oncelog.broker.cluster.metadata_cache import MetadataCache
from oncelog.broker.cluster_view import (
    NO_LEADER,
    TRANSACTION_KEY,
    BrokerEndpoint,
    CoordinatorLocation,
    PartitionLeadership,
    TopicAdmin,
    coordinator_partition,
)
from oncelog.broker.topic_catalog import TopicInfo, validate_topic_name
from oncelog.cluster import controller_decisions as decide
from oncelog.cluster.metadata import MetadataImage, MetadataStore, TopicAssignment
from oncelog.config import BrokerConfig, LogConfig
from oncelog.errors import ErrorCode, KafkaError
from oncelog.internal_topics import INTERNAL_TOPICS, OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC

__all__ = ["EtcdClusterView", "StoreTopicAdmin"]

log = logging.getLogger(__name__)

# How long an admin request waits for its own write to come back through the watch.
_SEEN_TIMEOUT_S = 10.0


def _info(assignment: TopicAssignment) -> TopicInfo:
    return TopicInfo(assignment.name, assignment.topic_id, assignment.partition_count,
                     dict(assignment.configs),
                     replication_factor=len(assignment.replicas[0]) if assignment.replicas
                     else 0)


class StoreTopicAdmin:
    """Topic administration over the metadata store, with Kafka's checks and codes."""

    def __init__(self, store: MetadataStore, cache: MetadataCache, config: BrokerConfig) -> None:
        self._store = store
        self._cache = cache
        self._config = config

    @property
    def _image(self) -> MetadataImage:
        return self._cache.image

    def _controller_epoch(self) -> int:
        controller = self._image.controller
        return 0 if controller is None else controller[1]

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
        validate_topic_name(name)
        if name in self._image.topics:
            raise KafkaError(ErrorCode.topic_already_exists, f"Topic '{name}' already exists.")
        LogConfig.resolve(self._config, configs)  # INVALID_CONFIG before anything is written
        manual: list[tuple[int, ...]] | None = None
        if assignments:
            if partitions != -1 or replication_factor != -1:
                raise KafkaError(ErrorCode.invalid_request, "Both numPartitions or "
                                 "replicationFactor and replicasAssignments were set. Both "
                                 "cannot be used at the same time.")
            ordered = sorted((int(i), tuple(r)) for i, r in assignments)
            if [i for i, _ in ordered] != list(range(len(ordered))):
                raise KafkaError(ErrorCode.invalid_replica_assignment,
                                 "Partitions should be a consecutive 0-based integer sequence")
            manual = [r for _, r in ordered]
            partitions, replication_factor = len(manual), len(manual[0])
        if partitions == -1:
            partitions = int(self._config["num.partitions"])
        if partitions <= 0:
            raise KafkaError(ErrorCode.invalid_partitions,
                             "Number of partitions was set to an invalid non-positive value.")
        if replication_factor == -1:
            replication_factor = int(self._config["default.replication.factor"])
        topic = decide.new_topic(
            self._image, name, partitions, replication_factor,
            controller_epoch=self._controller_epoch(), manual=manual, configs=configs,
        )
        if validate_only:
            return _info(topic.assignment)
        if not await self._store.create_topic(topic.assignment, topic.states):
            raise KafkaError(ErrorCode.topic_already_exists, f"Topic '{name}' already exists.")
        log.info("created topic %s: %d partitions, replicas %s", name, partitions,
                 [list(r) for r in topic.assignment.replicas])
        await self._cache.wait_for(lambda image: name in image.topics, _SEEN_TIMEOUT_S)
        return _info(topic.assignment)

    def _existing(self, name: str) -> TopicAssignment:
        assignment = self._image.topics.get(name)
        if assignment is None:
            raise KafkaError(ErrorCode.unknown_topic_or_partition,
                             "This server does not host this topic-partition.")
        return assignment

    async def delete_topic(self, name: str) -> None:
        assignment = self._existing(name)
        if name in INTERNAL_TOPICS:
            raise KafkaError(ErrorCode.invalid_topic_exception, f"cannot delete {name}")
        if not self._config["delete.topic.enable"]:
            raise KafkaError(ErrorCode.topic_deletion_disabled, "delete.topic.enable=false")
        if not await self._store.delete_topic(name):
            raise KafkaError(ErrorCode.unknown_topic_or_partition, f"unknown topic {name!r}")
        log.info("deleted topic %s (id %s)", name, assignment.topic_id)
        await self._cache.wait_for(lambda image: name not in image.topics, _SEEN_TIMEOUT_S)

    async def create_partitions(
        self,
        name: str,
        count: int,
        *,
        assignments: Sequence[Sequence[int]] | None,
        validate_only: bool,
    ) -> None:
        assignment = self._existing(name)
        if name in INTERNAL_TOPICS:
            raise KafkaError(ErrorCode.invalid_topic_exception, f"cannot resize {name}")
        current = assignment.partition_count
        if count <= current:
            raise KafkaError(ErrorCode.invalid_partitions,
                             f"Topic currently has {current} partitions, which is higher than "
                             f"or equal to the requested {count}.")
        added = count - current
        if assignments is not None:
            if len(assignments) != added:
                raise KafkaError(ErrorCode.invalid_replica_assignment,
                                 f"Increasing the number of partitions by {added} but "
                                 f"{len(assignments)} assignments provided.")
            placed = decide.new_topic(
                self._image, name, added, -1, controller_epoch=0,
                manual=[tuple(r) for r in assignments],
            ).assignment.replicas
        else:
            placed = tuple(decide.assign_added_partitions(
                assignment, added, decide.usable_brokers(self._image)))
        if validate_only:
            return
        states = decide.initial_states(placed, self._controller_epoch(), first_partition=current,
                                       image=self._image)
        for index, state in sorted(states.items()):
            await self._store.compare_and_set_partition(name, index, state, 0)
        grown = TopicAssignment(name, assignment.topic_id, assignment.replicas + tuple(placed),
                                assignment.configs)
        await self._store.update_topic(grown)
        log.info("topic %s grows to %d partitions: new replicas %s", name, count,
                 [list(r) for r in placed])
        await self._cache.wait_for(
            lambda image: name in image.topics and image.topics[name].partition_count >= count,
            _SEEN_TIMEOUT_S,
        )


class EtcdClusterView:
    """The ClusterView of one broker of a cluster, read from its MetadataImage."""

    def __init__(self, node_id: int, cache: MetadataCache, admin: TopicAdmin,
                 config: BrokerConfig, fenced: Callable[[], bool] = lambda: False) -> None:
        self._node_id = node_id
        self._cache = cache
        self._admin = admin
        self._config = config
        self._fenced = fenced  # the session is lost: this broker leads nothing

    @property
    def node_id(self) -> int:
        return self._node_id

    @property
    def admin(self) -> TopicAdmin:
        return self._admin

    @property
    def image(self) -> MetadataImage:
        return self._cache.image

    def brokers(self) -> Sequence[BrokerEndpoint]:
        return tuple(
            BrokerEndpoint(b.node_id, b.host, b.port, b.rack, b.listeners)
            for _, b in sorted(self.image.brokers.items())
        )

    def broker(self, node_id: int) -> BrokerEndpoint | None:
        b = self.image.brokers.get(node_id)
        return None if b is None else BrokerEndpoint(b.node_id, b.host, b.port, b.rack,
                                                     b.listeners)

    def controller_id(self) -> int:
        controller = self.image.controller
        return NO_LEADER if controller is None else controller[0]

    def partition(self, topic: str, index: int) -> PartitionLeadership | None:
        image = self.image
        replicas = image.replicas(topic, index)
        state = image.state(topic, index)
        if not replicas:
            return None
        if state is None:  # the topic is there, its partition state not yet
            return PartitionLeadership(NO_LEADER, -1, replicas, ())
        offline = tuple(r for r in replicas if r not in image.brokers)
        return PartitionLeadership(self._leader(topic, index), state.leader_epoch, replicas,
                                   state.isr, offline)

    def leads(self, topic: str, index: int) -> bool:
        return self._leader(topic, index) == self._node_id

    def _leader(self, topic: str, index: int) -> int:
        """The image's leader, except that a fenced broker names nobody where the (maybe
        stale) image names itself, so clients look for the leader elsewhere."""
        leader = self.image.leader(topic, index)
        return NO_LEADER if leader == self._node_id and self._fenced() else leader

    def coordinator(self, key_type: int, key: str) -> CoordinatorLocation:
        topic = TRANSACTION_STATE_TOPIC if key_type == TRANSACTION_KEY else OFFSETS_TOPIC
        assignment = self.image.topics.get(topic)
        if assignment is None:  # not created yet (the controller waits for enough brokers)
            name = ("transaction.state.log.num.partitions" if key_type == TRANSACTION_KEY
                    else "offsets.topic.num.partitions")
            index = coordinator_partition(int(self._config[name]), key)
            return CoordinatorLocation(topic, index, NO_LEADER)
        index = coordinator_partition(assignment.partition_count, key)
        return CoordinatorLocation(topic, index, self._leader(topic, index))
