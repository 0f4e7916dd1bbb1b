"""The consumer's fetcher: Fetch requests, decoded data waiting for poll, fetch errors.

The Java client's Fetcher and FetchCollector. A background fetch task keeps one Fetch
request in flight per leader for the assigned partitions whose position is known, that are
not paused and whose previous data was handed out; decoded data (``fetch_records
.decode_fetched``: read_committed filtering of aborted transactions, CRC checks) waits per
partition as a chunk until ``drain`` hands it to poll (positions advance only as records are
returned, past control records and aborted batches too). OFFSET_OUT_OF_RANGE clears the
position so that it is reset; a corrupt batch raises CorruptRecordError from poll, after the
records before it, until a seek moves past it. No exception is lost: errors are queued
(once) for poll, after a backoff. Positions and the assignment are ``ConsumerOffsets``'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from oncelog.client.aio.client import KafkaClient
from oncelog.client.aio.offsets import ConsumerOffsets
from oncelog.client.config import ClientConfig
from oncelog.client.errors import CorruptRecordError, KafkaClientError, RetriableError, error_for
from oncelog.client.fetch_records import decode_fetched
from oncelog.client.types import Message, TopicPartition
from oncelog.client.wire import nested, request
from oncelog.errors import ErrorCode
from oncelog.protocol import versions as api

logger = logging.getLogger(__name__)

__all__ = ["Fetcher"]


@dataclass
class _Chunk:
    fetch_offset: int
    messages: list[Message]
    next_offset: int
    # Raised by poll once ``messages`` are handed out, and again by every poll until a seek
    # replaces the chunk: the partition is not refetched meanwhile (Java's corruptLastRecord).
    error: CorruptRecordError | None = None
    taken: int = 0  # messages[:taken] were handed out (slices, not one pop per record)


class Fetcher:
    def __init__(
        self,
        config: ClientConfig,
        client: KafkaClient,
        offsets: ConsumerOffsets,
        *,
        isolation_level: int,
    ) -> None:
        self.config = config
        self.client = client
        self.offsets = offsets
        self.isolation_level = isolation_level
        self.chunks: dict[TopicPartition, _Chunk] = {}
        self._in_flight: set[TopicPartition] = set()
        self.errors: list[KafkaClientError] = []
        self.data_ready = asyncio.Event()
        self._wakeup = asyncio.Event()
        self._fetch_task: asyncio.Task[None] | None = None
        self._request_tasks: set[asyncio.Task[None]] = set()
        self.closed = False

    def start(self) -> None:
        if self._fetch_task is None:
            self._fetch_task = asyncio.get_running_loop().create_task(
                self._fetch_loop(), name="oncelog-fetcher"
            )

    def wakeup(self) -> None:
        self._wakeup.set()

    def discard(self, tp: TopicPartition) -> None:
        """Forget the data fetched for ``tp`` (its position moved, or it was revoked)."""
        self.chunks.pop(tp, None)

    async def close(self) -> None:
        self.closed = True
        for task in [self._fetch_task, *self._request_tasks]:
            if task is not None:
                task.cancel()
        for task in [self._fetch_task, *self._request_tasks]:
            if task is not None:
                with contextlib.suppress(BaseException):
                    await task

    async def _fetch_loop(self) -> None:
        while not self.closed:
            try:
                unresolved = [
                    tp for tp in self.offsets.assignment if self.offsets.positions.get(tp) is None
                ]
                if unresolved:
                    await self.offsets.resolve_positions(unresolved)
                fetchable = [
                    tp
                    for tp in self.offsets.assignment
                    if self.offsets.positions.get(tp) is not None
                    and tp not in self.offsets.paused
                    and tp not in self.chunks
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
                    self.surface(exc)
                await asyncio.sleep(self.client.backoff_s(1))
            except Exception as exc:
                logger.exception("fetcher failed; retrying")
                self.surface(KafkaClientError(f"fetcher failed: {type(exc).__name__}: {exc}"))
                await asyncio.sleep(self.client.backoff_s(1))

    def surface(self, exc: KafkaClientError) -> None:
        """Queue ``exc`` for ``poll`` to raise; one that is already waiting there is not
        queued again, so a failure that repeats while nobody polls does not pile up."""
        if all(str(queued) != str(exc) for queued in self.errors):
            self.errors.append(exc)
        self.data_ready.set()

    async def _fetch(self, leader: int, tps: list[TopicPartition]) -> None:
        cfg = self.config
        offsets = {tp: self.offsets.positions.get(tp) for tp in tps}
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
                    if fetch_offset is None or self.offsets.positions.get(tp) != fetch_offset:
                        continue  # sought or revoked meanwhile
                    code = ErrorCode(part.error_code)
                    if code == ErrorCode.offset_out_of_range:
                        logger.info("%s: offset %d out of range; resetting", tp, fetch_offset)
                        self.offsets.positions[tp] = None
                        continue
                    if code != ErrorCode.none:
                        exc = error_for(code, f"Fetch {tp}")
                        if isinstance(exc, RetriableError):
                            refresh = True
                        else:
                            self.surface(exc)
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
                        self.chunks[tp] = _Chunk(
                            fetch_offset,
                            fetched.messages,
                            fetched.next_offset,
                            fetched.error,
                        )
                        self.data_ready.set()
            if failed:
                await asyncio.sleep(self.client.backoff_s(1))
        except asyncio.CancelledError:
            raise
        except RetriableError as exc:
            logger.debug("fetch from node %d failed: %s", leader, exc)
            refresh = True
            await asyncio.sleep(self.client.backoff_s(0))
        except KafkaClientError as exc:
            self.surface(exc)
            await asyncio.sleep(self.client.backoff_s(1))
        except Exception as exc:  # a bug or an unexpected response: to poll, not lost
            logger.exception("fetch from node %d for %s failed", leader, [str(t) for t in tps])
            self.surface(
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

    def drain(self, max_records: int) -> list[Message]:
        out: list[Message] = []
        for tp in list(self.chunks):
            if len(out) >= max_records:
                break
            chunk = self.chunks[tp]
            if self.offsets.positions.get(tp) != chunk.fetch_offset:
                del self.chunks[tp]  # the position moved (seek) since this was fetched
                continue
            start = chunk.taken
            if start < len(chunk.messages):
                part = chunk.messages[start : start + max_records - len(out)]
                chunk.taken = start + len(part)
                out += part
                self.offsets.positions[tp] = chunk.fetch_offset = part[-1].offset + 1
            if chunk.taken < len(chunk.messages):
                continue
            position = max(chunk.next_offset, self.offsets.positions.get(tp) or 0)
            self.offsets.positions[tp] = position
            if chunk.error is None:
                del self.chunks[tp]
                self._wakeup.set()
                continue
            chunk.fetch_offset = position  # the chunk stays until a seek replaces it
            if not out:
                raise chunk.error
            break  # the records before the corrupt batch first; the error on the next poll
        return out
