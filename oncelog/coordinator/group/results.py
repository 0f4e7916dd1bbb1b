"""Immutable results the group coordinator hands to the API handlers."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from oncelog.errors import ErrorCode

TopicPartition = tuple[str, int]

UNKNOWN_MEMBER_ID = ""
NO_GENERATION = -1
NO_OFFSET = -1
NO_LEADER_EPOCH = -1


@dataclass(frozen=True, slots=True)
class JoinMember:
    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(frozen=True, slots=True)
class JoinResult:
    error: ErrorCode
    member_id: str = UNKNOWN_MEMBER_ID
    generation_id: int = NO_GENERATION
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str = ""
    members: tuple[JoinMember, ...] = ()  # non-empty only in the leader's result
    skip_assignment: bool = False


@dataclass(frozen=True, slots=True)
class SyncResult:
    error: ErrorCode
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


class OffsetFetchEntry(NamedTuple):
    """One partition's committed offset; unpacks as (offset, leader_epoch, metadata, error)."""

    offset: int
    leader_epoch: int
    metadata: str
    error: ErrorCode


@dataclass(frozen=True, slots=True)
class ListedGroup:
    group_id: str
    protocol_type: str
    state: str
    group_type: str = "classic"


@dataclass(frozen=True, slots=True)
class MemberDescription:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupDescription:
    group_id: str
    error: ErrorCode
    state: str
    protocol_type: str
    protocol: str
    members: tuple[MemberDescription, ...]


@dataclass(frozen=True, slots=True)
class CoordinatorStatistics:
    groups: int
    groups_by_state: dict[str, int]
    members: int
    pending_members: int
    committed_offsets: int
    waiting_joins: int
    waiting_syncs: int
    records_loaded: int
    pending_txn_offsets: int = 0
