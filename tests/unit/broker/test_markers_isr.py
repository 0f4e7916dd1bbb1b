"""In a cluster a coordinator's marker counts only once the partition's ISR has it (Kafka's
handleWriteTxnMarkersRequest appends with requiredAcks=-1): the writer answers after the
high watermark passed the marker, the acks=all error otherwise (the marker channel retries
it), and a ``__consumer_offsets`` marker materialises the transaction's offsets only once
acknowledged."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, cast

from oncelog.broker.cluster.replica_manager import ReplicaManager
from oncelog.broker.markers import LocalMarkerWriter
from oncelog.broker.partitions import Partition, PartitionRegistry
from oncelog.clock import FakeClock
from oncelog.cluster.metadata import PartitionState, VersionedPartitionState
from oncelog.config import LogConfig
from oncelog.coordinator.group.coordinator import GroupCoordinator
from oncelog.coordinator.transaction.marker_channel import MarkerOutcome, classify_marker_error
from oncelog.errors import ErrorCode
from oncelog.internal_topics import OFFSETS_TOPIC
from oncelog.records.codec import RecordInput, encode_batch
from oncelog.records.validate import validate_batches
from oncelog.storage.unified_log import UnifiedLog

PID, EPOCH, LEADER_EPOCH = 42, 0, 3
TP = (OFFSETS_TOPIC, 0)


class OnePartition:
    def __init__(self, partition: Partition) -> None:
        self.partition = partition

    def find(self, topic: str, index: int) -> Partition | None:
        return self.partition if (topic, index) == TP else None


class Groups:
    """Records the group coordinator's marker callbacks."""

    def __init__(self) -> None:
        self.markers: list[tuple[int, int, bool]] = []

    def on_txn_marker(self, partition: int, producer_id: int, commit: bool, epoch: int) -> None:
        self.markers.append((partition, producer_id, commit))


def _setup(tmp_path: Path) -> tuple[ReplicaManager, Partition, LocalMarkerWriter, Groups]:
    clock = FakeClock()
    clock.advance(3_600_000)
    log = UnifiedLog.open(tmp_path / f"{OFFSETS_TOPIC}-0", LogConfig(min_insync_replicas=2),
                          clock, auto_high_watermark=False, leader_epoch=LEADER_EPOCH)
    partition = Partition(*TP, log)
    manager = ReplicaManager(local_id=0, clock=clock, store=None,
                             replica_lag_time_max_ms=30_000)
    manager.become_leader(
        partition, VersionedPartitionState(PartitionState(0, LEADER_EPOCH, (0, 1)), 1),
        (0, 1, 2))
    data = bytearray(encode_batch([RecordInput(key=b"k", value=b"v")], producer_id=PID,
                                  producer_epoch=EPOCH, base_sequence=0, transactional=True))
    partition.append(data, validate_batches(data, max_batch_bytes=1 << 20))
    manager.on_follower_fetch(partition, 1, partition.log_end_offset, 0)  # the data is in
    groups = Groups()
    writer = LocalMarkerWriter(cast(PartitionRegistry, OnePartition(partition)),
                               cast(GroupCoordinator, cast(Any, groups)), manager,
                               acks_timeout_ms=5_000)
    return manager, partition, writer, groups


def test_marker_answered_and_offsets_materialised_only_once_the_isr_has_it(
    tmp_path: Path,
) -> None:
    manager, partition, writer, groups = _setup(tmp_path)

    async def scenario() -> dict[tuple[str, int], ErrorCode]:
        task = asyncio.create_task(writer.write_markers(PID, EPOCH, LEADER_EPOCH, True, [TP]))
        for _ in range(5):
            await asyncio.sleep(0)
        assert not task.done()  # appended, not yet acknowledged by the follower
        assert partition.log_end_offset == 2 and partition.high_watermark == 1
        assert groups.markers == []  # the pending offsets stay pending meanwhile
        manager.on_follower_fetch(partition, 1, partition.log_end_offset, 0)
        return await task

    assert asyncio.run(scenario()) == {TP: ErrorCode.none}
    assert groups.markers == [(0, PID, True)]
    assert partition.high_watermark == 2


def test_isr_below_min_after_the_marker_is_retried_and_not_materialised(
    tmp_path: Path,
) -> None:
    manager, partition, writer, groups = _setup(tmp_path)
    writer.acks_timeout_ms = 200

    async def scenario() -> ErrorCode:
        task = asyncio.create_task(writer.write_markers(PID, EPOCH, LEADER_EPOCH, True, [TP]))
        for _ in range(5):
            await asyncio.sleep(0)
        manager.on_partition_state(
            *TP, VersionedPartitionState(PartitionState(0, LEADER_EPOCH, (0,)), 2))
        return (await task)[TP]

    # Below min.insync.replicas the high watermark stays behind the marker until the wait
    # gives up (the ISR test of ``oncelog.cluster.isr``).
    code = asyncio.run(scenario())
    assert code is ErrorCode.request_timed_out
    assert classify_marker_error(code) is MarkerOutcome.RETRY
    assert groups.markers == []
    # The retry is refused before any append while the ISR stays below min.insync.replicas.
    end = partition.log_end_offset
    retried = asyncio.run(writer.write_markers(PID, EPOCH, LEADER_EPOCH, True, [TP]))
    assert retried == {TP: ErrorCode.not_enough_replicas}
    assert partition.log_end_offset == end and groups.markers == []


def test_marker_not_acknowledged_in_time_is_retried(tmp_path: Path) -> None:
    _, _, writer, groups = _setup(tmp_path)
    writer.acks_timeout_ms = 50
    answers = asyncio.run(writer.write_markers(PID, EPOCH, LEADER_EPOCH, False, [TP]))
    assert answers == {TP: ErrorCode.request_timed_out}
    assert classify_marker_error(answers[TP]) is MarkerOutcome.RETRY
    assert groups.markers == []


def test_lso_does_not_pass_a_transaction_until_its_marker_is_below_the_hw(
    tmp_path: Path,
) -> None:
    """Kafka's unreplicatedTxns: the leader completed the transaction when it appended the
    marker, but read_committed readers see it only once the ISR has the marker."""
    manager, partition, writer, _ = _setup(tmp_path)
    assert partition.high_watermark == 1 and partition.last_stable_offset == 0

    async def scenario() -> dict[tuple[str, int], ErrorCode]:
        task = asyncio.create_task(writer.write_markers(PID, EPOCH, LEADER_EPOCH, True, [TP]))
        for _ in range(5):
            await asyncio.sleep(0)
        assert not partition.has_open_transaction(PID)  # complete on the leader...
        assert partition.last_stable_offset == 0  # ...but not readable committed yet
        manager.on_follower_fetch(partition, 1, partition.log_end_offset, 0)
        return await task

    assert asyncio.run(scenario()) == {TP: ErrorCode.none}
    assert partition.last_stable_offset == partition.high_watermark == 2
