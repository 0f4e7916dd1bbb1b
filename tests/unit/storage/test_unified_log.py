"""The partition engine: the append order (producer state, duplicates, transactions, LSO,
aborted index), run against every engine (``make_engine``), and the file engine's rebuild
after clean and unclean restarts."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from oncelog.clock import FakeClock
from oncelog.config import LogConfig
from oncelog.errors import ErrorCode, KafkaError
from oncelog.records.codec import RecordInput, encode_batch
from oncelog.records.validate import validate_batches
from oncelog.storage.log import PartitionLog
from oncelog.storage.unified_log import UnifiedLog
from tests.unit.storage.conftest import EngineFactory

NOW = FakeClock().now_ms()


def batch(
    n: int = 2, *, pid: int = -1, epoch: int = 0, seq: int = -1, txn: bool = False, tag: str = "v"
) -> tuple[bytearray, list]:
    data = bytearray(
        encode_batch(
            [RecordInput(key=b"k", value=f"{tag}{i}".encode(), timestamp=NOW) for i in range(n)],
            producer_id=pid,
            producer_epoch=epoch if pid >= 0 else -1,
            base_sequence=seq,
            transactional=txn,
        )
    )
    return data, validate_batches(data, max_batch_bytes=10**7)


def open_log(path: Path, clock: FakeClock, **config: Any) -> UnifiedLog:
    return UnifiedLog.open(path, LogConfig(**config), clock)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def append(log: UnifiedLog, data_headers: tuple[bytearray, list]) -> int:
    data, headers = data_headers
    return log.append(data, headers).base_offset


def test_idempotent_retry_returns_original_offset(
    make_engine: EngineFactory, clock: FakeClock
) -> None:
    log = make_engine(clock)
    assert append(log, batch(pid=7, seq=0)) == 0
    assert append(log, batch(pid=7, seq=2)) == 2
    # A retry of either of the last batches: same offsets, nothing appended.
    assert append(log, batch(pid=7, seq=0)) == 0
    assert append(log, batch(pid=7, seq=2)) == 2
    assert log.log_end_offset == 4
    with pytest.raises(KafkaError) as err:
        append(log, batch(pid=7, seq=9))
    assert err.value.code == ErrorCode.out_of_order_sequence_number
    assert log.log_end_offset == 4


def test_duplicate_beside_a_new_batch_is_refused_and_nothing_appended(
    make_engine: EngineFactory, clock: FakeClock
) -> None:
    # Answering the duplicate's offsets for the whole append would acknowledge the new
    # batch without writing it.
    log = make_engine(clock)
    dup_data, dup_headers = batch(pid=7, seq=0)
    append(log, (bytearray(dup_data), list(dup_headers)))
    new_data, new_headers = batch(pid=7, seq=2, tag="new")
    both = bytearray(dup_data + new_data)
    with pytest.raises(KafkaError) as err:
        log.append(both, validate_batches(both, max_batch_bytes=10**7))
    assert err.value.code == ErrorCode.invalid_record
    assert log.log_end_offset == 2
    assert append(log, (new_data, new_headers)) == 2  # the new batch is still accepted alone


def test_older_epoch_is_rejected(make_engine: EngineFactory, clock: FakeClock) -> None:
    log = make_engine(clock)
    append(log, batch(pid=7, epoch=3, seq=0))
    with pytest.raises(KafkaError) as err:
        append(log, batch(pid=7, epoch=2, seq=2))
    assert err.value.code == ErrorCode.invalid_producer_epoch


def test_open_transaction_holds_lso_and_abort_is_indexed(
    make_engine: EngineFactory, clock: FakeClock
) -> None:
    log = make_engine(clock)
    append(log, batch())  # 0-1 plain
    assert log.last_stable_offset == 2
    first = append(log, batch(pid=5, seq=0, txn=True))  # 2-3 in a transaction
    append(log, batch())  # 4-5 plain, behind the open transaction
    assert first == 2
    assert log.last_stable_offset == 2
    assert log.high_watermark == 6
    marker = log.append_marker(5, 0, 0, commit=False)
    assert marker == 6
    assert log.last_stable_offset == 7
    aborted = log.aborted_transactions(0, 7)
    assert [(a.producer_id, a.first_offset, a.last_offset) for a in aborted] == [(5, 2, 6)]
    assert log.aborted_transactions(7, 100) == []
    assert log.aborted_transactions(0, 2) == []  # began at 2: nothing below it


def test_commit_leaves_no_aborted_entry(make_engine: EngineFactory, clock: FakeClock) -> None:
    log = make_engine(clock)
    append(log, batch(pid=5, seq=0, txn=True))
    assert log.last_stable_offset == 0
    log.append_marker(5, 0, 0, commit=True)
    assert log.last_stable_offset == log.log_end_offset == 3
    assert log.aborted_transactions(0, 10) == []


def test_two_open_transactions_lso_is_the_earliest(
    make_engine: EngineFactory, clock: FakeClock
) -> None:
    log = make_engine(clock)
    append(log, batch(pid=1, seq=0, txn=True))  # 0-1
    append(log, batch(pid=2, seq=0, txn=True))  # 2-3
    assert log.last_stable_offset == 0
    log.append_marker(1, 0, 0, commit=True)  # 4
    assert log.last_stable_offset == 2
    log.append_marker(2, 0, 0, commit=False)  # 5
    assert log.last_stable_offset == 6
    assert [(a.producer_id, a.first_offset) for a in log.aborted_transactions(0, 6)] == [(2, 2)]


def test_marker_with_older_epoch_is_refused(make_engine: EngineFactory, clock: FakeClock) -> None:
    log = make_engine(clock)
    append(log, batch(pid=5, epoch=4, seq=0, txn=True))
    with pytest.raises(KafkaError) as err:
        log.append_marker(5, 3, 0, commit=True)
    assert err.value.code == ErrorCode.invalid_producer_epoch


def test_fenced_coordinator_epoch_is_refused(make_engine: EngineFactory, clock: FakeClock) -> None:
    log = make_engine(clock)
    append(log, batch(pid=5, seq=0, txn=True))
    log.append_marker(5, 0, 3, commit=True)
    append(log, batch(pid=5, seq=2, txn=True))
    with pytest.raises(KafkaError) as err:
        log.append_marker(5, 0, 2, commit=True)
    assert err.value.code == ErrorCode.transaction_coordinator_fenced


def _scenario(log: UnifiedLog) -> None:
    append(log, batch(pid=5, seq=0, txn=True))  # 0-1
    append(log, batch(pid=6, seq=0))  # 2-3 idempotent
    log.append_marker(5, 0, 0, commit=False)  # 4
    append(log, batch(pid=5, seq=2, txn=True))  # 5-6, still open


@pytest.mark.parametrize("clean", [True, False])
def test_restart_rebuilds_state_lso_and_aborted_index(
    tmp_path: Path, clock: FakeClock, clean: bool
) -> None:
    path = tmp_path / "p-0"
    log = open_log(path, clock)
    _scenario(log)
    before = (log.last_stable_offset, log.aborted_transactions(0, 100))
    if clean:
        log.close()
        source = path
    else:
        source = tmp_path / "copy"
        shutil.copytree(path, source)  # as a kill -9 leaves it: no snapshot, no marker
        log.close()
    again = open_log(source, clock)
    assert (again.last_stable_offset, again.aborted_transactions(0, 100)) == before
    assert again.last_stable_offset == 5
    # Duplicate detection survives the restart.
    assert append(again, batch(pid=6, seq=0)) == 2
    assert append(again, batch(pid=5, seq=2, txn=True)) == 5
    again.append_marker(5, 0, 0, commit=True)
    assert again.last_stable_offset == again.log_end_offset


def test_unclean_restart_without_txnindex_files_rebuilds_them(
    tmp_path: Path, clock: FakeClock
) -> None:
    path = tmp_path / "p-0"
    log = open_log(path, clock)
    _scenario(log)
    expected = log.aborted_transactions(0, 100)
    log.close()
    for f in path.glob("*.txnindex"):
        f.unlink()
    for f in path.glob("*.snapshot"):
        f.unlink()
    again = open_log(path, clock)
    assert again.aborted_transactions(0, 100) == expected


def test_aborted_entries_survive_segment_rolls(tmp_path: Path, clock: FakeClock) -> None:
    path = tmp_path / "p-0"
    log = open_log(path, clock, segment_bytes=300)
    for round_ in range(6):
        append(log, batch(pid=9, seq=round_ * 2, txn=True, tag=f"r{round_}-"))
        log.append_marker(9, 0, 0, commit=round_ % 2 == 0)
    assert isinstance(log.log, PartitionLog)
    assert len(log.log.segment_base_offsets()) > 2
    aborted = log.aborted_transactions(0, log.log_end_offset)
    assert len(aborted) == 3
    log.close()
    again = open_log(path, clock, segment_bytes=300)
    assert again.aborted_transactions(0, again.log_end_offset) == aborted
    assert list(path.glob("*.snapshot"))


def test_batch_straddling_the_log_start_is_replayed(tmp_path: Path, clock: FakeClock) -> None:
    """DeleteRecords to the middle of a batch leaves the batch readable; a restart without a
    snapshot must still apply it, or the producer is forgotten and a retry is appended twice
    (found by the storage fuzz test)."""
    log = open_log(tmp_path / "p-0", clock)
    assert append(log, batch(pid=7, seq=0)) == 0  # offsets 0-1
    log.delete_records_before(1)
    log.flush()
    crashed = tmp_path / "crash" / "p-0"
    shutil.copytree(log.directory, crashed)  # kill -9 now: no snapshot, no clean shutdown
    log.close()
    reopened = open_log(crashed, clock)
    assert reopened.log_start_offset == 1
    assert reopened.producer_state.last_entry(7) is not None
    assert append(reopened, batch(pid=7, seq=0)) == 0  # the retry is recognised
    assert reopened.log_end_offset == 2
    reopened.close()


def test_damaged_control_bit_in_a_trusted_segment_does_not_stop_the_open(
    tmp_path: Path, clock: FakeClock
) -> None:
    """After a clean shutdown segments are trusted; a flipped attributes bit that makes a data
    batch look like a control batch failed the open with CORRUPT_MESSAGE (found by the
    storage fuzz test)."""
    log = open_log(tmp_path / "p-0", clock)
    append(log, batch(pid=7, seq=0))
    log.close()
    for path in log.directory.glob("*.snapshot"):
        path.unlink()  # replay the batch from the log
    segment = log.directory / f"{0:020d}.log"
    data = bytearray(segment.read_bytes())
    data[22] ^= 0x20  # attributes: the control bit
    segment.write_bytes(bytes(data))
    reopened = open_log(log.directory, clock)
    assert reopened.log_end_offset == 2
    reopened.close()


def test_marker_between_snapshot_and_log_start_is_replayed(
    tmp_path: Path, clock: FakeClock
) -> None:
    """A snapshot taken with a transaction open, then its COMMIT, then DeleteRecords past the
    marker: a restart replayed from the log start, skipped the marker and left the
    transaction open for good (found by the storage fuzz test)."""
    log = open_log(tmp_path / "p-0", clock)
    append(log, batch(pid=7, seq=0, txn=True))  # 0-1
    log.take_snapshot()  # at 2, transaction open
    log.append_marker(7, 0, 0, commit=True)  # 2
    append(log, batch())  # 3-4
    log.delete_records_before(3)
    log.flush()
    crashed = tmp_path / "crash" / "p-0"
    shutil.copytree(log.directory, crashed)
    log.close()
    reopened = open_log(crashed, clock)
    assert reopened.producer_state.ongoing_txn_first_offsets() == []
    assert reopened.last_stable_offset == reopened.log_end_offset == 5
    reopened.close()
