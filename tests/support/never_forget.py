"""The "never forget" rule of the cluster fault runs (DESIGN.md invariant 9): a record that
a read_committed or read_uncommitted consumer has read at an offset stays that record at
that offset for the rest of the run. No I/O: the consumers' shell
(tests/support/consumed_observer.py) feeds what they read, and gets the anomalies back.

A consumer reads a partition in *passes*: from a start offset forward, in offset order (a
new consumer per pass, so nothing read before the pass arrives during it). What it is fed:

- ``begin_pass(isolation, tp, start)``: the consumer starts reading ``tp`` at ``start``;
- ``observe(isolation, tp, offset, record)``: it read ``record`` at ``offset``;
- ``at_end(isolation, tp, end)``: it reached the end of ``tp`` (the high watermark, or the
  last stable offset under read_committed) at ``end``;
- ``final(tp, end)``: the run is over, every fault healed, and ``end`` is the partition's
  final high watermark.

Every offset's first record is remembered with who read it. Two kinds of anomaly:

- *changed*: a later read of a remembered offset gives another record (key, value,
  timestamp or the batch's leader epoch differ: followers copy batches whole, so the same
  record is the same on every replica);
- *gone*: a pass moved past a remembered offset without reading it, or the final high
  watermark is at or below it. A read_uncommitted pass must read every remembered offset (a
  data record is never skipped under read_uncommitted); a read_committed pass only those a
  read_committed consumer has read (an aborted transaction's records, which only
  read_uncommitted reads, are skipped by read_committed, rightly). An end below a
  remembered offset during the run is not an anomaly by itself (a new leader's high
  watermark may lag for a moment): the record must come back, as it was, by the next pass
  or by ``final``.

Each (partition, offset) is reported once per distinct record seen there (once for
"gone"); ``forgotten_offsets()`` counts the distinct offsets reported, the figure of the
fault run ("consumed-then-changed records").
"""

from __future__ import annotations

from dataclasses import dataclass

READ_COMMITTED, READ_UNCOMMITTED = "read_committed", "read_uncommitted"
# Bits of who read a remembered offset's record, and of who read it first.
_READ_BY = {READ_UNCOMMITTED: 1, READ_COMMITTED: 2}
_FIRST_READ_COMMITTED = 4
# What a pass of each isolation level must read again among the remembered offsets.
_MUST_READ = {READ_UNCOMMITTED: 1 | 2, READ_COMMITTED: 2}

TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class Record:
    """What identifies a record at its offset (the producer and transaction are in the
    values the fault runs write: ``b"<producer>:<txn>:<partition>:<index>"``, ``b"<n>"``)."""

    key: bytes | None
    value: bytes | None
    timestamp: int
    leader_epoch: int | None = None  # the batch's partition leader epoch

    def __str__(self) -> str:
        epoch = "" if self.leader_epoch is None else f" epoch {self.leader_epoch}"
        return f"key={self.key!r} value={self.value!r} ts={self.timestamp}{epoch}"


@dataclass(frozen=True)
class Forgotten:
    """A consumed-then-changed anomaly: ``first`` was read at ``offset`` (first under
    ``first_read``), then ``then`` was read there (None: the record is gone, ``how`` says
    how it was found missing)."""

    topic: str
    partition: int
    offset: int
    first: Record
    first_read: str
    then: Record | None
    how: str

    def __str__(self) -> str:
        now = f"then {self.then} ({self.how})" if self.then is not None else f"gone ({self.how})"
        return (f"{self.topic}-{self.partition}@{self.offset}: read as {self.first} "
                f"({self.first_read}), {now}")


