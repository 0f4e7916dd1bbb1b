"""The controller's decisions (oncelog.cluster.controller_decisions): one test per rule, then
hypothesis properties over random clusters and random sequences of broker events."""

from __future__ import annotations

import random
import uuid
from collections import Counter
from collections.abc import Mapping, Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oncelog.cluster.controller_decisions import (
    ElectionType,
    PartitionChange,
    assign_added_partitions,
    assign_replicas,
    controlled_shutdown,
    elect_leaders,
    fence,
    new_topic,
    preferred_leader_rebalance,
    restarted,
    restarted_leaders,
)
from oncelog.cluster.metadata import (
    NO_LEADER,
    BrokerRegistration,
    MetadataImage,
    PartitionState,
    TopicAssignment,
    VersionedPartitionState,
)
from oncelog.errors import ErrorCode, KafkaError

CE = 7  # the deciding controller's epoch


def image_of(
    brokers: list[int],
    topics: Mapping[str, Sequence[tuple[int, ...]]],
    states: dict[tuple[str, int], PartitionState] | None = None,
    configs: dict[str, dict[str, str]] | None = None,
) -> MetadataImage:
    """An image with ``brokers`` alive, the topics' assignments and the partition states
    (default: first replica leads, all in sync, epoch 0), every version 1."""
    image = MetadataImage(cluster_id="c")
    for node in brokers:
        image.brokers[node] = BrokerRegistration(node, "127.0.0.1", 9000 + node)
    for name, replicas in topics.items():
        image.topics[name] = TopicAssignment(
            name, uuid.uuid4(), tuple(replicas), (configs or {}).get(name, {})
        )
        for index, r in enumerate(replicas):
            state = (states or {}).get((name, index)) or PartitionState(r[0], 0, tuple(r))
            image.partitions[(name, index)] = VersionedPartitionState(state, 1)
    return image


def kill(image: MetadataImage, *nodes: int) -> None:
    for node in nodes:
        image.brokers.pop(node)


def apply(image: MetadataImage, changes: dict[tuple[str, int], PartitionChange]) -> None:
    """Write the changes as the store would: CAS on the version, new version."""
    for key, change in changes.items():
        current = image.partitions[key]
        assert current.version == change.expected_version
        image.partitions[key] = VersionedPartitionState(change.state, current.version + 1)


# -- placement --------------------------------------------------------------------------------
def test_placement_fixed_start_is_kafkas_striping() -> None:
    # Kafka's AdminUtilsTest: 5 brokers, 10 partitions, factor 3, fixed start 0.
    expected = [
        (0, 1, 2), (1, 2, 3), (2, 3, 4), (3, 4, 0), (4, 0, 1),
        (0, 2, 3), (1, 3, 4), (2, 4, 0), (3, 0, 1), (4, 1, 2),
    ]
    assert assign_replicas(10, 3, [0, 1, 2, 3, 4], start_index=0) == expected


def test_placement_spreads_leaders_and_replicas_evenly() -> None:
    placed = assign_replicas(12, 3, [1, 2, 3], rng=random.Random(5))
    assert all(len(set(r)) == 3 for r in placed)
    assert Counter(r[0] for r in placed) == {1: 4, 2: 4, 3: 4}
    assert Counter(b for r in placed for b in r) == {1: 12, 2: 12, 3: 12}


def test_placement_start_is_random() -> None:
    firsts = {assign_replicas(1, 1, [1, 2, 3], rng=random.Random(s))[0][0] for s in range(40)}
    assert firsts == {1, 2, 3}


def test_replication_factor_above_brokers_is_refused_with_kafkas_message() -> None:
    with pytest.raises(KafkaError) as info:
        assign_replicas(1, 3, [1])
    assert info.value.code is ErrorCode.invalid_replication_factor
    assert info.value.message == (
        "Unable to replicate the partition 3 time(s): The target replication factor of 3 "
        "cannot be reached because only 1 broker(s) are registered."
    )
    with pytest.raises(KafkaError) as info:
        assign_replicas(1, 0, [1])
    assert info.value.code is ErrorCode.invalid_replication_factor


