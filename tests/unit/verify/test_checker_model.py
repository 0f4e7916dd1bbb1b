"""Histories from a model of a correct broker and workload yield no anomaly but G0.

The model: transactional producers append records at send time (offsets in send order,
transactions interleaved), commits and aborts write a marker and decide their records;
read_committed consumers read up to the last stable offset, skipping aborted records and
markers; each process owns some input partitions of one group, transforms what it polls,
commits its positions with the transaction, and after an abort seeks back to the group's
committed offsets in a new session."""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from oncelog.verify.checker import check
from oncelog.verify.history import FAIL, OK, UNKNOWN, History, Op, Outcome, Poll, Send, tp_key
from tests.unit.verify.verify_helpers import IN, OUT, history

PARTITIONS = 2
TPS = [tp_key(topic, p) for topic in (IN, OUT) for p in range(PARTITIONS)]


@dataclass
class _Record:
    value: str | None  # None: a control marker
    txn: int
    state: str  # open, committed, aborted


@dataclass
class _Txn:
    op: Op
    planned: list[Send]
    touched: set[str] = field(default_factory=set)


@dataclass
class _Process:
    number: int
    inputs: list[str]
    positions: dict[str, int]
    session: int = 0
    seq: int = 0
    txn: _Txn | None = None


class _Broker:
    def __init__(self) -> None:
        self.logs: dict[str, list[_Record]] = {tp: [] for tp in TPS}
        self.committed: dict[str, int] = {}

    def append(self, tp: str, value: str | None, txn: int, state: str = "open") -> int:
        self.logs[tp].append(_Record(value, txn, state))
        return len(self.logs[tp]) - 1

    def read(self, tp: str, position: int, limit: int) -> tuple[list[tuple[int, str]], int]:
        out: list[tuple[int, str]] = []
        log = self.logs[tp]
        while position < len(log) and log[position].state != "open" and len(out) < limit:
            record = log[position]
            if record.value is not None and record.state == "committed":
                out.append((position, record.value))
            position += 1
        return out, position

    def end(self, txn: int, touched: set[str], commit: bool) -> None:
        for tp in sorted(touched):
            for record in self.logs[tp]:
                if record.txn == txn and record.state == "open":
                    record.state = "committed" if commit else "aborted"
            self.append(tp, None, txn, "committed")


def _run(data: st.DataObject) -> History:
    broker = _Broker()
    nprocs = data.draw(st.integers(1, 3), label="processes")
    procs = [_Process(p, [tp_key(IN, i) for i in range(PARTITIONS) if i % nprocs == p], {})
             for p in range(nprocs)]
    for proc in procs:
        proc.positions = {tp: 0 for tp in proc.inputs}
    ops: list[Op] = []
    clock = 0.0
    for _ in range(data.draw(st.integers(1, 60), label="steps")):
        clock += 1
        proc = procs[data.draw(st.integers(0, nprocs - 1), label="process")]
        txn = proc.txn
        if txn is None:
            op = Op(proc.number, "oncelog", proc.seq, clock, group="g")
            proc.seq += 1
            reads: dict[str, list[tuple[int, str]]] = {}
            for tp in proc.inputs:
                records, proc.positions[tp] = broker.read(
                    tp, proc.positions[tp], data.draw(st.integers(0, 3), label="limit"))
                if records:
                    reads[tp] = records
            op.polls.append(Poll(reads, proc.session))
            op.offsets = dict(proc.positions)
            planned = [Send(tp_key(OUT, int(tp.rsplit("/", 1)[1])), "x:" + v, source=v)
                       for tp, records in reads.items() for _, v in records]
            for i in range(data.draw(st.integers(1, 3), label="fresh")):
                tp = TPS[data.draw(st.integers(0, len(TPS) - 1), label="tp")]
                planned.append(Send(tp, f"{proc.number}.{op.seq}.{i}"))
            data.draw(st.randoms()).shuffle(planned)
            proc.txn = _Txn(op, planned)
            ops.append(op)
        elif txn.planned:
            _send(broker, txn)
        else:
            _end(broker, proc, data.draw(st.sampled_from(["ok", "abort", "lost", "crash"])),
                 clock)
    for proc in procs:  # the workers finish their transactions
        while proc.txn is not None and proc.txn.planned:
            _send(broker, proc.txn)
        if proc.txn is not None:
            clock += 1
            _end(broker, proc, "ok", clock)
    final = {tp: broker.read(tp, 0, len(broker.logs[tp]))[0] for tp in TPS}
    return history(ops, final, committed=broker.committed)


def _send(broker: _Broker, txn: _Txn) -> None:
    send = txn.planned.pop(0)
    send.offset = broker.append(send.tp, send.value, id(txn))
    txn.touched.add(send.tp)
    txn.op.sends.append(send)


def _end(broker: _Broker, proc: _Process, how: str, clock: float) -> None:
    """ok: committed; abort: aborted (fail); lost: committed, the answer lost (unknown);
    crash: the worker died before committing, its transaction aborted (unknown)."""
    txn = proc.txn
    assert txn is not None
    proc.txn = None
    commit = how in ("ok", "lost")
    broker.end(id(txn), txn.touched, commit)
    outcome: Outcome = {"ok": OK, "abort": FAIL}.get(how, UNKNOWN)
    txn.op.outcome = outcome
    txn.op.complete = clock if how in ("ok", "abort") else None
    if commit:
        broker.committed.update(txn.op.offsets)
    if how != "ok":  # seek back to the group's committed offsets
        proc.session += 1
        proc.positions = {tp: broker.committed.get(tp, 0) for tp in proc.inputs}


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_a_correct_broker_yields_no_anomaly_but_g0(data: st.DataObject) -> None:
    results = check(_run(data))
    assert set(results.totals["anomaly_counts"]) <= {"G0"}, results.anomalies
    assert results.valid
