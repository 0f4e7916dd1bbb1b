"""ProducerStateManager: Kafka's epoch/sequence rules, duplicates, multi-batch requests,
transactions bookkeeping, expiry, truncation and replay."""

from __future__ import annotations

import ast
from pathlib import Path
from types import ModuleType

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oncelog.clock import FakeClock
from oncelog.errors import ErrorCode, KafkaError
from oncelog.records.batch import (
    ATTR_CONTROL,
    ATTR_TRANSACTIONAL,
    NO_PRODUCER_EPOCH,
    NO_SEQUENCE,
    BatchHeader,
)
from oncelog.storage import producer_entry, producer_state, snapshot
from oncelog.storage.producer_entry import (
    MAX_SEQUENCE,
    CompletedTxn,
    DuplicateBatch,
    ProducerInfo,
)
from oncelog.storage.producer_state import ProducerStateManager

NOW = 1_700_000_000_000


def batch(
    pid: int = 1,
    epoch: int = 0,
    seq: int = 0,
    count: int = 1,
    offset: int = 0,
    ts: int = NOW,
    txn: bool = False,
    control: bool = False,
) -> BatchHeader:
    attrs = (ATTR_TRANSACTIONAL if txn else 0) | (ATTR_CONTROL if control else 0)
    return BatchHeader(
        base_offset=offset,
        batch_length=49 + 10 * count,
        partition_leader_epoch=0,
        magic=2,
        crc=0,
        attributes=attrs,
        last_offset_delta=count - 1,
        base_timestamp=ts,
        max_timestamp=ts,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        records_count=count,
    )


def manager(clock: FakeClock | None = None, expiration_ms: int = 86400000) -> ProducerStateManager:
    return ProducerStateManager("t-0", clock or FakeClock(NOW), expiration_ms)


def append(m: ProducerStateManager, h: BatchHeader) -> DuplicateBatch | None:
    """The partition append order, minus the log: check, then update unless duplicate."""
    dup = m.check(h)
    if dup is None:
        m.update(h)
    return dup


# --------------------------------------------------------------------------- rule table

OK = "ok"
DUP = "dup"
OOS = ErrorCode.out_of_order_sequence_number
FENCED = ErrorCode.invalid_producer_epoch
TXN = ErrorCode.invalid_txn_state

# (case id, batches already appended (pid 1), incoming batch, expected outcome)
TABLE: list[tuple[str, list[BatchHeader], BatchHeader, object]] = [
    ("unknown producer, seq 0", [], batch(seq=0), OK),
    # KIP-360: no state here (never seen, or expired) -> any sequence is accepted.
    ("unknown producer, seq 42", [], batch(seq=42), OK),
    ("unknown producer, any epoch", [], batch(epoch=7, seq=3), OK),
    ("same epoch, next seq", [batch(seq=0, count=5)], batch(seq=5, offset=5), OK),
    ("same epoch, gap", [batch(seq=0, count=5)], batch(seq=6, offset=5), OOS),
    (
        "same epoch, overlapping, not a retained batch",
        [batch(seq=0, count=5)],
        batch(seq=3, offset=5),
        OOS,
    ),
    (
        "same epoch, same range: duplicate",
        [batch(seq=0, count=5)],
        batch(seq=0, count=5, offset=5),
        DUP,
    ),
    (
        "same epoch, same first seq, other last seq",
        [batch(seq=0, count=5)],
        batch(seq=0, count=4, offset=5),
        OOS,
    ),
    ("same epoch, seq 0 again", [batch(seq=0, count=5)], batch(seq=0, count=1, offset=5), OOS),
    ("bumped epoch starts at 0", [batch(seq=0, count=5)], batch(epoch=1, seq=0, offset=5), OK),
    ("bumped epoch must start at 0", [batch(seq=0, count=5)], batch(epoch=1, seq=5, offset=5), OOS),
    ("epoch jump by more than one, seq 0", [batch(seq=0)], batch(epoch=9, seq=0, offset=1), OK),
    ("older epoch", [batch(epoch=2, seq=0)], batch(epoch=1, seq=1, offset=1), FENCED),
    ("older epoch, seq 0", [batch(epoch=2, seq=0)], batch(epoch=1, seq=0, offset=1), FENCED),
    (
        "older epoch replaying an old batch",
        [batch(epoch=1, seq=0), batch(epoch=2, seq=0, offset=1)],
        batch(epoch=1, seq=0),
        FENCED,
    ),
    ("wrap: after int32 max comes 0", [batch(seq=MAX_SEQUENCE)], batch(seq=0, offset=1), OK),
    ("wrap: after int32 max, 1 is a gap", [batch(seq=MAX_SEQUENCE)], batch(seq=1, offset=1), OOS),
    ("wrap inside a batch", [batch(seq=MAX_SEQUENCE - 1, count=3)], batch(seq=1, offset=3), OK),
    (
        "wrap inside a batch, 0 is a gap",
        [batch(seq=MAX_SEQUENCE - 1, count=3)],
        batch(seq=0, offset=3),
        OOS,
    ),
    (
        "wrapping batch retried",
        [batch(seq=MAX_SEQUENCE - 1, count=3)],
        batch(seq=MAX_SEQUENCE - 1, count=3, offset=3),
        DUP,
    ),
    (
        "open transaction, transactional next",
        [batch(seq=0, txn=True)],
        batch(seq=1, offset=1, txn=True),
        OK,
    ),
    ("open transaction, non-transactional", [batch(seq=0, txn=True)], batch(seq=1, offset=1), TXN),
    (
        "open transaction, bumped epoch non-transactional",
        [batch(seq=0, txn=True)],
        batch(epoch=1, seq=0, offset=1),
        TXN,
    ),
    (
        "no transaction, transactional begins one",
        [batch(seq=0)],
        batch(seq=1, offset=1, txn=True),
        OK,
    ),
]


