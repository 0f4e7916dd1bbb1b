"""Recovery: clean vs unclean restarts, torn tails, corruption, index rebuilds, checkpoints."""

from __future__ import annotations

import logging
import os
import shutil
import struct
from pathlib import Path
from typing import Any

import pytest

from oncelog.storage import files
from oncelog.storage.checkpoint import (
    CHECKPOINT_FILE,
    CLEAN_SHUTDOWN_FILE,
    LogCheckpoint,
    read_checkpoint,
    write_checkpoint,
)
from oncelog.storage.log import PartitionLog
from oncelog.storage.segment import LogSegment, RecoveryOutcome
from tests.unit.storage.log_helpers import (
    all_offsets,
    append,
    batch,
    batch_ranges,
    check_every_offset,
    crash_copy,
    headers_of,
    open_log,
)


def seg_file(directory: Path, base: int, suffix: str) -> Path:
    return directory / f"{base:020d}{suffix}"


@pytest.fixture
def recovered(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Base offsets of the segments ``LogSegment.recover`` ran on."""
    calls: list[int] = []
    real = LogSegment.recover

    def spy(self: LogSegment, index_interval: int) -> RecoveryOutcome:
        calls.append(self.base_offset)
        return real(self, index_interval)

    monkeypatch.setattr(LogSegment, "recover", spy)
    return calls


# Batches of different sizes so cut points hit different places.
SHAPES = [(1, 10), (3, 40), (2, 5), (5, 30), (1, 100), (2, 20)]


def build(directory: Path, **config: Any) -> tuple[PartitionLog, list[int]]:
    """A log with one batch per SHAPES entry; returns it and the batch end positions."""
    log = open_log(directory, **config)
    ends = []
    position = 0
    for records, size in SHAPES:
        data = batch(records, value_size=size)
        append(log, data)
        position += len(data)
        ends.append(position)
    return log, ends


def test_clean_restart_trusts_the_files(tmp_path: Path, recovered: list[int]) -> None:
    log, _ends = build(tmp_path / "t-0", segment_bytes=300)
    bases = log.segment_base_offsets()
    assert len(bases) > 1
    end = log.log_end_offset
    log.close()
    assert (tmp_path / "t-0" / CLEAN_SHUTDOWN_FILE).exists()
    reopened = open_log(tmp_path / "t-0", segment_bytes=300)
    assert recovered == []
    assert not (tmp_path / "t-0" / CLEAN_SHUTDOWN_FILE).exists()  # gone before any write
    assert (reopened.log_end_offset, reopened.recovery_point) == (end, end)
    assert reopened.segment_base_offsets() == bases
    assert all_offsets(reopened) == list(range(end))
    check_every_offset(reopened)
    reopened.close()


def test_unclean_restart_scans_from_the_recovery_point(
    tmp_path: Path, recovered: list[int]
) -> None:
    one = len(batch(1))
    log = open_log(tmp_path / "t-0", segment_bytes=2 * one)
    for _ in range(6):
        append(log, batch(1))
    log.flush()
    assert log.recovery_point == 6
    for _ in range(3):
        append(log, batch(1))
    assert log.segment_base_offsets() == [0, 2, 4, 6, 8]
    crashed = crash_copy(log, tmp_path / "crash")
    log.close()
    recovered.clear()
    reopened = open_log(crashed, segment_bytes=2 * one)
    # the segment holding offset 6 and everything after it; 0, 2, 4 are flushed and trusted
    assert recovered == [6, 8]
    assert reopened.log_end_offset == 9
    assert reopened.recovery_point == 9  # recovered data is fsynced at open
    assert all_offsets(reopened) == list(range(9))
    reopened.close()


def test_missing_checkpoint_scans_everything(tmp_path: Path, recovered: list[int]) -> None:
    log, _ends = build(tmp_path / "t-0", segment_bytes=300)
    bases = log.segment_base_offsets()
    log.flush()
    crashed = crash_copy(log, tmp_path / "crash")
    log.close()
    (crashed / CHECKPOINT_FILE).unlink()
    recovered.clear()
    reopened = open_log(crashed, segment_bytes=300)
    assert recovered == bases
    assert reopened.log_end_offset == sum(r for r, _s in SHAPES)
    reopened.close()


def test_torn_tail_at_many_cut_points(tmp_path: Path) -> None:
    log, ends = build(tmp_path / "t-0", index_interval_bytes=50)
    crashed = crash_copy(log, tmp_path / "crash")
    log.close()
    total = ends[-1]
    starts = [0, *ends[:-1]]
    cuts = sorted(
        {c for s in starts for c in (s, s + 1, s + 11, s + 12, s + 17, s + 60, s + 61, s + 70)}
        | {e - 1 for e in ends} | {total}
    )
    offsets_end = []
    running = 0
    for records, _size in SHAPES:
        running += records
        offsets_end.append(running)
    for cut in cuts:
        if cut > total:
            continue
        case = tmp_path / f"cut-{cut}"
        shutil.copytree(crashed, case)
        os.truncate(seg_file(case, 0, ".log"), cut)
        survivors = sum(1 for e in ends if e <= cut)
        expected_end = offsets_end[survivors - 1] if survivors else 0
        reopened = open_log(case, index_interval_bytes=50)
        assert reopened.log_end_offset == expected_end, cut
        assert reopened.size_bytes == (ends[survivors - 1] if survivors else 0), cut
        assert all_offsets(reopened) == list(range(expected_end)), cut
        check_every_offset(reopened)
        # the log goes on from there, and a clean restart agrees
        append(reopened, batch(2))
        reopened.close()
        again = open_log(case, index_interval_bytes=50)
        assert all_offsets(again) == list(range(expected_end + 2)), cut
        check_every_offset(again)
        again.close()
        shutil.rmtree(case)


def test_corrupt_batch_in_the_middle_of_the_last_segment(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    log, ends = build(tmp_path / "t-0")
    crashed = crash_copy(log, tmp_path / "crash")
    log.close()
    path = seg_file(crashed, 0, ".log")
    data = bytearray(path.read_bytes())
    data[ends[2] + 70] ^= 0xFF  # a record byte of the fourth batch (offsets 6..10)
    path.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING):
        reopened = open_log(crashed)
    assert reopened.log_end_offset == 6
    assert batch_ranges(reopened.read(0, 1 << 20).data) == [(0, 0), (1, 3), (4, 5)]
    lines = [r.getMessage() for r in caplog.records if "truncated" in r.getMessage()]
    assert len(lines) == 1
    assert str(crashed) in lines[0] and "offset 6" in lines[0] and "crc" in lines[0]
    reopened.close()


def crashed_three_segments(tmp_path: Path, one: int) -> Path:
    """A ``kill -9`` copy of a log of six one-record batches of ``one`` bytes, two per
    segment (segments 0, 2, 4)."""
    log = open_log(tmp_path / "t-0", segment_bytes=2 * one)
    for _ in range(6):
        append(log, batch(1))
    assert log.segment_base_offsets() == [0, 2, 4]
    crashed = crash_copy(log, tmp_path / "crash")
    log.close()
    return crashed


def test_corruption_past_the_recovery_point_drops_later_segments(tmp_path: Path) -> None:
    one = len(batch(1))
    crashed = crashed_three_segments(tmp_path, one)
    path = seg_file(crashed, 2, ".log")
    data = bytearray(path.read_bytes())
    data[one + 30] ^= 0x01  # the second batch of segment 2 (offset 3)
    path.write_bytes(bytes(data))
    reopened = open_log(crashed, segment_bytes=2 * one)
    assert reopened.log_end_offset == 3
    assert reopened.segment_base_offsets() == [0, 2]
    assert not seg_file(crashed, 4, ".log").exists()
    assert not seg_file(crashed, 4, ".index").exists()
    assert all_offsets(reopened) == [0, 1, 2]
    append(reopened, batch(1))
    assert all_offsets(reopened) == [0, 1, 2, 3]
    reopened.close()


@pytest.mark.parametrize("kept", [0, 1])
def test_segment_emptied_by_power_loss_ends_the_log(tmp_path: Path, kept: int) -> None:
    """A power loss can leave an unflushed segment short (here: ``kept`` of its 2 batches,
    0 = empty) with no torn bytes to cut; the later segments past that gap are dropped
    (found by the storage fuzz test: the log kept its end offset with nothing readable)."""
    one = len(batch(1))
    crashed = crashed_three_segments(tmp_path, one)
    os.truncate(seg_file(crashed, 2, ".log"), kept * one)
    reopened = open_log(crashed, segment_bytes=2 * one)
    assert reopened.segment_base_offsets() == [0, 2]
    assert reopened.log_end_offset == 2 + kept
    assert not seg_file(crashed, 4, ".log").exists()
    assert all_offsets(reopened) == list(range(2 + kept))
    append(reopened, batch(1))
    assert all_offsets(reopened) == list(range(3 + kept))
    check_every_offset(reopened)
    reopened.close()


def test_base_offset_out_of_order_is_corruption(tmp_path: Path) -> None:
    """The CRC does not cover the base offset; recovery checks offsets go forward."""
    log, ends = build(tmp_path / "t-0")
    crashed = crash_copy(log, tmp_path / "crash")
    log.close()
    path = seg_file(crashed, 0, ".log")
    data = bytearray(path.read_bytes())
    struct.pack_into(">q", data, ends[1], 2)  # third batch claims offset 2 (4 is next)
    path.write_bytes(bytes(data))
    reopened = open_log(crashed)
    assert reopened.log_end_offset == 4
    reopened.close()


def test_offset_gap_past_the_recovery_point_is_corruption(tmp_path: Path) -> None:
    """The base offset is not covered by the CRC: a flipped bit that makes it jump ahead must
    end the log there, not move the log end (found by the storage fuzz test)."""
    log = open_log(tmp_path / "t-0")
    for _ in range(3):
        append(log, batch(1))
    crashed = crash_copy(log, tmp_path / "crash")
    log.close()
    path = seg_file(crashed, 0, ".log")
    data = bytearray(path.read_bytes())
    second = len(batch(1))
    data[second + 4] ^= 0x01  # base offset 1 -> 1 + 2**24
    path.write_bytes(bytes(data))
    reopened = open_log(crashed)
    assert reopened.log_end_offset == 1
    assert all_offsets(reopened) == [0]
    reopened.close()


def test_clean_restart_does_not_scan_crcs(tmp_path: Path) -> None:
    """The marker is trusted: a flipped record byte after a clean close goes unnoticed by
    open (it is the consumer's CRC check that would catch it)."""
    log, ends = build(tmp_path / "t-0")
    log.close()
    path = seg_file(tmp_path / "t-0", 0, ".log")
    data = bytearray(path.read_bytes())
    data[ends[2] + 70] ^= 0xFF
    path.write_bytes(bytes(data))
    reopened = open_log(tmp_path / "t-0")
    assert reopened.log_end_offset == sum(r for r, _s in SHAPES)
    reopened.close()


@pytest.mark.parametrize("suffix", [".index", ".timeindex"])
@pytest.mark.parametrize("damage", ["delete", "torn", "past-end", "wrong-entry"])
def test_damaged_index_files_are_rebuilt(tmp_path: Path, suffix: str, damage: str) -> None:
    one = len(batch(2))
    config: dict[str, Any] = {"segment_bytes": 10 * one, "index_interval_bytes": one}
    log = open_log(tmp_path / "t-0", **config)
    for i in range(25):
        append(log, batch(2, timestamps=[1000 + i, 1000 + i]))
    log.close()
    directory = tmp_path / "t-0"
    bases = [0, 20, 40]
    originals = {
        (b, s): seg_file(directory, b, s).read_bytes() for b in bases for s in (".index",
                                                                               ".timeindex")
    }
    for base in (0, 40):  # an inactive segment and the active one
        path = seg_file(directory, base, suffix)
        content = path.read_bytes()
        if damage == "delete":
            path.unlink()
        elif damage == "torn":
            path.write_bytes(content + b"\x01\x02\x03")
        elif damage == "past-end" and suffix == ".index":
            path.write_bytes(content + struct.pack(">ii", 99, 1 << 30))
        elif damage == "past-end":
            path.write_bytes(content + struct.pack(">qi", 10**13, 99))
        elif suffix == ".index":
            rel, pos = struct.unpack(">ii", content[-8:])
            path.write_bytes(content[:-8] + struct.pack(">ii", rel + 2, pos))
        else:
            ts, rel = struct.unpack(">qi", content[-12:])
            path.write_bytes(content[:-12] + struct.pack(">qi", ts, rel + 100))
    reopened = open_log(directory, **config)
    assert reopened.log_end_offset == 50
    check_every_offset(reopened)
    assert reopened.offset_for_timestamp(1021) == (42, 1021)
    assert reopened.max_timestamp_offset() == (48, 1024)
    reopened.close()
    for (base, s), content in originals.items():
        rebuilt = seg_file(directory, base, s).read_bytes()
        assert rebuilt == content, (base, s)


def test_orphan_index_files_are_removed(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    append(log, batch(1))
    log.close()
    orphan = seg_file(tmp_path / "t-0", 500, ".index")
    orphan.write_bytes(b"")
    unrelated = tmp_path / "t-0" / "00000000000000000000.snapshot"
    unrelated.write_bytes(b"not ours")
    open_log(tmp_path / "t-0").close()
    assert not orphan.exists()
    assert unrelated.exists()


def test_checkpoint_is_written_atomically(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_checkpoint(tmp_path, LogCheckpoint(10, 3))
    assert (tmp_path / CHECKPOINT_FILE).read_text() == (
        "version=0\nrecovery.point=10\nlog.start.offset=3\n"
    )
    assert [p.name for p in tmp_path.iterdir()] == [CHECKPOINT_FILE]

    def crash(src: object, dst: object) -> None:
        raise OSError("power cut before rename")

    monkeypatch.setattr(files.os, "replace", crash)
    with pytest.raises(OSError):
        write_checkpoint(tmp_path, LogCheckpoint(99, 50))
    monkeypatch.undo()
    assert (tmp_path / (CHECKPOINT_FILE + ".tmp")).exists()
    assert read_checkpoint(tmp_path) == LogCheckpoint(10, 3)  # the old one, whole
    assert not (tmp_path / (CHECKPOINT_FILE + ".tmp")).exists()


@pytest.mark.parametrize(
    "content", [b"", b"garbage", b"version=0\nrecovery.point=x\n", b"version=7\n", b"\xff\xfe"]
)
def test_corrupt_checkpoint_means_full_recovery(tmp_path: Path, content: bytes) -> None:
    log, _ends = build(tmp_path / "t-0", segment_bytes=300)
    log.delete_records_before(2)
    crashed = crash_copy(log, tmp_path / "crash")
    log.close()
    (crashed / CHECKPOINT_FILE).write_bytes(content)
    assert read_checkpoint(crashed) is None
    reopened = open_log(crashed, segment_bytes=300)
    assert reopened.log_end_offset == sum(r for r, _s in SHAPES)
    assert reopened.log_start_offset == 0  # lost with the checkpoint: back to the first segment
    reopened.close()


def test_log_start_offset_survives_restarts(tmp_path: Path) -> None:
    log, _ends = build(tmp_path / "t-0")
    log.delete_records_before(5)
    crashed = crash_copy(log, tmp_path / "crash")
    log.close()
    for directory in (tmp_path / "t-0", crashed):
        reopened = open_log(directory)
        assert reopened.log_start_offset == 5
        reopened.close()


def test_log_start_offset_past_recovered_end_starts_empty(tmp_path: Path) -> None:
    log, ends = build(tmp_path / "t-0")
    log.delete_records_before(log.log_end_offset)
    crashed = crash_copy(log, tmp_path / "crash")
    log.close()
    os.truncate(seg_file(crashed, 0, ".log"), ends[1])  # power loss took the unflushed tail
    reopened = open_log(crashed)
    end = sum(r for r, _s in SHAPES)
    assert (reopened.log_start_offset, reopened.log_end_offset) == (end, end)
    assert reopened.segment_base_offsets() == [end]
    assert append(reopened, batch(1)).base_offset == end
    reopened.close()


def test_recovery_point_tracks_flushes(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    append(log, batch(3))
    assert log.recovery_point == 0
    log.flush()
    assert log.recovery_point == 3
    assert read_checkpoint(tmp_path / "t-0") == LogCheckpoint(3, 0)
    log.close()


def test_recovery_rebuilds_header_list(tmp_path: Path) -> None:
    """After recovery, batch_headers sees exactly the surviving batches."""
    log, ends = build(tmp_path / "t-0")
    crashed = crash_copy(log, tmp_path / "crash")
    log.close()
    os.truncate(seg_file(crashed, 0, ".log"), ends[3] + 5)
    reopened = open_log(crashed)
    data = seg_file(crashed, 0, ".log").read_bytes()
    assert list(reopened.batch_headers(0)) == headers_of(data)
    assert len(headers_of(data)) == 4
    reopened.close()


def test_restarts_between_appends_build_the_same_offset_index(tmp_path: Path) -> None:
    """Index state (bytes since the last entry) survives a restart: a log closed and reopened
    after every append indexes exactly the batches a log that never stopped does."""
    shapes = [batch(r, value_size=s) for r, s in SHAPES * 4]
    config: dict[str, Any] = {"index_interval_bytes": 150, "segment_bytes": 900}
    steady = open_log(tmp_path / "steady", **config)
    for data in shapes:
        append(steady, data)
    steady.close()
    for data in shapes:
        log = open_log(tmp_path / "restarted", **config)
        append(log, data)
        log.close()
    names = sorted(p.name for p in (tmp_path / "steady").glob("*.index"))
    assert len(names) > 1
    assert names == sorted(p.name for p in (tmp_path / "restarted").glob("*.index"))
    for name in names:
        expected = (tmp_path / "steady" / name).read_bytes()
        assert (tmp_path / "restarted" / name).read_bytes() == expected, name
