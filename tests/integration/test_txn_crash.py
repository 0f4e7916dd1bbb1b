"""Issue 4: the broker killed (``kill -9``) at each step of a transaction, and restarted.

A consume-transform-produce application (confluent-kafka, in a subprocess: ``txn_clients.py
ctp``) reads an input topic through a consumer group, writes ``out:<value>`` to a two-partition
output topic and commits its input offsets in the same transaction. A first transaction
commits; then the broker is killed at one step of the second:

- after AddPartitionsToTxn is logged (crash point ``txn.logged.Ongoing``);
- after the records are acknowledged, before the commit (an external SIGKILL);
- after PREPARE_COMMIT is logged (``txn.logged.PrepareCommit``);
- after the first of the transaction's three markers (``markers.after_first``).

and restarted. Either the application dies with the broker (nobody retries: the broker alone
must finish what it prepared) or it survives and carries on against the restarted broker.
Then: the transaction ended all or nothing (and committed if it was prepared), the first
transaction's records are all still there, no aborted record is ever read_committed, the
group's committed offsets agree with the committed outputs, and after a successor finishes
the work every input has exactly one output.
"""

from __future__ import annotations

import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from txn_clients import ConfluentTxnClient, Rec, poll_until, processed_offsets, transform

from oncelog.harness.broker import REPO_ROOT, BrokerProcess
from tests.support.names import unique_group, unique_name, unique_topic

pytestmark = pytest.mark.integration

APP = Path(__file__).with_name("txn_clients.py")
PARTITIONS = 2
PER_PARTITION = 6
STEPS = {
    "after_add_partitions": "txn.logged.Ongoing",
    "after_produce": None,  # killed from outside once the records are acknowledged
    "after_prepare_commit": "txn.logged.PrepareCommit",
    "during_markers": "markers.after_first",
}
PREPARED = {"after_prepare_commit", "during_markers"}