@pytest.mark.parametrize(
    ("before", "incoming", "expected"),
    [row[1:] for row in TABLE],
    ids=[row[0] for row in TABLE],
)
def test_rule_table(before: list[BatchHeader], incoming: BatchHeader, expected: object) -> None:
    m = manager()
    for h in before:
        assert append(m, h) is None
    snapshot_before = m.entries()
    for check in (m.check, lambda h: m.check_batches([h])):
        if expected == OK:
            assert check(incoming) is None
        elif expected == DUP:
            assert isinstance(check(incoming), DuplicateBatch)
        else:
            with pytest.raises(KafkaError) as err:
                check(incoming)
            assert err.value.code == expected
        assert m.entries() == snapshot_before, "check must not change state"


def test_epoch_bump_via_marker_then_sequence_restarts_at_zero() -> None:
    m = manager()
    append(m, batch(seq=0, count=3, txn=True))
    m.update_end_txn_marker(1, 1, 0, offset=3, timestamp=NOW, is_abort=True)
    with pytest.raises(KafkaError) as err:
        m.check(batch(epoch=1, seq=3, offset=4))
    assert err.value.code == ErrorCode.out_of_order_sequence_number
    assert m.check(batch(epoch=1, seq=0, offset=4)) is None


def test_not_from_client_checks_epoch_only() -> None:
    m = manager()
    append(m, batch(epoch=3, seq=0, count=2))
    # No sequence rule and no duplicate detection for the coordinator origin.
    assert m.check(batch(epoch=3, seq=77, offset=2), is_from_client=False) is None
    assert m.check(batch(epoch=3, seq=0, count=2, offset=2), is_from_client=False) is None
    with pytest.raises(KafkaError) as err:
        m.check(batch(epoch=2, seq=0, offset=2), is_from_client=False)
    assert err.value.code == ErrorCode.invalid_producer_epoch


def test_request_version_does_not_change_the_rules() -> None:
    m = manager()
    for version in (3, 7, 9, 11):
        assert m.check(batch(seq=5), request_version=version) is None


# --------------------------------------------------------------------------- duplicates


def test_duplicate_of_each_of_the_last_five_but_not_the_sixth() -> None:
    m = manager()
    appended = []
    for i in range(6):
        h = batch(seq=2 * i, count=2, offset=10 + 2 * i, ts=NOW + i)
        assert append(m, h) is None
        appended.append(h)
    for h in appended[1:]:
        retry = batch(seq=h.base_sequence, count=2, offset=999)
        assert m.check(retry) == DuplicateBatch(h.base_offset, h.last_offset, h.max_timestamp)
    oldest = appended[0]
    with pytest.raises(KafkaError) as err:
        m.check(batch(seq=oldest.base_sequence, count=2, offset=999))
    assert err.value.code == ErrorCode.out_of_order_sequence_number


def test_duplicate_of_other_epoch_is_not_a_duplicate() -> None:
    m = manager()
    append(m, batch(epoch=0, seq=0, count=2))
    append(m, batch(epoch=1, seq=0, count=2, offset=2))
    # Same seq range as the epoch-1 batch but epoch 0: fenced, not a duplicate.
    with pytest.raises(KafkaError) as err:
        m.check(batch(epoch=0, seq=0, count=2, offset=4))
    assert err.value.code == ErrorCode.invalid_producer_epoch
    assert m.check(batch(epoch=1, seq=0, count=2, offset=4)) == DuplicateBatch(2, 3, NOW)


