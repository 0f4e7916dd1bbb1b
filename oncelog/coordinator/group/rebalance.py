"""The rebalance of a classic group, and what the membership decisions produce.

``Rebalance`` owns the phases (PreparingRebalance → CompletingRebalance → Stable, see
``membership.py``'s docstring), member removal, the timeouts swept by ``sweep`` (sessions,
KIP-394 pending members, join phases, sync waits) and the events a decision produces, in
order: ``AwaitJoin``/``AwaitSync`` (the caller waits for a later answer) and ``Deliver`` (a
waiting member gets its JoinResult or SyncResult). ``take`` packs them with the caller's
answer into a ``Decision``. Sans-IO: no asyncio; the store's append is the only I/O.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

from oncelog.coordinator.group import codec
from oncelog.coordinator.group.metadata import GroupMetadata, MemberMetadata
from oncelog.coordinator.group.results import JoinMember, JoinResult, SyncResult
from oncelog.coordinator.group.state import GroupState, can_transition
from oncelog.coordinator.group.table import GroupTable
from oncelog.coordinator.store_errors import StoreWrite, translate_store_error
from oncelog.errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)

EMPTY = GroupState.EMPTY
PREPARING = GroupState.PREPARING_REBALANCE
COMPLETING = GroupState.COMPLETING_REBALANCE
STABLE = GroupState.STABLE

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class AwaitJoin:
    """The member's JoinGroup waits (an earlier waiting one gets REBALANCE_IN_PROGRESS)."""

    group_id: str
    member_id: str


@dataclass(frozen=True, slots=True)
class AwaitSync:
    """The member's SyncGroup waits (an earlier waiting one gets REBALANCE_IN_PROGRESS)."""

    group_id: str
    member_id: str


@dataclass(frozen=True, slots=True)
class Deliver:
    """The member's waiting JoinGroup (JoinResult) or SyncGroup (SyncResult) is answered
    with ``result`` (nothing happens if it is not waiting)."""

    group_id: str
    member_id: str
    result: JoinResult | SyncResult


Event = AwaitJoin | AwaitSync | Deliver


@dataclass(frozen=True, slots=True)
class Decision(Generic[T]):
    """A decision's answer for its caller (None: the caller waits for its ``Deliver``),
    the events it produced, and whether a deadline earlier than the sweep's last one may
    now exist (the shell then wakes its timer loop)."""

    answer: T | None
    events: tuple[Event, ...] = ()
    reschedule: bool = False


