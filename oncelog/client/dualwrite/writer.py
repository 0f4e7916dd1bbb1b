"""Dual writes to a SQL database and the log that agree after any crash (KIP-939's recipe).

A ``DualWriter`` owns one transactional producer (two-phase commit on) and one DB-API 2.0
connection. Each unit of work writes rows to the database and records to the log; either
both become visible or neither does, whatever process dies when::

    with DualWriter({"bootstrap.servers": "localhost:9092"},
                    lambda: sqlite3.connect("shop.db"), "orders-writer") as writer:
        def place(unit: DualWriteUnit) -> None:
            unit.execute("INSERT INTO orders (id, total) VALUES ({}, {})", (7, 1250))
            unit.send("order-events", b'{"id": 7}', key=b"7")
        writer.run(place)

``{}`` in ``unit.execute`` is a parameter slot, written in the driver's paramstyle (found on
the driver module, e.g. ``sqlite3.paramstyle`` "qmark", psycopg's "pyformat"; or pass
``paramstyle=``). ``unit.cursor`` is there for anything else; records go through
``unit.send`` only (a unit that sent none commits the database alone).

One unit (``run`` or ``with writer.transaction() as unit``), in this order:

1. open the database transaction by locking this transactional id's row in the state table
   (``UPDATE ... WHERE generation = <ours>``; no row -> another instance took over: fenced);
2. ``begin_transaction`` on the log; the work writes rows and sends records;
3. ``prepare_transaction`` -> ``PreparedTxnState`` (every record acknowledged, transaction
   held open; a 2PC transaction never times out);
4. store ``str(state)`` in the state row, in the same database transaction as the rows;
5. commit the database — this is the decision;
6. ``commit_transaction`` on the log.

``recover()`` (also run by ``__enter__``) reads the stored state and settles whatever a
previous process left in doubt: ``init_transactions(keep_prepared_txn=True)`` then
``complete_transaction(stored)`` — the broker's ongoing transaction commits when it is the one
the database recorded (the process died between 5 and 6), and aborts otherwise (it died
before 5, so the database rolled its rows back). With nothing stored it is a plain
``init_transactions()``, which aborts any open transaction.

Guarantee: with every process of a transactional id going through this class, after
``recover()`` returns the database and the log agree on every unit: its rows are committed
exactly when its records are, each unit once. Limits, said plainly:

- It holds for the rows written through the unit's connection and the records sent in the
  unit; reads inside the unit are as isolated as the database makes them (sqlite3 before
  Python 3.12 opens the transaction lazily, but step 1 is a write, so the unit's reads are
  inside it).
- Until ``recover()`` runs, a unit whose process died after step 5 has its rows visible in
  the database but its records invisible to read_committed consumers (and the transaction
  holds back the partitions' LSO). Run ``recover()`` promptly; an operator's
  ``force-terminate`` of such a transaction aborts it and breaks the agreement.
- A transaction's identity is its (producer id, epoch). This client keeps one epoch for all
  transactions of a session (EndTxn below v5, no KIP-890 epoch bump), so a stored state would
  also match the *next* transaction. After a unit's log commit the stored state is therefore
  cleared (one more small database commit, done when the next unit starts) whenever the
  producer would reuse that identity.
- Fencing: ``recover()`` bumps ``generation`` in the state row (the database side) and the
  producer epoch (the log side). A zombie instance can then neither commit rows (its row
  lock finds another generation) nor end its log transaction (fenced epoch).
- The database must be able to commit atomically (no autocommit connection); the state
  table is created if missing with portable SQL (``CREATE TABLE IF NOT EXISTS``).
- A ``DualWriter`` is not thread-safe: one unit at a time.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import re
import sqlite3
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from typing import Any, Literal, Protocol, TypeVar

from oncelog.client.types import PreparedTxnState, RecordMetadata

__all__ = [
    "STEPS",
    "DBConnection",
    "DBCursor",
    "DualWriteError",
    "DualWriteFencedError",
    "DualWriteInDoubtError",
    "DualWriteUnit",
    "DualWriter",
    "ParamStyle",
    "Recovery",
    "TransactionalProducer",
    "paramstyle_of",
]

logger = logging.getLogger(__name__)

T = TypeVar("T")

# Points in a unit where ``on_step`` is called (crash tests kill the process there).
STEPS = ("after_prepare", "before_db_commit", "after_db_commit", "after_log_commit")
Step = Literal["after_prepare", "before_db_commit", "after_db_commit", "after_log_commit"]

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")


# ---------------------------------------------------------------------- what we talk to


class DBCursor(Protocol):
    """The part of a DB-API 2.0 cursor this module uses."""

    def execute(self, operation: Any, parameters: Any = ..., /) -> Any: ...

    def fetchone(self) -> Any: ...

    @property
    def rowcount(self) -> int: ...

    def close(self) -> Any: ...


class DBConnection(Protocol):
    """The part of a DB-API 2.0 connection this module uses."""

    def cursor(self) -> Any: ...

    def commit(self) -> Any: ...

    def rollback(self) -> Any: ...

    def close(self) -> Any: ...


class TransactionalProducer(Protocol):
    """What the recipe needs from a producer (``oncelog.client.Producer`` has it)."""

    @property
    def producer_id(self) -> int: ...

    @property
    def producer_epoch(self) -> int: ...

    @property
    def prepared_state(self) -> PreparedTxnState | None: ...

    def init_transactions(
        self, keep_prepared_txn: bool = False, timeout: float | None = None
    ) -> None: ...

    def begin_transaction(self) -> None: ...

    def send(
        self,
        topic: str,
        value: bytes | str | None = None,
        key: bytes | str | None = None,
        partition: int | None = None,
        headers: Any = None,
        timestamp: int | None = None,
    ) -> Future[RecordMetadata]: ...

    def prepare_transaction(self, timeout: float | None = None) -> PreparedTxnState: ...

    def complete_transaction(
        self, state: PreparedTxnState | str, timeout: float | None = None
    ) -> None: ...

    def commit_transaction(self, timeout: float | None = None) -> None: ...

    def abort_transaction(self, timeout: float | None = None) -> None: ...

    def close(self, timeout: float | None = None) -> None: ...


ProducerFactory = Callable[[dict[str, Any]], TransactionalProducer]


def _default_producer_factory(config: dict[str, Any]) -> TransactionalProducer:
    from oncelog.client import Producer

    return Producer(config)


# ---------------------------------------------------------------------- errors


class DualWriteError(Exception):
    """Base of this module's own errors."""


