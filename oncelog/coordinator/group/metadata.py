"""One group's data: members, generation, selected protocol, deadlines and offsets.

Plain data with the small decisions that need nothing but the group itself (protocol
selection, "has everyone rejoined?", static-member lookup). No asyncio and no clock reads:
times are passed in. State changes go through ``transition_to``, which checks the table in
``state.py``.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from oncelog.coordinator.group.codec import GroupMetadataValue, MemberRecord
from oncelog.coordinator.group.results import TopicPartition
from oncelog.coordinator.group.state import GroupState, check_transition

Protocols = tuple[tuple[str, bytes], ...]


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp: int
    expire_timestamp: int = -1
    # Position of the record in the coordinator's appends (replay order after a load). Only
    # compared within one group, whose records all live in one offsets partition: when a
    # transaction commits, its offset replaces the committed one only if it was written
    # later (Kafka keeps a plain commit appended after the transactional one).
    log_order: int = field(default=-1, compare=False)

    def written_after(self, other: CommittedOffset) -> bool:
        return self.log_order > other.log_order


@dataclass(slots=True)
class MemberMetadata:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: Protocols
    assignment: bytes = b""
    # Bookkeeping of the rebalance protocol (the coordinator keeps the matching futures).
    awaiting_join: bool = False
    awaiting_sync: bool = False
    heartbeat_deadline: int = 0  # monotonic ms

    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    def metadata_for(self, protocol: str) -> bytes:
        for name, data in self.protocols:
            if name == protocol:
                return data
        raise KeyError(f"member {self.member_id} does not support protocol {protocol}")

    def matches(self, protocols: Protocols) -> bool:
        """Same protocols with the same metadata, in the same order."""
        return self.protocols == protocols

    def vote(self, candidates: set[str]) -> str:
        """This member's preferred protocol among those every member supports."""
        for name, _ in self.protocols:
            if name in candidates:
                return name
        raise ValueError(f"member {self.member_id} supports none of {sorted(candidates)}")

    def to_record(self, protocol: str | None) -> MemberRecord:
        subscription = self.metadata_for(protocol) if protocol is not None else b""
        return MemberRecord(
            member_id=self.member_id,
            group_instance_id=self.group_instance_id,
            client_id=self.client_id,
            client_host=self.client_host,
            rebalance_timeout_ms=self.rebalance_timeout_ms,
            session_timeout_ms=self.session_timeout_ms,
            subscription=subscription,
            assignment=self.assignment,
        )


