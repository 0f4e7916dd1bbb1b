"""oncelog.broker.server: ``queued.max.requests`` bounds the requests handled at once over
all connections (Kafka's request queue between network and handler threads)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest
from test_server_errors import CREATE, frame_of

from oncelog.broker.api import HANDLERS, RequestContext
from oncelog.broker.server import Server
from oncelog.config import BrokerConfig
from oncelog.protocol import versions


def test_queued_max_requests_bounds_requests_in_handlers(monkeypatch: pytest.MonkeyPatch) -> None:
    active: list[int] = [0, 0]  # now, most at once
    entered = asyncio.Event()
    release = asyncio.Event()

    async def slow(ctx: RequestContext, request: Any) -> Any:
        active[0] += 1
        active[1] = max(active)
        entered.set()
        try:
            await release.wait()
        finally:
            active[0] -= 1
        raise RuntimeError("answered with UNKNOWN_SERVER_ERROR")

    monkeypatch.setitem(HANDLERS, versions.CREATE_TOPICS, slow)

    async def body() -> None:
        config = BrokerConfig({"queued.max.requests": "1"})
        server = Server(config, "127.0.0.1", 0)
        await server.start(SimpleNamespace())  # type: ignore[arg-type]
        streams = [await asyncio.open_connection("127.0.0.1", server.port) for _ in range(2)]
        frame = frame_of(CREATE)
        try:
            reader, writer = streams[0]
            writer.write(len(frame).to_bytes(4, "big") + frame)
            await entered.wait()
            other_reader, other_writer = streams[1]
            other_writer.write(len(frame).to_bytes(4, "big") + frame)
            while len(server._busy) < 2:  # the second request is read and waiting
                await asyncio.sleep(0)
            assert active == [1, 1]
            release.set()
            for r in (reader, other_reader):
                size = int.from_bytes(await r.readexactly(4), "big")
                await r.readexactly(size)
            assert active == [0, 1]
        finally:
            for _, w in streams:
                w.close()
            await server.stop()

    asyncio.run(asyncio.wait_for(body(), timeout=10))
