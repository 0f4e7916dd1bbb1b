"""The leader's side of replication over a real partition (no network): follower fetches
move the high watermark, acks=all waits for it (or times out, or reports the ISR falling
below min.insync.replicas), NOT_ENOUGH_REPLICAS before the append, non-replicas refused."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from oncelog.broker.cluster.replica_manager import ReplicaManager
from oncelog.broker.partition import Partition
from oncelog.clock import FakeClock
from oncelog.cluster.metadata import (
    BrokerRegistration,
    PartitionState,
    VersionedPartitionState,
)
from oncelog.config import LogConfig
from oncelog.errors import ErrorCode, KafkaError
from oncelog.records.codec import RecordInput, encode_batch
from oncelog.records.validate import validate_batches
from oncelog.storage.unified_log import UnifiedLog

EPOCH = 3


def _leader(tmp_path: Path, isr: tuple[int, ...]) -> tuple[ReplicaManager, Partition]:
    clock = FakeClock()
    clock.advance(3_600_000)  # a monotonic clock well past 0, which means "never caught up"
    log = UnifiedLog.open(tmp_path / "t-0", LogConfig(min_insync_replicas=2), clock,
                          auto_high_watermark=False, leader_epoch=EPOCH)
    partition = Partition("t", 0, log)
    manager = ReplicaManager(local_id=0, clock=clock, store=None,
                             replica_lag_time_max_ms=30_000)
    state = VersionedPartitionState(PartitionState(0, EPOCH, isr), version=1)
    manager.become_leader(partition, state, (0, 1, 2))
    return manager, partition


def _append(partition: Partition, n: int = 3) -> int:
    buf = bytearray(encode_batch([RecordInput(value=b"v")] * n))
    return partition.append(buf, validate_batches(buf, max_batch_bytes=1 << 20)).last_offset + 1


def test_acks_all_waits_for_the_isr_to_fetch(tmp_path: Path) -> None:
    manager, partition = _leader(tmp_path, (0, 1))

    async def scenario() -> ErrorCode:
        manager.check_min_isr(partition, -1)
        end = _append(partition)
        waiter = asyncio.create_task(manager.wait_for_acks(partition, end, 5_000))
        await asyncio.sleep(0)
        assert not waiter.done() and partition.high_watermark == 0
        manager.on_follower_fetch(partition, 1, end, 0)
        return await waiter

    assert asyncio.run(scenario()) is ErrorCode.none
    assert partition.high_watermark == 3


def test_every_acks_all_waiter_is_woken_after_a_wake_that_did_not_satisfy_them(
        tmp_path: Path) -> None:
    """Two waiters woken by a high watermark short of their offset wait again; the next
    advance wakes both. Before, each woken waiter replaced the shared event, so the first
    waited on an event nobody set any more and answered only at its deadline (a
    coordinator's AddPartitionsToTxn held for the transaction timeout)."""
    manager, partition = _leader(tmp_path, (0, 1))

    async def scenario() -> list[ErrorCode]:
        end = _append(partition)
        waiters = [asyncio.create_task(manager.wait_for_acks(partition, end, 60_000))
                   for _ in range(2)]
        await asyncio.sleep(0)
        manager.on_follower_fetch(partition, 1, 1, 0)  # the HW moves, not far enough
        for _ in range(3):
            await asyncio.sleep(0)  # both re-check and wait again
        assert not any(w.done() for w in waiters)
        manager.on_follower_fetch(partition, 1, end, 0)
        for _ in range(3):
            await asyncio.sleep(0)  # woken waiters answer at once, not at their deadline
        assert all(w.done() for w in waiters)
        return [w.result() for w in waiters]

    assert asyncio.run(scenario()) == [ErrorCode.none, ErrorCode.none]


def test_acks_all_times_out_without_the_follower(tmp_path: Path) -> None:
    manager, partition = _leader(tmp_path, (0, 1))

    async def scenario() -> ErrorCode:
        end = _append(partition)
        manager.on_follower_fetch(partition, 1, 1, 0)  # behind: the HW stays below the end
        return await manager.wait_for_acks(partition, end, 50)

    assert asyncio.run(scenario()) is ErrorCode.request_timed_out
    assert partition.high_watermark == 1


def test_below_min_insync_replicas_is_refused_before_the_append(tmp_path: Path) -> None:
    manager, partition = _leader(tmp_path, (0,))
    with pytest.raises(KafkaError) as refused:
        manager.check_min_isr(partition, -1)
    assert refused.value.code == ErrorCode.not_enough_replicas
    manager.check_min_isr(partition, 1)  # acks=1 is not concerned


def test_isr_shrinking_below_min_after_the_append(tmp_path: Path) -> None:
    manager, partition = _leader(tmp_path, (0, 1))

    async def scenario() -> ErrorCode:
        end = _append(partition)
        waiter = asyncio.create_task(manager.wait_for_acks(partition, end, 5_000))
        await asyncio.sleep(0)
        manager.on_follower_fetch(partition, 1, end, 0)
        manager.on_partition_state(
            "t", 0, VersionedPartitionState(PartitionState(0, EPOCH, (0,)), version=2))
        return await waiter

    # Checked when the produce completes (Kafka's checkEnoughReplicasReachOffset): the HW
    # reached its end, but the ISR is below min.insync.replicas by then; a produce appended
    # after the shrink is refused before the append.
    assert asyncio.run(scenario()) is ErrorCode.not_enough_replicas_after_append
    with pytest.raises(KafkaError):
        manager.check_min_isr(partition, -1)


def test_fetch_from_a_broker_without_a_replica_is_refused(tmp_path: Path) -> None:
    manager, partition = _leader(tmp_path, (0, 1))
    with pytest.raises(KafkaError) as refused:
        manager.on_follower_fetch(partition, 9, 0, 0)
    assert refused.value.code == ErrorCode.not_leader_or_follower


def test_a_follower_fetch_carries_its_registration_and_a_restart_starts_it_over(
        tmp_path: Path) -> None:
    """KIP-903 on Fetch v12: a fetch is taken to carry the broker epoch of the follower's
    registration as the leader sees it. A fetch made before the registration is known does
    not make the follower ISR-eligible; a newer registration (a restart, maybe with an empty
    disk) forgets its old log end, so it rejoins only after fetching in its new life."""
    manager, partition = _leader(tmp_path, (0, 1))
    end = _append(partition)
    registered = {n: BrokerRegistration(n, "h", 9000 + n, epoch=100 + n) for n in (0, 1)}
    manager.on_brokers(registered)
    manager.on_follower_fetch(partition, 2, end, 0)  # broker 2 not registered yet
    tracker = manager.tracker("t", 0)
    assert tracker is not None and tracker.isr == {0, 1} and tracker.pending_isr is None

    manager.on_brokers({**registered, 2: BrokerRegistration(2, "h", 9002, epoch=102)})
    manager.on_follower_fetch(partition, 2, end, 0)
    assert tracker.replica_state(2).broker_epoch == 102
    assert tracker.pending_isr == (0, 1, 2)  # caught up in its current life: proposed
    tracker.on_isr_rejected()

    manager.on_brokers({**registered, 2: BrokerRegistration(2, "h", 9002, epoch=150)})
    assert tracker.replica_state(2).log_end_offset == -1  # what it had is forgotten
    manager.on_follower_fetch(partition, 1, end, 0)  # another follower's fetch
    assert tracker.pending_isr is None, "re-admitted on its previous life's log end"
    manager.on_follower_fetch(partition, 2, end, 0)
    assert tracker.pending_isr == (0, 1, 2)