def test_duplicates_are_per_producer() -> None:
    m = manager()
    append(m, batch(pid=1, seq=0, count=2, offset=0))
    append(m, batch(pid=2, seq=0, count=2, offset=2))
    assert m.check(batch(pid=2, seq=0, count=2, offset=9)) == DuplicateBatch(2, 3, NOW)
    assert m.check(batch(pid=1, seq=0, count=2, offset=9)) == DuplicateBatch(0, 1, NOW)
    assert m.check(batch(pid=3, seq=0, count=2, offset=9)) is None


# --------------------------------------------------------------------------- several batches


def test_multi_batch_in_sequence_for_a_new_producer() -> None:
    m = manager()
    hs = [batch(seq=0, count=2), batch(seq=2, count=3, offset=2), batch(seq=5, offset=5)]
    assert m.check_batches(hs) is None
    assert len(m) == 0, "check_batches must not change state"


def test_multi_batch_gap_after_a_pending_batch() -> None:
    m = manager()
    with pytest.raises(KafkaError) as err:
        m.check_batches([batch(seq=0, count=2), batch(seq=3, offset=2)])
    assert err.value.code == ErrorCode.out_of_order_sequence_number


def test_multi_batch_repeat_within_request_for_unknown_producer_is_refused() -> None:
    # Stricter than Kafka (which would accept it for an unknown producer): appending the
    # same sequences twice in one request would break "at most once".
    m = manager()
    with pytest.raises(KafkaError) as err:
        m.check_batches([batch(seq=4, count=2), batch(seq=4, count=2, offset=2)])
    assert err.value.code == ErrorCode.out_of_order_sequence_number


def test_multi_batch_epoch_bump_then_continue() -> None:
    m = manager()
    append(m, batch(seq=0, count=3))
    assert (
        m.check_batches([batch(epoch=1, seq=0, offset=3), batch(epoch=1, seq=1, offset=4)]) is None
    )
    with pytest.raises(KafkaError) as err:
        m.check_batches([batch(epoch=1, seq=0, offset=3), batch(epoch=0, seq=3, offset=4)])
    assert err.value.code == ErrorCode.invalid_producer_epoch


def test_multi_batch_interleaved_producers() -> None:
    m = manager()
    append(m, batch(pid=1, seq=0))
    hs = [
        batch(pid=1, seq=1, offset=1),
        batch(pid=2, seq=0, offset=2),
        batch(pid=1, seq=2, offset=3),
        batch(pid=2, seq=1, offset=4),
        batch(pid=-1, epoch=NO_PRODUCER_EPOCH, seq=NO_SEQUENCE, offset=5),
    ]
    assert m.check_batches(hs) is None
    bad = [*hs[:4], batch(pid=2, seq=1, offset=5)]
    with pytest.raises(KafkaError):
        m.check_batches(bad)


def test_multi_batch_duplicate_beside_a_new_batch_is_refused() -> None:
    # Answering the duplicate's offsets for the request would acknowledge the new batch
    # without writing it: refused. Alone, the duplicate answers with its original offsets.
    m = manager()
    append(m, batch(seq=0, count=2, offset=40))
    with pytest.raises(KafkaError) as err:
        m.check_batches([batch(seq=0, count=2), batch(seq=2, offset=2)])
    assert err.value.code == ErrorCode.invalid_record
    assert m.check_batches([batch(seq=0, count=2)]) == DuplicateBatch(40, 41, NOW)


def test_multi_batch_transaction_then_plain_batch() -> None:
    m = manager()
    with pytest.raises(KafkaError) as err:
        m.check_batches([batch(seq=0, txn=True), batch(seq=1, offset=1)])
    assert err.value.code == ErrorCode.invalid_txn_state


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 2), st.integers(-1, 3), st.integers(0, 3), st.booleans()),
        max_size=6,
    ),
    st.tuples(
        st.integers(0, 2),
        st.integers(-1, 3),
        st.sampled_from([0, 1, 2, 5, MAX_SEQUENCE]),
        st.booleans(),
    ),
)
def test_fast_path_agrees_with_full_rules(
    history: list[tuple[int, int, int, bool]], incoming: tuple[int, int, int, bool]
) -> None:
    """check() has a fast path for in-sequence batches; it must decide like check_batches()."""
    m = manager()
    offset = 0
    for epoch, dseq, count, txn in history:
        entry = m.last_entry(1)
        seq = 0 if entry is None or entry.producer_epoch != epoch else (entry.last_seq + 1 + dseq)
        h = batch(epoch=epoch, seq=seq % 2**31, count=count + 1, offset=offset, txn=txn)
        try:
            append(m, h)
        except KafkaError:
            continue
        offset = h.next_offset
    epoch, dseq, seq, txn = incoming
    h = batch(epoch=epoch, seq=seq, offset=offset, txn=txn)

    def outcome(fn: object) -> object:
        assert callable(fn)
        try:
            return fn(h)
        except KafkaError as e:
            return e.code

    assert outcome(m.check) == outcome(lambda x: m.check_batches([x]))


