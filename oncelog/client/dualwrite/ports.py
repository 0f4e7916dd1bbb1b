"""What the dual-write recipe talks to, and the steps it reports.

The parts of a DB-API 2.0 cursor and connection and of a transactional producer that the
recipe uses (as Protocols, so tests can pass fakes), the default producer factory, and the
names of the points in a unit where ``on_step`` is called. No behaviour lives here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal, Protocol

from oncelog.client.delivery import DeliveryFuture
from oncelog.client.types import PreparedTxnState

# Points in a unit where ``on_step`` is called (crash tests kill the process there).
STEPS = ("after_prepare", "before_db_commit", "after_db_commit", "after_log_commit")
Step = Literal["after_prepare", "before_db_commit", "after_db_commit", "after_log_commit"]


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
    ) -> DeliveryFuture: ...

    def prepare_transaction(self, timeout: float | None = None) -> PreparedTxnState: ...

    def complete_transaction(
        self, state: PreparedTxnState | str, timeout: float | None = None
    ) -> None: ...

    def commit_transaction(self, timeout: float | None = None) -> None: ...

    def abort_transaction(self, timeout: float | None = None) -> None: ...

    def close(self, timeout: float | None = None) -> None: ...


ProducerFactory = Callable[[dict[str, Any]], TransactionalProducer]


def default_producer_factory(config: dict[str, Any]) -> TransactionalProducer:
    from oncelog.client import Producer

    return Producer(config)