class Rebalance:
    def __init__(self, table: GroupTable, initial_delay_ms: int) -> None:
        self._table = table
        self._clock = table.clock
        self._initial_delay_ms = initial_delay_ms
        self._events: list[Event] = []
        self.reschedule = False

    def take(self, answer: T | None) -> Decision[T]:
        """The decision with every event produced since the last one."""
        decision = Decision(answer, tuple(self._events), self.reschedule)
        self._events.clear()
        self.reschedule = False
        return decision

    # -- events ----------------------------------------------------------------------------

    def await_join(self, group: GroupMetadata, member: MemberMetadata) -> None:
        member.awaiting_join = True
        self._events.append(AwaitJoin(group.group_id, member.member_id))

    def await_sync(self, group: GroupMetadata, member: MemberMetadata) -> None:
        member.awaiting_sync = True
        self._events.append(AwaitSync(group.group_id, member.member_id))

    def deliver(
        self, group: GroupMetadata, member: MemberMetadata, result: JoinResult | SyncResult
    ) -> None:
        if isinstance(result, JoinResult):
            member.awaiting_join = False
        else:
            member.awaiting_sync = False
        self._events.append(Deliver(group.group_id, member.member_id, result))

    # -- phases ----------------------------------------------------------------------------

    def maybe_prepare(self, group: GroupMetadata, reason: str) -> None:
        if can_transition(group.state, PREPARING):
            self._prepare(group, reason)

    def _prepare(self, group: GroupMetadata, reason: str) -> None:
        if group.is_(COMPLETING):
            # Assignments of the generation being completed will never come: tell everyone
            # who is waiting for one to rejoin.
            self.fail_syncs(group, ErrorCode.rebalance_in_progress)
        group.pending_sync.clear()
        group.sync_deadline = None
        now = self._clock.monotonic_ms()
        if group.is_(EMPTY):
            group.in_initial_delay = True
            group.new_member_added = False
            group.initial_delay_remaining_ms = max(
                group.rebalance_timeout_ms() - self._initial_delay_ms, 0
            )
            group.join_deadline = now + self._initial_delay_ms
        else:
            group.in_initial_delay = False
            group.join_deadline = now + group.rebalance_timeout_ms()
        old = group.state
        group.transition_to(PREPARING, self._clock.now_ms())
        log.info("group %s: rebalance (%s -> PreparingRebalance, generation %d): %s",
                 group.group_id, old.value, group.generation_id, reason)
        self.reschedule = True

    def maybe_complete_join(self, group: GroupMetadata) -> None:
        """End the join phase if its time has come (see ``membership.py``)."""
        if not group.is_(PREPARING) or group.join_deadline is None:
            return
        now = self._clock.monotonic_ms()
        if group.in_initial_delay:
            if now < group.join_deadline:
                return
            if group.new_member_added and group.initial_delay_remaining_ms > 0:
                group.new_member_added = False
                delay = min(self._initial_delay_ms, group.initial_delay_remaining_ms)
                group.initial_delay_remaining_ms -= delay
                group.join_deadline = now + delay
                self.reschedule = True
                return
            self._complete_join(group)
        elif group.all_members_joined() or now >= group.join_deadline:
            self._complete_join(group)

    def _complete_join(self, group: GroupMetadata) -> None:
        for member in group.not_yet_rejoined():
            log.info("group %s: member %s did not rejoin in time; removed",
                     group.group_id, member.member_id)
            self.remove_member(group, member, ErrorCode.unknown_member_id)
        group.join_deadline = None
        group.in_initial_delay = False
        group.new_member_added = False
        group.maybe_elect_joined_leader()
        group.generation_id += 1
        now_wall = self._clock.now_ms()
        if not group.members:
            group.protocol_name = None
            group.leader_id = None
            group.transition_to(EMPTY, now_wall)
            log.info("group %s: empty at generation %d", group.group_id, group.generation_id)
            try:
                self._table.append(group.group_id, [self._table.group_record(group)])
            except KafkaError as exc:
                log.warning("group %s: could not store empty group: %s", group.group_id, exc)
            return
        group.protocol_name = group.select_protocol()
        group.transition_to(COMPLETING, now_wall)
        now = self._clock.monotonic_ms()
        for member in list(group.members.values()):
            member.heartbeat_deadline = now + member.session_timeout_ms
            self.deliver(group, member, current_generation(group, member))
        group.pending_sync = set(group.members)
        group.sync_deadline = now + group.rebalance_timeout_ms()
        log.info("group %s: generation %d with %d members, protocol %s, leader %s",
                 group.group_id, group.generation_id, len(group.members),
                 group.protocol_name, group.leader_id)
        self.reschedule = True

    def complete_sync(self, group: GroupMetadata, assignments: Mapping[str, bytes]) -> None:
        """Prepare (the record), append durably, then complete (Stable, answer everyone)."""
        for unknown in set(assignments) - set(group.members):
            log.warning("group %s: leader assigned to unknown member %s; ignored",
                        group.group_id, unknown)
        chosen = {mid: bytes(assignments.get(mid, b"")) for mid in group.members}
        value = dataclasses.replace(
            group.to_record(),
            members=tuple(
                dataclasses.replace(m.to_record(group.protocol_name), assignment=chosen[mid])
                for mid, m in group.members.items()
            ),
        )
        key = codec.encode_group_key(codec.GroupMetadataKey(group.group_id))
        try:
            self._table.append(group.group_id, [(key, codec.encode_group_value(value))])
        except KafkaError as exc:
            error = translate_store_error(exc.code, StoreWrite.GROUP_METADATA)
            log.warning("group %s: storing generation %d failed (%s); rebalancing",
                        group.group_id, group.generation_id, exc)
            self.fail_syncs(group, error)
            self.maybe_prepare(group, "failed to store the assignment")
            self.maybe_complete_join(group)
            return
        for mid, member in group.members.items():
            member.assignment = chosen[mid]
        group.transition_to(STABLE, self._clock.now_ms())
        log.info("group %s: stable at generation %d", group.group_id, group.generation_id)
        for member in list(group.members.values()):
            self.deliver(
                group,
                member,
                SyncResult(ErrorCode.none, group.protocol_type, group.protocol_name,
                           member.assignment),
            )

    def fail_syncs(self, group: GroupMetadata, error: ErrorCode) -> None:
        for member in group.members.values():
            member.assignment = b""
            self.deliver(group, member, SyncResult(error))

    # -- member removal --------------------------------------------------------------------

    def remove_member(
        self, group: GroupMetadata, member: MemberMetadata, error: ErrorCode
    ) -> None:
        """Drop a member and answer whatever it is waiting for with ``error``."""
        self.deliver(group, member, JoinResult(error, member.member_id))
        self.deliver(group, member, SyncResult(error))
        group.remove_member(member.member_id)

    def remove_member_and_update_group(
        self, group: GroupMetadata, member: MemberMetadata, reason: str
    ) -> None:
        self.remove_member(group, member, ErrorCode.unknown_member_id)
        if group.is_(STABLE, COMPLETING):
            self.maybe_prepare(group, reason)
        self.maybe_complete_join(group)

    # -- timeouts --------------------------------------------------------------------------

    def sweep(self, group: GroupMetadata, now: int) -> None:
        """Expire what is due in one group at monotonic ``now``."""
        for member_id, deadline in list(group.pending_members.items()):
            if deadline <= now:
                del group.pending_members[member_id]
                log.info("group %s: pending member %s never rejoined; forgotten",
                         group.group_id, member_id)
        for member in list(group.members.values()):
            if member.member_id not in group.members:
                continue  # removed by an earlier step of this sweep
            if member.awaiting_join or member.awaiting_sync:
                continue
            if member.heartbeat_deadline <= now:
                log.info("group %s: member %s session expired (%d ms)",
                         group.group_id, member.member_id, member.session_timeout_ms)
                self.remove_member_and_update_group(
                    group, member, f"session of {member.member_id} expired"
                )
        if (
            group.is_(COMPLETING, STABLE)
            and group.pending_sync
            and group.sync_deadline is not None
            and group.sync_deadline <= now
        ):
            late = [group.members[mid] for mid in group.pending_sync if mid in group.members]
            log.info("group %s: %d members did not sync in time; removed",
                     group.group_id, len(late))
            for member in late:
                self.remove_member(group, member, ErrorCode.unknown_member_id)
            group.pending_sync.clear()
            group.sync_deadline = None
            self.maybe_prepare(group, "members did not sync in time")
        self.maybe_complete_join(group)


