"""Retention and DeleteRecords (every engine): whole segments go, oldest first and never the
active one, by retention.bytes, retention.ms and the log start; the memory engine rolls and
deletes where the file engine does."""

from __future__ import annotations

import pytest

from oncelog.clock import FakeClock
from oncelog.errors import ErrorCode, KafkaError
from oncelog.records.codec import RecordInput, encode_batch
from oncelog.records.validate import validate_batches
from oncelog.storage.unified_log import UnifiedLog
from tests.unit.storage.conftest import EngineFactory

T0 = FakeClock().now_ms()
SEGMENT_BYTES = 300


def fill(log: UnifiedLog, count: int, ts: int = T0) -> None:
    for _ in range(count):
        buf = bytearray(encode_batch([RecordInput(value=b"x" * 40, timestamp=ts)]))
        log.append(buf, validate_batches(buf, max_batch_bytes=10**7))


def test_retention_bytes_deletes_whole_old_segments(make_engine: EngineFactory) -> None:
    log = make_engine(segment_bytes=SEGMENT_BYTES, retention_bytes=500)
    fill(log, 12)  # 108 bytes a batch: 2 per segment, 6 segments
    assert (log.log.segment_count, log.size_bytes) == (6, 1296)
    assert log.apply_retention() == 3
    assert (log.log_start_offset, log.log_end_offset, log.size_bytes) == (6, 12, 648)
    assert log.read(6, 1 << 20).first_offset == 6
    with pytest.raises(KafkaError) as err:
        log.read(5, 1 << 20)
    assert err.value.code == ErrorCode.offset_out_of_range


def test_retention_ms_keeps_the_active_segment(make_engine: EngineFactory) -> None:
    clock = FakeClock()
    log = make_engine(clock, segment_bytes=SEGMENT_BYTES, retention_ms=1000)
    fill(log, 6, ts=T0)
    clock.advance(5000)
    assert log.apply_retention() == 2
    assert (log.log_start_offset, log.log.segment_count) == (4, 1)


def test_delete_records_moves_the_start_and_drops_segments_below_it(
    make_engine: EngineFactory,
) -> None:
    log = make_engine(segment_bytes=SEGMENT_BYTES)
    fill(log, 6)
    assert log.delete_records_before(3) == 3
    assert (log.log.segment_count, log.log_start_offset, log.high_watermark) == (2, 3, 6)
    assert log.read(3, 1 << 20).first_offset == 3
    assert log.delete_records_before(1) == 3
    with pytest.raises(KafkaError):
        log.delete_records_before(7)
