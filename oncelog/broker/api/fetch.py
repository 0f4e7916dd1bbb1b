"""Fetch (key 1): read whole batches, long-poll until min_bytes or max_wait.

A partition's ``current_leader_epoch`` (v9+, KIP-320) is checked before reading: older than
the partition's leader epoch is FENCED_LEADER_EPOCH, newer UNKNOWN_LEADER_EPOCH. Sessions
(KIP-227) are not kept: every fetch is a full fetch, answered with session id 0,
which tells clients to keep sending full fetches. A fetch with a replica id (a follower,
``oncelog.broker.cluster.replica_fetcher``) reads up to the log end, waits for the log end
to move, and feeds the leader's replica tracking (the ISR and the high watermark,
``oncelog.broker.cluster.replica_manager``). The response-level max_bytes is soft for
the first batch returned, as in Kafka, so that a consumer always makes progress.

Authorization first (Kafka's ``KafkaApis.handleFetchRequest``): a consumer needs Read on
each topic, a follower ClusterAction on the Cluster; either refusal answers
TOPIC_AUTHORIZATION_FAILED for the partitions concerned (every partition of a follower's
fetch), and the fetch does not wait on them.

A partition this broker does not lead answers NOT_LEADER_OR_FOLLOWER. Kafka adds the
current leader (KIP-951) to such answers only from Fetch v16, when the response also
carries ``node_endpoints`` (``KafkaApis.handleFetchRequest``); below v16 ``current_leader``
keeps its default, so this broker (Fetch up to v12) leaves it there too.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from typing import Any

from oncelog.broker.api import RequestContext, handles
from oncelog.broker.authz import allowed_names, cluster_allowed
from oncelog.broker.cluster_view import ClusterView, check_leader
from oncelog.broker.partitions import Partition
from oncelog.errors import ErrorCode, KafkaError
from oncelog.protocol import versions
from oncelog.protocol.build import make, response_module, to_ms
from oncelog.security.acl import AclOperation, ResourceType
from oncelog.storage.engine import IsolationLevel

log = logging.getLogger(__name__)


@dataclass(slots=True)
class _PartitionRead:
    topic: str
    index: int
    partition: Partition | None
    error: ErrorCode = ErrorCode.none
    data: bytes = b""
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    aborted: list[tuple[int, int]] | None = None


@handles(versions.FETCH, 4, 12)
async def handle_fetch(ctx: RequestContext, request: Any) -> Any:
    mod = response_module(versions.FETCH, ctx.api_version)
    session_id = int(getattr(request, "session_id", 0))
    if session_id != 0:
        return make(
            mod.FetchResponse,
            throttle_time=0,
            error_code=ErrorCode.fetch_session_id_not_found,
            session_id=0,
            responses=(),
        )
    max_wait_ms = max(0, to_ms(request.max_wait))
    min_bytes = max(0, int(request.min_bytes))
    max_bytes = int(getattr(request, "max_bytes", 2**31 - 1))
    isolation = IsolationLevel(int(getattr(request, "isolation_level", 0)))
    replica_id = int(getattr(request, "replica_id", -1))
    follower = replica_id >= 0
    denied = _denied_topics(ctx, request, follower)

    loop = asyncio.get_running_loop()
    deadline = loop.time() + max_wait_ms / 1000
    while True:
        reads, total = _read_all(ctx, request, max_bytes, isolation, replica_id, denied)
        served = [r for r in reads if r.topic not in denied]
        if (total >= min_bytes or any(r.error != ErrorCode.none for r in served)
                or (denied and not served)):
            break
        remaining = deadline - loop.time()
        if remaining <= 0:
            break
        waiter: asyncio.Future[None] = loop.create_future()
        partitions = [r.partition for r in reads if r.partition is not None]
        for partition in partitions:
            partition.add_waiter(waiter, None if follower else isolation)
        try:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(remaining):
                    await waiter
        finally:
            for partition in partitions:
                partition.remove_waiter(waiter)
            if not waiter.done():
                waiter.cancel()

    return _response(mod, reads)


def _denied_topics(ctx: RequestContext, request: Any, follower: bool) -> frozenset[str]:
    """The topics this fetch may not read: all of them for a follower without
    ClusterAction on the Cluster, else those a consumer may not Read."""
    names = [topic.topic for topic in request.topics]
    if follower:
        return frozenset() if cluster_allowed(ctx, AclOperation.CLUSTER_ACTION) else frozenset(
            names)
    return frozenset(names) - allowed_names(ctx, AclOperation.READ, ResourceType.TOPIC, names)


def _read_all(
    ctx: RequestContext, request: Any, max_bytes: int, isolation: IsolationLevel,
    replica_id: int, denied: frozenset[str],
) -> tuple[list[_PartitionRead], int]:
    """Every partition's read. A follower's fetch (``replica_id`` >= 0) reads up to the log
    end and tells the leader's replica tracking where the follower's log ends (refused
    with NOT_LEADER_OR_FOLLOWER for a broker that holds no replica); without replication
    (one node) it is served as such a read alone."""
    registry = ctx.services.partitions
    view: ClusterView = ctx.services.cluster
    replication = ctx.services.replication
    follower = replica_id >= 0
    reads: list[_PartitionRead] = []
    total = 0
    for topic in request.topics:
        for fp in topic.partitions:
            partition = registry.find(topic.topic, fp.partition)
            read = _PartitionRead(topic.topic, fp.partition, partition)
            reads.append(read)
            if topic.topic in denied:
                read.error, read.partition = ErrorCode.topic_authorization_failed, None
                continue
            try:
                check_leader(view, topic.topic, fp.partition)
            except KafkaError as exc:
                read.error, read.partition = exc.code, None
                continue
            if partition is None:
                read.error = ErrorCode.unknown_topic_or_partition
                continue
            try:
                partition.check_leader_epoch(int(getattr(fp, "current_leader_epoch", -1)))
                if follower and replication is not None:
                    replication.on_follower_fetch(
                        partition, replica_id, int(fp.fetch_offset),
                        int(getattr(fp, "log_start_offset", -1)),
                    )
            except KafkaError as exc:
                read.error = exc.code
                continue
            read.high_watermark = partition.high_watermark
            read.last_stable_offset = partition.last_stable_offset
            read.log_start_offset = partition.log_start_offset
            budget = min(int(fp.partition_max_bytes), max_bytes - total)
            if budget <= 0 and total > 0:
                continue
            try:
                result = partition.read(
                    int(fp.fetch_offset), max(budget, 0), isolation, min_one_batch=total == 0,
                    upto_log_end=follower,
                )
            except KafkaError as exc:
                read.error = exc.code
                continue
            read.high_watermark = result.high_watermark
            read.last_stable_offset = result.last_stable_offset
            read.log_start_offset = result.log_start_offset
            read.data = result.data
            total += len(result.data)
            if result.aborted is not None:
                read.aborted = [(txn.producer_id, txn.first_offset) for txn in result.aborted]
    return reads, total


def _response(mod: Any, reads: list[_PartitionRead]) -> Any:
    topics: list[Any] = []
    by_topic: dict[str, list[Any]] = {}
    order: list[str] = []
    for read in reads:
        if read.topic not in by_topic:
            by_topic[read.topic] = []
            order.append(read.topic)
        by_topic[read.topic].append(
            make(
                mod.PartitionData,
                partition_index=read.index,
                error_code=read.error,
                high_watermark=read.high_watermark,
                last_stable_offset=read.last_stable_offset,
                log_start_offset=read.log_start_offset,
                aborted_transactions=None
                if read.aborted is None
                else tuple(
                    make(mod.AbortedTransaction, producer_id=pid, first_offset=first)
                    for pid, first in read.aborted
                ),
                preferred_read_replica=-1,
                records=read.data,
            )
        )
    for name in order:
        topics.append(
            make(mod.FetchableTopicResponse, topic=name, partitions=tuple(by_topic[name]))
        )
    return make(
        mod.FetchResponse,
        throttle_time=0,
        error_code=ErrorCode.none,
        session_id=0,
        responses=tuple(topics),
    )
