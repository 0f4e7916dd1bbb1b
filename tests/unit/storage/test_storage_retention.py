"""Retention by time and bytes, DeleteRecords, truncation."""

from __future__ import annotations

from pathlib import Path

import pytest

from oncelog.clock import FakeClock
from oncelog.errors import ErrorCode, KafkaError
from oncelog.storage.checkpoint import LogCheckpoint, read_checkpoint
from oncelog.storage.log import PartitionLog
from tests.unit.storage.log_helpers import (
    T0,
    all_offsets,
    append,
    batch,
    batch_ranges,
    check_every_offset,
    open_log,
)

HOUR = 3_600_000


def four_segments(directory: Path, clock: FakeClock, **config: object) -> PartitionLog:
    """Segments [0, 2, 4, 6] holding offsets 0..6, batch i stamped T0 + i hours."""
    one = len(batch(1))
    log = open_log(directory, clock, segment_bytes=2 * one, **config)
    for i in range(7):
        append(log, batch(1, timestamps=[T0 + i * HOUR]))
    assert log.segment_base_offsets() == [0, 2, 4, 6]
    return log


def files(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.suffix == ".log")


def test_retention_by_time(tmp_path: Path) -> None:
    clock = FakeClock(T0 + 10 * HOUR)
    log = four_segments(tmp_path / "t-0", clock, retention_ms=8 * HOUR)
    # segment 0's newest record is T0+1h: 9h old > 8h; segment 2's (T0+3h) is 7h old
    assert log.apply_retention() == 1
    assert log.segment_base_offsets() == [2, 4, 6]
    assert log.log_start_offset == 2
    assert files(tmp_path / "t-0")[0] == "00000000000000000002.log"
    assert not (tmp_path / "t-0" / "00000000000000000000.index").exists()
    assert log.apply_retention() == 0
    clock.advance(100 * HOUR)  # everything is old now, but the active segment stays
    assert log.apply_retention() == 2
    assert log.segment_base_offsets() == [6]
    assert log.log_start_offset == 6
    assert all_offsets(log) == [6]
    log.close()
    reopened = open_log(tmp_path / "t-0", clock)
    assert reopened.log_start_offset == 6
    reopened.close()


def test_retention_by_time_exact_boundary(tmp_path: Path) -> None:
    clock = FakeClock(T0 + 1 * HOUR + 5 * HOUR)
    log = four_segments(tmp_path / "t-0", clock, retention_ms=5 * HOUR)
    assert log.apply_retention() == 0  # exactly retention.ms old: kept
    clock.advance(1)
    assert log.apply_retention() == 1
    log.close()


def test_retention_by_bytes(tmp_path: Path) -> None:
    one = len(batch(1))
    clock = FakeClock(T0)
    log = four_segments(tmp_path / "t-0", clock, retention_bytes=3 * one + 1)
    # Kafka's rule: a segment goes only if the log stays >= retention.bytes without it.
    # Segments hold 2, 2, 2, 1 batches: dropping segment 0 leaves 5 (>= 3 + 1/one), dropping
    # segment 2 as well would leave 3 < 3 + 1/one.
    assert log.apply_retention() == 1
    assert log.segment_base_offsets() == [2, 4, 6]
    log.update_config(log.config.__class__(segment_bytes=2 * one, retention_bytes=3 * one))
    assert log.apply_retention() == 1
    assert log.segment_base_offsets() == [4, 6]
    assert log.size_bytes == 3 * one
    assert log.log_start_offset == 4
    log.update_config(log.config.__class__(segment_bytes=2 * one, retention_bytes=0))
    assert log.apply_retention() == 1  # never the active segment
    assert log.segment_base_offsets() == [6]
    log.close()


def test_unlimited_retention_and_compact_policy_keep_everything(tmp_path: Path) -> None:
    clock = FakeClock(T0 + 1000 * HOUR)
    log = four_segments(tmp_path / "a", clock, retention_ms=-1, retention_bytes=-1)
    assert log.apply_retention() == 0
    log.close()
    log = four_segments(
        tmp_path / "b", clock, retention_ms=1, retention_bytes=0, cleanup_policy="compact"
    )
    assert log.apply_retention() == 0
    log.close()


