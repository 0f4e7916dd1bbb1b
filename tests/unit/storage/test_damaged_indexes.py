"""Damaged index files never stop the broker: whatever the bytes of a ``.index``,
``.timeindex`` or ``.txnindex`` are, opening names the file and rebuilds it from the log."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from oncelog.clock import FakeClock
from oncelog.config import LogConfig
from oncelog.records.codec import RecordInput, encode_batch
from oncelog.records.validate import validate_batches
from oncelog.storage.log import PartitionLog
from oncelog.storage.unified_log import UnifiedLog
from tests.unit.storage.log_helpers import record_offsets

T0 = FakeClock().now_ms()
CONFIG = LogConfig(segment_bytes=1200, index_interval_bytes=100)


def _append(log: UnifiedLog, i: int, *, pid: int = -1, seq: int = -1, txn: bool = False) -> None:
    data = bytearray(
        encode_batch(
            [RecordInput(value=b"v%d" % i, timestamp=T0 + i)],
            producer_id=pid,
            producer_epoch=0 if pid >= 0 else -1,
            base_sequence=seq,
            transactional=txn,
        )
    )
    log.append(data, validate_batches(data, max_batch_bytes=10**7))


def _build(path: Path) -> tuple[list[int], list[tuple[int, int, int]], int]:
    log = UnifiedLog.open(path, CONFIG, FakeClock())
    for i in range(40):
        _append(log, i, pid=7, seq=i, txn=True)
        _append(log, 1000 + i)
        log.append_marker(7, 0, 0, commit=i % 3 != 0)
    assert isinstance(log.log, PartitionLog)
    assert len(log.log.segment_base_offsets()) >= 3
    state = _state(log)
    log.close()
    return state


def _state(log: UnifiedLog) -> tuple[list[int], list[tuple[int, int, int]], int]:
    data = log.read(log.log_start_offset, 1 << 24).data
    aborted = [
        (a.producer_id, a.first_offset, a.last_offset)
        for a in log.aborted_transactions(0, log.log_end_offset)
    ]
    found = log.offset_for_timestamp(T0 + 1020)
    return record_offsets(data), aborted, -1 if found is None else found[0]


@pytest.mark.parametrize("suffix", [".index", ".timeindex", ".txnindex"])
@pytest.mark.parametrize("seed", range(6))
def test_random_index_contents_are_rebuilt_and_named(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, suffix: str, seed: int
) -> None:
    path = tmp_path / "p-0"
    expected = _build(path)
    rng = random.Random(seed)
    victims = sorted(path.glob(f"*{suffix}"))
    victim = victims[rng.randrange(len(victims) - 1)]  # an inactive segment's file
    size = rng.choice([7, 8, 12, 24, 34, 68, 96, 200, rng.randrange(1, 400)])
    if seed % 2:
        damaged = bytes(rng.getrandbits(8) for _ in range(size))
    else:  # a valid prefix with a zero-filled tail, as a power loss leaves it
        damaged = victim.read_bytes()[: size // 2] + b"\0" * size
    victim.write_bytes(damaged)
    caplog.set_level("INFO")
    again = UnifiedLog.open(path, CONFIG, FakeClock())
    assert _state(again) == expected
    assert victim.name in caplog.text
    again.close()
    assert _state(UnifiedLog.open(path, CONFIG, FakeClock())) == expected


def test_garbage_offset_index_is_named_and_rebuilt(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "p-0"
    expected = _build(path)
    victim = sorted(path.glob("*.index"))[0]
    victim.write_bytes(b"\xff\xff\xff\xf0\xff\xff\xff\xf0" * 3)  # negative positions
    again = UnifiedLog.open(path, CONFIG, FakeClock())
    assert _state(again) == expected
    assert victim.name in caplog.text
