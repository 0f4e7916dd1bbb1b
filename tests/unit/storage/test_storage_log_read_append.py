"""PartitionLog append and read: offsets, LogAppendTime, rolls, limits, ranges."""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest

from oncelog.clock import FakeClock
from oncelog.config import LogConfig
from oncelog.errors import ErrorCode, KafkaError
from oncelog.records.batch import ATTR_TIMESTAMP_TYPE, TimestampType
from oncelog.records.codec import decode_batch, iter_records
from oncelog.storage.log import PartitionLog
from tests.unit.storage.log_helpers import (
    T0,
    all_offsets,
    append,
    batch,
    batch_ranges,
    check_every_offset,
    headers_of,
    open_log,
    record_offsets,
)


def test_new_log_is_empty(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    assert (log.log_start_offset, log.log_end_offset, log.recovery_point) == (0, 0, 0)
    assert log.size_bytes == 0
    assert log.read(0, 1000).data == b""
    assert (tmp_path / "t-0" / "00000000000000000000.log").exists()
    assert log.offset_for_timestamp(0) is None
    assert log.max_timestamp_offset() is None
    log.close()


def test_append_assigns_offsets_and_rewrites_headers(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    first = append(log, batch(3), batch(2))
    assert (first.base_offset, first.last_offset, first.log_append_time) == (0, 4, -1)
    assert [(h.base_offset, h.last_offset) for h in first.headers] == [(0, 2), (3, 4)]
    assert first.max_timestamp == T0 + 2
    second = append(log, batch(4))
    assert (second.base_offset, second.last_offset) == (5, 8)
    assert log.log_end_offset == 9
    data = log.read(0, 1 << 20).data
    assert batch_ranges(data) == [(0, 2), (3, 4), (5, 8)]
    assert record_offsets(data) == list(range(9))  # CRCs still valid (base offset not covered)
    log.close()


def test_append_uses_one_write_for_the_whole_buffer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = open_log(tmp_path / "t-0", index_interval_bytes=100)
    calls: list[int] = []
    real_pwrite = os.pwrite

    def counting_pwrite(fd: int, data: bytes, offset: int) -> int:
        calls.append(len(data))
        return real_pwrite(fd, data, offset)

    monkeypatch.setattr(os, "pwrite", counting_pwrite)
    buf = b"".join(batch(5) for _ in range(20))
    append(log, buf)
    assert calls == [len(buf)]
    log.close()


def test_log_append_time(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    result = append(log, batch(2), batch(1), log_append_time_ms=T0 + 5000)
    assert result.log_append_time == T0 + 5000
    assert result.max_timestamp == T0 + 5000
    for h in result.headers:
        assert h.timestamp_type is TimestampType.LOG_APPEND_TIME
        assert h.max_timestamp == T0 + 5000
    for header, records in iter_records(log.read(0, 1 << 20).data):  # verifies CRC32C
        assert header.attributes & ATTR_TIMESTAMP_TYPE
        assert {r.timestamp for r in records} == {T0 + 5000}
    log.close()


def test_topic_configured_log_append_time_uses_the_clock(tmp_path: Path) -> None:
    clock = FakeClock(T0 + 777)
    log = open_log(tmp_path / "t-0", clock, log_append_time=True)
    result = append(log, batch(1))
    assert result.log_append_time == T0 + 777
    log.close()


def test_append_rejects_headers_that_do_not_match_the_buffer(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    buf = bytearray(batch(2))
    with pytest.raises(ValueError):
        log.append(buf + b"\x00", headers_of(buf))
    with pytest.raises(ValueError):
        log.append(bytearray(), [])
    assert log.log_end_offset == 0
    log.close()


def test_roll_by_size(tmp_path: Path) -> None:
    one = batch(1, value_size=100)
    log = open_log(tmp_path / "t-0", segment_bytes=3 * len(one))
    for _ in range(7):
        append(log, one)
    # three batches fit exactly; the fourth rolls
    assert log.segment_base_offsets() == [0, 3, 6]
    assert log.log_end_offset == 7
    assert all_offsets(log) == list(range(7))
    log.close()


def test_batch_larger_than_segment_goes_into_an_empty_segment(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", segment_bytes=100)
    append(log, batch(1, value_size=500))
    append(log, batch(1, value_size=500))
    assert log.segment_base_offsets() == [0, 1]
    log.close()


def test_roll_by_time_uses_first_batch_timestamp(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", segment_ms=1000)
    append(log, batch(1, timestamps=[T0]))
    append(log, batch(1, timestamps=[T0 + 1000]))  # exactly segment.ms later: no roll
    assert log.segment_base_offsets() == [0]
    append(log, batch(1, timestamps=[T0 + 1001]))
    assert log.segment_base_offsets() == [0, 2]
    log.close()


def test_roll_by_time_without_timestamps_uses_creation_time(tmp_path: Path) -> None:
    clock = FakeClock(T0)
    log = open_log(tmp_path / "t-0", clock, segment_ms=1000)
    append(log, batch(1, timestamps=[-1]))
    clock.advance(1000)
    append(log, batch(1, timestamps=[-1]))
    assert log.segment_base_offsets() == [0]
    clock.advance(1)
    append(log, batch(1, timestamps=[-1]))
    assert log.segment_base_offsets() == [0, 2]
    log.close()


def test_roll_when_index_is_full(tmp_path: Path) -> None:
    # 16 bytes of index = 2 entries; an entry every batch (interval 1 byte).
    log = open_log(tmp_path / "t-0", index_interval_bytes=1, segment_index_bytes=16)
    for _ in range(8):
        append(log, batch(1))
    bases = log.segment_base_offsets()
    assert len(bases) > 1
    for base in bases:
        size = (tmp_path / "t-0" / f"{base:020d}.index").stat().st_size
        assert size <= 16
    check_every_offset(log)
    log.close()


def test_update_config_applies_to_next_append(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    append(log, batch(1))
    log.update_config(LogConfig(segment_bytes=10))
    assert log.config.segment_bytes == 10
    append(log, batch(1))
    assert log.segment_base_offsets() == [0, 1]
    log.close()


Multi = tuple[PartitionLog, int]


@pytest.fixture
def multi(tmp_path: Path) -> Iterator[Multi]:
    """30 batches of 3 records (offsets 0..89), ~4 segments, an index entry every ~2 batches."""
    one = len(batch(3))
    log = open_log(tmp_path / "t-0", segment_bytes=8 * one, index_interval_bytes=one + 1)
    for i in range(30):
        append(log, batch(3, timestamps=[T0 + 10 * i, T0 + 10 * i + 1, T0 + 10 * i + 2]))
    yield log, one
    log.close()


def test_reads_at_every_offset_across_segments(multi: Multi) -> None:
    log, _one = multi
    assert len(log.segment_base_offsets()) == 4
    check_every_offset(log)
    assert all_offsets(log) == list(range(90))


def test_read_starts_with_whole_batch_holding_offset(multi: Multi) -> None:
    log, one = multi
    result = log.read(31, 2 * one)
    assert batch_ranges(result.data) == [(30, 32), (33, 35)]
    assert (result.first_offset, result.next_offset) == (30, 36)


def test_read_max_bytes_cuts_at_batch_boundaries(multi: Multi) -> None:
    log, one = multi
    for max_bytes in range(one, 12 * one, 7):
        result = log.read(0, max_bytes)
        batches = max_bytes // one
        assert len(result.data) == batches * one
        expected_segments = result.data
        assert batch_ranges(expected_segments)[-1][1] == 3 * batches - 1
        assert result.next_offset == 3 * batches


def test_read_spans_segments(multi: Multi) -> None:
    log, one = multi
    bases = log.segment_base_offsets()
    result = log.read(bases[1] - 3, 3 * one)
    assert batch_ranges(result.data) == [
        (bases[1] - 3, bases[1] - 1), (bases[1], bases[1] + 2), (bases[1] + 3, bases[1] + 5)
    ]


def test_min_one_batch(multi: Multi) -> None:
    log, one = multi
    result = log.read(4, 10)
    assert batch_ranges(result.data) == [(3, 5)]
    assert result.next_offset == 6
    empty = log.read(4, 10, min_one_batch=False)
    assert (empty.data, empty.first_offset, empty.next_offset) == (b"", 4, 4)
    # min_one_batch only forces the first batch: the second still respects the limit
    assert batch_ranges(log.read(4, one + 10).data) == [(3, 5)]


@pytest.mark.parametrize(
    ("max_offset", "expected_last"),
    [(12, 11), (13, 14), (14, 14), (15, 14), (40, 41), (90, 89), (1000, 89)],
)
def test_max_offset_bounds_the_read(multi: Multi, max_offset: int, expected_last: int) -> None:
    log, _one = multi
    result = log.read(0, 1 << 20, max_offset=max_offset)
    ranges = batch_ranges(result.data)
    assert ranges[-1][1] == expected_last
    assert all(base < max_offset for base, _last in ranges)
    assert result.next_offset == expected_last + 1


def test_max_offset_at_or_below_start_reads_nothing(multi: Multi) -> None:
    log, _one = multi
    assert log.read(12, 1 << 20, max_offset=12).data == b""
    # a read from max_offset or above returns nothing, even from inside a batch
    assert log.read(13, 1 << 20, max_offset=13).data == b""
    assert log.read(15, 1 << 20, max_offset=14).data == b""
    # from below it, a batch straddling max_offset (base below it) is returned whole
    assert batch_ranges(log.read(12, 1 << 20, max_offset=13).data) == [(12, 14)]


def test_out_of_range(multi: Multi) -> None:
    log, _one = multi
    with pytest.raises(KafkaError) as info:
        log.read(91, 100)
    assert info.value.code == ErrorCode.offset_out_of_range
    with pytest.raises(KafkaError):
        log.read(-1, 100)
    end = log.read(90, 100)
    assert (end.data, end.first_offset, end.next_offset, end.log_end_offset) == (b"", 90, 90, 90)
    log.delete_records_before(20)
    with pytest.raises(KafkaError) as info:
        log.read(19, 100)
    assert info.value.code == ErrorCode.offset_out_of_range
    # 20 is inside batch 18..20: the whole batch comes back, starting below the log start
    result = log.read(20, 1)
    assert result.first_offset == 18
    assert result.log_start_offset == 20


def test_index_files_match_the_log(multi: Multi) -> None:
    log, _one = multi
    directory = log.directory
    for base in log.segment_base_offsets():
        index = (directory / f"{base:020d}.index").read_bytes()
        data = (directory / f"{base:020d}.log").read_bytes()
        assert index, "every segment of 8 batches has index entries"
        for rel, pos in struct.iter_unpack(">ii", index):
            header, _records = decode_batch(data, pos)
            assert header.last_offset == base + rel
        times = (directory / f"{base:020d}.timeindex").read_bytes()
        entries = list(struct.iter_unpack(">qi", times))
        assert entries == sorted(entries)
        for ts, rel in entries:
            assert ts == T0 + 10 * ((base + rel) // 3) + 2


def test_batch_headers_iterates_from_an_offset(multi: Multi) -> None:
    log, _one = multi
    headers = list(log.batch_headers(40))
    assert [h.base_offset for h in headers] == list(range(39, 90, 3))


def test_closed_log_refuses_operations(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    log.close()
    log.close()  # idempotent
    with pytest.raises(KafkaError) as info:
        append(log, batch(1))
    assert info.value.code == ErrorCode.kafka_storage_error


def test_failed_write_changes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = open_log(tmp_path / "t-0")
    append(log, batch(2))
    size = log.size_bytes
    real_pwrite = os.pwrite

    def disk_full(fd: int, data: bytes, offset: int) -> int:
        real_pwrite(fd, memoryview(data)[:10], offset)  # a partial write, then ENOSPC
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "pwrite", disk_full)
    with pytest.raises(KafkaError) as info:
        append(log, batch(3))
    assert info.value.code == ErrorCode.kafka_storage_error
    monkeypatch.undo()
    assert (log.log_end_offset, log.size_bytes) == (2, size)
    assert (tmp_path / "t-0" / "00000000000000000000.log").stat().st_size == size
    assert append(log, batch(1)).base_offset == 2
    assert all_offsets(log) == [0, 1, 2]
    log.close()


def test_failed_index_write_does_not_fail_the_append(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = open_log(tmp_path / "t-0", index_interval_bytes=1)
    append(log, batch(1), batch(1))
    real_write = os.write

    def broken(fd: int, data: bytes) -> int:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "write", broken)
    result = append(log, batch(1), batch(1))  # the log write (pwrite) works
    assert result.base_offset == 2
    monkeypatch.setattr(os, "write", real_write)
    append(log, batch(1))  # pending entries are written now
    check_every_offset(log)
    log.close()
    index = (tmp_path / "t-0" / "00000000000000000000.index").read_bytes()
    assert [rel for rel, _pos in struct.iter_unpack(">ii", index)] == [1, 2, 3, 4]