def test_new_topic_skips_brokers_shutting_down_and_starts_in_sync() -> None:
    image = image_of([1, 2, 3], {})
    image.brokers[3] = BrokerRegistration(3, "h", 1, shutting_down=True)
    created = new_topic(image, "t", 4, 2, controller_epoch=CE, rng=random.Random(1))
    assert all(set(r) == {1, 2} for r in created.assignment.replicas)
    assert created.states[0] == PartitionState(
        created.assignment.replicas[0][0], 0, created.assignment.replicas[0],
        controller_epoch=CE,
    )
    with pytest.raises(KafkaError) as info:
        new_topic(image, "t", 1, 3, controller_epoch=CE)
    assert "only 2 broker(s)" in info.value.message


def test_new_topic_manual_assignment_uses_the_checker() -> None:
    image = image_of([1, 2], {})
    created = new_topic(image, "t", -1, -1, controller_epoch=CE, manual=[[2, 1], [1, 2]])
    assert created.assignment.replicas == ((2, 1), (1, 2))
    assert created.states[0].leader == 2
    with pytest.raises(KafkaError) as info:
        new_topic(image, "t", -1, -1, controller_epoch=CE, manual=[[1, 5]])
    assert info.value.code is ErrorCode.invalid_replica_assignment
    assert "broker 5, but no such broker is registered" in info.value.message


def test_added_partitions_continue_the_topics_placement() -> None:
    existing = TopicAssignment("t", uuid.uuid4(), tuple(assign_replicas(3, 2, [1, 2, 3],
                                                                       start_index=1)))
    assert existing.replicas[0][0] == 2
    added = assign_added_partitions(existing, 3, [1, 2, 3])
    assert added == assign_replicas(6, 2, [1, 2, 3], start_index=1)[3:]


# -- a broker goes ----------------------------------------------------------------------------
def test_leader_gone_first_live_isr_replica_in_assignment_order_leads() -> None:
    image = image_of([1, 2, 3], {"t": [(1, 3, 2)]})
    kill(image, 1)
    changes = fence(image, controller_epoch=CE)
    new = changes[("t", 0)]
    assert new.expected_version == 1
    assert new.state == PartitionState(3, 1, (3, 2), partition_epoch=1, controller_epoch=CE)


def test_leader_gone_out_of_sync_replicas_are_not_elected() -> None:
    state = PartitionState(1, 4, (1, 3))
    image = image_of([1, 2, 3], {"t": [(1, 2, 3)]}, {("t", 0): state})
    kill(image, 1)
    assert fence(image, controller_epoch=CE)[("t", 0)].state.leader == 3


def test_no_live_isr_member_goes_offline_and_keeps_the_last_isr_member() -> None:
    state = PartitionState(1, 4, (1,))
    image = image_of([1, 2, 3], {"t": [(1, 2, 3)]}, {("t", 0): state})
    kill(image, 1)
    new = fence(image, controller_epoch=CE)[("t", 0)].state
    assert (new.leader, new.leader_epoch, new.isr) == (NO_LEADER, 5, (1,))
    apply(image, fence(image, controller_epoch=CE))
    assert fence(image, controller_epoch=CE) == {}  # settled: nothing more to decide


def test_unclean_election_only_when_enabled_broker_or_topic() -> None:
    state = PartitionState(1, 4, (1,))
    image = image_of([2, 3], {"t": [(1, 3, 2)]}, {("t", 0): state})
    assert fence(image, controller_epoch=CE)[("t", 0)].state.leader == NO_LEADER
    new = fence(image, unclean_default=True, controller_epoch=CE)[("t", 0)].state
    assert (new.leader, new.isr) == (3, (3,))
    image = image_of([2, 3], {"t": [(1, 3, 2)]}, {("t", 0): state},
                     {"t": {"unclean.leader.election.enable": "true"}})
    assert fence(image, controller_epoch=CE)[("t", 0)].state.leader == 3
    image = image_of([2, 3], {"t": [(1, 3, 2)]}, {("t", 0): state},
                     {"t": {"unclean.leader.election.enable": "false"}})
    assert fence(image, unclean_default=True, controller_epoch=CE)[("t", 0)].state.leader \
        == NO_LEADER


def test_follower_gone_leaves_the_isr_without_a_leader_change() -> None:
    image = image_of([1, 2, 3], {"t": [(1, 2, 3)]})
    kill(image, 2)
    new = fence(image, controller_epoch=CE)[("t", 0)].state
    assert (new.leader, new.leader_epoch, new.isr, new.partition_epoch) == (1, 0, (1, 3), 1)


