"""Engine offsets a reader is told: the LSO never below the log start, and offsets by
timestamp bounded by the last fetchable offset (Kafka's Partition.fetchOffsetForTimestamp)."""

from __future__ import annotations

from oncelog.clock import FakeClock
from oncelog.records.codec import RecordInput, encode_batch
from oncelog.records.validate import validate_batches
from oncelog.storage.engine import IsolationLevel
from oncelog.storage.unified_log import UnifiedLog
from tests.unit.storage.conftest import EngineFactory

T0 = FakeClock().now_ms()
COMMITTED = IsolationLevel.READ_COMMITTED


def append(log: UnifiedLog, ts: int, *, pid: int = -1, seq: int = -1, txn: bool = False) -> int:
    data = bytearray(
        encode_batch(
            [RecordInput(value=b"x" * 50, timestamp=ts)],
            producer_id=pid,
            producer_epoch=0 if pid >= 0 else -1,
            base_sequence=seq,
            transactional=txn,
        )
    )
    return log.append(data, validate_batches(data, max_batch_bytes=10**7)).base_offset


def test_lso_is_never_below_the_log_start(make_engine: EngineFactory) -> None:
    log = make_engine(segment_bytes=200)
    assert append(log, T0, pid=5, seq=0, txn=True) == 0  # holds the LSO at 0
    for i in range(6):
        append(log, T0 + i)
    assert log.log.segment_count > 2
    log.delete_records_before(3)  # the segment with the transaction's start goes
    assert log.log_start_offset > 0
    assert log.first_unstable_offset == 0
    assert log.last_stable_offset == log.log_start_offset
    assert log.last_fetchable_offset(COMMITTED) == log.log_start_offset
    log.read(log.last_stable_offset, 1 << 20)  # in range: no OFFSET_OUT_OF_RANGE
    log.append_marker(5, 0, 0, commit=True)
    assert log.last_stable_offset == log.log_end_offset


def test_offset_for_timestamp_under_read_committed_stops_below_the_lso(
    engine: UnifiedLog,
) -> None:
    log = engine
    append(log, T0)  # 0
    append(log, T0 + 10, pid=5, seq=0, txn=True)  # 1, open: the LSO is 1
    append(log, T0 + 20)  # 2
    assert log.last_stable_offset == 1
    assert log.offset_for_timestamp(T0) == (0, T0)
    assert log.offset_for_timestamp(T0, COMMITTED) == (0, T0)
    assert log.offset_for_timestamp(T0 + 5) == (1, T0 + 10)
    assert log.offset_for_timestamp(T0 + 5, COMMITTED) is None
    assert log.offset_for_timestamp(T0 + 15, COMMITTED) is None
    assert log.max_timestamp_offset() == (2, T0 + 20)
    assert log.max_timestamp_offset(COMMITTED) is None
    log.append_marker(5, 0, 0, commit=True)
    assert log.offset_for_timestamp(T0 + 5, COMMITTED) == (1, T0 + 10)
    assert log.max_timestamp_offset(COMMITTED) == (2, T0 + 20)
