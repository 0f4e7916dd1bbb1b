"""The consumer's positions and offsets: where each assigned partition is, and commits.

The Java client's SubscriptionState, OffsetFetcher and the commit part of its
ConsumerCoordinator, in one place: the assignment and each partition's position (None until
known), paused partitions, starting positions from the group's committed offset (OffsetFetch,
with RequireStable under read_committed) or, without one, ``auto.offset.reset`` via
ListOffsets (earliest, or latest = the LSO under read_committed), OffsetCommit (with the
group's generation; a rebalance error asks the member to rejoin) and the auto-commit timer.
A position found by a lookup is applied only while the partition still awaits one: a seek
made meanwhile wins, as SubscriptionState.seek cancels a pending reset.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from oncelog.client.aio.client import COORDINATOR_GROUP, KafkaClient
from oncelog.client.aio.group import GroupMember
from oncelog.client.config import ClientConfig
from oncelog.client.errors import (
    CommitFailedError,
    IllegalStateError,
    KafkaClientError,
    OffsetOutOfRangeError,
    RetriableError,
    error_for,
)
from oncelog.client.types import ConsumerGroupMetadata, OffsetAndMetadata, TopicPartition
from oncelog.client.wire import nested, request
from oncelog.errors import ErrorCode
from oncelog.protocol import versions as api

logger = logging.getLogger(__name__)

__all__ = ["EARLIEST", "LATEST", "ConsumerOffsets"]

EARLIEST = -2
LATEST = -1


def _mono() -> float:
    return time.monotonic()


class ConsumerOffsets:
    def __init__(
        self,
        config: ClientConfig,
        client: KafkaClient,
        *,
        group_id: str | None,
        isolation_level: int,
        auto_commit: bool,
        surface: Callable[[KafkaClientError], None],
    ) -> None:
        self.config = config
        self.client = client
        self.group_id = group_id
        self.isolation_level = isolation_level
        self.auto_commit = auto_commit
        self._surface = surface  # hands an error to poll
        self.group: GroupMember | None = None
        self.assignment: list[TopicPartition] = []
        self.positions: dict[TopicPartition, int | None] = {}
        self.paused: set[TopicPartition] = set()
        self._next_auto_commit = _mono() + config["auto.commit.interval.ms"] / 1000
        self._lock = asyncio.Lock()

    def set_assignment(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        """Assign ``partitions`` (new ones without a position); returns those dropped."""
        wanted = [TopicPartition(*tp) for tp in partitions]
        dropped = []
        for tp in list(self.positions):
            if tp not in wanted:
                self.positions.pop(tp, None)
                dropped.append(tp)
        for tp in wanted:
            self.positions.setdefault(tp, None)
        self.assignment = sorted(set(wanted))
        self.client.want_topics({tp.topic for tp in wanted})
        return dropped

    def group_metadata(self) -> ConsumerGroupMetadata:
        assert self.group_id is not None
        if self.group is None:
            return ConsumerGroupMetadata(self.group_id)
        return self.group.metadata()

    def check_assigned(self, tp: TopicPartition) -> None:
        if tp not in self.positions:
            raise IllegalStateError(f"{tp} is not assigned to this consumer")

    async def resolve_positions(self, tps: list[TopicPartition]) -> None:
        async with self._lock:
            missing = [tp for tp in tps if tp in self.positions and self.positions[tp] is None]
            if not missing:
                return
            committed: dict[TopicPartition, OffsetAndMetadata | None] = {}
            if self.group_id is not None:
                committed = await self.committed(missing)
            reset = [tp for tp in missing if committed.get(tp) is None]
            for tp in missing:
                om = committed.get(tp)
                if om is not None and self._awaiting_reset(tp):
                    self.positions[tp] = om.offset
            if reset:
                await self._reset_offsets(reset)

    def _awaiting_reset(self, tp: TopicPartition) -> bool:
        """True while ``tp`` is assigned and has no position. A position found by OffsetFetch
        or ListOffsets is applied only then: a ``seek`` made while the lookup was in flight
        cancels it (as SubscriptionState.seek does in the Java client)."""
        return tp in self.positions and self.positions[tp] is None

    async def _reset_offsets(self, tps: list[TopicPartition]) -> None:
        strategy = self.config["auto.offset.reset"]
        tps = [tp for tp in tps if self._awaiting_reset(tp)]
        if not tps:
            return
        if strategy == "none":
            self._surface(
                OffsetOutOfRangeError(
                    f"no committed offset for {[str(t) for t in tps]} and auto.offset.reset=none"
                )
            )
            return
        offsets = await self.list_offsets(tps, EARLIEST if strategy == "earliest" else LATEST)
        for tp, offset in offsets.items():
            if self._awaiting_reset(tp):
                self.positions[tp] = offset
                logger.debug("reset %s to %s offset %d", tp, strategy, offset)
            else:
                logger.debug("%s: reset to %s dropped, position set meanwhile", tp, strategy)

    async def list_offsets(
        self, tps: Sequence[TopicPartition], timestamp: int
    ) -> dict[TopicPartition, int]:
        """ListOffsets (earliest -2, latest -1, or a timestamp) with our isolation level."""
        result: dict[TopicPartition, int] = {}

        async def attempt() -> None:
            pending = [tp for tp in tps if tp not in result]
            by_leader: dict[int, list[TopicPartition]] = defaultdict(list)
            for tp in pending:
                await self.client.topic_info(tp.topic)
                by_leader[self.client.leader_for(tp.topic, tp.partition)].append(tp)
            retriable: KafkaClientError | None = None
            for leader, items in by_leader.items():
                by_topic: dict[str, list[int]] = defaultdict(list)
                for tp in items:
                    by_topic[tp.topic].append(tp.partition)

                def build(version: int, by_topic: dict[str, list[int]] = by_topic) -> Any:
                    return request(
                        api.LIST_OFFSETS,
                        version,
                        replica_id=-1,
                        isolation_level=self.isolation_level,
                        topics=tuple(
                            nested(
                                api.LIST_OFFSETS,
                                version,
                                "ListOffsetsTopic",
                                name=t,
                                partitions=tuple(
                                    nested(
                                        api.LIST_OFFSETS,
                                        version,
                                        "ListOffsetsPartition",
                                        partition_index=p,
                                        timestamp=timestamp,
                                        current_leader_epoch=-1,
                                        max_num_offsets=1,
                                    )
                                    for p in ps
                                ),
                            )
                            for t, ps in by_topic.items()
                        ),
                    )

                response = await self.client.call(leader, api.LIST_OFFSETS, build)
                for topic in response.topics:
                    for part in topic.partitions:
                        tp = TopicPartition(topic.name, int(part.partition_index))
                        code = ErrorCode(part.error_code)
                        if code == ErrorCode.none:
                            result[tp] = int(part.offset)
                        else:
                            exc = error_for(code, f"ListOffsets {tp}")
                            if not isinstance(exc, RetriableError):
                                raise exc
                            retriable = exc
            if retriable is not None:
                await self.client.refresh_metadata()
                raise retriable

        await self.client.retrying(attempt, what="ListOffsets")
        return result

    async def maybe_auto_commit(self) -> None:
        if not self.auto_commit or _mono() < self._next_auto_commit:
            return
        self._next_auto_commit = _mono() + self.config["auto.commit.interval.ms"] / 1000
        offsets = self.current_offsets()
        if offsets:
            try:
                await self.commit_offsets(offsets)
            except KafkaClientError as exc:
                logger.warning("auto-commit failed: %s", exc)

    def current_offsets(self) -> dict[TopicPartition, OffsetAndMetadata]:
        return {tp: OffsetAndMetadata(pos) for tp, pos in self.positions.items() if pos is not None}

    async def commit(
        self, offsets: Mapping[TopicPartition, OffsetAndMetadata | int] | None = None
    ) -> None:
        """Commit ``offsets`` (default: the current positions) synchronously."""
        if self.group_id is None:
            raise IllegalStateError("commit needs group.id")
        chosen = (
            self.current_offsets()
            if offsets is None
            else {
                TopicPartition(*tp): (
                    om if isinstance(om, OffsetAndMetadata) else OffsetAndMetadata(int(om))
                )
                for tp, om in offsets.items()
            }
        )
        if chosen:
            await self.commit_offsets(chosen)

    async def commit_offsets(
        self, offsets: Mapping[TopicPartition, OffsetAndMetadata], in_rebalance: bool = False
    ) -> None:
        assert self.group_id is not None
        group_id = self.group_id
        meta = self.group_metadata()
        by_topic: dict[str, list[tuple[int, OffsetAndMetadata]]] = defaultdict(list)
        for tp, om in offsets.items():
            by_topic[tp.topic].append((tp.partition, om))

        def build(version: int) -> Any:
            return request(
                api.OFFSET_COMMIT,
                version,
                group_id=group_id,
                generation_id=meta.generation_id,
                generation_id_or_member_epoch=meta.generation_id,
                member_id=meta.member_id,
                group_instance_id=meta.group_instance_id,
                retention_time_ms=-1,
                topics=tuple(
                    nested(
                        api.OFFSET_COMMIT,
                        version,
                        "OffsetCommitRequestTopic",
                        name=t,
                        partitions=tuple(
                            nested(
                                api.OFFSET_COMMIT,
                                version,
                                "OffsetCommitRequestPartition",
                                partition_index=p,
                                committed_offset=om.offset,
                                committed_leader_epoch=om.leader_epoch,
                                committed_metadata=om.metadata,
                                commit_timestamp=-1,
                            )
                            for p, om in parts
                        ),
                    )
                    for t, parts in by_topic.items()
                ),
            )

        async def attempt() -> None:
            node = await self.client.find_coordinator(COORDINATOR_GROUP, group_id)
            try:
                response = await self.client.call(node, api.OFFSET_COMMIT, build)
            except RetriableError:
                self.client.invalidate_coordinator(COORDINATOR_GROUP, group_id)
                raise
            for topic in response.topics:
                for part in topic.partitions:
                    code = ErrorCode(part.error_code)
                    if code == ErrorCode.none:
                        continue
                    if code in (ErrorCode.not_coordinator, ErrorCode.coordinator_not_available):
                        self.client.invalidate_coordinator(COORDINATOR_GROUP, group_id)
                    if code in (
                        ErrorCode.rebalance_in_progress,
                        ErrorCode.illegal_generation,
                        ErrorCode.unknown_member_id,
                        ErrorCode.fenced_instance_id,
                    ):
                        if self.group is not None and not in_rebalance:
                            self.group.request_rejoin()
                        raise CommitFailedError(
                            f"commit for group {group_id} failed: it rebalanced ({code.name})",
                            code,
                        )
                    raise error_for(code, f"OffsetCommit {topic.name}-{part.partition_index}")

        await self.client.retrying(attempt, what="OffsetCommit")

    async def committed(
        self, partitions: Iterable[TopicPartition] | None
    ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        """The group's committed offsets (None where nothing is committed); ``partitions``
        None asks for every partition the group has an offset for (OffsetFetch topics=null)."""
        if self.group_id is None:
            raise IllegalStateError("committed needs group.id")
        group_id = self.group_id
        tps = [] if partitions is None else [TopicPartition(*tp) for tp in partitions]
        by_topic: dict[str, list[int]] = defaultdict(list)
        for tp in tps:
            by_topic[tp.topic].append(tp.partition)
        stable = self.isolation_level == 1

        def topics(version: int, entity: str) -> Any:
            if partitions is None:
                return None
            return tuple(
                nested(api.OFFSET_FETCH, version, entity, name=t, partition_indexes=tuple(ps))
                for t, ps in by_topic.items()
            )

        def build(version: int) -> Any:
            if version >= 8:
                groups = (
                    nested(
                        api.OFFSET_FETCH,
                        version,
                        "OffsetFetchRequestGroup",
                        group_id=group_id,
                        topics=topics(version, "OffsetFetchRequestTopics"),
                    ),
                )
                return request(api.OFFSET_FETCH, version, groups=groups, require_stable=stable)
            return request(
                api.OFFSET_FETCH,
                version,
                group_id=group_id,
                require_stable=stable,
                topics=topics(version, "OffsetFetchRequestTopic"),
            )

        async def attempt() -> dict[TopicPartition, OffsetAndMetadata | None]:
            node = await self.client.find_coordinator(COORDINATOR_GROUP, group_id)
            try:
                response = await self.client.call(node, api.OFFSET_FETCH, build)
            except RetriableError:
                self.client.invalidate_coordinator(COORDINATOR_GROUP, group_id)
                raise
            if hasattr(response, "groups"):
                group = response.groups[0]
                top_code, topics = ErrorCode(group.error_code), group.topics
            else:
                top_code, topics = ErrorCode(getattr(response, "error_code", 0)), response.topics
            if top_code != ErrorCode.none:
                if top_code in (ErrorCode.not_coordinator, ErrorCode.coordinator_not_available):
                    self.client.invalidate_coordinator(COORDINATOR_GROUP, group_id)
                raise error_for(top_code, f"OffsetFetch {group_id}")
            out: dict[TopicPartition, OffsetAndMetadata | None] = {tp: None for tp in tps}
            for topic in topics:
                for part in topic.partitions:
                    code = ErrorCode(part.error_code)
                    if code != ErrorCode.none:
                        raise error_for(code, f"OffsetFetch {topic.name}-{part.partition_index}")
                    offset = int(part.committed_offset)
                    if offset >= 0:
                        out[TopicPartition(topic.name, int(part.partition_index))] = (
                            OffsetAndMetadata(
                                offset,
                                part.metadata or "",
                                int(getattr(part, "committed_leader_epoch", -1)),
                            )
                        )
            return out

        return await self.client.retrying(attempt, what="OffsetFetch")
