"""``truncate_to`` (every engine): the log, producer state, aborted index, snapshots and LSO
are cut together, so a truncated engine equals one built from the shorter log -- with open,
committed and aborted transactions on both sides of the cut."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from oncelog.clock import FakeClock
from oncelog.config import LogConfig
from oncelog.records.codec import RecordInput, encode_batch
from oncelog.records.validate import validate_batches
from oncelog.storage import snapshot
from oncelog.storage.engine import IsolationLevel
from oncelog.storage.unified_log import UnifiedLog
from tests.unit.storage.conftest import EngineFactory

T0 = FakeClock().now_ms()
SEGMENT_BYTES = 300  # a roll (and a producer-state snapshot) every few batches

Op = Callable[[UnifiedLog], object]


def data(pid: int = -1, seq: int = -1, *, txn: bool = False, n: int = 2) -> Op:
    def op(log: UnifiedLog) -> object:
        buf = bytearray(
            encode_batch(
                [RecordInput(value=b"x" * 30, timestamp=T0) for _ in range(n)],
                producer_id=pid,
                producer_epoch=0 if pid >= 0 else -1,
                base_sequence=seq,
                transactional=txn,
            )
        )
        return log.append(buf, validate_batches(buf, max_batch_bytes=10**7))

    return op


def marker(pid: int, *, commit: bool) -> Op:
    return lambda log: log.append_marker(pid, 0, 0, commit=commit)


OPS: list[Op] = [
    data(),                              # 0-1
    data(1, 0, txn=True),                # 2-3   txn 1 opens
    data(2, 0, txn=True),                # 4-5   txn 2 opens
    data(3, 0),                          # 6-7   idempotent
    marker(2, commit=False),             # 8     txn 2 aborted
    data(3, 2),                          # 9-10
    marker(1, commit=True),              # 11    txn 1 committed
    data(1, 2, txn=True),                # 12-13 txn 1 again
    data(4, 0, txn=True),                # 14-15
    marker(4, commit=False),             # 16
    data(),                              # 17-18
    data(2, 2, txn=True),                # 19-20 txn 2 again, left open
    marker(1, commit=False),             # 21
    data(3, 4),                          # 22-23
]


def build(make: EngineFactory, name: str, ops: list[Op]) -> tuple[UnifiedLog, list[int]]:
    """An engine with ``ops`` applied; the log end before each op."""
    log = make(name=name, segment_bytes=SEGMENT_BYTES)
    starts = []
    for op in ops:
        starts.append(log.log_end_offset)
        op(log)
    return log, starts


def state(log: UnifiedLog) -> dict[str, object]:
    end = log.log_end_offset
    return {
        "offsets": (log.log_start_offset, end, log.high_watermark, log.last_stable_offset),
        "first_unstable": log.first_unstable_offset,
        "producers": log.producers(),
        "open": [pid for pid in (1, 2, 3, 4) if log.has_open_transaction(pid)],
        "aborted": log.aborted_transactions(0, end + 1),
        "data": log.read(log.log_start_offset, 1 << 20).data,
        "committed": log.read(log.log_start_offset, 1 << 20, IsolationLevel.READ_COMMITTED),
    }


@pytest.mark.parametrize("cut", range(1, len(OPS)))
def test_truncated_engine_equals_one_built_from_the_shorter_log(
    make_engine: EngineFactory, cut: int
) -> None:
    log, starts = build(make_engine, "full", OPS)
    assert log.log.segment_count > 3
    log.truncate_to(starts[cut])
    shorter, _ = build(make_engine, "short", OPS[:cut])
    assert state(log) == state(shorter)
    # Both go on the same way: the same next op gives the same result and state.
    OPS[cut](log)
    OPS[cut](shorter)
    assert state(log) == state(shorter)


def test_file_truncation_drops_snapshots_above_the_cut_and_survives_a_restart(
    tmp_path: Path,
) -> None:
    def make(name: str, **config: Any) -> UnifiedLog:
        return UnifiedLog.open(tmp_path / name, LogConfig(**config), FakeClock())

    log, starts = build(make, "full", OPS)
    cut = starts[5]
    assert [o for o, _ in snapshot.list_snapshots(log.directory) if o > cut]
    log.truncate_to(cut)
    assert all(o <= cut for o, _ in snapshot.list_snapshots(log.directory))
    expected = state(log)
    log.close()
    again = UnifiedLog.open(log.directory, log.config, FakeClock())
    assert state(again) == expected


def test_truncation_at_or_past_the_end_changes_nothing(engine: UnifiedLog) -> None:
    for op in OPS[:3]:
        op(engine)
    before = state(engine)
    engine.truncate_to(engine.log_end_offset)
    engine.truncate_to(engine.log_end_offset + 10)
    assert state(engine) == before
