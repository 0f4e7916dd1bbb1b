"""The verify checker: ``check(history) -> Results``, a pure function over a run's history
(no I/O, no clock), linear in the size of the history (dict indexes; the cycle search is
linear too, see ``cycles.py``).

The anomaly classes are issue 15's (``history.ANOMALY_KINDS``), after Jepsen's Kafka
workload (jepsen-io/jepsen ``jepsen/src/jepsen/tests/kafka.clj``), adapted to what our
workload records: per transaction its polls, sends with delivery offsets, the consumer
session (a new one on every seek back or rebalance) and outcome, and at the end a
read_committed read of every partition from the beginning plus the group's committed
offsets.

Who wrote a record. Values are unique, except a derived value ``"x:" + v`` that two
transactions made from the same input ``v`` (one aborted, or a duplicate). A record read
at (partition, offset) belongs to the send whose delivery offset that is, else to the only
operation that sent its value; when neither settles it, the record is unattributed, and
only the duplicate and inconsistent-offset checks (which need no writer) look at it.

Offsets. Kafka numbers a record when it is appended, not when its transaction commits;
read_committed skips aborted records and control markers, so gaps between consecutive
offsets are normal. A poll skipped something only when a record of the final read (so
committed) lies strictly between two consecutive offsets one session polled: a
read_committed consumer cannot pass an undecided transaction (it stops at the last stable
offset), so such a record was committed when the poll went past it.

Outcomes. ``fail`` never committed: any read of its records is an aborted read.
``unknown`` may have committed or not, all or nothing: never an aborted read, a torn
transaction when partly visible, and it counts as committed (its missing records lost or
unseen) once any of its records was read. ``ok`` committed.

Dependency cycles (``cycles.py``). Edges, as in Jepsen: ``ww`` from the writer of each
record of the final read to the writer of the next one in the same partition (different
operations), ``wr`` from a record's writer to each operation that polled it. Jepsen leaves
``rw`` out of its graph (its rw graph is commented out) and so do we: a poll returns at
most some records, so reading a partition up to offset o says nothing about whether the
record after o was already committed; no class here needs it.

What is a failure in Kafka's model:

- G0, a cycle of ww edges: writes are not isolated across partitions (T1 appends to p
  before T2, T2 to q before T1, both commit). Reported, never a failure (Jepsen always
  allows G0).
- G1c, a cycle of ww and wr edges that holds at least one wr edge, where a ww edge counts
  only when its transactions are ordered in real time: the earlier one completed
  (committed) before the later one was invoked. Jepsen allows every G1c when it infers ww
  edges, because an offset order between concurrent transactions orders their sends,
  not their commits: T1 sends to p (offset 10), T2 sends to p (offset 11) and to q and
  commits, T1 polls q and sees T2's record, then commits; ww T1 -> T2 and wr T2 -> T1 is
  a cycle Kafka legitimately produces. With only the edges kept here every edge a -> b
  means "a committed before b committed" (wr: b polled a's committed record before
  committing itself; real-time ww: a's commit returned before b began), so a cycle is
  impossible in any correct execution.

Each class keeps its first ``MAX_EXAMPLES`` anomalies as examples; ``totals
["anomaly_counts"]`` counts them all (cycles: one per strongly connected component).
"""

from __future__ import annotations

import bisect
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field

from oncelog.verify.cycles import WR, WW, WW_REALTIME, DependencyGraph, Step
from oncelog.verify.history import (
    ANOMALY_KINDS,
    DERIVED_PREFIX,
    FAIL,
    NOT_FAILURES,
    OK,
    UNKNOWN,
    Anomaly,
    History,
    Op,
    Results,
    Send,
    split_tp,
    tp_key,
)

MAX_EXAMPLES = 50
MAX_OPS_PER_ANOMALY = 10

# (tp, offset, value) of one record some read returned
Record = tuple[str, int, str]


@dataclass
class _Found:
    examples: dict[str, list[Anomaly]] = field(
        default_factory=lambda: {kind: [] for kind in ANOMALY_KINDS})
    counts: Counter[str] = field(default_factory=Counter)

    def add(self, anomaly: Anomaly) -> None:
        self.counts[anomaly.kind] += 1
        if len(self.examples[anomaly.kind]) < MAX_EXAMPLES:
            self.examples[anomaly.kind].append(anomaly)


