"""ReplicaRoles: the registry and the replicas' roles follow the metadata image."""

from __future__ import annotations

import uuid
from pathlib import Path

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
