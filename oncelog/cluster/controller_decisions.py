"""What the controller decides: replica placement, leader elections, ISR removals.

Sans-IO and pure: every function reads a ``MetadataImage`` and returns the partition states
to write, each with the store version it was decided from (``PartitionChange``), for the
controller's shell (``oncelog.broker.cluster.controller``) to write with compare-and-swap.
A refused write means the image was stale: the shell waits for the watch and decides again
from the newer image, so every function here is safe to call again on any image (it only
proposes changes for partitions that need one).

The rules are Kafka's:
- Placement of a new topic or new partitions: the rack-unaware striped placement of
  ``AdminUtils.assignReplicasToBrokersRackUnaware`` (a random start broker and a random
  shift between the first and the following replicas, the shift growing by one after each
  round of the brokers), over the live brokers that are not shutting down.
  INVALID_REPLICATION_FACTOR with Kafka's KRaft message when there are too few of them.
  Initial state: leader = the first replica, ISR = every replica, leader epoch 0.
- Brokers that disappear (``fence``): a partition whose leader is gone gets the first
  replica in assignment order that is alive and in the ISR (a clean election); if there is
  none it goes offline (leader NO_LEADER) unless ``unclean.leader.election.enable`` (topic
  config, else the broker default), which picks the first live replica with ISR = [it].
  A gone broker leaves every ISR, except that the last member stays (as Kafka's ZooKeeper
  controller kept it) so a clean election is possible when it returns. The same function
  gives offline partitions a leader again when an ISR member comes back.
- Brokers that restarted (``restarted``: the registration's broker epoch changed since the
  controller last saw it, so it went and came back between two reads — Kafka treats a new
  broker epoch as a failure and a restart; ``restarted_leaders``: a leader whose broker
  epoch differs from the one recorded when it was made leader, which a new controller finds
  in the partition states alone): what they had in their previous life may be
  gone (unflushed writes, a replaced disk), so they leave every ISR that keeps another
  member and lose their leaderships to another live ISR member; a partition with no other
  in-sync replica keeps it, with a new leader epoch (its followers truncate against it).
  The leader re-admits them once they have caught up in their new life (KIP-903).
- Controlled shutdown: leadership moves to another live ISR member not shutting down; the
  broker leaves the ISRs where at least one member remains; the partitions it must keep
  leading (no one to move to) are reported.
- Preferred leader: the auto rebalance of Kafka's controller (per preferred broker, the
  share of its partitions it does not lead; above ``leader.imbalance.per.broker.percentage``
  its partitions move back to it when it is alive and in the ISR), and ElectLeaders
  (PREFERRED / UNCLEAN) with Kafka's per-partition errors.

Every leader change goes through ``PartitionState.with_leader`` (leader epoch + 1, partition
epoch + 1, the deciding controller's epoch); every ISR-only change through ``with_isr``.
"""

from __future__ import annotations

import enum
import random
import uuid
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from oncelog.cluster.metadata import (
    NO_LEADER,
    MetadataImage,
    PartitionState,
    TopicAssignment,
    VersionedPartitionState,
)
from oncelog.cluster.replica_assignment import check_replicas
from oncelog.errors import ErrorCode, KafkaError

__all__ = [
    "UNCLEAN_LEADER_ELECTION",
    "ControlledShutdown",
    "ElectionResult",
    "ElectionType",
    "NewTopic",
    "PartitionChange",
    "PartitionKey",
    "assign_added_partitions",
    "assign_replicas",
    "controlled_shutdown",
    "elect_leaders",
    "fence",
    "initial_states",
    "new_topic",
    "preferred_leader_rebalance",
    "restarted",
    "restarted_leaders",
    "usable_brokers",
]

UNCLEAN_LEADER_ELECTION = "unclean.leader.election.enable"

PartitionKey = tuple[str, int]


@dataclass(frozen=True, slots=True)
class PartitionChange:
    """A partition state to write, and the store version it was decided from (the
    compare-and-swap token)."""

    state: PartitionState
    expected_version: int