class DualWriteFencedError(DualWriteError):
    """Another instance recovered the same transactional id: this writer must stop."""


class DualWriteInDoubtError(DualWriteError):
    """The outcome of a unit is decided but not yet carried out on the log (or could not be
    read back from the database). Nothing is lost: ``recover()`` settles it."""


# ---------------------------------------------------------------------- SQL parameters


_PARAMSTYLES = ("qmark", "numeric", "named", "format", "pyformat")


def paramstyle_of(connection: object) -> str:
    """The DB-API ``paramstyle`` of the driver module that made ``connection``."""
    module_name = type(connection).__module__
    while module_name:
        module = sys.modules.get(module_name)
        style = getattr(module, "paramstyle", None)
        if isinstance(style, str):
            return style
        module_name = module_name.rpartition(".")[0]
    raise ValueError(
        f"cannot find the paramstyle of {type(connection).__qualname__} "
        f"(module {type(connection).__module__!r}); pass paramstyle="
    )


@dataclasses.dataclass(frozen=True, slots=True)
class ParamStyle:
    """Renders ``{}`` slots in a SQL template into one DB-API paramstyle."""

    name: str

    def __post_init__(self) -> None:
        if self.name not in _PARAMSTYLES:
            raise ValueError(f"unknown DB-API paramstyle {self.name!r}")

    def render(
        self, template: str, args: Sequence[Any] = ()
    ) -> tuple[str, Sequence[Any] | Mapping[str, Any]]:
        """``(sql, parameters)`` for ``cursor.execute``. The template's literal ``%`` are
        escaped for the format styles; ``{}`` is the only slot syntax."""
        pieces = template.split("{}")
        if len(pieces) - 1 != len(args):
            raise ValueError(f"{len(pieces) - 1} slots for {len(args)} arguments: {template!r}")
        if self.name in ("format", "pyformat"):
            pieces = [piece.replace("%", "%%") for piece in pieces]
        slots = [self._slot(i) for i in range(len(args))]
        sql = pieces[0] + "".join(
            slot + piece for slot, piece in zip(slots, pieces[1:], strict=True)
        )
        if self.name in ("named", "pyformat"):
            return sql, {f"p{i}": arg for i, arg in enumerate(args)}
        return sql, tuple(args)

    def _slot(self, index: int) -> str:
        return {
            "qmark": "?",
            "numeric": f":{index + 1}",
            "named": f":p{index}",
            "format": "%s",
            "pyformat": f"%(p{index})s",
        }[self.name]


