"""The high-watermark checkpoint (``replication-offset-checkpoint``, Kafka's format) and a
replicated engine opened from it: the high watermark starts at the checkpointed value,
bounded by the recovered log, and at the log start when there is none (never the log end),
and a COMMIT marker above it does not move the LSO past the open transaction."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from oncelog.clock import FakeClock
from oncelog.config import LogConfig
from oncelog.records.codec import RecordInput, encode_batch
from oncelog.records.control import ControlType, encode_marker_batch
from oncelog.records.validate import validate_batches
from oncelog.storage.engine import AppendOrigin
from oncelog.storage.offset_checkpoint import read_offsets, write_offsets
from oncelog.storage.unified_log import UnifiedLog


def test_round_trip_in_kafkas_format(tmp_path: Path) -> None:
    path = tmp_path / "replication-offset-checkpoint"
    write_offsets(path, {("t", 1): 7, ("a.b-c", 0): 0})
    assert path.read_text() == "0\n2\na.b-c 0 0\nt 1 7\n"
    assert read_offsets(path) == {("t", 1): 7, ("a.b-c", 0): 0}


@pytest.mark.parametrize("text", [
    "", "1\n0\n", "0\n2\nt 0 5\n", "0\n1\nt 0 -5\n", "0\n1\nt x 5\n", "0\n1\nt 0\n",
])
def test_a_damaged_file_reads_as_empty(tmp_path: Path, text: str) -> None:
    path = tmp_path / "replication-offset-checkpoint"
    path.write_text(text)
    assert read_offsets(path) == {}


def test_a_missing_file_reads_as_empty_and_a_leftover_tmp_goes(tmp_path: Path) -> None:
    path = tmp_path / "replication-offset-checkpoint"
    (tmp_path / "replication-offset-checkpoint.tmp").write_text("0\n")
    assert read_offsets(path) == {}
    assert not (tmp_path / "replication-offset-checkpoint.tmp").exists()


def _replicated_log(directory: Path, high_watermark: int | None) -> UnifiedLog:
    return UnifiedLog.open(directory, LogConfig(), FakeClock(), auto_high_watermark=False,
                           leader_epoch=None, high_watermark=high_watermark)


def _replicate(log: UnifiedLog, count: int, **batch: object) -> None:
    buf = bytearray(encode_batch([RecordInput(value=b"v")] * count,
                                 base_offset=log.log_end_offset, **batch))  # type: ignore[arg-type]
    log.append(buf, validate_batches(buf, max_batch_bytes=1 << 20, allow_control=True),
               origin=AppendOrigin.REPLICATION)


@pytest.mark.parametrize(("checkpointed", "expected"), [
    (None, 0), (3, 3), (10, 10), (25, 10),
])
def test_a_replica_opens_at_its_checkpointed_high_watermark(
    tmp_path: Path, checkpointed: int | None, expected: int
) -> None:
    log = _replicated_log(tmp_path / "t-0", None)
    log.become_follower(0)
    _replicate(log, 10)
    log.maybe_increment_high_watermark(8)
    log.close()
    reopened = _replicated_log(tmp_path / "t-0", checkpointed)
    assert reopened.log_end_offset == 10
    assert reopened.high_watermark == expected


def test_a_commit_above_the_checkpointed_high_watermark_holds_the_lso(tmp_path: Path) -> None:
    """Replayed at open, a COMMIT marker above the high watermark is not yet replicated
    everywhere: the transaction stays unstable until the high watermark passes it."""
    log = _replicated_log(tmp_path / "t-0", None)
    log.become_follower(0)
    _replicate(log, 2)
    _replicate(log, 2, producer_id=5, producer_epoch=0, base_sequence=0, transactional=True)
    commit = bytearray(encode_marker_batch(ControlType.COMMIT, 5, 0, 0, 0))
    struct.pack_into(">q", commit, 0, log.log_end_offset)  # base offset: outside the CRC
    log.append(commit, validate_batches(commit, max_batch_bytes=1 << 20, allow_control=True),
               origin=AppendOrigin.REPLICATION)
    log.close()
    reopened = _replicated_log(tmp_path / "t-0", 3)
    assert reopened.last_stable_offset == 2
    reopened.maybe_increment_high_watermark(5)
    assert reopened.last_stable_offset == 5
