"""The log cleaner over hand-built logs: one test per rule (oncelog.storage.cleaner*)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from oncelog.clock import FakeClock
from oncelog.config import LogConfig
from oncelog.records.batch import parse_header
from oncelog.records.codec import RecordInput, encode_batch, iter_records
from oncelog.storage.cleaner import CleanableRange, SegmentInfo, cleanable_range, should_clean
from oncelog.storage.cleaner_run import (
    CHECKPOINT_NAME,
    CleanAborted,
    clean_now,
    discard_prepared,
    plan_clean,
    prepare_clean,
)
from oncelog.storage.cleaner_txn import delete_horizon
from oncelog.storage.engine import IsolationLevel
from oncelog.storage.log import PartitionLog
from oncelog.storage.unified_log import UnifiedLog

T0 = 1_700_000_000_000
DAY = 86_400_000


class Writer:
    """Appends keyed batches: plain, idempotent or transactional, and markers."""

    def __init__(self, engine: UnifiedLog) -> None:
        self.engine = engine
        self.seq: dict[int, int] = {}

    def put(self, key: str, value: str | None, *, pid: int = -1, txn: bool = False) -> int:
        seq = self.seq.get(pid, 0) if pid >= 0 else -1
        data = bytearray(encode_batch(
            [RecordInput(key.encode(), None if value is None else value.encode(),
                         timestamp=T0)],
            producer_id=pid, producer_epoch=0 if pid >= 0 else -1, base_sequence=seq,
            transactional=txn,
        ))
        if pid >= 0:
            self.seq[pid] = seq + 1
        return self.engine.append(data, [parse_header(data)]).base_offset

    def end(self, pid: int, commit: bool) -> int:
        return self.engine.append_marker(pid, 0, 0, commit)


def open_engine(directory: Path, clock: FakeClock, **config: object) -> UnifiedLog:
    settings: dict[str, object] = {
        "cleanup_policy": "compact", "segment_bytes": 150, "min_cleanable_dirty_ratio": 0.0,
    }
    settings.update(config)
    return UnifiedLog.open(directory, LogConfig(**settings), clock)  # type: ignore[arg-type]


Batch = tuple[int, int, bool, int, list[tuple[bytes | None, bytes | None]]]


def batches(engine: UnifiedLog) -> list[Batch]:
    """(base, last, control, producer id, [(key, value)]) of every batch in the log."""
    data = engine.read(engine.log_start_offset, 1 << 24).data
    return [(h.base_offset, h.last_offset, h.is_control, h.producer_id,
             [(r.key, r.value) for r in records]) for h, records in iter_records(data)]


def committed_view(engine: UnifiedLog) -> dict[bytes, bytes | None]:
    """What a read_committed consumer reading from the start ends with, per key."""
    fetched = engine.read(engine.log_start_offset, 1 << 24, IsolationLevel.READ_COMMITTED)
    aborted = fetched.aborted or []
    view: dict[bytes, bytes | None] = {}
    for h, records in iter_records(fetched.data):
        if h.is_control:
            continue
        if any(t.producer_id == h.producer_id and t.first_offset <= h.base_offset
               <= t.last_offset for t in aborted):
            continue
        for r in records:
            assert r.key is not None
            view[r.key] = r.value
    return view


def clean(engine: UnifiedLog, clock: FakeClock) -> None:
    engine.flush()  # only flushed segments are cleaned
    clean_now(engine, now_ms=clock.now_ms())


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0)


def test_superseded_records_go_latest_stay(tmp_path: Path, clock: FakeClock) -> None:
    engine = open_engine(tmp_path / "p", clock)
    w = Writer(engine)
    for i in range(6):
        w.put(f"k{i % 2}", f"v{i}")
    w.put("other", "x")  # the active segment: never cleaned
    before = committed_view(engine)
    clean(engine, clock)
    kept = [kv for b in batches(engine) for kv in b[4]]
    assert kept == [(b"k0", b"v4"), (b"k1", b"v5"), (b"other", b"x")]
    assert committed_view(engine) == before


def test_aborted_records_go_marker_and_index_stay_then_marker_goes(
    tmp_path: Path, clock: FakeClock
) -> None:
    engine = open_engine(tmp_path / "p", clock)
    w = Writer(engine)
    w.put("a", "committed")
    w.put("a", "aborted", pid=1, txn=True)
    w.put("b", "aborted", pid=1, txn=True)
    abort = w.end(1, commit=False)
    w.put("a", "plain-again", pid=2)  # producer 2's last batch
    w.put("z", "active")
    w.put("zz", "active")
    clean(engine, clock)
    values = [kv for b in batches(engine) for kv in b[4] if not b[2]]
    assert (b"a", b"aborted") not in values and (b"b", b"aborted") not in values
    # The ABORT marker stays while a batch of its transaction was seen (here: the last one
    # of producer 1, kept empty), and so does its index entry.
    assert any(b[0] == abort and b[2] for b in batches(engine))
    assert [t.last_offset for t in engine.aborted_transactions(0, abort + 1)] == [abort]
    assert committed_view(engine)[b"a"] == b"plain-again"


def test_commit_marker_goes_after_data_gone_and_horizon(tmp_path: Path, clock: FakeClock) -> None:
    engine = open_engine(tmp_path / "p", clock)
    w = Writer(engine)
    w.put("a", "t1", pid=1, txn=True)
    commit = w.end(1, commit=True)
    w.put("x", "p", pid=1)  # producer 1's last data batch is a later, plain one
    w.put("a", "later")
    w.put("y", "active")
    w.put("yy", "active")
    clean(engine, clock)  # the txn's batch is superseded: gone; its marker was seen with it
    assert any(b[0] == commit for b in batches(engine))
    w.put("y2", "dirty")  # passes only run over a dirty log
    w.put("y3", "active")
    clean(engine, clock)  # no batch of it left: the marker gets a delete horizon
    marker = [b for b in batches(engine) if b[0] == commit]
    assert marker
    data = engine.read(commit, 1 << 20).data
    assert delete_horizon(parse_header(data)) == clock.now_ms() + DAY
    clock.advance(DAY + 1)
    w.put("y4", "dirty")
    w.put("y5", "active")
    clean(engine, clock)
    assert not [b for b in batches(engine) if b[0] == commit]
    assert committed_view(engine)[b"a"] == b"later"


def test_tombstone_kept_until_delete_retention_after_clean(
    tmp_path: Path, clock: FakeClock
) -> None:
    engine = open_engine(tmp_path / "p", clock)
    w = Writer(engine)
    w.put("a", "v1")
    w.put("a", None)
    w.put("b", "v")
    w.put("c", "active")
    w.put("cc", "active")
    clean(engine, clock)
    assert committed_view(engine) == {b"a": None, b"b": b"v", b"c": b"active",
                                      b"cc": b"active"}
    clock.advance(DAY - 1)
    clean(engine, clock)
    assert b"a" in committed_view(engine)
    clock.advance(2)
    w.put("d", "more")  # make the log dirty again
    w.put("dd", "more")
    clean(engine, clock)
    assert b"a" not in committed_view(engine)


def test_last_batch_of_producer_kept_empty_and_state_survives_restart(
    tmp_path: Path, clock: FakeClock
) -> None:
    engine = open_engine(tmp_path / "p", clock)
    w = Writer(engine)
    w.put("a", "v1", pid=7)
    last = w.put("a", "v2", pid=7)
    w.put("a", "v3")  # supersedes producer 7's last batch
    w.put("q", "active")
    w.put("qq", "active")
    clean(engine, clock)
    empty = [b for b in batches(engine) if b[0] == last]
    assert empty == [(last, last, False, 7, [])]
    state = engine.producer_state.entries()[7]
    engine.close()
    for snapshot in (tmp_path / "p").glob("*.snapshot"):
        snapshot.unlink()  # rebuild from the cleaned log alone
    reopened = open_engine(tmp_path / "p", clock)
    assert reopened.producer_state.entries()[7].last_seq == state.last_seq == 1
    assert reopened.producer_state.entries()[7].last_offset == last
    reopened.close()


STEPS = ["swap.range", "swap.sidecars", "swap.log", "swap.delete", "swap.rename"]


class Crash(Exception):
    pass


@pytest.mark.parametrize("step", STEPS)
def test_crash_at_every_swap_step_leaves_old_or_new(
    tmp_path: Path, clock: FakeClock, step: str
) -> None:
    engine = open_engine(tmp_path / "p", clock)
    w = Writer(engine)
    for i in range(8):
        w.put(f"k{i % 3}", f"v{i}")
    w.put("a", "x", pid=1, txn=True)
    w.end(1, commit=False)
    w.put("z", "active")
    w.put("zz", "active")
    engine.flush()
    before = batches(engine)
    view = committed_view(engine)

    def crash(name: str) -> None:
        if name == step:
            shutil.copytree(tmp_path / "p", tmp_path / "crashed")
            raise Crash(name)

    with pytest.raises(Crash):
        clean_now(engine, now_ms=clock.now_ms(), step=crash)
    reopened = open_engine(tmp_path / "crashed", clock)
    after = batches(reopened)
    committed_after = STEPS.index(step) > STEPS.index("swap.log")
    if committed_after:
        assert after != before and len(after) < len(before)
    else:
        assert after == before
    assert committed_view(reopened) == view
    assert not list((tmp_path / "crashed").glob("*.swap*"))
    assert not list((tmp_path / "crashed").glob("*.cleaned"))
    reopened.close()


def test_restart_after_clean_rebuilds_same_state(tmp_path: Path, clock: FakeClock) -> None:
    engine = open_engine(tmp_path / "p", clock)
    w = Writer(engine)
    for i in range(5):
        w.put(f"k{i % 2}", f"v{i}", pid=3, txn=True)
        w.end(3, commit=i % 2 == 0)
    w.put("z", "active")
    w.put("zz", "active")
    clean(engine, clock)
    view, aborted = committed_view(engine), engine.aborted_transactions(0, 1 << 30)
    state = engine.producer_state.entries()
    lso = engine.last_stable_offset
    engine.close()
    reopened = open_engine(tmp_path / "p", clock)
    assert committed_view(reopened) == view
    assert reopened.aborted_transactions(0, 1 << 30) == aborted
    assert reopened.producer_state.entries().keys() == state.keys()
    assert reopened.last_stable_offset == lso
    reopened.close()


def segment_sizes(engine: UnifiedLog) -> list[int]:
    assert isinstance(engine.log, PartitionLog)
    return [s.size for s in engine.log.segments_snapshot()]


def test_segments_cleaned_to_a_few_bytes_merge_in_the_same_pass(
    tmp_path: Path, clock: FakeClock
) -> None:
    """groupSegmentsBySize with the log bound on the cleaned bytes: many dirty segments
    whose records are superseded leave one cleaned segment, not one per old segment (the
    internal topics were left as dozens of empty segments); the aborted index and a
    restart agree with the merged segment."""
    engine = open_engine(tmp_path / "p", clock, segment_bytes=600)
    w = Writer(engine)
    for i in range(30):
        w.put(f"k{i % 2}", f"v{i}")
        if i == 25:  # in the last dirty segment: the ones before it clean to nothing
            w.put("k0", "aborted", pid=4, txn=True)
            w.end(4, commit=False)
    w.put("z", "active")
    assert len(segment_sizes(engine)) >= 5
    view = committed_view(engine)
    clean(engine, clock)
    sizes = segment_sizes(engine)
    assert len(sizes) == 2 and sizes[0] <= 600, sizes  # one cleaned segment + the active
    assert committed_view(engine) == view
    aborted = engine.aborted_transactions(0, 1 << 30)
    assert len(aborted) == 1  # producer 4's last batch (kept empty) keeps its ABORT marker
    engine.close()
    reopened = open_engine(tmp_path / "p", clock, segment_bytes=600)
    assert committed_view(reopened) == view
    assert reopened.aborted_transactions(0, 1 << 30) == aborted
    reopened.close()


def test_cleaned_segments_stay_within_segment_bytes(tmp_path: Path, clock: FakeClock) -> None:
    """Records that all stay (distinct keys) are not merged past ``segment.bytes``."""
    engine = open_engine(tmp_path / "p", clock, segment_bytes=600)
    w = Writer(engine)
    for i in range(30):
        w.put(f"k{i}", f"v{i}")
    before = segment_sizes(engine)
    w.put("k0", "again")  # dirty, in the active segment: nothing shrinks much
    clean(engine, clock)
    after = segment_sizes(engine)
    assert all(size <= 600 for size in after)
    assert len(after) >= len(before) - 1


def test_segment_groups_stay_within_segment_index_bytes(
    tmp_path: Path, clock: FakeClock
) -> None:
    """groupSegmentsBySize bounds the old segments' offset (and time) index bytes by
    ``segment.index.bytes`` too: here each segment's index is full, so none merge even
    though the cleaned bytes would fit."""
    engine = open_engine(tmp_path / "p", clock, segment_bytes=1 << 20,
                         segment_index_bytes=32, index_interval_bytes=1)
    w = Writer(engine)
    for i in range(16):
        w.put(f"k{i % 2}", f"v{i}")
    w.put("z", "active")
    before = len(segment_sizes(engine))
    assert before >= 4  # rolled on a full offset index (4 entries of 8 bytes)
    clean(engine, clock)
    assert len(segment_sizes(engine)) == before


# ---------------------------------------------------------------- Kafka's rules, one each
# (checked against apache/kafka storage/.../log/Cleaner.java, CleanedTransactionMetadata.java
# and LogCleanerManager.java)


def test_dirty_ratio_equal_to_the_minimum_does_not_clean() -> None:
    """grabFilthiestCompactedLog: cleanableRatio > minCleanableRatio, strictly."""
    config = LogConfig(cleanup_policy="compact", min_cleanable_dirty_ratio=0.5)
    half = CleanableRange(0, 10, 1, 2, 100, 100, False)
    assert half.dirty_ratio == 0.5
    assert not should_clean(half, config)
    assert should_clean(CleanableRange(0, 10, 1, 2, 100, 101, False), config)


def test_max_compaction_lag_looks_at_every_dirty_inactive_segment() -> None:
    """maxCompactionDelay: the earliest first-batch timestamp (> 0) of all the dirty
    inactive segments, not only the first one's."""
    config = LogConfig(cleanup_policy="compact", max_compaction_lag_ms=1000,
                       min_cleanable_dirty_ratio=0.99)
    segments = [
        SegmentInfo(0, 10, 100, T0, T0),  # first dirty: recent
        SegmentInfo(10, 20, 100, T0 - 5000, T0),  # an older first batch (CreateTime)
        SegmentInfo(20, 21, 10, T0, T0),  # active
    ]
    found = cleanable_range(segments, first_dirty=0, last_stable_offset=21, now_ms=T0,
                            config=config)
    assert found.forced and should_clean(found, config)
    no_ts = [SegmentInfo(0, 10, 100, -1, -1), SegmentInfo(10, 11, 10, -1, -1)]
    assert not cleanable_range(no_ts, first_dirty=0, last_stable_offset=11, now_ms=T0,
                               config=config).forced


