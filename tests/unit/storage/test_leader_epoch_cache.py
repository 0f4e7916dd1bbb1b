"""The leader-epoch cache (Kafka's LeaderEpochFileCache): the cases of Kafka's
LeaderEpochFileCacheTest, the checkpoint file's text format, and a property: after any
sequence of appends and truncations the cache answers like a model computed from the
batches themselves."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oncelog.storage.leader_epoch import (
    CHECKPOINT_FILE,
    EpochEntry,
    LeaderEpochCache,
    decode_checkpoint,
    encode_checkpoint,
    read_checkpoint,
    write_checkpoint,
)

UNDEFINED = (-1, -1)


def cache_of(*pairs: tuple[int, int]) -> LeaderEpochCache:
    cache = LeaderEpochCache("t-0")
    for epoch, offset in pairs:
        cache.assign(epoch, offset)
    return cache


def pairs(cache: LeaderEpochCache) -> list[tuple[int, int]]:
    return [(e.epoch, e.start_offset) for e in cache.entries]


# -- assign --------------------------------------------------------------------------------
def test_same_epoch_at_a_later_offset_is_ignored() -> None:
    cache = cache_of((2, 6))
    assert not cache.assign(2, 7)
    assert pairs(cache) == [(2, 6)]


def test_same_epoch_at_an_earlier_offset_replaces_it() -> None:
    cache = cache_of((2, 6))
    assert cache.assign(2, 5)
    assert pairs(cache) == [(2, 5)]


def test_an_older_epoch_removes_newer_entries() -> None:
    cache = cache_of((2, 6), (3, 8), (4, 11))
    assert cache.assign(3, 9)  # epochs >= 3 go
    assert pairs(cache) == [(2, 6), (3, 9)]


def test_a_newer_epoch_at_a_lower_offset_removes_entries_starting_at_or_after_it() -> None:
    cache = cache_of((2, 6), (3, 8))
    assert cache.assign(4, 7)
    assert pairs(cache) == [(2, 6), (4, 7)]


def test_negative_epochs_or_offsets_are_refused() -> None:
    cache = LeaderEpochCache("t-0")
    with pytest.raises(ValueError):
        cache.assign(-1, 0)
    with pytest.raises(ValueError):
        cache.assign(0, -1)
    assert not cache.assign_if_newer(-1, 5)  # a batch without an epoch
    assert cache.entries == []


def test_assign_if_newer_only_adds_newer_epochs() -> None:
    cache = cache_of((2, 6), (3, 8))
    assert not cache.assign_if_newer(2, 9)
    assert not cache.assign_if_newer(3, 9)
    assert cache.assign_if_newer(5, 12)
    assert pairs(cache) == [(2, 6), (3, 8), (5, 12)]


# -- end_offset_for ---------------------------------------------------------------------------
def test_end_offset_for_undefined_epoch_and_empty_cache() -> None:
    assert cache_of((2, 6)).end_offset_for(-1, 20) == UNDEFINED
    assert LeaderEpochCache("t-0").end_offset_for(0, 20) == UNDEFINED


def test_end_offset_for_the_latest_epoch_is_the_log_end() -> None:
    assert cache_of((2, 6), (4, 11)).end_offset_for(4, 20) == (4, 20)


def test_end_offset_for_an_epoch_above_every_known_one_is_undefined() -> None:
    assert cache_of((2, 6), (4, 11)).end_offset_for(5, 20) == UNDEFINED


def test_end_offset_for_an_older_epoch_is_the_start_of_the_next() -> None:
    cache = cache_of((2, 6), (4, 11), (7, 15))
    assert cache.end_offset_for(2, 20) == (2, 11)
    assert cache.end_offset_for(4, 20) == (4, 15)


def test_end_offset_for_an_unknown_epoch_between_two_is_the_floor_epoch() -> None:
    cache = cache_of((2, 6), (4, 11), (7, 15))
    assert cache.end_offset_for(3, 20) == (2, 11)
    assert cache.end_offset_for(5, 20) == (4, 15)


def test_end_offset_for_an_epoch_below_every_known_one() -> None:
    # The log start was removed: the requested epoch with the first known epoch's start.
    assert cache_of((2, 6), (4, 11)).end_offset_for(1, 20) == (1, 6)


# -- truncation ---------------------------------------------------------------------------------
def test_truncate_from_end() -> None:
    cache = cache_of((2, 6), (3, 8), (4, 11))
    cache.truncate_from_end(9)
    assert pairs(cache) == [(2, 6), (3, 8)]
    cache.truncate_from_end(8)  # an entry starting exactly at the new end goes
    assert pairs(cache) == [(2, 6)]
    cache.truncate_from_end(100)
    assert pairs(cache) == [(2, 6)]


def test_truncate_from_start_keeps_the_epoch_holding_the_new_start() -> None:
    cache = cache_of((2, 6), (3, 8), (4, 11))
    cache.truncate_from_start(9)
    assert pairs(cache) == [(3, 9), (4, 11)]
    cache.truncate_from_start(11)
    assert pairs(cache) == [(4, 11)]
    cache.truncate_from_start(5)  # below every entry: nothing changes
    assert pairs(cache) == [(4, 11)]


# -- the checkpoint file -----------------------------------------------------------------------
def test_checkpoint_text_format_is_kafkas() -> None:
    entries = [EpochEntry(0, 0), EpochEntry(3, 120)]
    assert encode_checkpoint(entries) == b"0\n2\n0 0\n3 120\n"
    assert decode_checkpoint(b"0\n2\n0 0\n3 120\n") == entries
    assert decode_checkpoint(b"0\n0\n") == []


@pytest.mark.parametrize("data", [
    b"", b"1\n0\n", b"0\n2\n0 0\n", b"0\n1\n0\n", b"0\n2\n3 5\n2 9\n", b"0\n1\nx y\n",
    b"\xff\xfe", b"0\n1\n-1 0\n",
])
def test_damaged_checkpoint_reads_as_none(tmp_path: Path, data: bytes) -> None:
    (tmp_path / CHECKPOINT_FILE).write_bytes(data)
    assert read_checkpoint(tmp_path) is None


def test_checkpoint_round_trip_and_missing_file(tmp_path: Path) -> None:
    assert read_checkpoint(tmp_path) is None
    write_checkpoint(tmp_path, [EpochEntry(1, 4)])
    assert read_checkpoint(tmp_path) == [EpochEntry(1, 4)]


def test_every_change_is_persisted() -> None:
    written: list[list[EpochEntry]] = []
    cache = LeaderEpochCache("t-0", persist=written.append)
    cache.assign(0, 0)
    cache.assign(0, 5)  # no change, no write
    cache.assign(1, 5)
    cache.truncate_from_end(5)
    cache.truncate_from_start(3)
    assert written == [
        [EpochEntry(0, 0)],
        [EpochEntry(0, 0), EpochEntry(1, 5)],
        [EpochEntry(0, 0)],
        [EpochEntry(0, 3)],
    ]


# -- property: the cache follows a model built from the batches -----------------------------
@dataclass
class _ModelLog:
    """Batches as (base offset, epoch), the epochs of a leader-only history: appends at a
    non-decreasing epoch, truncation from the end (a follower's), and from the start."""

    batches: list[tuple[int, int]]
    start: int = 0
    end: int = 0

    def entries(self) -> list[tuple[int, int]]:
        out: list[tuple[int, int]] = []
        for base, epoch in self.batches:
            if not out or epoch > out[-1][0]:
                if out and out[-1][1] == base:  # an epoch that wrote nothing is replaced
                    out.pop()
                out.append((epoch, max(base, self.start)))
        return out


_ops = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(0, 3), st.integers(1, 4)),
        st.tuples(st.just("truncate_end"), st.integers(0, 40), st.just(0)),
        st.tuples(st.just("truncate_start"), st.integers(0, 40), st.just(0)),
    ),
    max_size=30,
)


