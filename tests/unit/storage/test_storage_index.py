"""OffsetIndex / TimeIndex: Kafka byte layouts, bisect lookups, truncation, torn files."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from oncelog.storage.index import CorruptIndexError, OffsetIndex, TimeIndex


def offset_index(tmp_path: Path, entries: list[tuple[int, int]]) -> OffsetIndex:
    index = OffsetIndex(tmp_path / "0.index")
    for rel, pos in entries:
        index.append(rel, pos)
    index.write_pending()
    return index


ENTRIES = [(9, 4200), (19, 8500), (29, 12800)]


def test_offset_index_file_is_kafka_layout(tmp_path: Path) -> None:
    offset_index(tmp_path, ENTRIES).close()
    data = (tmp_path / "0.index").read_bytes()
    assert data == b"".join(struct.pack(">ii", rel, pos) for rel, pos in ENTRIES)


@pytest.mark.parametrize(
    ("target", "position"),
    [
        (0, 0),  # before the first entry: scan from the start of the segment
        (8, 0),
        (9, 4200),  # exact
        (10, 4200),  # between entries
        (18, 4200),
        (19, 8500),
        (29, 12800),
        (1000, 12800),  # past the last entry
    ],
)
def test_offset_index_lookup(tmp_path: Path, target: int, position: int) -> None:
    assert offset_index(tmp_path, ENTRIES).lookup(target) == position


def test_offset_index_lookup_empty(tmp_path: Path) -> None:
    assert offset_index(tmp_path, []).lookup(5) == 0


@pytest.mark.parametrize(
    ("position", "floor"), [(0, 0), (4199, 0), (4200, 4200), (8499, 4200), (99999, 12800)]
)
def test_offset_index_floor_position(tmp_path: Path, position: int, floor: int) -> None:
    assert offset_index(tmp_path, ENTRIES).floor_position(position) == floor


def test_offset_index_roundtrip_and_truncate(tmp_path: Path) -> None:
    index = offset_index(tmp_path, ENTRIES)
    index.close()
    loaded = OffsetIndex.load(tmp_path / "0.index")
    assert list(loaded.offsets) == [9, 19, 29]
    assert list(loaded.positions) == [4200, 8500, 12800]
    loaded.truncate_to_position(8500)
    assert loaded.last() == (9, 4200)
    assert (tmp_path / "0.index").stat().st_size == 8
    loaded.append(15, 6000)
    loaded.close()
    assert list(OffsetIndex.load(tmp_path / "0.index").offsets) == [9, 15]


def test_offset_index_rewrite(tmp_path: Path) -> None:
    index = offset_index(tmp_path, ENTRIES)
    index.reset()
    index.append(3, 100)
    index.rewrite()
    assert (tmp_path / "0.index").read_bytes() == struct.pack(">ii", 3, 100)


def test_torn_or_missing_index_is_corrupt(tmp_path: Path) -> None:
    with pytest.raises(CorruptIndexError, match="missing"):
        OffsetIndex.load(tmp_path / "0.index")
    (tmp_path / "0.index").write_bytes(struct.pack(">ii", 1, 2) + b"\x00\x01\x02")
    with pytest.raises(CorruptIndexError, match="multiple of 8"):
        OffsetIndex.load(tmp_path / "0.index")
    (tmp_path / "0.timeindex").write_bytes(b"\x00" * 13)
    with pytest.raises(CorruptIndexError, match="multiple of 12"):
        TimeIndex.load(tmp_path / "0.timeindex")


def test_time_index_layout_monotonic_and_lookup(tmp_path: Path) -> None:
    index = TimeIndex(tmp_path / "0.timeindex")
    index.maybe_append(1000, 4)
    index.maybe_append(1000, 9)  # not larger: skipped
    index.maybe_append(900, 12)  # smaller: skipped
    index.maybe_append(-1, 13)  # no timestamp: skipped
    index.maybe_append(2000, 20)
    index.close()
    data = (tmp_path / "0.timeindex").read_bytes()
    assert data == struct.pack(">qi", 1000, 4) + struct.pack(">qi", 2000, 20)
    loaded = TimeIndex.load(tmp_path / "0.timeindex")
    assert loaded.last() == (2000, 20)
    assert loaded.last_offset_below(1000) is None
    assert loaded.last_offset_below(1001) == 4
    assert loaded.last_offset_below(2000) == 4
    assert loaded.last_offset_below(2001) == 20
    loaded.truncate_to_offset(20)
    assert loaded.last() == (1000, 4)
    assert (tmp_path / "0.timeindex").stat().st_size == 12
