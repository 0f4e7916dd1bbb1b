"""The leader's view of its followers for one partition: who is in sync, the high watermark,
and whether an ``acks=all`` produce may be appended and answered.

Sans-IO: time comes in as ``now_ms`` values (monotonic milliseconds), nothing is written
anywhere. The shell (``oncelog.broker.cluster.replica_manager``) feeds it the leader's log
end offset and every follower fetch, pushes ``high_watermark()`` into the log, writes the ISR
changes proposed by ``maybe_shrink`` / ``maybe_expand`` to the metadata store with
compare-and-swap and reports the outcome back (``on_isr_committed`` / ``on_isr_rejected``).

The rules are Kafka's (``kafka.cluster.Partition`` and ``kafka.cluster.Replica``):

- A follower's fetch at ``fetch_offset`` tells the leader the follower's log end offset (LEO).
  The follower is *caught up* at the time of a fetch that reaches the leader's LEO as of that
  fetch, or at the time of the previous fetch if this one reaches the leader's LEO as of the
  previous fetch (so a follower under a steady stream of small produces, always one fetch
  behind, still counts as caught up).
- A follower is out of sync when its LEO differs from the leader's and it has not been caught
  up for more than ``replica.lag.time.max.ms``; ``maybe_shrink`` proposes dropping those.
- A follower joins the ISR (``maybe_expand``) when its LEO is at least the high watermark and
  at least the start offset of the leader's current epoch (otherwise it could be elected
  before it has the committed records of this epoch), and its broker is alive, not shutting
  down, and fetching with the broker epoch it registered with (KIP-903).
- The high watermark is the smallest LEO over the *maximal* ISR (the committed ISR plus a
  member being added while the change is in flight, KIP-497), and also waits for a caught-up,
  eligible follower about to join. It only moves forward while this broker leads, and not at
  all while the ISR is below ``min.insync.replicas`` (Kafka 3.7+, KIP-966).
- ``acks=all``: refused with NOT_ENOUGH_REPLICAS before the append when the ISR is smaller
  than min.insync.replicas (capped at the replica count); once the high watermark reaches the
  produce's end offset it is answered, with NOT_ENOUGH_REPLICAS_AFTER_APPEND if the ISR fell
  below the minimum meanwhile.
- A follower whose broker restarted (a fetch or a registration with a newer broker epoch)
  is treated as a new replica: what the leader knew of its log describes the previous life,
  so its LEO becomes unknown and it is no longer caught up; unless its first fetches reach
  the leader's end it is dropped at the next ``maybe_shrink``. A fetch with an older broker
  epoch than the leader knows is refused with NOT_LEADER_OR_FOLLOWER (a zombie's request).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from oncelog.cluster.metadata import BrokerRegistration
from oncelog.errors import ErrorCode, KafkaError

__all__ = [
    "ACKS_ALL",
    "NO_BROKER_EPOCH",
    "UNKNOWN_OFFSET",
    "AckCheck",
    "LeaderReplicas",
    "ReplicaState",
    "ReplicationLimits",
]

log = logging.getLogger(__name__)

UNKNOWN_OFFSET = -1
NO_BROKER_EPOCH = -1  # a fetch that does not say its broker epoch (Kafka: -1 skips the check)
ACKS_ALL = -1


@dataclass(frozen=True, slots=True)
class ReplicationLimits:
    """The partition's replication settings the rules depend on."""

    replica_lag_time_max_ms: int = 30_000
    min_insync_replicas: int = 1

    def __post_init__(self) -> None:
        if self.replica_lag_time_max_ms < 0:
            raise ValueError("replica.lag.time.max.ms must not be negative")
        if self.min_insync_replicas < 1:
            raise ValueError("min.insync.replicas must be at least 1")


