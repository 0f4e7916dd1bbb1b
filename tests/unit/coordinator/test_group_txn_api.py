"""TxnOffsetCommit (API 28) at every registered version, through the handler, against a real
GroupCoordinator and a real TransactionCoordinator whose markers land in the offsets store:
verification that the transaction holds the offsets partition, KIP-447 checks from v3,
fencing, and offsets that become visible exactly when the transaction commits."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from test_group_api import call, nested, request

from oncelog.broker.api import HANDLERS, SUPPORTED
from oncelog.broker.api import group as group_api
from oncelog.broker.api.group import txn_verification_error
from oncelog.broker.context import NodeIdentity
from oncelog.clock import FakeClock
from oncelog.config import BrokerConfig
from oncelog.coordinator.group.coordinator import GroupCoordinator
from oncelog.coordinator.group.results import TopicPartition
from oncelog.coordinator.group.store import MemoryOffsetsStore
from oncelog.coordinator.producer_ids import ProducerIdManager
from oncelog.coordinator.transaction import InMemoryTxnLogStore, TransactionCoordinator
from oncelog.errors import ErrorCode
from oncelog.internal_topics import OFFSETS_TOPIC
from oncelog.protocol import versions
from tests.support.fake_cluster_view import OTHER, FakeClusterView, coordinating, endpoints

NONE = ErrorCode.none
KEY = versions.TXN_OFFSET_COMMIT
TXN = "txn-app"
OFFSET_PARTITIONS = 5


NODE = NodeIdentity(7, "", "broker.example", 19092)


@dataclass
class OffsetsMarkerWriter:
    """The broker's part of a marker, for offsets partitions: append the control batch, then
    tell the group coordinator."""

    store: MemoryOffsetsStore
    groups: GroupCoordinator
    written: list[tuple[int, int, bool]] = field(default_factory=list)

    async def write_markers(
        self,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        commit: bool,
        partitions: list[tuple[str, int]],
    ) -> dict[tuple[str, int], ErrorCode]:
        for topic, index in partitions:
            if topic == OFFSETS_TOPIC:
                self.store.append_marker(index, producer_id, producer_epoch, commit,
                                         coordinator_epoch)
                self.groups.on_txn_marker(index, producer_id, commit, producer_epoch)
                self.written.append((index, producer_id, commit))
        return {tp: NONE for tp in partitions}


@dataclass
class TxnBroker:
    groups: GroupCoordinator
    transactions: TransactionCoordinator | None
    store: MemoryOffsetsStore
    markers: OffsetsMarkerWriter
    node: NodeIdentity = NODE
    cluster: FakeClusterView = field(
        default_factory=lambda: coordinating(NODE.node_id, NODE.host, NODE.port)
    )
    txn_verifier: Any = None  # the RemoteTxnVerifier of a cluster broker
    authorizer: Any = None  # no authorizer.class.name


def new_broker(tmp_path: Path) -> TxnBroker:
    config = BrokerConfig({
        "group.initial.rebalance.delay.ms": "0",
        "offsets.topic.num.partitions": str(OFFSET_PARTITIONS),
        "transaction.state.log.num.partitions": "2",
    })
    clock = FakeClock()
    store = MemoryOffsetsStore(OFFSET_PARTITIONS)
    groups = GroupCoordinator(config, store, clock)
    markers = OffsetsMarkerWriter(store, groups)
    transactions = TransactionCoordinator(
        config, InMemoryTxnLogStore(2), ProducerIdManager(tmp_path / "pids"), markers, clock,
        end_txn_wait_ms=1000, marker_backoff_ms=1,
    )
    transactions.load()
    return TxnBroker(groups, transactions, store, markers)


def with_coordinator(broker: TxnBroker, body: Callable[[], Awaitable[None]]) -> None:
    """Run ``body`` while the transaction coordinator's tasks (markers) are running."""

    async def main() -> None:
        assert broker.transactions is not None
        task = asyncio.create_task(broker.transactions.run())
        await broker.transactions.wait_running()
        try:
            await asyncio.wait_for(body(), timeout=5)
        finally:
            task.cancel()
            with suppress(asyncio.CancelledError):
                await task

    asyncio.run(main())