# ---------------------------------------------------------------------- results


@dataclasses.dataclass(frozen=True, slots=True)
class Recovery:
    """What ``recover()`` found and did.

    ``stored``: the state the database held (empty: none). ``ongoing``: the transaction the
    broker still had open for this transactional id (None: none, or not asked because
    nothing was stored). ``action``: "committed" (ongoing == stored), "aborted" (an ongoing
    transaction the database did not record) or "none"."""

    stored: PreparedTxnState
    ongoing: PreparedTxnState | None
    action: Literal["committed", "aborted", "none"]
    generation: int


class DualWriteUnit:
    """One unit of work: a database transaction and a log transaction that commit together.

    Write rows through ``execute`` (or ``cursor``) and send records through ``send`` — only
    through ``send``: the unit counts the records, and a unit that sent none commits the
    database alone (there is nothing on the log to prepare)."""

    __slots__ = ("_producer", "cursor", "paramstyle", "sent")

    def __init__(self, producer: TransactionalProducer, cursor: Any, paramstyle: ParamStyle):
        self._producer = producer
        self.cursor = cursor
        self.paramstyle = paramstyle
        self.sent = 0

    def execute(self, template: str, args: Sequence[Any] = ()) -> Any:
        """``cursor.execute`` with ``{}`` slots rendered in the driver's paramstyle."""
        sql, params = self.paramstyle.render(template, args)
        return self.cursor.execute(sql, params)

    def send(
        self,
        topic: str,
        value: bytes | str | None = None,
        key: bytes | str | None = None,
        partition: int | None = None,
        headers: Any = None,
        timestamp: int | None = None,
    ) -> Future[RecordMetadata]:
        """Send a record in this unit's log transaction."""
        future = self._producer.send(topic, value, key, partition, headers, timestamp)
        self.sent += 1
        return future


# ---------------------------------------------------------------------- the writer