Changes = dict[PartitionKey, PartitionChange]


@dataclass(frozen=True, slots=True)
class NewTopic:
    """A topic to create: its assignment and the initial state of each partition."""

    assignment: TopicAssignment
    states: Mapping[int, PartitionState]


@dataclass(frozen=True, slots=True)
class ControlledShutdown:
    """The decisions for a broker shutting down, and the partitions it still leads
    (no live in-sync replica to hand them to)."""

    changes: Changes
    still_led: tuple[PartitionKey, ...]


class ElectionType(enum.IntEnum):
    """ElectLeaders' election_type (KIP-460)."""

    PREFERRED = 0
    UNCLEAN = 1


@dataclass(frozen=True, slots=True)
class ElectionResult:
    """ElectLeaders: the changes to write and each requested partition's error code."""

    changes: Changes
    errors: dict[PartitionKey, ErrorCode] = field(default_factory=dict)


# -- placement --------------------------------------------------------------------------------
def usable_brokers(image: MetadataImage) -> list[int]:
    """Brokers new replicas may go to and leadership may move to: registered and not
    shutting down, sorted."""
    return sorted(n for n, reg in image.brokers.items() if not reg.shutting_down)


def _check_replication_factor(replication_factor: int, broker_count: int) -> None:
    if replication_factor <= 0:
        raise KafkaError(
            ErrorCode.invalid_replication_factor,
            "Replication factor must be larger than 0, or -1 to use the default value.",
        )
    if replication_factor > broker_count:
        raise KafkaError(
            ErrorCode.invalid_replication_factor,
            f"Unable to replicate the partition {replication_factor} time(s): The target "
            f"replication factor of {replication_factor} cannot be reached because only "
            f"{broker_count} broker(s) are registered.",
        )


def _replica_index(first: int, shift: int, j: int, count: int) -> int:
    return (first + 1 + (shift + j) % (count - 1)) % count


def assign_replicas(
    partitions: int,
    replication_factor: int,
    brokers: Sequence[int],
    *,
    rng: random.Random | None = None,
    start_index: int | None = None,
    start_partition: int = 0,
) -> list[tuple[int, ...]]:
    """Kafka's rack-unaware placement of ``partitions`` partitions over ``brokers``.

    Partition p's first replica is broker ``(p + start) % n``; the others follow it at a
    distance ``1 + (shift + j) % (n - 1)``, the shift growing by one every n partitions, so
    leaders and followers are spread evenly. ``start`` and the initial shift are random
    unless ``start_index`` fixes both (as Kafka does when adding partitions)."""
    ordered = sorted(brokers)
    _check_replication_factor(replication_factor, len(ordered))
    count = len(ordered)
    chooser = rng or random.Random()
    if start_index is not None and start_index >= 0:
        start, shift = start_index, start_index
    else:
        start, shift = chooser.randrange(count), chooser.randrange(count)
    result: list[tuple[int, ...]] = []
    for p in range(start_partition, start_partition + partitions):
        if p > 0 and p % count == 0:
            shift += 1
        first = (p + start) % count
        replicas = [ordered[first]]
        replicas += [
            ordered[_replica_index(first, shift, j, count)] for j in range(replication_factor - 1)
        ]
        result.append(tuple(replicas))
    return result


def assign_added_partitions(
    assignment: TopicAssignment, added: int, brokers: Sequence[int]
) -> list[tuple[int, ...]]:
    """Replicas of ``added`` new partitions of an existing topic, continuing its placement:
    the start is the first broker at or above partition 0's first replica (Kafka's
    CreatePartitions placement), the replication factor that of partition 0."""
    ordered = sorted(brokers)
    first_of_zero = assignment.replicas[0][0]
    start = next((i for i, b in enumerate(ordered) if b >= first_of_zero), 0)
    return assign_replicas(
        added,
        len(assignment.replicas[0]),
        ordered,
        start_index=start,
        start_partition=assignment.partition_count,
    )