def commit_request(
    version: int,
    group: str,
    producer: tuple[int, int],
    offsets: dict[TopicPartition, int],
    generation: int = -1,
    member: str = "",
    instance: str | None = None,
) -> Any:
    topics: dict[str, list[Any]] = {}
    for (topic, index), offset in offsets.items():
        part = nested(KEY, version, "TxnOffsetCommitRequestPartition", partition_index=index,
                      committed_offset=offset, committed_leader_epoch=2,
                      committed_metadata=f"m{offset}")
        topics.setdefault(topic, []).append(part)
    return request(
        KEY, version, "TxnOffsetCommitRequest",
        transactional_id=TXN, group_id=group, producer_id=producer[0],
        producer_epoch=producer[1], generation_id=generation, member_id=member,
        group_instance_id=instance,
        topics=tuple(
            nested(KEY, version, "TxnOffsetCommitRequestTopic", name=name, partitions=tuple(ps))
            for name, ps in topics.items()
        ),
    )


def answers(response: Any) -> dict[TopicPartition, ErrorCode]:
    return {(t.name, p.partition_index): p.error_code
            for t in response.topics for p in t.partitions}


def transactional_records(broker: TxnBroker) -> int:
    return sum(1 for p in broker.store.partitions for r in p if r.transactional)


async def init_producer(broker: TxnBroker) -> tuple[int, int]:
    """InitProducerId, retried while a previous transaction is being aborted (as clients
    retry CONCURRENT_TRANSACTIONS)."""
    assert broker.transactions is not None
    for _ in range(20):
        result = await broker.transactions.handle_init_producer_id(TXN, 60_000)
        if result.error != ErrorCode.concurrent_transactions:
            break
        await asyncio.sleep(0.001)
    assert result.error == NONE
    return result.producer_id, result.producer_epoch


async def join(broker: TxnBroker, group: str) -> tuple[int, str]:
    result = await broker.groups.join_group(group, "", None, "consumer", [("range", b"")],
                                            10_000, 30_000, "cid", "/h", False)
    sync = await broker.groups.sync_group(group, result.generation_id, result.member_id, None,
                                          None, None, {result.member_id: b""})
    assert sync.error == NONE
    return result.generation_id, result.member_id


def test_registered_range() -> None:
    assert HANDLERS[KEY] is group_api.handle_txn_offset_commit
    assert SUPPORTED[KEY] == (0, 5)


@pytest.mark.parametrize("version", range(0, 6))
def test_offsets_appear_exactly_when_the_transaction_commits(
    version: int, tmp_path: Path
) -> None:
    broker = new_broker(tmp_path)
    groups = broker.groups
    assert broker.transactions is not None
    txn = broker.transactions
    tps = {("in", 0): 10, ("in", 1): 11, ("other", 0): 12}

    async def scenario() -> None:
        producer = await init_producer(broker)
        generation, member = await join(broker, "g") if version >= 3 else (-1, "")
        req = commit_request(version, "g", producer, tps, generation, member)
        if version < 5:
            # The client must add the group's offsets partition first (AddOffsetsToTxn).
            refused = answers(await call(broker, KEY, version, req))  # type: ignore[arg-type]
            expected = ErrorCode.invalid_txn_state if version < 4 else (
                ErrorCode.transaction_abortable
            )
            assert refused == {tp: expected for tp in tps}
            assert transactional_records(broker) == 0
            assert await txn.handle_add_offsets(TXN, *producer, "g") == NONE
        resp = answers(await call(broker, KEY, version, req))  # type: ignore[arg-type]
        assert resp == {tp: NONE for tp in tps}
        # v5 (transactions v2) added the partition itself.
        md = txn.get(TXN)
        assert md is not None
        assert (OFFSETS_TOPIC, groups.partition_for("g")) in md.partitions

        assert groups.fetch_offsets("g", list(tps)) == {
            tp: (-1, -1, "", NONE) for tp in tps
        }
        stable = groups.fetch_offsets("g", list(tps), require_stable=True)
        assert {e.error for e in stable.values()} == {ErrorCode.unstable_offset_commit}

        end = await txn.handle_end_txn(TXN, *producer, commit=True)
        assert end.error == NONE
        assert broker.markers.written == [(groups.partition_for("g"), producer[0], True)]
        leader_epoch = 2 if version >= 2 else -1
        assert groups.fetch_offsets("g", list(tps), require_stable=True) == {
            tp: (offset, leader_epoch, f"m{offset}", NONE) for tp, offset in tps.items()
        }

    with_coordinator(broker, scenario)


