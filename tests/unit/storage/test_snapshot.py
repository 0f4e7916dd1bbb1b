"""Producer state snapshots: format round trip, atomic files, corruption fallback, pruning,
and the file side of the manager (take_snapshot, load_state, truncate_state_after)."""

from __future__ import annotations

from collections import deque
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oncelog.clock import FakeClock
from oncelog.errors import KafkaError
from oncelog.records.batch import ATTR_TRANSACTIONAL, BatchHeader
from oncelog.storage import snapshot
from oncelog.storage.producer_entry import (
    NUM_BATCHES_TO_RETAIN,
    BatchMetadata,
    DuplicateBatch,
    ProducerStateEntry,
)
from oncelog.storage.producer_state import ProducerStateManager

NOW = 1_700_000_000_000


def batch(
    pid: int, epoch: int, seq: int, count: int, offset: int, txn: bool = False, ts: int = NOW
) -> BatchHeader:
    return BatchHeader(
        offset, 49 + count, 0, 2, 0, ATTR_TRANSACTIONAL if txn else 0, count - 1, ts, ts,
        pid, epoch, seq, count,
    )  # fmt: skip


def entry(pid: int, n_batches: int = 2, txn: int | None = None) -> ProducerStateEntry:
    batches = deque(
        (BatchMetadata(2 * i, 2 * i + 1, 100 * pid + 2 * i, 100 * pid + 2 * i + 1, NOW + i)
         for i in range(n_batches)),
        maxlen=NUM_BATCHES_TO_RETAIN,
    )  # fmt: skip
    return ProducerStateEntry(pid, 3, batches, NOW + n_batches, 7, txn)


def manager(clock: FakeClock | None = None, expiration_ms: int = 86400000) -> ProducerStateManager:
    return ProducerStateManager("t-0", clock or FakeClock(NOW), expiration_ms)


# --------------------------------------------------------------------------- module functions


def test_round_trip_and_name(tmp_path: Path) -> None:
    entries = [entry(1), entry(2, n_batches=5, txn=150), entry(3, n_batches=0)]
    path = snapshot.write_snapshot(tmp_path, 12345, entries)
    assert path.name == "00000000000000012345.snapshot"
    assert snapshot.load_latest(tmp_path) == (12345, entries)
    assert snapshot.list_snapshots(tmp_path) == [(12345, path)]
    assert not list(tmp_path.glob("*.tmp"))


def test_empty_state_round_trip(tmp_path: Path) -> None:
    snapshot.write_snapshot(tmp_path, 0, [])
    assert snapshot.load_latest(tmp_path) == (0, [])


def test_no_snapshot(tmp_path: Path) -> None:
    assert snapshot.load_latest(tmp_path) is None
    assert snapshot.load_latest(tmp_path / "missing") is None
    assert snapshot.list_snapshots(tmp_path / "missing") == []


def test_newest_wins_and_max_offset(tmp_path: Path) -> None:
    snapshot.write_snapshot(tmp_path, 10, [entry(1)])
    snapshot.write_snapshot(tmp_path, 20, [entry(2)])
    snapshot.write_snapshot(tmp_path, 30, [entry(3)])
    assert snapshot.load_latest(tmp_path) == (30, [entry(3)])
    assert snapshot.load_latest(tmp_path, max_offset=29) == (20, [entry(2)])
    assert snapshot.load_latest(tmp_path, max_offset=5) is None
    assert [o for o, _ in snapshot.list_snapshots(tmp_path)] == [10, 20, 30]  # none deleted


def _corrupt_flip(path: Path, at: int) -> None:
    data = bytearray(path.read_bytes())
    data[at % len(data)] ^= 0x01
    path.write_bytes(bytes(data))


def _corrupt_truncate(path: Path, at: int) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: at % len(data)])


