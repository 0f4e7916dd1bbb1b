"""The asyncio admin client's consumer groups and offsets: ListGroups on every broker,
DescribeGroups / DeleteGroups / OffsetFetch / OffsetDelete at each group's coordinator, and
ListOffsets (earliest, latest or by timestamp, either isolation level) and DeleteRecords at
each leader.

Names follow Java's Admin (listConsumerGroups, describeConsumerGroups, deleteConsumerGroups,
listConsumerGroupOffsets, listOffsets with an OffsetSpec). The OffsetFetch and ListOffsets
requests are the consumer's own (``ConsumerOffsets``), so there is one implementation of each.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from oncelog.client.aio.admin_types import AdminBase
from oncelog.client.aio.client import COORDINATOR_GROUP
from oncelog.client.aio.offsets import EARLIEST, LATEST, ConsumerOffsets
from oncelog.client.assignors import decode_assignment
from oncelog.client.errors import KafkaClientError, error_for
from oncelog.client.types import OffsetAndMetadata, TopicPartition
from oncelog.client.wire import nested, request
from oncelog.errors import ErrorCode
from oncelog.protocol import versions as api

__all__ = [
    "ConsumerGroupDescription",
    "ConsumerGroupListing",
    "GroupsAdmin",
    "MemberDescription",
    "OffsetSpec",
]

_ISOLATION_LEVELS = {"read_uncommitted": 0, "read_committed": 1}
# DescribeGroups and DeleteGroups are not in the client's negotiated table
# (``wire.CLIENT_VERSIONS``); they are sent in these versions, which oncelog and Kafka 2.4+
# serve.
DESCRIBE_GROUPS_VERSION = 5
DELETE_GROUPS_VERSION = 2


@dataclass(frozen=True)
class ConsumerGroupListing:
    group_id: str
    state: str  # "" from brokers before ListGroups v4
    protocol_type: str

    @property
    def is_simple_consumer_group(self) -> bool:
        """Only committed offsets, no members ever joined (Kafka: empty protocol type)."""
        return self.protocol_type == ""


@dataclass(frozen=True)
class MemberDescription:
    member_id: str
    client_id: str
    host: str
    assignment: tuple[TopicPartition, ...]


@dataclass(frozen=True)
class ConsumerGroupDescription:
    group_id: str
    state: str
    protocol_type: str
    members: tuple[MemberDescription, ...]
    # The group's protocol: for consumers the partition assignor ("range", ...), "" when
    # no generation is running; and the node id of its coordinator (-1: not known).
    assignment_strategy: str = ""
    coordinator_id: int = -1


@dataclass(frozen=True)
class OffsetSpec:
    """Which offset ListOffsets answers: ``earliest()``, ``latest()`` or
    ``for_timestamp(ms)`` (the first record at or after it; -1 when there is none)."""

    timestamp: int

    @classmethod
    def earliest(cls) -> OffsetSpec:
        return cls(EARLIEST)

    @classmethod
    def latest(cls) -> OffsetSpec:
        return cls(LATEST)

    @classmethod
    def for_timestamp(cls, timestamp_ms: int) -> OffsetSpec:
        return cls(int(timestamp_ms))


def _member(m: Any) -> MemberDescription:
    try:
        owned = tuple(decode_assignment(m.member_assignment)) if m.member_assignment else ()
    except Exception:  # not the consumer protocol: no partitions to show
        owned = ()
    return MemberDescription(m.member_id, m.client_id, m.client_host, owned)


class GroupsAdmin(AdminBase):
    """Consumer groups, their offsets and records deletion; mixed into ``AIOAdmin``."""

    def _offsets(self, isolation_level: int, group_id: str | None = None) -> ConsumerOffsets:
        """The consumer's offset lookups (ListOffsets, OffsetFetch) over this client."""
        return ConsumerOffsets(
            self.config, self.client, group_id=group_id, isolation_level=isolation_level,
            auto_commit=False, surface=lambda exc: None,
        )

    async def list_consumer_groups(self) -> list[ConsumerGroupListing]:
        """Every group of every broker (ListGroups), sorted by id."""
        await self.client.refresh_metadata()
        found: dict[str, ConsumerGroupListing] = {}
        for node in sorted(self.client.metadata.brokers):
            response = await self.client.call(
                node, api.LIST_GROUPS,
                lambda v: request(api.LIST_GROUPS, v, states_filter=(), types_filter=()),
            )
            if ErrorCode(response.error_code) != ErrorCode.none:
                raise error_for(ErrorCode(response.error_code), f"ListGroups on broker {node}")
            for g in response.groups:
                found[g.group_id] = ConsumerGroupListing(
                    g.group_id, getattr(g, "group_state", "") or "", g.protocol_type or ""
                )
        return [found[g] for g in sorted(found)]

    async def describe_consumer_groups(
        self, group_ids: Iterable[str]
    ) -> dict[str, ConsumerGroupDescription]:
        """State, protocol type and members (with their assigned partitions) of each group,
        from its coordinator (DescribeGroups); a group's error is raised. A group that does
        not exist is answered in state "Dead" with no members, as Kafka does."""
        out: dict[str, ConsumerGroupDescription] = {}
        for group_id in group_ids:
            node = await self.client.find_coordinator(COORDINATOR_GROUP, group_id)
            conn = await self.client.connection(node)
            response = await conn.send(request(
                api.DESCRIBE_GROUPS, DESCRIBE_GROUPS_VERSION, groups=(group_id,),
                include_authorized_operations=False,
            ))
            described = response.groups[0]
            code = ErrorCode(described.error_code)
            if code != ErrorCode.none:
                raise error_for(code, f"DescribeGroups {group_id}")
            out[group_id] = ConsumerGroupDescription(
                group_id, described.group_state, described.protocol_type,
                tuple(_member(m) for m in described.members),
                described.protocol_data, node,
            )
        return out

    async def delete_consumer_groups(
        self, group_ids: Iterable[str]
    ) -> dict[str, KafkaClientError | None]:
        """Delete empty groups and their offsets (DeleteGroups at each coordinator); each
        group's error (NON_EMPTY_GROUP, GROUP_ID_NOT_FOUND, ...) or None."""
        out: dict[str, KafkaClientError | None] = {}
        for group_id in group_ids:
            node = await self.client.find_coordinator(COORDINATOR_GROUP, group_id)
            conn = await self.client.connection(node)
            response = await conn.send(
                request(api.DELETE_GROUPS, DELETE_GROUPS_VERSION, groups_names=(group_id,))
            )
            code = ErrorCode(response.results[0].error_code)
            out[group_id] = (
                None if code == ErrorCode.none else error_for(code, f"DeleteGroups {group_id}")
            )
        return out

    async def list_consumer_group_offsets(
        self,
        group_id: str,
        partitions: Iterable[TopicPartition] | None = None,
        *,
        require_stable: bool = False,
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        """The group's committed offsets of ``partitions`` (None: every partition it has
        one for); partitions without a committed offset are left out."""
        committed = await self._offsets(int(require_stable), group_id).committed(
            None if partitions is None else list(partitions)
        )
        return {tp: om for tp, om in committed.items() if om is not None}

    async def list_offsets(
        self,
        partitions: Sequence[TopicPartition],
        spec: OffsetSpec | None = None,
        *,
        isolation_level: str = "read_uncommitted",
    ) -> dict[TopicPartition, int]:
        """ListOffsets of ``partitions`` at their leaders: ``spec`` earliest, latest (the
        default; the high watermark, or the LSO under "read_committed") or a timestamp."""
        if isolation_level not in _ISOLATION_LEVELS:
            raise ValueError(f"isolation_level must be one of {sorted(_ISOLATION_LEVELS)}")
        wanted = spec if spec is not None else OffsetSpec.latest()
        tps = [TopicPartition(*tp) for tp in partitions]
        return await self._offsets(_ISOLATION_LEVELS[isolation_level]).list_offsets(
            tps, wanted.timestamp
        )

    # ---------------------------------------------------------------- records and offsets

    async def delete_records(
        self, offsets: Mapping[TopicPartition, int], *, timeout_ms: int = 30000
    ) -> dict[TopicPartition, int]:
        """Delete the records below each partition's offset (-1: up to the high watermark)
        with DeleteRecords to each leader; the new low watermark of each partition. A
        partition's error is raised (OFFSET_OUT_OF_RANGE, POLICY_VIOLATION, ...)."""
        by_leader: dict[int, dict[str, list[tuple[int, int]]]] = defaultdict(
            lambda: defaultdict(list)
        )
        for tp, offset in offsets.items():
            tp = TopicPartition(*tp)
            await self.client.topic_info(tp.topic)
            by_leader[self.client.leader_for(tp.topic, tp.partition)][tp.topic].append(
                (tp.partition, int(offset))
            )
        out: dict[TopicPartition, int] = {}
        for leader, by_topic in by_leader.items():

            def build(version: int, by_topic: Mapping[str, list[tuple[int, int]]] = by_topic
                      ) -> Any:
                return request(
                    api.DELETE_RECORDS,
                    version,
                    timeout=timeout_ms,
                    topics=tuple(
                        nested(api.DELETE_RECORDS, version, "DeleteRecordsTopic", name=name,
                               partitions=tuple(
                                   nested(api.DELETE_RECORDS, version, "DeleteRecordsPartition",
                                          partition_index=p, offset=o)
                                   for p, o in parts))
                        for name, parts in by_topic.items()
                    ),
                )

            response = await self.client.call(
                leader, api.DELETE_RECORDS, build,
                timeout_ms=timeout_ms + self.client.request_timeout_ms,
            )
            for topic in response.topics:
                for part in topic.partitions:
                    code = ErrorCode(part.error_code)
                    where = f"DeleteRecords {topic.name}-{part.partition_index}"
                    if code != ErrorCode.none:
                        raise error_for(code, where)
                    out[TopicPartition(topic.name, int(part.partition_index))] = int(
                        part.low_watermark
                    )
        return out

    async def delete_consumer_group_offsets(
        self, group_id: str, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, KafkaClientError | None]:
        """Delete a group's committed offsets of ``partitions`` (OffsetDelete, KIP-496) at
        the group's coordinator. A group-level error (GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP)
        is raised; partition errors (GROUP_SUBSCRIBED_TO_TOPIC, ...) are answered."""
        by_topic: dict[str, list[int]] = defaultdict(list)
        for tp in partitions:
            by_topic[tp[0]].append(int(tp[1]))

        def build(version: int) -> Any:
            return request(
                api.OFFSET_DELETE,
                version,
                group_id=group_id,
                topics=tuple(
                    nested(api.OFFSET_DELETE, version, "OffsetDeleteRequestTopic", name=name,
                           partitions=tuple(
                               nested(api.OFFSET_DELETE, version, "OffsetDeleteRequestPartition",
                                      partition_index=p)
                               for p in parts))
                    for name, parts in by_topic.items()
                ),
            )

        async def attempt() -> Any:
            node = await self.client.find_coordinator(COORDINATOR_GROUP, group_id)
            response = await self.client.call(node, api.OFFSET_DELETE, build)
            code = ErrorCode(response.error_code)
            if code != ErrorCode.none:
                raise error_for(code, f"OffsetDelete of group {group_id}")
            return response

        response = await self.client.retrying(attempt, what=f"OffsetDelete {group_id}")
        out: dict[TopicPartition, KafkaClientError | None] = {}
        for topic in response.topics:
            for part in topic.partitions:
                code = ErrorCode(part.error_code)
                out[TopicPartition(topic.name, int(part.partition_index))] = (
                    None if code == ErrorCode.none
                    else error_for(code, f"OffsetDelete {topic.name}-{part.partition_index}")
                )
        return out
