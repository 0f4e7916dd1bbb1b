"""``oncelog verify`` against a real ``oncelog serve``: the runner with both Python clients,
a worker crashed mid-run through ``Workers.crash_one``, and the history it leaves."""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Callable
from pathlib import Path

from oncelog.harness.broker import BrokerProcess
from oncelog.verify.deployment import FaultInjector, Workers
from oncelog.verify.history import (
    DERIVED_PREFIX,
    FAIL,
    OK,
    UNKNOWN,
    Fault,
    History,
    RunInfo,
    read_history,
    tp_key,
    write_history,
)
from oncelog.verify.runner import VerifyOptions, run
from oncelog.verify.spawn import ExternalDeployment

CRASH_AFTER_S = 4.0


def _consuming(workers_dir: Path) -> bool:
    """Some worker committed a transaction with polled records: the group has formed."""
    for path in workers_dir.glob("*.jsonl"):
        for line in path.read_text().splitlines():
            if '"type":"op"' in line and '"outcome":"ok"' in line and '"polls":[]' not in line:
                return True
    return False


class CrashOneWorker:
    """Kill -9 one worker (preferably inside a transaction) once the group consumes, as
    the nemesis does (a crash before the group's first generation would only delay it)."""

    def __init__(self, workers: Workers, started_at: float, workers_dir: Path) -> None:
        self.workers = workers
        self.started_at = started_at
        self.workers_dir = workers_dir
        self.crashed: str | None = None

    def run(self, stop: threading.Event, record: Callable[[Fault], None]) -> None:
        if stop.wait(CRASH_AFTER_S):
            return
        while not _consuming(self.workers_dir):
            if stop.wait(0.2):
                return
        self.crashed = self.workers.crash_one(random.Random(5))
        if self.crashed is not None:
            record(Fault("client-crash", self.crashed, time.time() - self.started_at))


def ctp_problems(history: History) -> list[str]:
    """Every input record below the group's committed offset has exactly one derived
    record in the final read, and no derived record exists for any other input."""
    assert history.final is not None
    reads = history.final.reads
    derived: dict[str, int] = {}
    for p in range(history.info.partitions):
        for _, value in reads[tp_key(history.info.output_topic, p)]:
            if value.startswith(DERIVED_PREFIX):
                derived[value[len(DERIVED_PREFIX):]] = derived.get(value[len(DERIVED_PREFIX):],
                                                                   0) + 1
    problems = [f"{v} derived {n} times" for v, n in derived.items() if n != 1]
    for p in range(history.info.partitions):
        tp = tp_key(history.info.input_topic, p)
        committed = history.final.committed.get(tp, 0)
        for offset, value in reads[tp]:
            if (offset < committed) != (value in derived):
                problems.append(f"{tp}@{offset} {value}: committed {committed}, "
                                f"derived {value in derived}")
    return problems


def test_verify_runs_both_clients_restarts_a_crashed_worker_and_checks(
    broker: BrokerProcess, tmp_path: Path
) -> None:
    injectors: list[CrashOneWorker] = []

    def factory(workers: Workers, info: RunInfo, ids: list[str]) -> FaultInjector:
        injectors.append(CrashOneWorker(workers, info.started_at, report / "workers"))
        return injectors[0]

    report = tmp_path / "report"
    options = VerifyOptions(report_dir=report, duration_s=20, seed=11,
                            clients=["oncelog", "confluent-kafka"], concurrency=4)
    results = run(options, ExternalDeployment(broker.bootstrap), factory)

    assert (report / "report.html").is_file()
    assert json.loads((report / "results.json").read_text())["valid"] is True
    assert results.valid, results.counts()
    history = read_history(report / "history.jsonl")
    ops = history.ops
    assert [op.index for op in ops] == list(range(len(ops)))
    assert history.final is not None and history.final.complete
    ok = [op for op in ops if op.outcome == OK]
    assert len(ok) >= 50
    assert {op.client for op in ok} == {"oncelog", "confluent-kafka"}
    assert any(op.outcome == FAIL for op in ops)
    assert sum(len(r) for op in ok for poll in op.polls for r in poll.reads.values()) > 0
    assert any(s.source is not None and s.offset is not None for op in ok for s in op.sends)
    assert history.final.committed, "the group committed offsets through the transactions"
    assert ctp_problems(history) == []
    # Every committed send is in the final read at its delivery offset.
    final = {(tp, o): v for tp, records in history.final.reads.items() for o, v in records}
    for op in ok:
        for send in op.sends:
            assert send.offset is not None and final.get((send.tp, send.offset)) == send.value
    # The crashed worker: its last transaction is unknown or failed; its slot went on as
    # the next process number.
    crashed = injectors[0].crashed
    assert crashed is not None and [f.target for f in history.faults] == [crashed]
    process = int(crashed.removeprefix("worker-"))
    last = max((op for op in ops if op.process == process), key=lambda op: op.seq)
    assert last.outcome in (UNKNOWN, FAIL)
    assert any(op.process == process + 1 and op.outcome == OK for op in ops)
    # history.jsonl round-trips.
    rewritten = tmp_path / "again.jsonl"
    write_history(rewritten, history)
    assert read_history(rewritten) == history
