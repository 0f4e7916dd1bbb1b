"""The asyncio consumer's facade: the user API over the fetcher, the positions and the group.

``oncelog.client.aio.fetcher`` fetches and decodes (read_committed filtering, corrupt
batches); ``oncelog.client.aio.offsets`` owns the assignment, positions, resets and commits;
``oncelog.client.aio.group`` is the group membership of ``subscribe``. This module wires
them and holds what the user sees: subscribe/assign, seek, position, poll (at most
``max.poll.records`` records, the errors queued by the background tasks raised once each),
commit and close. ``enable.auto.commit`` commits positions every
``auto.commit.interval.ms`` from ``poll``, before a rebalance and on close.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from oncelog.client.aio.client import KafkaClient
from oncelog.client.aio.fetcher import Fetcher
from oncelog.client.aio.group import GroupMember
from oncelog.client.aio.offsets import EARLIEST, LATEST, ConsumerOffsets
from oncelog.client.config import ClientConfig
from oncelog.client.errors import IllegalStateError, KafkaClientError
from oncelog.client.types import ConsumerGroupMetadata, Message, OffsetAndMetadata, TopicPartition

logger = logging.getLogger(__name__)

__all__ = ["AIOConsumer"]


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
        self.offsets = ConsumerOffsets(
            cfg,
            self.client,
            group_id=self.group_id,
            isolation_level=self.isolation_level,
            auto_commit=self.auto_commit,
            surface=self._surface,
        )
        self.fetcher = Fetcher(cfg, self.client, self.offsets, isolation_level=self.isolation_level)
        self._group: GroupMember | None = None
        self._group_task: asyncio.Task[None] | None = None
        self._subscription: list[str] = []
        self._closed = False

    def _surface(self, exc: KafkaClientError) -> None:
        self.fetcher.surface(exc)

    # ---------------------------------------------------------------- assignment

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
            on_lost=self._on_lost,
        )
        self.offsets.group = self._group
        self._group_task = asyncio.get_running_loop().create_task(
            self._group.run(), name="oncelog-group"
        )
        self.fetcher.start()

    async def assign(self, partitions: Iterable[TopicPartition]) -> None:
        self._check_open()
        if self._group is not None:
            raise IllegalStateError("assign cannot be mixed with subscribe")
        self._set_assignment(list(partitions))
        self.fetcher.start()

    def _set_assignment(self, partitions: list[TopicPartition]) -> None:
        for tp in self.offsets.set_assignment(partitions):
            self.fetcher.discard(tp)
        self.fetcher.wakeup()

    async def _on_assign(self, added: list[TopicPartition]) -> None:
        assert self._group is not None
        self._set_assignment(self._group.assignment)

    async def _on_revoke(self, revoked: list[TopicPartition]) -> None:
        if self.auto_commit:
            offsets = {
                tp: OffsetAndMetadata(pos)
                for tp in revoked
                if (pos := self.offsets.positions.get(tp)) is not None
            }
            if offsets:
                with contextlib.suppress(KafkaClientError):
                    await self.offsets.commit_offsets(offsets, in_rebalance=True)
        remaining = [tp for tp in self.offsets.assignment if tp not in set(revoked)]
        self._set_assignment(remaining)

    def _on_lost(self, lost: list[TopicPartition]) -> None:
        """The group dropped this member: its partitions go at once, fetched records too,
        and nothing is committed for them (they may have a new owner)."""
        self._set_assignment([tp for tp in self.offsets.assignment if tp not in set(lost)])

    def assignment(self) -> list[TopicPartition]:
        return list(self.offsets.assignment)

    def group_metadata(self) -> ConsumerGroupMetadata:
        if self.group_id is None:
            raise IllegalStateError("group_metadata needs group.id")
        return self.offsets.group_metadata()

    def pause(self, partitions: Iterable[TopicPartition]) -> None:
        self.offsets.paused.update(TopicPartition(*tp) for tp in partitions)

    def resume(self, partitions: Iterable[TopicPartition]) -> None:
        self.offsets.paused.difference_update(TopicPartition(*tp) for tp in partitions)
        self.fetcher.wakeup()

    # ---------------------------------------------------------------- positions

    def _check_open(self) -> None:
        if self._closed:
            raise IllegalStateError("consumer is closed")

    async def seek(self, tp: TopicPartition, offset: int) -> None:
        tp = TopicPartition(*tp)
        self.offsets.check_assigned(tp)
        self.offsets.positions[tp] = int(offset)
        self.fetcher.discard(tp)
        self.fetcher.wakeup()

    async def seek_to_beginning(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        await self._seek_to(partitions, EARLIEST)

    async def seek_to_end(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        """To the log end, or under read_committed to the last stable offset."""
        await self._seek_to(partitions, LATEST)

    async def _seek_to(self, partitions: Iterable[TopicPartition] | None, timestamp: int) -> None:
        tps = [
            TopicPartition(*tp)
            for tp in (partitions if partitions is not None else self.offsets.assignment)
        ]
        for tp in tps:
            self.offsets.check_assigned(tp)
        offsets = await self.offsets.list_offsets(tps, timestamp)
        for tp, offset in offsets.items():
            self.offsets.positions[tp] = offset
            self.fetcher.discard(tp)
        self.fetcher.wakeup()

    async def position(self, tp: TopicPartition) -> int:
        tp = TopicPartition(*tp)
        self.offsets.check_assigned(tp)
        if self.offsets.positions.get(tp) is None:
            await self.offsets.resolve_positions([tp])
        position = self.offsets.positions.get(tp)
        assert position is not None
        return position

    async def list_offsets(
        self, tps: Sequence[TopicPartition], timestamp: int
    ) -> dict[TopicPartition, int]:
        """ListOffsets (earliest -2, latest -1, or a timestamp) with our isolation level."""
        return await self.offsets.list_offsets(tps, timestamp)

    # ---------------------------------------------------------------- poll

    async def poll(self, timeout: float = 1.0) -> list[Message]:
        """Records fetched since the last poll (at most ``max.poll.records``), waiting up to
        ``timeout`` seconds for some to arrive."""
        self._check_open()
        self.fetcher.start()
        await self.offsets.maybe_auto_commit()
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
            if self.fetcher.errors:
                raise self.fetcher.errors.pop(0)
            records = self.fetcher.drain(max_records)
            if records:
                return records
            remaining = deadline - _mono()
            if remaining <= 0:
                return []
            self.fetcher.data_ready.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(remaining):
                    await self.fetcher.data_ready.wait()

    # ---------------------------------------------------------------- offsets

    async def commit(
        self, offsets: Mapping[TopicPartition, OffsetAndMetadata | int] | None = None
    ) -> None:
        """Commit ``offsets`` (default: the current positions) synchronously."""
        self._check_open()
        await self.offsets.commit(offsets)

    async def committed(
        self, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        """The group's committed offsets (None where nothing is committed)."""
        return await self.offsets.committed(partitions)

    # ---------------------------------------------------------------- close

    async def close(self, timeout: float | None = None) -> None:
        if self._closed:
            return
        try:
            if self.auto_commit and self.offsets.assignment:
                with contextlib.suppress(KafkaClientError):
                    offsets = self.offsets.current_offsets()
                    if offsets:
                        await self.offsets.commit_offsets(offsets)
            if self._group is not None:
                if self._group_task is not None:
                    self._group_task.cancel()
                    with contextlib.suppress(BaseException):
                        await self._group_task
                await self._group.leave()
        finally:
            self._closed = True
            await self.fetcher.close()
            await self.client.close()
