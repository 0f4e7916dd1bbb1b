"""The aborted-transaction index: written before the LSO moves, fsynced with its segment,
rebuilt after a crash at any point; producer snapshots above the log end never load."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from oncelog.clock import FakeClock
from oncelog.config import LogConfig
from oncelog.errors import ErrorCode, KafkaError
from oncelog.records.codec import RecordInput, encode_batch
from oncelog.records.validate import validate_batches
from oncelog.storage import txn_index
from oncelog.storage.snapshot import list_snapshots
from oncelog.storage.unified_log import UnifiedLog

NOW = FakeClock().now_ms()


def append(
    log: UnifiedLog, n: int = 2, *, pid: int = -1, seq: int = -1, txn: bool = False
) -> int:
    data = bytearray(
        encode_batch(
            [RecordInput(key=b"k", value=b"v%d" % i, timestamp=NOW) for i in range(n)],
            producer_id=pid,
            producer_epoch=0 if pid >= 0 else -1,
            base_sequence=seq,
            transactional=txn,
        )
    )
    return log.append(data, validate_batches(data, max_batch_bytes=10**7)).base_offset


def open_log(path: Path, **config: Any) -> UnifiedLog:
    return UnifiedLog.open(path, LogConfig(**config), FakeClock())


def aborted(log: UnifiedLog) -> list[tuple[int, int, int]]:
    return [
        (a.producer_id, a.first_offset, a.last_offset)
        for a in log.aborted_transactions(0, log.log_end_offset)
    ]


def test_failed_index_append_keeps_lso_and_retried_marker_writes_entry(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p-0")
    append(log, pid=5, seq=0, txn=True)  # 0-1
    blocker = tmp_path / "p-0" / f"{0:020d}{txn_index.SUFFIX}"
    blocker.mkdir()  # the index file cannot be opened for writing
    with pytest.raises(KafkaError) as err:
        log.append_marker(5, 0, 0, commit=False)  # the marker lands at 2, its entry does not
    assert err.value.code == ErrorCode.kafka_storage_error
    assert log.last_stable_offset == 0  # records 0-1 stay invisible to read_committed
    assert aborted(log) == []
    blocker.rmdir()
    retried = log.append_marker(5, 0, 0, commit=False)  # the coordinator retries
    assert retried == 3
    assert log.last_stable_offset == 4
    assert aborted(log) == [(5, 0, 3)]
    log.close()
    assert aborted(open_log(tmp_path / "p-0")) == [(5, 0, 3)]


def _fsynced_names(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    names: list[str] = []
    real = os.fsync

    def recording(fd: int) -> None:
        names.append(os.path.basename(os.readlink(f"/proc/self/fd/{fd}")))
        real(fd)

    monkeypatch.setattr(os, "fsync", recording)
    return names


def _abort_one(log: UnifiedLog) -> None:
    append(log, pid=5, seq=0, txn=True)
    log.append_marker(5, 0, 0, commit=False)


@pytest.mark.parametrize("how", ["flush", "close", "flush.messages=1"])
def test_txnindex_is_fsynced_with_its_segment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    config = {"flush_messages": 1} if how == "flush.messages=1" else {}
    log = open_log(tmp_path / "p-0", **config)
    names = _fsynced_names(monkeypatch)
    _abort_one(log)
    if how == "flush":
        log.flush()
    elif how == "close":
        log.close()
    assert f"{0:020d}{txn_index.SUFFIX}" in names


def test_txnindex_is_fsynced_before_a_snapshot_that_covers_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = open_log(tmp_path / "p-0")
    names = _fsynced_names(monkeypatch)
    _abort_one(log)
    log.take_snapshot()
    index_name = f"{0:020d}{txn_index.SUFFIX}"
    assert index_name in names
    assert names.index(index_name) < names.index(f"{3:020d}.snapshot.tmp")


@pytest.mark.parametrize(
    "tail",
    [b"\0" * txn_index.ENTRY_SIZE * 2, b"\xff" * 34, b"\0" * 7],
    ids=["zero-entries", "garbage-entry", "torn-zeros"],
)
def test_zero_filled_or_garbage_txnindex_tail_is_not_loaded(
    tmp_path: Path, tail: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "p-0"
    log = open_log(path)
    _abort_one(log)  # 0-1 data, 2 marker
    append(log)  # 3-4
    expected = aborted(log)
    log.close()
    index = path / f"{0:020d}{txn_index.SUFFIX}"
    with open(index, "ab") as f:  # what a power loss can leave after the last entry
        f.write(tail)
    again = open_log(path)
    assert aborted(again) == expected
    assert again.aborted_transactions(3, 5) == []
    assert index.name in caplog.text
    again.close()
    assert len(index.read_bytes()) == txn_index.ENTRY_SIZE  # rewritten without the tail
    assert aborted(open_log(path)) == expected


def test_index_entry_of_a_lost_marker_is_dropped(tmp_path: Path) -> None:
    """Power loss: the .txnindex entry reached the disk, the marker in the .log did not."""
    path = tmp_path / "p-0"
    log = open_log(path)
    append(log, pid=5, seq=0, txn=True)  # 0-1
    log.flush()
    log.append_marker(5, 0, 0, commit=False)  # 2
    shutil.copytree(path, tmp_path / "crash")
    log.close()
    crash = tmp_path / "crash"
    os.truncate(crash / f"{0:020d}.log", os.path.getsize(crash / f"{0:020d}.log") - 10)
    again = open_log(crash)
    assert again.log_end_offset == 2
    assert aborted(again) == []
    assert again.last_stable_offset == 0  # the transaction is open again
    append(again, pid=5, seq=2, txn=True)  # 2-3
    again.append_marker(5, 0, 0, commit=True)  # 4: committed this time
    assert aborted(again) == []


def test_marker_that_survived_without_its_index_entry_is_reindexed(tmp_path: Path) -> None:
    path = tmp_path / "p-0"
    log = open_log(path)
    append(log, pid=5, seq=0, txn=True)  # 0-1
    log.take_snapshot()  # at 2, below the marker
    log.append_marker(5, 0, 0, commit=False)  # 2
    shutil.copytree(path, tmp_path / "crash")
    log.close()
    crash = tmp_path / "crash"
    (crash / f"{0:020d}{txn_index.SUFFIX}").write_bytes(b"")  # the entry was lost
    again = open_log(crash)
    assert aborted(again) == [(5, 0, 2)]
    assert again.last_stable_offset == 3


def test_stale_snapshot_above_the_log_end_is_deleted_on_load(tmp_path: Path) -> None:
    path = tmp_path / "p-0"
    log = open_log(path)
    append(log)  # 0-1, flushed
    log.flush()
    append(log, pid=5, seq=0, txn=True)  # 2-3, open, never flushed
    log.take_snapshot()  # snapshot at 4: producer 5 has a transaction open from 2
    shutil.copytree(path, tmp_path / "crash")
    log.close()
    crash = tmp_path / "crash"
    # A power loss keeps the (fsynced) snapshot and loses the unflushed tail of the log.
    segment = crash / f"{0:020d}.log"
    with open(segment, "r+b") as f:
        f.truncate(os.path.getsize(segment) // 2 + 40)
    after_power_loss = open_log(crash)
    assert after_power_loss.log_end_offset == 2
    assert [o for o, _p in list_snapshots(crash)] == []
    assert after_power_loss.last_stable_offset == 2
    append(after_power_loss)  # 2-3
    append(after_power_loss)  # 4-5: the log grows past the old snapshot's offset
    shutil.copytree(crash, tmp_path / "kill9")  # kill -9: no snapshot, no clean shutdown
    after_kill = open_log(tmp_path / "kill9")
    assert after_kill.log_end_offset == 6
    assert after_kill.last_stable_offset == 6  # producer 5 has no data in this log
    assert after_kill.producer_state.ongoing_txn_first_offsets() == []
