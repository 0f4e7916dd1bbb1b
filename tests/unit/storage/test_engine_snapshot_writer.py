"""The file engine's injectable snapshot writer: the roll snapshot is captured at the roll
(later appends cannot change it), written only when the writer runs the job, and skipped if
the log was truncated or closed in between; and choosing an engine by URL."""

from __future__ import annotations

from pathlib import Path

import pytest

from oncelog.clock import FakeClock
from oncelog.config import BrokerConfig, LogConfig
from oncelog.records.codec import RecordInput, encode_batch
from oncelog.records.validate import validate_batches
from oncelog.storage import snapshot
from oncelog.storage.engines import open_engine
from oncelog.storage.memory_engine import MemoryLog
from oncelog.storage.unified_log import SnapshotJob, UnifiedLog

T0 = FakeClock().now_ms()


class RecordingWriter:
    def __init__(self) -> None:
        self.jobs: list[SnapshotJob] = []

    def __call__(self, job: SnapshotJob) -> None:
        self.jobs.append(job)


def append(log: UnifiedLog, seq: int) -> None:
    buf = bytearray(
        encode_batch(
            [RecordInput(value=b"x" * 60, timestamp=T0)],
            producer_id=7, producer_epoch=0, base_sequence=seq,
        )
    )
    log.append(buf, validate_batches(buf, max_batch_bytes=10**7))


def open_recording(path: Path, writer: RecordingWriter) -> UnifiedLog:
    return UnifiedLog.open(path, LogConfig(segment_bytes=200), FakeClock(), snapshot_writer=writer)


def append_until_roll(log: UnifiedLog, writer: RecordingWriter) -> int:
    seq = 0
    while not writer.jobs:
        append(log, seq)
        seq += 1
    return seq


def test_roll_snapshot_is_captured_at_the_roll_and_written_by_the_writer(
    tmp_path: Path,
) -> None:
    writer = RecordingWriter()
    log = open_recording(tmp_path / "p-0", writer)
    seq = append_until_roll(log, writer)
    roll_end = log.log_end_offset
    assert snapshot.list_snapshots(log.directory) == []  # nothing written inside append
    append(log, seq)  # the state moves on before the job runs
    writer.jobs.pop(0)()
    [(offset, path)] = snapshot.list_snapshots(log.directory)
    assert offset == roll_end
    _, entries = snapshot.read_snapshot(path)
    assert [(e.producer_id, e.last_seq) for e in entries] == [(7, seq - 1)]


@pytest.mark.parametrize("then", ["truncate", "close"])
def test_a_pending_snapshot_is_not_written_after_truncation_or_close(
    tmp_path: Path, then: str
) -> None:
    writer = RecordingWriter()
    log = open_recording(tmp_path / "p-0", writer)
    seq = append_until_roll(log, writer)
    roll_end = log.log_end_offset
    if then == "truncate":
        log.truncate_to(1)
    else:
        append(log, seq)
        log.close()  # writes its own snapshot, at the new log end
    writer.jobs.pop(0)()
    assert roll_end not in [o for o, _ in snapshot.list_snapshots(log.directory)]


def test_open_engine_by_url(tmp_path: Path) -> None:
    memory = open_engine("memory:", tmp_path / "t-0", LogConfig(), FakeClock())
    assert isinstance(memory.log, MemoryLog)
    assert not (tmp_path / "t-0").exists()
    disk = open_engine("file:", tmp_path / "t-1", LogConfig(), FakeClock())
    assert (tmp_path / "t-1").is_dir()
    disk.close()
    with pytest.raises(ValueError, match="unknown storage engine 's3://b'"):
        open_engine("s3://b", tmp_path / "t-2", LogConfig(), FakeClock())


def test_storage_engine_config_refuses_unknown_schemes() -> None:
    assert BrokerConfig()["storage.engine"] == "file:"
    assert BrokerConfig({"storage.engine": "memory:"})["storage.engine"] == "memory:"
    with pytest.raises(ValueError, match="known engines: file:, memory:"):
        BrokerConfig({"storage.engine": "postgres://db"})
