"""The group coordinator: classic consumer groups (JoinGroup/SyncGroup/Heartbeat/LeaveGroup)
and committed offsets, kept in ``__consumer_offsets`` through an ``OffsetsStore``.

Every decision is a plain synchronous method working on ``GroupMetadata`` with times from the
injected clock; tests drive it with a FakeClock and ``tick()``. asyncio appears only as the
futures that hold a JoinGroup or SyncGroup response until the group is ready to answer, and
in ``run()``, the single background loop that calls ``tick()`` at the next deadline.

Durability follows "decide, append, then apply": an assignment or a commit changes the
in-memory state only after the store's append has returned.

Offsets committed inside a transaction (TxnOffsetCommit, KIP-98/KIP-447) are appended as a
transactional batch of the producer and kept as that producer's pending offsets of the
group; OffsetFetch does not see them (with require_stable it answers UNSTABLE_OFFSET_COMMIT
for their partitions). The broker calls ``on_txn_marker`` once the transaction's COMMIT or
ABORT marker is durably in the offsets partition: COMMIT applies them, ABORT drops them.
Whether the producer's transaction holds the offsets partition is checked by the API
handler with the transaction coordinator before ``commit_txn_offsets`` is called; the
coordinator itself fences epochs older than the newest it has seen for a producer id, as
the offsets partition's producer state does in Kafka.

The rebalance, in Kafka's terms:
  - a new member (or a known member with changed protocols, or the leader) joining a group
    moves it to PreparingRebalance; everyone must rejoin;
  - the join phase of an Empty group lasts ``group.initial.rebalance.delay.ms`` (extended by
    that delay, up to the rebalance timeout, while new members keep arriving in a brand-new
    group); otherwise it ends as soon as every known member has rejoined, or after the
    largest rebalance timeout, removing the members that did not rejoin;
  - then CompletingRebalance: every member gets its JoinGroup answer (the leader with the
    members' metadata) and must send SyncGroup within the rebalance timeout; the leader's
    assignment is appended to the log, after which the group is Stable and every member
    gets its assignment.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import uuid
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

from oncelog.clock import Clock
from oncelog.config import BrokerConfig
from oncelog.coordinator.group import codec
from oncelog.coordinator.group.loader import load_groups
from oncelog.coordinator.group.metadata import (
    CommittedOffset,
    GroupMetadata,
    MemberMetadata,
    Protocols,
)
from oncelog.coordinator.group.results import (
    NO_LEADER_EPOCH,
    NO_OFFSET,
    UNKNOWN_MEMBER_ID,
    CoordinatorStatistics,
    GroupDescription,
    JoinMember,
    JoinResult,
    ListedGroup,
    MemberDescription,
    OffsetFetchEntry,
    SyncResult,
    TopicPartition,
)
from oncelog.coordinator.group.state import GroupState, can_transition, parse_state
from oncelog.coordinator.group.store import OffsetsStore, Record
from oncelog.errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)

# Kafka's offsets.retention.check.interval.ms default.
OFFSETS_RETENTION_CHECK_INTERVAL_MS = 600_000
# Kafka's producer.id.expiration.ms default (how long an idle producer's epoch is remembered).
PRODUCER_ID_EXPIRATION_MS = 86_400_000
# The background loop never sleeps longer than this, whatever the deadlines.
MAX_SLEEP_MS = 1_000

EMPTY = GroupState.EMPTY
PREPARING = GroupState.PREPARING_REBALANCE
COMPLETING = GroupState.COMPLETING_REBALANCE
STABLE = GroupState.STABLE
DEAD = GroupState.DEAD

OffsetCommitEntry = tuple[int, int, str | None]  # offset, leader epoch, metadata


def translate_store_error(code: ErrorCode, *, for_commit: bool) -> ErrorCode:
    """The one place where an append failure of the offsets log becomes a client's error."""
    if code in (
        ErrorCode.unknown_topic_or_partition,
        ErrorCode.not_enough_replicas,
        ErrorCode.not_enough_replicas_after_append,
    ):
        return ErrorCode.coordinator_not_available
    if code == ErrorCode.request_timed_out:
        return (
            ErrorCode.coordinator_not_available if for_commit else ErrorCode.rebalance_in_progress
        )
    if code in (ErrorCode.not_leader_or_follower, ErrorCode.kafka_storage_error):
        return ErrorCode.not_coordinator
    if code in (
        ErrorCode.message_too_large,
        ErrorCode.record_list_too_large,
        ErrorCode.invalid_fetch_size,
    ):
        return (
            ErrorCode.invalid_commit_offset_size if for_commit else ErrorCode.unknown_server_error
        )
    return code


