"""The Java verify worker (``oncelog.harness.VerifyWorker``, kafka-clients 4.4) against a real
``oncelog serve``: it runs the verify workload's transactions, writes history lines that
``oncelog.verify.history`` parses, and its committed output is exactly once.

The worker is started by its own command line (``oncelog.verify.java_worker.argv``) with the
harness from the reference cache (``make reference``), as the other Java tests find it.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from oncelog.harness.broker import BrokerProcess
from oncelog.verify import java_worker
from oncelog.verify.history import DERIVED_PREFIX, FAIL, OK, UNKNOWN, Op, parse_lines, tp_key

PARTITIONS = 4
MIN_OK = 15


def build_classpath() -> str:
    """The harness's classpath; fails (never skips) the test when it is not built."""
    try:
        return java_worker.classpath(None)
    except java_worker.JavaWorkerMissing as exc:
        pytest.fail(str(exc), pytrace=False)


def create_topics(bootstrap: str, *topics: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(t, PARTITIONS, 1) for t in topics])
    for future in futures.values():
        future.result(30)


def lines_of(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    out: list[dict[str, Any]] = []
    for raw in path.read_text().splitlines():
        try:
            out.append(json.loads(raw))
        except json.JSONDecodeError:
            pass  # a line being written
    return out


class Workload:
    """The topics and group of one verify workload on ``bootstrap``; ``start`` runs a Java
    worker process in slot 1 (every process of the slot shares its transactional.id)."""

    def __init__(self, bootstrap: str, directory: Path) -> None:
        self.bootstrap = bootstrap
        self.directory = directory
        self.classpath = build_classpath()
        prefix = f"verify-java-{uuid.uuid4().hex[:8]}"
        self.input, self.output, self.group = f"{prefix}-in", f"{prefix}-out", f"{prefix}-group"
        self.transactional_id = f"{prefix}-tx-1"
        self.started_at = time.time()
        self.procs: list[subprocess.Popen[bytes]] = []
        create_topics(bootstrap, self.input, self.output)

    def out(self, process: int) -> Path:
        return self.directory / f"{process}.jsonl"

    def log(self, process: int) -> str:
        return (self.directory / f"{process}.log").read_text()

    def start(self, process: int) -> subprocess.Popen[bytes]:
        argv = java_worker.argv([
            "--bootstrap", self.bootstrap, "--process", str(process), "--slot", "1",
            "--seed", "7", "--input", self.input, "--output", self.output,
            "--partitions", str(PARTITIONS), "--group", self.group,
            "--transactional-id", self.transactional_id, "--out", str(self.out(process)),
            "--started-at", repr(self.started_at), "--abort-ratio", "0.3",
            "--transaction-timeout-ms", "10000",
        ], self.classpath)
        with open(self.directory / f"{process}.log", "wb") as stderr:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=stderr, stderr=stderr)
        self.procs.append(proc)
        return proc

    def ops(self, process: int) -> list[Op]:
        return [item for item in parse_lines(self.out(process).read_text().splitlines())
                if isinstance(item, Op)]

    def wait_for_work(self, proc: subprocess.Popen[bytes], process: int, committed: int,
                      timeout: float = 90) -> None:
        """Until ``process`` has committed that many transactions, one with derived sends."""
        deadline = time.monotonic() + timeout
        while True:
            ops = [d for d in lines_of(self.out(process)) if d["type"] == "op"]
            ok = [d for d in ops if d["outcome"] == OK]
            if len(ok) >= committed and any(s["source"] for d in ok for s in d["sends"]):
                return
            assert proc.poll() is None, (
                f"worker {process} exited with {proc.returncode}:\n{self.log(process)}")
            assert time.monotonic() < deadline, (
                f"{len(ok)} committed transactions after {timeout}s:\n{self.log(process)[-3000:]}")
            time.sleep(0.2)

    def kill_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


@pytest.fixture
def workload(broker: BrokerProcess, tmp_path: Path) -> Iterator[Workload]:
    started = Workload(broker.bootstrap, tmp_path)
    try:
        yield started
    finally:
        started.kill_all()