@settings(max_examples=300, deadline=None)
@given(_ops)
def test_cache_answers_like_a_model_of_the_batches(ops: list[tuple[str, int, int]]) -> None:
    model = _ModelLog([])
    cache = LeaderEpochCache("t-0")
    epoch = 0
    for op, a, b in ops:
        if op == "append":
            epoch += a  # epochs never go back on a leader
            model.batches.append((model.end, epoch))
            cache.assign(epoch, model.end)
            model.end += b
        elif op == "truncate_end":
            # Cut at a batch boundary at or below ``a`` (the log keeps whole batches).
            cut = max([base for base, _ in model.batches if base <= a] or [model.start])
            if cut < model.end:
                model.batches = [(o, e) for o, e in model.batches if o < cut]
                model.end = max(cut, model.start)
                cache.truncate_from_end(model.end)
                epoch = max([e for _, e in model.batches] or [epoch])
        else:
            new_start = min(a, model.end)
            if new_start > model.start:
                model.start = new_start
                kept = [(o, e) for o, e in model.batches if o >= new_start]
                holding = [(o, e) for o, e in model.batches if o < new_start]
                if holding and (not kept or kept[0][0] > new_start):
                    kept.insert(0, (new_start, holding[-1][1]))
                model.batches = kept
                cache.truncate_from_start(new_start)
        assert pairs(cache) == model.entries()
        for asked in range(-1, epoch + 2):
            assert cache.end_offset_for(asked, model.end) == _model_end_offset(
                model.entries(), asked, model.end
            )


def _model_end_offset(entries: list[tuple[int, int]], asked: int, end: int) -> tuple[int, int]:
    if asked < 0 or not entries:
        return UNDEFINED
    if entries[-1][0] == asked:
        return asked, end
    later = [start for e, start in entries if e > asked]
    if not later:
        return UNDEFINED
    floor = [e for e, _ in entries if e <= asked]
    return (floor[-1] if floor else asked), later[0]
