"""Engine reads by isolation level (every engine): read_uncommitted stops at the high
watermark, read_committed at the LSO with the aborted transactions of the returned range;
the high watermark is the engine's own value, held back when the caller owns it."""

from __future__ import annotations

from oncelog.clock import FakeClock
from oncelog.records.codec import RecordInput, encode_batch, iter_records
from oncelog.records.validate import validate_batches
from oncelog.storage.engine import IsolationLevel, PartitionEngine
from oncelog.storage.unified_log import UnifiedLog
from tests.unit.storage.conftest import EngineFactory

T0 = FakeClock().now_ms()
COMMITTED = IsolationLevel.READ_COMMITTED


def append(log: UnifiedLog, *, pid: int = -1, seq: int = -1, txn: bool = False) -> int:
    data = bytearray(
        encode_batch(
            [RecordInput(value=b"v", timestamp=T0)],
            producer_id=pid,
            producer_epoch=0 if pid >= 0 else -1,
            base_sequence=seq,
            transactional=txn,
        )
    )
    return log.append(data, validate_batches(data, max_batch_bytes=10**7)).base_offset


def offsets(data: bytes) -> list[int]:
    return [r.offset for _h, records in iter_records(data) for r in records]


def test_read_committed_stops_at_the_lso_and_lists_aborted_in_range(engine: UnifiedLog) -> None:
    append(engine)  # 0
    append(engine, pid=5, seq=0, txn=True)  # 1: aborted below
    engine.append_marker(5, 0, 0, commit=False)  # 2
    append(engine, pid=6, seq=0, txn=True)  # 3: open, holds the LSO
    append(engine)  # 4
    assert (engine.high_watermark, engine.last_stable_offset) == (5, 3)

    uncommitted = engine.read(0, 1 << 20)
    assert offsets(uncommitted.data) == [0, 1, 2, 3, 4]
    assert uncommitted.aborted is None
    assert (uncommitted.high_watermark, uncommitted.last_stable_offset) == (5, 3)
    assert uncommitted.log_start_offset == 0

    committed = engine.read(0, 1 << 20, COMMITTED)
    assert offsets(committed.data) == [0, 1, 2]
    assert committed.next_offset == 3
    assert [(a.producer_id, a.first_offset) for a in committed.aborted or []] == [(5, 1)]

    # The aborted list covers only the returned range; nothing returned, nothing listed.
    assert engine.read(3, 1 << 20, COMMITTED).aborted == []
    assert engine.read(3, 1 << 20, COMMITTED).data == b""

    engine.append_marker(6, 0, 0, commit=False)  # 5
    after = engine.read(3, 1 << 20, COMMITTED)
    assert offsets(after.data) == [3, 4, 5]
    assert [(a.producer_id, a.first_offset) for a in after.aborted or []] == [(6, 3)]


def test_high_watermark_held_back_bounds_reads_and_the_lso(make_engine: EngineFactory) -> None:
    log = make_engine(auto_high_watermark=False)
    append(log)  # 0
    append(log)  # 1
    assert log.log_end_offset == 2
    assert log.high_watermark == 0
    assert log.last_stable_offset == 0  # no transaction open: the LSO is the HW
    assert log.read(0, 1 << 20).data == b""
    assert log.maybe_increment_high_watermark(1)
    assert not log.maybe_increment_high_watermark(1)
    assert offsets(log.read(0, 1 << 20).data) == [0]
    assert offsets(log.read(0, 1 << 20, COMMITTED).data) == [0]
    assert log.offset_for_timestamp(T0) == (0, T0)
    assert log.max_timestamp_offset() == (0, T0)  # offset 1 is not fetchable yet
    assert log.maybe_increment_high_watermark(100)
    assert log.high_watermark == 2  # never above the log end


def test_on_one_node_the_high_watermark_follows_each_append(engine: UnifiedLog) -> None:
    append(engine, pid=5, seq=0, txn=True)
    assert engine.high_watermark == engine.log_end_offset == 1
    engine.append_marker(5, 0, 0, commit=True)
    assert engine.high_watermark == engine.last_stable_offset == 2


def test_every_engine_is_a_partition_engine(engine: UnifiedLog) -> None:
    checked: PartitionEngine = engine  # mypy checks the interface; this the behaviour
    assert checked.open_transactions() == 0
    assert checked.read(0, 1).aborted is None