def test_brokers_gone_leave_partitions_they_do_not_replicate_alone() -> None:
    image = image_of([1, 2, 3], {"t": [(1, 2)], "u": [(2, 3)]})
    kill(image, 1)
    assert set(fence(image, controller_epoch=CE)) == {("t", 0)}


def test_broker_back_leads_the_offline_partitions_whose_isr_holds_it() -> None:
    offline = PartitionState(NO_LEADER, 5, (1,), partition_epoch=5)
    image = image_of([2, 3], {"t": [(2, 1)], "u": [(3, 2)]}, {("t", 0): offline})
    assert fence(image, controller_epoch=CE) == {}
    image.brokers[1] = BrokerRegistration(1, "h", 1)
    changes = fence(image, controller_epoch=CE)
    assert set(changes) == {("t", 0)}
    assert (changes[("t", 0)].state.leader, changes[("t", 0)].state.leader_epoch) == (1, 6)


def test_leader_gone_prefers_a_replica_not_shutting_down() -> None:
    image = image_of([1, 2, 3], {"t": [(1, 2, 3)]})
    image.brokers[2] = BrokerRegistration(2, "h", 1, shutting_down=True)
    kill(image, 1)
    assert fence(image, controller_epoch=CE)[("t", 0)].state.leader == 3
    kill(image, 3)
    assert fence(image, controller_epoch=CE)[("t", 0)].state.leader == 2


# -- controlled shutdown ----------------------------------------------------------------------
def test_controlled_shutdown_moves_leaders_and_leaves_isrs() -> None:
    image = image_of([1, 2, 3], {"t": [(1, 2, 3), (2, 1, 3), (1,)]})
    image.brokers[1] = BrokerRegistration(1, "h", 1, shutting_down=True)
    result = controlled_shutdown(image, 1, controller_epoch=CE)
    assert result.still_led == (("t", 2),)
    moved = result.changes[("t", 0)].state
    assert (moved.leader, moved.leader_epoch, moved.isr) == (2, 1, (2, 3))
    followed = result.changes[("t", 1)].state
    assert (followed.leader, followed.leader_epoch, followed.isr) == (2, 0, (2, 3))
    assert ("t", 2) not in result.changes


def test_controlled_shutdown_does_not_move_to_another_broker_shutting_down() -> None:
    image = image_of([1, 2, 3], {"t": [(1, 2, 3)]})
    image.brokers[2] = BrokerRegistration(2, "h", 1, shutting_down=True)
    result = controlled_shutdown(image, 1, controller_epoch=CE)
    assert result.changes[("t", 0)].state.leader == 3
    kill(image, 3)
    assert controlled_shutdown(image, 1, controller_epoch=CE).still_led == (("t", 0),)


# -- preferred leaders ------------------------------------------------------------------------
def _led_by(leader: int, replicas: tuple[int, ...]) -> PartitionState:
    return PartitionState(leader, 3, replicas)


def test_auto_rebalance_acts_above_the_imbalance_percentage() -> None:
    # broker 1 prefers 4 partitions and leads 3 of them: 25% imbalance.
    topics = {"t": [(1, 2), (1, 2), (1, 2), (1, 2), (2, 1)]}
    states = {("t", 0): _led_by(2, (1, 2))}
    image = image_of([1, 2], topics, states)
    assert preferred_leader_rebalance(image, imbalance_percentage=25, controller_epoch=CE) == {}
    changes = preferred_leader_rebalance(image, imbalance_percentage=10, controller_epoch=CE)
    assert set(changes) == {("t", 0)}
    assert (changes[("t", 0)].state.leader, changes[("t", 0)].state.leader_epoch) == (1, 4)


def test_auto_rebalance_skips_preferred_replicas_dead_or_out_of_sync() -> None:
    topics = {"t": [(1, 2), (1, 2)]}
    states = {("t", 0): _led_by(2, (2,)), ("t", 1): _led_by(2, (1, 2))}
    image = image_of([1, 2], topics, states)
    changes = preferred_leader_rebalance(image, imbalance_percentage=10, controller_epoch=CE)
    assert set(changes) == {("t", 1)}
    kill(image, 1)
    assert preferred_leader_rebalance(image, imbalance_percentage=10, controller_epoch=CE) == {}