class _Index:
    """The history's lookups, built in one pass over sends, polls and the final read."""

    def __init__(self, history: History) -> None:
        self.ops = history.ops
        self.refs = [op.index if op.index >= 0 else i for i, op in enumerate(self.ops)]
        # value -> positions of the operations that sent it
        self.writers: dict[str, list[int]] = defaultdict(list)
        # (tp, delivery offset) -> (position, value) of the send delivered there
        self.sent_at: dict[tuple[str, int], tuple[int, str]] = {}
        for pos, op in enumerate(self.ops):
            for send in op.sends:
                self.writers[send.value].append(pos)
                offset = _offset(send)
                if offset is not None:
                    self.sent_at.setdefault((send.tp, offset), (pos, send.value))
        final = history.final
        self.final_complete = final is not None and final.complete
        self.committed = final.committed if final is not None else {}
        # tp -> the final read's records in offset order; tp -> offset -> value
        self.final: dict[str, list[tuple[int, str]]] = {}
        self.final_at: dict[str, dict[int, str]] = {}
        self.final_offsets: dict[str, list[int]] = {}
        self.final_values: dict[str, set[str]] = {}
        for tp, records in (final.reads if final is not None else {}).items():
            ordered = sorted(records, key=lambda record: record[0])
            self.final[tp] = ordered
            self.final_at[tp] = {}
            for offset, value in ordered:
                self.final_at[tp].setdefault(offset, value)
            self.final_offsets[tp] = [offset for offset, _ in ordered]
            self.final_values[tp] = {value for _, value in ordered}
        # operations some record of which was read by a poll or the final read
        self.seen: set[int] = set()
        for tp, offset, value in self.final_records():
            self.maybe_seen(tp, offset, value)
        for _, tp, offset, value in self.polled_records():
            self.maybe_seen(tp, offset, value)

    def maybe_seen(self, tp: str, offset: int, value: str) -> None:
        writer = self.writer_of(tp, offset, value)
        if writer is not None:
            self.seen.add(writer)

    def writer_of(self, tp: str, offset: int, value: str) -> int | None:
        sent = self.sent_at.get((tp, offset))
        if sent is not None and sent[1] == value:
            return sent[0]
        writers = self.writers.get(value)
        if writers is not None and len(set(writers)) == 1:
            return writers[0]
        return None

    def final_records(self) -> Iterator[Record]:
        for tp, records in self.final.items():
            for offset, value in records:
                yield tp, offset, value

    def polled_records(self) -> Iterator[tuple[int, str, int, str]]:
        """(reader position, tp, offset, value) of every polled record."""
        for pos, op in enumerate(self.ops):
            for poll in op.polls:
                for tp, records in poll.reads.items():
                    for offset, value in records:
                        yield pos, tp, offset, value

    def visible(self, send: Send) -> bool | None:
        """Whether the final read holds this send's record (None: cannot tell, its value
        was sent by several operations and its offset is unknown)."""
        offset = _offset(send)
        if offset is not None and self.final_at.get(send.tp, {}).get(offset) == send.value:
            return True
        if send.value not in self.final_values.get(send.tp, ()):
            return False
        return True if len(set(self.writers[send.value])) == 1 else None

    def final_max(self, tp: str) -> int:
        offsets = self.final_offsets.get(tp)
        return offsets[-1] if offsets else -1

    def committed_ops(self) -> Iterator[tuple[int, Op]]:
        """ok operations, and unknown ones proven committed (some record of theirs read)."""
        for pos, op in enumerate(self.ops):
            if op.outcome == OK or (op.outcome == UNKNOWN and pos in self.seen):
                yield pos, op

    def names(self, positions: list[int]) -> str:
        return ", ".join(self.ops[pos].name for pos in positions[:MAX_OPS_PER_ANOMALY])

    def anomaly(self, kind: str, explanation: str, positions: list[int],
                tp: str | None = None, offset: int | None = None,
                value: str | None = None) -> Anomaly:
        unique = list(dict.fromkeys(positions))[:MAX_OPS_PER_ANOMALY]
        return Anomaly(kind, explanation, [self.refs[pos] for pos in unique], tp, offset,
                       value)


