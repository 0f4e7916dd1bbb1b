"""Storage fuzzing: a partition with interleaved plain, idempotent and transactional data is
damaged the way crashes and power losses damage files, then reopened.

History: hypothesis draws a list of operations -- plain batches, idempotent batches of three
producers, transactional batches with COMMIT/ABORT markers, transactions left open, fenced
producers (epoch bump, the open transaction aborted with the new epoch), flushes, snapshots,
clean restarts, DeleteRecords + retention -- run on a ``UnifiedLog`` with small segments.

- ``test_power_loss``: an fsync shim (``fsync_shim``) records what was durable; hypothesis
  picks one state a power loss may leave (unsynced tails cut anywhere or zero-filled, undurable
  creations/renames/deletions lost or kept). After ``UnifiedLog.open``: every batch that was
  fsynced is there with the same bytes; no corrupt batch is served; a read_committed reader
  never gets an aborted record; LSO, producer state and the aborted index equal those of a
  copy rebuilt from the log alone.
- ``test_byte_flips``: bytes are flipped in any file (segments, indexes, transaction indexes,
  snapshots, checkpoint) after a crash; open must not raise and must never serve a batch
  whose CRC fails past the recovery point.
- ``test_transaction_log_byte_flips``: the same for a ``__transaction_state`` partition, read
  back through the transaction log codec.

Examples per test: ``ONCELOG_FUZZ_EXAMPLES`` (default small enough for CI).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from oncelog.clock import FakeClock
from oncelog.config import LogConfig
from oncelog.coordinator.transaction.log_codec import decode_key, decode_value, encode_record
from oncelog.coordinator.transaction.metadata import TxnTransitMetadata
from oncelog.coordinator.transaction.state import TransactionState
from oncelog.errors import ErrorCode, KafkaError
from oncelog.records.batch import BatchHeader
from oncelog.records.codec import RecordInput, decode_batch, encode_batch, iter_records
from oncelog.records.validate import validate_batches
from oncelog.storage.checkpoint import CHECKPOINT_FILE, LogCheckpoint, write_checkpoint
from oncelog.storage.log import PartitionLog
from oncelog.storage.producer_entry import ProducerStateEntry
from oncelog.storage.unified_log import UnifiedLog
from tests.unit.storage.fsync_shim import FsyncTracker, power_loss

EXAMPLES = int(os.environ.get("ONCELOG_FUZZ_EXAMPLES", "150"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
PRODUCERS = 3
PID_BASE = 1000
LONG_MAX = 2**63 - 1

# -- the history -------------------------------------------------------------------------

OPS = st.one_of(
    st.tuples(st.just("plain"), st.integers(1, 3)),
    st.tuples(st.just("idempotent"), st.integers(0, PRODUCERS - 1)),
    st.tuples(st.just("txn"), st.integers(0, PRODUCERS - 1)),
    st.tuples(st.just("commit"), st.integers(0, PRODUCERS - 1)),
    st.tuples(st.just("abort"), st.integers(0, PRODUCERS - 1)),
    st.tuples(st.just("fence"), st.integers(0, PRODUCERS - 1)),
    st.tuples(st.just("flush"), st.just(0)),
    st.tuples(st.just("snapshot"), st.just(0)),
    st.tuples(st.just("restart"), st.just(0)),
    st.tuples(st.just("delete"), st.integers(0, 100)),
)

CONFIGS = st.builds(
    LogConfig,
    segment_bytes=st.sampled_from([300, 700, 1 << 20]),
    flush_messages=st.sampled_from([LONG_MAX, LONG_MAX, 1, 4]),
    index_interval_bytes=st.sampled_from([0, 100, 4096]),
)


@dataclass
class Producer:
    pid: int
    epoch: int = 0
    seq: int = 0
    txn: int | None = None  # the open transaction's number


@dataclass
class Model:
    """What the history did: which transaction every transactional batch belongs to and how
    each transaction ended."""

    producers: list[Producer] = field(
        default_factory=lambda: [Producer(PID_BASE + i) for i in range(PRODUCERS)]
    )
    txn_of_batch: dict[int, tuple[int, int]] = field(default_factory=dict)  # offset -> txn
    outcome: dict[tuple[int, int], tuple[bool, int]] = field(default_factory=dict)
    txn_count: int = 0


def make_batch(
    tag: str, n: int, *, pid: int = -1, epoch: int = -1, seq: int = -1, txn: bool = False,
    now: int,
) -> tuple[bytearray, list[BatchHeader]]:
    data = bytearray(
        encode_batch(
            [RecordInput(key=b"k", value=f"{tag}-{i}".encode(), timestamp=now) for i in range(n)],
            producer_id=pid, producer_epoch=epoch, base_sequence=seq, transactional=txn,
        )
    )
    return data, validate_batches(data, max_batch_bytes=10**7)


def run_history(
    directory: Path, config: LogConfig, clock: FakeClock, ops: list[tuple[str, int]]
) -> tuple[UnifiedLog, Model]:
    log = UnifiedLog.open(directory, config, clock)
    model = Model()
    now = clock.now_ms()
    for step, (op, arg) in enumerate(ops):
        tag = f"{op}{step}"
        if op == "plain":
            log.append(*make_batch(tag, arg, now=now))
        elif op in ("idempotent", "txn"):
            p = model.producers[arg]
            transactional = op == "txn" or p.txn is not None
            result = log.append(*make_batch(
                tag, 2, pid=p.pid, epoch=p.epoch, seq=p.seq, txn=transactional, now=now
            ))
            p.seq += 2
            if transactional:
                if p.txn is None:
                    p.txn = model.txn_count
                    model.txn_count += 1
                model.txn_of_batch[result.base_offset] = (p.pid, p.txn)
        elif op in ("commit", "abort"):
            p = model.producers[arg]
            if p.txn is not None:
                offset = log.append_marker(p.pid, p.epoch, 0, op == "commit")
                model.outcome[(p.pid, p.txn)] = (op == "commit", offset)
                p.txn = None
        elif op == "fence":
            p = model.producers[arg]
            p.epoch += 1
            p.seq = 0
            if p.txn is not None:  # the coordinator aborts the fenced producer's transaction
                offset = log.append_marker(p.pid, p.epoch, 0, False)
                model.outcome[(p.pid, p.txn)] = (False, offset)
                p.txn = None
                with pytest.raises(KafkaError) as refused:  # the zombie can no longer write
                    log.append(*make_batch(
                        tag, 1, pid=p.pid, epoch=p.epoch - 1, seq=100, txn=True, now=now
                    ))
                assert refused.value.code == ErrorCode.invalid_producer_epoch
        elif op == "flush":
            log.flush()
        elif op == "snapshot":
            log.take_snapshot()
        elif op == "restart":
            log.close()
            log = UnifiedLog.open(directory, config, clock)
        elif op == "delete":
            start, stable = log.log_start_offset, log.last_stable_offset
            log.delete_records_before(start + (stable - start) * arg // 100)
            log.apply_retention()
    return log, model


# -- reading back ------------------------------------------------------------------------

def read_batches(log: UnifiedLog, upper: int | None = None) -> dict[int, bytes]:
    """Every batch from the log start up to ``upper`` (default: the log end), by base
    offset, each checked against its CRC."""
    end = log.log_end_offset if upper is None else upper
    out: dict[int, bytes] = {}
    offset = log.log_start_offset
    while offset < end:
        result = log.log.read(offset, 1 << 20, max_offset=end)
        assert result.data, f"nothing read at {offset} below {end}"
        pos = 0
        for header, _records in iter_records(result.data):  # raises on a CRC mismatch
            out[header.base_offset] = result.data[pos : pos + header.size]
            pos += header.size
        assert pos == len(result.data), "a partial batch was served"
        offset = result.next_offset
    return out


def durable_batches(tracker: FsyncTracker) -> dict[int, bytes]:
    """The batches that were fsynced in a durable segment at or after the durable log start."""
    checkpoint = tracker.durable_file(CHECKPOINT_FILE)
    start = 0
    if checkpoint:
        values = dict(line.split("=", 1) for line in checkpoint.decode().splitlines() if line)
        start = int(values["log.start.offset"])
    out: dict[int, bytes] = {}
    for name in tracker.entries:
        if not name.endswith(".log"):
            continue
        data = tracker.durable_file(name) or b""
        pos = 0
        while pos < len(data):
            try:
                header, _ = decode_batch(data, pos)
            except (KafkaError, ValueError, IndexError):
                break
            if header.last_offset >= start:
                out[header.base_offset] = data[pos : pos + header.size]
            pos += header.size
    return out


def check_read_committed(log: UnifiedLog, model: Model) -> None:
    """Up to the LSO, minus the aborted ranges the log lists: only committed transactions."""
    stable = log.last_stable_offset
    aborted = log.aborted_transactions(log.log_start_offset, stable)
    for offset, data in read_batches(log, stable).items():
        header, _ = decode_batch(data)
        assert header.last_offset < stable or header.is_control
        if header.is_control or not header.is_transactional:
            continue
        if any(a.producer_id == header.producer_id and a.first_offset <= offset <= a.last_offset
               for a in aborted):
            continue
        txn = model.txn_of_batch[offset]
        committed, marker = model.outcome.get(txn, (False, -1))
        assert committed and marker < log.log_end_offset, (
            f"read_committed serves batch {offset} of transaction {txn} "
            f"({'open' if marker < 0 else 'aborted' if not committed else 'marker lost'})"
        )


def producer_view(entry: ProducerStateEntry) -> tuple[int, int, int]:
    return entry.producer_epoch, entry.last_seq, entry.last_offset


def check_same_open_txn(mine: int | None, rebuilt: int | None, base: int) -> None:
    """The first offset of a producer's open transaction, reopened (``mine``) and rebuilt
    from the log alone. One that began below the log start is known only from the snapshot,
    as in Kafka (ProducerStateManager keeps a loaded entry's first offset whatever the log
    start; LogLoader rebuilds from the log start): the log from the start shows its first
    readable batch. Both give the same LSO, ``max(first, log start)``."""
    if mine is not None and mine < base:
        assert rebuilt is not None and mine <= rebuilt, (mine, rebuilt, base)
    else:
        assert mine == rebuilt, (mine, rebuilt, base)


def check_same_as_rebuilt(log: UnifiedLog, config: LogConfig, scratch: Path) -> None:
    """Reopen a copy without snapshots, indexes and transaction indexes, whose checkpoint
    keeps only the log start offset (recovery point 0: everything is scanned again): the
    state rebuilt from the log alone must match."""
    shutil.copytree(log.directory, scratch)
    for path in scratch.iterdir():
        if path.suffix in (".snapshot", ".index", ".timeindex", ".txnindex") or path.name in (
            CHECKPOINT_FILE, ".clean-shutdown"
        ):
            path.unlink()
    write_checkpoint(scratch, LogCheckpoint(0, log.log_start_offset))
    fresh = UnifiedLog.open(scratch, config, FakeClock())
    try:
        base = fresh.log_start_offset
        assert base == log.log_start_offset
        assert fresh.log_end_offset == log.log_end_offset
        # A transaction whose data lies below the log start and whose marker was lost is
        # known only from the snapshot (DeleteRecords is bounded by the high watermark, as in
        # Kafka, and its checkpoint can be durable while the marker is not).
        below_start = [o for o in log.producer_state.ongoing_txn_first_offsets() if o < base]
        if not below_start:
            assert fresh.last_stable_offset == log.last_stable_offset
        ours = log.producer_state.entries()
        rebuilt = fresh.producer_state.entries()
        for pid, entry in rebuilt.items():
            assert pid in ours, f"producer {pid} missing after reopen"
            mine = ours[pid]
            assert mine.producer_epoch == entry.producer_epoch, pid
            check_same_open_txn(mine.current_txn_first_offset, entry.current_txn_first_offset,
                                base)
            if entry.batches:
                assert producer_view(mine) == producer_view(entry), pid
        for pid, entry in ours.items():  # known only from data below the surviving segments
            if pid not in rebuilt:
                assert entry.last_offset < base, pid
                assert (entry.current_txn_first_offset or -1) < base, pid

        # By (producer, marker offset); the rebuilt copy cannot see a transaction's data below
        # the log start, so its first offset may be later than ours (same records dropped).
        mine_aborted = {(a.producer_id, a.last_offset): a.first_offset
                        for a in log.aborted_transactions(base, log.log_end_offset)}
        fresh_aborted = {(a.producer_id, a.last_offset): a.first_offset
                         for a in fresh.aborted_transactions(base, fresh.log_end_offset)}
        for txn, first in fresh_aborted.items():
            assert txn in mine_aborted and mine_aborted[txn] <= first, txn
        for txn, first in mine_aborted.items():  # only ours knows those all below the start
            assert txn in fresh_aborted or first < base, txn
    finally:
        fresh.close()


# -- the tests ---------------------------------------------------------------------------

@FUZZ
@given(config=CONFIGS, ops=st.lists(OPS, min_size=1, max_size=40), data=st.data())
def test_power_loss(config: LogConfig, ops: list[tuple[str, int]], data: st.DataObject) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        directory = root / "t-0"
        directory.mkdir()
        tracker = FsyncTracker(directory)
        clock = FakeClock()
        with tracker.installed():
            log, model = run_history(directory, config, clock, ops)
        try:
            damaged = root / "damaged" / "t-0"
            chosen = power_loss(data.draw, tracker, damaged)
            expected = durable_batches(tracker)
        finally:
            log.close()
        reopened = UnifiedLog.open(damaged, config, clock)  # (a) never raises
        try:
            served = read_batches(reopened)  # never a corrupt batch
            for offset, batch in expected.items():  # (b) everything fsynced survives
                if offset >= reopened.log_start_offset:
                    assert served.get(offset) == batch, (offset, chosen)
            check_read_committed(reopened, model)  # (c)
            check_same_as_rebuilt(reopened, config, root / "fresh" / "t-0")  # (d)
        finally:
            reopened.close()


def test_open_txn_below_log_start_after_restart(tmp_path: Path) -> None:
    """Found by ``test_power_loss`` (its COMMIT marker lost): a transaction's first batch
    below the log start after DeleteRecords, then a restart. The snapshot keeps where it
    began (offset 0, as Kafka's snapshot load does); rebuilt from the log start it begins at
    2; the LSO is the log start either way."""
    config = LogConfig(segment_bytes=300, index_interval_bytes=4096)
    clock = FakeClock()
    log = UnifiedLog.open(tmp_path / "t-0", config, clock)
    for seq in (0, 2):
        log.append(*make_batch(f"txn{seq}", 2, pid=PID_BASE, epoch=0, seq=seq, txn=True,
                               now=clock.now_ms()))
    assert log.delete_records_before(2) == 2
    log.close()  # the snapshot at offset 4
    reopened = UnifiedLog.open(tmp_path / "t-0", config, clock)
    try:
        assert reopened.producer_state.entries()[PID_BASE].current_txn_first_offset == 0
        assert (reopened.log_start_offset, reopened.last_stable_offset) == (2, 2)
        check_same_as_rebuilt(reopened, config, tmp_path / "fresh" / "t-0")
    finally:
        reopened.close()


def flip_bytes(data: st.DataObject, directory: Path) -> list[tuple[str, int, int]]:
    names = sorted(p.name for p in directory.iterdir() if p.stat().st_size > 0)
    flips = []
    for _ in range(data.draw(st.integers(1, 3))):
        if not names:
            break
        name = data.draw(st.sampled_from(names))
        path = directory / name
        content = bytearray(path.read_bytes())
        pos = data.draw(st.integers(0, len(content) - 1))
        mask = data.draw(st.integers(1, 255))
        content[pos] ^= mask
        path.write_bytes(content)
        flips.append((name, pos, mask))
    return flips


@FUZZ
@given(config=CONFIGS, ops=st.lists(OPS, min_size=1, max_size=30), clean=st.booleans(),
       data=st.data())
def test_byte_flips(
    config: LogConfig, ops: list[tuple[str, int]], clean: bool, data: st.DataObject
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp) / "t-0"
        clock = FakeClock()
        log, _model = run_history(directory, config, clock, ops)
        assert isinstance(log.log, PartitionLog)
        recovery_point = log.log.recovery_point
        if clean:
            log.close()
            recovery_point = log.log_end_offset
        damaged = Path(tmp) / "damaged" / "t-0"
        shutil.copytree(directory, damaged)
        if not clean:
            log.close()
        flips = flip_bytes(data, damaged)
        reopened = UnifiedLog.open(damaged, config, clock)  # never raises
        try:
            # After a clean shutdown the segments are trusted without a CRC scan (as in
            # Kafka): a flip there can be served; only the open is checked.
            start = max(reopened.log_start_offset, recovery_point)
            if not clean and start < reopened.log_end_offset:
                result = reopened.read(start, 1 << 30)
                for _header, _records in iter_records(result.data):  # CRC checked
                    pass
            assert reopened.last_stable_offset <= reopened.log_end_offset, flips
        finally:
            reopened.close()


TXN_IDS = [f"txn-{i}" for i in range(4)]
STATES = [TransactionState.EMPTY, TransactionState.ONGOING, TransactionState.PREPARE_COMMIT,
          TransactionState.COMPLETE_COMMIT, TransactionState.PREPARE_ABORT,
          TransactionState.COMPLETE_ABORT]


@FUZZ
@given(
    writes=st.lists(
        st.tuples(st.sampled_from(TXN_IDS), st.sampled_from(STATES), st.integers(0, 5)),
        min_size=1, max_size=40,
    ),
    flush_every=st.integers(1, 10),
    data=st.data(),
)
def test_transaction_log_byte_flips(
    writes: list[tuple[str, TransactionState, int]], flush_every: int, data: st.DataObject
) -> None:
    """A ``__transaction_state`` partition: after flips and a restart every record served
    passes its CRC and decodes through the transaction log codec to what was written there."""
    config = LogConfig(segment_bytes=400)
    clock = FakeClock()
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp) / "__transaction_state-0"
        log = UnifiedLog.open(directory, config, clock)
        written: dict[int, tuple[str, TxnTransitMetadata]] = {}
        for i, (tid, state, epoch) in enumerate(writes):
            partitions = (
                frozenset() if state is TransactionState.EMPTY else frozenset({("t", 0)})
            )
            transit = TxnTransitMetadata(state, 7, epoch, 60000, partitions, clock.now_ms(),
                                         clock.now_ms())
            key, value = encode_record(tid, transit)
            buf = bytearray(encode_batch([RecordInput(key=key, value=value,
                                                      timestamp=clock.now_ms())]))
            offset = log.append(buf, validate_batches(buf, max_batch_bytes=10**7)).base_offset
            written[offset] = (tid, transit)
            if i % flush_every == 0:
                log.flush()
        damaged = Path(tmp) / "damaged" / directory.name
        shutil.copytree(directory, damaged)
        assert isinstance(log.log, PartitionLog)
        recovery_point = log.log.recovery_point
        log.close()
        flips = flip_bytes(data, damaged)
        reopened = UnifiedLog.open(damaged, config, clock)
        try:
            offset = max(reopened.log_start_offset, recovery_point)
            if offset < reopened.log_end_offset:
                result = reopened.read(offset, 1 << 30)
                for _header, records in iter_records(result.data):
                    for record in records:
                        assert record.key is not None
                        tid, transit = written[record.offset]
                        assert decode_key(record.key) == tid, flips
                        assert decode_value(record.value) == transit, flips
        finally:
            reopened.close()



def test_damage_in_a_trusted_segment_does_not_fail_the_open(tmp_path: Path) -> None:
    """Found by ``test_byte_flips``: after a clean shutdown the segments are trusted without
    a CRC scan. A damaged base offset in the last segment makes the open truncate it, and
    the producer snapshots above the new end go; the producer state is then rebuilt by
    walking the headers from the log start, which met a damaged batch length in the first
    segment and raised CorruptSegmentError out of the open. The walk now stops at the
    damage and the partition opens."""
    config = LogConfig(segment_bytes=300, index_interval_bytes=0)
    clock = FakeClock()
    directory = tmp_path / "t-0"
    log, _model = run_history(directory, config, clock, [("plain", 1)] * 5)
    log.close()
    for name, position, mask in ((f"{0:020d}.log", 11, 4), (f"{3:020d}.log", 0, 1)):
        content = bytearray((directory / name).read_bytes())
        content[position] ^= mask
        (directory / name).write_bytes(content)
    reopened = UnifiedLog.open(directory, config, clock)
    try:
        assert reopened.log_end_offset == 3  # the last segment's damaged batch cut
    finally:
        reopened.close()
