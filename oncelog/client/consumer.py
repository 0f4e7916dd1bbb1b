"""oncelog.client.Consumer: the synchronous consumer over ``oncelog.client.aio``'s core
(groups with range or cooperative-sticky assignment, or manual assignment; read_committed by
default); its core runs on the consumer's own event loop thread."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from oncelog.client._loop import LoopThread
from oncelog.client.aio.consumer import AIOConsumer
from oncelog.client.config import ClientConfig
from oncelog.client.types import ConsumerGroupMetadata, Message, OffsetAndMetadata, TopicPartition

__all__ = ["Consumer"]


class Consumer:
    """Kafka consumer: groups (range, cooperative-sticky) or manual assignment;
    read_committed by default."""

    def __init__(self, config: Mapping[str, Any]) -> None:
        self._config = ClientConfig(config)
        self._loop = LoopThread(f"oncelog-consumer-{self._config['client.id']}")
        self._core = AIOConsumer(self._config)
        self._closed = False

    def _run(self, coro: Any, timeout: float | None = None) -> Any:
        return self._loop.run(coro, timeout)

    def subscribe(self, topics: Sequence[str]) -> None:
        self._run(self._core.subscribe(list(topics)))

    def assign(self, partitions: Iterable[TopicPartition | tuple[str, int]]) -> None:
        self._run(self._core.assign([TopicPartition(*tp) for tp in partitions]))

    def assignment(self) -> list[TopicPartition]:
        return self._core.assignment()

    def poll(self, timeout: float = 1.0) -> list[Message]:
        """Up to ``max.poll.records`` records, waiting at most ``timeout`` seconds."""
        return list(self._run(self._core.poll(timeout)))

    def seek(self, tp: TopicPartition | tuple[str, int], offset: int) -> None:
        self._run(self._core.seek(TopicPartition(*tp), offset))

    def seek_to_beginning(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        self._run(self._core.seek_to_beginning(partitions))

    def seek_to_end(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        """To the end of each partition: the LSO under read_committed."""
        self._run(self._core.seek_to_end(partitions))

    def position(self, tp: TopicPartition | tuple[str, int]) -> int:
        return int(self._run(self._core.position(TopicPartition(*tp))))

    def commit(
        self, offsets: Mapping[TopicPartition, OffsetAndMetadata | int] | None = None
    ) -> None:
        self._run(self._core.commit(offsets))

    def committed(
        self, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        return dict(self._run(self._core.committed(partitions)))

    def end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """Log end offsets (the LSO under read_committed)."""
        return dict(
            self._run(self._core.list_offsets([TopicPartition(*tp) for tp in partitions], -1))
        )

    def beginning_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return dict(
            self._run(self._core.list_offsets([TopicPartition(*tp) for tp in partitions], -2))
        )

    def group_metadata(self) -> ConsumerGroupMetadata:
        return self._core.group_metadata()

    def pause(self, partitions: Iterable[TopicPartition]) -> None:
        self._core.pause(partitions)

    def resume(self, partitions: Iterable[TopicPartition]) -> None:
        self._loop.call_soon(self._core.resume, list(partitions))

    def close(self, timeout: float | None = None) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._run(self._core.close(), timeout)
        finally:
            self._loop.stop()

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
