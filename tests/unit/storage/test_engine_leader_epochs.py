"""Leader epochs in the partition engine (every engine): batches stamped with the leader's
epoch, the epoch cache following the log through replication, truncation, retention and
DeleteRecords, rebuilt identical after a restart or from the batches when the checkpoint is
damaged; followers refuse their own appends and read up to the log end."""

from __future__ import annotations

from pathlib import Path

import pytest

from oncelog.clock import FakeClock
from oncelog.config import LogConfig
from oncelog.errors import ErrorCode, KafkaError
from oncelog.records.batch import parse_header
from oncelog.records.codec import RecordInput, encode_batch
from oncelog.records.validate import validate_batches
from oncelog.storage.engine import AppendOrigin
from oncelog.storage.engines import open_engine
from oncelog.storage.leader_epoch import CHECKPOINT_FILE, EpochEntry
from oncelog.storage.unified_log import UnifiedLog
from tests.unit.storage.conftest import EngineFactory

T0 = FakeClock().now_ms()


def _batch(
    n: int = 2, *, epoch: int = -1, pid: int = -1, txn: bool = False, base_offset: int = 0
) -> bytearray:
    return bytearray(encode_batch(
        [RecordInput(value=b"v" * 20, timestamp=T0) for _ in range(n)], base_offset=base_offset,
        partition_leader_epoch=epoch, producer_id=pid, producer_epoch=0 if pid >= 0 else -1,
        base_sequence=0 if pid >= 0 else -1, transactional=txn,
    ))


def append(log: UnifiedLog, n: int = 2, **kwargs: int | bool) -> None:
    buf = _batch(n, **kwargs)  # type: ignore[arg-type]
    log.append(buf, validate_batches(buf, max_batch_bytes=10**7))


def epochs_in(log: UnifiedLog) -> list[tuple[int, int]]:
    """(base offset, partition leader epoch) of every batch in the log."""
    return [(h.base_offset, h.partition_leader_epoch) for h in log.log.batch_headers(0)]


def pairs(log: UnifiedLog) -> list[tuple[int, int]]:
    return [(e.epoch, e.start_offset) for e in log.epochs.entries]


def test_single_node_leads_epoch_zero_and_stamps_it(engine: UnifiedLog) -> None:
    assert engine.leader_epoch == 0 and engine.is_leader
    append(engine, epoch=7)  # whatever the client wrote, the leader's epoch is stored
    append(engine, pid=5, txn=True)
    engine.append_marker(5, 0, 0, commit=True)
    assert epochs_in(engine) == [(0, 0), (2, 0), (4, 0)]
    assert pairs(engine) == [(0, 0)]
    assert engine.end_offset_for_leader_epoch(0) == (0, 5)


def test_new_leader_epoch_starts_at_the_log_end(engine: UnifiedLog) -> None:
    append(engine)
    engine.become_leader(3)
    assert pairs(engine) == [(0, 0), (3, 2)]
    append(engine)
    assert epochs_in(engine) == [(0, 0), (2, 3)]
    assert engine.end_offset_for_leader_epoch(0) == (0, 2)
    assert engine.end_offset_for_leader_epoch(2) == (0, 2)
    assert engine.end_offset_for_leader_epoch(3) == (3, 4)
    assert engine.end_offset_for_leader_epoch(4) == (-1, -1)
    assert engine.latest_epoch == 3


def test_follower_refuses_its_own_appends_and_keeps_the_leaders_epochs(
    make_engine: EngineFactory,
) -> None:
    follower = make_engine(auto_high_watermark=False, name="f-0")
    follower.become_follower(4)
    assert not follower.is_leader
    with pytest.raises(KafkaError) as refused:
        append(follower)
    assert refused.value.code == ErrorCode.not_leader_or_follower
    with pytest.raises(KafkaError):
        follower.append_marker(1, 0, 0, commit=True)
    for epoch in (0, 2, 2, 4):
        buf = _batch(epoch=epoch, base_offset=follower.log_end_offset)
        follower.append(buf, validate_batches(buf, max_batch_bytes=10**7),
                        origin=AppendOrigin.REPLICATION)
    assert epochs_in(follower) == [(0, 0), (2, 2), (4, 2), (6, 4)]
    assert pairs(follower) == [(0, 0), (2, 2), (4, 6)]
    # Nothing above the high watermark for consumers; everything for a follower's fetch.
    assert follower.read(0, 10**6).data == b""
    assert follower.read(0, 10**6, upto_log_end=True).next_offset == 8
    follower.maybe_increment_high_watermark(4)
    assert follower.read(0, 10**6).next_offset == 4


