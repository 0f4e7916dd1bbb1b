"""The Produce and Fetch handlers called directly (no sockets) with a RequestContext over a
BrokerContext holding a real PartitionRegistry in a tmp dir and a fake transaction
coordinator."""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import Awaitable
from pathlib import Path
from types import SimpleNamespace
from typing import Any, TypeVar, cast

from oncelog.broker.api import RequestContext, fetch, produce
from oncelog.broker.cluster_view import BrokerEndpoint, LocalClusterView
from oncelog.broker.context import BrokerContext, NodeIdentity
from oncelog.broker.partitions import PartitionRegistry
from oncelog.clock import FakeClock
from oncelog.config import BrokerConfig
from oncelog.errors import ErrorCode
from oncelog.protocol import versions
from oncelog.protocol.build import make, request_module
from oncelog.records.codec import RecordInput, encode_batch
from oncelog.records.validate import validate_batches

PID = 4
T = TypeVar("T")


class FakeTransactions:
    """verify_partitions answers ``code`` for every partition (KIP-890 produce check)."""

    def __init__(self, code: ErrorCode = ErrorCode.none) -> None:
        self.code = code

    def verify_partitions(self, txn_id: str, pid: int, epoch: int,
                          partitions: list[tuple[str, int]]) -> dict[tuple[str, int], ErrorCode]:
        return {tp: self.code for tp in partitions}


def services(tmp_path: Path, transactions: FakeTransactions | None = None) -> BrokerContext:
    clock = FakeClock()
    config = BrokerConfig()
    registry = PartitionRegistry(tmp_path, config, clock)
    registry.load()
    registry.create_topic("t", 1)
    node = NodeIdentity(1, "c", "localhost", 9092)
    return BrokerContext(
        config=config, clock=clock, node=node,
        partitions=registry, groups=cast(Any, SimpleNamespace()),
        transactions=cast(Any, transactions or FakeTransactions()),
        producer_ids=cast(Any, SimpleNamespace()),
        cluster=LocalClusterView(BrokerEndpoint(1, "localhost", 9092), registry),
    )


def ctx(svc: BrokerContext, api_key: int, version: int) -> RequestContext:
    return RequestContext(api_key, version, 1, "test", "127.0.0.1", svc)


async def awaited(pending: Awaitable[T]) -> T:
    """Await a handler's answer: ``@handles`` types a handler as returning an Awaitable, and
    asyncio.run takes only a coroutine."""
    return await pending


def produce_request(*, transactional: bool = False, seq: int = 0, acks: int = -1) -> Any:
    mod = request_module(versions.PRODUCE, 9)
    records = encode_batch(
        [RecordInput(key=b"k", value=b"v")],
        producer_id=PID if transactional else -1, producer_epoch=0 if transactional else -1,
        base_sequence=seq if transactional else -1, transactional=transactional,
    )
    return make(
        mod.ProduceRequest, transactional_id="tx" if transactional else None, acks=acks,
        timeout=datetime.timedelta(seconds=1),
        topic_data=(make(mod.TopicProduceData, name="t", partition_data=(
            make(mod.PartitionProduceData, index=0, records=records),
            make(mod.PartitionProduceData, index=7, records=records),
        )),),
    )


def fetch_request(isolation: int, max_wait_ms: int = 0, min_bytes: int = 0) -> Any:
    mod = request_module(versions.FETCH, 11)
    return make(
        mod.FetchRequest, replica_id=-1, max_wait=datetime.timedelta(milliseconds=max_wait_ms),
        min_bytes=min_bytes, max_bytes=1 << 20, isolation_level=isolation, session_id=0,
        session_epoch=-1, rack_id="", forgotten_topics_data=(),
        topics=(make(mod.FetchTopic, topic="t", partitions=(
            make(mod.FetchPartition, partition=0, current_leader_epoch=-1, fetch_offset=0,
                 log_start_offset=-1, partition_max_bytes=1 << 20),
        )),),
    )


def produce_answers(svc: BrokerContext, request: Any) -> list[tuple[int, ErrorCode, int]]:
    response = asyncio.run(awaited(produce.handle_produce(ctx(svc, versions.PRODUCE, 9), request)))
    return [(p.index, p.error_code, p.base_offset)
            for t in response.responses for p in t.partition_responses]


def fetched(svc: BrokerContext, isolation: int, **kw: int) -> Any:
    response = asyncio.run(awaited(fetch.handle_fetch(ctx(svc, versions.FETCH, 11),
                                                      fetch_request(isolation, **kw))))
    [topic] = response.responses
    [partition] = topic.partitions
    return partition


def test_produce_appends_and_answers_per_partition(tmp_path: Path) -> None:
    svc = services(tmp_path)
    assert produce_answers(svc, produce_request()) == [
        (0, ErrorCode.none, 0), (7, ErrorCode.unknown_topic_or_partition, -1)]
    assert svc.partitions.get("t", 0).high_watermark == 1


def test_produce_fenced_transactional_write_answers_invalid_producer_epoch(
    tmp_path: Path,
) -> None:
    svc = services(tmp_path, FakeTransactions(ErrorCode.producer_fenced))
    [first, _] = produce_answers(svc, produce_request(transactional=True))
    assert first == (0, ErrorCode.invalid_producer_epoch, -1)
    assert svc.partitions.get("t", 0).high_watermark == 0


def test_fetch_by_isolation_level(tmp_path: Path) -> None:
    svc = services(tmp_path)
    produce_answers(svc, produce_request())
    produce_answers(svc, produce_request(transactional=True))
    uncommitted = fetched(svc, 0)
    committed = fetched(svc, 1)
    assert (uncommitted.high_watermark, uncommitted.last_stable_offset) == (2, 1)
    assert uncommitted.aborted_transactions is None
    assert committed.aborted_transactions == ()
    assert len(committed.records) < len(uncommitted.records)
    svc.partitions.get("t", 0).append_marker(PID, 0, 0, commit=False)
    after = fetched(svc, 1)
    assert [(a.producer_id, a.first_offset) for a in after.aborted_transactions] == [(PID, 1)]


def test_read_committed_fetch_waits_for_the_lso_not_the_hw(tmp_path: Path) -> None:
    svc = services(tmp_path)
    partition = svc.partitions.get("t", 0)

    async def body() -> Any:
        request = fetch_request(1, max_wait_ms=5000, min_bytes=1)
        task = asyncio.create_task(
            awaited(fetch.handle_fetch(ctx(svc, versions.FETCH, 11), request))
        )
        while not partition._waiters[fetch.IsolationLevel.READ_COMMITTED]:
            await asyncio.sleep(0)
        append_open_transaction(svc)
        await asyncio.sleep(0)
        assert not task.done()  # the open transaction gives it nothing to read
        partition.append_marker(PID, 0, 0, commit=True)
        return await asyncio.wait_for(task, 5)

    response = asyncio.run(body())
    [topic] = response.responses
    [answer] = topic.partitions
    assert answer.last_stable_offset == 2 and answer.records


def append_open_transaction(svc: BrokerContext) -> None:
    request = produce_request(transactional=True)
    buf = bytearray(request.topic_data[0].partition_data[0].records)
    partition = svc.partitions.get("t", 0)
    headers = validate_batches(buf, max_batch_bytes=1 << 20)
    # The guard a verified transactional produce presents (KIP-890).
    guard = partition.maybe_start_transaction_verification(headers[0].producer_id,
                                                          headers[0].producer_epoch)
    partition.append(buf, headers, verification_guard=guard)