# --------------------------------------------------------------------------- update


def test_update_records_batches_offsets_and_end() -> None:
    m = manager()
    append(m, batch(seq=0, count=3, offset=100, ts=NOW + 5))
    e = m.last_entry(1)
    assert e is not None
    assert (e.producer_epoch, e.last_seq, e.last_offset, e.last_timestamp) == (0, 2, 102, NOW + 5)
    assert m.map_end_offset == 103


def test_update_epoch_bump_forgets_old_batches() -> None:
    m = manager()
    append(m, batch(seq=0, count=2))
    append(m, batch(epoch=1, seq=0, offset=2))
    e = m.last_entry(1)
    assert e is not None and len(e.batches) == 1 and e.producer_epoch == 1


def test_update_ignores_batches_without_producer_and_rejects_control() -> None:
    m = manager()
    m.update(batch(pid=-1, epoch=-1, seq=-1))
    assert len(m) == 0
    with pytest.raises(ValueError):
        m.update(batch(control=True))


def test_transaction_first_offset_and_markers() -> None:
    m = manager()
    append(m, batch(pid=1, seq=0, offset=10, txn=True))
    append(m, batch(pid=1, seq=1, offset=11, txn=True))
    append(m, batch(pid=2, seq=0, offset=12, txn=True))
    assert m.ongoing_txn_first_offsets() == [10, 12]
    m.check_end_txn_marker(1, 0, 5)
    assert m.update_end_txn_marker(
        1, 0, 5, offset=13, timestamp=NOW, is_abort=False
    ) == CompletedTxn(1, 10, 13, False)
    assert m.ongoing_txn_first_offsets() == [12]
    # A marker for a producer with nothing open completes nothing but records the epochs.
    assert m.update_end_txn_marker(1, 0, 5, offset=14, timestamp=NOW, is_abort=True) is None
    with pytest.raises(KafkaError) as err:
        m.check_end_txn_marker(1, 0, 4)
    assert err.value.code == ErrorCode.transaction_coordinator_fenced
    with pytest.raises(KafkaError) as err:
        m.check_end_txn_marker(1, -1, 9)
    assert err.value.code == ErrorCode.invalid_producer_epoch
    m.check_end_txn_marker(99, 0, 0)  # unknown producer: nothing to check against
    # Sequences continue after a marker of the same epoch (batches are kept).
    assert m.check(batch(pid=1, seq=2, offset=15)) is None


def test_active_producers() -> None:
    m = manager()
    append(m, batch(pid=7, epoch=2, seq=0, count=4, offset=0, ts=NOW + 1))
    append(m, batch(pid=3, seq=0, offset=4, txn=True))
    m.update_end_txn_marker(9, 1, 4, offset=5, timestamp=NOW, is_abort=False)
    assert m.active_producers() == [
        ProducerInfo(3, 0, 0, NOW, -1, 4),
        ProducerInfo(7, 2, 3, NOW + 1, -1, -1),
        ProducerInfo(9, 1, -1, NOW, 4, -1),
    ]


# --------------------------------------------------------------------------- expiry


def test_remove_expired() -> None:
    clock = FakeClock(NOW)
    m = manager(clock, expiration_ms=1000)
    append(m, batch(pid=1, seq=0, offset=0, ts=NOW))
    append(m, batch(pid=2, seq=0, offset=1, ts=NOW + 500))
    append(m, batch(pid=3, seq=0, offset=2, ts=NOW, txn=True))
    assert m.remove_expired() == []
    clock.advance(999)
    assert m.remove_expired() == []
    clock.advance(1)  # exactly the expiration: expired, as in Kafka (>=)
    assert m.remove_expired() == [1]
    assert sorted(p.producer_id for p in m.active_producers()) == [2, 3]
    assert m.remove_expired(NOW + 10_000) == [2]  # an open transaction is never expired
    assert m.last_entry(3) is not None
    # The expired producer is now unknown: any sequence accepted again (Kafka, KIP-360).
    assert m.check(batch(pid=1, seq=57, offset=3)) is None