class DualWriter:
    """KIP-939's dual-write recipe over one producer and one DB-API connection.

    ``producer_config``: Kafka config names (``bootstrap.servers``, ...);
    ``transactional.id`` and ``transaction.two.phase.commit.enable`` are set here.
    ``db_connect``: returns a new DB-API connection with autocommit off.
    ``on_step(step)``: called at each of ``STEPS`` (for tests and crash drills).
    ``producer_factory``: makes the producer from the config (default ``Producer``).
    """

    def __init__(
        self,
        producer_config: Mapping[str, Any],
        db_connect: Callable[[], Any],
        transactional_id: str,
        state_table: str = "oncelog_txn_state",
        *,
        paramstyle: str | None = None,
        on_step: Callable[[str], None] | None = None,
        producer_factory: ProducerFactory | None = None,
    ) -> None:
        if not transactional_id:
            raise ValueError("transactional_id must not be empty")
        if not _IDENTIFIER.fullmatch(state_table):
            raise ValueError(f"state_table must be a plain SQL identifier, not {state_table!r}")
        configured = producer_config.get("transactional.id")
        if configured is not None and configured != transactional_id:
            raise ValueError(
                f"producer_config has transactional.id {configured!r}, "
                f"the writer {transactional_id!r}"
            )
        self._config = {
            **producer_config,
            "transactional.id": transactional_id,
            "transaction.two.phase.commit.enable": True,
        }
        self._db_connect = db_connect
        self.transactional_id = transactional_id
        self.state_table = state_table
        self._paramstyle_name = paramstyle
        self._style: ParamStyle | None = ParamStyle(paramstyle) if paramstyle else None
        self._on_step = on_step
        self._producer_factory = producer_factory or _default_producer_factory
        self._producer: TransactionalProducer | None = None
        self._conn: Any = None
        self._generation: int | None = None
        # The identity whose stored state must be cleared before the next unit may begin.
        self._stale_state: PreparedTxnState | None = None
        self._in_doubt: BaseException | None = None
        self._in_unit = False

    # ------------------------------------------------------------------ properties

    @property
    def producer(self) -> TransactionalProducer:
        if self._producer is None:
            raise DualWriteError("call recover() first")
        return self._producer

    @property
    def connection(self) -> Any:
        if self._conn is None:
            raise DualWriteError("call recover() first")
        return self._conn

    @property
    def generation(self) -> int | None:
        """This writer's claim on the transactional id in the state table."""
        return self._generation

    @property
    def paramstyle(self) -> ParamStyle:
        if self._style is None:
            self._style = ParamStyle(paramstyle_of(self.connection))
        return self._style

    # ------------------------------------------------------------------ SQL

    def _exec(self, cursor: Any, template: str, args: Sequence[Any] = ()) -> Any:
        sql, params = self.paramstyle.render(template.replace("<table>", self.state_table), args)
        return cursor.execute(sql, params)

    def _connect(self) -> Any:
        conn = self._db_connect()
        if getattr(conn, "autocommit", False) is True or (
            isinstance(conn, sqlite3.Connection) and conn.isolation_level is None
        ):
            conn.close()
            raise ValueError("the database connection must not be in autocommit mode")
        return conn

    def _ensure_table(self) -> None:
        cursor = self.connection.cursor()
        try:
            self._exec(
                cursor,
                "CREATE TABLE IF NOT EXISTS <table> ("
                " transactional_id VARCHAR(255) NOT NULL PRIMARY KEY,"
                " prepared_state VARCHAR(64) NOT NULL,"
                " generation BIGINT NOT NULL)",
            )
            self.connection.commit()
        finally:
            cursor.close()

    def _claim(self) -> tuple[int, PreparedTxnState]:
        """In one database transaction: take the next generation of the state row (creating
        it) and read the stored state. The UPDATE comes first, so it waits for any unit still
        holding the row and fences every later one."""
        conn = self.connection
        cursor = conn.cursor()
        try:
            self._exec(
                cursor,
                "UPDATE <table> SET generation = generation + 1 WHERE transactional_id = {}",
                (self.transactional_id,),
            )
            if cursor.rowcount == 0:
                self._exec(
                    cursor,
                    "INSERT INTO <table> (transactional_id, prepared_state, generation)"
                    " VALUES ({}, {}, {})",
                    (self.transactional_id, "", 1),
                )
            self._exec(
                cursor,
                "SELECT prepared_state, generation FROM <table> WHERE transactional_id = {}",
                (self.transactional_id,),
            )
            row = cursor.fetchone()
            conn.commit()
        except BaseException:
            _quietly(conn.rollback, "rollback after a failed claim")
            raise
        finally:
            cursor.close()
        if row is None:
            raise DualWriteError(f"state row for {self.transactional_id!r} vanished")
        return int(row[1]), PreparedTxnState(str(row[0] or ""))

    def _set_state(self, cursor: Any, state: PreparedTxnState) -> None:
        """Write the state row, fenced by our generation (this also locks the row)."""
        self._exec(
            cursor,
            "UPDATE <table> SET prepared_state = {}"
            " WHERE transactional_id = {} AND generation = {}",
            (str(state), self.transactional_id, self._generation),
        )
        if cursor.rowcount != 1:
            raise DualWriteFencedError(
                f"{self.transactional_id!r}: generation {self._generation} no longer owns the "
                "state row; another instance recovered it"
            )

    def _clear_stale_state(self) -> None:
        stale = self._stale_state
        if stale is None:
            return
        conn = self.connection
        cursor = conn.cursor()
        try:
            self._set_state(cursor, PreparedTxnState())
            conn.commit()
        except BaseException:
            _quietly(conn.rollback, "rollback after a failed clear")
            raise
        finally:
            cursor.close()
        self._stale_state = None
        logger.debug("%r: cleared committed state %s", self.transactional_id, stale)

    # ------------------------------------------------------------------ recovery

    def recover(self) -> Recovery:
        """Start (or restart) the writer: connect, claim the transactional id, and settle a
        unit a previous process left in doubt. Safe to call again after any error."""
        self._shutdown()
        self._conn = self._connect()
        self._ensure_table()
        generation, stored = self._claim()
        self._generation = generation
        producer = self._producer_factory(dict(self._config))
        self._producer = producer
        ongoing: PreparedTxnState | None = None
        action: Literal["committed", "aborted", "none"] = "none"
        if stored.has_transaction:
            producer.init_transactions(keep_prepared_txn=True)
            ongoing = producer.prepared_state
            producer.complete_transaction(stored)
            if ongoing is not None:
                action = "committed" if ongoing == stored else "aborted"
            # The producer's new epoch makes the stored identity unmatchable from now on;
            # clearing it anyway keeps the table saying "nothing in doubt".
            self._stale_state = stored
            self._clear_stale_state()
        else:
            producer.init_transactions()
        self._in_doubt = None
        result = Recovery(stored, ongoing, action, generation)
        logger.info(
            "%r recovered: generation %d, stored %r, ongoing %r -> %s",
            self.transactional_id,
            generation,
            str(stored),
            ongoing and str(ongoing),
            action,
        )
        return result

    def _shutdown(self) -> None:
        producer, conn = self._producer, self._conn
        self._producer = self._conn = None
        self._generation = None
        self._stale_state = None
        if producer is not None:
            _quietly(producer.close, "closing the producer")
        if conn is not None:
            _quietly(conn.rollback, "rolling back on close")
            _quietly(conn.close, "closing the database connection")

    def close(self) -> None:
        """Clear the last unit's stored state (best effort: the next ``recover()`` copes
        either way), close the producer and the connection. No unit can be open here (units
        are synchronous), so nothing is left in doubt unless an error said so."""
        if self._conn is not None and self._in_doubt is None and not self._in_unit:
            _quietly(self._clear_stale_state, "clearing the stored state on close")
        self._shutdown()

    def __enter__(self) -> DualWriter:
        self.recover()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ units

    def run(self, work: Callable[[DualWriteUnit], T]) -> T:
        """Run ``work`` as one unit; both sides commit, or neither (the error is raised)."""
        with self.transaction() as unit:
            result = work(unit)
        return result

    @contextlib.contextmanager
    def transaction(self) -> Iterator[DualWriteUnit]:
        """One unit as a context manager: commits both sides when the block ends normally,
        rolls back and aborts when it raises."""
        if self._in_doubt is not None:
            raise DualWriteInDoubtError(
                "an earlier unit is in doubt; call recover()"
            ) from self._in_doubt
        if self._in_unit:
            raise DualWriteError("units do not nest")
        producer, conn = self.producer, self.connection
        self._in_unit = True
        try:
            self._clear_stale_state()
            cursor = conn.cursor()
            try:
                yield from self._unit(producer, conn, cursor)
            finally:
                _quietly(cursor.close, "closing the cursor")
        finally:
            self._in_unit = False

    def _unit(
        self, producer: TransactionalProducer, conn: Any, cursor: Any
    ) -> Iterator[DualWriteUnit]:
        # Step 1: lock our state row (opens the database transaction, checks the fence).
        try:
            self._exec(
                cursor,
                "UPDATE <table> SET prepared_state = prepared_state"
                " WHERE transactional_id = {} AND generation = {}",
                (self.transactional_id, self._generation),
            )
            if cursor.rowcount != 1:
                raise DualWriteFencedError(
                    f"{self.transactional_id!r}: generation {self._generation} no longer owns "
                    "the state row; another instance recovered it"
                )
            producer.begin_transaction()
        except BaseException:
            _quietly(conn.rollback, "rollback of a unit that did not start")
            raise
        # Steps 2-4: the work, prepare, the state row.
        try:
            unit = DualWriteUnit(producer, cursor, self.paramstyle)
            yield unit
            state: PreparedTxnState | None = None  # nothing sent: the log side ends locally
            if unit.sent:
                state = prepared = producer.prepare_transaction()
                self._step("after_prepare")
                self._set_state(cursor, prepared)
            self._step("before_db_commit")
        except BaseException as exc:
            self._abandon(producer, conn, exc)
            raise
        # Step 5: the decision.
        try:
            conn.commit()
        except BaseException as exc:
            if state is None:
                _quietly(producer.abort_transaction, "ending an empty log transaction")
                raise
            self._after_failed_db_commit(producer, state, exc)
            return
        self._step("after_db_commit")
        # Step 6.
        try:
            producer.commit_transaction()
        except BaseException as exc:
            self._in_doubt = exc
            raise DualWriteInDoubtError(
                f"{self.transactional_id!r}: the database committed {state} but the log commit "
                "failed; recover() will commit it"
            ) from exc
        self._step("after_log_commit")
        if state is not None and (producer.producer_id, producer.producer_epoch) == (
            state.producer_id,
            state.epoch,
        ):
            self._stale_state = state
        logger.debug("%r: unit %s committed on both sides", self.transactional_id, state)

    def _abandon(self, producer: TransactionalProducer, conn: Any, cause: BaseException) -> None:
        """The unit failed before the decision: roll back the database, abort the log."""
        _quietly(conn.rollback, "rollback of a failed unit")
        try:
            producer.abort_transaction()
        except Exception as exc:
            # Fenced or unreachable: the transaction stays open until recover() (here or in
            # the instance that fenced us) aborts it, since the database did not record it.
            self._in_doubt = exc
            logger.warning(
                "%r: abort after %r failed: %r; recover() will abort it",
                self.transactional_id,
                cause,
                exc,
            )
        else:
            logger.info("%r: unit aborted after %r", self.transactional_id, cause)

    def _after_failed_db_commit(
        self, producer: TransactionalProducer, state: PreparedTxnState, cause: BaseException
    ) -> None:
        """The commit raised: it may or may not have happened. Ask the database (on a new
        connection, claiming a new generation, which waits for the row lock), then complete
        the log transaction with what it says. Returns when the unit committed; raises
        ``cause`` when it did not; raises DualWriteInDoubtError when it cannot tell."""
        logger.warning("%r: database commit of %s failed: %r", self.transactional_id, state, cause)
        old = self._conn
        self._conn = None
        if old is not None:
            _quietly(old.rollback, "rollback after a failed commit")
            _quietly(old.close, "closing the connection after a failed commit")
        try:
            self._conn = self._connect()
            generation, stored = self._claim()
            self._generation = generation
            producer.complete_transaction(stored)
        except BaseException as exc:
            self._in_doubt = exc
            raise DualWriteInDoubtError(
                f"{self.transactional_id!r}: database commit of {state} failed and its outcome "
                "could not be settled; recover() will"
            ) from exc
        if stored != state:
            logger.info("%r: unit %s did not commit; log aborted", self.transactional_id, state)
            raise cause
        self._stale_state = state
        logger.info("%r: unit %s committed despite the error", self.transactional_id, state)

    def _step(self, step: Step) -> None:
        if self._on_step is not None:
            self._on_step(step)


def _quietly(action: Callable[[], object], what: str) -> None:
    try:
        action()
    except Exception as exc:
        logger.debug("%s failed: %r", what, exc)