def test_elect_preferred_leaders_errors_as_kafka() -> None:
    topics = {"t": [(1, 2), (1, 2), (1, 2)]}
    states = {("t", 1): _led_by(2, (1, 2)), ("t", 2): _led_by(2, (2,))}
    image = image_of([1, 2], topics, states)
    result = elect_leaders(image, ElectionType.PREFERRED,
                           [("t", 0), ("t", 1), ("t", 2), ("nope", 0)], controller_epoch=CE)
    assert result.errors == {
        ("t", 0): ErrorCode.election_not_needed,
        ("t", 1): ErrorCode.none,
        ("t", 2): ErrorCode.preferred_leader_not_available,
        ("nope", 0): ErrorCode.unknown_topic_or_partition,
    }
    assert set(result.changes) == {("t", 1)}


def test_elect_unclean_leaders_errors_as_kafka() -> None:
    offline = PartitionState(NO_LEADER, 2, (1,))
    topics = {"t": [(1, 2), (1, 3), (2, 3)]}
    states = {("t", 0): offline, ("t", 1): offline}
    image = image_of([2, 3], topics, states)
    result = elect_leaders(image, ElectionType.UNCLEAN, [("t", 0), ("t", 1), ("t", 2)],
                           controller_epoch=CE)
    assert result.errors == {
        ("t", 0): ErrorCode.none,
        ("t", 1): ErrorCode.none,
        ("t", 2): ErrorCode.election_not_needed,
    }
    assert result.changes[("t", 0)].state.isr == (2,)
    kill(image, 2, 3)
    result = elect_leaders(image, ElectionType.UNCLEAN, [("t", 0)], controller_epoch=CE)
    assert result.errors == {("t", 0): ErrorCode.eligible_leaders_not_available}


# -- properties over random clusters and event sequences -----------------------------------------
EVENTS = st.lists(
    st.tuples(st.sampled_from(["kill", "start", "shutdown", "rebalance", "unclean"]),
              st.integers(0, 4)),
    max_size=25,
)


def _check_invariants(image: MetadataImage, before: dict[tuple[str, int], PartitionState],
                      changes: dict[tuple[str, int], PartitionChange], clean: bool) -> None:
    for key, change in changes.items():
        old, new = before[key], change.state
        assert new.leader_epoch >= old.leader_epoch
        assert new.partition_epoch > old.partition_epoch
        if new.leader != old.leader:
            assert new.leader_epoch > old.leader_epoch
            if clean and new.leader != NO_LEADER:
                assert new.leader in old.isr, "a clean election chose outside the ISR"
    for key, versioned in image.partitions.items():
        state, replicas = versioned.state, image.replicas(*key)
        assert state.isr and set(state.isr) <= set(replicas)
        assert len(set(state.isr)) == len(state.isr)
        if state.leader != NO_LEADER:
            assert state.leader in state.isr


@settings(max_examples=150, deadline=None)
@given(
    brokers=st.integers(1, 5), seed=st.integers(0, 2**16), events=EVENTS,
    unclean=st.booleans(),
)
def test_random_event_sequences_keep_the_invariants(
    brokers: int, seed: int, events: list[tuple[str, int]], unclean: bool
) -> None:
    rng = random.Random(seed)
    nodes = list(range(brokers))
    image = image_of(nodes, {})
    for name in ("a", "b"):
        created = new_topic(image, name, rng.randint(1, 6), rng.randint(1, brokers),
                            controller_epoch=CE, rng=rng)
        image.topics[name] = created.assignment
        for index, state in created.states.items():
            image.partitions[(name, index)] = VersionedPartitionState(state, 1)
    for kind, node in events:
        node %= brokers
        before = {k: v.state for k, v in image.partitions.items()}
        clean = True
        if kind == "kill":
            image.brokers.pop(node, None)
        elif kind == "start":
            image.brokers[node] = BrokerRegistration(node, "h", 1)
        elif kind == "shutdown" and node in image.brokers:
            image.brokers[node] = BrokerRegistration(node, "h", 1, shutting_down=True)
            changes = controlled_shutdown(image, node, controller_epoch=CE).changes
            apply(image, changes)
            _check_invariants(image, before, changes, clean)
            before = {k: v.state for k, v in image.partitions.items()}
        elif kind == "rebalance":
            changes = preferred_leader_rebalance(image, imbalance_percentage=0,
                                                 controller_epoch=CE)
            apply(image, changes)
            _check_invariants(image, before, changes, clean)
            before = {k: v.state for k, v in image.partitions.items()}
        elif kind == "unclean":
            clean = False
            keys = sorted(image.partitions)
            changes = elect_leaders(image, ElectionType.UNCLEAN, keys,
                                    controller_epoch=CE).changes
            apply(image, changes)
            _check_invariants(image, before, changes, clean)
            before = {k: v.state for k, v in image.partitions.items()}
        changes = fence(image, unclean_default=unclean, controller_epoch=CE)
        apply(image, changes)
        _check_invariants(image, before, changes, clean=not unclean)
        # After the decisions are written, no partition is led by a dead broker, every
        # partition with a live ISR member has a leader, and deciding again changes nothing.
        for versioned in image.partitions.values():
            state = versioned.state
            assert state.leader == NO_LEADER or state.leader in image.brokers
            if any(r in image.brokers for r in state.isr):
                assert state.leader != NO_LEADER
        assert fence(image, unclean_default=unclean, controller_epoch=CE) == {}