# --------------------------------------------------------------------------- truncation


def make_log(ops: list[tuple[int, int, int, bool]]) -> list[BatchHeader]:
    """A valid log from (producer, new epoch?, record count, transactional) steps."""
    m = manager()
    log: list[BatchHeader] = []
    offset = 0
    epochs: dict[int, int] = {}
    for pid, bump, count, txn in ops:
        if pid == 0:
            h = batch(pid=-1, epoch=-1, seq=-1, count=count, offset=offset)
        else:
            entry = m.last_entry(pid)
            epoch = epochs.get(pid, 0) + (1 if bump and entry is not None else 0)
            epochs[pid] = epoch
            same = entry is not None and entry.producer_epoch == epoch
            seq = (entry.last_seq + 1) % 2**31 if same and entry is not None else 0
            h = batch(pid=pid, epoch=epoch, seq=seq, count=count, offset=offset, txn=txn)
            assert m.check(h) is None
        m.update(h)
        log.append(h)
        offset = h.next_offset
    return log


def replay(m: ProducerStateManager, log: list[BatchHeader], start: int, end: int) -> None:
    for h in log:
        if h.base_offset >= start and h.next_offset <= end:
            m.update(h)


ops_strategy = st.lists(
    st.tuples(st.integers(0, 4), st.booleans(), st.integers(1, 4), st.just(False)),
    min_size=1,
    max_size=30,
)


@settings(max_examples=60, deadline=None)
@given(ops_strategy, st.data())
def test_truncate_then_replay_equals_fresh_replay(
    tmp_path_factory: pytest.TempPathFactory,
    ops: list[tuple[int, int, int, bool]],
    data: st.DataObject,
) -> None:
    directory = tmp_path_factory.mktemp("p")
    log = make_log(ops)
    end = log[-1].next_offset
    m = manager()
    for i, h in enumerate(log):
        m.update(h)
        if data.draw(st.booleans(), label=f"snapshot after batch {i}"):
            snapshot.take_snapshot(m, directory, h.next_offset, keep=None)
    cut = data.draw(st.sampled_from([h.base_offset for h in log] + [end]), label="truncate at")

    start = snapshot.truncate_state_after(m, cut, directory)
    replay(m, log, start, cut)

    fresh = manager()
    replay(fresh, log, 0, cut)
    assert m.entries() == fresh.entries()
    assert all(o <= cut for o, _ in snapshot.list_snapshots(directory))


@settings(max_examples=30, deadline=None)
@given(ops_strategy, st.data())
def test_truncate_without_snapshots_requires_full_replay(
    ops: list[tuple[int, int, int, bool]], data: st.DataObject
) -> None:
    log = make_log(ops)
    m = manager()
    replay(m, log, 0, log[-1].next_offset)
    cut = data.draw(st.sampled_from([h.base_offset for h in log]))
    start = m.truncate_after(cut)
    replay(m, log, start, cut)
    fresh = manager()
    replay(fresh, log, 0, cut)
    assert m.entries() == fresh.entries()


def test_truncate_at_or_after_end_changes_nothing(tmp_path: Path) -> None:
    m = manager()
    append(m, batch(seq=0, count=3))
    snapshot.take_snapshot(m, tmp_path, 3)
    before = m.entries()
    assert snapshot.truncate_state_after(m, 3, tmp_path) == 3
    assert m.truncate_after(3) == 3, "no replay needed when nothing applied is cut"
    assert m.truncate_after(10) == 10
    assert m.entries() == before


def test_clear() -> None:
    m = manager()
    append(m, batch(seq=0, count=3))
    m.clear()
    assert len(m) == 0 and m.map_end_offset == 0 and m.last_snapshot_offset is None


def _imported_modules(module: ModuleType) -> set[str]:
    assert module.__file__ is not None
    found: set[str] = set()
    for node in ast.walk(ast.parse(Path(module.__file__).read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module is not None:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def test_the_manager_does_no_io_and_the_entries_are_a_leaf() -> None:
    """Snapshot files are ``snapshot``'s: the manager imports neither it nor any file
    helper, so ``snapshot`` can import the manager without an import circle."""
    io_modules = {"os", "pathlib", "shutil", "oncelog.storage.snapshot",
                  "oncelog.storage.files"}
    assert _imported_modules(producer_state) & io_modules == set()
    assert not any(
        name.startswith("oncelog.storage") for name in _imported_modules(producer_entry)
    )
    for gone in ("take_snapshot", "load_from", "encode_snapshot"):
        assert not hasattr(ProducerStateManager, gone), gone