@pytest.mark.parametrize("version", [0, 3, 5])
def test_aborted_transaction_leaves_committed_offsets_alone(
    version: int, tmp_path: Path
) -> None:
    broker = new_broker(tmp_path)
    groups = broker.groups
    assert broker.transactions is not None
    txn = broker.transactions

    async def scenario() -> None:
        groups.commit_offsets("g", -1, "", None, {("in", 0): (5, -1, "")})
        producer = await init_producer(broker)
        assert await txn.handle_add_offsets(TXN, *producer, "g") == NONE
        req = commit_request(version, "g", producer, {("in", 0): 50})
        assert answers(await call(broker, KEY, version, req)) == {("in", 0): NONE}  # type: ignore[arg-type]
        end = await txn.handle_end_txn(TXN, *producer, commit=False)
        assert end.error == NONE
        assert groups.fetch_offsets("g", [("in", 0)], require_stable=True) == {
            ("in", 0): (5, -1, "", NONE)
        }

    with_coordinator(broker, scenario)


def test_a_fenced_producer_cannot_commit_offsets(tmp_path: Path) -> None:
    broker = new_broker(tmp_path)
    assert broker.transactions is not None
    txn = broker.transactions

    async def scenario() -> None:
        zombie = await init_producer(broker)
        assert await txn.handle_add_offsets(TXN, *zombie, "g") == NONE
        successor = await init_producer(broker)  # aborts the zombie's txn, bumps the epoch
        assert successor[0] == zombie[0] and successor[1] > zombie[1]
        for version in range(0, 6):
            req = commit_request(version, "g", zombie, {("in", 0): 1})
            assert answers(await call(broker, KEY, version, req)) == {  # type: ignore[arg-type]
                ("in", 0): ErrorCode.invalid_producer_epoch
            }, version
        group = broker.groups.group("g")
        assert group is None or not group.pending_txn_offsets

    with_coordinator(broker, scenario)


def test_kip_447_checks_apply_from_v3(tmp_path: Path) -> None:
    broker = new_broker(tmp_path)
    assert broker.transactions is not None
    txn = broker.transactions

    async def scenario() -> None:
        producer = await init_producer(broker)
        assert await txn.handle_add_offsets(TXN, *producer, "g") == NONE
        generation, member = await join(broker, "g")
        stale = commit_request(3, "g", producer, {("in", 0): 1}, generation - 1, member)
        assert answers(await call(broker, KEY, 3, stale)) == {  # type: ignore[arg-type]
            ("in", 0): ErrorCode.illegal_generation
        }
        unknown = commit_request(4, "g", producer, {("in", 0): 1}, generation, "who")
        assert answers(await call(broker, KEY, 4, unknown)) == {  # type: ignore[arg-type]
            ("in", 0): ErrorCode.unknown_member_id
        }
        # v2 carries no member identity: the same commit is accepted.
        old = commit_request(2, "g", producer, {("in", 0): 1}, generation - 1, member)
        assert answers(await call(broker, KEY, 2, old)) == {("in", 0): NONE}  # type: ignore[arg-type]

    with_coordinator(broker, scenario)


