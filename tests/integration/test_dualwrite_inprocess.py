"""DualWriter in-process against a real broker: takeover and fencing, empty units."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from oncelog.client import Admin, Consumer, TopicPartition
from oncelog.client.dualwrite import DualWriteInDoubtError, DualWriter, DualWriteUnit
from oncelog.client.errors import ProducerFencedError
from oncelog.harness.broker import BrokerProcess
from tests.support.names import unique_name, unique_topic


@pytest.fixture(scope="module")
def tpc_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    broker = BrokerProcess(
        tmp_path_factory.mktemp("dualwrite-inproc") / "data",
        configs={"transaction.two.phase.commit.enable": True},
    )
    try:
        broker.start()
        yield broker
    finally:
        broker.kill()


def committed_values(bootstrap: str, topic: str) -> list[bytes]:
    with Consumer({"bootstrap.servers": bootstrap, "isolation.level": "read_committed"}) as c:
        tp = TopicPartition(topic, 0)
        c.assign([tp])
        c.seek_to_beginning([tp])
        end = c.end_offsets([tp])[tp]
        got: list[bytes] = []
        while c.position(tp) < end:
            got.extend(m.value or b"" for m in c.poll(1.0))
        return got


def setup(broker: BrokerProcess, tmp_path: Path) -> tuple[str, str, Path]:
    topic = unique_topic("dw")
    with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
        admin.create_topic(topic, 1)
    db = tmp_path / "t.db"
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE items (id INTEGER PRIMARY KEY)")
    conn.commit()
    conn.close()
    return topic, unique_name("dw"), db


def test_a_takeover_after_the_database_commit_commits_and_fences_the_old_writer(
    tpc_broker: BrokerProcess, tmp_path: Path
) -> None:
    topic, txn_id, db = setup(tpc_broker, tmp_path)
    config = {"bootstrap.servers": tpc_broker.bootstrap}
    taken_over: list[DualWriter] = []

    def take_over(step: str) -> None:
        if step == "after_db_commit" and not taken_over:
            new = DualWriter(config, lambda: sqlite3.connect(db), txn_id)
            taken_over.append(new)
            assert new.recover().action == "committed"

    def work(item: int) -> Callable[[DualWriteUnit], None]:
        def run(unit: DualWriteUnit) -> None:
            unit.execute("INSERT INTO items (id) VALUES ({})", (item,))
            unit.send(topic, str(item).encode(), partition=0)

        return run

    old = DualWriter(config, lambda: sqlite3.connect(db), txn_id, on_step=take_over)
    old.recover()
    with pytest.raises(DualWriteInDoubtError) as raised:
        old.run(work(1))
    assert isinstance(raised.value.__cause__, ProducerFencedError)
    old.close()
    new = taken_over[0]
    new.run(work(2))
    new.close()
    conn = sqlite3.connect(db)
    rows = [r[0] for r in conn.execute("SELECT id FROM items ORDER BY id")]
    conn.close()
    assert rows == [1, 2]
    assert committed_values(tpc_broker.bootstrap, topic) == [b"1", b"2"]


def test_a_unit_that_sends_nothing_commits_its_rows(
    tpc_broker: BrokerProcess, tmp_path: Path
) -> None:
    topic, txn_id, db = setup(tpc_broker, tmp_path)
    with DualWriter(
        {"bootstrap.servers": tpc_broker.bootstrap}, lambda: sqlite3.connect(db), txn_id
    ) as writer:
        writer.run(lambda unit: unit.execute("INSERT INTO items (id) VALUES ({})", (7,)))
        writer.run(lambda unit: unit.send(topic, b"after", partition=0))
    conn = sqlite3.connect(db)
    assert conn.execute("SELECT id FROM items").fetchall() == [(7,)]
    conn.close()
    assert committed_values(tpc_broker.bootstrap, topic) == [b"after"]