def final_read(bootstrap: str, topics: list[str]) -> dict[str, list[tuple[int, str]]]:
    """A read_committed read of every partition of ``topics`` from the beginning to its end."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"final-{uuid.uuid4().hex}",
                         "enable.auto.commit": False, "enable.partition.eof": True,
                         "isolation.level": "read_committed"})
    consumer.assign([TopicPartition(t, p, 0) for t in topics for p in range(PARTITIONS)])
    reads: dict[str, list[tuple[int, str]]] = {
        tp_key(t, p): [] for t in topics for p in range(PARTITIONS)}
    at_end: set[str] = set()
    try:
        while len(at_end) < len(reads):
            message = consumer.poll(30)
            assert message is not None, "no answer from the final read's consumer within 30 s"
            topic, partition = message.topic(), message.partition()
            assert topic is not None and partition is not None
            key = tp_key(topic, partition)
            error = message.error()
            if error is not None and error.code() == KafkaError._PARTITION_EOF:
                at_end.add(key)
                continue
            value, offset = message.value(), message.offset()
            assert error is None and value is not None and offset is not None, error
            at_end.discard(key)
            reads[key].append((offset, value.decode()))
    finally:
        consumer.close()
    return reads


def committed_offsets(bootstrap: str, group: str, topic: str) -> dict[str, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "enable.auto.commit": False})
    try:
        found = consumer.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], 30)
    finally:
        consumer.close()
    return {tp_key(tp.topic, tp.partition): tp.offset for tp in found if tp.offset >= 0}


def test_classpath_names_make_reference_when_the_harness_is_missing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ONCELOG_REFERENCE_CACHE", str(tmp_path))
    with pytest.raises(java_worker.JavaWorkerMissing, match="make reference"):
        java_worker.classpath(None)
    assert java_worker.classpath("/x.jar") == "/x.jar"
    assert java_worker.argv(["--seed", "1"], "/x.jar") == [
        "java", *java_worker.JVM_OPTIONS, "-cp", "/x.jar", "oncelog.harness.VerifyWorker",
        "work", "--seed", "1"]


def test_java_worker_runs_the_verify_workload_exactly_once(workload: Workload) -> None:
    proc = workload.start(1000)
    workload.wait_for_work(proc, 1000, MIN_OK)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 0, workload.log(1000)

    raw = lines_of(workload.out(1000))
    ops = workload.ops(1000)
    group, input_topic, output_topic = workload.group, workload.input, workload.output
    invokes = [d for d in raw if d["type"] == "invoke"]
    # An invoke line is an op line as known before the first send: the same fields.
    assert [d["seq"] for d in invokes] == [op.seq for op in ops]
    assert set(invokes[0]) == set(raw[1]) and raw[1]["type"] == "op"
    invoked = [item for item in parse_lines(json.dumps({**d, "type": "op"}) for d in invokes)
               if isinstance(item, Op)]
    assert [[s.value for s in op.sends] for op in invoked] == [
        [s.value for s in op.sends] for op in ops]
    assert all(s.offset is None for op in invoked for s in op.sends)

    outcomes = Counter(op.outcome for op in ops)
    assert outcomes[OK] >= MIN_OK and outcomes[FAIL] >= 1, outcomes
    assert all(op.client == "java" and op.process == 1000 and op.group == group for op in ops)
    assert all(op.complete is not None and op.complete >= op.invoke
               for op in ops if op.outcome != UNKNOWN)
    committed_ops = [op for op in ops if op.outcome == OK]
    assert all(s.offset is not None for op in committed_ops for s in op.sends)
    assert any(reads for op in ops for poll in op.polls for reads in poll.reads.values())
    derived = [s for op in committed_ops for s in op.sends if s.source is not None]
    assert derived and all(s.value == f"{DERIVED_PREFIX}{s.source}" for s in derived)

    reads = final_read(workload.bootstrap, [input_topic, output_topic])
    visible = Counter(value for records in reads.values() for _, value in records)
    written = {s.value for op in committed_ops for s in op.sends}
    # Fresh values are unique; a derived "x:v" of an aborted transaction is made again
    # when v is polled again after the seek back.
    aborted = {s.value for op in ops if op.outcome == FAIL for s in op.sends if s.source is None}
    unknown = [{s.value for s in op.sends} for op in ops if op.outcome == UNKNOWN]
    assert not aborted & set(visible), f"aborted values visible: {sorted(aborted & set(visible))}"
    assert all(not (values & set(visible)) or values <= set(visible) for values in unknown)
    assert written <= set(visible), f"committed values missing: {sorted(written - set(visible))}"
    assert set(visible) - written <= set().union(*unknown)
    # Each input record was transformed at most once, and exactly once below the group's
    # committed offset (consume-transform-produce with sendOffsetsToTransaction).
    assert max(visible.values()) == 1, [v for v, n in visible.items() if n > 1]
    committed = committed_offsets(workload.bootstrap, group, input_topic)
    expected_committed: dict[str, int] = {}
    for op in committed_ops:
        for tp, offset in op.offsets.items():
            expected_committed[tp] = max(offset, expected_committed.get(tp, 0))
    assert committed == expected_committed
    for p in range(PARTITIONS):
        below = committed.get(tp_key(input_topic, p), 0)
        for offset, value in reads[tp_key(input_topic, p)]:
            transformed = visible[DERIVED_PREFIX + value]
            assert transformed == (1 if offset < below else 0), (p, offset, value, below)


def test_a_fenced_java_worker_exits_without_fencing_its_successor(workload: Workload) -> None:
    """A restarted slot's new process fences the old one (same transactional.id): the old
    one must end its transaction, exit non-zero, and never make a new producer (which would
    fence the new process in turn); the new one carries on."""
    old = workload.start(1000)
    workload.wait_for_work(old, 1000, 5)
    new = workload.start(1001)
    assert old.wait(60) == 3, workload.log(1000)
    old_ops = workload.ops(1000)
    assert {op.producer_session for op in old_ops} == {0}, workload.log(1000)
    assert old_ops[-1].outcome in (FAIL, UNKNOWN)
    assert "ProducerFencedException" in (old_ops[-1].error or ""), old_ops[-1]
    workload.wait_for_work(new, 1001, 5)
    new.send_signal(signal.SIGTERM)
    assert new.wait(60) == 0, workload.log(1001)
    assert {op.producer_session for op in workload.ops(1001)} == {0}, workload.log(1001)

    ops = old_ops + workload.ops(1001)
    visible = Counter(v for records in final_read(workload.bootstrap, [
        workload.input, workload.output]).values() for _, v in records)
    assert {s.value for op in ops if op.outcome == OK for s in op.sends} <= set(visible)
    assert not {s.value for op in ops if op.outcome == FAIL for s in op.sends
                if s.source is None} & set(visible)
    assert max(visible.values()) == 1