def _offset(send: Send) -> int | None:
    """A delivery offset, or None (clients report a failed delivery as a negative one)."""
    return send.offset if send.offset is not None and send.offset >= 0 else None


def check(history: History) -> Results:
    idx = _Index(history)
    found = _Found()
    for anomaly in _checks(history, idx):
        found.add(anomaly)
    counts = {kind: found.counts[kind] for kind in ANOMALY_KINDS if found.counts[kind]}
    totals = _totals(history)
    totals["anomaly_counts"] = counts
    valid = not any(kind not in NOT_FAILURES for kind in counts)
    return Results(valid, found.examples, totals)


def _checks(history: History, idx: _Index) -> Iterator[Anomaly]:
    yield from _offset_conflicts(idx)
    yield from _aborted_reads(idx)
    yield from _torn_lost_unseen(idx)
    yield from _poll_order(idx)
    yield from _send_order(idx)
    yield from _consume_transform_produce(history, idx)
    yield from _cycles(idx)
    if history.final is not None and history.final.committed_error is not None:
        yield Anomaly("final-read-incomplete",
                      "the group's committed offsets could not be read after the run "
                      f"({history.final.committed_error}): consume-transform-produce "
                      "cannot be checked against them")
    if history.final is None or not history.final.complete:
        why = ("there is no final read" if history.final is None else
               "the final read did not reach the end of every partition")
        yield Anomaly("final-read-incomplete",
                      f"{why}: lost and unseen writes, torn transactions and lost "
                      "consume-transform-produce inputs cannot be ruled out")


def _totals(history: History) -> dict[str, object]:
    ops = history.ops
    outcomes = Counter(op.outcome for op in ops)
    final = history.final
    return {
        "ops": len(ops),
        "txns": {outcome: outcomes[outcome] for outcome in (OK, FAIL, UNKNOWN)},
        "sends": sum(len(op.sends) for op in ops),
        "polled_records": sum(len(records) for op in ops for poll in op.polls
                              for records in poll.reads.values()),
        "faults": dict(Counter(fault.kind for fault in history.faults)),
        "final_records": sum(len(r) for r in final.reads.values()) if final is not None else 0,
        "duration_s": history.info.duration_s,
        "clients": dict(Counter(op.client for op in ops)),
    }


# ---- one value, one offset ------------------------------------------------------------

def _observations(idx: _Index) -> Iterator[tuple[str, int, str, int | None, bool]]:
    """Every (tp, offset, value, operation or None for the final read, committed) any part
    saw; ``committed`` is false for a send of a transaction not known to have committed."""
    committed = {pos for pos, _ in idx.committed_ops()}
    for pos, op in enumerate(idx.ops):
        for send in op.sends:
            offset = _offset(send)
            if offset is not None:
                yield send.tp, offset, send.value, pos, pos in committed
    for pos, tp, offset, value in idx.polled_records():
        yield tp, offset, value, pos, True
    for tp, offset, value in idx.final_records():
        yield tp, offset, value, None, True