class _Partition:
    """The first record read at each offset of one partition, and who has read it."""

    __slots__ = ("read_by", "records")

    def __init__(self) -> None:
        self.records: list[Record | None] = []
        self.read_by = bytearray()

    def remember(self, offset: int, record: Record, who: int) -> Record:
        """The record first read at ``offset`` (``record`` if none before); ``who`` is
        added to its readers only when it is that record."""
        if offset >= len(self.records):
            grow = offset + 1 - len(self.records)
            self.records.extend([None] * grow)
            self.read_by.extend(bytes(grow))
        first = self.records[offset]
        if first is None:
            self.records[offset] = first = record
            if who == _READ_BY[READ_COMMITTED]:
                self.read_by[offset] = _FIRST_READ_COMMITTED
        if first == record:
            self.read_by[offset] |= who
        return first

    def first_read(self, offset: int) -> str:
        return READ_COMMITTED if self.read_by[offset] & _FIRST_READ_COMMITTED else (
            READ_UNCOMMITTED)

    def remembered(self, low: int, high: int, must: int) -> list[int]:
        """Remembered offsets in [low, high) read by one of ``must``."""
        high = min(high, len(self.records))
        return [o for o in range(max(low, 0), high) if self.read_by[o] & must]


class NeverForget:
    """The rule; see the module docstring."""

    def __init__(self) -> None:
        self._partitions: dict[TopicPartition, _Partition] = {}
        self._cursor: dict[tuple[str, TopicPartition], int] = {}
        self._reported: set[tuple[TopicPartition, int, Record | None]] = set()
        self.forgotten: list[Forgotten] = []
        self.observations = 0

    def _partition(self, tp: TopicPartition) -> _Partition:
        return self._partitions.setdefault(tp, _Partition())

    def begin_pass(self, isolation: str, tp: TopicPartition, start: int = 0) -> None:
        if isolation not in _READ_BY:
            raise ValueError(f"unknown isolation level {isolation!r}")
        self._cursor[isolation, tp] = start - 1

    def observe(self, isolation: str, tp: TopicPartition, offset: int,
                record: Record) -> list[Forgotten]:
        self.observations += 1
        found = self._skipped(isolation, tp, offset, f"read {offset}")
        part = self._partition(tp)
        first = part.remember(offset, record, _READ_BY[isolation])
        if first != record:
            found += self._report(tp, offset, first, part.first_read(offset), record,
                                  f"changed, read by {isolation}")
        self._cursor[isolation, tp] = max(offset, self._cursor.get((isolation, tp), -1))
        return found

    def at_end(self, isolation: str, tp: TopicPartition, end: int) -> list[Forgotten]:
        found = self._skipped(isolation, tp, end, f"reached the end at {end}")
        self._cursor[isolation, tp] = max(end - 1, self._cursor.get((isolation, tp), -1))
        return found

    def final(self, tp: TopicPartition, end: int) -> list[Forgotten]:
        part = self._partition(tp)
        found: list[Forgotten] = []
        for offset in part.remembered(end, len(part.records), _MUST_READ[READ_UNCOMMITTED]):
            first = part.records[offset]
            assert first is not None
            found += self._report(tp, offset, first, part.first_read(offset), None,
                                  f"the final high watermark is {end}")
        return found

    def _skipped(self, isolation: str, tp: TopicPartition, upto: int,
                 what: str) -> list[Forgotten]:
        """Remembered offsets that ``isolation``'s pass must read, between its last read
        and ``upto``, that it went past."""
        last = self._cursor.get((isolation, tp))
        if last is None or upto <= last + 1:
            return []
        part = self._partition(tp)
        found: list[Forgotten] = []
        for offset in part.remembered(last + 1, upto, _MUST_READ[isolation]):
            first = part.records[offset]
            assert first is not None
            found += self._report(tp, offset, first, part.first_read(offset), None,
                                  f"{isolation} skipped it: after {last} it {what}")
        return found

    def _report(self, tp: TopicPartition, offset: int, first: Record, first_read: str,
                then: Record | None, how: str) -> list[Forgotten]:
        key = (tp, offset, then)
        if key in self._reported:
            return []
        self._reported.add(key)
        anomaly = Forgotten(tp[0], tp[1], offset, first, first_read, then, how)
        self.forgotten.append(anomaly)
        return [anomaly]

    # -- figures ---------------------------------------------------------------------------
    def forgotten_offsets(self) -> int:
        """Distinct (partition, offset) with an anomaly: the consumed-then-changed count."""
        return len({(f.topic, f.partition, f.offset) for f in self.forgotten})

    def remembered(self) -> int:
        return sum(sum(1 for r in p.records if r is not None)
                   for p in self._partitions.values())
