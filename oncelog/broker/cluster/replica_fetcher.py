"""A follower's fetch loop towards one leader broker (Kafka's ReplicaFetcherThread, one per
source broker as ``num.replica.fetchers`` = 1).

The partitions this broker follows from that leader are added with the leader epoch the
metadata names (``add_partition``); each then goes through ``oncelog.cluster.follower``'s
state machine:

- TRUNCATING: OffsetForLeaderEpoch for the log's latest epoch (CurrentLeaderEpoch = the
  epoch followed), ``truncation_for`` decides where the logs diverged (KIP-101/279), the log
  is cut there and fetching starts from the new log end; a log without epochs truncates to
  its high watermark.
- FETCHING: Fetch with this broker's id as ``replica_id`` (the highest version both sides
  serve; v15's ReplicaState is not served by oncelog, so the broker epoch travels only from
  v15 on), ``replica.fetch.max.bytes`` per partition, ``replica.fetch.wait.max.ms`` and
  ``replica.fetch.min.bytes``. The batches are appended with AppendOrigin.REPLICATION (the
  engine rebuilds producer state, the aborted index and the LSO from them and refuses
  batches that do not start at its log end), then the follower's high watermark becomes
  min(leader's high watermark, its log end) and its log start follows the leader's.
- NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH and any other error of
  a partition: that partition alone waits ``replica.fetch.backoff.ms`` and is asked again
  with the leader epoch the metadata names then (a new leader may not have applied its
  leadership yet); the others go on. A partition leaves the fetcher only when this broker
  stops following it from this leader (``remove_partition``); the fetcher never guesses a
  leader.
- OFFSET_OUT_OF_RANGE: Kafka's rule (``follower.offset_out_of_range_reset``) with the
  leader's log end and log start asked for with ListOffsets as a replica (Kafka's
  ``fetchLatestOffsetFromLeader`` / ``fetchEarliestOffsetFromLeader``).
- a lost connection, or an error of the whole Fetch: ``replica.fetch.backoff.ms`` and again;
  a local storage error takes the partition to FAILED.

I/O shell only: the rules are in ``oncelog.cluster.follower``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from oncelog.broker.listeners import inter_broker_client_tls
from oncelog.broker.partition import Partition
from oncelog.broker.sasl import inter_broker_client_sasl
from oncelog.client.aio.connection import BrokerConnection
from oncelog.client.errors import CONNECTION_FAILURES
from oncelog.client.sasl import SaslCredentials
from oncelog.client.wire import nested, request
from oncelog.cluster.follower import (
    EpochEndOffset,
    PartitionFetchState,
    Truncation,
    local_end_offset_for_epoch,
    offset_out_of_range_reset,
    truncation_for,
)
from oncelog.errors import ErrorCode, KafkaError
from oncelog.protocol import versions as api
from oncelog.records.batch import LOG_OVERHEAD
from oncelog.records.validate import validate_batches
from oncelog.storage.engine import AppendOrigin

__all__ = ["FetcherConfig", "LeaderEndpoint", "ReplicaFetcher"]

log = logging.getLogger(__name__)

_MAX_BATCH = 2**31 - 1
_LATEST, _EARLIEST = -1, -2  # ListOffsets' special timestamps


@dataclass(frozen=True, slots=True)
class LeaderEndpoint:
    node_id: int
    host: str
    port: int


@dataclass(frozen=True, slots=True)
class FetcherConfig:
    """The replica.* settings a fetcher runs with (Kafka's names and defaults)."""

    fetch_wait_max_ms: int = 500
    fetch_max_bytes: int = 1_048_576
    fetch_response_max_bytes: int = 10_485_760
    fetch_min_bytes: int = 1
    fetch_backoff_ms: int = 1000
    socket_timeout_ms: int = 30_000
    tls: ssl.SSLContext | None = None  # the inter-broker listener's TLS (None: PLAINTEXT)
    sasl: SaslCredentials | None = None  # this broker's SASL login on it (None: no SASL)

    @classmethod
    def from_broker(cls, config: Any) -> FetcherConfig:
        return cls(
            tls=inter_broker_client_tls(config),
            sasl=inter_broker_client_sasl(config),
            fetch_wait_max_ms=int(config["replica.fetch.wait.max.ms"]),
            fetch_max_bytes=int(config["replica.fetch.max.bytes"]),
            fetch_response_max_bytes=int(config["replica.fetch.response.max.bytes"]),
            fetch_min_bytes=int(config["replica.fetch.min.bytes"]),
            fetch_backoff_ms=int(config["replica.fetch.backoff.ms"]),
            socket_timeout_ms=int(config["replica.socket.timeout.ms"]),
        )


@dataclass(slots=True)
class _Followed:
    partition: Partition
    state: PartitionFetchState


class ReplicaFetcher:
    """Replicates the partitions this broker follows from one leader broker. ``run()`` is a
    task of the broker's TaskGroup; partitions come and go while it runs."""

    def __init__(
        self,
        *,
        local_id: int,
        leader: LeaderEndpoint,
        config: FetcherConfig,
        connect: Callable[[LeaderEndpoint], BrokerConnection] | None = None,
        monotonic_ms: Callable[[], int] | None = None,
    ) -> None:
        self.local_id = local_id
        self.leader = leader
        self.config = config
        self._connect = connect or self._default_connection
        self._now_ms = monotonic_ms or (lambda: int(time.monotonic() * 1000))
        self._connection: BrokerConnection | None = None
        self._followed: dict[tuple[str, int], _Followed] = {}
        self._changed = asyncio.Event()
        self.fetches = 0  # fetch round trips done (statistics, tests)

    def _default_connection(self, leader: LeaderEndpoint) -> BrokerConnection:
        return BrokerConnection(
            leader.host, leader.port, node_id=leader.node_id,
            client_id=f"oncelog-replica-fetcher-{self.local_id}",
            request_timeout_ms=self.config.socket_timeout_ms + self.config.fetch_wait_max_ms,
            tls=self.config.tls, sasl=self.config.sasl,
        )

    # -- partitions ----------------------------------------------------------------------------
    def add_partition(self, partition: Partition, leader_epoch: int) -> None:
        """Follow ``partition`` from this leader at ``leader_epoch`` (a newer epoch of a
        partition already followed starts it over with truncation)."""
        key = (partition.topic, partition.index)
        hw = partition.high_watermark
        followed = self._followed.get(key)
        if followed is None or followed.partition is not partition:
            state = PartitionFetchState.become_follower(partition.name, leader_epoch, hw)
            self._followed[key] = _Followed(partition, state)
        else:
            followed.state = followed.state.on_leader_changed(leader_epoch, hw)
        self._changed.set()

    def remove_partition(self, topic: str, index: int) -> None:
        if self._followed.pop((topic, index), None) is not None:
            log.info("%s-%d: no longer fetched from broker %d", topic, index,
                     self.leader.node_id)
            self._changed.set()

    @property
    def partitions(self) -> dict[tuple[str, int], PartitionFetchState]:
        return {key: f.state for key, f in self._followed.items()}

    # -- the loop -----------------------------------------------------------------------------
    async def run(self) -> None:
        log.info("replica fetcher of broker %d from broker %d at %s:%d started",
                 self.local_id, self.leader.node_id, self.leader.host, self.leader.port)
        try:
            while True:
                wait_ms = self._until_ready()
                if wait_ms != 0:
                    await self._wait_for_change(wait_ms)
                    continue
                try:
                    connection = await self._connected()
                    await self._truncate(connection)
                    progressed = await self._fetch(connection)
                except CONNECTION_FAILURES as exc:
                    # A refused inter-broker login (credentials not yet created, or wrong)
                    # is retried as Kafka's fetcher does, never the end of the broker.
                    log.warning("replica fetcher %d <- %d: %s; retrying in %d ms",
                                self.local_id, self.leader.node_id, exc,
                                self.config.fetch_backoff_ms)
                    await self._drop_connection(str(exc))
                    progressed = False
                if not progressed:
                    await self._backoff()
        finally:
            await self._drop_connection("fetcher stopped")

    def _until_ready(self) -> int | None:
        """0 when a partition is ready to be asked about; else how long until the first
        refused one may be asked again (ms), or None when none is truncating or fetching."""
        now = self._now_ms()
        waits = [f.state.retry_at_ms - now for f in self._followed.values()
                 if f.state.is_truncating or f.state.is_fetching]
        return None if not waits else max(min(waits), 0)

    async def _wait_for_change(self, timeout_ms: int | None) -> None:
        """Until a partition is added or changes, or ``timeout_ms`` (None: no limit)."""
        self._changed.clear()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(None if timeout_ms is None else timeout_ms / 1000):
                await self._changed.wait()

    async def _backoff(self) -> None:
        await self._wait_for_change(self.config.fetch_backoff_ms)

    async def _connected(self) -> BrokerConnection:
        if self._connection is None or not self._connection.connected:
            self._connection = self._connect(self.leader)
            await self._connection.connect()
        return self._connection

    async def _drop_connection(self, reason: str) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            await connection.close(reason)

    # -- truncation ---------------------------------------------------------------------------
    async def _truncate(self, connection: BrokerConnection) -> None:
        """One OffsetForLeaderEpoch round for every partition that is truncating (and not
        waiting out a refusal)."""
        asking: dict[tuple[str, int], tuple[_Followed, int]] = {}
        now = self._now_ms()
        for key, item in self._followed.items():
            if not item.state.is_truncating or not item.state.is_ready(now):
                continue
            latest = item.partition.log.latest_epoch
            if latest is None:
                self._apply_truncation(item, item.state.truncation_without_epochs(),
                                       item.state.leader_epoch)
                continue
            asking[key] = (item, latest)
        if not asking:
            return
        version = min(connection.version(api.OFFSET_FOR_LEADER_EPOCH), 4)
        by_topic: dict[str, list[Any]] = {}
        for (topic, index), (item, latest) in asking.items():
            by_topic.setdefault(topic, []).append(nested(
                api.OFFSET_FOR_LEADER_EPOCH, version, "OffsetForLeaderPartition",
                partition=index, current_leader_epoch=item.state.leader_epoch,
                leader_epoch=latest,
            ))
        body = request(
            api.OFFSET_FOR_LEADER_EPOCH, version, replica_id=self.local_id,
            topics=tuple(
                nested(api.OFFSET_FOR_LEADER_EPOCH, version, "OffsetForLeaderTopic",
                       topic=topic, partitions=tuple(parts))
                for topic, parts in by_topic.items()
            ),
        )
        sent_epochs = {key: f.state.leader_epoch for key, (f, _) in asking.items()}
        response = await connection.send(body)
        for topic in response.topics:
            for answer in topic.partitions:
                key = (topic.topic, int(answer.partition))
                followed = self._followed.get(key)
                if followed is None or key not in sent_epochs:
                    continue
                code = ErrorCode(int(answer.error_code))
                if code is not ErrorCode.none:
                    self._on_error(followed, code, "OffsetForLeaderEpoch")
                    continue
                leader_end = EpochEndOffset(int(answer.leader_epoch), int(answer.end_offset))
                truncation = truncation_for(
                    leader_end,
                    local_end_offset=_local_lookup(followed.partition),
                    log_end_offset=followed.partition.log_end_offset,
                    fetch_offset=followed.state.fetch_offset,
                )
                self._apply_truncation(followed, truncation, sent_epochs[key])

    def _apply_truncation(
        self, followed: _Followed, truncation: Truncation, for_epoch: int
    ) -> None:
        partition = followed.partition
        try:
            partition.truncate_to(truncation.offset)
        except KafkaError as exc:
            log.error("%s: truncation to %d failed: %s", partition.name, truncation.offset, exc)
            followed.state = followed.state.on_failed()
            return
        # The log may end below the offset (a batch is removed whole): fetch from its end.
        done = replace(truncation, offset=partition.log_end_offset)
        followed.state = followed.state.on_truncated(done, for_epoch)
        partition.maybe_increment_high_watermark(0)  # the engine bounds it by the log end

    # -- fetching -----------------------------------------------------------------------------
    async def _fetch(self, connection: BrokerConnection) -> bool:
        """One Fetch for every partition that is fetching (and not waiting out a refusal);
        False when the whole Fetch failed (back off). Partitions the leader answered with
        an error wait on their own (``_on_error``); out-of-range ones are reset after."""
        now = self._now_ms()
        fetching = {key: f for key, f in self._followed.items()
                    if f.state.is_fetching and f.state.is_ready(now)}
        if not fetching:
            return True
        version = connection.version(api.FETCH)
        cfg = self.config
        by_topic: dict[str, list[Any]] = {}
        sent: dict[tuple[str, int], tuple[int, int]] = {}
        for (topic, index), item in fetching.items():
            state = item.state
            sent[(topic, index)] = (state.fetch_offset, state.leader_epoch)
            by_topic.setdefault(topic, []).append(nested(
                api.FETCH, version, "FetchPartition",
                partition=index, current_leader_epoch=state.leader_epoch,
                fetch_offset=state.fetch_offset, last_fetched_epoch=-1,
                log_start_offset=item.partition.log_start_offset,
                partition_max_bytes=cfg.fetch_max_bytes,
            ))
        body = request(
            api.FETCH, version, replica_id=self.local_id,
            max_wait=cfg.fetch_wait_max_ms, min_bytes=cfg.fetch_min_bytes,
            max_bytes=cfg.fetch_response_max_bytes, isolation_level=0,
            session_id=0, session_epoch=-1,
            topics=tuple(
                nested(api.FETCH, version, "FetchTopic", topic=topic, topic_id=None,
                       partitions=tuple(parts))
                for topic, parts in by_topic.items()
            ),
            forgotten_topics_data=(), rack_id="",
        )
        response = await connection.send(body)
        self.fetches += 1
        if int(response.error_code) != ErrorCode.none:
            log.warning("replica fetch from broker %d failed: %s", self.leader.node_id,
                        ErrorCode(int(response.error_code)).name)
            return False
        out_of_range: dict[tuple[str, int], tuple[int, int]] = {}
        for topic in response.responses:
            for data in topic.partitions:
                key = (topic.topic, int(data.partition_index))
                followed = self._followed.get(key)
                if followed is None or key not in sent:
                    continue
                if sent[key] != (followed.state.fetch_offset, followed.state.leader_epoch):
                    continue  # the partition moved on meanwhile (truncated, new epoch)
                if int(data.error_code) == ErrorCode.offset_out_of_range:
                    out_of_range[key] = sent[key]
                    continue
                self._on_fetched(followed, data)
        if out_of_range:
            await self._reset_out_of_range(connection, out_of_range)
        return True

    async def _reset_out_of_range(
        self, connection: BrokerConnection, sent: dict[tuple[str, int], tuple[int, int]]
    ) -> None:
        """OFFSET_OUT_OF_RANGE: the leader's log end and start (ListOffsets as a replica,
        LATEST then EARLIEST), then Kafka's reset rule."""
        ends = await self._leader_offsets(connection, sent, _LATEST)
        starts = await self._leader_offsets(connection, sent, _EARLIEST)
        for key, expected in sent.items():
            followed = self._followed.get(key)
            if followed is None or expected != (followed.state.fetch_offset,
                                                followed.state.leader_epoch):
                continue
            missing = ErrorCode.unknown_server_error  # the leader did not answer for it
            end, start = ends.get(key, missing), starts.get(key, missing)
            failed = next((c for c in (end, start) if isinstance(c, ErrorCode)), None)
            if failed is not None:
                self._on_error(followed, failed, "ListOffsets")
                continue
            self._apply_reset(followed, int(end), int(start))

    async def _leader_offsets(
        self, connection: BrokerConnection, sent: dict[tuple[str, int], tuple[int, int]],
        timestamp: int,
    ) -> dict[tuple[str, int], int | ErrorCode]:
        """The leader's offset for ``timestamp`` of each partition (its log end for LATEST:
        asked as a replica), or the error it answered."""
        version = min(connection.version(api.LIST_OFFSETS), 7)
        by_topic: dict[str, list[Any]] = {}
        for (topic, index), (_, epoch) in sent.items():
            by_topic.setdefault(topic, []).append(nested(
                api.LIST_OFFSETS, version, "ListOffsetsPartition", partition_index=index,
                current_leader_epoch=epoch, timestamp=timestamp, max_num_offsets=1))
        body = request(
            api.LIST_OFFSETS, version, replica_id=self.local_id, isolation_level=0,
            topics=tuple(nested(api.LIST_OFFSETS, version, "ListOffsetsTopic", name=topic,
                                partitions=tuple(parts))
                         for topic, parts in by_topic.items()),
        )
        response = await connection.send(body)
        found: dict[tuple[str, int], int | ErrorCode] = {}
        for topic in response.topics:
            for answer in topic.partitions:
                code = ErrorCode(int(answer.error_code))
                found[(topic.name, int(answer.partition_index))] = (
                    int(answer.offset) if code is ErrorCode.none else code)
        return found

    def _apply_reset(self, followed: _Followed, leader_end: int, leader_start: int) -> None:
        partition, state = followed.partition, followed.state
        reset = offset_out_of_range_reset(partition.log_end_offset, leader_end, leader_start)
        try:
            if reset.truncate_to is not None:
                partition.truncate_to(reset.truncate_to)
            elif reset.start_fresh_at is not None:
                partition.truncate_fully_and_start_at(reset.start_fresh_at)
        except KafkaError as exc:
            log.error("%s: offset reset failed: %s", partition.name, exc)
            followed.state = state.on_failed()
            return
        followed.state = state.on_offset_reset(replace(
            reset, fetch_offset=partition.log_end_offset))

    def _on_fetched(self, followed: _Followed, data: Any) -> None:
        partition, state = followed.partition, followed.state
        code = ErrorCode(int(data.error_code))
        if code is not ErrorCode.none:
            self._on_error(followed, code, "Fetch")
            return
        records = bytes(data.records or b"")
        try:
            if records:
                self._append(partition, records)
            partition.maybe_increment_high_watermark(int(data.high_watermark))
            leader_start = int(data.log_start_offset)
            if partition.log_start_offset < leader_start <= partition.high_watermark:
                partition.delete_records_before(leader_start)
        except KafkaError as exc:
            log.error("%s: replicated append at %d failed: %s", partition.name,
                      partition.log_end_offset, exc)
            followed.state = state.on_failed()
            return
        followed.state = state.on_fetched(partition.log_end_offset, state.leader_epoch)

    def _append(self, partition: Partition, records: bytes) -> None:
        buf = bytearray(records)
        headers = validate_batches(buf, max_batch_bytes=_MAX_BATCH, allow_control=True)
        end = partition.log_end_offset
        # Whole batches already here (the leader returns the batch holding the fetch
        # offset) are skipped; the rest must start at the log end (the engine checks).
        skip = 0
        position = 0
        for header in headers:
            if header.next_offset > end:
                break
            skip += 1
            position += header.batch_length + LOG_OVERHEAD
        if skip == len(headers):
            return
        partition.append(bytearray(buf[position:]), headers[skip:],
                         origin=AppendOrigin.REPLICATION)

    def _on_error(self, followed: _Followed, code: ErrorCode, what: str) -> None:
        """The leader refused ``followed``: it alone is asked again after the backoff."""
        log.info("%s: %s answered %s at leader epoch %d; retrying in %d ms",
                 followed.partition.name, what, code.name, followed.state.leader_epoch,
                 self.config.fetch_backoff_ms)
        followed.state = followed.state.on_refused(
            self._now_ms() + self.config.fetch_backoff_ms)


def _local_lookup(partition: Partition) -> Callable[[int], EpochEndOffset | None]:
    """The follower's own end of an epoch, from its log's epoch cache."""
    engine = partition.log

    def lookup(epoch: int) -> EpochEndOffset | None:
        entries = [(e.epoch, e.start_offset) for e in engine.epochs.entries]
        return local_end_offset_for_epoch(entries, epoch, engine.log_end_offset)

    return lookup
