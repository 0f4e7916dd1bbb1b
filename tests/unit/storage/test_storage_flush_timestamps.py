"""Flush policy (flush.messages, flush.ms, rolled segments) and timestamp lookups."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from oncelog.clock import FakeClock
from oncelog.storage.checkpoint import CLEAN_SHUTDOWN_FILE, LogCheckpoint, read_checkpoint
from oncelog.storage.log import PartitionLog
from tests.unit.storage.log_helpers import T0, append, batch, crash_copy, open_log


@pytest.fixture
def fsyncs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    real = os.fsync

    def counting(fd: int) -> None:
        calls.append(fd)
        real(fd)

    monkeypatch.setattr(os, "fsync", counting)
    return calls


def test_default_policy_never_fsyncs_on_append(tmp_path: Path, fsyncs: list[int]) -> None:
    clock = FakeClock(T0)
    log = open_log(tmp_path / "t-0", clock)
    fsyncs.clear()
    for _ in range(50):
        append(log, batch(10))
    clock.advance(10**9)
    assert not log.maybe_flush(clock.now_ms())
    assert fsyncs == []
    assert log.recovery_point == 0
    log.close()
    assert fsyncs  # close flushes
    assert (tmp_path / "t-0" / CLEAN_SHUTDOWN_FILE).exists()


def test_flush_messages(tmp_path: Path, fsyncs: list[int]) -> None:
    log = open_log(tmp_path / "t-0", flush_messages=5)
    append(log, batch(3))
    assert log.recovery_point == 0
    append(log, batch(1))
    assert log.recovery_point == 0
    fsyncs.clear()
    append(log, batch(1))
    assert log.recovery_point == 5
    assert fsyncs
    assert read_checkpoint(tmp_path / "t-0") == LogCheckpoint(5, 0)
    log.close()


def test_flush_ms_via_maybe_flush(tmp_path: Path) -> None:
    clock = FakeClock(T0)
    log = open_log(tmp_path / "t-0", clock, flush_ms=1000)
    assert not log.maybe_flush(clock.now_ms())  # nothing to flush
    append(log, batch(2))
    clock.advance(999)
    assert not log.maybe_flush(clock.now_ms())
    assert log.recovery_point == 0
    clock.advance(1)
    assert log.maybe_flush(clock.now_ms())
    assert log.recovery_point == 2
    append(log, batch(2))
    assert not log.maybe_flush(clock.now_ms())  # the interval restarts at the flush
    log.close()


def test_maybe_flush_flushes_rolled_segments(tmp_path: Path, fsyncs: list[int]) -> None:
    one = len(batch(1))
    clock = FakeClock(T0)
    log = open_log(tmp_path / "t-0", clock, segment_bytes=2 * one)
    for _ in range(5):
        append(log, batch(1))
    assert log.segment_base_offsets() == [0, 2, 4]
    fsyncs.clear()
    assert log.maybe_flush(clock.now_ms())
    assert log.recovery_point == 4  # the active segment is left to the flush policy
    assert fsyncs
    assert read_checkpoint(tmp_path / "t-0") == LogCheckpoint(4, 0)
    assert not log.maybe_flush(clock.now_ms())
    log.close()


def test_unclean_restart_keeps_unflushed_but_written_data(tmp_path: Path) -> None:
    """kill -9 loses nothing append returned: the page cache outlives the process."""
    log = open_log(tmp_path / "t-0")
    for _ in range(10):
        append(log, batch(3))
    assert log.recovery_point == 0
    crashed = crash_copy(log, tmp_path / "crash")
    log.close()
    reopened = open_log(crashed)
    assert reopened.log_end_offset == 30
    reopened.close()


# ---------------------------------------------------------------- timestamps


def stamped(tmp_path: Path, timestamps: list[list[int]], **config: Any) -> PartitionLog:
    log = open_log(tmp_path / "t-0", **config)
    for ts in timestamps:
        append(log, batch(len(ts), timestamps=ts))
    return log


NON_MONOTONIC = [[10, 30, 20], [25, 5], [40, 35, 50], [45], [50, 60, 55]]
# offsets:        0   1   2    3   4    5   6   7    8    9   10  11


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        (0, (0, 10)),
        (10, (0, 10)),
        (11, (1, 30)),
        (30, (1, 30)),
        (31, (5, 40)),
        (36, (5, 40)),
        (41, (7, 50)),
        (50, (7, 50)),
        (51, (10, 60)),
        (60, (10, 60)),
        (61, None),
    ],
)
@pytest.mark.parametrize("segment_bytes", [1 << 30, 200])
def test_offset_for_timestamp(
    tmp_path: Path, target: int, expected: tuple[int, int] | None, segment_bytes: int
) -> None:
    log = stamped(tmp_path, NON_MONOTONIC, segment_bytes=segment_bytes, index_interval_bytes=1)
    assert log.offset_for_timestamp(target) == expected
    log.close()
    reopened = open_log(tmp_path / "t-0", segment_bytes=segment_bytes, index_interval_bytes=1)
    assert reopened.offset_for_timestamp(target) == expected
    reopened.close()


def test_offset_for_timestamp_with_many_batches(tmp_path: Path) -> None:
    """The time index skips most of the segment; the answer is still exact."""
    log = stamped(
        tmp_path, [[1000 + 2 * i, 1001 + 2 * i] for i in range(300)], index_interval_bytes=500
    )
    for target in (999, 1000, 1001, 1002, 1357, 1358, 1598, 1599):
        expected = (target - 1000 if target >= 1000 else 0, max(target, 1000))
        assert log.offset_for_timestamp(target) == expected
    assert log.offset_for_timestamp(1600) is None
    log.close()


def test_offset_for_timestamp_with_log_append_time(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    append(log, batch(3, timestamps=[1, 2, 3]), log_append_time_ms=T0)
    append(log, batch(2, timestamps=[1, 2]), log_append_time_ms=T0 + 10)
    assert log.offset_for_timestamp(5) == (0, T0)
    assert log.offset_for_timestamp(T0 + 1) == (3, T0 + 10)
    assert log.max_timestamp_offset() == (3, T0 + 10)
    log.close()


@pytest.mark.parametrize("segment_bytes", [1 << 30, 200])
def test_max_timestamp_offset(tmp_path: Path, segment_bytes: int) -> None:
    log = stamped(tmp_path, NON_MONOTONIC, segment_bytes=segment_bytes)
    assert log.max_timestamp_offset() == (10, 60)
    log.close()
    reopened = open_log(tmp_path / "t-0", segment_bytes=segment_bytes)
    assert reopened.max_timestamp_offset() == (10, 60)
    # after an unclean stop the value is rebuilt from the scan
    crashed = crash_copy(reopened, tmp_path / "crash")
    reopened.close()
    again = open_log(crashed, segment_bytes=segment_bytes)
    assert again.max_timestamp_offset() == (10, 60)
    again.close()
    shutil.rmtree(crashed)


def test_max_timestamp_ties_pick_the_first_record(tmp_path: Path) -> None:
    log = stamped(tmp_path, [[5, 9, 9], [9, 1], [3]])
    assert log.max_timestamp_offset() == (1, 9)
    log.close()


def test_no_timestamps(tmp_path: Path) -> None:
    log = stamped(tmp_path, [[-1, -1]])
    assert log.max_timestamp_offset() is None
    assert log.offset_for_timestamp(0) is None
    log.close()