@pytest.mark.parametrize("corrupt", [_corrupt_flip, _corrupt_truncate])
@pytest.mark.parametrize("at", [0, 1, 2, 5, 6, 13, 30, 47, -1])
def test_corrupt_newest_falls_back_to_older(tmp_path: Path, corrupt: object, at: int) -> None:
    assert callable(corrupt)
    snapshot.write_snapshot(tmp_path, 10, [entry(1)])
    newest = snapshot.write_snapshot(tmp_path, 20, [entry(2, n_batches=3)])
    corrupt(newest, at)
    assert snapshot.load_latest(tmp_path) == (10, [entry(1)])
    assert not newest.exists(), "a corrupt snapshot is deleted"


def test_all_corrupt_gives_none(tmp_path: Path) -> None:
    for o in (10, 20):
        _corrupt_flip(snapshot.write_snapshot(tmp_path, o, [entry(1)]), 9)
    assert snapshot.load_latest(tmp_path) is None
    assert snapshot.list_snapshots(tmp_path) == []


def test_renamed_file_is_rejected(tmp_path: Path) -> None:
    path = snapshot.write_snapshot(tmp_path, 10, [entry(1)])
    path.rename(snapshot.snapshot_path(tmp_path, 11))
    assert snapshot.load_latest(tmp_path) is None


def test_unknown_version_is_rejected() -> None:
    data = bytearray(snapshot.encode(5, [entry(1)]))
    data[1] = 9
    with pytest.raises(snapshot.CorruptSnapshotError):
        snapshot.decode(bytes(data))


def test_leftover_temp_file_is_ignored_and_removed(tmp_path: Path) -> None:
    snapshot.write_snapshot(tmp_path, 10, [entry(1)])
    tmp = tmp_path / f"{20:020d}{snapshot.TEMP_SUFFIX}"
    tmp.write_bytes(snapshot.encode(20, [entry(2)])[:7])  # a crash mid-write
    assert [o for o, _ in snapshot.list_snapshots(tmp_path)] == [10]
    assert snapshot.load_latest(tmp_path) == (10, [entry(1)])
    assert not tmp.exists()


def test_other_files_are_ignored(tmp_path: Path) -> None:
    (tmp_path / "00000000000000000000.log").write_bytes(b"x")
    (tmp_path / "abc.snapshot").write_bytes(b"x")
    assert snapshot.list_snapshots(tmp_path) == []


def test_delete_after_before_and_keep_latest(tmp_path: Path) -> None:
    for o in (10, 20, 30, 40, 50):
        snapshot.write_snapshot(tmp_path, o, [])

    def offsets() -> list[int]:
        return [o for o, _ in snapshot.list_snapshots(tmp_path)]

    assert snapshot.delete_snapshots_after(tmp_path, 40) == [50]
    assert snapshot.delete_snapshots_after(tmp_path, 40) == []
    assert snapshot.delete_snapshots_before(tmp_path, 20) == [10]
    assert offsets() == [20, 30, 40]
    assert snapshot.keep_latest(tmp_path, 2) == [20]
    assert offsets() == [30, 40]
    assert snapshot.keep_latest(tmp_path, 5) == []
    assert snapshot.keep_latest(tmp_path, 0) == [30, 40]


# --------------------------------------------------------------------------- the manager


def test_manager_snapshot_round_trip_keeps_duplicate_detection(tmp_path: Path) -> None:
    m = manager()
    offset = 0
    for i in range(7):
        h = batch(pid=1, epoch=0, seq=3 * i, count=3, offset=offset)
        m.check(h)
        m.update(h)
        offset = h.next_offset
    m.update(batch(pid=2, epoch=4, seq=0, count=1, offset=offset, txn=True))
    snapshot.take_snapshot(m, tmp_path, offset + 1)
    assert m.last_snapshot_offset == offset + 1

    restarted = manager()
    assert snapshot.load_state(restarted, tmp_path) == offset + 1
    assert restarted.entries() == m.entries()
    assert restarted.last_snapshot_offset == offset + 1
    assert restarted.map_end_offset == offset + 1
    # All 5 retained batches are still recognised as duplicates after the restart.
    for i in range(2, 7):
        dup = restarted.check(batch(pid=1, epoch=0, seq=3 * i, count=3, offset=999))
        assert dup == DuplicateBatch(3 * i, 3 * i + 2, NOW)
    assert restarted.ongoing_txn_first_offsets() == [offset]