def test_empty_group_id_and_missing_transaction_coordinator(tmp_path: Path) -> None:
    broker = new_broker(tmp_path)

    async def scenario() -> None:
        producer = await init_producer(broker)
        req = commit_request(3, "", producer, {("in", 0): 1})
        assert answers(await call(broker, KEY, 3, req)) == {  # type: ignore[arg-type]
            ("in", 0): ErrorCode.invalid_group_id
        }
        broker.transactions = None
        req = commit_request(3, "g", producer, {("in", 0): 1})
        assert answers(await call(broker, KEY, 3, req)) == {  # type: ignore[arg-type]
            ("in", 0): ErrorCode.coordinator_not_available
        }
        assert transactional_records(broker) == 0

    with_coordinator(broker, scenario)


@pytest.mark.parametrize(
    ("code", "version", "expected"),
    [
        (NONE, 0, NONE),
        (ErrorCode.producer_fenced, 0, ErrorCode.invalid_producer_epoch),
        (ErrorCode.producer_fenced, 5, ErrorCode.invalid_producer_epoch),
        (ErrorCode.transaction_abortable, 3, ErrorCode.invalid_txn_state),
        (ErrorCode.transaction_abortable, 4, ErrorCode.transaction_abortable),
        (ErrorCode.not_coordinator, 3, ErrorCode.coordinator_not_available),
        (ErrorCode.coordinator_load_in_progress, 3, ErrorCode.coordinator_load_in_progress),
        (ErrorCode.invalid_producer_id_mapping, 3, ErrorCode.invalid_producer_id_mapping),
        (ErrorCode.concurrent_transactions, 3, ErrorCode.concurrent_transactions),
    ],
)
def test_verification_answers_by_version(
    code: ErrorCode, version: int, expected: ErrorCode
) -> None:
    assert txn_verification_error(code, version) == expected


@dataclass
class RemoteCoordinator:
    """The transaction coordinator on another broker, as the RemoteTxnVerifier reaches it."""

    answer: ErrorCode = NONE
    calls: list[tuple[Any, ...]] = field(default_factory=list)

    async def add_or_verify(self, coordinator: int, transactional_id: str, producer_id: int,
                            producer_epoch: int, partitions: list[TopicPartition], *,
                            verify_only: bool) -> dict[TopicPartition, ErrorCode]:
        self.calls.append((coordinator, transactional_id, producer_id, producer_epoch,
                           partitions, verify_only))
        return dict.fromkeys(partitions, self.answer)


@pytest.mark.parametrize("version", [3, 5])
def test_a_transaction_coordinator_on_another_broker_is_asked(
    version: int, tmp_path: Path
) -> None:
    # In a cluster the group's coordinator and the transactional id's are often different
    # brokers: this one's transaction coordinator does not own the id (it would answer
    # NOT_COORDINATOR, which became COORDINATOR_NOT_AVAILABLE for ever: the Spark sink's
    # progress commit timed out); the id's coordinator is asked, AddPartitionsToTxn v4.
    broker = new_broker(tmp_path)
    broker.cluster.txn_coordinator_leader = OTHER
    broker.cluster.endpoints = endpoints(NODE.node_id, OTHER)
    remote = RemoteCoordinator()
    broker.txn_verifier = remote
    offsets_partition = broker.cluster.coordinator(0, "g").partition
    req = commit_request(version, "g", (4000, 3), {("in", 0): 10})

    async def scenario() -> None:
        assert answers(await call(broker, KEY, version, req)) == {  # type: ignore[arg-type]
            ("in", 0): NONE
        }
        remote.answer = ErrorCode.not_coordinator  # the coordinator moved again
        assert answers(await call(broker, KEY, version, req)) == {  # type: ignore[arg-type]
            ("in", 0): ErrorCode.coordinator_not_available
        }

    with_coordinator(broker, scenario)
    assert remote.calls[0] == (
        OTHER, TXN, 4000, 3, [(OFFSETS_TOPIC, offsets_partition)], version < 5
    )
