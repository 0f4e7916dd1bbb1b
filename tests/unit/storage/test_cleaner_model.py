"""The log cleaner against a model: whatever plain, idempotent and transactional writes,
commits, aborts, tombstones and cleaning passes happen, in any order, a read of the
compacted log from its start shows what the model says.

The model keeps every write with its offset and how its transaction ended. After any
sequence of operations:

* **read_committed** (records below the LSO, aborted ones filtered by the aborted list the
  fetch returns): the last value of each key equals the model's latest *committed* value of
  that key among the writes below the LSO, a tombstone and an absent key counting the same
  (a tombstone may be removed once its delete horizon has passed). No record read has a
  value that the model says was aborted.
* **read_uncommitted** (everything up to the high watermark, nothing filtered): the last
  value of each key is its latest committed value, or the value of a write after it whose
  transaction aborted or is still open. The cleaner removes aborted records but never makes
  an older committed value reappear over a newer one, nor an aborted one over a committed one.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

from hypothesis import example, given, settings
from hypothesis import strategies as st

from oncelog.clock import FakeClock
from oncelog.config import LogConfig
from oncelog.records.batch import parse_header
from oncelog.records.codec import RecordInput, encode_batch, iter_records
from oncelog.storage.cleaner_run import clean_now
from oncelog.storage.engine import IsolationLevel
from oncelog.storage.unified_log import UnifiedLog

T0 = 1_700_000_000_000
RETENTION = 1000
KEYS = [b"a", b"b"]
PIDS = [1, 2]  # transactional producers; 3 is idempotent, -1 plain


@dataclass(slots=True)
class Write:
    offset: int
    key: bytes
    value: bytes | None
    pid: int  # transactional producer id, or -1
    outcome: str  # "committed" | "aborted" | "open"


class Model:
    def __init__(self) -> None:
        self.writes: list[Write] = []
        self.open: dict[int, list[Write]] = {}

    def latest(self, key: bytes, below: int) -> tuple[int, bytes | None]:
        """(offset, value) of the key's latest committed write below ``below``."""
        found: tuple[int, bytes | None] = (-1, None)
        for w in self.writes:
            if w.key == key and w.offset < below and w.outcome == "committed":
                found = (w.offset, w.value)
        return found


Op = tuple[str, int, int, bool]  # (kind, key index or pid index, pid index, tombstone)

ops = st.lists(
    st.one_of(
        st.tuples(st.sampled_from(["plain", "idem"]), st.integers(0, 1), st.just(0),
                  st.booleans()),
        st.tuples(st.just("txn"), st.integers(0, 1), st.integers(0, 1), st.booleans()),
        st.tuples(st.sampled_from(["commit", "abort"]), st.just(0), st.integers(0, 1),
                  st.just(False)),
        st.tuples(st.sampled_from(["clean", "wait"]), st.just(0), st.just(0), st.just(False)),
    ),
    min_size=1, max_size=40,
)


class Run:
    def __init__(self, directory: Path) -> None:
        self.clock = FakeClock(T0)
        self.engine = UnifiedLog.open(directory, LogConfig(
            cleanup_policy="compact", segment_bytes=200, min_cleanable_dirty_ratio=0.0,
            delete_retention_ms=RETENTION,
        ), self.clock)
        self.model = Model()
        self.seq: dict[int, int] = {}
        self.count = 0

    def put(self, key: bytes, tombstone: bool, pid: int, txn: bool) -> None:
        self.count += 1
        value = None if tombstone else f"v{self.count}".encode()
        seq = self.seq.get(pid, 0) if pid >= 0 else -1
        data = bytearray(encode_batch(
            [RecordInput(key, value, timestamp=self.clock.now_ms())],
            producer_id=pid, producer_epoch=0 if pid >= 0 else -1, base_sequence=seq,
            transactional=txn,
        ))
        if pid >= 0:
            self.seq[pid] = seq + 1
        offset = self.engine.append(data, [parse_header(data)]).base_offset
        write = Write(offset, key, value, pid if txn else -1, "open" if txn else "committed")
        self.model.writes.append(write)
        if txn:
            self.model.open.setdefault(pid, []).append(write)

    def end(self, pid: int, commit: bool) -> None:
        if pid not in self.model.open:
            return  # no marker without a transaction (the coordinator writes none)
        self.engine.append_marker(pid, 0, 0, commit)
        for write in self.model.open.pop(pid):
            write.outcome = "committed" if commit else "aborted"

    def apply(self, op: Op) -> None:
        kind, a, b, tombstone = op
        if kind == "plain":
            self.put(KEYS[a], tombstone, -1, False)
        elif kind == "idem":
            self.put(KEYS[a], tombstone, 3, False)
        elif kind == "txn":
            self.put(KEYS[a], tombstone, PIDS[b], True)
        elif kind in ("commit", "abort"):
            self.end(PIDS[b], kind == "commit")
        elif kind == "clean":
            self.engine.flush()  # only flushed segments are cleaned
            clean_now(self.engine, now_ms=self.clock.now_ms())
        else:
            self.clock.advance(RETENTION // 2 + 1)

    def check(self) -> None:
        engine, model = self.engine, self.model
        lso = engine.last_stable_offset
        fetched = engine.read(engine.log_start_offset, 1 << 24, IsolationLevel.READ_COMMITTED)
        aborted_list = fetched.aborted or []
        by_offset = {w.offset: w for w in model.writes}
        committed: dict[bytes, bytes | None] = {}
        for h, records in iter_records(fetched.data):
            if h.is_control or any(t.producer_id == h.producer_id and t.first_offset
                                   <= h.base_offset <= t.last_offset for t in aborted_list):
                continue
            for r in records:
                assert r.offset < lso
                assert by_offset[r.offset].outcome == "committed", r.offset
                assert r.key is not None
                committed[r.key] = r.value
        for key in KEYS:
            assert committed.get(key) == model.latest(key, lso)[1], key

        everything = engine.read(engine.log_start_offset, 1 << 24).data
        uncommitted: dict[bytes, bytes | None] = {}
        last_offset = -1
        for h, records in iter_records(everything):
            if h.is_control:
                continue
            for r in records:
                assert r.offset > last_offset
                last_offset = r.offset
                assert r.key is not None
                uncommitted[r.key] = r.value
        end = engine.log_end_offset
        for key in KEYS:
            since, value = model.latest(key, end)
            allowed = {value} | {w.value for w in model.writes if w.key == key
                                 and w.offset > since and w.outcome != "committed"}
            assert uncommitted.get(key) in allowed, (key, uncommitted.get(key), allowed)


@settings(max_examples=200, deadline=None)
@given(ops)
@example([("plain", 0, 0, False), ("txn", 0, 0, False), ("abort", 0, 0, False)]
         + [("plain", 1, 0, False)] * 5 + [("clean", 0, 0, False)])
def test_compacted_log_reads_as_the_model_says(operations: list[Op]) -> None:
    with tempfile.TemporaryDirectory() as directory:
        run = Run(Path(directory) / "p")
        try:
            for op in operations:
                run.apply(op)
                if op[0] == "clean":
                    run.check()
            run.apply(("clean", 0, 0, False))
            run.check()
        finally:
            run.engine.close()