@dataclass(slots=True)
class GroupMetadata:
    group_id: str
    state: GroupState = GroupState.EMPTY
    state_timestamp: int = -1  # wall ms when the current state was entered
    generation_id: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: dict[str, MemberMetadata] = field(default_factory=dict)  # in join order
    # Members told MEMBER_ID_REQUIRED (KIP-394), with the monotonic deadline to rejoin by.
    pending_members: dict[str, int] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    # PreparingRebalance: when the join phase ends (initial delay or rebalance timeout).
    join_deadline: int | None = None
    in_initial_delay: bool = False
    initial_delay_remaining_ms: int = 0
    new_member_added: bool = False
    # CompletingRebalance / Stable: members that have not sent SyncGroup since the join.
    pending_sync: set[str] = field(default_factory=set)
    sync_deadline: int | None = None
    # Offsets committed outside transactions.
    offsets: dict[TopicPartition, CommittedOffset] = field(default_factory=dict)
    # Seam for transactional offset commits (TxnOffsetCommit): offsets written to the
    # offsets log inside a producer's transaction, per producer id. They become
    # ``offsets`` when that producer's COMMIT marker is appended to the offsets partition
    # and are dropped on ABORT; until then OffsetFetch with require_stable answers
    # UNSTABLE_OFFSET_COMMIT for those partitions.
    pending_txn_offsets: dict[int, dict[TopicPartition, CommittedOffset]] = field(
        default_factory=dict
    )
    # Offsets of plain OffsetCommits appended to the offsets partition but not yet
    # acknowledged by its in-sync replicas (Kafka's pendingOffsetCommits): OffsetFetch does
    # not see them; ``complete_offset_commit`` applies or drops them.
    pending_offset_commits: dict[TopicPartition, CommittedOffset] = field(default_factory=dict)

    # -- state ----------------------------------------------------------------------------

    def transition_to(self, target: GroupState, now_ms: int) -> None:
        self.state = check_transition(self.state, target)
        self.state_timestamp = now_ms

    def is_(self, *states: GroupState) -> bool:
        return self.state in states

    # -- members --------------------------------------------------------------------------

    def has_member(self, member_id: str) -> bool:
        return member_id in self.members

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id == member_id

    def add_member(self, member: MemberMetadata) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        if self.leader_id is None:
            self.leader_id = member.member_id

    def remove_member(self, member_id: str) -> MemberMetadata | None:
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        instance = member.group_instance_id
        if instance is not None and self.static_members.get(instance) == member_id:
            del self.static_members[instance]
        self.pending_sync.discard(member_id)
        if self.leader_id == member_id:
            self.leader_id = self._pick_leader()
        return member

    def replace_static_member(self, instance_id: str, new_member_id: str) -> MemberMetadata:
        """Give a static member a new member id (it restarted); the old id is fenced."""
        old_id = self.static_members[instance_id]
        member = self.members.pop(old_id)
        member.member_id = new_member_id
        self.members[new_member_id] = member
        self.static_members[instance_id] = new_member_id
        if self.leader_id == old_id:
            self.leader_id = new_member_id
        if old_id in self.pending_sync:
            self.pending_sync.discard(old_id)
            self.pending_sync.add(new_member_id)
        return member

    def _pick_leader(self) -> str | None:
        # Prefer a member that has already rejoined, so a rebalance can complete with it.
        for member in self.members.values():
            if member.awaiting_join:
                return member.member_id
        return next(iter(self.members), None)

    def maybe_elect_joined_leader(self) -> None:
        """At the end of a join phase the leader must be one of the members that rejoined."""
        leader = self.members.get(self.leader_id) if self.leader_id is not None else None
        if leader is None or not leader.awaiting_join:
            self.leader_id = self._pick_leader()

    def static_member_fenced(self, member_id: str, group_instance_id: str | None) -> bool:
        if group_instance_id is None:
            return False
        known = self.static_members.get(group_instance_id)
        return known is not None and known != member_id

    def not_yet_rejoined(self) -> list[MemberMetadata]:
        return [m for m in self.members.values() if not m.awaiting_join]

    def all_members_joined(self) -> bool:
        return not self.pending_members and all(m.awaiting_join for m in self.members.values())

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    # -- protocols ------------------------------------------------------------------------

    def candidate_protocols(self) -> set[str]:
        """Protocols that every member supports."""
        members = list(self.members.values())
        if not members:
            return set()
        common = set(members[0].protocol_names())
        for member in members[1:]:
            common &= set(member.protocol_names())
        return common

    def supports_protocols(self, protocol_type: str, protocols: Protocols) -> bool:
        """Could a member with these protocols join? (INCONSISTENT_GROUP_PROTOCOL if not)"""
        if not protocol_type or not protocols:
            return False
        if not self.members:
            return True
        if protocol_type != self.protocol_type:
            return False
        names = {name for name, _ in protocols}
        return bool(self.candidate_protocols() & names)

    def select_protocol(self) -> str:
        """Each member votes for its first supported candidate; most votes wins, ties go to
        the protocol the leader prefers."""
        candidates = self.candidate_protocols()
        if not candidates:
            raise ValueError(f"group {self.group_id} has no protocol common to all members")
        votes = Counter(m.vote(candidates) for m in self.members.values())
        best = max(votes.values())
        winners = {name for name, count in votes.items() if count == best}
        leader = self.members.get(self.leader_id or "")
        order = leader.protocol_names() if leader else sorted(winners)
        return next(name for name in order if name in winners)

    # -- persistence ----------------------------------------------------------------------

    def to_record(self) -> GroupMetadataValue:
        return GroupMetadataValue(
            protocol_type=self.protocol_type or "",
            generation=self.generation_id,
            protocol=self.protocol_name,
            leader=self.leader_id,
            current_state_timestamp=self.state_timestamp,
            members=tuple(m.to_record(self.protocol_name) for m in self.members.values()),
        )

    def has_offsets(self) -> bool:
        return bool(self.offsets) or bool(self.pending_txn_offsets) or bool(
            self.pending_offset_commits)

    def prepare_offset_commit(self, offsets: dict[TopicPartition, CommittedOffset]) -> None:
        """Offsets appended, waiting for the ISR (Kafka's prepareOffsetCommit)."""
        self.pending_offset_commits.update(offsets)

    def complete_offset_commit(
        self, offsets: dict[TopicPartition, CommittedOffset], acknowledged: bool
    ) -> None:
        """The wait for these prepared offsets ended: acknowledged, they become the committed
        offsets unless one written later is already there (Kafka's onOffsetCommitAppend);
        otherwise they are dropped (failPendingOffsetWrite). A later commit still pending
        for the same partition stays pending."""
        for tp, co in offsets.items():
            if self.pending_offset_commits.get(tp) is co:
                del self.pending_offset_commits[tp]
            if acknowledged:
                current = self.offsets.get(tp)
                if current is None or not current.written_after(co):
                    self.offsets[tp] = co

    def has_pending_txn_offsets(self, tp: TopicPartition) -> bool:
        return any(tp in pending for pending in self.pending_txn_offsets.values())

    def add_pending_txn_offsets(
        self, producer_id: int, offsets: dict[TopicPartition, CommittedOffset]
    ) -> None:
        self.pending_txn_offsets.setdefault(producer_id, {}).update(offsets)

    def complete_txn_offsets(self, producer_id: int, commit: bool) -> int:
        """End a producer's transaction for this group: on commit its pending offsets
        replace the committed ones written before them; on abort they are dropped.
        Returns how many pending offsets the transaction held."""
        pending = self.pending_txn_offsets.pop(producer_id, None)
        if not pending:
            return 0
        if commit:
            for tp, co in pending.items():
                current = self.offsets.get(tp)
                if current is None or co.written_after(current):
                    self.offsets[tp] = co
        return len(pending)

    def drop_pending_txn_offsets(self, tp: TopicPartition) -> None:
        """Forget every transaction's pending offset for ``tp`` (its offset was deleted)."""
        for producer_id in list(self.pending_txn_offsets):
            pending = self.pending_txn_offsets[producer_id]
            pending.pop(tp, None)
            if not pending:
                del self.pending_txn_offsets[producer_id]
