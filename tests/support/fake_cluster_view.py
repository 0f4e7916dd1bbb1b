"""A ClusterView for handler unit tests: a fixed set of brokers and partition states, with
this node leading only what the test says, so the handlers' answers for partitions and
coordinators led elsewhere (NOT_LEADER_OR_FOLLOWER, NOT_COORDINATOR, KIP-951 leaders) can be
checked without a cluster."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from oncelog.broker.cluster_view import (
    NO_LEADER,
    BrokerEndpoint,
    CoordinatorLocation,
    PartitionLeadership,
    TopicAdmin,
    coordinator_partition,
)
from oncelog.internal_topics import OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC

ME = 1
OTHER = 2


def endpoints(*node_ids: int) -> dict[int, BrokerEndpoint]:
    return {n: BrokerEndpoint(n, f"broker{n}.example", 9090 + n, f"rack{n}") for n in node_ids}


@dataclass
class FakeClusterView:
    """``partitions`` maps (topic, index) to its leadership; a partition not listed is
    unknown. ``coordinator_leader`` leads every coordinator partition (default: this
    node); ``admin`` is whatever the test needs (unused by most)."""

    node_id: int = ME
    endpoints: dict[int, BrokerEndpoint] = field(default_factory=lambda: endpoints(ME, OTHER))
    partitions: dict[tuple[str, int], PartitionLeadership] = field(default_factory=dict)
    controller: int = OTHER
    coordinator_leader: int = ME
    txn_coordinator_leader: int | None = None  # transactional ids' coordinator, if not the above
    coordinator_partitions: Mapping[str, int] = field(
        default_factory=lambda: {OFFSETS_TOPIC: 50, TRANSACTION_STATE_TOPIC: 50}
    )
    admin: TopicAdmin = field(default_factory=lambda: _no_admin())
    lead_everything: bool = False  # every partition exists, led by this node at epoch 0

    def lead(self, topic: str, index: int, leader: int, epoch: int = 5) -> None:
        replicas = tuple(sorted({ME, OTHER}))
        self.partitions[(topic, index)] = PartitionLeadership(
            leader, epoch, replicas, replicas if leader != NO_LEADER else (),
        )

    def brokers(self) -> Sequence[BrokerEndpoint]:
        return [self.endpoints[n] for n in sorted(self.endpoints)]

    def broker(self, node_id: int) -> BrokerEndpoint | None:
        return self.endpoints.get(node_id)

    def controller_id(self) -> int:
        return self.controller

    def partition(self, topic: str, index: int) -> PartitionLeadership | None:
        if self.lead_everything:
            return PartitionLeadership(self.node_id, 0, (self.node_id,), (self.node_id,))
        return self.partitions.get((topic, index))

    def leads(self, topic: str, index: int) -> bool:
        state = self.partition(topic, index)
        return state is not None and state.leader == self.node_id

    def coordinator(self, key_type: int, key: str) -> CoordinatorLocation:
        topic = TRANSACTION_STATE_TOPIC if key_type == 1 else OFFSETS_TOPIC
        index = coordinator_partition(self.coordinator_partitions[topic], key)
        leader = self.coordinator_leader
        if key_type == 1 and self.txn_coordinator_leader is not None:
            leader = self.txn_coordinator_leader
        return CoordinatorLocation(topic, index, leader)


def _no_admin() -> Any:
    return None


def coordinating(node_id: int, host: str, port: int) -> FakeClusterView:
    """One live broker that coordinates every group and transactional id and leads every
    partition (the handlers' checks pass; what they check is up to the test's fakes)."""
    return FakeClusterView(
        node_id=node_id, endpoints={node_id: BrokerEndpoint(node_id, host, port)},
        controller=node_id, coordinator_leader=node_id, lead_everything=True,
    )
