"""One unit of work of the dual-write recipe, as the caller's code sees it.

``DualWriteUnit`` is what ``DualWriter.run``'s work function (or ``with
writer.transaction()``) receives: SQL through the unit's cursor and records through the
unit's producer, counted so that a unit that sent none commits the database alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from oncelog.client.delivery import DeliveryFuture
from oncelog.client.dualwrite.ports import TransactionalProducer
from oncelog.client.dualwrite.sql import ParamStyle


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
    ) -> DeliveryFuture:
        """Send a record in this unit's log transaction."""
        future = self._producer.send(topic, value, key, partition, headers, timestamp)
        self.sent += 1
        return future
