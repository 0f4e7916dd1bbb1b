"""oncelog.broker.partitions.Partition over a real log in a tmp dir: append and read by
isolation level, fetch waiters woken by what moved (HW for read_uncommitted, LSO for
read_committed), and an offline partition."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from oncelog.broker.partitions import Partition, PartitionRegistry
from oncelog.clock import FakeClock
from oncelog.config import BrokerConfig
from oncelog.errors import ErrorCode, KafkaError
from oncelog.records.codec import RecordInput, encode_batch
from oncelog.records.validate import validate_batches
from oncelog.storage.engine import IsolationLevel
from oncelog.storage.verification import SENTINEL

RU = IsolationLevel.READ_UNCOMMITTED
RC = IsolationLevel.READ_COMMITTED
PID = 9


def registry_on(tmp_path: Path) -> PartitionRegistry:
    registry = PartitionRegistry(tmp_path, BrokerConfig(), FakeClock())
    registry.load()
    registry.create_topic("t", 1)
    return registry


def append(partition: Partition, *, transactional: bool = False, seq: int = 0) -> int:
    buf = bytearray(encode_batch(
        [RecordInput(key=b"k", value=b"v")],
        producer_id=PID if transactional else -1, producer_epoch=0 if transactional else -1,
        base_sequence=seq if transactional else -1, transactional=transactional,
    ))
    # A transactional batch presents the verification guard taken before its coordinator
    # would be asked (KIP-890), as the produce handler does.
    guard = partition.maybe_start_transaction_verification(PID, 0) if transactional else SENTINEL
    headers = validate_batches(buf, max_batch_bytes=1 << 20)
    return partition.append(buf, headers, verification_guard=guard).base_offset


def test_read_is_bounded_by_isolation_and_lists_aborts(tmp_path: Path) -> None:
    partition = registry_on(tmp_path).get("t", 0)
    append(partition)
    append(partition, transactional=True)
    uncommitted = partition.read(0, 1 << 20, RU)
    committed = partition.read(0, 1 << 20, RC)
    assert (uncommitted.next_offset, uncommitted.aborted) == (2, None)
    assert (committed.next_offset, committed.last_stable_offset, committed.aborted) == (1, 1, [])
    partition.append_marker(PID, 0, 0, commit=False)
    after = partition.read(0, 1 << 20, RC)
    assert after.next_offset == 3 and after.high_watermark == 3
    assert [(a.producer_id, a.first_offset) for a in after.aborted or []] == [(PID, 1)]
    assert not partition.has_open_transaction(PID)


def test_read_committed_waiters_wake_only_when_the_lso_moves(tmp_path: Path) -> None:
    partition = registry_on(tmp_path).get("t", 0)

    async def body() -> None:
        loop = asyncio.get_running_loop()
        ru: asyncio.Future[None] = loop.create_future()
        rc: asyncio.Future[None] = loop.create_future()
        partition.add_waiter(ru, RU)
        partition.add_waiter(rc, RC)
        append(partition, transactional=True)  # HW moves, the LSO stays at 0
        assert ru.done() and not rc.done()
        assert partition.has_open_transaction(PID)
        partition.append_marker(PID, 0, 0, commit=True)  # the LSO moves
        assert rc.done()
        again: asyncio.Future[None] = loop.create_future()
        partition.add_waiter(again, RC)
        append(partition)  # no transaction open: HW and LSO move together
        assert again.done()

    asyncio.run(body())


def test_removed_waiter_is_not_woken(tmp_path: Path) -> None:
    partition = registry_on(tmp_path).get("t", 0)

    async def body() -> None:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        partition.add_waiter(fut, RC)
        partition.remove_waiter(fut)
        append(partition)
        assert not fut.done()

    asyncio.run(body())


def test_offline_partition_wakes_waiters_and_refuses(tmp_path: Path) -> None:
    registry = registry_on(tmp_path)
    partition = registry.get("t", 0)

    async def body() -> None:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        partition.add_waiter(fut, RC)
        partition.take_offline("append", OSError(5, "EIO"))
        assert fut.done()

    asyncio.run(body())
    with pytest.raises(KafkaError) as refused:
        append(partition)
    assert refused.value.code is ErrorCode.kafka_storage_error
    with pytest.raises(KafkaError) as lookup:
        registry.get("t", 0)
    assert lookup.value.code is ErrorCode.kafka_storage_error


def test_a_failing_roll_snapshot_job_is_logged_not_lost(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    registry = registry_on(tmp_path)

    def broken_job() -> None:
        raise RuntimeError("snapshot bug")

    with caplog.at_level("ERROR", logger="oncelog.broker.partitions"):
        registry._write_snapshot(broken_job)
        registry.close()  # waits for the writer thread
    assert "producer snapshot write failed unexpectedly" in caplog.text
    assert "snapshot bug" in caplog.text
