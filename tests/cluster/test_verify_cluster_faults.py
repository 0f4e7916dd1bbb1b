"""The verify fault injector's cluster kinds (oncelog/verify/nemesis.py) against a
ClusterDeployment (oncelog/verify/spawn.py): a leader-kill kills the partition's leader, a
coordinator-kill the transactional id's coordinator, a partition isolates a broker (its
leaderships move); each heal brings the cluster back to serving."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from oncelog.verify.faults import PlannedFault, choose, partition_mode
from oncelog.verify.history import Fault, split_tp
from oncelog.verify.nemesis import ActiveFault, Nemesis
from oncelog.verify.spawn import ClusterDeployment

TOPIC = "verify-cluster-faults"
TXID = "verify-cluster-faults-tx"


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterDeployment]:
    cluster = ClusterDeployment(tmp_path_factory.mktemp("verify-cluster"))
    try:
        with cluster.cluster.reach():
            admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
            admin.create_topics([NewTopic(TOPIC, 3, 3)])[TOPIC].result(30)
        cluster.cluster.wait_until(lambda m: len(m.topics.get(TOPIC, {})) == 3, "the topic")
        yield cluster
    finally:
        cluster.close()


def nemesis(deployment: ClusterDeployment) -> Nemesis:
    return Nemesis([], deployment, None, started_at=time.time(), topics=[TOPIC],
                   transactional_ids=[TXID])


def healed(deployment: ClusterDeployment, nem: Nemesis, active: ActiveFault) -> Fault:
    recorded: list[Fault] = []
    nem.end(active, recorded.append)
    assert recorded and recorded[0].end is not None
    assert all(b.is_running for b in deployment.cluster.brokers.values())
    view = deployment.metadata()
    assert len(view.brokers) == len(deployment.broker_ids)
    return recorded[0]


def test_leader_kill_kills_the_leader(deployment: ClusterDeployment) -> None:
    nem = nemesis(deployment)
    before = deployment.metadata()
    active = nem.start(PlannedFault(0.0, "leader-kill", 1.0, 11))
    tp = active.fault.detail.rsplit(" ", 1)[1]
    topic, partition = split_tp(tp)
    leader = before.topics[topic][partition].leader
    assert active.fault.target == f"broker-{leader}"
    assert not deployment.cluster.brokers[leader].is_running
    deployment.cluster.wait_until(
        lambda m: m.topics[topic][partition].leader not in (leader, -1)
        and leader not in m.brokers, f"{tp} led by another broker")
    healed(deployment, nem, active)


def test_coordinator_kill_kills_the_coordinator(deployment: ClusterDeployment) -> None:
    nem = nemesis(deployment)
    coordinator = deployment.coordinator(TXID)
    active = nem.start(PlannedFault(0.0, "coordinator-kill", 1.0, 5))
    assert active.fault.target == f"broker-{coordinator}"
    assert not deployment.cluster.brokers[coordinator].is_running
    deadline = time.monotonic() + 30
    while True:  # the transaction log partition moves to a live broker
        try:
            if deployment.coordinator(TXID) != coordinator:
                break
        except Exception:  # no coordinator while the leadership moves
            pass
        assert time.monotonic() < deadline, "the coordinator never moved"
        time.sleep(0.2)  # polling FindCoordinator, not synchronisation
    healed(deployment, nem, active)


def test_partition_isolates_a_broker(deployment: ClusterDeployment) -> None:
    assert deployment.netns, "this test runs as root, where the cluster is in namespaces"
    ids = deployment.broker_ids
    # an isolating pick whose broker leads something
    view = deployment.metadata()
    led = {p.leader for parts in view.topics.values() for p in parts.values()}
    pick = next(p for p in range(0, 400, 2)
                if partition_mode(p) == "isolate" and ids[choose(p, len(ids))] in led)
    victim = ids[choose(pick, len(ids))]
    other = next(n for n in ids if n != victim)
    nem = nemesis(deployment)
    active = nem.start(PlannedFault(0.0, "partition", 1.0, pick))
    assert active.fault.target == f"broker-{victim}"
    deployment.cluster.wait_until(
        lambda m: victim not in m.brokers and all(
            p.leader != victim for parts in m.topics.values() for p in parts.values()),
        f"broker {victim}'s leaderships moved", node_id=other)
    fault = healed(deployment, nem, active)
    assert deployment.network is not None and not deployment.network.cuts
    assert fault.start < (fault.end or 0)
