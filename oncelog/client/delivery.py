"""Delivery results: one per batch, shared by its records (Java's ProduceRequestResult and
FutureRecordMetadata).

A batch's ``ProduceResult`` is completed once, by the sender on the client's event loop
thread, with the batch's base offset (and LogAppendTime) or an error. ``send`` returns a
``RecordFuture`` per record: its batch's result and its index in the batch, so that neither
a future nor a callback has to be made per record, and ``RecordMetadata`` is built only when
asked for. A record future is bound to its batch when the record is appended; it may also
fail before that (the append itself failed).

Every result and future of one producer waits on that producer's one ``threading.Condition``
(notified when a batch completes and when appended records are bound), so any thread may
block in ``result()``; ``done()`` never blocks.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from collections.abc import Callable
from typing import Protocol

from oncelog.client.types import RecordMetadata, TopicPartition

logger = logging.getLogger(__name__)

__all__ = ["DeliveryFuture", "ProduceResult", "RecordFuture", "bound"]

DoneCallback = Callable[["RecordFuture"], object]


class DeliveryFuture(Protocol):
    """What callers read of a record's delivery: a ``RecordFuture`` or a
    ``concurrent.futures.Future[RecordMetadata]`` (for stand-ins in tests) will do."""

    def done(self) -> bool: ...

    def result(self, timeout: float | None = None) -> RecordMetadata: ...

    def exception(self, timeout: float | None = None) -> BaseException | None: ...


class ProduceResult:
    """The outcome of one batch: base offset and LogAppendTime (-1: CreateTime), or error."""

    __slots__ = ("_callbacks", "_waiter", "base_offset", "cond", "done", "error",
                 "log_append_time", "tp")  # fmt: skip

    def __init__(self, tp: TopicPartition, cond: threading.Condition) -> None:
        self.tp = tp
        self.cond = cond
        self.done = False
        self.base_offset = -1
        self.log_append_time = -1
        self.error: BaseException | None = None
        self._callbacks: list[Callable[[], object]] = []
        self._waiter: asyncio.Future[None] | None = None

    def complete(
        self, base_offset: int, log_append_time: int, error: BaseException | None
    ) -> None:
        """Settle the batch (once; later calls are ignored). Runs on the event loop thread."""
        with self.cond:
            if self.done:
                return
            self.base_offset = base_offset
            self.log_append_time = log_append_time
            self.error = error
            self.done = True
            callbacks, self._callbacks = self._callbacks, []
            self.cond.notify_all()
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)
        for callback in callbacks:
            _run(callback)

    def add_callback(self, callback: Callable[[], object]) -> None:
        """Call ``callback()`` once the batch is settled (at once if it is)."""
        with self.cond:
            if not self.done:
                self._callbacks.append(callback)
                return
        _run(callback)

    def waiter(self) -> asyncio.Future[None]:
        """A future of the running loop done when the batch is settled (for flush)."""
        if self._waiter is None:
            self._waiter = asyncio.get_running_loop().create_future()
            if self.done:
                self._waiter.set_result(None)
        return self._waiter


def _run(callback: Callable[[], object]) -> None:
    try:
        callback()
    except Exception:
        logger.exception("done callback of a record future raised")


class RecordFuture:
    """The delivery of one record: ``concurrent.futures.Future``'s reading side.

    ``result()`` is the record's ``RecordMetadata`` (or raises its error), ``exception()``
    the error or None; both wait up to ``timeout`` seconds (``TimeoutError`` after that).
    ``add_done_callback(fn)`` calls ``fn(future)`` once it is done. A sent record cannot be
    cancelled: ``cancel()`` returns False, as in Java.
    """

    __slots__ = ("_callbacks", "_cond", "_error", "_index", "_result", "timestamp")

    def __init__(self, cond: threading.Condition, timestamp: int = -1) -> None:
        self._cond = cond
        self.timestamp = timestamp
        self._result: ProduceResult | None = None
        self._index = 0
        self._error: BaseException | None = None
        self._callbacks: list[DoneCallback] | None = None

    # ------------------------------------------------------------------ producer side

    def bind(self, result: ProduceResult, index: int) -> None:
        """The record is number ``index`` of the batch of ``result``. Callers then call
        ``bound`` once for the futures they bound."""
        self._index = index
        self._result = result

    def fail(self, error: BaseException) -> None:
        """The record was never appended: ``error`` is its outcome."""
        with self._cond:
            self._error = error
            self._cond.notify_all()
        self.settle_callbacks()

    def settle_callbacks(self) -> None:
        """Hand callbacks added before ``bind`` or ``fail`` to the outcome."""
        with self._cond:
            callbacks, self._callbacks = self._callbacks, None
        for fn in callbacks or ():
            self._on_done(fn)

    # ------------------------------------------------------------------ Future API

    def done(self) -> bool:
        result = self._result
        return self._error is not None or (result is not None and result.done)

    def cancelled(self) -> bool:
        return False

    def running(self) -> bool:
        return not self.done()

    def cancel(self) -> bool:
        return False

    def _wait(self, timeout: float | None) -> None:
        if self.done():
            return
        with self._cond:
            if not self._cond.wait_for(self.done, timeout):
                raise concurrent.futures.TimeoutError()

    def exception(self, timeout: float | None = None) -> BaseException | None:
        self._wait(timeout)
        if self._error is not None:
            return self._error
        assert self._result is not None
        return self._result.error

    def result(self, timeout: float | None = None) -> RecordMetadata:
        error = self.exception(timeout)
        if error is not None:
            raise error
        result = self._result
        assert result is not None
        offset = result.base_offset + self._index if result.base_offset >= 0 else -1
        ts = result.log_append_time if result.log_append_time >= 0 else self.timestamp
        return RecordMetadata(result.tp.topic, result.tp.partition, offset, ts)

    def add_done_callback(self, fn: DoneCallback) -> None:
        with self._cond:
            if self._result is None and self._error is None:
                if self._callbacks is None:
                    self._callbacks = []
                self._callbacks.append(fn)
                return
        self._on_done(fn)

    def _on_done(self, fn: DoneCallback) -> None:
        result = self._result
        if self._error is None and result is not None:
            result.add_callback(lambda: fn(self))
        else:
            _run(lambda: fn(self))

    def __repr__(self) -> str:
        state = "pending"
        if self.done():
            state = "failed" if self.exception() is not None else "done"
        return f"<RecordFuture {state}>"


def bound(futures: list[RecordFuture], cond: threading.Condition) -> None:
    """``futures`` were bound (or failed): wake their waiters and hand over the callbacks
    added meanwhile. A future's callbacks are checked under the condition after its
    ``bind``, and ``add_done_callback`` checks for the binding under it too, so none is
    lost between the two threads."""
    with cond:
        waiting = [f for f in futures if f._callbacks is not None]
        cond.notify_all()
    for future in waiting:
        future.settle_callbacks()