def initial_states(
    replicas: Sequence[Sequence[int]], controller_epoch: int, *, first_partition: int = 0,
    image: MetadataImage | None = None,
) -> dict[int, PartitionState]:
    """The first state of each new partition: the first replica leads (with the broker
    epoch of its registration in ``image``), all are in sync."""
    brokers = {} if image is None else image.brokers
    return {
        first_partition + index: PartitionState(
            leader=r[0], leader_epoch=0, isr=tuple(r), controller_epoch=controller_epoch,
            leader_broker_epoch=brokers[r[0]].epoch if r[0] in brokers else -1,
        )
        for index, r in enumerate(replicas)
    }


def new_topic(
    image: MetadataImage,
    name: str,
    partitions: int,
    replication_factor: int,
    *,
    controller_epoch: int,
    manual: Sequence[Sequence[int]] | None = None,
    configs: Mapping[str, str] | None = None,
    rng: random.Random | None = None,
    topic_id: uuid.UUID | None = None,
) -> NewTopic:
    """A topic to create, placed by Kafka's rules (``manual``: replica lists checked by
    ``oncelog.cluster.replica_assignment`` against the usable brokers)."""
    live = usable_brokers(image)
    if manual is not None:
        factor: int | None = None
        for replicas in manual:
            check_replicas(replicas, live, factor)
            factor = len(replicas)
        placed = [tuple(r) for r in manual]
    else:
        placed = assign_replicas(partitions, replication_factor, live, rng=rng)
    assignment = TopicAssignment(
        name=name,
        topic_id=topic_id or uuid.uuid4(),
        replicas=tuple(placed),
        configs=dict(configs or {}),
    )
    return NewTopic(assignment, initial_states(placed, controller_epoch, image=image))


# -- elections --------------------------------------------------------------------------------
def _unclean_allowed(image: MetadataImage, topic: str, default: bool) -> bool:
    assignment = image.topics.get(topic)
    value = None if assignment is None else assignment.configs.get(UNCLEAN_LEADER_ELECTION)
    return default if value is None else str(value).strip().lower() == "true"


def _first(replicas: Iterable[int], *allowed: Collection[int]) -> int | None:
    """The first of ``replicas`` in the first of the ``allowed`` sets that holds one."""
    candidates = list(replicas)
    for group in allowed:
        found = next((r for r in candidates if r in group), None)
        if found is not None:
            return found
    return None


def _clean_leader(
    replicas: Sequence[int], isr: Collection[int], image: MetadataImage
) -> int | None:
    """The first replica in assignment order that is alive and in the ISR, preferring
    brokers that are not shutting down."""
    usable = set(usable_brokers(image))
    eligible = [r for r in replicas if r in isr]
    return _first(eligible, usable, image.brokers)


def _without(isr: Sequence[int], gone: Collection[int], keep: int) -> tuple[int, ...]:
    """``isr`` without ``gone``; if that empties it, ``keep`` (the last member) stays."""
    rest = tuple(r for r in isr if r not in gone)
    return rest or ((keep,) if keep != NO_LEADER else ())


def _lead(
    image: MetadataImage, state: PartitionState, leader: int, isr: tuple[int, ...],
    controller_epoch: int,
) -> PartitionState:
    """``state`` with ``leader`` (or NO_LEADER) at a new leader epoch, recording the broker
    epoch of the leader's registration."""
    registration = image.brokers.get(leader)
    return state.with_leader(leader, isr, controller_epoch,
                             -1 if registration is None else registration.epoch)


def _partitions(image: MetadataImage) -> Iterable[tuple[PartitionKey, VersionedPartitionState]]:
    return sorted(image.partitions.items())


