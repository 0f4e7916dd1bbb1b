"""The dual-write facade: ``DualWriter`` runs units and ``recover()`` over one producer and
one DB-API connection, in the order KIP-939's recipe needs (see the package docstring).

It owns the sequence of a unit (lock the state row, begin, work, prepare, store the state,
commit the database — the decision — then commit the log), what happens when a step fails
(abandon before the decision; ask the database after a failed commit; in doubt after it),
and the session: connect, claim a generation, settle what a previous process left in doubt,
close. The SQL is in ``sql.py``, the identity decisions in ``recovery.py``.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

from oncelog.client.dualwrite.errors import DualWriteError, DualWriteInDoubtError, quietly
from oncelog.client.dualwrite.ports import (
    ProducerFactory,
    Step,
    TransactionalProducer,
    default_producer_factory,
)
from oncelog.client.dualwrite.recovery import (
    Recovery,
    identity_reused,
    recovery_action,
)
from oncelog.client.dualwrite.sql import (
    IDENTIFIER,
    ParamStyle,
    StateTable,
    committing,
    open_connection,
    paramstyle_of,
)
from oncelog.client.dualwrite.unit import DualWriteUnit
from oncelog.client.types import PreparedTxnState

logger = logging.getLogger(__name__)

T = TypeVar("T")


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
        if not IDENTIFIER.fullmatch(state_table):
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
        self._producer_factory = producer_factory or default_producer_factory
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

    @property
    def _table(self) -> StateTable:
        return StateTable(self.state_table, self.transactional_id, self.paramstyle)

    # ------------------------------------------------------------------ the state row

    def _clear_stale_state(self) -> None:
        stale = self._stale_state
        if stale is None:
            return
        with committing(self.connection, "clear") as cursor:
            self._table.set_state(cursor, PreparedTxnState(), self._generation)
        self._stale_state = None
        logger.debug("%r: cleared committed state %s", self.transactional_id, stale)

    # ------------------------------------------------------------------ recovery

    def recover(self) -> Recovery:
        """Start (or restart) the writer: connect, claim the transactional id, and settle a
        unit a previous process left in doubt. Safe to call again after any error."""
        self._shutdown()
        self._conn = open_connection(self._db_connect)
        self._table.ensure(self._conn)
        generation, stored = self._table.claim(self._conn)
        self._generation = generation
        producer = self._producer_factory(dict(self._config))
        self._producer = producer
        ongoing: PreparedTxnState | None = None
        if stored.has_transaction:
            producer.init_transactions(keep_prepared_txn=True)
            ongoing = producer.prepared_state
            producer.complete_transaction(stored)
            # The producer's new epoch makes the stored identity unmatchable from now on;
            # clearing it anyway keeps the table saying "nothing in doubt".
            self._stale_state = stored
            self._clear_stale_state()
        else:
            producer.init_transactions()
        self._in_doubt = None
        action = recovery_action(stored, ongoing)
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
            quietly(producer.close, "closing the producer")
        if conn is not None:
            quietly(conn.rollback, "rolling back on close")
            quietly(conn.close, "closing the database connection")

    def close(self) -> None:
        """Clear the last unit's stored state (best effort: the next ``recover()`` copes
        either way), close the producer and the connection. No unit can be open here (units
        are synchronous), so nothing is left in doubt unless an error said so."""
        if self._conn is not None and self._in_doubt is None and not self._in_unit:
            quietly(self._clear_stale_state, "clearing the stored state on close")
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
                quietly(cursor.close, "closing the cursor")
        finally:
            self._in_unit = False

    def _unit(
        self, producer: TransactionalProducer, conn: Any, cursor: Any
    ) -> Iterator[DualWriteUnit]:
        # Step 1: lock our state row (opens the database transaction, checks the fence).
        try:
            self._table.lock(cursor, self._generation)
            producer.begin_transaction()
        except BaseException:
            quietly(conn.rollback, "rollback of a unit that did not start")
            raise
        # Steps 2-4: the work, prepare, the state row.
        try:
            unit = DualWriteUnit(producer, cursor, self.paramstyle)
            yield unit
            state: PreparedTxnState | None = None  # nothing sent: the log side ends locally
            if unit.sent:
                state = prepared = producer.prepare_transaction()
                self._step("after_prepare")
                self._table.set_state(cursor, prepared, self._generation)
            self._step("before_db_commit")
        except BaseException as exc:
            self._abandon(producer, conn, exc)
            raise
        # Step 5: the decision.
        try:
            conn.commit()
        except BaseException as exc:
            if state is None:
                quietly(producer.abort_transaction, "ending an empty log transaction")
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
        if state is not None and identity_reused(
            producer.producer_id, producer.producer_epoch, state
        ):
            self._stale_state = state
        logger.debug("%r: unit %s committed on both sides", self.transactional_id, state)

    def _abandon(self, producer: TransactionalProducer, conn: Any, cause: BaseException) -> None:
        """The unit failed before the decision: roll back the database, abort the log."""
        quietly(conn.rollback, "rollback of a failed unit")
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
            quietly(old.rollback, "rollback after a failed commit")
            quietly(old.close, "closing the connection after a failed commit")
        try:
            self._conn = open_connection(self._db_connect)
            generation, stored = self._table.claim(self._conn)
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
