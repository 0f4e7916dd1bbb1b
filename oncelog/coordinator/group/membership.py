"""Membership of classic consumer groups: the JoinGroup/SyncGroup/Heartbeat/LeaveGroup
decisions, the rebalance, generations, static members (KIP-345), member ids handed out
first (KIP-394), and session/rebalance/sync timeouts.

Sans-IO: every decision is a plain synchronous method working on ``GroupMetadata`` with
times from the injected clock, and returns a ``Decision``: the answer for the caller now
(or None: the caller waits) and the ``events`` the decision produced, in order —
``AwaitJoin``/``AwaitSync`` (the caller waits for a later answer) and ``Deliver`` (a waiting
member gets its JoinResult or SyncResult). The async shell (``coordinator.py``) turns them
into futures; tests read them directly. ``reschedule`` says that a deadline earlier than
the sweep's last answer may now exist.

The rebalance, in Kafka's terms:
  - a new member (or a known member with changed protocols, or the leader) joining a group
    moves it to PreparingRebalance; everyone must rejoin;
  - the join phase of an Empty group lasts ``group.initial.rebalance.delay.ms`` (extended by
    that delay, up to the rebalance timeout, while new members keep arriving in a brand-new
    group); otherwise it ends as soon as every known member has rejoined, or after the
    largest rebalance timeout, removing the members that did not rejoin;
  - then CompletingRebalance: every member gets its JoinGroup answer (the leader with the
    members' metadata) and must send SyncGroup within the rebalance timeout; the leader's
    assignment is appended to the log ("decide, append, then apply"), after which the group
    is Stable and every member gets its assignment.
"""

from __future__ import annotations

import functools
import logging
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Concatenate, ParamSpec, TypeVar

from oncelog.config import BrokerConfig
from oncelog.coordinator.group.metadata import GroupMetadata, MemberMetadata, Protocols
from oncelog.coordinator.group.rebalance import (
    AwaitJoin,
    AwaitSync,
    Decision,
    Deliver,
    Event,
    Rebalance,
    current_generation,
    deadlines,
)
from oncelog.coordinator.group.results import UNKNOWN_MEMBER_ID, JoinResult, SyncResult
from oncelog.coordinator.group.state import GroupState
from oncelog.coordinator.group.table import GroupTable
from oncelog.coordinator.store_errors import StoreWrite, translate_store_error
from oncelog.errors import ErrorCode, KafkaError

__all__ = ["AwaitJoin", "AwaitSync", "Decision", "Deliver", "Event", "GroupMembership"]

log = logging.getLogger(__name__)

EMPTY = GroupState.EMPTY
PREPARING = GroupState.PREPARING_REBALANCE
COMPLETING = GroupState.COMPLETING_REBALANCE
STABLE = GroupState.STABLE
DEAD = GroupState.DEAD


P = ParamSpec("P")
T = TypeVar("T")


def _decides(
    method: Callable[Concatenate[GroupMembership, P], T | None],
) -> Callable[Concatenate[GroupMembership, P], Decision[T]]:
    """A decision method: its answer (None: the caller waits) with the events it produced."""

    @functools.wraps(method)
    def decide(self: GroupMembership, *args: P.args, **kwargs: P.kwargs) -> Decision[T]:
        return self._rebalance.take(method(self, *args, **kwargs))

    return decide


@dataclass(frozen=True, slots=True)
class _JoinRequest:
    group_instance_id: str | None
    protocol_type: str
    protocols: Protocols
    session_timeout_ms: int
    rebalance_timeout_ms: int
    client_id: str
    client_host: str


