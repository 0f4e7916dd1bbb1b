"""The broker's marker writer: what a partition's refusal of a coordinator marker answers."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, cast

from oncelog.broker.markers import LocalMarkerWriter
from oncelog.broker.partitions import Partition, PartitionRegistry
from oncelog.clock import FakeClock
from oncelog.config import LogConfig
from oncelog.coordinator.group.coordinator import GroupCoordinator
from oncelog.coordinator.transaction.marker_channel import MarkerOutcome, classify_marker_error
from oncelog.errors import ErrorCode
from oncelog.records.codec import RecordInput, encode_batch
from oncelog.records.validate import validate_batches
from oncelog.storage.unified_log import UnifiedLog

PID = 42


class OnePartition:
    def __init__(self, partition: Partition) -> None:
        self.partition = partition

    def find(self, topic: str, index: int) -> Partition | None:
        return self.partition if (topic, index) == ("t", 0) else None


def partition_with(tmp_path: Path, epoch: int, transactional: bool) -> Partition:
    log = UnifiedLog.open(tmp_path / "t-0", LogConfig(), FakeClock())
    data = bytearray(
        encode_batch(
            [RecordInput(key=b"k", value=b"v")],
            producer_id=PID, producer_epoch=epoch, base_sequence=0, transactional=transactional,
        )
    )
    log.append(data, validate_batches(data, max_batch_bytes=10**6))
    return Partition("t", 0, log)


def write(partition: Partition, epoch: int) -> ErrorCode:
    registry = cast(PartitionRegistry, OnePartition(partition))
    writer = LocalMarkerWriter(registry, cast(GroupCoordinator, cast(Any, None)))
    answers = asyncio.run(writer.write_markers(PID, epoch, 0, True, [("t", 0)]))
    return answers[("t", 0)]


def test_refused_marker_with_the_transaction_still_open_is_not_done(tmp_path: Path) -> None:
    partition = partition_with(tmp_path, epoch=3, transactional=True)
    code = write(partition, epoch=2)
    assert code is ErrorCode.invalid_producer_epoch
    assert classify_marker_error(code) is MarkerOutcome.RETRY
    assert partition.last_stable_offset == 0  # still open: it must be marked later


def test_refused_marker_with_nothing_open_is_done(tmp_path: Path) -> None:
    partition = partition_with(tmp_path, epoch=3, transactional=False)
    assert write(partition, epoch=2) is ErrorCode.none
    assert partition.log.log_end_offset == 1  # nothing appended


def test_epoch_refusals_are_retried_by_the_coordinator() -> None:
    for code in (ErrorCode.invalid_producer_epoch, ErrorCode.producer_fenced):
        assert classify_marker_error(code) is MarkerOutcome.RETRY
