"""The history of a verify run: what every client worker and the fault injector did, one
JSON object per line (``history.jsonl``), and the checker's results (``results.json``).

Every part of ``oncelog verify`` speaks these types: the workers write ``Op`` lines, the
fault injector ``Fault`` lines, the runner adds the ``FinalRead`` and merges them; the
checker reads them and returns ``Results``; the report draws both.

Times are seconds since the run started (``Op.invoke`` / ``Op.complete``), measured with
``time.time()`` minus the run's start (``RunInfo.started_at``) so that separate processes
on one machine agree.

A transaction's outcome:

- ``ok``: ``commit_transaction`` returned — the transaction committed;
- ``fail``: ``commit_transaction`` was never called (aborted on purpose, or an error before
  the commit) — the transaction must never become visible to read_committed;
- ``unknown``: the commit was asked but its answer was lost (an error from the commit, a
  crashed worker after the call, or no completion line at all) — all or nothing.

Values are unique strings. A fresh value is ``"<process>.<seq>.<i>"``; a value derived by
consume-transform-produce from an input value ``v`` is ``"x:" + v``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

Outcome = Literal["ok", "fail", "unknown"]
OK: Outcome = "ok"
FAIL: Outcome = "fail"
UNKNOWN: Outcome = "unknown"

DERIVED_PREFIX = "x:"


def tp_key(topic: str, partition: int) -> str:
    """The one spelling of a topic-partition in histories and results: ``"topic/3"``."""
    return f"{topic}/{partition}"


def split_tp(key: str) -> tuple[str, int]:
    topic, _, partition = key.rpartition("/")
    return topic, int(partition)


@dataclass
class Send:
    """One record sent in a transaction; ``offset`` from the delivery report (None when
    the report never came or failed). ``source`` is the input value a derived record was
    made from (consume-transform-produce), else None."""
    tp: str
    value: str
    offset: int | None = None
    source: str | None = None


@dataclass
class Poll:
    """One consumer poll inside a transaction: per partition, the (offset, value) pairs it
    returned, in order. ``session`` numbers the consumer's position history within the
    process: it changes whenever the position may legitimately move other than forward
    (a new consumer, a rebalance, a seek back after an abort), so polls are checked for
    monotonicity and skips only within one (process, session, partition)."""
    reads: dict[str, list[tuple[int, str]]]
    session: int = 0


@dataclass
class Op:
    """One transaction by one worker process. ``process`` is unique per worker incarnation
    (a restarted worker gets a new one). ``offsets`` are the positions given to
    ``send_offsets_to_transaction`` (tp -> next offset to read) for ``group``."""
    process: int
    client: str
    seq: int
    invoke: float
    complete: float | None = None
    outcome: Outcome = UNKNOWN
    sends: list[Send] = field(default_factory=list)
    polls: list[Poll] = field(default_factory=list)
    group: str | None = None
    offsets: dict[str, int] = field(default_factory=dict)
    producer_session: int = 0
    error: str | None = None
    index: int = -1  # position in the merged history, set by the runner

    @property
    def name(self) -> str:
        return f"p{self.process}#{self.seq}"


@dataclass
class Fault:
    """One fault: ``kind`` is kill, pause, partition, client-crash, cut, leader-kill,
    coordinator-kill; ``target`` names what it hit (``broker-2``, ``worker-5``...);
    ``end`` is when it was healed (None: instantaneous or never)."""
    kind: str
    target: str
    start: float
    end: float | None = None
    detail: str = ""


@dataclass
class FinalRead:
    """What a read_committed consumer read from the beginning of each partition after the
    workload and faults stopped; ``complete`` says it reached each partition's end (the
    high watermark, all transactions finished); ``committed`` is the workload group's
    committed offset per input partition at the end (absent: none)."""
    reads: dict[str, list[tuple[int, str]]]
    complete: bool
    committed: dict[str, int] = field(default_factory=dict)
    time: float = 0.0
    # Why the group's committed offsets could not be read (None: they were), e.g. an
    # OffsetFetch answering UNSTABLE_OFFSET_COMMIT long after every transaction ended.
    committed_error: str | None = None


@dataclass
class RunInfo:
    """The run's parameters, written first in history.jsonl."""
    started_at: float
    seed: int
    duration_s: float
    bootstrap: str
    target: str  # "single", "cluster" or "external"
    clients: list[str]
    faults: list[str]
    input_topic: str
    output_topic: str
    partitions: int
    group: str
    broker: str = "oncelog"  # oncelog, kafka, tansu, or what the user says
    command: str = ""  # the command line that started the run (shown by the report)


