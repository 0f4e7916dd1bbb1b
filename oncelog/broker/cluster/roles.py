"""This broker's replicas and their roles, materialised from the metadata image.

The metadata image (``MetadataCache``) is the only place leadership is decided. On every
change of it, ``ReplicaRoles.reconcile`` makes the local state agree with it:

- every topic of the cluster is listed in the partition registry (id, partition count,
  configs), so handlers know every topic, whichever broker they ask; a topic that left the
  image is forgotten and its local replicas deleted (Kafka's StopReplica with delete);
- each partition this broker is a replica of is opened (created empty the first time),
  and one it no longer is a replica of is deleted;
- a partition whose ``(leader, leader_epoch)`` changed gets its role applied: the engine's
  ``become_leader(epoch)`` when this broker leads it, else ``become_follower(epoch)``
  (Kafka's ReplicaManager.makeLeaders / makeFollowers from a LeaderAndIsr request); then
  the ``ReplicationHooks`` are told, which is where replication (the follower's fetcher,
  the leader's ISR tracking) starts and stops.

The engine's leader epoch is the partition's leader epoch in the image: batches a leader
appends carry it, and a follower refuses client appends (NOT_LEADER_OR_FOLLOWER).

While ``fenced`` (this broker's session with the metadata store is lost: the controller may
be moving its leaderships away right now), every local replica is a follower of nobody at
its current leader epoch, whatever the image says, so this broker takes no write nobody else
will have; the image's roles apply again once it is unfenced (registered again).
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from typing import Protocol

from oncelog.broker.partitions import Partition, PartitionRegistry, TopicInfo
from oncelog.cluster.metadata import (
    NO_LEADER,
    MetadataEvent,
    MetadataImage,
    TopicAssignment,
    VersionedPartitionState,
)

__all__ = ["LoggingReplicationHooks", "ReplicaRoles", "ReplicationHooks", "Role"]

log = logging.getLogger(__name__)


class ReplicationHooks(Protocol):
    """What replication does when a local replica changes role (h/replication implements
    it: the leader's follower tracking and the follower's fetcher). Called on the event
    loop, synchronously, after the engine has taken the new role; long work belongs in the
    implementer's own tasks."""

    def on_become_leader(
        self, partition: Partition, state: VersionedPartitionState, replicas: tuple[int, ...]
    ) -> None:
        """This broker leads ``partition`` at ``state.state.leader_epoch``."""
        ...

    def on_become_follower(
        self, partition: Partition, state: VersionedPartitionState, leader_id: int
    ) -> None:
        """This broker follows ``leader_id`` (NO_LEADER: the partition has no leader now)."""
        ...

    def on_stop_replica(self, partition: Partition, deleted: bool) -> None:
        """This broker no longer holds ``partition`` (``deleted``: its log is gone)."""
        ...


class LoggingReplicationHooks:
    """The default hooks until replication is wired: one log line per role change."""

    def on_become_leader(
        self, partition: Partition, state: VersionedPartitionState, replicas: tuple[int, ...]
    ) -> None:
        log.info("leading %s at leader epoch %d, replicas %s, isr %s", partition.name,
                 state.state.leader_epoch, list(replicas), list(state.state.isr))

    def on_become_follower(
        self, partition: Partition, state: VersionedPartitionState, leader_id: int
    ) -> None:
        log.info("following broker %d for %s at leader epoch %d", leader_id, partition.name,
                 state.state.leader_epoch)

    def on_stop_replica(self, partition: Partition, deleted: bool) -> None:
        log.info("stopped replica %s (deleted: %s)", partition.name, deleted)


@dataclass(frozen=True, slots=True)
class Role:
    """The role last applied to a local replica."""

    leader: int
    leader_epoch: int


class ReplicaRoles:
    """Keeps this broker's partition registry and replica roles in step with the image."""

    def __init__(
        self,
        node_id: int,
        registry: PartitionRegistry,
        hooks: ReplicationHooks | None = None,
    ) -> None:
        self.node_id = node_id
        self.registry = registry
        self.hooks: ReplicationHooks = hooks or LoggingReplicationHooks()
        self.roles: dict[tuple[str, int], Role] = {}
        self.fenced = False

    def on_metadata(self, event: MetadataEvent | None, image: MetadataImage) -> None:
        """A MetadataCache listener: topic and partition changes (or a reload) reconcile."""
        if event is None or event.kind in ("topic", "partition"):
            self.reconcile(image)

    def led(self) -> list[tuple[str, int]]:
        """The partitions this broker currently leads (as last applied)."""
        return sorted(k for k, role in self.roles.items() if role.leader == self.node_id)

    def reconcile(self, image: MetadataImage) -> None:
        for name in [n for n in self.registry.topics if n not in image.topics]:
            self._drop_topic(name)
        for assignment in image.topics.values():
            self._put_topic(assignment)
        mine = set(image.partitions_of(self.node_id))
        for key in [k for k in self._held() if k not in mine]:
            self._stop(key, deleted=True)
        for topic, index in sorted(mine):
            versioned = image.partitions.get((topic, index))
            partition = self.registry.open_replica(topic, index)
            if versioned is not None:
                self._maybe_apply_role(partition, versioned, image.replicas(topic, index))

    def _held(self) -> list[tuple[str, int]]:
        return [(p.topic, p.index) for p in self.registry.partitions()]

    def _put_topic(self, assignment: TopicAssignment) -> None:
        info = self.registry.topics.get(assignment.name)
        if info is not None and info.topic_id != assignment.topic_id:
            log.info("topic %s was recreated (id %s, was %s): dropping the old replicas",
                     assignment.name, assignment.topic_id, info.topic_id)
            self._drop_topic(assignment.name)
            info = None
        wanted = TopicInfo(assignment.name, assignment.topic_id, assignment.partition_count,
                           dict(assignment.configs))
        if info is None or (info.partitions, info.configs) != (wanted.partitions,
                                                                wanted.configs):
            self.registry.put_topic(wanted)

    def _drop_topic(self, name: str) -> None:
        for key in [k for k in self._held() if k[0] == name]:
            self._stop(key, deleted=True)
        self.registry.forget_topic(name)

    def _stop(self, key: tuple[str, int], *, deleted: bool) -> None:
        self.roles.pop(key, None)
        partition = self.registry.remove_replica(*key, delete=deleted)
        if partition is not None:
            self.hooks.on_stop_replica(partition, deleted)

    def _maybe_apply_role(
        self, partition: Partition, versioned: VersionedPartitionState, replicas: tuple[int, ...]
    ) -> None:
        state = versioned.state
        if self.fenced:
            state = dataclasses.replace(state, leader=NO_LEADER)
            versioned = dataclasses.replace(versioned, state=state)
        role = Role(state.leader, state.leader_epoch)
        key = (partition.topic, partition.index)
        if self.roles.get(key) == role:
            return
        if partition.offline is not None:
            log.warning("replica %s is offline: leader epoch %d not applied", partition.name,
                        state.leader_epoch)
            return
        self.roles[key] = role
        if state.leader == self.node_id:
            partition.log.become_leader(state.leader_epoch)
            self.hooks.on_become_leader(partition, versioned, replicas)
        else:
            partition.log.become_follower(state.leader_epoch)
            self.hooks.on_become_follower(partition, versioned, state.leader)
        if state.leader == NO_LEADER:
            log.warning("%s has no leader at leader epoch %d", partition.name,
                        state.leader_epoch)
