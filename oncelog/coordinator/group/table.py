"""The live groups of one group coordinator and where they are written.

``GroupTable`` is what the membership decisions (``membership.py``) and the offset manager
(``offsets.py``) share: the map of groups, the ``__consumer_offsets`` store with the group
placement (Kafka's formula), the clock, the ``__consumer_offsets`` partitions this
coordinator owns (Kafka's GroupMetadataManager ownedPartitions / loadingPartitions: on one
node every partition; in a cluster those whose leader this broker is, each at its
coordinator epoch), and the builders of the records both append (group metadata, offset
commits, tombstones). Synchronous and without asyncio; the store's append is the only I/O,
as in Kafka's GroupMetadataManager.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from oncelog.clock import Clock
from oncelog.coordinator.group import codec
from oncelog.coordinator.group.metadata import CommittedOffset, GroupMetadata, MemberMetadata
from oncelog.coordinator.group.results import TopicPartition
from oncelog.coordinator.group.state import GroupState
from oncelog.coordinator.group.store import OffsetsStore, Record
from oncelog.errors import ErrorCode

log = logging.getLogger(__name__)


class GroupTable:
    def __init__(self, store: OffsetsStore, clock: Clock) -> None:
        self.appended_end: dict[int, int] = {}
        self.store = store
        self.clock = clock
        self.groups: dict[str, GroupMetadata] = {}
        # Not partitioned (one node): every partition is owned. Partitioned (a cluster):
        # only ``owned`` (partition -> coordinator epoch); ``loading`` answers
        # COORDINATOR_LOAD_IN_PROGRESS.
        self.partitioned = False
        self.owned: dict[int, int] = {}
        self.loading: set[int] = set()

    def check(self, group_id: str) -> ErrorCode:
        """Whether this coordinator answers for ``group_id`` (Kafka's validateGroupStatus):
        COORDINATOR_LOAD_IN_PROGRESS while its partition loads, NOT_COORDINATOR if the
        partition is not owned here. An empty group id is left to the decisions (each API
        has its own answer for it)."""
        if not self.partitioned or not group_id:
            return ErrorCode.none
        if not self.owned and not self.loading:  # (the topic may not even exist yet)
            return ErrorCode.not_coordinator
        partition = self.partition_for(group_id)
        if partition in self.loading:
            return ErrorCode.coordinator_load_in_progress
        if partition not in self.owned:
            return ErrorCode.not_coordinator
        return ErrorCode.none

    def check_partition(self, partition: int) -> None:
        if not 0 <= partition < self.store.num_partitions:
            raise ValueError(f"__consumer_offsets has no partition {partition}")

    def groups_of(self, partition: int) -> list[GroupMetadata]:
        """The live groups placed on ``partition``."""
        return [g for g in self.groups.values() if self.partition_for(g.group_id) == partition]

    def partition_for(self, group_id: str) -> int:
        """The ``__consumer_offsets`` partition of a group (Kafka's formula)."""
        return codec.partition_for(group_id, self.store.num_partitions)

    def get(self, group_id: str) -> GroupMetadata | None:
        return self.groups.get(group_id)

    def new_group(self, group_id: str) -> GroupMetadata:
        """A group object stamped now (not yet in the table)."""
        return GroupMetadata(group_id, state_timestamp=self.clock.now_ms())

    def drop_group(self, group: GroupMetadata, reason: str) -> None:
        group.transition_to(GroupState.DEAD, self.clock.now_ms())
        self.groups.pop(group.group_id, None)
        log.info("group %s: %s", group.group_id, reason)

    def touch(self, member: MemberMetadata) -> None:
        """A sign of life: the member's session runs from now."""
        member.heartbeat_deadline = self.clock.monotonic_ms() + member.session_timeout_ms

    # -- records ---------------------------------------------------------------------------

    def append(self, group_id: str, records: list[Record]) -> int:
        """Durably append to the group's offsets partition (raises KafkaError); the offset
        the in-sync replicas must reach."""
        partition = self.partition_for(group_id)
        end = self.store.append(partition, records)
        self.appended(partition, end)
        return end

    def appended(self, partition: int, end: int) -> None:
        """Remember the end of the latest local append to ``partition``: the offset an
        offset commit's answer waits for the in-sync replicas to reach."""
        self.appended_end[partition] = end

    @staticmethod
    def group_record(group: GroupMetadata) -> Record:
        key = codec.encode_group_key(codec.GroupMetadataKey(group.group_id))
        return key, codec.encode_group_value(group.to_record())

    @staticmethod
    def offset_record(group_id: str, tp: TopicPartition, co: CommittedOffset) -> Record:
        key = codec.encode_offset_key(codec.OffsetCommitKey(group_id, tp[0], tp[1]))
        value = codec.encode_offset_value(
            codec.OffsetCommitValue(co.offset, co.leader_epoch, co.metadata, co.commit_timestamp)
        )
        return key, value

    @staticmethod
    def tombstones(
        group: GroupMetadata, partitions: Iterable[TopicPartition], with_group: bool
    ) -> list[Record]:
        records: list[Record] = [
            (codec.encode_offset_key(codec.OffsetCommitKey(group.group_id, t, p)), None)
            for t, p in partitions
        ]
        if with_group:
            records.append((codec.encode_group_key(codec.GroupMetadataKey(group.group_id)), None))
        return records