@dataclass
class History:
    info: RunInfo
    ops: list[Op]
    faults: list[Fault]
    final: FinalRead | None


@dataclass
class Anomaly:
    """One instance of an anomaly class, with the operations (Op.index) that show it."""
    kind: str
    explanation: str
    ops: list[int] = field(default_factory=list)
    tp: str | None = None
    offset: int | None = None
    value: str | None = None


# The anomaly classes, in the order reports list them. G0 is reported but, as in Kafka's
# model (ww order across partitions is not serialised), is not a failure.
ANOMALY_KINDS: tuple[str, ...] = (
    "duplicate", "inconsistent-offset", "aborted-read", "torn-transaction", "lost-write",
    "unseen-write", "nonmonotonic-poll", "poll-skip", "nonmonotonic-send",
    "ctp-duplicate", "ctp-lost", "G1c", "G0", "final-read-incomplete",
)
NOT_FAILURES: frozenset[str] = frozenset({"G0"})


@dataclass
class Results:
    valid: bool
    anomalies: dict[str, list[Anomaly]]
    totals: dict[str, Any]  # ops, txns by outcome, sends, polls, faults by kind...

    def counts(self) -> dict[str, int]:
        """Anomalies per class: every one found (the checker keeps a few examples in
        ``anomalies`` and the full counts in ``totals["anomaly_counts"]``)."""
        full = self.totals.get("anomaly_counts")
        if isinstance(full, dict):
            return {kind: int(n) for kind, n in full.items() if n}
        return {kind: len(found) for kind, found in self.anomalies.items() if found}


# ---- JSON lines -------------------------------------------------------------------------

def _record(kind: str, obj: Any) -> str:
    return json.dumps({"type": kind, **asdict(obj)}, separators=(",", ":"))


def op_line(op: Op) -> str:
    return _record("op", op)


def fault_line(fault: Fault) -> str:
    return _record("fault", fault)


def invoke_line(op: Op) -> str:
    """A worker's line written before a transaction's first send: the op as known so far
    (the runner turns an invoke without its op line into an ``unknown`` op)."""
    return _record("invoke", op)


def op_from_dict(d: dict[str, Any]) -> Op:
    """An op (or invoke) line's fields, without ``type``, as an Op."""
    return _op(d)


def _op(d: dict[str, Any]) -> Op:
    d = dict(d)
    d["sends"] = [Send(**s) for s in d.get("sends", [])]
    d["polls"] = [Poll(reads={k: [(int(o), str(v)) for o, v in r] for k, r in p["reads"].items()},
                       session=p.get("session", 0)) for p in d.get("polls", [])]
    return Op(**d)


def _final(d: dict[str, Any]) -> FinalRead:
    d = dict(d)
    d["reads"] = {k: [(int(o), str(v)) for o, v in r] for k, r in d["reads"].items()}
    return FinalRead(**d)


def parse_lines(lines: Iterable[str]) -> Iterator[RunInfo | Op | Fault | FinalRead]:
    """Parse history lines; a worker killed mid-line leaves a torn last line, skipped."""
    for line in lines:
        line = line.strip()
        if not line:
            continue
        try:
            d = json.loads(line)
        except json.JSONDecodeError:
            continue
        kind = d.pop("type", None)
        if kind == "op":
            yield _op(d)
        elif kind == "fault":
            yield Fault(**d)
        elif kind == "final":
            yield _final(d)
        elif kind == "info":
            yield RunInfo(**d)


def write_history(path: Path, history: History) -> None:
    with open(path, "w") as out:
        out.write(_record("info", history.info) + "\n")
        for op in history.ops:
            out.write(op_line(op) + "\n")
        for fault in history.faults:
            out.write(fault_line(fault) + "\n")
        if history.final is not None:
            out.write(_record("final", history.final) + "\n")


def read_history(path: Path) -> History:
    info: RunInfo | None = None
    ops: list[Op] = []
    faults: list[Fault] = []
    final: FinalRead | None = None
    with open(path) as f:
        for item in parse_lines(f):
            if isinstance(item, RunInfo):
                info = item
            elif isinstance(item, Op):
                ops.append(item)
            elif isinstance(item, Fault):
                faults.append(item)
            else:
                final = item
    if info is None:
        raise ValueError(f"{path}: no run info line")
    return History(info, ops, faults, final)


def results_json(results: Results) -> dict[str, Any]:
    return {"valid": results.valid, "counts": results.counts(), "totals": results.totals,
            "anomalies": {k: [asdict(a) for a in v] for k, v in results.anomalies.items()}}
