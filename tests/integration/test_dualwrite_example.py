"""The dual-write example (examples/dual_write/orders.py) killed with SIGKILL mid-unit.

Each test runs the example as a subprocess against a real broker with two-phase commit on,
kills it at a step of the recipe through its crash hook (``DUALWRITE_CRASH_AT``), reruns it,
and then compares the sqlite ``orders`` table with the topic's records read by
confluent-kafka under read_committed: the same order ids on both sides, each exactly once.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, TopicPartition

from oncelog.harness.broker import REPO_ROOT, BrokerProcess
from tests.support.names import unique_name, unique_topic

EXAMPLE = REPO_ROOT / "examples" / "dual_write" / "orders.py"
PARTITIONS = 3


@pytest.fixture(scope="module")
def tpc_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    broker = BrokerProcess(
        tmp_path_factory.mktemp("dualwrite-broker") / "data",
        configs={"transaction.two.phase.commit.enable": True},
    )
    try:
        broker.start()
        yield broker
    finally:
        broker.kill()


class Shop:
    """One example deployment: a database file, a topic and a transactional id."""

    def __init__(self, broker: BrokerProcess, tmp_path: Path, orders: int = 45) -> None:
        self.bootstrap = broker.bootstrap
        self.db = tmp_path / "orders.db"
        self.topic = unique_topic("order-events")
        self.txn_id = unique_name("orders-writer")
        self.orders = orders

    def run(self, crash_at: str | None = None, *extra: str) -> str:
        """Run the example to completion (or to its crash); returns its stdout."""
        env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
        env.pop("DUALWRITE_CRASH_AT", None)
        if crash_at:
            env["DUALWRITE_CRASH_AT"] = crash_at
        done = subprocess.run(
            [
                sys.executable, str(EXAMPLE),
                "--bootstrap", self.bootstrap,
                "--db", str(self.db),
                "--topic", self.topic,
                "--partitions", str(PARTITIONS),
                "--orders", str(self.orders),
                "--per-unit", "10",
                "--transactional-id", self.txn_id,
                *extra,
            ],
            capture_output=True, text=True, timeout=120, env=env, cwd=REPO_ROOT,
        )  # fmt: skip
        expected = -signal.SIGKILL if crash_at else 0
        assert done.returncode == expected, done.stdout + done.stderr[-3000:]
        if crash_at:
            assert f"crashing at {crash_at.split(':')[0]}" in done.stdout
        return done.stdout

    def rows(self) -> list[int]:
        conn = sqlite3.connect(self.db)
        try:
            return [r[0] for r in conn.execute("SELECT order_id FROM orders ORDER BY order_id")]
        finally:
            conn.close()

    def events(self, isolation: str = "read_committed") -> list[int]:
        """Order ids of every record readable now, in the order read per partition."""
        return read_order_ids(self.bootstrap, self.topic, isolation)

    def assert_agree(self, expected: list[int]) -> None:
        events = self.events()
        assert sorted(events) == self.rows() == expected
        assert len(set(events)) == len(events)


def read_order_ids(bootstrap: str, topic: str, isolation: str) -> list[int]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": unique_name("dualwrite-check"),
            "isolation.level": isolation,
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    ids: list[int] = []
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        at_end: set[int] = set()
        deadline = time.monotonic() + 30
        while len(at_end) < PARTITIONS:
            assert time.monotonic() < deadline, f"partitions at end: {sorted(at_end)}"
            message = consumer.poll(0.5)
            if message is None:
                continue
            error = message.error()
            if error is not None:
                assert error.code() == KafkaError._PARTITION_EOF, error
                at_end.add(int(message.partition() or 0))
                continue
            at_end.discard(int(message.partition() or 0))
            ids.append(int(json.loads(message.value() or b"")["order_id"]))
    finally:
        consumer.close()
    return ids


def recovery_line(stdout: str) -> str:
    return next(line for line in stdout.splitlines() if line.startswith("recovered "))


def test_killed_between_prepare_and_the_database_commit(
    tpc_broker: BrokerProcess, tmp_path: Path
) -> None:
    shop = Shop(tpc_broker, tmp_path)
    # Unit 2 has written its rows and the prepared state, uncommitted, when the kill comes.
    shop.run(crash_at="before_db_commit:2")
    assert shop.rows() == list(range(1, 11))
    assert sorted(shop.events()) == list(range(1, 11))  # unit 2 still open: LSO holds
    out = shop.run()
    # The database never recorded unit 2's prepared state: recovery aborts it. With
    # transactions v2 (the broker's default) every transaction has its own epoch, so the
    # state unit 1 stored stays (no clearing is needed) and differs from the one prepared.
    line = recovery_line(out)
    stored = line.split("stored=")[1].split()[0]
    ongoing = line.split("ongoing=")[1]
    assert line.startswith("recovered action=aborted stored="), line
    assert stored != ongoing and stored != "-", line
    shop.assert_agree(list(range(1, 46)))
    # The aborted attempt is in the log, invisible to read_committed.
    uncommitted = shop.events("read_uncommitted")
    assert sorted(set(uncommitted)) == list(range(1, 46))
    assert sorted(uncommitted) != sorted(set(uncommitted))


def test_killed_between_the_database_commit_and_the_log_commit(
    tpc_broker: BrokerProcess, tmp_path: Path
) -> None:
    shop = Shop(tpc_broker, tmp_path)
    shop.run(crash_at="after_db_commit:2")
    # The database has unit 2; the log holds it prepared (invisible) until recovery.
    assert shop.rows() == list(range(1, 21))
    assert sorted(shop.events()) == list(range(1, 11))
    out = shop.run()
    line = recovery_line(out)
    assert line.startswith("recovered action=committed stored=")
    stored = line.split("stored=")[1].split()[0]
    assert line.endswith(f"ongoing={stored}")
    shop.assert_agree(list(range(1, 46)))
    # Nothing was aborted: every record in the log is a committed one.
    assert sorted(shop.events("read_uncommitted")) == list(range(1, 46))


def test_killed_at_every_step_in_turn(tpc_broker: BrokerProcess, tmp_path: Path) -> None:
    shop = Shop(tpc_broker, tmp_path, orders=60)
    for crash_at in (
        "after_prepare:1",
        "after_db_commit:1",
        "before_db_commit:2",
        "after_log_commit:1",
        "after_db_commit:2",
    ):
        shop.run(crash_at=crash_at)
    shop.run()
    shop.assert_agree(list(range(1, 61)))
    assert shop.run(None, "--check").strip() == "agree rows=60 events=60"
