"""The synchronous producer's hand-off of records to its event loop, without a broker:
records that keep coming in while a round is appended do not keep the loop from the
sender (which would hold every batch back until the caller paused)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from oncelog.client import Producer
from oncelog.client.aio.client import TopicInfo
from oncelog.client.delivery import RecordFuture
from oncelog.errors import ErrorCode


def test_the_loop_runs_other_work_between_rounds_of_appends() -> None:
    producer = Producer({"bootstrap.servers": "127.0.0.1:1", "linger.ms": 0})
    core = producer._core
    info = TopicInfo("t", ErrorCode.none, {0: 1})
    core.client.cached_topic_info = lambda topic: info  # type: ignore[method-assign]

    async def no_sender() -> None:
        pass

    core.start = no_sender  # type: ignore[method-assign]
    events: list[str] = []
    append = core.append

    def appending(*args: Any, **kwargs: Any) -> None:
        value = args[3]
        events.append(value.decode())
        if value == b"a0":
            # As if the caller sent more while this round is appended, with some other
            # work (the sender, a response) due on the loop meanwhile.
            asyncio.get_running_loop().call_soon(events.append, "other work")
            for i in range(3):
                args_b = ("t", f"b{i}".encode(), None, None, None, 1, None)
                producer._queue.append((args_b, RecordFuture(producer._cond, 1)))
        append(*args, **kwargs)

    core.append = appending  # type: ignore[method-assign]
    hold = threading.Event()
    producer._loop.call_soon(hold.wait)  # the three sends make one round
    try:
        futures = [producer.send("t", f"a{i}".encode()) for i in range(3)]
        hold.set()
        producer._loop.run(producer._settled())
        assert events == ["a0", "a1", "a2", "other work", "b0", "b1", "b2"]
        assert all(f._result is not None for f in futures)  # bound to their batch
    finally:
        producer._loop.stop()