class App:
    """The ctp application subprocess, its stdout read line by line on a thread."""

    def __init__(self, argv: list[str]) -> None:
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            text=True, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.strip())
        self.lines.put("EOF")

    def wait_for(self, *prefixes: str, timeout: float = 60.0) -> str:
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"app said {self.seen}, not {prefixes}") from None
            self.seen.append(line)
            if line.startswith(prefixes):
                return line
            if line == "EOF":
                raise AssertionError(f"app exited after {self.seen}, waiting for {prefixes}")

    def go(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()


@pytest.fixture
def crash_broker(broker_factory) -> Iterator[BrokerProcess]:  # type: ignore[no-untyped-def]
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO_ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("ONCELOG_CRASH_AT", None)
    yield broker_factory(
        env=env,
        configs={"transaction.abort.timed.out.transaction.cleanup.interval.ms": 500},
    )


def parse_acks(line: str, topic: str) -> set[tuple[str, int, int]]:
    return {(topic, int(p), int(o)) for p, o in (x.split(":") for x in line.split()[1:])}


def positions(records: list[Rec]) -> set[tuple[str, int, int]]:
    return {(r.topic, r.partition, r.offset) for r in records}


@pytest.mark.parametrize("app_fate", ["dies", "survives"])
@pytest.mark.parametrize("step", list(STEPS))
def test_broker_killed_mid_transaction(
    crash_broker: BrokerProcess, step: str, app_fate: str
) -> None:
    broker = crash_broker
    client = ConfluentTxnClient(broker.bootstrap)
    src, dst = unique_topic("crash-in"), unique_topic("crash-out")
    client.create_topic(src, PARTITIONS)
    client.create_topic(dst, PARTITIONS)
    inputs = []
    for p in range(PARTITIONS):
        values = [f"in-{p}-{i}".encode() for i in range(PER_PARTITION)]
        client.plain_send(src, p, values)
        inputs += values
    group, tid = unique_group("crash"), unique_name("tid")

    # Transaction 1 commits: two inputs of each partition.
    consumer = client.group_consumer(src, group, assign=PARTITIONS)
    producer = client.producer(tid)
    producer.init()
    everything = poll_until(consumer, len(inputs))
    assert len(everything) == len(inputs)
    first = [r for r in everything if r.offset < 2]
    producer.begin()
    first_acks = transform(producer, dst, first)
    producer.send_offsets(processed_offsets(first), consumer)
    producer.commit()
    producer.close()
    consumer.close()
    round1 = {p: 2 for p in range(PARTITIONS)}
    assert client.committed(group, src, PARTITIONS) == round1

    # Crash and come back with the crash point armed (a kill -9 of its own: transaction 1
    # must survive that too).
    broker.kill()
    point = STEPS[step]
    if point is not None:
        assert broker.env is not None
        broker.env["ONCELOG_CRASH_AT"] = point
    broker.start()

    remaining = len(inputs) - len(first)
    app = App([sys.executable, str(APP), "ctp", "confluent", broker.bootstrap, tid, group, src,
               str(PARTITIONS), dst, str(remaining), "1" if step == "after_produce" else "0"])
    try:
        assert app.wait_for("CONSUMED") == f"CONSUMED {remaining}"
        acked: set[tuple[str, int, int]] = set()
        if point is None:
            acked = parse_acks(app.wait_for("ACKED"), dst)
            broker.kill()
        else:
            deadline = time.monotonic() + 60
            while broker.is_running and time.monotonic() < deadline:
                time.sleep(0.02)
            code = broker.kill()  # reaps it
            assert code == -9, f"broker exited {code}, not at crash point {point}"
            assert f"crash point {point} reached" in broker.log_text(since_start=True)
        if step != "after_add_partitions":
            if not acked:
                acked = parse_acks(app.wait_for("ACKED", timeout=5), dst)
            assert len(acked) == remaining
        if app_fate == "dies":
            app.kill()
        broker.env.pop("ONCELOG_CRASH_AT", None)  # type: ignore[union-attr]
        broker.start()

        outcome: str
        if app_fate == "survives":
            if step == "after_produce":
                app.go()
            line = app.wait_for("COMMITTED", "ABORTED", "ABORT-FAILED", timeout=90)
            assert line in ("COMMITTED", "ABORTED"), f"app could not finish: {app.seen}"
            outcome = "commit" if line == "COMMITTED" else "abort"
            if step in PREPARED or step == "after_produce":
                # Nothing failed that the restart did not repair: the commit goes through.
                assert outcome == "commit", app.seen
            if not acked:
                acked_lines = [x for x in app.seen if x.startswith("ACKED")]
                if acked_lines:
                    acked = parse_acks(acked_lines[0], dst)
        elif step in PREPARED:
            # Nobody is left to retry: the broker must finish the commit on its own.
            outcome = "commit"
        else:
            # The open transaction waits for a new instance (or its timeout): the successor
            # below fences it, which aborts it.
            outcome = "abort"
    finally:
        app.kill()

    expect_outputs = len(inputs) if outcome == "commit" else len(first)

    def check_all_or_nothing() -> None:
        """Committed outputs and committed offsets both show the outcome, entirely."""
        outputs = client.read(dst, PARTITIONS, committed=True, expect=expect_outputs)
        assert len(outputs) == expect_outputs, f"{step}/{app_fate}: outcome {outcome}"
        assert positions(first_acks) <= positions(outputs), "a committed record was lost"
        if outcome == "commit":
            assert acked <= positions(outputs)
            assert client.committed(group, src, PARTITIONS) == {p: PER_PARTITION
                                                                for p in range(PARTITIONS)}
        else:
            assert not acked & positions(outputs), "an aborted record was read_committed"
            assert client.committed(group, src, PARTITIONS) == round1

    if app_fate == "survives" or step in PREPARED:
        # Decided already (by the application, or by PREPARE_COMMIT in the log): visible
        # before anyone else touches the transactional id.
        check_all_or_nothing()
    successor = client.producer(tid)
    successor.init()  # fences the old instance; waits for any commit/abort to complete
    check_all_or_nothing()

    # The successor finishes whatever is left: every input has exactly one output.
    consumer = client.group_consumer(src, group, assign=PARTITIONS)
    try:
        left = len(inputs) - expect_outputs
        rest = poll_until(consumer, left) if left else []
        assert len(rest) == left
        if rest:
            successor.begin()
            transform(successor, dst, rest)
            successor.send_offsets(processed_offsets(rest), consumer)
            successor.commit()
    finally:
        successor.close()
        consumer.close()

    final = client.read(dst, PARTITIONS, committed=True, expect=len(inputs))
    assert sorted(r.value or b"" for r in final) == sorted(b"out:" + v for v in inputs)
    if outcome == "commit":
        assert acked <= positions(final)
    else:
        assert not acked & positions(final), "an aborted record was read_committed"
    assert client.committed(group, src, PARTITIONS) == {p: PER_PARTITION
                                                        for p in range(PARTITIONS)}
    # After a restart the same holds: everything was rebuilt from the broker's files.
    broker.kill()
    broker.start()
    again = client.read(dst, PARTITIONS, committed=True, expect=len(inputs))
    assert positions(again) == positions(final)
    assert client.committed(group, src, PARTITIONS) == {p: PER_PARTITION
                                                        for p in range(PARTITIONS)}