def test_checkpoint_past_the_log_end_makes_the_whole_log_dirty(
    tmp_path: Path, clock: FakeClock
) -> None:
    """cleanableOffsets: a checkpoint above the log end offset (a truncated log) is reset
    to the log start offset."""
    engine = open_engine(tmp_path / "p", clock)
    w = Writer(engine)
    for i in range(6):
        w.put(f"k{i % 2}", f"v{i}")
    w.put("z", "active")
    (tmp_path / "p" / CHECKPOINT_NAME).write_text("1000000\n")
    engine.flush()
    assert clean_now(engine, now_ms=clock.now_ms()) is not None
    assert [kv for b in batches(engine) for kv in b[4]] == [
        (b"k0", b"v4"), (b"k1", b"v5"), (b"z", b"active")]
    engine.close()


def test_last_marker_of_a_producer_without_data_is_kept_empty(
    tmp_path: Path, clock: FakeClock
) -> None:
    """cleanInto case 3: a producer whose state holds no data batch (an epoch bump by the
    coordinator's abort) keeps its last marker of that epoch, emptied, for fencing."""
    engine = open_engine(tmp_path / "p", clock)
    w = Writer(engine)
    w.put("a", "aborted", pid=4, txn=True)
    abort = engine.append_marker(4, 1, 0, False)  # the coordinator bumped the epoch
    assert engine.producer_state.entries()[4].last_offset == -1
    for round_ in range(3):
        w.put(f"d{round_}", "dirty")
        w.put(f"e{round_}", "active")
        clean(engine, clock)
        clock.advance(DAY + 1)
    kept = [b for b in batches(engine) if b[0] == abort]
    assert kept == [(abort, abort, True, 4, [])]
    assert parse_header(engine.read(abort, 1 << 20).data).producer_epoch == 1
    engine.close()