def _offset_conflicts(idx: _Index) -> Iterator[Anomaly]:
    """duplicate: one value at two offsets of a partition (sends of transactions not known
    to have committed left out: an aborted transaction and its retry both send ``x:v``);
    inconsistent-offset: one offset with two values (every delivery counts: an aborted
    record keeps its offset). A first pass keeps one value per offset and one offset per value and
    notes conflicts; a second one gathers the witnesses of the (rare) conflicts only."""
    value_at: dict[tuple[str, int], str] = {}
    offset_of: dict[tuple[str, str], int] = {}
    bad_offsets: set[tuple[str, int]] = set()
    bad_values: set[tuple[str, str]] = set()
    for tp, offset, value, _, committed in _observations(idx):
        if value_at.setdefault((tp, offset), value) != value:
            bad_offsets.add((tp, offset))
        if committed and offset_of.setdefault((tp, value), offset) != offset:
            bad_values.add((tp, value))
    if not bad_offsets and not bad_values:
        return
    at: dict[tuple[str, int], dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
    where: dict[tuple[str, str], dict[int, list[int]]] = defaultdict(lambda: defaultdict(list))
    for tp, offset, value, pos, committed in _observations(idx):
        witnesses = [] if pos is None else [pos]
        if (tp, offset) in bad_offsets:
            at[(tp, offset)][value].extend(witnesses)
        if committed and (tp, value) in bad_values:
            where[(tp, value)][offset].extend(witnesses)
    for (tp, value), offsets in sorted(where.items()):
        positions = [pos for w in offsets.values() for pos in w]
        yield idx.anomaly(
            "duplicate", f"value {value!r} appears at offsets {sorted(offsets)} of {tp} "
            f"(seen by {idx.names(positions) or 'the final read'})", positions, tp,
            min(offsets), value)
    for (tp, offset), values in sorted(at.items()):
        positions = [pos for w in values.values() for pos in w]
        yield idx.anomaly(
            "inconsistent-offset", f"offset {offset} of {tp} holds values "
            f"{sorted(values)} (seen by {idx.names(positions) or 'the final read'})",
            positions, tp, offset)


# ---- visibility -----------------------------------------------------------------------

def _aborted_reads(idx: _Index) -> Iterator[Anomaly]:
    readers: dict[Record, list[int]] = defaultdict(list)
    for pos, tp, offset, value in idx.polled_records():
        writer = idx.writer_of(tp, offset, value)
        if writer is not None and idx.ops[writer].outcome == FAIL:
            readers[(tp, offset, value)].append(pos)
    for tp, offset, value in idx.final_records():
        writer = idx.writer_of(tp, offset, value)
        if writer is not None and idx.ops[writer].outcome == FAIL:
            readers.setdefault((tp, offset, value), [])
    for (tp, offset, value), positions in readers.items():
        writer = idx.writer_of(tp, offset, value)
        assert writer is not None
        in_final = idx.final_at.get(tp, {}).get(offset) == value
        seen_by = [f"polled by {idx.names(positions)}"] if positions else []
        seen_by += ["in the final read"] if in_final else []
        yield idx.anomaly(
            "aborted-read", f"{idx.ops[writer].name} never committed, yet its {value!r} at "
            f"{tp}@{offset} was {' and '.join(seen_by)}", [writer, *positions], tp, offset,
            value)


def _torn_lost_unseen(idx: _Index) -> Iterator[Anomaly]:
    """torn-transaction: partly visible in a complete final read (then its missing records
    are not also reported lost); lost-write: a committed record missing from the final read
    although the final read went past its offset; unseen-write: missing, offset unknown
    or beyond what the final read reached, the final read complete."""
    candidates = [(pos, op) for pos, op in enumerate(idx.ops) if op.outcome != FAIL]
    committed = {pos for pos, _ in idx.committed_ops()}
    polled_offset: dict[tuple[str, str], int] | None = None
    for pos, op in candidates:
        shown = [(send, idx.visible(send)) for send in op.sends]
        missing = [send for send, visible in shown if visible is False]
        if not missing:
            continue
        if idx.final_complete and any(visible for _, visible in shown):
            present = [send for send, visible in shown if visible]
            yield idx.anomaly(
                "torn-transaction", f"{op.outcome} {op.name}: the final read holds "
                f"{_sends(present)} but not {_sends(missing)}", [pos], missing[0].tp,
                missing[0].offset, missing[0].value)
            continue
        if pos not in committed:
            continue
        for send in missing:
            offset = _offset(send)
            if offset is None:
                if polled_offset is None:
                    polled_offset = {(tp, v): o for _, tp, o, v in idx.polled_records()}
                offset = polled_offset.get((send.tp, send.value))
            reached = idx.final_max(send.tp)
            if offset is not None and reached > offset:
                yield idx.anomaly(
                    "lost-write", f"{op.outcome} {op.name} wrote {send.value!r} at "
                    f"{send.tp}@{offset}; the final read went on to offset {reached} "
                    "without it", [pos], send.tp, offset, send.value)
            elif idx.final_complete:
                where = "offset unknown" if offset is None else f"offset {offset}"
                yield idx.anomaly(
                    "unseen-write", f"{op.outcome} {op.name} wrote {send.value!r} to "
                    f"{send.tp} ({where}); the complete final read never saw it", [pos],
                    send.tp, offset, send.value)


def _sends(sends: list[Send]) -> str:
    return ", ".join(f"{s.value!r} ({s.tp}@{s.offset})" for s in sends[:5]) + (
        f" and {len(sends) - 5} more" if len(sends) > 5 else "")


# ---- order within one process ---------------------------------------------------------

def _by_process(ops: list[Op]) -> list[int]:
    """Positions in (process, seq) order."""
    return sorted(range(len(ops)), key=lambda pos: (ops[pos].process, ops[pos].seq))


def _poll_order(idx: _Index) -> Iterator[Anomaly]:
    """Within one (process, session, partition), each polled offset is above the one
    before, with no committed record of the final read strictly between them."""
    last: dict[tuple[int, int, str], tuple[int, int, str]] = {}  # -> (pos, offset, value)
    for pos in _by_process(idx.ops):
        op = idx.ops[pos]
        for poll in op.polls:
            for tp, records in poll.reads.items():
                key = (op.process, poll.session, tp)
                for offset, value in records:
                    before = last.get(key)
                    last[key] = (pos, offset, value)
                    if before is None:
                        continue
                    prev_pos, prev_offset, prev_value = before
                    where = f"process {op.process} session {poll.session} on {tp}"
                    if offset <= prev_offset:
                        yield idx.anomaly(
                            "nonmonotonic-poll", f"{where}: {idx.ops[prev_pos].name} polled "
                            f"{prev_value!r}@{prev_offset}, then {op.name} polled "
                            f"{value!r}@{offset}", [prev_pos, pos], tp, offset, value)
                        continue
                    offsets = idx.final_offsets.get(tp, [])
                    i = bisect.bisect_right(offsets, prev_offset)
                    if i < len(offsets) and offsets[i] < offset:
                        skipped = idx.final_at[tp][offsets[i]]
                        yield idx.anomaly(
                            "poll-skip", f"{where}: {idx.ops[prev_pos].name} polled offset "
                            f"{prev_offset}, then {op.name} polled {offset}, skipping the "
                            f"committed {skipped!r}@{offsets[i]}", [prev_pos, pos], tp,
                            offsets[i], skipped)


def _send_order(idx: _Index) -> Iterator[Anomaly]:
    """Within one (process, producer session, partition), each transaction's delivery
    offsets are above every offset of the transactions before it."""
    last: dict[tuple[int, int, str], tuple[int, int]] = {}  # -> (pos, highest offset)
    for pos in _by_process(idx.ops):
        op = idx.ops[pos]
        offsets: dict[str, list[int]] = defaultdict(list)
        for send in op.sends:
            offset = _offset(send)
            if offset is not None:
                offsets[send.tp].append(offset)
        for tp, sent in offsets.items():
            key = (op.process, op.producer_session, tp)
            before = last.get(key)
            if before is not None and min(sent) <= before[1]:
                yield idx.anomaly(
                    "nonmonotonic-send", f"process {op.process} producer session "
                    f"{op.producer_session} on {tp}: {idx.ops[before[0]].name} was delivered "
                    f"at offset {before[1]}, then {op.name} at {min(sent)}",
                    [before[0], pos], tp, min(sent))
            if before is None or max(sent) > before[1]:
                last[key] = (pos, max(sent))


# ---- consume-transform-produce --------------------------------------------------------

def _consume_transform_produce(history: History, idx: _Index) -> Iterator[Anomaly]:
    """Each committed input record below the group's committed offset has exactly one
    derived ``x:v`` record in the final read of the output topic, and none above it."""
    if history.final is None:
        return
    inputs: dict[str, tuple[str, int]] = {}  # v -> (tp, offset) in the final read
    outputs: dict[str, list[tuple[str, int]]] = defaultdict(list)
    for tp, offset, value in idx.final_records():
        topic, _ = split_tp(tp)
        if topic == history.info.input_topic:
            inputs.setdefault(value, (tp, offset))
        elif topic == history.info.output_topic and value.startswith(DERIVED_PREFIX):
            outputs[value[len(DERIVED_PREFIX):]].append((tp, offset))
    for source, derived in outputs.items():
        writers = [idx.writer_of(tp, offset, DERIVED_PREFIX + source) for tp, offset in derived]
        positions = [pos for pos in writers if pos is not None]
        if len(derived) > 1:
            yield idx.anomaly(
                "ctp-duplicate", f"input {source!r} was transformed {len(derived)} times: "
                f"the final read holds {DERIVED_PREFIX + source!r} at "
                f"{', '.join(f'{tp}@{o}' for tp, o in derived)} (written by "
                f"{idx.names(positions) or 'unknown operations'})", positions, derived[0][0],
                derived[0][1], DERIVED_PREFIX + source)
            continue
        if source not in inputs:
            continue
        if history.final.committed_error is not None:
            continue  # no committed offsets to compare with: reported as incomplete
        in_tp, in_offset = inputs[source]
        committed = idx.committed.get(in_tp)
        if committed is None or in_offset >= committed:
            yield idx.anomaly(
                "ctp-duplicate", f"{DERIVED_PREFIX + source!r} is committed at "
                f"{derived[0][0]}@{derived[0][1]} but the group's committed offset of "
                f"{in_tp} is {committed}, not past its input at offset {in_offset}: the "
                "input would be transformed again", positions, derived[0][0], derived[0][1],
                DERIVED_PREFIX + source)
    if not idx.final_complete:
        return
    for value, (tp, offset) in inputs.items():
        committed = idx.committed.get(tp)
        if committed is None or offset >= committed or value in outputs:
            continue
        writer = idx.writer_of(tp, offset, value)
        out_tp = tp_key(history.info.output_topic, split_tp(tp)[1])
        yield idx.anomaly(
            "ctp-lost", f"input {value!r} at {tp}@{offset} is below the group's committed "
            f"offset {committed} but the final read of {out_tp} has no "
            f"{DERIVED_PREFIX + value!r}", [] if writer is None else [writer], tp, offset,
            value)


# ---- dependency cycles ----------------------------------------------------------------

def _cycles(idx: _Index) -> Iterator[Anomaly]:
    graph = DependencyGraph()
    ops = idx.ops
    for tp, records in idx.final.items():
        before: tuple[int, int, str] | None = None
        for offset, value in records:
            writer = idx.writer_of(tp, offset, value)
            if writer is None:
                continue
            if before is not None and before[0] != writer:
                a, b = ops[before[0]], ops[writer]
                ordered = a.outcome == OK and a.complete is not None and a.complete < b.invoke
                graph.add(before[0], writer, WW_REALTIME if ordered else WW,
                          (tp, before[1], before[2], offset, value))
            before = (writer, offset, value)
    for pos, tp, offset, value in idx.polled_records():
        writer = idx.writer_of(tp, offset, value)
        if writer is not None:
            graph.add(writer, pos, WR, (tp, offset, value))
    g0 = graph.search(frozenset({WW, WW_REALTIME}), None, MAX_EXAMPLES)
    g1c = graph.search(frozenset({WW_REALTIME, WR}), WR, MAX_EXAMPLES)
    for kind, search in (("G1c", g1c), ("G0", g0)):
        for i in range(search.components):
            if i < len(search.cycles):
                yield _cycle(idx, kind, search.cycles[i])
            else:
                yield Anomaly(kind, "another strongly connected component")


def _cycle(idx: _Index, kind: str, steps: list[Step]) -> Anomaly:
    names = " -> ".join([idx.ops[step.src].name for step in steps] +
                        [idx.ops[steps[0].src].name])
    whys = "; ".join(f"{step.kind}: {_why(idx, step)}" for step in steps[:8])
    return idx.anomaly(kind, f"cycle {names} ({whys})", [step.src for step in steps])


def _why(idx: _Index, step: Step) -> str:
    a, b = idx.ops[step.src].name, idx.ops[step.dst].name
    if step.kind == WR:
        tp, offset, value = step.evidence
        return f"{b} polled {a}'s {value!r} at {tp}@{offset}"
    tp, offset, value, next_offset, next_value = step.evidence
    return (f"{a} wrote {value!r} at {tp}@{offset}, next in the log is {b}'s "
            f"{next_value!r}@{next_offset}")