def fence(
    image: MetadataImage, *, unclean_default: bool = False, controller_epoch: int
) -> Changes:
    """Bring every partition in line with the brokers alive in ``image``: leaders that are
    gone are replaced (clean election, unclean only where enabled), gone brokers leave
    ISRs (the last member stays), offline partitions get a live ISR member as leader.
    Returns nothing for partitions already consistent, so it is safe to call after any
    change of the registrations (and after a controller takeover)."""
    alive = image.brokers
    changes: Changes = {}
    for key, versioned in _partitions(image):
        state = versioned.state
        replicas = image.replicas(*key)
        gone = [r for r in state.isr if r not in alive]
        leader_alive = state.leader != NO_LEADER and state.leader in alive
        new: PartitionState | None
        if leader_alive:
            new = state.with_isr(_without(state.isr, gone, state.leader)) if gone else None
        else:
            new = _elect_offline(image, key, state, replicas, unclean_default, controller_epoch)
        if new is not None:
            changes[key] = PartitionChange(new, versioned.version)
    return changes


def _elect_offline(
    image: MetadataImage,
    key: PartitionKey,
    state: PartitionState,
    replicas: Sequence[int],
    unclean_default: bool,
    controller_epoch: int,
) -> PartitionState | None:
    """A new state for a partition whose leader is gone (or absent), or None if it is
    already offline with nothing better to do."""
    alive = image.brokers
    leader = _clean_leader(replicas, state.isr, image)
    if leader is not None:
        isr = tuple(r for r in state.isr if r in alive)
        return _lead(image, state, leader, isr, controller_epoch)
    if _unclean_allowed(image, key[0], unclean_default):
        leader = _first(replicas, usable_brokers(image), alive)
        if leader is not None:
            return _lead(image, state, leader, (leader,), controller_epoch)
    keep = state.leader if state.leader in state.isr or not state.isr else state.isr[0]
    isr = _without(state.isr, [r for r in state.isr if r not in alive], keep)
    if state.leader == NO_LEADER and isr == state.isr:
        return None
    return _lead(image, state, NO_LEADER, isr, controller_epoch)


def restarted(
    image: MetadataImage, node_ids: Collection[int], *, controller_epoch: int,
    leaders_only: bool = False,
) -> Changes:
    """Partition changes for brokers that restarted (module docstring); with
    ``leaders_only`` only for the partitions they lead."""
    changes: Changes = {}
    for key, versioned in _partitions(image):
        state = versioned.state
        leads = state.leader in node_ids
        if not leads and (leaders_only or not any(r in node_ids for r in state.isr)):
            continue
        rest = tuple(r for r in state.isr if r not in node_ids)
        if leads:
            leader = _clean_leader(image.replicas(*key), rest, image)
            new = (_lead(image, state, leader, rest, controller_epoch) if leader is not None
                   else _lead(image, state, state.leader, state.isr, controller_epoch))
        elif rest:
            new = state.with_isr(rest)
        else:
            continue  # the last ISR member stays, as for a broker that is gone
        changes[key] = PartitionChange(new, versioned.version)
    return changes


def restarted_leaders(image: MetadataImage) -> set[int]:
    """Brokers leading a partition under a broker epoch other than the one they have now:
    they restarted (or registered again after a lost session) since they were made leader,
    whether or not a controller saw them go. Read from the partition states alone, so a new
    controller finds them too."""
    found: set[int] = set()
    for _, versioned in _partitions(image):
        state = versioned.state
        registration = image.brokers.get(state.leader)
        if (registration is not None and state.leader_broker_epoch != -1
                and state.leader_broker_epoch != registration.epoch):
            found.add(state.leader)
    return found


def controlled_shutdown(
    image: MetadataImage, node_id: int, *, controller_epoch: int
) -> ControlledShutdown:
    """Move leadership away from ``node_id`` and take it out of the ISRs that keep another
    member; the partitions it must go on leading (no live in-sync replica to take over)."""
    changes: Changes = {}
    still_led: list[PartitionKey] = []
    for key, versioned in _partitions(image):
        state = versioned.state
        if node_id not in state.isr and state.leader != node_id:
            continue
        isr = tuple(r for r in state.isr if r != node_id)
        if state.leader == node_id:
            leader = _first(
                (r for r in image.replicas(*key) if r in isr), usable_brokers(image)
            )
            if leader is None:
                still_led.append(key)
                continue
            changes[key] = PartitionChange(
                _lead(image, state, leader, isr, controller_epoch), versioned.version
            )
        elif isr:
            changes[key] = PartitionChange(state.with_isr(isr), versioned.version)
    return ControlledShutdown(changes, tuple(still_led))