def test_batch_ending_at_the_first_uncleanable_offset_is_kept_empty(
    tmp_path: Path, clock: FakeClock
) -> None:
    """cleanInto: the batch whose next offset is the round's upper bound stays (empty if
    nothing of it is kept) so that the last offset is not lost."""
    engine = open_engine(tmp_path / "p", clock)
    w = Writer(engine)
    w.put("a", "v1")
    w.put("a", "v2")
    w.put("b", "v")
    keyless = bytearray(encode_batch([RecordInput(None, b"no key", timestamp=T0)]))
    last = engine.append(keyless, [parse_header(keyless)]).base_offset
    active = w.put("z", "active")
    assert isinstance(engine.log, PartitionLog)
    assert engine.log.segments_snapshot()[-1].base_offset == active == last + 1
    clean(engine, clock)
    assert [b for b in batches(engine) if b[0] == last] == [(last, last, False, -1, [])]
    engine.close()


# ---------------------------------------------------------------- a pass racing the log


def dirty_log(tmp_path: Path, clock: FakeClock) -> UnifiedLog:
    engine = open_engine(tmp_path / "p", clock)
    w = Writer(engine)
    for i in range(8):
        w.put(f"k{i % 2}", f"v{i}")
    w.put("z", "active")
    engine.flush()
    return engine