def test_delete_records_before(tmp_path: Path) -> None:
    clock = FakeClock(T0)
    log = four_segments(tmp_path / "t-0", clock)
    assert log.delete_records_before(3) == 3
    assert log.segment_base_offsets() == [2, 4, 6]  # segment 2 still holds offset 3
    assert log.log_start_offset == 3
    assert read_checkpoint(tmp_path / "t-0") == LogCheckpoint(0, 3)
    with pytest.raises(KafkaError) as info:
        log.read(2, 100)
    assert info.value.code == ErrorCode.offset_out_of_range
    assert batch_ranges(log.read(3, 1 << 20).data) == [(3, 3), (4, 4), (5, 5), (6, 6)]
    assert log.delete_records_before(1) == 3  # never backwards
    assert log.delete_records_before(7) == 7  # up to the end: only the active one is kept
    assert log.segment_base_offsets() == [6]
    assert log.read(7, 100).data == b""
    with pytest.raises(KafkaError) as info:
        log.delete_records_before(8)
    assert info.value.code == ErrorCode.offset_out_of_range
    assert append(log, batch(1)).base_offset == 7
    log.close()


def test_offset_for_timestamp_respects_log_start_offset(tmp_path: Path) -> None:
    clock = FakeClock(T0)
    log = four_segments(tmp_path / "t-0", clock)
    log.delete_records_before(3)
    assert log.offset_for_timestamp(T0) == (3, T0 + 3 * HOUR)
    log.close()


def test_truncate_within_the_active_segment(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", index_interval_bytes=1)
    for i in range(10):
        append(log, batch(2, timestamps=[T0 + i, T0 + 100 - i]))
    log.flush()
    log.truncate_to(12)
    assert log.log_end_offset == 12
    assert log.recovery_point == 12
    assert all_offsets(log) == list(range(12))
    # the largest timestamp is recomputed from what is left (batch 0: T0 + 100 at offset 1)
    assert log.max_timestamp_offset() == (1, T0 + 100)
    check_every_offset(log)
    assert append(log, batch(1)).base_offset == 12
    log.close()
    reopened = open_log(tmp_path / "t-0", index_interval_bytes=1)
    assert all_offsets(reopened) == list(range(13))
    check_every_offset(reopened)
    reopened.close()


def test_truncate_into_an_earlier_segment(tmp_path: Path) -> None:
    clock = FakeClock(T0)
    log = four_segments(tmp_path / "t-0", clock)
    log.truncate_to(3)
    assert log.segment_base_offsets() == [0, 2]
    assert files(tmp_path / "t-0") == ["00000000000000000000.log", "00000000000000000002.log"]
    assert not (tmp_path / "t-0" / "00000000000000000004.timeindex").exists()
    assert log.log_end_offset == 3
    assert log.max_timestamp_offset() == (2, T0 + 2 * HOUR)
    append(log, batch(1, timestamps=[T0]))  # segment 2 is active again and fills up
    append(log, batch(1, timestamps=[T0]))
    assert log.segment_base_offsets() == [0, 2, 4]
    assert all_offsets(log) == list(range(5))
    log.close()


def test_truncate_inside_a_batch_removes_the_whole_batch(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    append(log, batch(3), batch(3))
    log.truncate_to(4)
    assert log.log_end_offset == 3
    log.close()


def test_truncate_below_the_first_segment_restarts_the_log(tmp_path: Path) -> None:
    clock = FakeClock(T0)
    log = four_segments(tmp_path / "t-0", clock)
    log.delete_records_before(5)
    log.truncate_to(2)
    assert (log.log_start_offset, log.log_end_offset) == (2, 2)
    assert log.segment_base_offsets() == [2]
    assert files(tmp_path / "t-0") == ["00000000000000000002.log"]
    assert append(log, batch(1)).base_offset == 2
    log.close()


def test_truncate_at_or_past_the_end_is_a_no_op(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    append(log, batch(2))
    log.truncate_to(2)
    log.truncate_to(50)
    assert log.log_end_offset == 2
    log.close()


def test_delete_removes_the_directory(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    append(log, batch(2))
    log.delete()
    assert not (tmp_path / "t-0").exists()
