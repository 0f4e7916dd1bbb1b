"""ReplicaRoles: the registry and the replicas' roles follow the metadata image; the
coordinators (CoordinatorRoles) follow the roles of their internal topic."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

from oncelog.broker.cluster.coordinator_roles import (
    CoordinatorRoles,
    GroupCoordinatorRoles,
    TxnCoordinatorRoles,
)
from oncelog.broker.cluster.roles import ReplicaRoles
from oncelog.broker.partitions import Partition, PartitionRegistry
from oncelog.clock import FakeClock
from oncelog.cluster.metadata import (
    MetadataImage,
    PartitionState,
    TopicAssignment,
    VersionedPartitionState,
)
from oncelog.config import BrokerConfig
from oncelog.internal_topics import OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC

ME = 1


class RecordingHooks:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str, int]] = []

    def on_become_leader(self, partition: Partition, state: VersionedPartitionState,
                         replicas: tuple[int, ...]) -> None:
        self.calls.append(("leader", partition.name, state.state.leader_epoch))

    def on_become_follower(self, partition: Partition, state: VersionedPartitionState,
                           leader_id: int) -> None:
        self.calls.append(("follower", partition.name, leader_id))

    def on_stop_replica(self, partition: Partition, deleted: bool) -> None:
        self.calls.append(("stop", partition.name, int(deleted)))


def image_with(topic: TopicAssignment, leaders: dict[int, tuple[int, int]]) -> MetadataImage:
    image = MetadataImage(cluster_id="c")
    image.topics[topic.name] = topic
    for index, (leader, epoch) in leaders.items():
        isr = topic.replicas[index]
        image.partitions[(topic.name, index)] = VersionedPartitionState(
            PartitionState(leader, epoch, isr), version=epoch + 1)
    return image


def setup(tmp_path: Path) -> tuple[PartitionRegistry, ReplicaRoles, RecordingHooks]:
    registry = PartitionRegistry(tmp_path, BrokerConfig(), FakeClock())
    registry.hosted_only = True
    registry.load()
    hooks = RecordingHooks()
    return registry, ReplicaRoles(ME, registry, hooks), hooks


TOPIC = TopicAssignment("t", uuid.uuid4(), ((1, 2), (2, 3), (3, 1)), {"retention.ms": "1000"})


def test_opens_only_own_replicas_and_lists_every_topic(tmp_path: Path) -> None:
    registry, roles, hooks = setup(tmp_path)
    roles.reconcile(image_with(TOPIC, {0: (1, 0), 1: (2, 0), 2: (3, 0)}))
    assert registry.topics["t"].partitions == 3
    assert registry.topics["t"].configs == {"retention.ms": "1000"}
    assert sorted(p.name for p in registry.partitions()) == ["t-0", "t-2"]
    assert registry.get("t", 0).log.is_leader and registry.get("t", 0).leader_epoch == 0
    assert not registry.get("t", 2).log.is_leader
    assert hooks.calls == [("leader", "t-0", 0), ("follower", "t-2", 3)]
    assert roles.led() == [("t", 0)]


def test_role_changes_apply_once_per_leader_epoch(tmp_path: Path) -> None:
    registry, roles, hooks = setup(tmp_path)
    roles.reconcile(image_with(TOPIC, {0: (1, 0), 2: (3, 0)}))
    roles.reconcile(image_with(TOPIC, {0: (1, 0), 2: (3, 0)}))  # nothing changed
    roles.reconcile(image_with(TOPIC, {0: (2, 1), 2: (1, 4)}))
    assert hooks.calls[2:] == [("follower", "t-0", 2), ("leader", "t-2", 4)]
    assert registry.get("t", 0).leader_epoch == 1
    assert registry.get("t", 2).log.is_leader and registry.get("t", 2).leader_epoch == 4
    assert roles.led() == [("t", 2)]


def test_fenced_broker_leads_nothing_until_unfenced(tmp_path: Path) -> None:
    registry, roles, hooks = setup(tmp_path)
    image = image_with(TOPIC, {0: (1, 3), 2: (3, 0)})
    roles.reconcile(image)
    roles.fenced = True  # the session is lost: the image may be stale
    roles.reconcile(image)
    assert hooks.calls[2:] == [("follower", "t-0", -1), ("follower", "t-2", -1)]
    assert not registry.get("t", 0).log.is_leader and registry.get("t", 0).leader_epoch == 3
    assert roles.led() == []
    roles.fenced = False  # registered again: the image's roles come back
    roles.reconcile(image)
    assert hooks.calls[4:] == [("leader", "t-0", 3), ("follower", "t-2", 3)]
    assert registry.get("t", 0).log.is_leader and roles.led() == [("t", 0)]


def test_deleted_topic_removes_replicas_and_catalog_entry(tmp_path: Path) -> None:
    registry, roles, hooks = setup(tmp_path)
    roles.reconcile(image_with(TOPIC, {0: (1, 0), 2: (3, 0)}))
    roles.reconcile(MetadataImage(cluster_id="c"))
    assert "t" not in registry.topics and list(registry.partitions()) == []
    assert sorted(hooks.calls[2:]) == [("stop", "t-0", 1), ("stop", "t-2", 1)]
    assert not (tmp_path / "t-0").exists()


def test_restart_reopens_only_hosted_directories(tmp_path: Path) -> None:
    registry, roles, _ = setup(tmp_path)
    roles.reconcile(image_with(TOPIC, {0: (1, 0), 2: (3, 0)}))
    registry.close()
    again = PartitionRegistry(tmp_path, BrokerConfig(), FakeClock())
    again.hosted_only = True
    again.load()
    assert sorted(p.name for p in again.partitions()) == ["t-0", "t-2"]
    reopened = again.get("t", 0)
    # No role until the metadata gives one: neither leader nor at a guessed epoch.
    assert not reopened.log.is_leader and reopened.leader_epoch == -1
    again.close()


def test_recreated_topic_drops_old_replicas(tmp_path: Path) -> None:
    registry, roles, hooks = setup(tmp_path)
    roles.reconcile(image_with(TOPIC, {0: (1, 0), 2: (3, 0)}))
    recreated = TopicAssignment("t", uuid.uuid4(), ((1,),))
    roles.reconcile(image_with(recreated, {0: (1, 0)}))
    assert registry.topics["t"].topic_id == recreated.topic_id
    assert sorted(p.name for p in registry.partitions()) == ["t-0"]
    assert hooks.calls[-1] == ("leader", "t-0", 0)


class FakeCoordinator:
    """Owns what it was told to load; records every call."""

    def __init__(self) -> None:
        self.owned: dict[int, int] = {}
        self.calls: list[tuple[str, int]] = []

    def owned_partitions(self) -> dict[int, int]:
        return dict(self.owned)

    def begin_loading(self, partition: int) -> None:
        self.calls.append(("begin", partition))

    def load_partition(self, partition: int, coordinator_epoch: int) -> int:
        self.owned[partition] = coordinator_epoch
        self.calls.append(("load", partition))
        return 0

    def unload_partition(self, partition: int) -> int:
        self.owned.pop(partition, None)
        self.calls.append(("unload", partition))
        return 0


def internal_image() -> MetadataImage:
    """Both internal topics: partition 0 led here at epoch 2, partition 1 led by broker 2."""
    image = MetadataImage(cluster_id="c")
    for name in (OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC):
        topic = TopicAssignment(name, uuid.uuid4(), ((ME, 2), (2, ME)), {})
        image.topics[name] = topic
        image.partitions.update(image_with(topic, {0: (ME, 2), 1: (2, 2)}).partitions)
    return image


def test_a_fenced_broker_unloads_both_coordinators_until_unfenced(tmp_path: Path) -> None:
    async def scenario() -> None:
        _, roles, _ = setup(tmp_path)
        image = internal_image()
        txn, group = FakeCoordinator(), FakeCoordinator()
        followers: list[CoordinatorRoles] = [TxnCoordinatorRoles(roles, txn),
                                             GroupCoordinatorRoles(roles, group)]

        async def notify() -> None:  # MetadataCache.renotify: roles first, then followers
            roles.on_metadata(None, image)
            for follower in followers:
                follower.on_metadata(None, image)
            await asyncio.sleep(0)  # the loads run in a later loop callback

        await notify()
        assert txn.owned == group.owned == {0: 2}
        roles.fenced = True  # the session is lost
        await notify()
        assert txn.owned == group.owned == {}
        assert txn.calls[-1] == group.calls[-1] == ("unload", 0)
        roles.fenced = False  # registered again
        await notify()
        assert txn.owned == group.owned == {0: 2}

    asyncio.run(scenario())
