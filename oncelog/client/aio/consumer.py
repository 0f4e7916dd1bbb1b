"""The asyncio consumer: assignment, positions, fetching, offsets, read_committed.

A background fetch task keeps one Fetch request in flight per leader for the assigned
partitions whose position is known and whose previous data was handed out; decoded data
waits per partition until ``poll`` returns it (``max.poll.records`` at a time). Positions
advance only as records are returned, to the next offset after what was consumed (past
control records and aborted batches too). Under read_committed (this client's default) the
broker stops at the LSO and ``fetch_records.decode_fetched`` drops aborted transactions.

Starting positions: the committed offset of the group (OffsetFetch, with RequireStable under
read_committed) or, without one, ``auto.offset.reset`` via ListOffsets (earliest, or latest =
the LSO under read_committed). ``enable.auto.commit`` commits positions every
``auto.commit.interval.ms`` from ``poll``, before a rebalance and on close.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import defaultdict, deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from oncelog.client.aio.client import COORDINATOR_GROUP, KafkaClient
from oncelog.client.aio.group import GroupMember
from oncelog.client.config import ClientConfig
from oncelog.client.errors import (
    CommitFailedError,
    CorruptRecordError,
    IllegalStateError,
    KafkaClientError,
    OffsetOutOfRangeError,
    RetriableError,
    error_for,
)
from oncelog.client.fetch_records import decode_fetched
from oncelog.client.types import ConsumerGroupMetadata, Message, OffsetAndMetadata, TopicPartition
from oncelog.client.wire import nested, request
from oncelog.errors import ErrorCode
from oncelog.protocol import versions as api

logger = logging.getLogger(__name__)

__all__ = ["AIOConsumer"]

EARLIEST = -2
LATEST = -1


@dataclass
class _Chunk:
    fetch_offset: int
    messages: deque[Message]
    next_offset: int
    # Raised by poll once ``messages`` are handed out, and again by every poll until a seek
    # replaces the chunk: the partition is not refetched meanwhile (Java's corruptLastRecord).
    error: CorruptRecordError | None = None


def _mono() -> float:
    return time.monotonic()


class AIOConsumer:
    def __init__(self, config: Mapping[str, Any] | ClientConfig) -> None:
        self.config = config if isinstance(config, ClientConfig) else ClientConfig(config)
        cfg = self.config
        self.group_id: str | None = cfg["group.id"]
        self.isolation_level: int = cfg["isolation.level"]
        self.client = KafkaClient(cfg)
        self.auto_commit = bool(cfg["enable.auto.commit"]) and self.group_id is not None
        self._assignment: list[TopicPartition] = []
        self._positions: dict[TopicPartition, int | None] = {}
        self._paused: set[TopicPartition] = set()
        self._chunks: dict[TopicPartition, _Chunk] = {}
        self._in_flight: set[TopicPartition] = set()
        self._errors: list[KafkaClientError] = []
        self._data_ready = asyncio.Event()
        self._wakeup = asyncio.Event()
        self._fetch_task: asyncio.Task[None] | None = None
        self._request_tasks: set[asyncio.Task[None]] = set()
        self._group: GroupMember | None = None
        self._group_task: asyncio.Task[None] | None = None
        self._subscription: list[str] = []
        self._next_auto_commit = _mono() + cfg["auto.commit.interval.ms"] / 1000
        self._closed = False
        self._positions_lock = asyncio.Lock()

    # ---------------------------------------------------------------- assignment

    def _ensure_fetcher(self) -> None:
        if self._fetch_task is None:
            self._fetch_task = asyncio.get_running_loop().create_task(
                self._fetch_loop(), name="oncelog-fetcher"
            )

    async def subscribe(self, topics: Sequence[str]) -> None:
        if self.group_id is None:
            raise IllegalStateError("subscribe needs group.id")
        self._check_open()
        self._subscription = sorted(set(topics))
        self.client.want_topics(self._subscription)
        if self._group is not None:
            self._group.update_topics(self._subscription)
            return
        self._group = GroupMember(
            self.client,
            self.group_id,
            topics=self._subscription,
            on_assign=self._on_assign,
            on_revoke=self._on_revoke,
            on_error=self._surface,
        )
        self._group_task = asyncio.get_running_loop().create_task(
            self._group.run(), name="oncelog-group"
        )
        self._ensure_fetcher()

    async def assign(self, partitions: Iterable[TopicPartition]) -> None:
        self._check_open()
        if self._group is not None:
            raise IllegalStateError("assign cannot be mixed with subscribe")
        self._set_assignment(list(partitions))
        self._ensure_fetcher()

    def _set_assignment(self, partitions: list[TopicPartition]) -> None:
        wanted = [TopicPartition(*tp) for tp in partitions]
        for tp in list(self._positions):
            if tp not in wanted:
                self._positions.pop(tp, None)
                self._chunks.pop(tp, None)
        for tp in wanted:
            self._positions.setdefault(tp, None)
        self._assignment = sorted(set(wanted))
        self.client.want_topics({tp.topic for tp in wanted})
        self._wakeup.set()

    async def _on_assign(self, added: list[TopicPartition]) -> None:
        assert self._group is not None
        self._set_assignment(self._group.assignment)

    async def _on_revoke(self, revoked: list[TopicPartition]) -> None:
        if self.auto_commit:
            offsets = {
                tp: OffsetAndMetadata(pos)
                for tp in revoked
                if (pos := self._positions.get(tp)) is not None
            }
            if offsets:
                with contextlib.suppress(KafkaClientError):
                    await self._commit(offsets, in_rebalance=True)
        remaining = [tp for tp in self._assignment if tp not in set(revoked)]
        self._set_assignment(remaining)

    def assignment(self) -> list[TopicPartition]:
        return list(self._assignment)

    def group_metadata(self) -> ConsumerGroupMetadata:
        if self.group_id is None:
            raise IllegalStateError("group_metadata needs group.id")
        if self._group is None:
            return ConsumerGroupMetadata(self.group_id)
        return self._group.metadata()

    def pause(self, partitions: Iterable[TopicPartition]) -> None:
        self._paused.update(TopicPartition(*tp) for tp in partitions)

    def resume(self, partitions: Iterable[TopicPartition]) -> None:
        self._paused.difference_update(TopicPartition(*tp) for tp in partitions)
        self._wakeup.set()

    # ---------------------------------------------------------------- positions

    def _check_open(self) -> None:
        if self._closed:
            raise IllegalStateError("consumer is closed")

    def _check_assigned(self, tp: TopicPartition) -> None:
        if tp not in self._positions:
            raise IllegalStateError(f"{tp} is not assigned to this consumer")

    async def seek(self, tp: TopicPartition, offset: int) -> None:
        tp = TopicPartition(*tp)
        self._check_assigned(tp)
        self._positions[tp] = int(offset)
        self._chunks.pop(tp, None)
        self._wakeup.set()

    async def seek_to_beginning(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        await self._seek_to(partitions, EARLIEST)

    async def seek_to_end(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        """To the log end, or under read_committed to the last stable offset."""
        await self._seek_to(partitions, LATEST)

    async def _seek_to(self, partitions: Iterable[TopicPartition] | None, timestamp: int) -> None:
        tps = [
            TopicPartition(*tp)
            for tp in (partitions if partitions is not None else self._assignment)
        ]
        for tp in tps:
            self._check_assigned(tp)
        offsets = await self.list_offsets(tps, timestamp)
        for tp, offset in offsets.items():
            self._positions[tp] = offset
            self._chunks.pop(tp, None)
        self._wakeup.set()

    async def position(self, tp: TopicPartition) -> int:
        tp = TopicPartition(*tp)
        self._check_assigned(tp)
        if self._positions.get(tp) is None:
            await self._resolve_positions([tp])
        position = self._positions.get(tp)
        assert position is not None
        return position

    async def _resolve_positions(self, tps: list[TopicPartition]) -> None:
        async with self._positions_lock:
            missing = [tp for tp in tps if tp in self._positions and self._positions[tp] is None]
            if not missing:
                return
            committed: dict[TopicPartition, OffsetAndMetadata | None] = {}
            if self.group_id is not None:
                committed = await self.committed(missing)
            reset = [tp for tp in missing if committed.get(tp) is None]
            for tp in missing:
                om = committed.get(tp)
                if om is not None and self._awaiting_reset(tp):
                    self._positions[tp] = om.offset
            if reset:
                await self._reset_offsets(reset)

    def _awaiting_reset(self, tp: TopicPartition) -> bool:
        """True while ``tp`` is assigned and has no position. A position found by OffsetFetch
        or ListOffsets is applied only then: a ``seek`` made while the lookup was in flight
        cancels it (as SubscriptionState.seek does in the Java client)."""
        return tp in self._positions and self._positions[tp] is None

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
                self._positions[tp] = offset
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

    # ---------------------------------------------------------------- fetching

    async def _fetch_loop(self) -> None:
        while not self._closed:
            try:
                unresolved = [tp for tp in self._assignment if self._positions.get(tp) is None]
                if unresolved:
                    await self._resolve_positions(unresolved)
                fetchable = [
                    tp
                    for tp in self._assignment
                    if self._positions.get(tp) is not None
                    and tp not in self._paused
                    and tp not in self._chunks
                    and tp not in self._in_flight
                ]
                by_leader: dict[int, list[TopicPartition]] = defaultdict(list)
                for tp in fetchable:
                    leader = self.client.leader_for(tp.topic, tp.partition)
                    if leader < 0:
                        await self.client.topic_info(tp.topic)
                        leader = self.client.leader_for(tp.topic, tp.partition)
                    if leader >= 0:
                        by_leader[leader].append(tp)
                for leader, tps in by_leader.items():
                    for tp in tps:
                        self._in_flight.add(tp)
                    task = asyncio.get_running_loop().create_task(self._fetch(leader, tps))
                    self._request_tasks.add(task)
                    task.add_done_callback(self._request_tasks.discard)
                self._wakeup.clear()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(1.0):
                        await self._wakeup.wait()
            except asyncio.CancelledError:
                raise
            except KafkaClientError as exc:
                logger.warning("fetcher: %s", exc)
                if not isinstance(exc, RetriableError):
                    self._surface(exc)
                await asyncio.sleep(self.client.backoff_s(1))
            except Exception as exc:
                logger.exception("fetcher failed; retrying")
                self._surface(KafkaClientError(f"fetcher failed: {type(exc).__name__}: {exc}"))
                await asyncio.sleep(self.client.backoff_s(1))

    def _surface(self, exc: KafkaClientError) -> None:
        """Queue ``exc`` for ``poll`` to raise; one that is already waiting there is not
        queued again, so a failure that repeats while nobody polls does not pile up."""
        if all(str(queued) != str(exc) for queued in self._errors):
            self._errors.append(exc)
        self._data_ready.set()

    async def _fetch(self, leader: int, tps: list[TopicPartition]) -> None:
        cfg = self.config
        offsets = {tp: self._positions.get(tp) for tp in tps}
        by_topic: dict[str, list[TopicPartition]] = defaultdict(list)
        for tp in tps:
            by_topic[tp.topic].append(tp)

        def build(version: int) -> Any:
            return request(
                api.FETCH,
                version,
                replica_id=-1,
                max_wait=cfg["fetch.max.wait.ms"],
                min_bytes=cfg["fetch.min.bytes"],
                max_bytes=cfg["fetch.max.bytes"],
                isolation_level=self.isolation_level,
                session_id=0,
                session_epoch=-1,
                topics=tuple(
                    nested(
                        api.FETCH,
                        version,
                        "FetchTopic",
                        topic=t,
                        topic_id=None,
                        partitions=tuple(
                            nested(
                                api.FETCH,
                                version,
                                "FetchPartition",
                                partition=tp.partition,
                                current_leader_epoch=-1,
                                fetch_offset=offsets[tp],
                                last_fetched_epoch=-1,
                                log_start_offset=-1,
                                partition_max_bytes=cfg["max.partition.fetch.bytes"],
                            )
                            for tp in items
                        ),
                    )
                    for t, items in by_topic.items()
                ),
                forgotten_topics_data=(),
                rack_id="",
            )

        refresh = False
        failed = False  # an error went to poll: wait a backoff before fetching again
        try:
            timeout = cfg["request.timeout.ms"] + cfg["fetch.max.wait.ms"]
            response = await self.client.call(leader, api.FETCH, build, timeout_ms=timeout)
            if response.error_code != ErrorCode.none:
                raise error_for(response.error_code, "Fetch")
            for topic in response.responses:
                for part in topic.partitions:
                    tp = TopicPartition(topic.topic, int(part.partition_index))
                    fetch_offset = offsets.get(tp)
                    if fetch_offset is None or self._positions.get(tp) != fetch_offset:
                        continue  # sought or revoked meanwhile
                    code = ErrorCode(part.error_code)
                    if code == ErrorCode.offset_out_of_range:
                        logger.info("%s: offset %d out of range; resetting", tp, fetch_offset)
                        self._positions[tp] = None
                        continue
                    if code != ErrorCode.none:
                        exc = error_for(code, f"Fetch {tp}")
                        if isinstance(exc, RetriableError):
                            refresh = True
                        else:
                            self._surface(exc)
                            failed = True
                        continue
                    aborted = None
                    if part.aborted_transactions:
                        aborted = [
                            (int(a.producer_id), int(a.first_offset))
                            for a in part.aborted_transactions
                        ]
                    fetched = decode_fetched(
                        tp.topic,
                        tp.partition,
                        part.records,
                        fetch_offset,
                        read_committed=self.isolation_level == 1,
                        aborted_transactions=aborted,
                        verify_crc=cfg["check.crcs"],
                    )
                    if fetched.error is not None:
                        logger.error("%s", fetched.error)
                    if (
                        fetched.messages
                        or fetched.next_offset > fetch_offset
                        or fetched.error is not None
                    ):
                        self._chunks[tp] = _Chunk(
                            fetch_offset,
                            deque(fetched.messages),
                            fetched.next_offset,
                            fetched.error,
                        )
                        self._data_ready.set()
            if failed:
                await asyncio.sleep(self.client.backoff_s(1))
        except asyncio.CancelledError:
            raise
        except RetriableError as exc:
            logger.debug("fetch from node %d failed: %s", leader, exc)
            refresh = True
            await asyncio.sleep(self.client.backoff_s(0))
        except KafkaClientError as exc:
            self._surface(exc)
            await asyncio.sleep(self.client.backoff_s(1))
        except Exception as exc:  # a bug or an unexpected response: to poll, not lost
            logger.exception("fetch from node %d for %s failed", leader, [str(t) for t in tps])
            self._surface(
                KafkaClientError(
                    f"fetch from node {leader} for {', '.join(map(str, tps))} failed: "
                    f"{type(exc).__name__}: {exc}"
                )
            )
            await asyncio.sleep(self.client.backoff_s(1))
        finally:
            for tp in tps:
                self._in_flight.discard(tp)
            self._wakeup.set()
        if refresh:
            with contextlib.suppress(KafkaClientError):
                await self.client.refresh_metadata()

    def _drain(self, max_records: int) -> list[Message]:
        out: list[Message] = []
        for tp in list(self._chunks):
            if len(out) >= max_records:
                break
            chunk = self._chunks[tp]
            if self._positions.get(tp) != chunk.fetch_offset:
                del self._chunks[tp]  # the position moved (seek) since this was fetched
                continue
            while chunk.messages and len(out) < max_records:
                message = chunk.messages.popleft()
                out.append(message)
                self._positions[tp] = message.offset + 1
                chunk.fetch_offset = message.offset + 1
            if chunk.messages:
                continue
            position = max(chunk.next_offset, self._positions.get(tp) or 0)
            self._positions[tp] = position
            if chunk.error is None:
                del self._chunks[tp]
                self._wakeup.set()
                continue
            chunk.fetch_offset = position  # the chunk stays until a seek replaces it
            if not out:
                raise chunk.error
            break  # the records before the corrupt batch first; the error on the next poll
        return out

    async def poll(self, timeout: float = 1.0) -> list[Message]:
        """Records fetched since the last poll (at most ``max.poll.records``), waiting up to
        ``timeout`` seconds for some to arrive."""
        self._check_open()
        self._ensure_fetcher()
        await self._maybe_auto_commit()
        deadline = _mono() + max(0.0, timeout)
        max_records = self.config["max.poll.records"]
        while True:
            if (
                self._group_task is not None
                and self._group_task.done()
                and not self._group_task.cancelled()
            ):
                exc = self._group_task.exception()
                if exc is not None:
                    raise exc
            if self._errors:
                raise self._errors.pop(0)
            records = self._drain(max_records)
            if records:
                return records
            remaining = deadline - _mono()
            if remaining <= 0:
                return []
            self._data_ready.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(remaining):
                    await self._data_ready.wait()

    # ---------------------------------------------------------------- offsets

    async def _maybe_auto_commit(self) -> None:
        if not self.auto_commit or _mono() < self._next_auto_commit:
            return
        self._next_auto_commit = _mono() + self.config["auto.commit.interval.ms"] / 1000
        offsets = self._current_offsets()
        if offsets:
            try:
                await self._commit(offsets)
            except KafkaClientError as exc:
                logger.warning("auto-commit failed: %s", exc)

    def _current_offsets(self) -> dict[TopicPartition, OffsetAndMetadata]:
        return {
            tp: OffsetAndMetadata(pos) for tp, pos in self._positions.items() if pos is not None
        }

    async def commit(
        self, offsets: Mapping[TopicPartition, OffsetAndMetadata | int] | None = None
    ) -> None:
        """Commit ``offsets`` (default: the current positions) synchronously."""
        self._check_open()
        if self.group_id is None:
            raise IllegalStateError("commit needs group.id")
        chosen = (
            self._current_offsets()
            if offsets is None
            else {
                TopicPartition(*tp): (
                    om if isinstance(om, OffsetAndMetadata) else OffsetAndMetadata(int(om))
                )
                for tp, om in offsets.items()
            }
        )
        if chosen:
            await self._commit(chosen)

    async def _commit(
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
                        if self._group is not None and not in_rebalance:
                            self._group.request_rejoin()
                        raise CommitFailedError(
                            f"commit for group {group_id} failed: it rebalanced ({code.name})",
                            code,
                        )
                    raise error_for(code, f"OffsetCommit {topic.name}-{part.partition_index}")

        await self.client.retrying(attempt, what="OffsetCommit")

    async def committed(
        self, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        """The group's committed offsets (None where nothing is committed)."""
        if self.group_id is None:
            raise IllegalStateError("committed needs group.id")
        group_id = self.group_id
        tps = [TopicPartition(*tp) for tp in partitions]
        by_topic: dict[str, list[int]] = defaultdict(list)
        for tp in tps:
            by_topic[tp.topic].append(tp.partition)
        stable = self.isolation_level == 1

        def build(version: int) -> Any:
            if version >= 8:
                groups = (
                    nested(
                        api.OFFSET_FETCH,
                        version,
                        "OffsetFetchRequestGroup",
                        group_id=group_id,
                        topics=tuple(
                            nested(
                                api.OFFSET_FETCH,
                                version,
                                "OffsetFetchRequestTopics",
                                name=t,
                                partition_indexes=tuple(ps),
                            )
                            for t, ps in by_topic.items()
                        ),
                    ),
                )
                return request(api.OFFSET_FETCH, version, groups=groups, require_stable=stable)
            return request(
                api.OFFSET_FETCH,
                version,
                group_id=group_id,
                require_stable=stable,
                topics=tuple(
                    nested(
                        api.OFFSET_FETCH,
                        version,
                        "OffsetFetchRequestTopic",
                        name=t,
                        partition_indexes=tuple(ps),
                    )
                    for t, ps in by_topic.items()
                ),
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

    # ---------------------------------------------------------------- close

    async def close(self, timeout: float | None = None) -> None:
        if self._closed:
            return
        try:
            if self.auto_commit and self._assignment:
                with contextlib.suppress(KafkaClientError):
                    offsets = self._current_offsets()
                    if offsets:
                        await self._commit(offsets)
            if self._group is not None:
                if self._group_task is not None:
                    self._group_task.cancel()
                    with contextlib.suppress(BaseException):
                        await self._group_task
                await self._group.leave()
        finally:
            self._closed = True
            for task in [self._fetch_task, *self._request_tasks]:
                if task is not None:
                    task.cancel()
            for task in [self._fetch_task, *self._request_tasks]:
                if task is not None:
                    with contextlib.suppress(BaseException):
                        await task
            await self.client.close()