def deadlines(group: GroupMetadata) -> list[int]:
    """The monotonic deadlines a group's sweep has scheduled."""
    out = list(group.pending_members.values())
    out.extend(
        m.heartbeat_deadline
        for m in group.members.values()
        if not (m.awaiting_join or m.awaiting_sync)
    )
    if group.is_(PREPARING) and group.join_deadline is not None:
        out.append(group.join_deadline)
    if group.is_(COMPLETING, STABLE) and group.pending_sync and group.sync_deadline is not None:
        out.append(group.sync_deadline)
    return out


def current_generation(group: GroupMetadata, member: MemberMetadata) -> JoinResult:
    """The JoinGroup answer of a member of the group's current generation (the leader's
    lists every member's metadata)."""
    leader = group.is_leader(member.member_id)
    return JoinResult(
        error=ErrorCode.none,
        member_id=member.member_id,
        generation_id=group.generation_id,
        protocol_type=group.protocol_type,
        protocol_name=group.protocol_name,
        leader_id=group.leader_id or "",
        members=_join_members(group) if leader else (),
    )


def _join_members(group: GroupMetadata) -> tuple[JoinMember, ...]:
    assert group.protocol_name is not None
    return tuple(
        JoinMember(m.member_id, m.group_instance_id, m.metadata_for(group.protocol_name))
        for m in group.members.values()
    )