class GroupMembership:
    def __init__(self, config: BrokerConfig, table: GroupTable) -> None:
        self._table = table
        self._clock = table.clock
        self._min_session_ms = int(config["group.min.session.timeout.ms"])
        self._max_session_ms = int(config["group.max.session.timeout.ms"])
        self._max_group_size = int(config["group.max.size"])
        self._rebalance = Rebalance(table, int(config["group.initial.rebalance.delay.ms"]))

    # ======================================================================================
    # JoinGroup

    @_decides
    def join(
        self,
        group_id: str,
        member_id: str,
        group_instance_id: str | None,
        protocol_type: str,
        protocols: Sequence[tuple[str, bytes]],
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        client_id: str,
        client_host: str,
        require_known_member_id: bool,
    ) -> JoinResult | None:
        """The decision of a JoinGroup. ``rebalance_timeout_ms`` < 0 (JoinGroup v0) means
        "same as the session timeout"."""
        protos: Protocols = tuple((name, bytes(data)) for name, data in protocols)
        if rebalance_timeout_ms < 0:
            rebalance_timeout_ms = session_timeout_ms
        request = _JoinRequest(
            group_instance_id, protocol_type, protos, session_timeout_ms,
            rebalance_timeout_ms, client_id, client_host,
        )
        return self._join(group_id, member_id, request, require_known_member_id)

    def _join(
        self, group_id: str, member_id: str, req: _JoinRequest, require_known_member_id: bool
    ) -> JoinResult | None:
        if not group_id:
            return JoinResult(ErrorCode.invalid_group_id, member_id)
        if not self._min_session_ms <= req.session_timeout_ms <= self._max_session_ms:
            return JoinResult(ErrorCode.invalid_session_timeout, member_id)
        new_member = member_id == UNKNOWN_MEMBER_ID
        group = self._table.get(group_id)
        if group is None:
            if not new_member:
                return JoinResult(ErrorCode.unknown_member_id, member_id)
            group = self._table.new_group(group_id)
            self._table.groups[group_id] = group
        if group.is_(DEAD):
            return JoinResult(ErrorCode.coordinator_not_available, member_id)
        joining_fresh = new_member or member_id in group.pending_members
        instance_id = req.group_instance_id
        rejoining_static = instance_id is not None and instance_id in group.static_members
        if joining_fresh and not rejoining_static and len(group.members) >= self._max_group_size:
            group.pending_members.pop(member_id, None)
            return JoinResult(ErrorCode.group_max_size_reached, member_id)
        if new_member:
            return self._join_new_member(group, req, require_known_member_id)
        return self._join_known_member(group, member_id, req)

    def _join_new_member(
        self, group: GroupMetadata, req: _JoinRequest, require_known_member_id: bool
    ) -> JoinResult | None:
        if not group.supports_protocols(req.protocol_type, req.protocols):
            return JoinResult(ErrorCode.inconsistent_group_protocol)
        if req.group_instance_id is not None:
            new_id = f"{req.group_instance_id}-{uuid.uuid4()}"
            if req.group_instance_id in group.static_members:
                return self._rejoin_static_member(group, new_id, req)
            return self._add_member_and_rebalance(group, new_id, req)
        new_id = f"{req.client_id}-{uuid.uuid4()}"
        if require_known_member_id:
            # KIP-394: hand out the id first; the member is only added when it comes back.
            deadline = self._clock.monotonic_ms() + req.session_timeout_ms
            group.pending_members[new_id] = deadline
            self._rebalance.reschedule = True
            log.info("group %s: new member %s must rejoin with its id", group.group_id, new_id)
            return JoinResult(ErrorCode.member_id_required, new_id)
        return self._add_member_and_rebalance(group, new_id, req)

    def _join_known_member(
        self, group: GroupMetadata, member_id: str, req: _JoinRequest
    ) -> JoinResult | None:
        if member_id in group.pending_members:
            if req.group_instance_id is not None:
                return JoinResult(ErrorCode.unknown_member_id, member_id)
            if not group.supports_protocols(req.protocol_type, req.protocols):
                return JoinResult(ErrorCode.inconsistent_group_protocol, member_id)
            del group.pending_members[member_id]
            return self._add_member_and_rebalance(group, member_id, req)
        if group.static_member_fenced(member_id, req.group_instance_id):
            return JoinResult(ErrorCode.fenced_instance_id, member_id)
        member = group.members.get(member_id)
        if member is None:
            return JoinResult(ErrorCode.unknown_member_id, member_id)
        if not group.supports_protocols(req.protocol_type, req.protocols):
            return JoinResult(ErrorCode.inconsistent_group_protocol, member_id)
        self._table.touch(member)
        if group.is_(PREPARING):
            return self._update_member_and_rebalance(group, member, req, "member rejoined")
        if group.is_(COMPLETING):
            if member.matches(req.protocols):
                # A retried JoinGroup: answer with the generation it already belongs to.
                return current_generation(group, member)
            return self._update_member_and_rebalance(group, member, req, "protocols changed")
        if group.is_(STABLE):
            if group.is_leader(member_id) or not member.matches(req.protocols):
                reason = "leader rejoined" if group.is_leader(member_id) else "protocols changed"
                return self._update_member_and_rebalance(group, member, req, reason)
            return current_generation(group, member)
        return JoinResult(ErrorCode.unknown_member_id, member_id)

    def _rejoin_static_member(
        self, group: GroupMetadata, new_id: str, req: _JoinRequest
    ) -> JoinResult | None:
        assert req.group_instance_id is not None
        old_id = group.static_members[req.group_instance_id]
        fenced_join = JoinResult(ErrorCode.fenced_instance_id, old_id)
        self._rebalance.deliver(group, group.members[old_id], fenced_join)
        fenced_sync = SyncResult(ErrorCode.fenced_instance_id)
        self._rebalance.deliver(group, group.members[old_id], fenced_sync)
        member = group.replace_static_member(req.group_instance_id, new_id)
        log.info("group %s: static member %s replaced %s by %s",
                 group.group_id, req.group_instance_id, old_id, new_id)
        self._table.touch(member)
        if group.is_(STABLE) and member.matches(req.protocols) and not group.is_leader(new_id):
            # Same subscription: keep the assignment, no rebalance; persist the new id first.
            try:
                self._table.append(group.group_id, [self._table.group_record(group)])
            except KafkaError as exc:
                error = translate_store_error(exc.code, StoreWrite.GROUP_METADATA)
                group.replace_static_member(req.group_instance_id, old_id)
                return JoinResult(error, UNKNOWN_MEMBER_ID)
            member.client_id, member.client_host = req.client_id, req.client_host
            return current_generation(group, member)
        member.client_id, member.client_host = req.client_id, req.client_host
        return self._update_member_and_rebalance(group, member, req, "static member rejoined")

    def _add_member_and_rebalance(
        self, group: GroupMetadata, member_id: str, req: _JoinRequest
    ) -> JoinResult | None:
        """Add the member and wait for the join phase (the answer is always None)."""
        member = MemberMetadata(
            member_id=member_id,
            group_instance_id=req.group_instance_id,
            client_id=req.client_id,
            client_host=req.client_host,
            rebalance_timeout_ms=req.rebalance_timeout_ms,
            session_timeout_ms=req.session_timeout_ms,
            protocol_type=req.protocol_type,
            protocols=req.protocols,
        )
        if group.is_(PREPARING) and group.generation_id == 0:
            group.new_member_added = True  # a brand-new group may wait a little longer
        group.add_member(member)
        self._table.touch(member)
        self._rebalance.await_join(group, member)
        log.info("group %s: member %s joined (client %s, host %s)",
                 group.group_id, member_id, req.client_id, req.client_host)
        self._rebalance.maybe_prepare(group, f"new member {member_id}")
        self._rebalance.maybe_complete_join(group)
        return None

    def _update_member_and_rebalance(
        self, group: GroupMetadata, member: MemberMetadata, req: _JoinRequest, reason: str
    ) -> JoinResult | None:
        """Take the member's new protocols and wait for the join phase (answer: None)."""
        member.protocols = req.protocols
        member.rebalance_timeout_ms = req.rebalance_timeout_ms
        member.session_timeout_ms = req.session_timeout_ms
        self._rebalance.await_join(group, member)
        self._rebalance.maybe_prepare(group, f"{reason}: {member.member_id}")
        self._rebalance.maybe_complete_join(group)
        return None


    # ======================================================================================
    # SyncGroup

    @_decides
    def sync(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        protocol_type: str | None,
        protocol_name: str | None,
        assignments: Mapping[str, bytes],
    ) -> SyncResult | None:
        """Followers wait for the leader's assignment; the leader's is stored, then shared."""
        if not group_id:
            return SyncResult(ErrorCode.invalid_group_id)
        group = self._table.get(group_id)
        if group is None:
            return SyncResult(ErrorCode.unknown_member_id)
        if group.is_(DEAD):
            return SyncResult(ErrorCode.coordinator_not_available)
        if group.static_member_fenced(member_id, group_instance_id):
            return SyncResult(ErrorCode.fenced_instance_id)
        member = group.members.get(member_id)
        if member is None:
            return SyncResult(ErrorCode.unknown_member_id)
        if generation_id != group.generation_id:
            return SyncResult(ErrorCode.illegal_generation)
        if (protocol_type is not None and protocol_type != group.protocol_type) or (
            protocol_name is not None and protocol_name != group.protocol_name
        ):
            return SyncResult(ErrorCode.inconsistent_group_protocol)
        if group.is_(PREPARING):
            return SyncResult(ErrorCode.rebalance_in_progress)
        if not group.is_(COMPLETING, STABLE):
            return SyncResult(ErrorCode.unknown_member_id)
        self._table.touch(member)
        group.pending_sync.discard(member_id)
        if not group.pending_sync:
            group.sync_deadline = None
        if group.is_(STABLE):
            return SyncResult(ErrorCode.none, group.protocol_type, group.protocol_name,
                              member.assignment)
        self._rebalance.await_sync(group, member)
        if group.is_leader(member_id):
            self._rebalance.complete_sync(group, assignments)
        return None

    # ======================================================================================
    # Heartbeat and LeaveGroup

    def heartbeat(
        self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None
    ) -> ErrorCode:
        if not group_id:
            return ErrorCode.invalid_group_id
        group = self._table.get(group_id)
        if group is None:
            return ErrorCode.unknown_member_id
        if group.is_(DEAD):
            return ErrorCode.coordinator_not_available
        if group.static_member_fenced(member_id, group_instance_id):
            return ErrorCode.fenced_instance_id
        member = group.members.get(member_id)
        if member is None or group.is_(EMPTY):
            return ErrorCode.unknown_member_id
        if generation_id != group.generation_id:
            return ErrorCode.illegal_generation
        self._table.touch(member)
        if group.is_(PREPARING):
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    @_decides
    def leave(
        self, group_id: str, members: Sequence[tuple[str, str | None]]
    ) -> list[ErrorCode] | None:
        """Per leaving (member id, group instance id), an error code.

        Raises KafkaError for errors of the whole request (invalid group id, dead group)."""
        if not group_id:
            raise KafkaError(ErrorCode.invalid_group_id, "empty group id")
        group = self._table.get(group_id)
        if group is None:
            return [ErrorCode.unknown_member_id for _ in members]
        if group.is_(DEAD):
            raise KafkaError(ErrorCode.coordinator_not_available, f"group {group_id} is dead")
        return [self._leave_one(group, mid, iid) for mid, iid in members]

    def _leave_one(
        self, group: GroupMetadata, member_id: str, instance_id: str | None
    ) -> ErrorCode:
        if member_id == UNKNOWN_MEMBER_ID and instance_id is not None:
            known = group.static_members.get(instance_id)
            if known is None:
                return ErrorCode.unknown_member_id
            member_id = known
        elif group.static_member_fenced(member_id, instance_id):
            return ErrorCode.fenced_instance_id
        if member_id in group.pending_members:
            del group.pending_members[member_id]
            log.info("group %s: pending member %s left", group.group_id, member_id)
            self._rebalance.maybe_complete_join(group)
            return ErrorCode.none
        member = group.members.get(member_id)
        if member is None:
            return ErrorCode.unknown_member_id
        log.info("group %s: member %s left", group.group_id, member_id)
        self._rebalance.remove_member_and_update_group(group, member, f"member {member_id} left")
        return ErrorCode.none

    # ======================================================================================
    # Timeouts

    @_decides
    def sweep(self) -> None:
        """Expire, in every group, what is due at the clock's current time (sessions,
        pending members, join phases, sync waits)."""
        now = self._clock.monotonic_ms()
        for group in list(self._table.groups.values()):
            self._rebalance.sweep(group, now)

    def next_deadline(self) -> int | None:
        """The earliest monotonic deadline of any group (None if there is none)."""
        return min((d for group in self._table.groups.values() for d in deadlines(group)),
                   default=None)
