"""The coordinators follow the leadership of their internal topics.

A MetadataCache listener, subscribed after ``ReplicaRoles`` (so the roles it reads are the
image's): for every partition of the coordinator's topic this broker leads, the coordinator
owns that partition at its leader epoch (the coordinator epoch); for one it stopped leading,
the coordinator unloads it (Kafka's onElection / onResignation of the TransactionCoordinator
for ``__transaction_state`` and of the GroupCoordinator for ``__consumer_offsets``). Loading
is marked at once (the partition's keys answer COORDINATOR_LOAD_IN_PROGRESS) and done in a
later loop callback, after the replica has taken its role; a partition led again at a newer
epoch is reloaded.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol

from oncelog.broker.cluster.roles import ReplicaRoles
from oncelog.cluster.metadata import MetadataEvent, MetadataImage
from oncelog.errors import KafkaError
from oncelog.internal_topics import OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC

__all__ = ["CoordinatorRoles", "GroupCoordinatorRoles", "PartitionedCoordinator",
           "TxnCoordinatorRoles"]

log = logging.getLogger(__name__)


class PartitionedCoordinator(Protocol):
    """What both coordinators offer to follow their topic's leadership."""

    def owned_partitions(self) -> dict[int, int]: ...

    def begin_loading(self, partition: int) -> None: ...

    def load_partition(self, partition: int, coordinator_epoch: int) -> int: ...

    def unload_partition(self, partition: int) -> int: ...


class CoordinatorRoles:
    def __init__(self, roles: ReplicaRoles, coordinator: PartitionedCoordinator,
                 topic: str) -> None:
        self.roles = roles
        self.coordinator = coordinator
        self.topic = topic
        self._loading: dict[int, int] = {}  # partition -> the epoch it is being loaded at

    def led(self) -> dict[int, int]:
        """The partitions of the topic this broker leads, with leader epochs."""
        return {
            index: role.leader_epoch
            for (topic, index), role in self.roles.roles.items()
            if topic == self.topic and role.leader == self.roles.node_id
        }

    def on_metadata(self, event: MetadataEvent | None, image: MetadataImage) -> None:
        if event is not None and event.kind not in ("topic", "partition"):
            return
        self.apply()

    def apply(self) -> None:
        led = self.led()
        owned = self.coordinator.owned_partitions()
        for partition in sorted(set(owned) | set(self._loading)):
            if partition not in led:
                self._loading.pop(partition, None)
                self.coordinator.unload_partition(partition)
        for partition, epoch in sorted(led.items()):
            if owned.get(partition) == epoch or self._loading.get(partition) == epoch:
                continue
            self._loading[partition] = epoch
            self.coordinator.begin_loading(partition)
            asyncio.get_running_loop().call_soon(self._load, partition, epoch)

    def _load(self, partition: int, epoch: int) -> None:
        if self._loading.get(partition) != epoch:
            return  # led at another epoch since, or not any more
        del self._loading[partition]
        try:
            self.coordinator.load_partition(partition, epoch)
        except (KafkaError, OSError) as exc:
            log.error("loading %s-%d at coordinator epoch %d failed: %s; its keys stay "
                      "NOT_COORDINATOR here", self.topic, partition, epoch, exc)
            self.coordinator.unload_partition(partition)


class TxnCoordinatorRoles(CoordinatorRoles):
    """The transaction coordinator follows ``__transaction_state``."""

    def __init__(self, roles: ReplicaRoles, coordinator: PartitionedCoordinator) -> None:
        super().__init__(roles, coordinator, TRANSACTION_STATE_TOPIC)


class GroupCoordinatorRoles(CoordinatorRoles):
    """The group coordinator follows ``__consumer_offsets``."""

    def __init__(self, roles: ReplicaRoles, coordinator: PartitionedCoordinator) -> None:
        super().__init__(roles, coordinator, OFFSETS_TOPIC)