class GroupCoordinator:
    def __init__(self, config: BrokerConfig, store: OffsetsStore, clock: Clock) -> None:
        self._config = config
        self._store = store
        self._clock = clock
        self._initial_delay_ms = int(config["group.initial.rebalance.delay.ms"])
        self._min_session_ms = int(config["group.min.session.timeout.ms"])
        self._max_session_ms = int(config["group.max.session.timeout.ms"])
        self._max_group_size = int(config["group.max.size"])
        self._max_metadata_bytes = int(config["offset.metadata.max.bytes"])
        self._retention_ms = int(config["offsets.retention.minutes"]) * 60_000
        self._groups: dict[str, GroupMetadata] = {}
        self._join_waiters: dict[tuple[str, str], asyncio.Future[JoinResult]] = {}
        self._sync_waiters: dict[tuple[str, str], asyncio.Future[SyncResult]] = {}
        self._wakeup = asyncio.Event()
        self._retention_check_ms = _optional_int(
            config, "offsets.retention.check.interval.ms", OFFSETS_RETENTION_CHECK_INTERVAL_MS
        )
        self._producer_expiration_ms = _optional_int(
            config, "producer.id.expiration.ms", PRODUCER_ID_EXPIRATION_MS
        )
        self._next_cleanup = clock.monotonic_ms() + self._retention_check_ms
        self._records_loaded = 0
        # Order of the records this coordinator appended (continues the replay's order).
        self._log_order = 0
        # Newest epoch seen per producer id, and when (wall ms): older epochs are fenced.
        self._producer_epochs: dict[int, tuple[int, int]] = {}
        # (offsets partition, producer id) -> groups holding that producer's pending offsets.
        self._txn_groups: dict[tuple[int, int], set[str]] = {}

    # ======================================================================================
    # Placement

    def partition_for(self, group_id: str) -> int:
        """The ``__consumer_offsets`` partition of a group (Kafka's formula)."""
        return codec.partition_for(group_id, self._store.num_partitions)

    # ======================================================================================
    # JoinGroup

    async def join_group(
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
    ) -> JoinResult:
        """Join (or rejoin) a group; waits until the join phase of the rebalance ends.

        ``rebalance_timeout_ms`` < 0 (JoinGroup v0) means "same as the session timeout".
        """
        outcome = self.handle_join(
            group_id,
            member_id,
            group_instance_id,
            protocol_type,
            protocols,
            session_timeout_ms,
            rebalance_timeout_ms,
            client_id,
            client_host,
            require_known_member_id,
        )
        if isinstance(outcome, JoinResult):
            return outcome
        return await outcome

    def handle_join(
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
    ) -> JoinResult | asyncio.Future[JoinResult]:
        """The decision of a JoinGroup: an answer now, or a future answered later."""
        protos: Protocols = tuple((name, bytes(data)) for name, data in protocols)
        if rebalance_timeout_ms < 0:
            rebalance_timeout_ms = session_timeout_ms
        if not group_id:
            return JoinResult(ErrorCode.invalid_group_id, member_id)
        if not self._min_session_ms <= session_timeout_ms <= self._max_session_ms:
            return JoinResult(ErrorCode.invalid_session_timeout, member_id)
        new_member = member_id == UNKNOWN_MEMBER_ID
        group = self._groups.get(group_id)
        if group is None:
            if not new_member:
                return JoinResult(ErrorCode.unknown_member_id, member_id)
            group = GroupMetadata(group_id, state_timestamp=self._clock.now_ms())
            self._groups[group_id] = group
        if group.is_(DEAD):
            return JoinResult(ErrorCode.coordinator_not_available, member_id)
        joining_fresh = new_member or member_id in group.pending_members
        rejoining_static = (
            group_instance_id is not None and group_instance_id in group.static_members
        )
        if joining_fresh and not rejoining_static and len(group.members) >= self._max_group_size:
            group.pending_members.pop(member_id, None)
            return JoinResult(ErrorCode.group_max_size_reached, member_id)
        request = _JoinRequest(
            group_instance_id, protocol_type, protos, session_timeout_ms,
            rebalance_timeout_ms, client_id, client_host,
        )
        if new_member:
            return self._join_new_member(group, request, require_known_member_id)
        return self._join_known_member(group, member_id, request)

    def _join_new_member(
        self, group: GroupMetadata, req: _JoinRequest, require_known_member_id: bool
    ) -> JoinResult | asyncio.Future[JoinResult]:
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
            self._wake()
            log.info("group %s: new member %s must rejoin with its id", group.group_id, new_id)
            return JoinResult(ErrorCode.member_id_required, new_id)
        return self._add_member_and_rebalance(group, new_id, req)

    def _join_known_member(
        self, group: GroupMetadata, member_id: str, req: _JoinRequest
    ) -> JoinResult | asyncio.Future[JoinResult]:
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
        self._touch(member)
        if group.is_(PREPARING):
            return self._update_member_and_rebalance(group, member, req, "member rejoined")
        if group.is_(COMPLETING):
            if member.matches(req.protocols):
                # A retried JoinGroup: answer with the generation it already belongs to.
                return self._current_generation(group, member)
            return self._update_member_and_rebalance(group, member, req, "protocols changed")
        if group.is_(STABLE):
            if group.is_leader(member_id) or not member.matches(req.protocols):
                reason = "leader rejoined" if group.is_leader(member_id) else "protocols changed"
                return self._update_member_and_rebalance(group, member, req, reason)
            return self._current_generation(group, member)
        return JoinResult(ErrorCode.unknown_member_id, member_id)

    def _rejoin_static_member(
        self, group: GroupMetadata, new_id: str, req: _JoinRequest
    ) -> JoinResult | asyncio.Future[JoinResult]:
        assert req.group_instance_id is not None
        old_id = group.static_members[req.group_instance_id]
        fenced_join = JoinResult(ErrorCode.fenced_instance_id, old_id)
        self._deliver_join(group.group_id, group.members[old_id], fenced_join)
        self._deliver_sync(group.group_id, group.members[old_id],
                           SyncResult(ErrorCode.fenced_instance_id))
        member = group.replace_static_member(req.group_instance_id, new_id)
        log.info("group %s: static member %s replaced %s by %s",
                 group.group_id, req.group_instance_id, old_id, new_id)
        self._touch(member)
        if group.is_(STABLE) and member.matches(req.protocols) and not group.is_leader(new_id):
            # Same subscription: keep the assignment, no rebalance; persist the new id first.
            try:
                self._append(group.group_id, [self._group_record(group)])
            except KafkaError as exc:
                error = translate_store_error(exc.code, for_commit=False)
                group.replace_static_member(req.group_instance_id, old_id)
                return JoinResult(error, UNKNOWN_MEMBER_ID)
            member.client_id, member.client_host = req.client_id, req.client_host
            return self._current_generation(group, member)
        member.client_id, member.client_host = req.client_id, req.client_host
        return self._update_member_and_rebalance(group, member, req, "static member rejoined")

    def _add_member_and_rebalance(
        self, group: GroupMetadata, member_id: str, req: _JoinRequest
    ) -> asyncio.Future[JoinResult]:
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
        self._touch(member)
        waiter = self._await_join(group, member)
        log.info("group %s: member %s joined (client %s, host %s)",
                 group.group_id, member_id, req.client_id, req.client_host)
        self._maybe_prepare_rebalance(group, f"new member {member_id}")
        self._maybe_complete_join(group)
        return waiter

    def _update_member_and_rebalance(
        self, group: GroupMetadata, member: MemberMetadata, req: _JoinRequest, reason: str
    ) -> asyncio.Future[JoinResult]:
        member.protocols = req.protocols
        member.rebalance_timeout_ms = req.rebalance_timeout_ms
        member.session_timeout_ms = req.session_timeout_ms
        waiter = self._await_join(group, member)
        self._maybe_prepare_rebalance(group, f"{reason}: {member.member_id}")
        self._maybe_complete_join(group)
        return waiter

    def _current_generation(self, group: GroupMetadata, member: MemberMetadata) -> JoinResult:
        leader = group.is_leader(member.member_id)
        return JoinResult(
            error=ErrorCode.none,
            member_id=member.member_id,
            generation_id=group.generation_id,
            protocol_type=group.protocol_type,
            protocol_name=group.protocol_name,
            leader_id=group.leader_id or "",
            members=self._join_members(group) if leader else (),
        )

    @staticmethod
    def _join_members(group: GroupMetadata) -> tuple[JoinMember, ...]:
        assert group.protocol_name is not None
        return tuple(
            JoinMember(m.member_id, m.group_instance_id, m.metadata_for(group.protocol_name))
            for m in group.members.values()
        )

    # -- rebalance phases ------------------------------------------------------------------

    def _maybe_prepare_rebalance(self, group: GroupMetadata, reason: str) -> None:
        if can_transition(group.state, PREPARING):
            self._prepare_rebalance(group, reason)

    def _prepare_rebalance(self, group: GroupMetadata, reason: str) -> None:
        if group.is_(COMPLETING):
            # Assignments of the generation being completed will never come: tell everyone
            # who is waiting for one to rejoin.
            self._fail_syncs(group, ErrorCode.rebalance_in_progress)
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
        self._wake()

    def _maybe_complete_join(self, group: GroupMetadata) -> None:
        """End the join phase if its time has come (see the module docstring)."""
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
                self._wake()
                return
            self._complete_join(group)
        elif group.all_members_joined() or now >= group.join_deadline:
            self._complete_join(group)

    def _complete_join(self, group: GroupMetadata) -> None:
        for member in group.not_yet_rejoined():
            log.info("group %s: member %s did not rejoin in time; removed",
                     group.group_id, member.member_id)
            self._remove_member(group, member, ErrorCode.unknown_member_id)
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
                self._append(group.group_id, [self._group_record(group)])
            except KafkaError as exc:
                log.warning("group %s: could not store empty group: %s", group.group_id, exc)
            return
        group.protocol_name = group.select_protocol()
        group.transition_to(COMPLETING, now_wall)
        members = self._join_members(group)
        now = self._clock.monotonic_ms()
        for member in list(group.members.values()):
            leader = group.is_leader(member.member_id)
            result = JoinResult(
                error=ErrorCode.none,
                member_id=member.member_id,
                generation_id=group.generation_id,
                protocol_type=group.protocol_type,
                protocol_name=group.protocol_name,
                leader_id=group.leader_id or "",
                members=members if leader else (),
            )
            member.heartbeat_deadline = now + member.session_timeout_ms
            self._deliver_join(group.group_id, member, result)
        group.pending_sync = set(group.members)
        group.sync_deadline = now + group.rebalance_timeout_ms()
        log.info("group %s: generation %d with %d members, protocol %s, leader %s",
                 group.group_id, group.generation_id, len(group.members),
                 group.protocol_name, group.leader_id)
        self._wake()

    # ======================================================================================
    # SyncGroup

    async def sync_group(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        protocol_type: str | None,
        protocol_name: str | None,
        assignments: Mapping[str, bytes],
    ) -> SyncResult:
        """Followers wait for the leader's assignment; the leader's is stored, then shared."""
        outcome = self.handle_sync(group_id, generation_id, member_id, group_instance_id,
                                   protocol_type, protocol_name, assignments)
        if isinstance(outcome, SyncResult):
            return outcome
        return await outcome

    def handle_sync(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        protocol_type: str | None,
        protocol_name: str | None,
        assignments: Mapping[str, bytes],
    ) -> SyncResult | asyncio.Future[SyncResult]:
        if not group_id:
            return SyncResult(ErrorCode.invalid_group_id)
        group = self._groups.get(group_id)
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
        self._touch(member)
        group.pending_sync.discard(member_id)
        if not group.pending_sync:
            group.sync_deadline = None
        if group.is_(STABLE):
            return SyncResult(ErrorCode.none, group.protocol_type, group.protocol_name,
                              member.assignment)
        waiter = self._await_sync(group, member)
        if group.is_leader(member_id):
            self._complete_sync(group, assignments)
        return waiter

    def _complete_sync(self, group: GroupMetadata, assignments: Mapping[str, bytes]) -> None:
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
            self._append(group.group_id, [(key, codec.encode_group_value(value))])
        except KafkaError as exc:
            error = translate_store_error(exc.code, for_commit=False)
            log.warning("group %s: storing generation %d failed (%s); rebalancing",
                        group.group_id, group.generation_id, exc)
            self._fail_syncs(group, error)
            self._maybe_prepare_rebalance(group, "failed to store the assignment")
            self._maybe_complete_join(group)
            return
        for mid, member in group.members.items():
            member.assignment = chosen[mid]
        group.transition_to(STABLE, self._clock.now_ms())
        log.info("group %s: stable at generation %d", group.group_id, group.generation_id)
        for member in list(group.members.values()):
            self._deliver_sync(
                group.group_id,
                member,
                SyncResult(ErrorCode.none, group.protocol_type, group.protocol_name,
                           member.assignment),
            )

    def _fail_syncs(self, group: GroupMetadata, error: ErrorCode) -> None:
        for member in group.members.values():
            member.assignment = b""
            self._deliver_sync(group.group_id, member, SyncResult(error))

    # ======================================================================================
    # Heartbeat and LeaveGroup

    def heartbeat(
        self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None
    ) -> ErrorCode:
        if not group_id:
            return ErrorCode.invalid_group_id
        group = self._groups.get(group_id)
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
        self._touch(member)
        if group.is_(PREPARING):
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    def leave_group(
        self, group_id: str, members: Sequence[tuple[str, str | None]]
    ) -> list[ErrorCode]:
        """Per leaving (member id, group instance id), an error code.

        Raises KafkaError for errors of the whole request (invalid group id, dead group)."""
        if not group_id:
            raise KafkaError(ErrorCode.invalid_group_id, "empty group id")
        group = self._groups.get(group_id)
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
            self._maybe_complete_join(group)
            return ErrorCode.none
        member = group.members.get(member_id)
        if member is None:
            return ErrorCode.unknown_member_id
        log.info("group %s: member %s left", group.group_id, member_id)
        self._remove_member_and_update_group(group, member, f"member {member_id} left")
        return ErrorCode.none

    # -- member removal --------------------------------------------------------------------

    def _remove_member(
        self, group: GroupMetadata, member: MemberMetadata, error: ErrorCode
    ) -> None:
        """Drop a member and answer whatever it is waiting for with ``error``."""
        self._deliver_join(group.group_id, member, JoinResult(error, member.member_id))
        self._deliver_sync(group.group_id, member, SyncResult(error))
        group.remove_member(member.member_id)

    def _remove_member_and_update_group(
        self, group: GroupMetadata, member: MemberMetadata, reason: str
    ) -> None:
        self._remove_member(group, member, ErrorCode.unknown_member_id)
        if group.is_(STABLE, COMPLETING):
            self._maybe_prepare_rebalance(group, reason)
        self._maybe_complete_join(group)

    # ======================================================================================
    # Offsets

    def commit_offsets(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        offsets: Mapping[TopicPartition, OffsetCommitEntry],
    ) -> dict[TopicPartition, ErrorCode]:
        """Commit offsets, durably, before answering. Generation -1 with no member is a
        standalone ("simple consumer") commit, allowed while the group has no members."""

        def every(code: ErrorCode) -> dict[TopicPartition, ErrorCode]:
            return {tp: code for tp in offsets}

        group = self._groups.get(group_id)
        created = False
        if group is None:
            if generation_id >= 0:
                return every(ErrorCode.illegal_generation)
            group = GroupMetadata(group_id, state_timestamp=self._clock.now_ms())
            created = True
        elif group.is_(DEAD):
            return every(ErrorCode.coordinator_not_available)
        member: MemberMetadata | None = None
        if not (generation_id < 0 and group.is_(EMPTY)):
            if group.static_member_fenced(member_id, group_instance_id):
                return every(ErrorCode.fenced_instance_id)
            member = group.members.get(member_id)
            if member is None:
                return every(ErrorCode.unknown_member_id)
            if generation_id != group.generation_id:
                return every(ErrorCode.illegal_generation)
            if group.is_(COMPLETING):
                return every(ErrorCode.rebalance_in_progress)
            self._touch(member)

        results: dict[TopicPartition, ErrorCode] = {}
        accepted = self._accept_offsets(offsets, results)
        if accepted:
            records = [self._offset_record(group_id, tp, co) for tp, co in accepted.items()]
            try:
                self._append(group_id, records)
            except KafkaError as exc:
                error = translate_store_error(exc.code, for_commit=True)
                log.warning("group %s: offset commit failed: %s", group_id, exc)
                results.update({tp: error for tp in accepted})
                return results
            self._log_order += 1
            if created:
                self._groups[group_id] = group
            group.offsets.update(accepted)
            results.update({tp: ErrorCode.none for tp in accepted})
        return results

    def commit_txn_offsets(
        self,
        transactional_id: str,
        group_id: str,
        producer_id: int,
        producer_epoch: int,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        offsets: Mapping[TopicPartition, OffsetCommitEntry],
    ) -> dict[TopicPartition, ErrorCode]:
        """Commit offsets inside the producer's transaction: appended durably as a
        transactional batch, then held as pending until ``on_txn_marker``.

        KIP-447: a request naming a generation, member or instance (TxnOffsetCommit v3+) is
        checked against the group like an OffsetCommit (FENCED_INSTANCE_ID,
        UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION); one without (v0-2, or a producer committing
        for a standalone group) is accepted whatever the group's state. The caller has
        already checked with the transaction coordinator that the transaction holds the
        group's offsets partition."""

        def every(code: ErrorCode) -> dict[TopicPartition, ErrorCode]:
            return {tp: code for tp in offsets}

        if not group_id:
            return every(ErrorCode.invalid_group_id)
        if producer_id < 0 or producer_epoch < 0:
            return every(ErrorCode.invalid_producer_id_mapping)
        known = self._producer_epochs.get(producer_id)
        if known is not None and producer_epoch < known[0]:
            log.info("group %s: TxnOffsetCommit of %r fenced: producer id %d epoch %d < %d",
                     group_id, transactional_id, producer_id, producer_epoch, known[0])
            return every(ErrorCode.invalid_producer_epoch)
        group = self._groups.get(group_id)
        created = False
        if group is None:
            if generation_id >= 0:
                return every(ErrorCode.illegal_generation)
            group = GroupMetadata(group_id, state_timestamp=self._clock.now_ms())
            created = True
        elif group.is_(DEAD):
            return every(ErrorCode.coordinator_not_available)
        error = _check_txn_commit_member(group, generation_id, member_id, group_instance_id)
        if error is not ErrorCode.none:
            return every(error)

        results: dict[TopicPartition, ErrorCode] = {}
        accepted = self._accept_offsets(offsets, results)
        if not accepted:
            return results
        partition = self.partition_for(group_id)
        records = [self._offset_record(group_id, tp, co) for tp, co in accepted.items()]
        try:
            self._store.append_transactional(partition, records, producer_id, producer_epoch)
        except KafkaError as exc:
            error = translate_store_error(exc.code, for_commit=True)
            log.warning("group %s: transactional offset commit of %r failed: %s",
                        group_id, transactional_id, exc)
            results.update({tp: error for tp in accepted})
            return results
        self._log_order += 1
        self._see_producer(producer_id, producer_epoch)
        if created:
            self._groups[group_id] = group
        group.add_pending_txn_offsets(producer_id, accepted)
        self._txn_groups.setdefault((partition, producer_id), set()).add(group_id)
        log.debug("group %s: %d offsets pending in the transaction of %r (producer id %d)",
                  group_id, len(accepted), transactional_id, producer_id)
        results.update({tp: ErrorCode.none for tp in accepted})
        return results

    def _accept_offsets(
        self,
        offsets: Mapping[TopicPartition, OffsetCommitEntry],
        results: dict[TopicPartition, ErrorCode],
    ) -> dict[TopicPartition, CommittedOffset]:
        """The offsets to write (stamped now, in the next log order); the refused ones get
        their error in ``results``."""
        now_wall = self._clock.now_ms()
        accepted: dict[TopicPartition, CommittedOffset] = {}
        for tp, (offset, leader_epoch, metadata) in offsets.items():
            text = metadata or ""
            if len(text.encode("utf-8")) > self._max_metadata_bytes:
                results[tp] = ErrorCode.offset_metadata_too_large
                continue
            accepted[tp] = CommittedOffset(offset, leader_epoch, text, now_wall,
                                           log_order=self._log_order)
        return accepted

    def on_txn_marker(
        self,
        offsets_partition: int,
        producer_id: int,
        commit: bool,
        producer_epoch: int = -1,
    ) -> None:
        """A COMMIT (or ABORT) marker of ``producer_id`` is durably in ``offsets_partition``:
        its pending offsets of every group of that partition become the committed offsets
        (or are dropped). Markers of producers without pending offsets change nothing but
        the producer's newest epoch (when given)."""
        if producer_epoch >= 0:
            self._see_producer(producer_id, producer_epoch)
        self._log_order += 1
        group_ids = self._txn_groups.pop((offsets_partition, producer_id), set())
        for group_id in sorted(group_ids):
            group = self._groups.get(group_id)
            if group is None or group.is_(DEAD):
                continue
            count = group.complete_txn_offsets(producer_id, commit)
            if count:
                log.info("group %s: %s %d transactional offsets of producer id %d",
                         group_id, "committed" if commit else "aborted", count, producer_id)

    def _see_producer(self, producer_id: int, producer_epoch: int) -> None:
        known = self._producer_epochs.get(producer_id)
        epoch = producer_epoch if known is None else max(known[0], producer_epoch)
        self._producer_epochs[producer_id] = (epoch, self._clock.now_ms())

    def fetch_offsets(
        self,
        group_id: str,
        partitions: Iterable[TopicPartition] | None,
        require_stable: bool = False,
    ) -> dict[TopicPartition, OffsetFetchEntry]:
        """Committed offsets; ``None`` asks for every partition the group has committed.
        A partition with no commit answers offset -1, epoch -1, metadata "", no error."""
        group = self._groups.get(group_id)
        if group is None or group.is_(DEAD):
            if partitions is None:
                return {}
            return {tp: _no_offset() for tp in partitions}
        wanted = list(group.offsets) if partitions is None else list(partitions)
        result: dict[TopicPartition, OffsetFetchEntry] = {}
        for tp in wanted:
            if require_stable and group.has_pending_txn_offsets(tp):
                result[tp] = OffsetFetchEntry(NO_OFFSET, NO_LEADER_EPOCH, "",
                                              ErrorCode.unstable_offset_commit)
                continue
            committed = group.offsets.get(tp)
            if committed is None:
                result[tp] = _no_offset()
            else:
                result[tp] = OffsetFetchEntry(committed.offset, committed.leader_epoch,
                                              committed.metadata, ErrorCode.none)
        return result

    # ======================================================================================
    # Admin: ListGroups, DescribeGroups, DeleteGroups

    def list_groups(self, states_filter: Iterable[str] = ()) -> list[ListedGroup]:
        wanted = {parse_state(s) for s in states_filter}
        out = []
        for group in self._groups.values():
            if group.is_(DEAD) or (wanted and group.state not in wanted):
                continue
            out.append(ListedGroup(group.group_id, group.protocol_type or "", group.state.value))
        return out

    def describe_groups(self, group_ids: Iterable[str]) -> list[GroupDescription]:
        """Unknown groups are described as Dead with GROUP_ID_NOT_FOUND (the handler turns
        that into Kafka's older answer, Dead with no error, for versions before 6)."""
        out = []
        for group_id in group_ids:
            group = self._groups.get(group_id)
            if group is None or group.is_(DEAD):
                out.append(GroupDescription(group_id, ErrorCode.group_id_not_found,
                                            DEAD.value, "", "", ()))
                continue
            stable = group.is_(STABLE) and group.protocol_name is not None
            members = tuple(
                MemberDescription(
                    member_id=m.member_id,
                    group_instance_id=m.group_instance_id,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    metadata=m.metadata_for(group.protocol_name)
                    if stable and group.protocol_name is not None else b"",
                    assignment=m.assignment if stable else b"",
                )
                for m in group.members.values()
            )
            out.append(
                GroupDescription(
                    group_id=group_id,
                    error=ErrorCode.none,
                    state=group.state.value,
                    protocol_type=group.protocol_type or "",
                    protocol=(group.protocol_name or "") if stable else "",
                    members=members,
                )
            )
        return out

    def delete_groups(self, group_ids: Iterable[str]) -> dict[str, ErrorCode]:
        """Delete groups without members: tombstones for their offsets and metadata."""
        results: dict[str, ErrorCode] = {}
        for group_id in group_ids:
            group = self._groups.get(group_id)
            if group is None or group.is_(DEAD):
                results[group_id] = ErrorCode.group_id_not_found
                continue
            if not group.is_(EMPTY) or group.members:
                results[group_id] = ErrorCode.non_empty_group
                continue
            try:
                self._append(group_id, self._tombstones(group, list(group.offsets), True))
            except KafkaError as exc:
                results[group_id] = translate_store_error(exc.code, for_commit=False)
                continue
            self._drop_group(group, "deleted")
            results[group_id] = ErrorCode.none
        return results

    def _drop_group(self, group: GroupMetadata, reason: str) -> None:
        group.transition_to(DEAD, self._clock.now_ms())
        self._groups.pop(group.group_id, None)
        log.info("group %s: %s", group.group_id, reason)

    # ======================================================================================
    # Loading, background work, statistics

    def load(self) -> None:
        """Rebuild groups and offsets from the store (see ``loader.load_groups``)."""
        loaded = load_groups(self._store, self._clock)
        self._groups = loaded.groups
        self._records_loaded = loaded.records
        self._log_order = loaded.records
        now_wall = self._clock.now_ms()
        self._producer_epochs = {
            pid: (epoch, now_wall) for pid, epoch in loaded.producer_epochs.items()
        }
        self._txn_groups = {}
        for group in self._groups.values():
            partition = self.partition_for(group.group_id)
            for producer_id in group.pending_txn_offsets:
                self._txn_groups.setdefault((partition, producer_id), set()).add(group.group_id)

    def tick(self) -> int | None:
        """One sweep at the clock's current time: expire sessions and pending members, end
        join phases and sync waits whose time has come, expire old offsets. Returns the next
        monotonic deadline (None if nothing is scheduled)."""
        now = self._clock.monotonic_ms()
        for group in list(self._groups.values()):
            self._sweep_group(group, now)
        if now >= self._next_cleanup:
            self._next_cleanup = now + self._retention_check_ms
            self._expire_offsets()
            self._expire_producers()
        return self._next_deadline()

    def _sweep_group(self, group: GroupMetadata, now: int) -> None:
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
                self._remove_member_and_update_group(
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
                self._remove_member(group, member, ErrorCode.unknown_member_id)
            group.pending_sync.clear()
            group.sync_deadline = None
            self._maybe_prepare_rebalance(group, "members did not sync in time")
        self._maybe_complete_join(group)

    def _next_deadline(self) -> int | None:
        deadlines = [self._next_cleanup]
        for group in self._groups.values():
            deadlines.extend(group.pending_members.values())
            deadlines.extend(
                m.heartbeat_deadline
                for m in group.members.values()
                if not (m.awaiting_join or m.awaiting_sync)
            )
            if group.is_(PREPARING) and group.join_deadline is not None:
                deadlines.append(group.join_deadline)
            if (
                group.is_(COMPLETING, STABLE)
                and group.pending_sync
                and group.sync_deadline is not None
            ):
                deadlines.append(group.sync_deadline)
        return min(deadlines)

    def _expire_offsets(self) -> None:
        """Kafka's offset retention: offsets of a group without members expire
        ``offsets.retention.minutes`` after the group became empty (consumer groups) or after
        the commit (standalone groups); an empty group without offsets is then removed."""
        now_wall = self._clock.now_ms()
        for group in list(self._groups.values()):
            if not group.is_(EMPTY) or group.members or group.pending_members:
                continue
            # An offset a transaction is about to replace stays until that transaction ends.
            expired = [
                tp for tp, co in group.offsets.items()
                if self._expires_at(group, co) <= now_wall
                and not group.has_pending_txn_offsets(tp)
            ]
            remove_group = len(expired) == len(group.offsets) and not group.pending_txn_offsets
            if not expired and not remove_group:
                continue
            try:
                self._append(group.group_id, self._tombstones(group, expired, remove_group))
            except KafkaError as exc:
                log.warning("group %s: offset expiry failed: %s", group.group_id, exc)
                continue
            for tp in expired:
                del group.offsets[tp]
            log.info("group %s: expired %d offsets", group.group_id, len(expired))
            if remove_group:
                self._drop_group(group, "removed: empty and without offsets")

    def _expire_producers(self) -> None:
        """Forget the epochs of producers idle for ``producer.id.expiration.ms`` that hold
        no pending offsets (Kafka expires producer state of a partition the same way)."""
        cutoff = self._clock.now_ms() - self._producer_expiration_ms
        busy = {pid for _, pid in self._txn_groups}
        for pid, (_, seen) in list(self._producer_epochs.items()):
            if seen <= cutoff and pid not in busy:
                del self._producer_epochs[pid]

    def _expires_at(self, group: GroupMetadata, co: CommittedOffset) -> int:
        if co.expire_timestamp >= 0:
            return co.expire_timestamp
        if group.protocol_type and group.state_timestamp >= 0:
            return group.state_timestamp + self._retention_ms
        return co.commit_timestamp + self._retention_ms

    async def run(self) -> None:
        """The background loop (one per coordinator, run in the broker's TaskGroup): one
        sweep at a time, sleeping until the next deadline or until a request schedules an
        earlier one. Cancelling it is safe; waiting JoinGroup/SyncGroup calls are answered
        with NOT_COORDINATOR so that clients look for the coordinator again."""
        try:
            while True:
                try:
                    deadline = self.tick()
                except Exception:
                    log.exception("group coordinator sweep failed; will retry")
                    deadline = None
                now = self._clock.monotonic_ms()
                sleep_ms = MAX_SLEEP_MS if deadline is None else deadline - now
                sleep_ms = max(0, min(sleep_ms, MAX_SLEEP_MS))
                self._wakeup.clear()
                try:
                    async with asyncio.timeout(sleep_ms / 1000):
                        await self._wakeup.wait()
                except TimeoutError:
                    pass
        finally:
            self.close()

    def close(self) -> None:
        """Answer every waiting JoinGroup/SyncGroup with NOT_COORDINATOR (shutting down)."""
        for key, join_waiter in list(self._join_waiters.items()):
            if not join_waiter.done():
                join_waiter.set_result(JoinResult(ErrorCode.not_coordinator, key[1]))
        for sync_waiter in self._sync_waiters.values():
            if not sync_waiter.done():
                sync_waiter.set_result(SyncResult(ErrorCode.not_coordinator))
        self._join_waiters.clear()
        self._sync_waiters.clear()

    def statistics(self) -> CoordinatorStatistics:
        groups = list(self._groups.values())
        return CoordinatorStatistics(
            groups=len(groups),
            groups_by_state=dict(Counter(g.state.value for g in groups)),
            members=sum(len(g.members) for g in groups),
            pending_members=sum(len(g.pending_members) for g in groups),
            committed_offsets=sum(len(g.offsets) for g in groups),
            pending_txn_offsets=sum(
                len(p) for g in groups for p in g.pending_txn_offsets.values()
            ),
            waiting_joins=sum(1 for f in self._join_waiters.values() if not f.done()),
            waiting_syncs=sum(1 for f in self._sync_waiters.values() if not f.done()),
            records_loaded=self._records_loaded,
        )

    def group(self, group_id: str) -> GroupMetadata | None:
        """The live metadata of a group (for tests and diagnostics; do not mutate)."""
        return self._groups.get(group_id)

    # ======================================================================================
    # Helpers: waiters, records, time

    def _await_join(
        self, group: GroupMetadata, member: MemberMetadata
    ) -> asyncio.Future[JoinResult]:
        key = (group.group_id, member.member_id)
        previous = self._join_waiters.pop(key, None)
        if previous is not None and not previous.done():
            # The member sent JoinGroup again while its earlier one waited: answer the old one.
            previous.set_result(JoinResult(ErrorCode.rebalance_in_progress, member.member_id))
        waiter: asyncio.Future[JoinResult] = asyncio.get_running_loop().create_future()
        self._join_waiters[key] = waiter
        member.awaiting_join = True
        return waiter

    def _deliver_join(self, group_id: str, member: MemberMetadata, result: JoinResult) -> None:
        member.awaiting_join = False
        waiter = self._join_waiters.pop((group_id, member.member_id), None)
        if waiter is not None and not waiter.done():
            waiter.set_result(result)

    def _await_sync(
        self, group: GroupMetadata, member: MemberMetadata
    ) -> asyncio.Future[SyncResult]:
        key = (group.group_id, member.member_id)
        previous = self._sync_waiters.pop(key, None)
        if previous is not None and not previous.done():
            previous.set_result(SyncResult(ErrorCode.rebalance_in_progress))
        waiter: asyncio.Future[SyncResult] = asyncio.get_running_loop().create_future()
        self._sync_waiters[key] = waiter
        member.awaiting_sync = True
        return waiter

    def _deliver_sync(self, group_id: str, member: MemberMetadata, result: SyncResult) -> None:
        member.awaiting_sync = False
        waiter = self._sync_waiters.pop((group_id, member.member_id), None)
        if waiter is not None and not waiter.done():
            waiter.set_result(result)

    def _touch(self, member: MemberMetadata) -> None:
        member.heartbeat_deadline = self._clock.monotonic_ms() + member.session_timeout_ms

    def _wake(self) -> None:
        self._wakeup.set()

    def _append(self, group_id: str, records: list[Record]) -> None:
        self._store.append(self.partition_for(group_id), records)

    def _group_record(self, group: GroupMetadata) -> Record:
        key = codec.encode_group_key(codec.GroupMetadataKey(group.group_id))
        return key, codec.encode_group_value(group.to_record())

    @staticmethod
    def _offset_record(group_id: str, tp: TopicPartition, co: CommittedOffset) -> Record:
        key = codec.encode_offset_key(codec.OffsetCommitKey(group_id, tp[0], tp[1]))
        value = codec.encode_offset_value(
            codec.OffsetCommitValue(co.offset, co.leader_epoch, co.metadata, co.commit_timestamp)
        )
        return key, value

    @staticmethod
    def _tombstones(
        group: GroupMetadata, partitions: Iterable[TopicPartition], with_group: bool
    ) -> list[Record]:
        records: list[Record] = [
            (codec.encode_offset_key(codec.OffsetCommitKey(group.group_id, t, p)), None)
            for t, p in partitions
        ]
        if with_group:
            records.append((codec.encode_group_key(codec.GroupMetadataKey(group.group_id)), None))
        return records


@dataclasses.dataclass(frozen=True, slots=True)
class _JoinRequest:
    group_instance_id: str | None
    protocol_type: str
    protocols: Protocols
    session_timeout_ms: int
    rebalance_timeout_ms: int
    client_id: str
    client_host: str


def _check_txn_commit_member(
    group: GroupMetadata, generation_id: int, member_id: str, group_instance_id: str | None
) -> ErrorCode:
    """KIP-447's checks of a TxnOffsetCommit against the group (Kafka's
    validateOffsetCommit for transactional commits)."""
    if generation_id < 0 and group.is_(EMPTY):
        return ErrorCode.none
    if generation_id >= 0 or member_id != UNKNOWN_MEMBER_ID or group_instance_id is not None:
        if group.static_member_fenced(member_id, group_instance_id):
            return ErrorCode.fenced_instance_id
        if member_id not in group.members:
            return ErrorCode.unknown_member_id
        if generation_id != group.generation_id:
            return ErrorCode.illegal_generation
    # No identity (TxnOffsetCommit v0-2): accepted even while the group has members.
    return ErrorCode.none


def _optional_int(config: BrokerConfig, name: str, default: int) -> int:
    """A setting that this broker's configuration may not define (yet)."""
    try:
        return int(config[name])
    except KeyError:
        return default


def _no_offset() -> OffsetFetchEntry:
    return OffsetFetchEntry(NO_OFFSET, NO_LEADER_EPOCH, "", ErrorCode.none)