@dataclass(frozen=True, slots=True)
class ReplicaState:
    """What the leader knows of one follower (Kafka's ReplicaState).

    ``last_fetch_leader_end_offset`` is the leader's LEO when the last fetch arrived, and
    ``last_caught_up_time_ms`` the latest time at which the follower had everything the
    leader had. ``broker_epoch`` is the epoch the follower's fetches carry (None until one
    arrives)."""

    log_start_offset: int = UNKNOWN_OFFSET
    log_end_offset: int = UNKNOWN_OFFSET
    last_fetch_leader_end_offset: int = 0
    last_fetch_time_ms: int = 0
    last_caught_up_time_ms: int = 0
    broker_epoch: int | None = None

    @property
    def known_broker_epoch(self) -> int | None:
        """The broker epoch its fetches carried, if any said one."""
        return None if self.broker_epoch in (None, NO_BROKER_EPOCH) else self.broker_epoch

    def is_caught_up(self, leader_end: int, now_ms: int, lag_ms: int) -> bool:
        return leader_end == self.log_end_offset or now_ms - self.last_caught_up_time_ms <= lag_ms

    def after_fetch(
        self,
        fetch_offset: int,
        log_start_offset: int,
        now_ms: int,
        leader_end: int,
        broker_epoch: int,
    ) -> ReplicaState:
        """The state after a fetch at ``fetch_offset`` received at ``now_ms`` while the
        leader's LEO was ``leader_end``."""
        if fetch_offset >= leader_end:
            caught_up = max(self.last_caught_up_time_ms, now_ms)
        elif fetch_offset >= self.last_fetch_leader_end_offset:
            caught_up = max(self.last_caught_up_time_ms, self.last_fetch_time_ms)
        else:
            caught_up = self.last_caught_up_time_ms
        return ReplicaState(
            log_start_offset=log_start_offset,
            log_end_offset=fetch_offset,
            last_fetch_leader_end_offset=max(leader_end, self.last_fetch_leader_end_offset),
            last_fetch_time_ms=now_ms,
            last_caught_up_time_ms=caught_up,
            broker_epoch=broker_epoch,
        )


@dataclass(frozen=True, slots=True)
class AckCheck:
    """Whether an ``acks=all`` produce waiting in purgatory can be answered, and with what.
    ``error`` is ErrorCode.none unless the ISR fell below min.insync.replicas meanwhile."""

    satisfied: bool
    error: ErrorCode = ErrorCode.none


_WAITING = AckCheck(satisfied=False)


