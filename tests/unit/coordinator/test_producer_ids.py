"""ProducerIdManager: ids are unique forever, blocks are durable before use."""

from __future__ import annotations

from pathlib import Path

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oncelog.coordinator.producer_ids import ProducerIdFileError, ProducerIdManager
from oncelog.storage import files


def test_ids_are_sequential_from_zero(tmp_path: Path) -> None:
    m = ProducerIdManager(tmp_path / "producer_ids", block_size=3)
    assert [m.next_id() for _ in range(7)] == list(range(7))


def test_block_is_recorded_before_its_first_id(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "sub" / "producer_ids"
    m = ProducerIdManager(path, block_size=10)
    assert not path.exists(), "nothing reserved before the first id"
    recorded: list[int] = []
    real_write = m._write

    def spy(value: int) -> None:
        real_write(value)
        recorded.append(ProducerIdManager(path, block_size=10)._read())

    monkeypatch.setattr(m, "_write", spy)
    ids = [m.next_id() for _ in range(25)]
    assert recorded == [10, 20, 30]
    assert all(i < max(recorded) for i in ids)


def test_restart_skips_the_rest_of_the_block(tmp_path: Path) -> None:
    path = tmp_path / "producer_ids"
    m = ProducerIdManager(path, block_size=100)
    assert [m.next_id() for _ in range(3)] == [0, 1, 2]
    m2 = ProducerIdManager(path, block_size=100)
    assert m2.next_id() == 100


def test_failed_write_hands_out_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "producer_ids"
    m = ProducerIdManager(path, block_size=5)
    assert m.next_id() == 0

    def broken(*args: object) -> None:
        raise OSError("disk full")

    for _ in range(4):
        m.next_id()
    monkeypatch.setattr(files.os, "replace", broken)
    with pytest.raises(OSError):
        m.next_id()
    monkeypatch.undo()
    # Still unrecorded ids are never handed out: after a restart we start at 5.
    assert ProducerIdManager(path, block_size=5).next_id() == 5
    assert m.next_id() == 5


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 9), st.integers(0, 30)), min_size=1, max_size=8))
def test_no_reuse_across_simulated_crashes(
    tmp_path_factory: pytest.TempPathFactory, lives: list[tuple[int, int]]
) -> None:
    """Each life opens the file, hands out some ids and 'crashes' (is dropped)."""
    path = tmp_path_factory.mktemp("pid") / "producer_ids"
    handed: list[int] = []
    for block_size, count in lives:
        m = ProducerIdManager(path, block_size=block_size)
        ids = [m.next_id() for _ in range(count)]
        if handed and ids:
            assert ids[0] > max(handed)
        handed.extend(ids)
    assert len(handed) == len(set(handed))
    assert handed == sorted(handed)


def test_leftover_temp_file_is_removed(tmp_path: Path) -> None:
    path = tmp_path / "producer_ids"
    ProducerIdManager(path, block_size=4).next_id()
    tmp = tmp_path / "producer_ids.tmp"
    tmp.write_bytes(b"1 999")  # a crash mid-write of the next block
    m = ProducerIdManager(path, block_size=4)
    assert not tmp.exists()
    assert m.next_id() == 4


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"garbage",
        b"1 100\n",
        b"1 100 00000000\n",
        b"\xff\xfe",
        f"2 100 {crc32c.crc32c(b'2 100'):08x}\n".encode(),  # a version we don't know
        f"1 -5 {crc32c.crc32c(b'1 -5'):08x}\n".encode(),
    ],
)
def test_unreadable_file_refuses_to_start(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "producer_ids"
    path.write_bytes(content)
    with pytest.raises(ProducerIdFileError):
        ProducerIdManager(path)


def test_flipped_digit_is_detected(tmp_path: Path) -> None:
    path = tmp_path / "producer_ids"
    ProducerIdManager(path, block_size=1000).next_id()
    path.write_bytes(path.read_bytes().replace(b"1000", b"0000"))
    with pytest.raises(ProducerIdFileError):
        ProducerIdManager(path)


def test_block_size_must_be_positive(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        ProducerIdManager(tmp_path / "p", block_size=0)