def test_manager_keeps_two_snapshots_by_default(tmp_path: Path) -> None:
    m = manager()
    for o in (1, 2, 3, 4):
        m.update(batch(pid=1, epoch=0, seq=o - 1, count=1, offset=o - 1))
        snapshot.take_snapshot(m, tmp_path, o)
    assert [o for o, _ in snapshot.list_snapshots(tmp_path)] == [3, 4]


def test_snapshot_must_cover_the_applied_state(tmp_path: Path) -> None:
    m = manager()
    m.update(batch(pid=1, epoch=0, seq=0, count=5, offset=0))
    with pytest.raises(ValueError):
        snapshot.take_snapshot(m, tmp_path, 4)


def test_load_drops_expired_producers(tmp_path: Path) -> None:
    clock = FakeClock(NOW)
    m = manager(clock, expiration_ms=1000)
    m.update(batch(pid=1, epoch=0, seq=0, count=1, offset=0, ts=NOW))
    m.update(batch(pid=2, epoch=0, seq=0, count=1, offset=1, ts=NOW + 600))
    m.update(batch(pid=3, epoch=0, seq=0, count=1, offset=2, ts=NOW, txn=True))
    snapshot.take_snapshot(m, tmp_path, 3)
    clock.advance(1000)
    restarted = manager(clock, expiration_ms=1000)
    assert snapshot.load_state(restarted, tmp_path) == 3
    assert sorted(restarted.entries()) == [2, 3]


def test_load_without_snapshot_means_full_scan(tmp_path: Path) -> None:
    m = manager()
    m.update(batch(pid=1, epoch=0, seq=0, count=1, offset=0))
    assert snapshot.load_state(m, tmp_path) == 0
    assert len(m) == 0


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(1, 6), st.booleans(), st.integers(1, 5), st.booleans()),
        max_size=40,
    )
)
def test_random_valid_appends_survive_a_snapshot_round_trip(
    tmp_path_factory: pytest.TempPathFactory, steps: list[tuple[int, bool, int, bool]]
) -> None:
    directory = tmp_path_factory.mktemp("snap")
    m = manager()
    offset = 0
    for pid, bump, count, txn in steps:
        e = m.last_entry(pid)
        if e is None:
            epoch, seq = 0, 0
        elif bump:
            if e.current_txn_first_offset is not None:
                # The coordinator ends the transaction (bumping the epoch) first.
                m.update_end_txn_marker(pid, e.producer_epoch + 1, 0, offset, NOW, True)
                offset += 1
                epoch = e.producer_epoch
            else:
                epoch = e.producer_epoch + 1
            seq = 0
        else:
            epoch, seq = e.producer_epoch, (e.last_seq + 1) % 2**31
        in_txn = e is not None and e.current_txn_first_offset is not None
        h = batch(pid, epoch, seq, count, offset, txn=txn or in_txn)
        try:
            assert m.check(h) is None
        except KafkaError as exc:  # pragma: no cover - would be a bug in the rules
            raise AssertionError(f"valid append refused: {exc}") from exc
        m.update(h)
        offset = h.next_offset
    snapshot.take_snapshot(m, directory, offset)
    restarted = manager()
    assert snapshot.load_state(restarted, directory) == offset
    assert restarted.entries() == m.entries()
    assert restarted.active_producers() == m.active_producers()


def test_encode_in_place_write_elsewhere(tmp_path: Path) -> None:
    """The split used to fsync off the event loop: bytes are taken first, so appends made
    while the write runs are not in this snapshot."""
    m = manager()
    m.update(batch(pid=1, epoch=0, seq=0, count=2, offset=0))
    expected = m.entries()
    data = snapshot.encode_state(m, 2)
    m.update(batch(pid=1, epoch=0, seq=2, count=1, offset=2))  # after the bytes were taken
    snapshot.write_encoded(tmp_path, 2, data)
    m.on_snapshot_written(2)
    assert m.last_snapshot_offset == 2
    restarted = manager()
    assert snapshot.load_state(restarted, tmp_path) == 2
    assert restarted.entries() == expected
