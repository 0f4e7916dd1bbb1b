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

Modules, by role: ``writer`` (the ``DualWriter`` facade: the unit's sequence, recovery,
failures), ``unit`` (what the work function gets), ``sql`` (paramstyles and the state
table), ``recovery`` (identity decisions, no I/O), ``ports`` (the DB-API and producer
protocols, the steps), ``errors``.
"""

from oncelog.client.dualwrite.errors import (
    DualWriteError,
    DualWriteFencedError,
    DualWriteInDoubtError,
)
from oncelog.client.dualwrite.ports import (
    STEPS,
    DBConnection,
    DBCursor,
    ProducerFactory,
    TransactionalProducer,
)
from oncelog.client.dualwrite.recovery import Recovery
from oncelog.client.dualwrite.sql import ParamStyle, paramstyle_of
from oncelog.client.dualwrite.unit import DualWriteUnit
from oncelog.client.dualwrite.writer import DualWriter

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
    "ProducerFactory",
    "Recovery",
    "TransactionalProducer",
    "paramstyle_of",
]