def _preferred_change(
    image: MetadataImage, key: PartitionKey, versioned: VersionedPartitionState,
    controller_epoch: int,
) -> PartitionChange | ErrorCode:
    state = versioned.state
    replicas = image.replicas(*key)
    preferred = replicas[0] if replicas else NO_LEADER
    if state.leader == preferred:
        return ErrorCode.election_not_needed
    if preferred not in state.isr or preferred not in usable_brokers(image):
        return ErrorCode.preferred_leader_not_available
    return PartitionChange(
        _lead(image, state, preferred, state.isr, controller_epoch), versioned.version
    )


def preferred_leader_rebalance(
    image: MetadataImage, *, imbalance_percentage: int, controller_epoch: int
) -> Changes:
    """Kafka's auto leader rebalance: for each broker, the share of the partitions it is
    the preferred (first) replica of that it does not lead; above
    ``leader.imbalance.per.broker.percentage`` / 100, those partitions go back to it where
    it is alive and in the ISR."""
    by_preferred: dict[int, list[tuple[PartitionKey, VersionedPartitionState]]] = {}
    for key, versioned in _partitions(image):
        replicas = image.replicas(*key)
        if replicas:
            by_preferred.setdefault(replicas[0], []).append((key, versioned))
    changes: Changes = {}
    for broker, owned in sorted(by_preferred.items()):
        not_led = [(k, v) for k, v in owned if v.state.leader != broker]
        if len(not_led) / len(owned) <= imbalance_percentage / 100:
            continue
        for key, versioned in not_led:
            change = _preferred_change(image, key, versioned, controller_epoch)
            if isinstance(change, PartitionChange):
                changes[key] = change
    return changes


def elect_leaders(
    image: MetadataImage,
    election: ElectionType,
    partitions: Iterable[PartitionKey],
    *,
    controller_epoch: int,
) -> ElectionResult:
    """ElectLeaders (KIP-460) for the given partitions. PREFERRED: ELECTION_NOT_NEEDED when
    the preferred replica leads, PREFERRED_LEADER_NOT_AVAILABLE when it is not alive and in
    the ISR. UNCLEAN: ELECTION_NOT_NEEDED when a live leader exists, else a clean election
    if possible, else the first live replica (ISR = [it]), else
    ELIGIBLE_LEADERS_NOT_AVAILABLE. Unknown partitions: UNKNOWN_TOPIC_OR_PARTITION."""
    changes: Changes = {}
    errors: dict[PartitionKey, ErrorCode] = {}
    for key in partitions:
        versioned = image.partitions.get(key)
        if versioned is None:
            errors[key] = ErrorCode.unknown_topic_or_partition
            continue
        if election is ElectionType.PREFERRED:
            outcome = _preferred_change(image, key, versioned, controller_epoch)
        else:
            outcome = _unclean_change(image, key, versioned, controller_epoch)
        if isinstance(outcome, PartitionChange):
            changes[key] = outcome
            errors[key] = ErrorCode.none
        else:
            errors[key] = outcome
    return ElectionResult(changes, errors)


def _unclean_change(
    image: MetadataImage, key: PartitionKey, versioned: VersionedPartitionState,
    controller_epoch: int,
) -> PartitionChange | ErrorCode:
    state = versioned.state
    if state.leader != NO_LEADER and state.leader in image.brokers:
        return ErrorCode.election_not_needed
    new = _elect_offline(image, key, state, image.replicas(*key), True, controller_epoch)
    if new is None or new.leader == NO_LEADER:
        return ErrorCode.eligible_leaders_not_available
    return PartitionChange(new, versioned.version)
