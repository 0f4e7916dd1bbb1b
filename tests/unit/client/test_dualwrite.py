"""DualWriter's decisions with a real sqlite database and a fake 2PC log.

``FakeLog`` plays the transaction coordinator for one transactional id: producer id and
epoch (bumped by every init), the ongoing transaction, committed and aborted records.
``FakeProducer`` talks to it like oncelog.client.Producer does. A crash is simulated by a
step hook that marks the producer dead (every later call fails without reaching the log)
and raises: the database loses what was not committed (the writer's rollback does exactly
that) and the log keeps its state — what a SIGKILL leaves behind.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from oncelog.client.dualwrite import (
    STEPS,
    DualWriteFencedError,
    DualWriteInDoubtError,
    DualWriter,
    DualWriteUnit,
    ParamStyle,
    paramstyle_of,
)
from oncelog.client.errors import IllegalStateError, ProducerFencedError
from oncelog.client.types import PreparedTxnState, RecordMetadata

TXN_ID = "orders-writer"


class Crash(BaseException):
    """The process died here."""


@dataclass
class Txn:
    producer_id: int
    epoch: int
    records: list[bytes] = field(default_factory=list)

    @property
    def identity(self) -> PreparedTxnState:
        return PreparedTxnState(producer_id=self.producer_id, epoch=self.epoch)


@dataclass
class FakeLog:
    producer_id: int = 1000
    epoch: int = -1
    ongoing: Txn | None = None
    committed: list[bytes] = field(default_factory=list)
    aborted: list[bytes] = field(default_factory=list)
    bump_epoch_per_transaction: bool = False  # KIP-890 part 2 behaviour
    inits: list[bool] = field(default_factory=list)  # keep_prepared_txn of each init

    def end(self, commit: bool) -> None:
        assert self.ongoing is not None
        (self.committed if commit else self.aborted).extend(self.ongoing.records)
        self.ongoing = None
        if self.bump_epoch_per_transaction:
            self.epoch += 1


class FakeProducer:
    def __init__(self, config: dict[str, Any], log: FakeLog) -> None:
        assert config["transactional.id"] == TXN_ID
        assert config["transaction.two.phase.commit.enable"] is True
        self.log = log
        self.producer_id = -1
        self.producer_epoch = -1
        self.prepared_state: PreparedTxnState | None = None
        self.in_txn = False
        self.dead = False
        self.fail: dict[str, BaseException] = {}
        self.closed = False
        self.calls: list[str] = []

    def _call(self, name: str) -> None:
        self.calls.append(name)
        if self.dead:
            raise ConnectionError(f"{name}: the process is dead")
        if name in self.fail:
            raise self.fail.pop(name)
        if self.producer_epoch >= 0 and self.producer_epoch != self.log.epoch:
            raise ProducerFencedError(f"{name}: epoch {self.producer_epoch} is fenced")

    def init_transactions(
        self, keep_prepared_txn: bool = False, timeout: float | None = None
    ) -> None:
        self._call("init_transactions")
        self.log.inits.append(keep_prepared_txn)
        self.log.epoch += 1
        self.producer_id, self.producer_epoch = self.log.producer_id, self.log.epoch
        self.prepared_state = None
        if self.log.ongoing is not None:
            if keep_prepared_txn:
                self.prepared_state = self.log.ongoing.identity
            else:
                self.log.end(commit=False)
                self.producer_epoch = self.log.epoch

    def begin_transaction(self) -> None:
        self._call("begin_transaction")
        if self.in_txn or self.prepared_state is not None:
            raise IllegalStateError("begin_transaction in a transaction")
        self.in_txn = True

    def send(
        self,
        topic: str,
        value: bytes | str | None = None,
        key: bytes | str | None = None,
        partition: int | None = None,
        headers: Any = None,
        timestamp: int | None = None,
    ) -> Future[RecordMetadata]:
        self._call("send")
        assert self.in_txn
        if self.log.ongoing is None:
            self.log.ongoing = Txn(self.producer_id, self.producer_epoch)
        assert isinstance(value, bytes)
        self.log.ongoing.records.append(value)
        future: Future[RecordMetadata] = Future()
        future.set_result(RecordMetadata(topic, 0, len(self.log.ongoing.records), 0))
        return future

    def prepare_transaction(self, timeout: float | None = None) -> PreparedTxnState:
        self._call("prepare_transaction")
        assert self.in_txn
        self.prepared_state = PreparedTxnState(
            producer_id=self.producer_id, epoch=self.producer_epoch
        )
        return self.prepared_state

    def _end(self, commit: bool) -> None:
        if self.log.ongoing is not None:
            self.log.end(commit)
            self.producer_epoch = self.log.epoch
        self.in_txn = False
        self.prepared_state = None

    def commit_transaction(self, timeout: float | None = None) -> None:
        self._call("commit_transaction")
        self._end(commit=True)

    def abort_transaction(self, timeout: float | None = None) -> None:
        self._call("abort_transaction")
        self._end(commit=False)

    def complete_transaction(
        self, state: PreparedTxnState | str, timeout: float | None = None
    ) -> None:
        self._call("complete_transaction")
        given = state if isinstance(state, PreparedTxnState) else PreparedTxnState(state)
        if self.prepared_state is None and not self.in_txn:
            return
        self._end(commit=given == self.prepared_state)

    def close(self, timeout: float | None = None) -> None:
        self.closed = True


@dataclass
class World:
    """One database file and one log, shared by every writer instance of a test."""

    db_path: Path
    log: FakeLog
    producers: list[FakeProducer] = field(default_factory=list)

    def connect(self) -> sqlite3.Connection:
        return sqlite3.connect(self.db_path, timeout=0.2)

    def writer(self, on_step: Callable[[str], None] | None = None, **kwargs: Any) -> DualWriter:
        def factory(config: dict[str, Any]) -> FakeProducer:
            producer = FakeProducer(config, self.log)
            self.producers.append(producer)
            return producer

        return DualWriter(
            {"bootstrap.servers": "unused:9092"},
            kwargs.pop("db_connect", self.connect),
            TXN_ID,
            on_step=on_step,
            producer_factory=factory,
            **kwargs,
        )

    def rows(self) -> list[int]:
        conn = self.connect()
        try:
            return [r[0] for r in conn.execute("SELECT order_id FROM orders ORDER BY order_id")]
        finally:
            conn.close()

    def stored(self) -> str:
        conn = self.connect()
        try:
            row = conn.execute(
                "SELECT prepared_state FROM oncelog_txn_state WHERE transactional_id = ?",
                (TXN_ID,),
            ).fetchone()
            return str(row[0]) if row else "<no row>"
        finally:
            conn.close()

    def committed_ids(self) -> list[int]:
        return sorted(int(v) for v in self.log.committed)

    def assert_agree(self) -> None:
        assert self.log.ongoing is None
        assert self.rows() == self.committed_ids()
        assert len(set(self.log.committed)) == len(self.log.committed)


@pytest.fixture
def world(tmp_path: Path) -> World:
    db_path = tmp_path / "shop.db"
    conn = sqlite3.connect(db_path)
    conn.execute("CREATE TABLE orders (order_id INTEGER PRIMARY KEY)")
    conn.commit()
    conn.close()
    return World(db_path, FakeLog())


def place(count: int) -> Callable[[DualWriteUnit], list[int]]:
    """A unit that places the next ``count`` orders (ids from the database)."""

    def work(unit: DualWriteUnit) -> list[int]:
        unit.execute("SELECT COALESCE(MAX(order_id), 0) FROM orders")
        first = int(unit.cursor.fetchone()[0]) + 1
        ids = list(range(first, first + count))
        for order_id in ids:
            unit.execute("INSERT INTO orders (order_id) VALUES ({})", (order_id,))
            unit.send("order-events", str(order_id).encode())
        return ids

    return work


def crash_at(world: World, step: str, unit: int = 1) -> Callable[[str], None]:
    seen = {"units": 0}

    def on_step(reached: str) -> None:
        if reached == "after_prepare":
            seen["units"] += 1
        if reached == step and seen["units"] == unit:
            world.producers[-1].dead = True
            raise Crash(step)

    return on_step


# ---------------------------------------------------------------------- normal processing


def test_units_commit_rows_and_records_together(world: World) -> None:
    with world.writer() as writer:
        assert writer.run(place(3)) == [1, 2, 3]
        assert writer.run(place(2)) == [4, 5]
    world.assert_agree()
    assert world.rows() == [1, 2, 3, 4, 5]
    assert world.log.inits == [False]  # nothing stored: a plain init


def test_context_manager_unit(world: World) -> None:
    with world.writer() as writer, writer.transaction() as unit:
        unit.execute("INSERT INTO orders (order_id) VALUES ({})", (42,))
        unit.send("order-events", b"42")
    world.assert_agree()
    assert world.rows() == [42]


def test_a_unit_that_sends_nothing_commits_the_database_alone(world: World) -> None:
    with world.writer() as writer:
        writer.run(lambda unit: unit.execute("INSERT INTO orders (order_id) VALUES ({})", (9,)))
        assert world.stored() == ""  # no prepared state to record
    assert world.producers[0].calls == [
        "init_transactions",
        "begin_transaction",
        "commit_transaction",
    ]
    assert world.rows() == [9]
    assert world.log.committed == []


def test_failing_work_rolls_back_and_aborts_and_the_writer_goes_on(world: World) -> None:
    def broken(unit: DualWriteUnit) -> None:
        place(2)(unit)
        raise ValueError("out of stock")

    with world.writer() as writer:
        with pytest.raises(ValueError, match="out of stock"):
            writer.run(broken)
        assert world.log.aborted == [b"1", b"2"]
        assert writer.run(place(1)) == [1]
    world.assert_agree()


def test_the_state_of_a_committed_unit_is_cleared_before_the_next_unit_prepares(
    world: World,
) -> None:
    # This client keeps one (producer id, epoch) for every transaction of a session, so the
    # state stored by unit 1 would also match unit 2: it must be gone before unit 2 prepares.
    states: list[str] = []
    with world.writer(on_step=lambda step: states.append(world.stored())) as writer:
        writer.run(place(1))
        writer.run(place(1))
        producer = world.producers[0]
        identity = f"{producer.producer_id}:{producer.producer_epoch}"
    # Per unit, at after_prepare, before_db_commit (uncommitted), after_db_commit and
    # after_log_commit; unit 2 starts by clearing unit 1's state.
    assert states == ["", "", identity, identity, "", "", identity, identity]
    assert world.stored() == ""  # close() clears it too


# ---------------------------------------------------------------------- crashes and recovery


@pytest.mark.parametrize("step", STEPS)
def test_a_crash_at_any_step_of_the_second_unit_recovers_to_agreement(
    world: World, step: str
) -> None:
    with pytest.raises(Crash), world.writer(on_step=crash_at(world, step, unit=2)) as writer:
        writer.run(place(2))
        writer.run(place(3))
    committed_before = step in ("after_db_commit", "after_log_commit")
    assert world.rows() == ([1, 2, 3, 4, 5] if committed_before else [1, 2])
    in_doubt = step != "after_log_commit"
    assert (world.log.ongoing is not None) == in_doubt

    with world.writer() as writer:
        pass
    world.assert_agree()
    assert world.rows() == ([1, 2, 3, 4, 5] if committed_before else [1, 2])
    if not committed_before:
        assert world.log.aborted == [b"3", b"4", b"5"]


def test_recovery_commits_what_the_database_recorded(world: World) -> None:
    with pytest.raises(Crash), world.writer(on_step=crash_at(world, "after_db_commit")) as w:
        w.run(place(2))
    stored = PreparedTxnState(world.stored())
    assert stored.has_transaction
    writer = world.writer()
    recovery = writer.recover()
    assert (recovery.stored, recovery.ongoing, recovery.action) == (stored, stored, "committed")
    assert world.log.inits == [False, True]
    assert world.stored() == ""
    writer.run(place(1))
    writer.close()
    world.assert_agree()
    assert world.rows() == [1, 2, 3]


def test_recovery_after_a_crash_before_the_database_commit_aborts(world: World) -> None:
    with pytest.raises(Crash), world.writer(on_step=crash_at(world, "before_db_commit")) as w:
        w.run(place(2))
    assert world.stored() == ""
    recovery = world.writer().recover()
    assert recovery.action == "none"  # nothing stored: plain init, which aborts
    assert world.log.inits == [False, False]
    assert world.log.aborted == [b"1", b"2"]
    world.assert_agree()
    assert world.rows() == []


def test_a_log_that_bumps_the_epoch_per_transaction_needs_no_clearing(world: World) -> None:
    world.log.bump_epoch_per_transaction = True
    with pytest.raises(Crash), world.writer(on_step=crash_at(world, "after_prepare", 2)) as w:
        w.run(place(1))
        kept = world.stored()
        assert kept != ""  # not cleared: unit 2 has another identity
        w.run(place(1))
    recovery = world.writer().recover()
    assert recovery.action == "aborted"
    assert str(recovery.stored) == kept != str(recovery.ongoing)
    world.assert_agree()
    assert world.rows() == [1]


def test_a_failed_log_commit_is_in_doubt_until_recover_commits_it(world: World) -> None:
    writer = world.writer()
    writer.recover()
    writer.producer.fail["commit_transaction"] = ConnectionError("broker gone")  # type: ignore[attr-defined]
    with pytest.raises(DualWriteInDoubtError):
        writer.run(place(2))
    assert world.rows() == [1, 2]
    with pytest.raises(DualWriteInDoubtError):
        writer.run(place(1))
    assert writer.recover().action == "committed"
    writer.run(place(1))
    writer.close()
    world.assert_agree()
    assert world.rows() == [1, 2, 3]


class CommitFails(sqlite3.Connection):
    """A connection whose commit raises, after committing (``lost_ack``) or without."""

    lost_ack = False
    armed = False

    def commit(self) -> None:
        if type(self).armed:
            type(self).armed = False
            if type(self).lost_ack:
                super().commit()
            raise sqlite3.OperationalError("disk I/O error")
        super().commit()


@pytest.mark.parametrize("lost_ack", [False, True])
def test_a_failed_database_commit_is_settled_by_reading_the_state_back(
    world: World, lost_ack: bool
) -> None:
    CommitFails.lost_ack, CommitFails.armed = lost_ack, False

    def connect() -> sqlite3.Connection:
        return sqlite3.connect(world.db_path, timeout=0.2, factory=CommitFails)

    fired: list[str] = []

    def arm(step: str) -> None:
        if step == "before_db_commit" and not fired:
            fired.append(step)
            CommitFails.armed = True

    with world.writer(on_step=arm, db_connect=connect, paramstyle="qmark") as writer:
        generation = writer.generation
        if lost_ack:
            assert writer.run(place(2)) == [1, 2]  # it did commit: not an error
        else:
            with pytest.raises(sqlite3.OperationalError):
                writer.run(place(2))
        assert writer.generation == (generation or 0) + 1  # re-claimed on a new connection
        writer.run(place(1))
    world.assert_agree()
    assert world.rows() == ([1, 2, 3] if lost_ack else [1])


# ---------------------------------------------------------------------- fencing


def test_a_recovered_instance_fences_the_old_one_in_the_database(world: World) -> None:
    old = world.writer()
    old.recover()
    old.run(place(1))
    new = world.writer()
    new.recover()
    with pytest.raises(DualWriteFencedError):
        old.run(place(1))  # the stale-state clear already finds another generation
    old._stale_state = None  # even without that clear, the unit's row lock is fenced
    with pytest.raises(DualWriteFencedError):
        old.run(place(1))
    new.run(place(1))
    old.close()
    new.close()
    world.assert_agree()
    assert world.rows() == [1, 2]


def test_a_takeover_between_the_database_commit_and_the_log_commit_commits_the_unit(
    world: World,
) -> None:
    # The old instance stalls after its database commit; a new instance recovers, finds the
    # stored state matching the open transaction and commits it; the old one is fenced.
    taken_over: list[DualWriter] = []

    def take_over(step: str) -> None:
        if step == "after_db_commit" and not taken_over:
            taken_over.append(world.writer())
            assert taken_over[0].recover().action == "committed"

    old = world.writer(on_step=take_over)
    old.recover()
    with pytest.raises(DualWriteInDoubtError) as raised:
        old.run(place(2))
    assert isinstance(raised.value.__cause__, ProducerFencedError)
    old.close()
    taken_over[0].run(place(1))
    taken_over[0].close()
    world.assert_agree()
    assert world.rows() == [1, 2, 3]


# ---------------------------------------------------------------------- configuration


def test_paramstyles_render_slots_and_escape_percent() -> None:
    template = "SELECT a FROM t WHERE b = {} AND c LIKE '5%' AND d = {}"
    assert ParamStyle("qmark").render(template, (1, 2)) == (
        "SELECT a FROM t WHERE b = ? AND c LIKE '5%' AND d = ?",
        (1, 2),
    )
    assert (
        ParamStyle("numeric")
        .render(template, (1, 2))[0]
        .endswith("b = :1 AND c LIKE '5%' AND d = :2")
    )
    assert ParamStyle("named").render(template, (1, 2))[1] == {"p0": 1, "p1": 2}
    assert ParamStyle("format").render(template, (1, 2)) == (
        "SELECT a FROM t WHERE b = %s AND c LIKE '5%%' AND d = %s",
        (1, 2),
    )
    assert ParamStyle("pyformat").render(template, (1, 2)) == (
        "SELECT a FROM t WHERE b = %(p0)s AND c LIKE '5%%' AND d = %(p1)s",
        {"p0": 1, "p1": 2},
    )
    with pytest.raises(ValueError, match="2 slots for 1"):
        ParamStyle("qmark").render(template, (1,))
    with pytest.raises(ValueError):
        ParamStyle("dollar")


def test_paramstyle_comes_from_the_driver_module() -> None:
    conn = sqlite3.connect(":memory:")
    assert paramstyle_of(conn) == "qmark"
    conn.close()
    with pytest.raises(ValueError, match="paramstyle"):
        paramstyle_of(object())


def test_configuration_is_checked(world: World, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="identifier"):
        world.writer(state_table="state; DROP TABLE orders")
    with pytest.raises(ValueError, match=r"transactional\.id"):
        DualWriter({"transactional.id": "other"}, world.connect, TXN_ID)
    autocommit = world.writer(
        db_connect=lambda: sqlite3.connect(world.db_path, isolation_level=None)
    )
    with pytest.raises(ValueError, match="autocommit"):
        autocommit.recover()