def test_a_pass_reads_its_own_fds_when_the_log_is_closed_under_it(
    tmp_path: Path, clock: FakeClock
) -> None:
    """The worker never reads through the log's fds: closed (and their numbers reused by
    other files), they would give it another file's bytes or EBADF."""
    engine = dirty_log(tmp_path, clock)
    plan = plan_clean(engine, now_ms=clock.now_ms(), map_capacity=1000)
    assert plan is not None
    engine.close()
    decoys = [os.open(tmp_path / f"decoy{i}", os.O_RDWR | os.O_CREAT) for i in range(8)]
    try:
        for fd in decoys:
            os.write(fd, b"\xff" * 100)
        prepared = prepare_clean(plan)
    finally:
        for fd in decoys:
            os.close(fd)
    assert prepared.groups and prepared.bytes_read == sum(plan.sizes)
    assert all(fd == -1 for fd in plan.fds) and plan.done.is_set()
    discard_prepared(prepared)
    assert not list((tmp_path / "p").glob("*.cleaned"))


def test_an_aborted_pass_stops_and_leaves_no_staging(tmp_path: Path, clock: FakeClock) -> None:
    engine = dirty_log(tmp_path, clock)
    before = batches(engine)
    plan = plan_clean(engine, now_ms=clock.now_ms(), map_capacity=1000)
    assert plan is not None
    plan.abort.set()
    with pytest.raises(CleanAborted):
        prepare_clean(plan)
    assert plan.done.is_set() and all(fd == -1 for fd in plan.fds)
    assert not list((tmp_path / "p").glob("*.cleaned"))
    assert batches(engine) == before
    engine.close()