def test_a_restarted_broker_leaves_the_isrs_and_its_leaderships() -> None:
    """Broker 3 came back with a new broker epoch: out of every ISR that keeps another
    member; its leadership moves to a live in-sync replica, or stays with a new leader
    epoch when there is none; partitions it has no part in are untouched."""
    image = image_of([1, 2, 3], {"t": [(3, 1, 2), (1, 2, 3), (1, 2)]}, {
        ("t", 0): PartitionState(3, 4, (3, 1, 2)),
        ("t", 1): PartitionState(1, 2, (1, 2, 3)),
    })
    image.topics["u"] = TopicAssignment("u", uuid.uuid4(), ((3, 1),))
    image.partitions[("u", 0)] = VersionedPartitionState(PartitionState(3, 5, (3,)), 2)
    changes = restarted(image, {3}, controller_epoch=CE)
    assert changes[("t", 0)].state.leader == 1
    assert changes[("t", 0)].state.leader_epoch == 5
    assert changes[("t", 0)].state.isr == (1, 2)
    assert changes[("t", 1)].state == PartitionState(1, 2, (1, 2), partition_epoch=1)
    assert changes[("u", 0)].state.leader == 3 and changes[("u", 0)].state.leader_epoch == 6
    assert changes[("u", 0)].expected_version == 2
    assert ("t", 2) not in changes
    assert restarted(image, set(), controller_epoch=CE) == {}


def test_a_leader_registered_again_since_its_election_is_found_from_the_states() -> None:
    """A leader whose registration's broker epoch is not the one recorded when it was made
    leader restarted since (a lost session, or a kill -9 no controller saw): a controller
    that never saw it go finds it from the partition states and elects again, moving only
    the leadership, at a new leader epoch recording the new leader's broker epoch."""
    image = image_of([1, 2, 3], {"t": [(1, 2, 3), (2, 1, 3)]}, {
        ("t", 0): PartitionState(1, 4, (1, 2, 3), leader_broker_epoch=10),
        ("t", 1): PartitionState(2, 2, (2, 1, 3), leader_broker_epoch=20),
    })
    image.brokers[1] = BrokerRegistration(1, "127.0.0.1", 9001, epoch=15)
    image.brokers[2] = BrokerRegistration(2, "127.0.0.1", 9002, epoch=20)
    image.brokers[3] = BrokerRegistration(3, "127.0.0.1", 9003, epoch=30)
    assert restarted_leaders(image) == {1}
    changes = restarted(image, {1}, controller_epoch=CE, leaders_only=True)
    assert set(changes) == {("t", 0)}
    moved = changes[("t", 0)].state
    assert (moved.leader, moved.leader_epoch, moved.isr, moved.leader_broker_epoch) == (
        2, 5, (2, 3), 20)
    image.partitions[("t", 0)] = VersionedPartitionState(moved, 2)
    assert restarted_leaders(image) == set()
    # unrecorded (-1, states from before) is never taken for a restart
    image.partitions[("t", 1)] = VersionedPartitionState(PartitionState(2, 2, (2, 1, 3)), 2)
    assert restarted_leaders(image) == set()