class LeaderReplicas:
    """The leader's replica tracking for one partition during one leadership.

    Create it with ``become_leader`` each time this broker becomes leader (or is re-elected
    with a new leader epoch; pass the previous tracker so the followers' states carry over).
    The committed ISR changes only through ``on_isr_committed`` (the store's answer), never
    by the proposals themselves; while a proposal is in flight no other is made."""

    def __init__(
        self,
        *,
        partition: str,
        local_id: int,
        leader_epoch: int,
        epoch_start_offset: int,
        replicas: Iterable[int],
        isr: Iterable[int],
        high_watermark: int,
        limits: ReplicationLimits,
        states: Mapping[int, ReplicaState],
        brokers: Mapping[int, BrokerRegistration] | None,
    ) -> None:
        self.partition = partition
        self.local_id = local_id
        self.leader_epoch = leader_epoch
        self.epoch_start_offset = epoch_start_offset
        self.replicas = tuple(replicas)
        self.limits = limits
        self._isr = frozenset(isr) | {local_id}
        self._pending: frozenset[int] | None = None
        self._leader_end = epoch_start_offset
        self._high_watermark = high_watermark
        self._states = dict(states)
        self._brokers = None if brokers is None else dict(brokers)

    @classmethod
    def become_leader(
        cls,
        *,
        partition: str,
        local_id: int,
        leader_epoch: int,
        leader_end: int,
        replicas: Iterable[int],
        isr: Iterable[int],
        high_watermark: int,
        now_ms: int,
        limits: ReplicationLimits,
        brokers: Mapping[int, BrokerRegistration] | None = None,
        previous: LeaderReplicas | None = None,
    ) -> LeaderReplicas:
        """Start leading at ``leader_epoch`` with the local log ending at ``leader_end``
        (the start offset of the new epoch) and its high watermark ``high_watermark``.

        Each follower's state is reset as Kafka's ``Replica.resetReplicaState`` does: an ISR
        member counts as caught up now (so it is not dropped before it can fetch), any other
        as never caught up. A new leader knows nothing of the followers' logs; a re-elected
        one (``previous``) keeps their log end offsets and broker epochs."""
        replicas = tuple(replicas)
        isr_set = frozenset(isr)
        states: dict[int, ReplicaState] = {}
        for replica in replicas:
            if replica == local_id:
                continue
            in_sync = replica in isr_set
            caught_up = now_ms if in_sync else 0
            old = None if previous is None else previous._states.get(replica)
            if old is None:
                states[replica] = ReplicaState(
                    last_fetch_leader_end_offset=UNKNOWN_OFFSET,
                    last_caught_up_time_ms=caught_up,
                )
            else:
                states[replica] = replace(
                    old,
                    last_fetch_leader_end_offset=leader_end,
                    last_fetch_time_ms=caught_up,
                    last_caught_up_time_ms=caught_up,
                )
        tracker = cls(
            partition=partition,
            local_id=local_id,
            leader_epoch=leader_epoch,
            epoch_start_offset=leader_end,
            replicas=replicas,
            isr=isr_set,
            high_watermark=high_watermark,
            limits=limits,
            states=states,
            brokers=brokers,
        )
        log.info(
            "leader of %s at epoch %d from offset %d: hw %d, isr %s, replicas %s (%s)",
            partition,
            leader_epoch,
            leader_end,
            high_watermark,
            sorted(tracker._isr),
            list(replicas),
            "re-elected" if previous is not None else "new leader",
        )
        tracker._maybe_increment_high_watermark(now_ms)
        return tracker

    # -- queries -----------------------------------------------------------------------------
    def high_watermark(self) -> int:
        return self._high_watermark

    @property
    def leader_end(self) -> int:
        return self._leader_end

    @property
    def isr(self) -> frozenset[int]:
        """The committed ISR (as the metadata store has it)."""
        return self._isr

    @property
    def pending_isr(self) -> tuple[int, ...] | None:
        """The ISR proposed and not yet committed or rejected, sorted; None if none is."""
        return None if self._pending is None else tuple(sorted(self._pending))

    def maximal_isr(self) -> frozenset[int]:
        """The committed ISR plus any member being added (KIP-497): what the high watermark
        and acks=all wait for, so an in-flight change never makes them less strict."""
        return self._isr if self._pending is None else self._isr | self._pending

    def replica_state(self, replica: int) -> ReplicaState:
        return self._states[replica]

    def effective_min_isr(self) -> int:
        """min.insync.replicas, capped at the replica count (as Kafka does)."""
        return min(self.limits.min_insync_replicas, max(len(self.replicas), 1))

    def is_under_min_isr(self) -> bool:
        return len(self._isr) < self.effective_min_isr()

    def is_under_replicated(self) -> bool:
        return len(self._isr) < len(self.replicas)

    # -- produce -----------------------------------------------------------------------------
    def check_min_isr(self, acks: int) -> None:
        """Before appending a produce: an acks=all write is refused with
        NOT_ENOUGH_REPLICAS while the ISR is smaller than min.insync.replicas."""
        if acks == ACKS_ALL and self.is_under_min_isr():
            raise KafkaError(
                ErrorCode.not_enough_replicas,
                f"{self.partition}: ISR {sorted(self._isr)} is smaller than "
                f"min.insync.replicas {self.effective_min_isr()}",
            )

    def check_enough_replicas(self, required_offset: int) -> AckCheck:
        """The purgatory rule for an acks=all produce whose last record is at
        ``required_offset - 1``: answered once the high watermark reaches
        ``required_offset``."""
        if self._high_watermark < required_offset:
            return _WAITING
        if len(self.maximal_isr()) >= self.effective_min_isr():
            return AckCheck(satisfied=True)
        return AckCheck(satisfied=True, error=ErrorCode.not_enough_replicas_after_append)

    def on_leader_append(self, leader_end: int, now_ms: int) -> bool:
        """The local log grew to ``leader_end``; True if the high watermark moved (with an
        ISR of one it follows the leader's end at once)."""
        if leader_end < self._leader_end:
            raise ValueError(
                f"{self.partition}: leader end offset moved back {self._leader_end} -> {leader_end}"
            )
        self._leader_end = leader_end
        return self._maybe_increment_high_watermark(now_ms)

    # -- follower fetches --------------------------------------------------------------------
    def on_follower_fetch(
        self,
        replica: int,
        fetch_offset: int,
        now_ms: int,
        leader_end: int,
        *,
        broker_epoch: int = NO_BROKER_EPOCH,
        log_start_offset: int = UNKNOWN_OFFSET,
    ) -> bool:
        """A fetch from follower ``replica`` at ``fetch_offset`` (its log end offset) while
        the local log ends at ``leader_end``; True if the high watermark moved.

        Raises NOT_LEADER_OR_FOLLOWER for a broker that holds no replica of the partition
        and for a fetch whose broker epoch is older than the one the leader knows."""
        state = self._states.get(replica)
        if state is None:
            raise KafkaError(
                ErrorCode.not_leader_or_follower,
                f"{self.partition}: broker {replica} is not a replica {list(self.replicas)}",
            )
        if broker_epoch != NO_BROKER_EPOCH:
            known = self._known_broker_epoch(replica, state)
            if known is not None and broker_epoch < known:
                raise KafkaError(
                    ErrorCode.not_leader_or_follower,
                    f"{self.partition}: stale fetch from broker {replica} with broker epoch "
                    f"{broker_epoch}, expected {known}",
                )
            previous = state.known_broker_epoch
            if previous is not None and broker_epoch > previous:
                state = self._restarted(replica, broker_epoch)
        self._leader_end = max(self._leader_end, leader_end)
        before = state.log_end_offset
        self._states[replica] = state.after_fetch(
            fetch_offset, log_start_offset, now_ms, leader_end, broker_epoch
        )
        if before == fetch_offset:
            return False
        return self._maybe_increment_high_watermark(now_ms)

    def on_brokers(self, brokers: Mapping[int, BrokerRegistration], now_ms: int) -> bool:
        """The live brokers changed (metadata image). A follower registered with a newer
        broker epoch than its fetches carried has restarted: it is treated as new. True if
        the high watermark moved (a broker that is gone no longer holds it back unless it
        is in the ISR)."""
        self._brokers = dict(brokers)
        for replica, state in list(self._states.items()):
            registration = brokers.get(replica)
            previous = state.known_broker_epoch
            if registration is not None and previous is not None and registration.epoch > previous:
                self._states[replica] = self._restarted(replica, registration.epoch)
        return self._maybe_increment_high_watermark(now_ms)

    # -- ISR changes -------------------------------------------------------------------------
    def maybe_shrink(self, now_ms: int) -> tuple[int, ...]:
        """The ISR members out of sync for longer than replica.lag.time.max.ms, sorted; when
        there are any, the ISR without them becomes the pending proposal. Nothing while a
        proposal is in flight."""
        if self._pending is not None:
            return ()
        lag_ms = self.limits.replica_lag_time_max_ms
        out = tuple(
            sorted(
                replica
                for replica in self._isr - {self.local_id}
                if replica not in self._states
                or not self._states[replica].is_caught_up(self._leader_end, now_ms, lag_ms)
            )
        )
        if out:
            self._pending = self._isr - set(out)
            log.info(
                "shrinking ISR of %s from %s to %s: leader end %d, hw %d, out of sync %s",
                self.partition,
                sorted(self._isr),
                sorted(self._pending),
                self._leader_end,
                self._high_watermark,
                ", ".join(
                    f"{r}(leo {s.log_end_offset}, caught up at {s.last_caught_up_time_ms})"
                    for r in out
                    for s in [self._states.get(r, ReplicaState())]
                ),
            )
        return out

    def maybe_expand(self) -> int | None:
        """A follower that may join the ISR (the lowest id if several); the ISR with it
        becomes the pending proposal. None while a proposal is in flight."""
        if self._pending is not None:
            return None
        for replica in sorted(self._states):
            if replica in self._isr or not self._is_isr_eligible(replica):
                continue
            end = self._states[replica].log_end_offset
            if end >= self._high_watermark and end >= self.epoch_start_offset:
                self._pending = self._isr | {replica}
                log.info(
                    "expanding ISR of %s from %s to %s: replica %d at %d, hw %d, epoch %d "
                    "started at %d",
                    self.partition,
                    sorted(self._isr),
                    sorted(self._pending),
                    replica,
                    end,
                    self._high_watermark,
                    self.leader_epoch,
                    self.epoch_start_offset,
                )
                return replica
        return None

    def on_isr_committed(self, isr: Iterable[int], now_ms: int) -> bool:
        """The store now holds ``isr`` for this leadership (our proposal, or another
        writer's); True if the high watermark moved."""
        self._isr = frozenset(isr) | {self.local_id}
        self._pending = None
        return self._maybe_increment_high_watermark(now_ms)

    def on_isr_rejected(self) -> None:
        """The proposal lost its compare-and-swap: the committed ISR stays until the store's
        current state arrives through ``on_isr_committed``."""
        log.info("ISR change of %s to %s was refused", self.partition, self.pending_isr)
        self._pending = None

    # -- internals ---------------------------------------------------------------------------
    def _known_broker_epoch(self, replica: int, state: ReplicaState) -> int | None:
        epochs = [] if state.known_broker_epoch is None else [state.known_broker_epoch]
        registration = None if self._brokers is None else self._brokers.get(replica)
        if registration is not None and registration.epoch != NO_BROKER_EPOCH:
            epochs.append(registration.epoch)
        return max(epochs) if epochs else None

    def _restarted(self, replica: int, broker_epoch: int) -> ReplicaState:
        old = self._states[replica]
        log.info(
            "replica %d of %s restarted (broker epoch %s -> %d): its fetch state starts over%s",
            replica,
            self.partition,
            old.broker_epoch,
            broker_epoch,
            " and it will leave the ISR unless it catches up" if replica in self._isr else "",
        )
        return ReplicaState(last_fetch_leader_end_offset=UNKNOWN_OFFSET, broker_epoch=broker_epoch)

    def _is_isr_eligible(self, replica: int) -> bool:
        """Alive, not shutting down, and fetching with its registered broker epoch (a fetch
        that carried none, made before its registration was known, does not count)."""
        if self._brokers is None:
            return True
        registration = self._brokers.get(replica)
        if registration is None or registration.shutting_down:
            return False
        return self._states[replica].broker_epoch == registration.epoch

    def _maybe_increment_high_watermark(self, now_ms: int) -> bool:
        if self.is_under_min_isr():
            return False
        lag_ms = self.limits.replica_lag_time_max_ms
        maximal = self.maximal_isr()
        new = self._leader_end
        for replica, state in self._states.items():
            if state.log_end_offset >= new:
                continue
            if replica in maximal or (
                state.is_caught_up(self._leader_end, now_ms, lag_ms)
                and self._is_isr_eligible(replica)
            ):
                new = state.log_end_offset
        if new <= self._high_watermark:
            return False
        log.debug("high watermark of %s: %d -> %d", self.partition, self._high_watermark, new)
        self._high_watermark = new
        return True