def test_replicated_batches_must_start_at_the_log_end(make_engine: EngineFactory) -> None:
    """A follower keeps the leader's offsets: a batch that does not start at its log end
    (a gap, or offsets it already has) is refused instead of being renumbered."""
    follower = make_engine(auto_high_watermark=False, name="f-0")
    follower.become_follower(1)
    for base_offset in (0, 2):
        buf = _batch(epoch=1, base_offset=base_offset)
        follower.append(buf, validate_batches(buf, max_batch_bytes=10**7),
                        origin=AppendOrigin.REPLICATION)
    for wrong in (2, 5):
        buf = _batch(epoch=1, base_offset=wrong)
        with pytest.raises(KafkaError) as refused:
            follower.append(buf, validate_batches(buf, max_batch_bytes=10**7),
                            origin=AppendOrigin.REPLICATION)
        assert refused.value.code == ErrorCode.unknown_server_error
    assert follower.log_end_offset == 4
    assert [h.base_offset for h in follower.log.batch_headers(0)] == [0, 2]


def test_truncation_cuts_the_cache_with_the_log(make_engine: EngineFactory) -> None:
    log = make_engine(auto_high_watermark=False, name="f-0")
    log.become_follower(3)
    for epoch in (1, 2, 3):
        buf = _batch(epoch=epoch, base_offset=log.log_end_offset)
        log.append(buf, validate_batches(buf, max_batch_bytes=10**7),
                   origin=AppendOrigin.REPLICATION)
    # The factory's engine led epoch 0 from offset 0: epoch 1 starting there replaces it.
    assert pairs(log) == [(1, 0), (2, 2), (3, 4)]
    log.truncate_to(4)
    assert pairs(log) == [(1, 0), (2, 2)]
    assert log.end_offset_for_leader_epoch(2) == (2, 4)
    assert log.end_offset_for_leader_epoch(1) == (1, 2)
    log.truncate_to(2)
    assert pairs(log) == [(1, 0)]
    log.become_leader(5)
    append(log)
    assert epochs_in(log) == [(0, 1), (2, 5)]
    assert pairs(log) == [(1, 0), (5, 2)]


def test_retention_and_delete_records_move_the_first_entry(make_engine: EngineFactory) -> None:
    clock = FakeClock()
    log = make_engine(clock, segment_bytes=150)
    for epoch in (1, 2, 3):
        log.become_leader(epoch)
        append(log)
        append(log)
    assert pairs(log)[-3:] == [(1, 0), (2, 4), (3, 8)]
    log.delete_records_before(5)
    assert log.epochs.entries[0] == EpochEntry(2, 5)
    log.delete_records_before(9)
    assert pairs(log) == [(3, 9)]
    assert log.end_offset_for_leader_epoch(1) == (1, 9)


def _file_engine(directory: Path, *, leader_epoch: int | None = 0) -> UnifiedLog:
    return open_engine("file:", directory, LogConfig(segment_bytes=200), FakeClock(),
                       leader_epoch=leader_epoch)


def _build(directory: Path) -> list[EpochEntry]:
    log = _file_engine(directory)
    for epoch in (0, 2, 5):
        log.become_leader(epoch)
        append(log)
        append(log, pid=1 + epoch, txn=True)
        log.append_marker(1 + epoch, 0, 0, commit=epoch != 2)
    entries = log.epochs.entries
    log.close()
    return entries


def test_cache_is_the_same_after_a_restart(tmp_path: Path) -> None:
    entries = _build(tmp_path / "p-0")
    assert [e.epoch for e in entries] == [0, 2, 5]
    reopened = _file_engine(tmp_path / "p-0", leader_epoch=None)
    assert reopened.epochs.entries == entries
    assert (tmp_path / "p-0" / CHECKPOINT_FILE).read_text().splitlines()[:2] == ["0", "3"]


@pytest.mark.parametrize("damage", [b"garbage", None])
def test_damaged_or_missing_checkpoint_is_rebuilt_from_the_batches(
    tmp_path: Path, damage: bytes | None, caplog: pytest.LogCaptureFixture
) -> None:
    entries = _build(tmp_path / "p-0")
    path = tmp_path / "p-0" / CHECKPOINT_FILE
    if damage is None:
        path.unlink()
    else:
        path.write_bytes(damage)
    caplog.set_level("INFO")
    reopened = _file_engine(tmp_path / "p-0", leader_epoch=None)
    assert reopened.epochs.entries == entries
    assert "leader-epoch cache rebuilt" in caplog.text
    assert path.read_text() == "0\n3\n" + "".join(
        f"{e.epoch} {e.start_offset}\n" for e in entries)


def test_checkpoint_entries_past_a_shorter_log_are_dropped(tmp_path: Path) -> None:
    entries = _build(tmp_path / "p-0")
    path = tmp_path / "p-0" / CHECKPOINT_FILE
    # A checkpoint ahead of the log (an epoch assigned, its batch never written).
    path.write_text("0\n4\n" + "".join(f"{e.epoch} {e.start_offset}\n" for e in entries)
                    + "9 1000\n")
    reopened = _file_engine(tmp_path / "p-0", leader_epoch=None)
    assert reopened.epochs.entries == entries


def test_marker_batches_carry_the_leader_epoch(engine: UnifiedLog) -> None:
    engine.become_leader(6)
    append(engine, pid=3, txn=True)
    offset = engine.append_marker(3, 0, 0, commit=False)
    data = engine.read(offset, 10**6).data
    assert parse_header(data).partition_leader_epoch == 6
