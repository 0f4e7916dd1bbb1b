"""The database side of the dual-write recipe: paramstyle-aware SQL and the state table.

``ParamStyle`` renders ``{}`` slots into the driver's DB-API paramstyle (``paramstyle_of``
finds it on the driver module). ``StateTable`` owns the one row per transactional id that
holds the stored ``PreparedTxnState`` and the ``generation`` that fences zombie instances:
creating the table, claiming the next generation, locking the row for a unit, and writing the
state under our generation. ``open_connection`` refuses autocommit connections. The caller
owns the connection and decides when to commit.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
import sqlite3
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from oncelog.client.dualwrite.errors import DualWriteError, fenced, quietly
from oncelog.client.types import PreparedTxnState

IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")

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


def open_connection(db_connect: Callable[[], Any]) -> Any:
    """A new connection from ``db_connect``; refused (and closed) in autocommit mode."""
    conn = db_connect()
    if getattr(conn, "autocommit", False) is True or (
        isinstance(conn, sqlite3.Connection) and conn.isolation_level is None
    ):
        conn.close()
        raise ValueError("the database connection must not be in autocommit mode")
    return conn


@contextlib.contextmanager
def committing(conn: Any, what: str) -> Iterator[Any]:
    """A cursor for one database transaction: committed when the block ends normally,
    rolled back (quietly) when it raises; the cursor is closed either way."""
    cursor = conn.cursor()
    try:
        yield cursor
        conn.commit()
    except BaseException:
        quietly(conn.rollback, f"rollback after a failed {what}")
        raise
    finally:
        cursor.close()


@dataclasses.dataclass(frozen=True, slots=True)
class StateTable:
    """The state row of one transactional id in table ``name``, in one paramstyle."""

    name: str
    transactional_id: str
    style: ParamStyle

    def exec(self, cursor: Any, template: str, args: Sequence[Any] = ()) -> Any:
        sql, params = self.style.render(template.replace("<table>", self.name), args)
        return cursor.execute(sql, params)

    def ensure(self, conn: Any) -> None:
        """Create the table if missing (portable SQL) and commit."""
        cursor = conn.cursor()
        try:
            self.exec(
                cursor,
                "CREATE TABLE IF NOT EXISTS <table> ("
                " transactional_id VARCHAR(255) NOT NULL PRIMARY KEY,"
                " prepared_state VARCHAR(64) NOT NULL,"
                " generation BIGINT NOT NULL)",
            )
            conn.commit()
        finally:
            cursor.close()

    def claim(self, conn: Any) -> tuple[int, PreparedTxnState]:
        """In one database transaction: take the next generation of the state row (creating
        it) and read the stored state. The UPDATE comes first, so it waits for any unit still
        holding the row and fences every later one."""
        with committing(conn, "claim") as cursor:
            self.exec(
                cursor,
                "UPDATE <table> SET generation = generation + 1 WHERE transactional_id = {}",
                (self.transactional_id,),
            )
            if cursor.rowcount == 0:
                self.exec(
                    cursor,
                    "INSERT INTO <table> (transactional_id, prepared_state, generation)"
                    " VALUES ({}, {}, {})",
                    (self.transactional_id, "", 1),
                )
            self.exec(
                cursor,
                "SELECT prepared_state, generation FROM <table> WHERE transactional_id = {}",
                (self.transactional_id,),
            )
            row = cursor.fetchone()
        if row is None:
            raise DualWriteError(f"state row for {self.transactional_id!r} vanished")
        return int(row[1]), PreparedTxnState(str(row[0] or ""))

    def lock(self, cursor: Any, generation: int | None) -> None:
        """Lock the state row under our generation (opens the unit's database transaction
        and checks the fence)."""
        self.exec(
            cursor,
            "UPDATE <table> SET prepared_state = prepared_state"
            " WHERE transactional_id = {} AND generation = {}",
            (self.transactional_id, generation),
        )
        if cursor.rowcount != 1:
            raise fenced(self.transactional_id, generation)

    def set_state(self, cursor: Any, state: PreparedTxnState, generation: int | None) -> None:
        """Write the state row, fenced by our generation (this also locks the row)."""
        self.exec(
            cursor,
            "UPDATE <table> SET prepared_state = {}"
            " WHERE transactional_id = {} AND generation = {}",
            (str(state), self.transactional_id, generation),
        )
        if cursor.rowcount != 1:
            raise fenced(self.transactional_id, generation)
